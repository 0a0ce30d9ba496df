"""Memory stays bounded whatever a stream holds back: a line without end, CRI fragments or json-file
partial entries never finished, a record of indented lines that never ends, a stream no parser
claims. Each reads 1.5 MiB through the real engine (cap 4 KiB) under ``tracemalloc``: its peak stays
far below the input (holding the input once would already pass the bound)."""

from __future__ import annotations

import tracemalloc
from collections.abc import Iterator

import pytest

from tests.fuzzing import run

SIZE = 3 << 19  # 1.5 MiB
READ = 64 << 10
BOUND = 1 << 20  # peak bytes allocated during the run
BLOCKS = {
    "no-newline": b"y" * 1000,
    "cri-fragments": b"2024-05-01T10:00:00.1Z stdout P " + b"p" * 990 + b"\n",
    "json-partials": b'{"log":"' + b"d" * 990 + b'","stream":"stdout"}\n',
    "endless-traceback": b'  File "/app/x.py", line 12, in handler' + b" " * 60 + b"\n",
    "indented": b"    " + b"i" * 95 + b"\n",
    "unclaimed": b"qq " + bytes(range(32, 127)) + b"\n",
}


def reads(kind: str) -> Iterator[tuple[str, bytes]]:
    """``SIZE`` bytes of one kind, in reads of ``READ`` bytes, made as they are read."""
    if kind == "endless-traceback":
        yield ("/in/m.log", b"Traceback (most recent call last):\n")
    block = BLOCKS[kind]
    data = block * max(1, READ // len(block))
    for _ in range(SIZE // len(data)):
        yield ("/in/m.log", data)


#: Routing aside, what is held back is the envelope's and the cutter's; parsers matter for records.
CASES = [(kind, None) for kind in sorted(BLOCKS)] + [
    (kind, parser) for kind in ("endless-traceback", "indented") for parser in ("vllm", "whisper")]


@pytest.mark.parametrize(("kind", "parser"), CASES)
def test_memory_bounded(kind: str, parser: str | None) -> None:
    """Peak memory of a 1.5 MiB hostile stream stays under 1 MiB, and its lines are all read."""
    tracemalloc.start()
    try:
        got = run(reads(kind), parser=parser, envelope="auto", cap=4096)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert peak < BOUND, f"{kind}: peak {peak} bytes"
    assert got.total("logmetrics_lines_read_total") >= 1
    if kind in ("endless-traceback", "indented", "unclaimed"):
        assert got.total("logmetrics_lines_read_total") == sum(got.fed.values())
