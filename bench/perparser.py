#!/usr/bin/env python3
"""Lines per second of each built-in parser on a log of its own current format, side by side.

Each log is written by the generators of the mixed corpus (``gen_backends``, ``gen_mix``): vLLM
V1 (stats, access and error lines), llama-server's current format (time since start and a level
on every line) and its older one, LeapfrogAI's whisper and faster-whisper, LeapfrogAI's
embeddings and text-embeddings-inference; and, written here, a FastAPI gateway's uvicorn access
lines behind a time prefix whose paths carry ids (templated to a few routes). Rounds take turns
(the order flips every round, after one unrecorded warm-up round); each run is

    logmetrics watch --oneshot --from-beginning --parser PARSER LOG

and must read every line of its log (``logmetrics_lines_read_total``). It prints, per log, the
median lines/s and its ratio to the fastest, so that the worst parser is seen against the best in
the same run.

    python3 bench/perparser.py                       # 300,000 lines each, 3 rounds
    python3 bench/perparser.py --lines 1000000 --runs 5
"""

from __future__ import annotations

import random
import statistics
import sys
from collections.abc import Callable
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))  # run as a script: find ``bench``
from bench.gen_backends import (
    EmbeddingsWriter,
    FasterWhisperWriter,
    LlamaCurrentWriter,
    LlamaWriter,
    TeiWriter,
    WhisperWriter,
    Writer,
)
from bench.gen_mix import write_lines, write_vllm
from bench.run import OUT, Tool, compile_package, measure, rounds_parser, samples


def write_api(path: Path, n: int, seed: int) -> None:
    """uvicorn access lines behind a logging config's time, paths with ids (``/v1/files/<hex>/...``)."""
    rng = random.Random(seed)
    routes = ("/openai/v1/files/{}/content/{}", "/openai/v1/threads/thread_{}/messages/{}", "/openai/v1/models")
    with path.open("w", encoding="utf-8") as f:
        buf = []
        for i in range(n):
            route = rng.choice(routes).format(f"{rng.getrandbits(64):016x}", rng.randint(1, 9999))
            code = rng.choice((200, 200, 200, 201, 404, 500))
            buf.append(f"2026-09-09 12:{i // 60000 % 60:02d}:{i // 1000 % 60:02d} +0000 INFO:     10.0.{i % 250}.7:"
                       f"{40000 + i % 20000} - \"{rng.choice(('GET', 'POST'))} {route} HTTP/1.1\" {code} OK\n")
            if len(buf) >= 4096:
                f.write("".join(buf))
                buf.clear()
        f.write("".join(buf))


def _writer(make: Callable[[int], Writer]) -> Callable[[Path, int, int], None]:
    def write(path: Path, n: int, seed: int) -> None:
        write_lines(path, n, make(seed))
    return write


def _vllm(path: Path, n: int, seed: int) -> None:
    write_vllm(path, n, seed)


#: (name, parser, how its log is written)
LOGS: tuple[tuple[str, str, Callable[[Path, int, int], None]], ...] = (
    ("vllm-v1", "vllm", _vllm),
    ("llama-server-current", "llamacpp", _writer(LlamaCurrentWriter)),
    ("llama-server-2024", "llamacpp", _writer(LlamaWriter)),
    ("whisper-leapfrogai", "whisper", _writer(WhisperWriter)),
    ("faster-whisper", "whisper", _writer(FasterWhisperWriter)),
    ("embeddings-leapfrogai", "embeddings", _writer(EmbeddingsWriter)),
    ("text-embeddings-inference", "embeddings", _writer(TeiWriter)),
    ("api-access-ids", "api", write_api),
)


def main(argv: list[str] | None = None) -> int:
    """Command line entry point."""
    args = rounds_parser(__doc__, 300_000, 3, "lines of each log (about; whole events)").parse_args(argv)

    OUT.mkdir(exist_ok=True)
    compile_package(args.python)
    tools: dict[str, tuple[Tool, int]] = {}
    for name, parser, write in LOGS:
        log = OUT / f"perparser-{name}-{args.lines}-{args.seed}.log"
        if not log.is_file():
            print(f"generating {log}", file=sys.stderr)
            write(log, args.lines, args.seed)
        with log.open("rb") as f:
            lines = sum(chunk.count(b"\n") for chunk in iter(lambda: f.read(1 << 20), b""))
        cmd = [args.python, "-m", "logmetrics", "watch", "--oneshot", "--from-beginning", "--parser", parser, str(log)]
        tools[name] = (Tool(name, cmd, OUT / f"perparser-{name}.prom", OUT / f"perparser-{name}.err"), lines)
    rates: dict[str, list[float]] = {name: [] for name in tools}
    order = list(tools)
    for rnd in range(args.warmup + args.runs):
        for name in order if rnd % 2 == 0 else order[::-1]:
            tool, lines = tools[name]
            run = measure(tool)
            if run.code != 0:
                sys.exit(f"FAIL: {name} exited with {run.code}: {tool.err.read_text(errors='replace')[-2000:]}")
            read = sum(v for _, v in samples(tool.out.read_text(), "logmetrics_lines_read_total"))
            if read != lines:
                sys.exit(f"FAIL: {name}: read {read:g} lines of {lines}")
            if rnd >= args.warmup:
                rates[name].append(lines / run.wall)
            label = f"round {rnd - args.warmup + 1}" if rnd >= args.warmup else "warm-up"
            print(f"  {label:>8}  {name:<26} wall {run.wall:7.3f} s  {lines / run.wall:>10,.0f} lines/s", flush=True)
    medians = {name: statistics.median(rs) for name, rs in rates.items()}
    best = max(medians.values())
    print("\n| log (parser) | lines | lines/s, median | / fastest |\n| --- | --- | --- | --- |")
    for (name, parser, _), (_, lines) in zip(LOGS, tools.values(), strict=True):
        print(f"| {name} (`{parser}`) | {lines:,} | {medians[name]:,.0f} | {medians[name] / best:.2f} |")
    print(f"\nworst / best: {min(medians.values()) / best:.2f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
