"""Shared pieces of the fuzz tests: hostile input strategies and a run through the real engine.

A run cuts each stream's bytes into lines with the tailer's own ``LineCutter`` (at a low
``max_line_bytes``, so that huge lines cost little), feeds them to an ``Engine`` over a ``Store``
in the order given (streams interleaved), then ends the input as the runner does (``flush`` of
each cutter, ``finish``, ``idle(force=True)``). ``check_store`` holds what must be true of any
store whatever the input.
"""

from __future__ import annotations

import json
import math
import os
import re
import time
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path

from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from prometheus_client import generate_latest

from logmetrics.engine.engine import Engine
from logmetrics.engine.parsing import Applier
from logmetrics.engine.streams import Stream
from logmetrics.envelopes.unwrap import Unwrapper
from logmetrics.plugins import discover
from logmetrics.sources.chunks import Chunk
from logmetrics.sources.tailfile import LineCutter
from logmetrics.store.catalog import SELF_BY_NAME
from logmetrics.store.exposition import make_registry
from logmetrics.store.store import Store

ROOT = Path(__file__).resolve().parent.parent
PARSERS = discover()
CAP = 512  # the line-length cap of the fuzz runs: huge lines stay cheap
LABEL_MAX = 256  # no label value that comes from log text is longer than this
#: Modest, deterministic, no deadline: these run the whole engine per example. A longer hunt:
#: ``LOGMETRICS_FUZZ_EXAMPLES=1000 LOGMETRICS_FUZZ_SEED=random pytest tests/test_fuzz*.py``.
EXAMPLES = int(os.environ.get("LOGMETRICS_FUZZ_EXAMPLES", "25"))
FUZZ = settings(max_examples=EXAMPLES, deadline=None, database=None,
                derandomize=os.environ.get("LOGMETRICS_FUZZ_SEED") != "random",
                suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])


def sample_lines(name: str) -> list[bytes]:
    """The non-empty lines of a parser's sample logs (with their newline)."""
    out: list[bytes] = []
    for path in sorted((ROOT / "samples" / name).glob("*.log")):
        out += [line + b"\n" for line in path.read_bytes().split(b"\n") if line.strip()]
    return out


SAMPLES = {name: sample_lines(name) for name in sorted(PARSERS)}
ALL_SAMPLES = [line for lines in SAMPLES.values() for line in lines]

# --- strategies -----------------------------------------------------------------------------------

#: Numbers where a parser expects a count, a duration, a size: huge, negative, not numbers at all.
WEIRD_NUMBERS = ["-1", "-0", "0", "1e309", "-1e309", "nan", "NaN", "inf", "-inf", "Infinity", "1" * 400,
                 "-" + "9" * 40, "0x1f", "1_000", "١٢٣", "1.2.3", "", "9" * 20 + ".5", "1e-400"]
#: Characters that break assumptions: NUL, line separators ``str.splitlines`` honours, a lone
#: escape, a surrogate's UTF-8 form, a BOM, right-to-left marks, combining marks.
WEIRD_CHARS = ["\x00", "\r", "\x0b", "\x0c", "\x1c", "\x1e", "\x85", "\u2028", "\u2029", "\x1b", "\x1b[31m",
               "\x1b]0;t\x07", "\ufeff", "\u202e", "e\u0301", "\ud7ff", "😀", "中", "\t", " ", '"', "'", "\\"]
WEIRD_BYTES = [b"\xff", b"\xfe\xff", b"\xc3", b"\xe2\x82", b"\xed\xa0\x80", b"\xf4\x90\x80\x80", b"\xc0\xaf", b"\x80"]


@st.composite
def mutated(draw: st.DrawFn, line: bytes) -> bytes:
    """``line`` almost as a parser expects it: characters dropped, duplicated or replaced, numbers
    made huge, negative or not numbers, invalid bytes put in, cut at a random point."""
    out = bytearray(line.rstrip(b"\n"))
    for _ in range(draw(st.integers(1, 4))):
        op = draw(st.sampled_from(["drop", "dup", "replace", "number", "bytes", "cut", "long"]))
        at = draw(st.integers(0, len(out)))
        if op == "drop" and out:
            end = min(len(out), at + draw(st.integers(1, 8)))
            del out[at:end]
        elif op == "dup":
            out[at:at] = out[at:at + draw(st.integers(1, 16))]
        elif op == "replace":
            out[at:at + 1] = draw(st.sampled_from(WEIRD_CHARS)).encode()
        elif op == "number":
            text = out.decode("utf-8", "surrogateescape")
            digits = [i for i, c in enumerate(text) if c.isdigit() and (i == 0 or not text[i - 1].isdigit())]
            if digits:
                start = draw(st.sampled_from(digits))
                end = start
                while end < len(text) and (text[end].isdigit() or text[end] == "."):
                    end += 1
                text = text[:start] + draw(st.sampled_from(WEIRD_NUMBERS)) + text[end:]
                out = bytearray(text.encode("utf-8", "surrogateescape"))
        elif op == "bytes":
            out[at:at] = draw(st.sampled_from(WEIRD_BYTES))
        elif op == "cut":
            del out[at:]
        elif op == "long":  # a name (a model id, a path segment) made one long token
            m = _TOKEN.search(bytes(out), at) or _TOKEN.search(bytes(out))
            if m:
                token = m.group()
                out[m.start():m.end()] = (token * (CAP // len(token)))[:draw(st.integers(257, CAP - 60))]
    return bytes(out) + b"\n"


_TOKEN = re.compile(rb"[A-Za-z][\w.\-/]{2,}")


def almost(lines: list[bytes]) -> st.SearchStrategy[bytes]:
    """A line of ``lines`` as it is, or mutated."""
    return st.sampled_from(lines).flatmap(lambda line: st.one_of(st.just(line), mutated(line)))


#: A hostile line: random bytes, invalid UTF-8, NUL bytes, a line past the cap (with or without
#: its newline), blank lines, weird characters.
HOSTILE_LINE = st.one_of(
    st.binary(max_size=200).map(lambda b: b.replace(b"\n", b" ") + b"\n"),
    st.binary(max_size=64),  # no newline of its own: joins the next line
    st.integers(CAP - 2, 6 * CAP).map(lambda n: b"x" * n + b"\n"),
    st.integers(CAP, 3 * CAP).map(lambda n: b"\x00" * n),
    st.lists(st.sampled_from(WEIRD_CHARS), max_size=20).map(lambda cs: "".join(cs).encode() + b"\n"),
    st.sampled_from([b"\n", b"\r\n", b"\n\n\n", b"    indented\n", b"Traceback (most recent call last):\n"]),
)


def lines_for(name: str | None) -> st.SearchStrategy[bytes]:
    """Lines for a parser (its samples, almost matching), or for any parser: mostly almost right."""
    pool = SAMPLES[name] if name is not None else ALL_SAMPLES
    return st.one_of(almost(pool), almost(pool), HOSTILE_LINE)


@st.composite
def chunked(draw: st.DrawFn, data: bytes) -> list[bytes]:
    """``data`` cut at random points (reads end anywhere, even inside a UTF-8 character)."""
    cuts = sorted(draw(st.lists(st.integers(0, len(data)), max_size=6)))
    return [data[a:b] for a, b in zip([0, *cuts], [*cuts, len(data)], strict=True) if b > a]


# --- a run through the engine ---------------------------------------------------------------------

class CountingApplier(Applier):
    """The engine's parser runs, counting the lines that reach a parser's records stage per source."""

    def __init__(self, store: Store, unwrappers: dict[str, Unwrapper], parsed: dict[str, int]) -> None:
        super().__init__(store, unwrappers)
        self.parsed = parsed

    def records(self, stream: Stream, text: str, lines: int) -> None:
        if text and stream.parser is not None:
            self.parsed[stream.source] = self.parsed.get(stream.source, 0) + lines
        super().records(stream, text, lines)


class CountingEngine(Engine):
    """The engine, counting the lines that reach a parser's records stage per source."""

    def __init__(self, *args: object, **kwargs: object) -> None:
        super().__init__(*args, **kwargs)  # type: ignore[arg-type]  # passed through unchanged
        self.parsed: dict[str, int] = {}
        self.applier = CountingApplier(self.store, self.unwrappers, self.parsed)


@dataclass
class Run:
    """What a run fed and what the engine made of it."""

    store: Store
    engine: CountingEngine
    fed: dict[str, int] = field(default_factory=dict)  # lines handed to the engine, per path
    cut: dict[str, int] = field(default_factory=dict)  # lines the cutter cut at the cap, per path

    def counter(self, name: str, *labels: str) -> float:
        """One of the engine's own counters (0 if absent)."""
        return self.store.counters.get((name, labels), 0.0)

    def total(self, name: str) -> float:
        """The sum of a family's counter series."""
        return sum(v for (n, _), v in self.store.counters.items() if n == name)


def run(chunks: Iterable[tuple[str, bytes]], parser: str | None = None, envelope: str = "none",
        cap: int = CAP, idle_every: int = 0) -> Run:
    """Feed ``(path, bytes)`` reads in order through line cutters and the engine, then end the input."""
    store = Store()
    engine = CountingEngine(PARSERS, store, parser=parser, envelope=envelope, max_line_bytes=cap,
                            lines_truncated={}, hold=0.0)
    out = Run(store, engine)
    cutters: dict[str, LineCutter] = {}

    def feed(path: str, data: bytes) -> None:
        if data:
            out.fed[path] = out.fed.get(path, 0) + data.count(b"\n")
            engine.feed(Chunk(path, data, time.time()))

    for i, (path, data) in enumerate(chunks):
        cutter = cutters.get(path)
        if cutter is None:
            cutter = cutters[path] = LineCutter(cap)
        feed(path, cutter.feed(data))
        if idle_every and i % idle_every == 0:
            engine.idle()
    for path, cutter in cutters.items():
        feed(path, cutter.flush())
        out.cut[path] = cutter.truncated
    engine.finish()
    engine.idle(force=True)
    return out


def check_store(store: Store) -> None:
    """No value NaN, infinite or (for counters and histograms) negative; label values valid
    UTF-8 and bounded; the exposition renders."""
    for (name, labels), value in store.counters.items():
        assert math.isfinite(value) and value >= 0, (name, labels, value)
        check_labels(store, name, labels)
    for (name, labels), value in store.gauges.items():
        assert math.isfinite(value), (name, labels, value)
        check_labels(store, name, labels)
    for (name, labels), hist in store.histograms.items():
        assert all(b >= 0 for b in hist.buckets) and sum(hist.buckets) == hist.count, (name, labels)
        assert math.isfinite(hist.sum) and hist.sum >= 0, (name, labels, hist.sum)
        check_labels(store, name, labels)
    body = generate_latest(make_registry(store))
    body.decode("utf-8")


def check_labels(store: Store, name: str, labels: tuple[str, ...]) -> None:
    """Label values are strings, encode as UTF-8, and (but the source, a path) are bounded."""
    fam = SELF_BY_NAME.get(name) or store.families.get(name)
    if fam is None:
        names: tuple[str, ...] = ("?",) * len(labels)
    else:
        names = fam.labels if name in SELF_BY_NAME else ("backend", "source", *fam.labels)
    for label, value in zip(names, labels, strict=False):
        assert isinstance(value, str), (name, labels)
        value.encode("utf-8")
        if label != "source":
            assert len(value) <= LABEL_MAX, (name, label, value[:80])


def json_line(obj: object) -> bytes:
    """One JSON object as a line."""
    return json.dumps(obj).encode() + b"\n"
