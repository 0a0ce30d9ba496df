"""``logmetrics report`` in several worker processes writes what one process writes, byte for byte."""

from __future__ import annotations

import json
import os
import resource
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
STATS = ("INFO 01-05 {} [loggers.py:118] Engine 000: Avg prompt throughput: 10.0 tokens/s, Avg generation "
         "throughput: 5.0 tokens/s, Running: 1 reqs, Waiting: 0 reqs, GPU KV cache usage: 1.0%\n")


def report(*args: str, workers: int, cwd: Path) -> tuple[str, str]:
    """``logmetrics -v report --workers N --timezone UTC ARGS``: what it writes, and what it says."""
    proc = subprocess.run([sys.executable, "-m", "logmetrics", "-v", "report", "--workers", str(workers),
                           "--timezone", "UTC", *args], capture_output=True, text=True, timeout=600, cwd=cwd)
    assert proc.returncode == 0, proc.stderr
    return proc.stdout, proc.stderr


@pytest.mark.parametrize("fmt", ["json", "table"])
def test_the_samples_in_two_processes_give_one_process_report(tmp_path: Path, fmt: str) -> None:
    """Every sample log, read in two worker processes, gives the single process's report."""
    one, said = report("--format", fmt, str(ROOT / "samples"), workers=1, cwd=tmp_path)
    two, said2 = report("--format", fmt, str(ROOT / "samples"), workers=2, cwd=tmp_path)
    assert "in 2 processes" in said2 and "again" not in said2 and "reading in one process: --workers 1" in said
    assert one == two and len(one) > 1000


def test_the_mixed_corpus_in_two_processes_gives_one_process_report(tmp_path: Path) -> None:
    """The benchmark's mixed corpus (a log per backend, routed by content), in two processes: the same bytes."""
    corpus = tmp_path / "mix"
    subprocess.run([sys.executable, str(ROOT / "bench" / "gen_mix.py"), str(corpus), "-n", "30000"],
                   check=True, capture_output=True, timeout=300)
    one, _ = report("--format", "json", str(corpus), workers=1, cwd=tmp_path)
    two, said = report("--format", "json", str(corpus), workers=2, cwd=tmp_path)
    assert "in 2 processes" in said and "again" not in said
    assert len(json.loads(one)["backends"]) == 6 and one == two


def test_where_shares_could_differ_one_process_reads_it_all(tmp_path: Path) -> None:
    """One source for every file (--source): their figures are one entry, so one process reads them."""
    logs = [str(ROOT / "samples" / "vllm" / name) for name in ("v1-0.10.log", "v0-0.5.log")]
    one, _ = report("--format", "json", "--source", "all", *logs, workers=1, cwd=tmp_path)
    two, said = report("--format", "json", "--source", "all", *logs, workers=2, cwd=tmp_path)
    assert one == two and "reading in one process: a source label named" in said


def test_a_record_held_at_the_end_of_a_step_counts_at_its_own_files_time(tmp_path: Path) -> None:
    """Two files in the same step of log time: the last record of the first (held, in case more of it
    comes) counts at that file's time when the step ends, not at the time of the other file read
    after it, as it does when the file is read alone or in another process."""
    (tmp_path / "a-vllm.log").write_text(
        STATS.format("09:00:00")
        + "ERROR 01-05 09:00:01 [serving_chat.py:240] Error in chat completion: torch.OutOfMemoryError: CUDA out of "
          "memory\n" + STATS.format("09:00:10"))
    (tmp_path / "b-vllm.log").write_text(STATS.format("09:00:03") + STATS.format("09:00:10"))
    for name in ("a-vllm.log", "b-vllm.log"):
        os.utime(tmp_path / name, (1767657600, 1767657600))  # 2026-01-06: the year of the stamps
    got = []
    for args in (("a-vllm.log",), ("a-vllm.log", "b-vllm.log")):
        out, _ = report("--format", "json", *args, workers=1, cwd=tmp_path)
        got.append({b["source"]: b["errors"] for b in json.loads(out)["backends"]})
    alone, both = got
    assert [e["first_time"] for e in alone["a-vllm.log"]] == ["2026-01-05T09:00:00+00:00"]
    assert both["a-vllm.log"] == alone["a-vllm.log"] and both["b-vllm.log"] == []


def test_the_workers_end_with_an_interrupted_report(tmp_path: Path) -> None:
    """SIGTERM to the first process alone while its workers read: it says so, exits 130, and no
    worker goes on reading without it."""
    corpus = tmp_path / "mix"
    subprocess.run([sys.executable, str(ROOT / "bench" / "gen_mix.py"), str(corpus), "-n", "300000"],
                   check=True, capture_output=True, timeout=300)
    proc = subprocess.Popen([sys.executable, "-m", "logmetrics", "report", "--workers", "3", "--format", "json",
                             str(corpus)], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd=tmp_path)
    children = Path(f"/proc/{proc.pid}/task/{proc.pid}/children")
    deadline = time.monotonic() + 60
    workers: list[int] = []
    while len(workers) < 2 and time.monotonic() < deadline and proc.poll() is None:
        workers = [int(pid) for pid in children.read_text().split()]
        time.sleep(0.01)
    assert len(workers) >= 2, "the workers did not start"  # (2 with the first process reading, or 3)
    proc.send_signal(signal.SIGTERM)
    out, err = proc.communicate(timeout=60)
    assert proc.returncode == 130 and out == "" and "interrupted" in err, err
    for pid in workers:
        assert not Path(f"/proc/{pid}").exists(), f"worker {pid} still runs"


def test_many_files_under_a_low_open_file_limit(tmp_path: Path) -> None:
    """More log files than the open-file limit allows at once: report and backfill read them all
    (each file is open only while a block of it is read, and the soft limit is raised to the hard
    one: backfill keeps a spool file open per metric family)."""
    logs = tmp_path / "logs"
    logs.mkdir()
    for i in range(80):
        (logs / f"w{i}-vllm.log").write_text(STATS.format(f"09:00:{i % 60:02d}") + STATS.format("09:01:10"))
        os.utime(logs / f"w{i}-vllm.log", (1767657600, 1767657600))

    def low() -> None:
        resource.setrlimit(resource.RLIMIT_NOFILE, (16, resource.getrlimit(resource.RLIMIT_NOFILE)[1]))

    for args in (["report", "--format", "json", str(logs)],
                 ["backfill", "--openmetrics-only", "--out", str(tmp_path / "out"), str(logs)],
                 ["backfill", "--openmetrics-only", "--out", str(tmp_path / "out2"), str(ROOT / "samples")]):
        proc = subprocess.run([sys.executable, "-m", "logmetrics", *args], capture_output=True, text=True,
                              timeout=300, cwd=tmp_path, preexec_fn=low)
        assert proc.returncode == 0 and "Traceback" not in proc.stderr, proc.stderr
    data = json.loads(subprocess.run([sys.executable, "-m", "logmetrics", "report", "--format", "json", str(logs)],
                                     capture_output=True, text=True, timeout=300, check=True).stdout)
    assert data["lines"] == 160 and len(data["backends"]) == 80
