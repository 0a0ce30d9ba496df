"""'logmetrics report': figures counted by hand in three samples, agreement with 'watch --oneshot'
on every sample, the table and the HTML page, and the page rendered by a real Chromium."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from collections.abc import Callable
from datetime import UTC
from pathlib import Path
from typing import Any

import pytest

from logmetrics.offline.report import Options, summary
from logmetrics.offline.reportread import collect
from logmetrics.plugins import discover
from tests.helpers import Samples, parse

ROOT = Path(__file__).resolve().parent.parent
SAMPLES = ROOT / "samples"


def report(*args: str) -> subprocess.CompletedProcess[str]:
    """Run 'logmetrics report ARGS' (times in UTC); fails the test if it fails."""
    done = subprocess.run([sys.executable, "-m", "logmetrics", "report", "--timezone", "UTC", *args],
                          capture_output=True, text=True, timeout=120, cwd=ROOT)
    assert done.returncode == 0, done.stderr
    return done


def as_json(*paths: Path) -> dict[str, Any]:
    """The JSON report of ``paths``."""
    return json.loads(report("--format", "json", *map(str, paths)).stdout)  # type: ignore[no-any-return]


def by_model(data: dict[str, Any]) -> dict[tuple[str, str], dict[str, Any]]:
    return {(b["backend"], b["model"]): b for b in data["backends"]}


def test_vllm_exact_tokens_counted_by_hand() -> None:
    """vllm/exact-tokens.log: 4 requests (3 finished, 1 aborted), 12+9+7+4 prompt token ids,
    3+4+5 output token ids, durations 1 s, 2 s and 4 s, 3 access lines, one start-up. The first
    request's ``Generated response`` comes before the stream's first access line and both count it
    (4 ok): the access lines take over finished requests from their first one on, and the README
    states this one request of overlap."""
    data = as_json(SAMPLES / "vllm" / "exact-tokens.log")
    assert (data["lines"], data["first_time"], data["last_time"]) == (
        27, "2026-09-15T10:00:00+00:00", "2026-09-15T10:00:30+00:00")
    got = by_model(data)
    qwen = got[("vllm", "qwen2.5-7b")]
    assert qwen["requests_by_outcome"] == {"ok": 4, "aborted": 1}
    assert (qwen["prompt_tokens"], qwen["generation_tokens"]) == (32, 12)
    assert qwen["latency_seconds"]["request_duration_seconds"] == {"count": 3, "p50": 2.0, "p95": 4.0, "p99": 4.0}
    assert qwen["errors"] == []
    assert qwen["busiest_minute"]["start_time"] == "2026-09-15T10:00:00+00:00"
    assert qwen["busiest_minute"]["requests"] == 5
    assert len(data["backends"]) == 1  # one server, one entry: its HTTP requests beside its tokens
    assert qwen["http_requests_by_status"] == {"2xx": 3}
    assert qwen["startups"] == 1 and qwen["startup_times"] == ["2026-09-15T10:00:00+00:00"]
    assert qwen["source"].endswith("exact-tokens.log") and qwen["models"] == ["qwen2.5-7b"]


def test_llamacpp_era_c_counted_by_hand() -> None:
    """llamacpp/server-era-c.log: tasks 1 and 2 finish (1150 ms and 500 ms, first tokens after
    150 and 200 ms, 50 and 100 ms per token), task 0 is refused at 02:06:54, its prompt over the
    context size (the client's error, not a failed request); prompt 30+50+10, generated 20+3, 12
    tokens reused from the cache, two requests served."""
    got = by_model(as_json(SAMPLES / "llamacpp" / "server-era-c.log"))
    phi = got[("llamacpp", "phi-3-mini-4k-instruct-q4")]
    assert phi["requests_by_outcome"] == {"ok": 2}
    assert (phi["prompt_tokens"], phi["generation_tokens"], phi["cached_prompt_tokens"]) == (90, 23, 12)
    lat = phi["latency_seconds"]
    assert lat["request_duration_seconds"] == {"count": 2, "p50": 0.5, "p95": 1.15, "p99": 1.15}
    assert lat["time_to_first_token_seconds"] == {"count": 2, "p50": 0.15, "p95": 0.2, "p99": 0.2}
    assert lat["time_per_output_token_seconds"] == {"count": 2, "p50": 0.05, "p95": 0.1, "p99": 0.1}
    assert phi["errors"] == []
    assert phi["http_requests_by_status"] == {"2xx": 2}


def test_text_embeddings_1x_counted_by_hand() -> None:
    """embeddings/tei-1.x.log: 4 successes (one with a total time of nan, left out of the
    percentiles: 25.431 ms, 80.5 ms, 1.502113 s), 1 error (an overload; the two refused inputs are
    the client's fault, no failed request), all five in the minute from 08:01."""
    data = as_json(SAMPLES / "embeddings" / "tei-1.x.log")
    assert (data["first_time"], data["last_time"]) == ("2025-03-04T08:00:00+00:00", "2025-03-04T08:02:00+00:00")
    bge = by_model(data)[("embeddings", "bge-base-en")]
    assert bge["requests_by_outcome"] == {"ok": 4, "error": 1}
    assert bge["latency_seconds"]["request_duration_seconds"] == {
        "count": 3, "p50": 0.0805, "p95": 1.502113, "p99": 1.502113}
    assert {e["type"]: e["count"] for e in bge["errors"]} == {"overloaded": 1}
    assert bge["client_errors_by_type"] == {"invalid_request": 2}
    assert bge["busiest_minute"] == {"start": 1741075260, "requests": 5, "start_time": "2025-03-04T08:01:00+00:00"}


def _sums(samples: Samples, name: str, key: Callable[[dict[str, str]], str]) -> dict[tuple[str, str], float]:
    """The values of the ``name`` series summed by backend and ``key`` of their labels (zeros left out)."""
    out: dict[tuple[str, str], float] = {}
    for (sample, pairs), value in samples.items():
        if sample == name and value:
            labels = dict(pairs)
            k = (labels["backend"], key(labels))
            out[k] = out.get(k, 0.0) + value
    return out


@pytest.mark.parametrize("log", sorted(SAMPLES.glob("*/*.log")), ids=lambda p: f"{p.parent.name}/{p.name}")
def test_the_report_adds_up_to_what_watch_serves(log: Path) -> None:
    """On every sample the report's requests, tokens, errors and client errors, per backend, are the sums of the
    series that 'watch --oneshot' serves for it (its golden file)."""
    golden = parse(log.with_suffix(".expected.prom").read_text())
    want = {**_sums(golden, "llm_requests_total", lambda labels: "outcome " + labels["outcome"]),
            **_sums(golden, "llm_prompt_tokens_total", lambda _: "prompt"),
            **_sums(golden, "llm_generation_tokens_total", lambda _: "generation"),
            **_sums(golden, "backend_errors_total", lambda labels: "error " + labels["error_type"]),
            **_sums(golden, "http_requests_total", lambda labels: "http " + labels["code"][0] + "xx"),
            **_sums(golden, "llm_client_errors_total", lambda labels: "client " + labels["error_type"])}
    got: dict[tuple[str, str], float] = {}

    def add(key: tuple[str, str], value: float) -> None:
        got[key] = got.get(key, 0.0) + value

    collected = collect(Options(paths=(str(log),), tz=UTC), discover())
    for b in (summary(f) for f in collected.figures):
        backend = b["backend"]
        for o, v in b["requests_by_outcome"].items():
            add((backend, f"outcome {o}"), v)
        for c, v in b["http_requests_by_status"].items():
            add((backend, f"http {c}"), v)
        for e in b["errors"]:
            add((backend, f"error {e['type']}"), e["count"])
        for k, v in b["client_errors_by_type"].items():
            add((backend, f"client {k}"), v)
        for what in ("prompt", "generation"):
            if b[f"{what}_tokens"] is not None:
                add((backend, what), b[f"{what}_tokens"])
    assert got == pytest.approx(want)


def test_include_and_exclude_choose_the_files(tmp_path: Path) -> None:
    """--include and --exclude choose the files read under a directory, as in watch."""
    for name in ("vllm/v1-0.10.log", "vllm/v0-0.5.log", "llamacpp/server-era-c.log"):
        shutil.copyfile(SAMPLES / name, tmp_path / name.replace("/", "-"))
    assert len(as_json(tmp_path)["files"]) == 3
    data = json.loads(report("--format", "json", str(tmp_path), "--include", "vllm-*", "--exclude", "*v0*").stdout)
    assert [Path(f).name for f in data["files"]] == ["vllm-v1-0.10.log"]


def test_the_table_and_the_page(tmp_path: Path) -> None:
    """The table names each backend and model with its figures; the HTML page, written whole to
    --output, holds the same figures and its charts inline (nothing fetched)."""
    log = SAMPLES / "llamacpp" / "server-era-c.log"
    table = report(str(log)).stdout
    assert "llamacpp, model phi-3-mini-4k-instruct-q4" in table
    assert "ok 2 (total 2)" in table and "p50 500.0 ms, p95 1.150 s" in table
    page = tmp_path / "report.html"
    done = report("--format", "html", "-o", str(page), str(log))
    assert "written to" in done.stderr and done.stdout == ""
    text = page.read_text()
    assert text.count("<svg") >= 3 and "phi-3-mini-4k-instruct-q4" in text and "p50 150.0 ms" in text
    assert "<script src" not in text and 'src="http' not in text and 'href="http' not in text
    report("--format", "html", "-o", str(tmp_path / "again.html"), str(log))
    assert (tmp_path / "again.html").read_text() == text  # (each chart's id too: chart-1, chart-2, ...)
    assert 'id="chart-1"' in text


def test_a_log_no_parser_knows(tmp_path: Path) -> None:
    """A file of lines no parser recognises gives a report that says so, with no figures."""
    log = tmp_path / "notes.log"
    log.write_text("hello\nworld\n")
    assert "No backend's lines were recognised" in report(str(log)).stdout
    assert as_json(log)["backends"] == []


def _browser() -> str | None:
    return shutil.which("chromium") or shutil.which("chromium-browser")


def _colored_pixels(png: Path) -> int:
    """Pixels of a saturated colour (the charts' lines and legend; the text is black and grey)."""
    from PIL import Image

    with Image.open(png) as img:
        saturation = img.convert("RGB").convert("HSV").getchannel("S").histogram()
    return sum(saturation[100:])


@pytest.mark.skipif(_browser() is None, reason="chromium is not installed (scripts/test installs it)")
def test_the_page_in_a_real_browser_shows_its_charts(tmp_path: Path) -> None:
    """Headless Chromium renders the page of a vLLM log (its logged throughput) and a llama.cpp
    log: the screenshot holds the charts' coloured lines; the page of a log with no figures, none."""
    browser = _browser()
    assert browser is not None
    shots = {}
    for name, logs in (("charts", [SAMPLES / "vllm" / "oom-crash.log", SAMPLES / "llamacpp" / "server-era-c.log"]),
                       ("empty", [tmp_path / "notes.log"])):
        (tmp_path / "notes.log").write_text("hello\n")
        page = tmp_path / f"{name}.html"
        report("--format", "html", "-o", str(page), *map(str, logs))
        shot = tmp_path / f"{name}.png"
        subprocess.run([browser, "--headless", "--no-sandbox", "--disable-gpu", "--hide-scrollbars",
                        "--window-size=1000,3000", f"--screenshot={shot}", page.as_uri()],
                       capture_output=True, timeout=120, check=True)
        shots[name] = _colored_pixels(shot)
    assert shots["charts"] > 2000, shots
    assert shots["empty"] < 100, shots


def test_output_into_a_symlink_and_a_file_it_may_not_write(tmp_path: Path) -> None:
    """-o FILE through a symlink writes the file it points to and keeps the link; a file that may
    not be written is refused with a one-line error, and left as it was."""
    log = SAMPLES / "vllm" / "exact-tokens.log"
    real, link = tmp_path / "real.json", tmp_path / "link.json"
    real.write_text("old")
    link.symlink_to(real)
    report("--format", "json", "-o", str(link), str(log))
    assert link.is_symlink() and json.loads(real.read_text())["lines"] == 27
    locked = tmp_path / "locked.json"
    locked.write_text("keep")
    locked.chmod(0o444)
    done = subprocess.run([sys.executable, "-m", "logmetrics", "report", "-o", str(locked), str(log)],
                          capture_output=True, text=True, timeout=120, cwd=ROOT)
    if os.geteuid() != 0:  # (root may write any file)
        assert done.returncode == 2 and "not writable" in done.stderr and locked.read_text() == "keep"


def test_an_output_that_cannot_be_written_is_refused_before_the_logs_are_read(tmp_path: Path) -> None:
    """-o into a directory that does not exist is refused at once with one line: nothing about the
    logs is said first (they may take minutes to read), and nothing is written."""
    missing = tmp_path / "no" / "report.json"
    cmd = [sys.executable, "-m", "logmetrics", "report", "-o", str(missing), str(tmp_path / "none.log")]
    done = subprocess.run(cmd, capture_output=True, text=True, timeout=120, cwd=ROOT)
    assert done.returncode == 2, done.stderr
    assert done.stderr == f"logmetrics: error: --output {missing}: no such directory: {missing.parent}\n"
    assert not (tmp_path / "no").exists()


def test_a_file_by_two_paths_counts_once_and_an_unreadable_one_is_left_out(tmp_path: Path) -> None:
    """The same file named directly and through a symlink is read once; a file that cannot be read
    is left out with a warning, not a traceback."""
    log = SAMPLES / "vllm" / "exact-tokens.log"
    link = tmp_path / "again.log"
    link.symlink_to(log)
    gone = tmp_path / "dangling.log"
    gone.symlink_to(tmp_path / "nowhere.log")
    assert as_json(log, link)["lines"] == 27
    done = report("--format", "json", str(log), str(tmp_path / "nowhere.log"))
    assert json.loads(done.stdout)["lines"] == 27 and "Traceback" not in done.stderr
    assert done.stderr.count("cannot read") == 1, done.stderr


def test_the_tokens_chart_shows_the_throughput_the_log_states() -> None:
    """Where the backend logs its throughput (vLLM's stats lines), the tokens/s chart draws those
    figures, not an interval's tokens put into one bucket."""
    from logmetrics.offline.reportview import series

    collected = collect(Options(paths=(str(SAMPLES / "vllm" / "oom-crash.log"),), tz=UTC), discover())
    fig = next(f for f in collected.figures if f.model)
    lines = series(fig, 5)
    logged = [v for _, v in lines["prompt tokens/s"]]
    assert logged == pytest.approx([2893.4, 5120.8, 1033.0])  # each stats line's figure, joined up


def test_a_log_of_elapsed_time_is_anchored_at_its_end(tmp_path: Path) -> None:
    """llama-server's current format states only the time since start: the report anchors it so
    that the last line falls at the file's modification time, and says so; its lines spread over
    their elapsed time instead of all sitting at one moment."""
    log = tmp_path / "llama-server.log"
    log.write_text(
        "0.00.000.912 I srv  llama_server: initializing ...\n"
        "0.00.401.031 I srv  llama_server: listening on http://127.0.0.1:8091\n"
        "3.05.000.000 I slot release: id  0 | task 0 | stop processing: n_tokens = 40, truncated = 0\n"
        "4.00.000.000 I srv  update_slots: all slots are idle\n")
    os.utime(log, (1_800_000_000, 1_800_000_000))
    data = as_json(log)
    assert data["elapsed_time_files"] == [str(log)] and data["untimed_files"] == []
    assert data["last"] == 1_800_000_000  # 4 min after start: the last line, at the file's mtime
    assert data["first"] == pytest.approx(1_800_000_000 - 240 + 0.912, abs=5)  # start, to the report's 5 s
    assert "time since the server started" in report(str(log)).stdout


def test_the_envelope_is_told_from_the_first_lines_not_the_first_step(tmp_path: Path) -> None:
    """A TEI log whose first step of log time holds one ERROR line (which alone reads like journald's
    ``TIME HOST UNIT:`` prefix): report and backfill read it as watch does, as plain text."""
    error = ("2026-01-05T09:00:{:02d}.100000Z ERROR embed: text_embeddings_core::infer: core/src/infer.rs:102: "
             "no permits available\n")
    ok = ('2026-01-05T09:00:{:02d}.100000Z  INFO embed{{total_time="12.5ms" tokenization_time="1.2ms" '
          'queue_time="0.5ms" inference_time="10.1ms"}}: text_embeddings_router::http::server: '
          "router/src/http/server.rs:738: Success\n")
    log = tmp_path / "tei.log"
    log.write_text(error.format(0) + "".join(ok.format(10 + i) for i in range(20)) + error.format(40))
    data = as_json(log)
    assert [(b["source"], b["requests_by_outcome"], [(e["type"], e["count"]) for e in b["errors"]])
            for b in data["backends"]] == [(str(log), {"error": 2, "ok": 20}, [("overloaded", 2)])]
