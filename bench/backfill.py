#!/usr/bin/env python3
"""Backfill benchmark: ``logmetrics backfill`` against ``watch --oneshot`` on the 1M-line corpus.

The corpus of ``bench/gen_corpus.py`` states its time on most lines (vLLM's ``INFO 01-05 09:00:00``,
advancing about one second every 50 lines: five hours of log time); access lines carry none and
take the last one. Each command runs as a whole process (interpreter start-up included); after
an unrecorded warm-up, the commands take turns for ``--runs`` rounds and the medians of wall time
and of CPU time (user + system, children included; steadier on a busy machine), each with lines
per second, are reported for:

* ``watch --oneshot --parser vllm CORPUS``;
* ``backfill --parser vllm CORPUS --openmetrics-only`` (reading, stepping, writing the text);
* ``backfill --parser vllm CORPUS`` (the same, then promtool making the blocks), when promtool is on PATH.

Each backfill's last ``http_requests_total`` samples must equal what ``--oneshot`` printed.

    python3 bench/backfill.py                 # 1,000,000 lines, 3 rounds
    python3 bench/backfill.py --lines 200000 --runs 1
"""

from __future__ import annotations

import argparse
import os
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
LOGMETRICS = [sys.executable, "-m", "logmetrics"]


def timed(cmd: list[str], stdout: int | None = subprocess.DEVNULL) -> tuple[float, float, str]:
    """Wall seconds and CPU seconds (user + system, its children such as promtool included) of one
    whole process, and its stdout."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    t0 = time.perf_counter()
    proc = subprocess.run(cmd, stdout=subprocess.PIPE if stdout is None else stdout, stderr=subprocess.PIPE,
                          text=True, check=False)
    wall = time.perf_counter() - t0
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    if proc.returncode != 0:
        sys.exit(f"{' '.join(cmd)} failed: {proc.stderr.strip()}")
    cpu = after.ru_utime + after.ru_stime - before.ru_utime - before.ru_stime
    return wall, cpu, proc.stdout or ""


def http_totals(text: str) -> dict[str, float]:
    """http_requests_total per label set: the exposition's, or the last sample of each series."""
    out: dict[str, float] = {}
    for line in text.splitlines():
        if line.startswith("http_requests_total{"):
            head, _, rest = line.partition("} ")
            labels = ",".join(sorted(head.removeprefix("http_requests_total{").split(",")))
            out[labels] = float(rest.split()[0])
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--lines", type=int, default=1_000_000, help="lines in the corpus (default 1,000,000)")
    ap.add_argument("--seed", type=int, default=7, help="corpus seed (default 7)")
    ap.add_argument("--runs", type=int, default=3, help="measured rounds (default 3)")
    args = ap.parse_args(argv)
    corpus = HERE / "out" / f"corpus-{args.lines}-{args.seed}.log"
    if not corpus.exists():
        corpus.parent.mkdir(parents=True, exist_ok=True)
        subprocess.run([sys.executable, str(HERE / "gen_corpus.py"), "-n", str(args.lines), "--seed", str(args.seed),
                        "-o", str(corpus)], check=True)
    with tempfile.TemporaryDirectory(prefix="backfill-bench-") as tmp:
        om, blocks = os.path.join(tmp, "om"), os.path.join(tmp, "blocks")
        common = ["--parser", "vllm", str(corpus), "--timezone", "UTC"]
        commands = {
            "watch --oneshot": [*LOGMETRICS, "watch", "--oneshot", "--parser", "vllm", str(corpus)],
            "backfill --openmetrics-only": [*LOGMETRICS, "backfill", *common, "--out", om, "--openmetrics-only"],
        }
        if shutil.which("promtool"):
            commands["backfill (with promtool)"] = [*LOGMETRICS, "backfill", *common, "--out", blocks]
        walls: dict[str, list[float]] = {name: [] for name in commands}
        cpus: dict[str, list[float]] = {name: [] for name in commands}
        want: dict[str, float] = {}
        for round_ in range(args.runs + 1):
            order = list(commands) if round_ % 2 == 0 else list(reversed(commands))
            for name in order:
                shutil.rmtree(om, ignore_errors=True)
                shutil.rmtree(blocks, ignore_errors=True)
                wall, cpu, out = timed(commands[name], None if name == "watch --oneshot" else subprocess.DEVNULL)
                if name == "watch --oneshot":
                    want = http_totals(out)
                elif name == "backfill --openmetrics-only" and want:
                    got = http_totals(Path(om, "backfill.om").read_text())
                    if got != want:
                        sys.exit(f"backfill's last http_requests_total samples differ from --oneshot's: {got} {want}")
                if round_:
                    walls[name].append(wall)
                    cpus[name].append(cpu)
    base, base_cpu = statistics.median(walls["watch --oneshot"]), statistics.median(cpus["watch --oneshot"])
    print(f"corpus: {corpus.name}, {args.lines:,} lines, {args.runs} rounds (medians), Python "
          f"{sys.version.split()[0]}, {os.cpu_count()} CPUs")
    for name in commands:
        wall, cpu = statistics.median(walls[name]), statistics.median(cpus[name])
        print(f"{name:28s} wall {wall:6.2f} s {args.lines / wall:>9,.0f} lines/s ({base / wall:4.2f} x --oneshot) | "
              f"CPU {cpu:6.2f} s {args.lines / cpu:>9,.0f} lines/s ({base_cpu / cpu:4.2f} x --oneshot)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
