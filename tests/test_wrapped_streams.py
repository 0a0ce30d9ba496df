"""Wrapped streams end to end through --oneshot: layered envelopes, the no-match warning, the line cap."""

from __future__ import annotations

import json
import re
import shlex
import subprocess
import sys
import threading
from pathlib import Path

import pytest

from tests.helpers import access_line, parse, total
from tests.test_engine import oneshot, oneshot_metrics
from tests.test_envelopes import wrap

HEALTH = 'INFO:     1.2.3.4:5 - "GET /health HTTP/1.1" 200 OK\n'
STATS_LINE = ("INFO 04-10 03:35:27 [loggers.py:80] Engine 000: Avg prompt throughput: 12.5 tokens/s, Avg generation "
              "throughput: 40.1 tokens/s, Running: 3 reqs, Waiting: 1 reqs, GPU KV cache usage: 4.2%, Prefix cache "
              "hit rate: 0.0%\n")
CAP = 64 * 1024


def test_compose_logs_with_timestamps_are_counted() -> None:
    """The issue's 'docker compose logs -t' line counts 1 request, as it does without the timestamp."""
    out = oneshot("-", "--parser", "vllm", stdin=f"vllm-1  | 2025-08-21T14:02:11.000000001Z {HEALTH}")
    got = parse(out.stdout)
    assert total(got, "http_requests_total", source="vllm-1", code="200") == 1
    assert total(got, "logmetrics_lines_unmatched_total", parser="vllm") == 0
    assert "WARNING" not in out.stderr


def test_kubectl_prefix_and_timestamps_are_counted(tmp_path: Path) -> None:
    """'kubectl logs --prefix --timestamps' output counts per pod/container."""
    log = tmp_path / "pods.txt"
    log.write_text("".join(f"[pod/vllm-{i % 2}/vllm] 2025-08-21T14:02:{i:02d}.123456789Z {access_line(i)}"
                           for i in range(6)))
    got = oneshot_metrics("--parser", "vllm", str(log))
    assert total(got, "http_requests_total", source="vllm-0/vllm") == 3
    assert total(got, "http_requests_total", source="vllm-1/vllm") == 3


def test_forced_layered_envelope_flag(tmp_path: Path) -> None:
    """--envelope accepts a layered kind and peels every layer."""
    log = tmp_path / "compose.txt"
    log.write_text(f"api | 2025-08-21T14:02:11Z {HEALTH}" * 2)
    got = oneshot_metrics("--parser", "vllm", "--envelope", "compose+docker-timestamps", str(log))
    assert total(got, "http_requests_total", source="api") == 2


def test_stream_matching_nothing_is_reported_once(tmp_path: Path) -> None:
    """A routed stream none of whose first 1,000 lines match gets exactly one warning with hints
    (vLLM stats lines in a wrapper no envelope knows: an access line would count behind it)."""
    wrapped = tmp_path / "wrapped log's.log"  # the command it suggests is one to paste into a shell
    wrapped.write_text("".join(f"<<{i}>> {STATS_LINE}" for i in range(2500)))
    fine = tmp_path / "fine.log"
    fine.write_text(access_line(1) + "".join(f"<<{i}>> noise\n" for i in range(1500)))
    out = oneshot("--parser", "vllm", str(wrapped), str(fine))
    assert out.returncode == 0, out.stderr
    warnings = [line for line in out.stderr.splitlines() if "did not match" in line]
    assert len(warnings) == 1, out.stderr
    seen = re.search(r"did not match any of its first (\d+) lines", warnings[0])
    assert str(wrapped) in warnings[0] and seen and int(seen[1]) >= 1000  # counted per batch
    assert "--envelope" in warnings[0] and "logmetrics check" in warnings[0]
    command = warnings[0].split("makes of them with: ", 1)[1]
    assert shlex.split(command) == ["logmetrics", "check", "--parser", "vllm", str(wrapped)]


def test_short_stream_matching_nothing_is_reported_at_its_end() -> None:
    """A short input of which nothing matched says so when it ends."""
    out = oneshot("-", "--parser", "vllm", stdin="hello\nworld\n")
    assert "stream stdin: parser vllm did not match any of its 2 lines (envelope: none)" in out.stderr


@pytest.mark.parametrize("kind", ["docker", "cri"])
def test_joined_line_is_cut_and_counted(tmp_path: Path, kind: str) -> None:
    """A 5 MB line split by the runtime is one line, cut at --max-line-bytes and counted once."""
    log = tmp_path / f"{kind}.log"
    log.write_bytes(wrap([HEALTH[:-1], "x" * 5_000_000, HEALTH[:-1]], kind))
    got = oneshot_metrics("--parser", "vllm", "--max-line-bytes", str(CAP), str(log))
    assert total(got, "logmetrics_lines_truncated_total", source=str(log)) == 1
    assert total(got, "logmetrics_lines_read_total", source=str(log)) == 3
    assert total(got, "http_requests_total", source=str(log)) == 2


def test_envelope_and_tailer_truncations_add_up(tmp_path: Path) -> None:
    """A raw line over the cap (cut by the tailer) and a joined one (cut by the envelope) count 2."""
    log = tmp_path / "docker.log"
    raw_too_long = json.dumps({"log": "y" * (CAP + 10) + "\n", "stream": "stdout"}).encode() + b"\n"
    log.write_bytes(wrap(["x" * 5_000_000], "docker") + raw_too_long + wrap([HEALTH[:-1]], "docker"))
    got = oneshot_metrics("--parser", "vllm", "--max-line-bytes", str(CAP), str(log))
    assert total(got, "logmetrics_lines_truncated_total", source=str(log)) == 2


#: Runs argv[2:] and writes its peak memory (ru_maxrss) to the file argv[1]. A child started by
#: vfork counts the peak of the process that started it (Linux keeps the larger of the two across
#: exec), so the measured process is started by this small one, not by the test's own process,
#: whose size depends on the tests that ran before.
MEASURE = ("import os, subprocess, sys\n"
           "p = subprocess.Popen(sys.argv[2:])\n"
           "_, status, usage = os.wait4(p.pid, 0)\n"
           "open(sys.argv[1], 'w').write(str(usage.ru_maxrss))\n"
           "sys.exit(os.waitstatus_to_exitcode(status))\n")


def test_50mb_line_on_stdin_is_cut_with_bounded_memory(tmp_path: Path) -> None:
    """A 50 MB line on stdin is cut at the cap and counted; the process stays far below the line's size."""
    peak = tmp_path / "maxrss"
    proc = subprocess.Popen([sys.executable, "-c", MEASURE, str(peak),
                             sys.executable, "-m", "logmetrics", "watch", "--oneshot", "--parser", "vllm",
                             "--max-line-bytes", str(CAP), "-"],
                            stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL)
    assert proc.stdin is not None and proc.stdout is not None
    block = b"z" * (1 << 20)

    def write() -> None:
        assert proc.stdin is not None
        proc.stdin.write(HEALTH.encode())
        for _ in range(50):
            proc.stdin.write(block)
        proc.stdin.write(b"\n" + HEALTH.encode())
        proc.stdin.close()

    writer = threading.Thread(target=write)
    writer.start()
    out = proc.stdout.read().decode()
    writer.join()
    assert proc.wait() == 0
    got = parse(out)
    assert total(got, "logmetrics_lines_truncated_total", source="stdin") == 1
    assert total(got, "logmetrics_lines_read_total", source="stdin") == 3
    assert total(got, "http_requests_total", source="stdin") == 2
    assert int(peak.read_text()) * 1024 < 100_000_000  # Linux gives KiB; the line alone would be 50 MB, held twice


def test_the_suggested_check_command_takes_a_name_that_starts_with_a_dash(tmp_path: Path) -> None:
    """A log named ``-x.log`` (read from its directory) is suggested as ``./-x.log``: a name that
    starts with a dash would be taken for an option."""
    (tmp_path / "-x.log").write_text("hello\nworld\n")
    out = subprocess.run([sys.executable, "-m", "logmetrics", "watch", "--oneshot", "--parser", "vllm", "--",
                          "-x.log"], capture_output=True, text=True, timeout=120, cwd=tmp_path)
    warning = next(line for line in out.stderr.splitlines() if "did not match" in line)
    assert shlex.split(warning.split("makes of them with: ", 1)[1])[-1] == "./-x.log"


@pytest.mark.parametrize("prefix", ["0|vllm  | ", "0|vllm  | 2026-12-05T07:00:00: ", "2026-12-05T07:00:00: "])
def test_a_vllm_log_through_pm2_counts_what_the_log_counts(tmp_path: Path, prefix: str) -> None:
    """A vLLM log behind ``pm2 logs``' prefix, with or without the time of ``pm2 --time`` (and that
    time alone, in pm2's own log file), gives the figures of the log itself: its stats, requests and
    errors too, not only its access lines."""
    sample = (Path(__file__).resolve().parent.parent / "samples" / "vllm" / "exact-tokens.log").read_text()
    (tmp_path / "plain.log").write_text(sample)
    (tmp_path / "pm2.log").write_text("".join(f"{prefix}{line}\n" for line in sample.splitlines()))
    figures = []
    for name in ("plain.log", "pm2.log"):
        out = subprocess.run([sys.executable, "-m", "logmetrics", "watch", "--oneshot", "--parser", "vllm",
                              str(tmp_path / name)], capture_output=True, text=True, timeout=120, check=True).stdout
        figures.append(sorted(line.split("source=")[0] + line.rsplit(" ", 1)[1] for line in out.splitlines()
                              if line.startswith(("llm_", "http_", "backend_"))))
    assert figures[0] and figures[0] == figures[1]


def test_pm2s_own_lines_are_no_apps_and_bring_no_warning(tmp_path: Path) -> None:
    """pm2's own ``PM2  | `` lines are the process manager's: counted unmatched, with no warning that
    asks for a parser (which, named, would be forced onto every stream), while the app's are read."""
    (tmp_path / "pm2.log").write_text(
        "PM2        | App [api:0] starting in -fork mode-\n"
        "PM2        | App [api:0] online\n"
        '0|api      | INFO:     10.0.0.5:51234 - "POST /openai/v1/chat/completions HTTP/1.1" 200 OK\n')
    out = subprocess.run([sys.executable, "-m", "logmetrics", "watch", "--oneshot", str(tmp_path / "pm2.log")],
                         capture_output=True, text=True, timeout=120, check=True)
    assert "WARNING" not in out.stderr, out.stderr
    assert 'logmetrics_lines_unmatched_total{parser="none"} 2.0' in out.stdout
    assert 'http_requests_total{backend="api",code="200",method="POST",route="/openai/v1/chat/completions",' \
           'source="api"} 1.0' in out.stdout, out.stdout


def test_journalctls_header_is_its_own_and_brings_no_warning(tmp_path: Path) -> None:
    """journalctl's header line before the first unit's is journalctl's own: no warning to name a
    parser for it, while the unit's lines are read."""
    (tmp_path / "journal.log").write_text(
        "-- Journal begins at Mon 2026-11-30 08:00:00 UTC, ends at Sat 2026-12-05 07:00:00 UTC. --\n"
        + "".join(f'Dec 05 07:00:0{i} gpu1 gateway[812]: INFO:     10.0.0.5:51234 - "POST /openai/v1/chat/completions '
                  f'HTTP/1.1" 200 OK\n' for i in range(4)))
    out = subprocess.run([sys.executable, "-m", "logmetrics", "watch", "--oneshot", str(tmp_path / "journal.log")],
                         capture_output=True, text=True, timeout=120, check=True)
    assert "WARNING" not in out.stderr, out.stderr
    assert 'logmetrics_lines_unmatched_total{parser="none"} 1.0' in out.stdout
    assert 'route="/openai/v1/chat/completions",source="gateway"} 4.0' in out.stdout, out.stdout
