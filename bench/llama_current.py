#!/usr/bin/env python3
"""llama-server's current log format on the ``llamacpp`` parser's fast path, against the vLLM corpus.

The log is written by ``gen_backends.LlamaCurrentWriter`` (every line prefixed with the time since
start and a level, four timing lines per request, client errors as ``got exception`` warnings); its
figures come from the values drawn, never from reading the file back. Each round runs, as whole
processes taking turns (the order flips every round, after one unrecorded warm-up round),

    logmetrics watch --oneshot --from-beginning --parser llamacpp LLAMA-LOG
    logmetrics watch --oneshot --from-beginning --parser vllm VLLM-CORPUS    (bench/gen_corpus.py)

checks both outputs (the llama.cpp figures below, the vLLM corpus as ``run.py`` does), and reports
medians of wall time and lines per second and the median of the per-round ratios of lines per
second (llama.cpp / vLLM), so that the two are compared on the same machine at the same time.

    python3 bench/llama_current.py                      # 1,000,000 lines each, 5 rounds
    python3 bench/llama_current.py --lines 200000 --runs 3
"""

from __future__ import annotations

import json
import math
import statistics
import sys
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))  # run as a script: find ``bench``
from bench.gen_backends import LlamaCurrentWriter
from bench.gen_mix import write_lines
from bench.run import OUT, Tool, check, compile_package, ensure_corpus, measure, rounds_parser, samples, sum_by

FORMAT = 2  # of the llama.cpp log's expected.json


def ensure_llama(path: Path, lines: int, seed: int) -> dict[str, Any]:
    """Write the current-format llama-server log and its figures unless both are there."""
    exp_path = path.with_name(path.name + ".expected.json")
    if path.is_file() and exp_path.is_file():
        doc: dict[str, Any] = json.loads(exp_path.read_text())
        if doc.get("format") == FORMAT:
            return doc
    print(f"generating {path} ({lines} lines, seed {seed})", file=sys.stderr)
    writer = LlamaCurrentWriter(seed)
    fig = write_lines(path, lines, writer)
    doc = {"format": FORMAT, **fig.as_json(), "llm_client_errors_total": dict(sorted(writer.client.items()))}
    exp_path.write_text(json.dumps(doc, indent=1) + "\n")
    return doc


def check_llama(text: str, exp: dict[str, Any]) -> list[str]:
    """Differences between the ``llamacpp`` output and the generator's figures."""
    problems: list[str] = []

    def total(name: str) -> float:
        return sum(v for _, v in samples(text, name))

    for name in ("llm_prompt_tokens_total", "llm_generation_tokens_total"):
        if total(name) != exp[name]:
            problems.append(f"{name}: want {exp[name]}, got {total(name):g}")
    got_out = {k: v for k, v in sum_by(text, "llm_requests_total", "outcome").items() if v}
    if got_out != {k: float(v) for k, v in exp["llm_requests_total"].items()}:
        problems.append(f"llm_requests_total: want {exp['llm_requests_total']}, got {got_out}")
    got_client = {k: v for k, v in sum_by(text, "llm_client_errors_total", "error_type").items() if v}
    want_client = {k: float(v) for k, v in exp["llm_client_errors_total"].items()}
    if got_client != want_client:
        problems.append(f"llm_client_errors_total: want {want_client}, got {got_client}")
    if total("backend_errors_total"):
        problems.append(f"backend_errors_total: want 0, got {total('backend_errors_total'):g}")
    for name, h in exp["histograms"].items():
        count, hsum = total(name + "_count"), total(name + "_sum")
        if count != h["count"] or not math.isclose(hsum, h["sum"], rel_tol=1e-6):
            problems.append(f"{name}: want count {h['count']} sum {h['sum']}, got {count:g} {hsum}")
    read = total("logmetrics_lines_read_total")
    if read != exp["lines"]:
        problems.append(f"logmetrics_lines_read_total: want {exp['lines']}, got {read:g}")
    return problems


def main(argv: list[str] | None = None) -> int:
    """Command line entry point."""
    args = rounds_parser(__doc__, 1_000_000, 5, "lines of each log").parse_args(argv)

    OUT.mkdir(exist_ok=True)
    compile_package(args.python)
    llama_log = OUT / f"llama-current-{args.lines}-{args.seed}.log"
    llama_exp = ensure_llama(llama_log, args.lines, args.seed)
    corpus = OUT / f"corpus-{args.lines}-{args.seed}.log"
    vllm_exp = ensure_corpus(corpus, args.lines, args.seed)
    base = [args.python, "-m", "logmetrics", "watch", "--oneshot", "--from-beginning"]
    tools = {"llamacpp": Tool("llamacpp", [*base, "--parser", "llamacpp", str(llama_log)],
                              OUT / "llama-current.prom", OUT / "llama-current.err"),
             "vllm": Tool("vllm", [*base, "--parser", "vllm", str(corpus)], OUT / "run.logmetrics.prom",
                          OUT / "run.logmetrics.err")}
    lines = {"llamacpp": int(llama_exp["lines"]), "vllm": int(vllm_exp["lines"])}
    print(f"llama.cpp log: {llama_log} ({lines['llamacpp']} lines, {llama_log.stat().st_size / 1e6:.1f} MB)")
    print(f"vLLM corpus: {corpus} ({lines['vllm']} lines, {corpus.stat().st_size / 1e6:.1f} MB)")
    rates: dict[str, list[float]] = {k: [] for k in tools}
    ratios: list[float] = []
    order = list(tools)
    for rnd in range(args.warmup + args.runs):
        this: dict[str, float] = {}
        for name in order if rnd % 2 == 0 else order[::-1]:
            tool = tools[name]
            run = measure(tool)
            if run.code != 0:
                sys.exit(f"FAIL: {name} exited with {run.code}: {tool.err.read_text(errors='replace')[-2000:]}")
            text = tool.out.read_text()
            problems = (check(text, vllm_exp, self_metrics=True) if name == "vllm"
                        else check_llama(text, llama_exp))
            if problems:
                sys.exit(f"FAIL: {name} output differs from the figures:\n  " + "\n  ".join(problems))
            this[name] = lines[name] / run.wall
            label = f"round {rnd - args.warmup + 1}" if rnd >= args.warmup else "warm-up"
            print(f"  {label:>8}  {name:<9} wall {run.wall:7.3f} s  cpu {run.cpu:7.3f} s  "
                  f"{this[name]:>10,.0f} lines/s  output OK", flush=True)
        if rnd >= args.warmup:
            for name, rate in this.items():
                rates[name].append(rate)
            ratios.append(this["llamacpp"] / this["vllm"])
    print()
    for name, rs in rates.items():
        print(f"{name:<9} lines/s: median {statistics.median(rs):,.0f} (best {max(rs):,.0f})")
    print(f"llamacpp / vllm lines/s, median of the per-round ratios: {statistics.median(ratios):.2f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
