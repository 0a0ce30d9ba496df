"""A parser's fast path held to ``parse``: both run on the same text, cut into batches the way the
engine cuts reads, and compared as the store would see them.

``logmetrics.testing.assert_fast_path_matches`` raises on the differences (a parser's own tests);
``logmetrics check`` lists them (``problems``), with the fast path's failures and the events of
it the engine would refuse.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable
from typing import NamedTuple

from logmetrics.engine.parsing import run_parser
from logmetrics.events import Event, values_of
from logmetrics.plugins import Parser, has_fast_path, record_rule
from logmetrics.records import Batch, RecordAssembler
from logmetrics.store.catalog import BY_NAME
from logmetrics.store.store import Store

Totals = dict[tuple[str, tuple[str, ...]], object]
#: The batch size ``logmetrics check`` runs a fast path in (about one read of a busy file).
CHECK_BATCH = 64 * 1024


class Outcome(NamedTuple):
    """A parser's run over a text: totals, records and lines matched, its final state, the
    records (or lines of runs) it failed on and the first failure, and every event."""

    totals: Totals
    matched: int
    lines: int
    state: object
    errors: int
    failure: str
    events: list[Event]


def batches(text: str, size: int | None, parser_cls: type[Parser]) -> list[str]:
    """``text`` cut into batches of whole records under the parser's record rule, the way the
    engine cuts reads of about ``size`` characters (None: one batch)."""
    assembler = RecordAssembler(record_rule(parser_cls))
    out: list[str] = []
    buf = ""
    for line in text.splitlines(keepends=True):
        buf += line
        if size is not None and len(buf) >= size:
            out.append(assembler.feed(buf)[0])
            buf = ""
    out += [assembler.feed(buf)[0], assembler.flush()[0]]
    return [piece for piece in out if piece]


def totals(events: Iterable[Event], parser_cls: type[Parser], digits: int = 9) -> Totals:
    """What the store makes of ``events``: counters summed (those that stay at 0 left out: zero
    series are the engine's), gauges' last values, histogram observations sorted; rounded to
    ``digits`` decimals and 14 significant digits (sums of floats in another order)."""
    kinds = {fam.name: fam.kind for fam in (*BY_NAME.values(), *parser_cls.metrics)}
    out: dict[tuple[str, tuple[str, ...]], float | list[float]] = {}
    for e in events:
        key = (e.metric, e.labels)
        kind = kinds.get(e.metric)
        if kind == "histogram":
            seen = out.setdefault(key, [])
            assert isinstance(seen, list)
            seen.extend(values_of(e))
        elif kind == "gauge":
            out[key] = sum(values_of(e))
        else:
            old = out.get(key, 0.0)
            assert isinstance(old, float)
            out[key] = old + sum(values_of(e))
    return {k: sorted(_rounded(x, digits) for x in v) if isinstance(v, list) else _rounded(v, digits)
            for k, v in out.items() if isinstance(v, list) or v or kinds.get(k[0]) == "gauge"}


def _rounded(x: float, digits: int) -> float:
    """``x`` to ``digits`` decimals and at most 14 significant digits: a sum of large counts taken in
    another order (or exactly, as a fast path may) differs in its last digits only."""
    return float(f"{round(x, digits):.14g}")


def run(parser_cls: type[Parser], text: str, size: int | None, *, fast: bool = True, now: float = 0.0,
        prepare: Callable[[Parser], None] | None = None, state: Callable[[Parser], object] | None = None,
        digits: int = 9) -> Outcome:
    """A new parser on ``text`` in batches: through its fast path (``fast``: its ``parse_batch``,
    or the runs of its ``frequent`` lines through ``parse_run``), or record by record through
    ``parse`` alone; ``prepare(parser)`` first. A batch its ``parse_batch`` fails on is lost, as
    the engine loses it."""
    parser = parser_cls()
    if prepare is not None:
        prepare(parser)
    events: list[Event] = []
    matched = lines = errors = 0
    failures: list[str] = []

    def failed(_: Parser, exc: BaseException) -> None:
        failures.append(f"{type(exc).__name__}: {exc}")

    for piece in batches(text, size, parser_cls):
        got, n, k, e, _ = run_parser(parser, Batch("test", piece, now, piece.count("\n")), failed, fast)
        errors += e
        events += got
        matched += n
        lines += k
    return Outcome(totals(_valid(events), parser_cls, digits), matched, lines, (state or parser_cls.state)(parser),
                   errors, failures[0] if failures else "", events)


def refused(parser_cls: type[Parser], events: Iterable[Event]) -> list[tuple[object, str]]:
    """The events of ``events`` the engine would refuse for this parser, each with the reason."""
    store = Store()
    store.register(parser_cls.metrics)
    quiet = logging.getLogger("logmetrics.store.store")
    level = quiet.level
    quiet.setLevel(logging.ERROR)  # the reasons come back here; no warnings on the caller's output
    try:
        return store.apply(events, parser_cls.name or "test", "test")
    finally:
        quiet.setLevel(level)


def differences(want: Outcome, got: Outcome, lines: bool = True, most: int = 20) -> list[str]:
    """How the fast path's run (``got``) differs from ``parse``'s (``want``): the series whose
    totals differ (``most`` at the most), records and (``lines``) lines matched, final state."""
    out: list[str] = []
    for key in sorted(want.totals.keys() | got.totals.keys()):
        w, g = want.totals.get(key), got.totals.get(key)
        if w == g:
            continue
        name = f"{key[0]}{{{','.join(key[1])}}}"
        if isinstance(w, list) or isinstance(g, list):
            ws, gs = w if isinstance(w, list) else [], g if isinstance(g, list) else []
            extra, gone = sorted(set(gs) - set(ws))[:5], sorted(set(ws) - set(gs))[:5]
            out.append(f"{name}: parse observes {len(ws)} values, the fast path {len(gs)}"
                       f" (only in the fast path: {extra}, only in parse: {gone})")
        else:
            out.append(f"{name}: parse gives {_said(w)}, the fast path {_said(g)}")
    if len(out) > most:
        out[most:] = [f"... and {len(out) - most} more series"]
    counts = [("records matched", want.matched, got.matched), ("state", want.state, got.state)]
    if lines:
        counts.insert(1, ("lines matched", want.lines, got.lines))
    out += [f"{what}: parse gives {w!r}, the fast path {g!r}" for what, w, g in counts if w != g]
    return out


def problems(parser_cls: type[Parser], text: str, time: float, names: tuple[str, ...]) -> list[str]:
    """What is wrong with the parser's fast path on ``text`` (a stream named ``names``): where it
    fails, events of it the engine would refuse, and how it differs from ``parse``; none for a
    parser without one."""
    if not has_fast_path(parser_cls):
        return []

    def prepare(parser: Parser) -> None:
        parser.named(names)

    want = run(parser_cls, text, CHECK_BATCH, fast=False, now=time, prepare=prepare)
    got = run(parser_cls, text, CHECK_BATCH, fast=True, now=time, prepare=prepare)
    out = [f"it failed on {got.errors} records or lines of runs ({got.failure})"] if got.errors > want.errors else []
    bad = refused(parser_cls, got.events)
    if bad:
        out.append(f"{len(bad)} of its events would be refused (first: {bad[0][0]!r}: {bad[0][1]})")
    if not out:  # a fast path that fails or makes refused events differs anyway: said once
        out += differences(want, got, lines=False)
    return out


def _said(total: object) -> str:
    """A series' total as a difference states it (``None``: the run made no such series)."""
    return "no such series" if total is None else repr(total)


def _valid(events: list[Event]) -> list[Event]:
    """The events the totals can add up (a malformed one is refused by the engine, and listed apart)."""
    return [e for e in events if isinstance(e, Event) and isinstance(e.labels, tuple)
            and all(isinstance(v, (int, float)) for v in values_of(e))]
