"""The mixed corpus: one log file per backend in a directory, and the figures each must yield.

    python3 bench/gen_mix.py bench/out/mix-1000000-7 -n 1000000 --seed 7

Files (names a deployment would use, so that routing by name has something to go on) and their
shares of the lines:

    vllm.log                        40 %  vLLM: chatter and decoys, uvicorn access lines, V1 stats
                                          lines, single-line errors, aborts (``gen_corpus.Corpus``
                                          without its llama.cpp blocks)
    llama-server.log                30 %  llama-server (2025 format): slot launch / new prompt /
                                          progress / release lines, the per-request timing block
                                          (a header line and three timing lines), ``request:``
                                          lines, context-size and decode errors
    whisper.log                     12 %  LeapfrogAI whisper: task start, language, ``Processing
                                          audio with duration``, completion, errors (some followed
                                          by a traceback)
    faster-whisper.log               3 %  faster-whisper under Python's default logging format,
                                          with the ``VAD filter removed ... of audio`` decoy
    text-embeddings.log              7 %  LeapfrogAI text-embeddings: request start, tqdm progress
                                          bar, ``created K embeddings``, gRPC exceptions with a
                                          traceback
    text-embeddings-inference.log    8 %  text-embeddings-inference: span ``Success`` lines with
                                          durations in Rust's s / ms / µs notation, validation and
                                          overload errors

Every figure in ``expected.json`` is computed here from the values the generator draws (and prints
with the same rounding), never by parsing the files back.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))  # run as a script: find ``bench``
from bench.gen_backends import (
    EmbeddingsWriter,
    FasterWhisperWriter,
    Figures,
    LlamaWriter,
    TeiWriter,
    WhisperWriter,
    Writer,
)
from bench.gen_corpus import KIND_WEIGHTS, KINDS, Corpus

#: Version of the mixed expected.json; ``bench/run.py`` regenerates a cached corpus of another one.
MIX_FORMAT = 3
#: (file name, share of the lines)
FILES: tuple[tuple[str, float], ...] = (
    ("vllm.log", 0.40),
    ("llama-server.log", 0.30),
    ("whisper.log", 0.12),
    ("faster-whisper.log", 0.03),
    ("text-embeddings.log", 0.07),
    ("text-embeddings-inference.log", 0.08),
)




def write_vllm(path: Path, n: int, seed: int) -> Figures:
    """The vLLM file: the single-file corpus without its llama.cpp blocks."""
    weights = tuple(0 if k == "llama" else w for k, w in zip(KINDS, KIND_WEIGHTS, strict=True))
    corpus = Corpus(seed)
    exp = corpus.write(path, n, weights)
    fig = Figures(lines=exp.lines, http=exp.requests, errors=sum(exp.error_types.values()),
                  errors_per_record=sum(exp.error_records.values()), gauges=exp.gauges,
                  unchecked=("llm_prompt_tokens_total", "llm_generation_tokens_total"))
    fig.outcomes["aborted"] = exp.aborted
    fig.outcomes["ok"] = exp.ok
    return fig


def write_lines(path: Path, n: int, writer: Writer) -> Figures:
    """Write whole events until ``n`` lines are there (the last event may end a few lines later)."""
    written = 0
    with path.open("w", encoding="utf-8", newline="\n") as f:
        buf: list[str] = []
        while written < n:
            lines = writer.event()
            buf.extend(lines)
            written += len(lines)
            if len(buf) >= 4096:
                f.write("\n".join(buf) + "\n")
                buf.clear()
        if buf:
            f.write("\n".join(buf) + "\n")
    writer.fig.lines = written
    return writer.fig


WRITERS: dict[str, Callable[[int], Writer]] = {
    "llama-server.log": LlamaWriter,
    "whisper.log": WhisperWriter,
    "faster-whisper.log": FasterWhisperWriter,
    "text-embeddings.log": EmbeddingsWriter,
    "text-embeddings-inference.log": TeiWriter,
}


def write_mix(out: Path, n: int, seed: int) -> dict[str, Any]:
    """Write the mixed corpus into directory ``out`` and ``out/../<out>.expected.json``; return it."""
    out.mkdir(parents=True, exist_ok=True)
    files: dict[str, Any] = {}
    for i, (name, share) in enumerate(FILES):
        lines = max(1, round(n * share))
        file_seed = seed * 1000 + i
        if name == "vllm.log":
            fig = write_vllm(out / name, lines, file_seed)
        else:
            fig = write_lines(out / name, lines, WRITERS[name](file_seed))
        files[name] = fig.as_json()
    doc = {"format": MIX_FORMAT, "lines": sum(f["lines"] for f in files.values()), "files": files}
    expected_path(out).write_text(json.dumps(doc, indent=1) + "\n")
    return doc


def expected_path(out: Path) -> Path:
    """Where the expected figures of the corpus in directory ``out`` go: beside it, not inside it
    (a file inside would be read as one more log)."""
    return out.with_name(out.name + ".expected.json")


def main(argv: list[str] | None = None) -> int:
    """Command line entry point."""
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("out", type=Path, metavar="DIR", help="the directory to write one log per backend into")
    ap.add_argument("-n", "--lines", type=int, default=1_000_000, help="lines in all (default 1,000,000)")
    ap.add_argument("--seed", type=int, default=7, help="random seed (default 7)")
    args = ap.parse_args(argv)
    if args.lines < 1:
        ap.error("--lines must be at least 1")
    doc = write_mix(args.out, args.lines, args.seed)
    shares = ", ".join(f"{name} {f['lines']}" for name, f in doc["files"].items())
    print(f"wrote {doc['lines']} lines to {args.out}/ ({shares}) and {expected_path(args.out)}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
