#!/usr/bin/env python3
"""The cost of ``--state-file``: whole-process CPU of ``logmetrics watch`` with and without it.

Three measures, each run with and without a state file, taking turns (the order flips every
round), CPU time (user + system) from ``os.wait4`` for the logmetrics process alone:

- ``backlog``: the 1,000,000-line corpus of ``run.py`` read from its start by a serving
  ``watch --from-beginning --parser vllm`` until ``logmetrics_lines_read_total`` shows every line;
  one commit per poll, with few series.
- ``series``: 1,000,000 access lines over 50 files and 200 routes each (10,000 series of
  ``http_requests_total``), read the same way: many series change at every commit.
- ``live``: a writer appends to a followed file at ``--rate`` lines per second for ``--seconds``;
  CPU per 10,000 lines/s is the CPU seconds per second of writing, scaled to 10,000 lines/s.

    .venv/bin/python bench/state.py                 # all three, 3 rounds
    .venv/bin/python bench/state.py --only live --rate 20000 --seconds 10
"""

from __future__ import annotations

import argparse
import os
import re
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.request
from collections.abc import Callable
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))  # run as a script: find ``bench``
from bench.run import OUT, ensure_corpus

READ = re.compile(r"^logmetrics_lines_read_total\{[^}]*\} ([0-9.e+]+)$", re.M)
COMMITS = re.compile(r"^logmetrics_state_commits_total ([0-9.e+]+)$", re.M)
WORDS = [a + b for a in "bcdfghjklmnpqrstvwxz" for b in "aeiouyAEIOU"][:200]  # 200 route names


def series_corpus(path: Path, lines: int, files: int = 50) -> Path:
    """``files`` logs of access lines, each over 200 routes, ``lines`` in all; the directory."""
    if path.is_dir() and len(list(path.iterdir())) == files:
        return path
    path.mkdir(parents=True, exist_ok=True)
    per = lines // files
    for f in range(files):
        with open(path / f"vllm-{f:02d}.log", "w") as out:
            out.writelines(f'INFO:     10.0.0.{i % 250}:4{i % 9999:04d} - "POST /v1/{WORDS[i % 200]} HTTP/1.1" 200 OK\n'
                           for i in range(per))
    return path


def scrape(url: str) -> str:
    """The server's metrics text."""
    with urllib.request.urlopen(url, timeout=10) as resp:
        text: str = resp.read().decode()
        return text


def start(args: list[str]) -> tuple[subprocess.Popen[bytes], str]:
    """Start ``logmetrics watch --listen`` with ``args``; the process and its metrics URL."""
    exe = str(Path(sys.executable).with_name("logmetrics"))
    proc = subprocess.Popen([exe, "watch", "--listen", "127.0.0.1:0", *args],
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    assert proc.stderr is not None
    for raw in proc.stderr:
        line = raw.decode()
        if "serving metrics at " in line:
            return proc, line.split("serving metrics at ", 1)[1].strip()
    raise SystemExit(f"logmetrics did not start: {proc.wait()}")


def stop(proc: subprocess.Popen[bytes]) -> float:
    """SIGTERM, then the process' CPU seconds (user + system) from wait4."""
    proc.send_signal(signal.SIGTERM)
    _, status, usage = os.wait4(proc.pid, 0)
    proc.returncode = os.waitstatus_to_exitcode(status)
    if proc.returncode != 0:
        raise SystemExit(f"logmetrics exited with {proc.returncode}")
    return usage.ru_utime + usage.ru_stime


def total(regex: re.Pattern[str], text: str) -> float:
    """The sum of the values ``regex`` finds."""
    return sum(float(v) for v in regex.findall(text))


def wait_read(url: str, want: int, timeout: float = 600) -> str:
    """Scrape every 0.25 s until every line is read; the last scrape."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        text = scrape(url)
        if total(READ, text) >= want:
            return text
        time.sleep(0.25)
    raise SystemExit(f"not every line read in {timeout} s")


def backlog(inputs: list[str], lines: int, state: str | None, extra: list[str]) -> tuple[float, float, float]:
    """Read ``inputs`` from their start; (CPU s, wall s, commits)."""
    args = ["--from-beginning", "--poll-interval", "0.1", *extra, *inputs]
    t0 = time.monotonic()
    proc, url = start(args + (["--state-file", state] if state else []))
    text = wait_read(url, lines)
    wall = time.monotonic() - t0
    return stop(proc), wall, total(COMMITS, text)


def live(dir_: Path, rate: int, seconds: float, state: str | None) -> tuple[float, float, float]:
    """Append to a followed file at ``rate`` lines/s for ``seconds``; (CPU s, wall s, commits)."""
    log = dir_ / "vllm.log"
    log.write_text("")
    proc, url = start(["--parser", "vllm", "--poll-interval", "0.25", str(dir_)]
                      + (["--state-file", state] if state else []))
    base = stop_cpu_probe(proc)
    line = 'INFO:     10.0.0.1:40000 - "POST /v1/chat/completions HTTP/1.1" 200 OK\n'
    step = 0.01
    per_step = max(1, int(rate * step))
    t0 = time.monotonic()
    written = 0
    with open(log, "a") as out:
        while time.monotonic() - t0 < seconds:
            out.write(line * per_step)
            out.flush()
            written += per_step
            due = t0 + written / rate
            pause = due - time.monotonic()
            if pause > 0:
                time.sleep(pause)
    wall = time.monotonic() - t0
    text = wait_read(url, written)
    return stop(proc) - base, wall, total(COMMITS, text)


def stop_cpu_probe(proc: subprocess.Popen[bytes]) -> float:
    """The CPU seconds the process used so far (start-up), from /proc."""
    fields = Path(f"/proc/{proc.pid}/stat").read_text().rsplit(")", 1)[1].split()
    tick = os.sysconf("SC_CLK_TCK")
    return (int(fields[11]) + int(fields[12])) / tick


def rounds(name: str, n: int, run: Callable[[str | None], tuple[float, float, float]], per: float,
           unit: str) -> None:
    """``n`` rounds of ``run`` without and with a state file, taking turns; print the medians."""
    got: dict[bool, list[tuple[float, float, float]]] = {False: [], True: []}
    for r in range(n):
        for with_state in ((False, True) if r % 2 == 0 else (True, False)):
            tmp = tempfile.mkdtemp(prefix="lm-state-")
            try:
                got[with_state].append(run(os.path.join(tmp, "state.db") if with_state else None))
            finally:
                shutil.rmtree(tmp)
            cpu, wall, commits = got[with_state][-1]
            print(f"  {name} round {r + 1} {'with' if with_state else 'without':>7} state: cpu {cpu:.3f} s, "
                  f"wall {wall:.2f} s, commits {commits:.0f}", flush=True)
    cpu0 = statistics.median(c for c, _, _ in got[False])
    cpu1 = statistics.median(c for c, _, _ in got[True])
    commits = statistics.median(k for _, _, k in got[True])
    print(f"{name}: CPU without {cpu0:.3f} s, with {cpu1:.3f} s, ratio {cpu1 / cpu0:.3f} "
          f"({cpu1 - cpu0:+.3f} s; {per * cpu0:.3f} vs {per * cpu1:.3f} {unit}); {commits:.0f} commits", flush=True)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--lines", type=int, default=1_000_000, help="lines of the backlog and series corpora")
    ap.add_argument("--runs", type=int, default=3, help="rounds, each with and without the state file")
    ap.add_argument("--rate", type=int, default=20_000, help="lines/s written in the live measure")
    ap.add_argument("--seconds", type=float, default=10.0, help="length of the live measure")
    ap.add_argument("--only", choices=("backlog", "series", "live"), help="run this measure alone")
    a = ap.parse_args()
    OUT.mkdir(exist_ok=True)
    if a.only in (None, "backlog"):
        corpus = OUT / f"corpus-{a.lines}-7.log"
        ensure_corpus(corpus, a.lines, 7)
        rounds("backlog", a.runs, lambda s: backlog([str(corpus)], a.lines, s, ["--parser", "vllm"]),
               1e6 / a.lines, "CPU s per million lines")
    if a.only in (None, "series"):
        d = series_corpus(OUT / f"series-{a.lines}", a.lines)
        rounds("series", a.runs, lambda s: backlog([str(d)], a.lines, s, ["--parser", "vllm"]),
               1e6 / a.lines, "CPU s per million lines")
    if a.only in (None, "live"):
        def one(s: str | None) -> tuple[float, float, float]:
            with tempfile.TemporaryDirectory(prefix="lm-live-") as tmp:
                return live(Path(tmp), a.rate, a.seconds, s)
        rounds("live", a.runs, one, 10_000 / a.rate / a.seconds, "CPU s per s per 10k lines/s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
