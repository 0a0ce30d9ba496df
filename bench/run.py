#!/usr/bin/env python3
"""One-shot benchmark: logmetrics (``watch --oneshot --parser vllm``) on a 1M-line mixed LLM log,
side by side with mtail running an equivalent program, when mtail is installed.

Each command runs as a whole process (interpreter start-up included). After one unrecorded warm-up
round the commands take turns for ``--runs`` rounds (the order flips every round) and the script
reports medians of wall time, lines per second, CPU seconds (user + system) and peak RSS, taken from
``os.wait4`` for that very child. Every output, warm-up included, is checked against the corpus'
``expected.json``: any difference in a count or gauge fails the run.

    python3 bench/run.py                    # 1,000,000 lines, 5 rounds
    python3 bench/run.py --lines 200000 --runs 3 --no-mtail

``--mix`` measures the mixed corpus instead: one file per backend (vLLM, llama.cpp, whisper,
embeddings) in a directory, read by ``logmetrics watch --oneshot DIR`` with no ``--parser`` (every
file routed to its parser by the engine) and by mtail with ``bench/llm-mix.mtail``; both outputs are
checked file by file against ``DIR.expected.json`` (``bench/mixcheck.py``).

    python3 bench/run.py --mix              # 1,000,000 lines in 6 files, 5 rounds
"""

from __future__ import annotations

import argparse
import json
import math
import os
import platform
import shutil
import statistics
import subprocess
import sys
import time
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from prometheus_client.parser import text_string_to_metric_families

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))  # run as a script: find ``bench``
from bench.mixcheck import check_mix

HERE = Path(__file__).resolve().parent
OUT = HERE / "out"
MTAIL_PROG = HERE / "llm.mtail"
MTAIL_MIX_PROG = HERE / "llm-mix.mtail"
MIX_FORMAT = 3  # of the mixed corpus' expected.json, as bench/gen_mix.py writes it
GAUGE_TOLERANCE = 1e-9  # relative; the values are decimals with one digit, divided by 100 for ratios
FORMAT = 4  # of expected.json, as bench/gen_corpus.py writes it


@dataclass
class Run:
    """One measured run of one command."""

    name: str
    wall: float
    cpu: float
    rss_mib: float
    code: int


@dataclass
class Tool:
    """A command under test and where its output goes."""

    name: str
    cmd: list[str]
    out: Path
    err: Path


def measure(tool: Tool) -> Run:
    """Run ``tool`` once; wall time from a monotonic clock, CPU and peak RSS from wait4."""
    with tool.out.open("wb") as fo, tool.err.open("wb") as fe:
        start = time.perf_counter()
        proc = subprocess.Popen(tool.cmd, stdin=subprocess.DEVNULL, stdout=fo, stderr=fe)
        _, status, usage = os.wait4(proc.pid, 0)
        wall = time.perf_counter() - start
    code = os.waitstatus_to_exitcode(status)
    proc.returncode = code  # reaped by wait4 above; tell Popen so it does not wait again
    # ru_maxrss is in KiB on Linux
    return Run(tool.name, wall, usage.ru_utime + usage.ru_stime, usage.ru_maxrss / 1024.0, code)


def samples(text: str, name: str) -> list[tuple[dict[str, str], float]]:
    """(labels, value) of every sample called ``name`` in a Prometheus text exposition."""
    return [(dict(s.labels), s.value) for fam in text_string_to_metric_families(text) for s in fam.samples
            if s.name == name]


def sum_by(text: str, name: str, label: str) -> dict[str, float]:
    """Values of the samples called ``name`` summed per value of ``label`` (other labels ignored)."""
    out: dict[str, float] = {}
    for labels, value in samples(text, name):
        key = labels.get(label, "")
        out[key] = out.get(key, 0.0) + value
    return out


def check(text: str, expected: dict[str, Any], self_metrics: bool, per_record: bool = False) -> list[str]:
    """Differences between an exposition and the expected totals (empty when they agree).

    ``per_record``: the tool counts every error line, not each crash once (mtail's program).
    """
    problems: list[str] = []

    want_req = {(r["method"], r["route"], r["code"]): float(r["value"]) for r in expected["http_requests_total"]}
    got_req: dict[tuple[str, str, str], float] = {}
    for labels, value in samples(text, "http_requests_total"):
        key = (labels.get("method", ""), labels.get("route", ""), labels.get("code", ""))
        got_req[key] = got_req.get(key, 0.0) + value
    got_req = {k: v for k, v in got_req.items() if v}
    if got_req != want_req:
        for key in sorted(set(want_req) | set(got_req)):
            if want_req.get(key, 0.0) != got_req.get(key, 0.0):
                problems.append(f"http_requests_total{key}: want {want_req.get(key, 0.0):g}, "
                                f"got {got_req.get(key, 0.0):g}")

    for name, want in expected["gauges"].items():
        got = [v for _, v in samples(text, name)]
        if len(got) != 1:
            problems.append(f"{name}: want one series = {want}, got {len(got)} series {got[:5]}")
        elif not math.isclose(got[0], float(want), rel_tol=GAUGE_TOLERANCE, abs_tol=1e-12):
            problems.append(f"{name}: want {want}, got {got[0]}")

    errors = expected["backend_errors_per_record" if per_record else "backend_errors_total"]
    want_err = {k: float(v) for k, v in errors.items()}
    got_err = {k: v for k, v in sum_by(text, "backend_errors_total", "error_type").items() if v}
    if got_err != want_err:
        problems.append(f"backend_errors_total by error_type: want {want_err}, got {got_err}")

    want_out = {k: float(v) for k, v in expected["llm_requests_total"].items()}
    got_out = {k: v for k, v in sum_by(text, "llm_requests_total", "outcome").items() if v}
    if got_out != want_out:
        problems.append(f"llm_requests_total by outcome: want {want_out}, got {got_out}")
    want_client = float(expected["llm_client_errors_total"])
    got_client = sum(v for _, v in samples(text, "llm_client_errors_total"))
    if got_client != want_client:
        problems.append(f"llm_client_errors_total: want {want_client:g}, got {got_client:g}")

    if self_metrics:
        lines = sum(v for _, v in samples(text, "logmetrics_lines_read_total"))
        if lines != expected["lines"]:
            problems.append(f"logmetrics_lines_read_total: want {expected['lines']}, got {lines:g}")
    return problems


def _ensure(corpus: Path, made: bool, gen_args: list[str], fmt: object, what: str) -> dict[str, Any]:
    """Generate a corpus (the generator and arguments ``gen_args``) and its expected.json unless both
    are there (``made``) and the expected figures are of format ``fmt``; return the expected figures."""
    expected_path = corpus.with_name(corpus.name + ".expected.json")
    if not (made and expected_path.is_file()):
        print(f"generating {what}", file=sys.stderr)
        subprocess.run([sys.executable, *gen_args], check=True)
    expected: dict[str, Any] = json.loads(expected_path.read_text())
    if expected.get("format") != fmt:  # cached by an older generator
        expected_path.unlink()
        return _ensure(corpus, False, gen_args, fmt, what)
    return expected


def ensure_corpus(corpus: Path, lines: int, seed: int) -> dict[str, Any]:
    """Generate the corpus (and its expected.json) unless both are there; return the expected totals."""
    gen = [str(HERE / "gen_corpus.py"), "-n", str(lines), "--seed", str(seed), "-o", str(corpus)]
    return _ensure(corpus, corpus.is_file(), gen, FORMAT,
                   f"{corpus} ({lines} lines, seed {seed})")


def ensure_mix(corpus: Path, lines: int, seed: int) -> dict[str, Any]:
    """Generate the mixed corpus directory (and its expected.json) unless both are there."""
    gen = [str(HERE / "gen_mix.py"), str(corpus), "-n", str(lines), "--seed", str(seed)]
    return _ensure(corpus, corpus.is_dir(), gen,
                   MIX_FORMAT, f"{corpus}/ ({lines} lines, seed {seed})")


def compile_package(python: str) -> None:
    """Byte-compile logmetrics and its parsers, as installing a package does: an editable install
    run with PYTHONDONTWRITEBYTECODE would otherwise compile every module at every start-up."""
    code = ("import compileall, os, logmetrics, logmetrics_parsers\n"
            "for m in (logmetrics, logmetrics_parsers): compileall.compile_dir(os.path.dirname(m.__file__), quiet=1)")
    subprocess.run([python, "-c", code], check=True)


def version(cmd: Sequence[str]) -> str:
    """First line a ``--version``-style command prints, or ``?``."""
    try:
        res = subprocess.run(list(cmd), capture_output=True, text=True, timeout=30)
    except OSError:
        return "?"
    text = (res.stdout or res.stderr).strip().splitlines()
    return text[0] if text else "?"


def verify(run: Run, tool: Tool, expected: dict[str, Any], mix: bool = False) -> list[str]:
    """Exit loudly when a run failed or its output differs from the expected totals; return the
    notes (figures of the mixed corpus that the tool does not report, which is not a failure)."""
    if run.code != 0:
        err = tool.err.read_text(errors="replace")[-3000:]
        sys.exit(f"FAIL: {tool.name} exited with {run.code}: {' '.join(tool.cmd)}\n{err}")
    text = tool.out.read_text(errors="replace")
    notes: list[str] = []
    if mix:
        problems, notes = check_mix(text, expected, self_metrics=tool.name == "logmetrics",
                                    per_record=tool.name != "logmetrics")
    else:
        problems = check(text, expected, self_metrics=tool.name == "logmetrics", per_record=tool.name != "logmetrics")
    if problems:
        shown = "\n  ".join(problems[:40])
        sys.exit(f"FAIL: {tool.name} output {tool.out} differs from the expected totals "
                 f"({len(problems)} differences):\n  {shown}")
    return notes


def fmt_row(cells: Sequence[str]) -> str:
    """A Markdown table row."""
    return "| " + " | ".join(cells) + " |"


def rounds_parser(doc: str | None, lines: int, runs: int, what: str = "corpus size") -> argparse.ArgumentParser:
    """The command line of a benchmark that times rounds on a generated log: its size and seed, the
    rounds measured and warm-up rounds, and the interpreter that runs logmetrics."""
    ap = argparse.ArgumentParser(description=doc, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--lines", type=int, default=lines, help=f"{what} when it is generated (default {lines:,})")
    ap.add_argument("--seed", type=int, default=7, help="corpus seed when it is generated (default 7)")
    ap.add_argument("--runs", type=int, default=runs, help=f"measured rounds (default {runs})")
    ap.add_argument("--warmup", type=int, default=1, help="unrecorded warm-up rounds (default 1)")
    ap.add_argument("--python", default=sys.executable, help="interpreter that runs logmetrics")
    return ap


def main(argv: list[str] | None = None) -> int:
    """Command line entry point."""
    ap = rounds_parser(__doc__, 1_000_000, 5)
    ap.add_argument("--corpus", type=Path, help="log to read (default bench/out/corpus-LINES-SEED.log)")
    ap.add_argument("--no-mtail", action="store_true", help="do not run mtail even when it is installed")
    ap.add_argument("--json", type=Path, help="also write the raw runs and summary to this file")
    ap.add_argument("--logmetrics-arg", action="append", default=[], metavar="ARG",
                    help="one more argument for logmetrics watch (repeatable), e.g. --logmetrics-arg=--plugin=x.py")
    ap.add_argument("--mix", action="store_true",
                    help="the mixed corpus: a directory with one log per backend, routed by logmetrics itself")
    args = ap.parse_args(argv)

    OUT.mkdir(exist_ok=True)
    compile_package(args.python)
    corpus: Path
    if args.mix:
        corpus = args.corpus or OUT / f"mix-{args.lines}-{args.seed}"
        expected = ensure_mix(corpus, args.lines, args.seed)
        size_mb = sum(f.stat().st_size for f in corpus.iterdir()) / 1e6
        # no --parser: the engine routes every file; mtail reads every file of the directory
        lm_args, mtail_prog, mtail_logs, tag = [str(corpus)], MTAIL_MIX_PROG, str(corpus / "*"), "mix"
    else:
        corpus = args.corpus or OUT / f"corpus-{args.lines}-{args.seed}.log"
        expected = ensure_corpus(corpus, args.lines, args.seed)
        size_mb = corpus.stat().st_size / 1e6
        lm_args, mtail_prog, mtail_logs, tag = ["--parser", "vllm", str(corpus)], MTAIL_PROG, str(corpus), "run"
    n_lines = int(expected["lines"])

    tools = [Tool("logmetrics",
                  [args.python, "-m", "logmetrics", "watch", "--oneshot", "--from-beginning", *args.logmetrics_arg,
                   *lm_args],
                  OUT / f"{tag}.logmetrics.prom", OUT / f"{tag}.logmetrics.err")]
    mtail = None if args.no_mtail else shutil.which("mtail")
    if mtail:
        tools.append(Tool("mtail",
                          [mtail, "--one_shot", "--one_shot_format", "prometheus", "--progs", str(mtail_prog),
                           "--logs", mtail_logs, "--address", "127.0.0.1", "--port", "0", "--logtostderr"],
                          OUT / f"{tag}.mtail.prom", OUT / f"{tag}.mtail.err"))
    elif not args.no_mtail:
        print("mtail is not on PATH: measuring logmetrics alone (Debian: apt-get install mtail)", file=sys.stderr)

    print(f"corpus: {corpus} ({n_lines} lines, {size_mb:.1f} MB)")
    print(f"machine: {os.cpu_count()} CPUs, {platform.platform()}, Python {platform.python_version()}")
    if mtail:
        print(f"mtail: {version([mtail, '--version'])}")
    for t in tools:
        print(f"{t.name}: {' '.join(t.cmd)}")

    runs: dict[str, list[Run]] = {t.name: [] for t in tools}
    notes: dict[str, list[str]] = {}
    ratios: list[tuple[float, float]] = []
    for rnd in range(args.warmup + args.runs):
        recorded = rnd >= args.warmup
        order = tools if rnd % 2 == 0 else tools[::-1]
        this: dict[str, Run] = {}
        for tool in order:
            run = measure(tool)
            notes[tool.name] = verify(run, tool, expected, args.mix)
            this[tool.name] = run
            label = f"round {rnd - args.warmup + 1}" if recorded else "warm-up"
            print(f"  {label:>8}  {tool.name:<10} wall {run.wall:7.3f} s  cpu {run.cpu:7.3f} s  "
                  f"rss {run.rss_mib:6.1f} MiB  output OK", flush=True)
            if recorded:
                runs[tool.name].append(run)
        if recorded and "mtail" in this:
            lm, mt = this["logmetrics"], this["mtail"]
            ratios.append((lm.wall / mt.wall, lm.cpu / mt.cpu if mt.cpu else math.nan))

    for name, ns in notes.items():
        for note in ns:
            print(f"note: {name}: {note}")
    print()
    print(fmt_row(["command", "wall s, median (min–max)", "lines/s", "lines/s, best round", "CPU s",
                   "peak RSS MiB"]))
    print(fmt_row(["---"] * 6))
    summary: dict[str, dict[str, float]] = {}
    for name, rs in runs.items():
        walls = [r.wall for r in rs]
        wall = statistics.median(walls)
        cpu = statistics.median(r.cpu for r in rs)
        rss = max(r.rss_mib for r in rs)
        summary[name] = {"wall": wall, "lines_per_s": n_lines / wall, "best_wall": min(walls),
                         "best_lines_per_s": n_lines / min(walls), "cpu": cpu, "rss_mib": rss}
        print(fmt_row([name, f"{wall:.3f} ({min(walls):.3f}–{max(walls):.3f})", f"{n_lines / wall:,.0f}",
                       f"{n_lines / min(walls):,.0f}", f"{cpu:.3f}", f"{rss:.1f}"]))
    if ratios:
        wall_ratio = statistics.median(r[0] for r in ratios)
        cpu_ratio = statistics.median(r[1] for r in ratios)
        summary["ratio"] = {"wall": wall_ratio, "cpu": cpu_ratio}
        print()
        best = summary["logmetrics"]["best_wall"] / summary["mtail"]["best_wall"]
        summary["ratio"]["best_wall"] = best
        print(f"logmetrics / mtail, median of per-round ratios: wall {wall_ratio:.3f}, CPU {cpu_ratio:.3f} "
              f"(mtail takes {1 / wall_ratio:.2f}x logmetrics' wall time); best rounds: wall {best:.3f} "
              f"({1 / best:.2f}x)")
    if args.json:
        args.json.write_text(json.dumps({"corpus": str(corpus), "lines": n_lines, "summary": summary,
                                         "runs": {k: [asdict(r) for r in v] for k, v in runs.items()}}, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
