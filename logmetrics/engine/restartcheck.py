"""A parser's saved state held to a restart of logmetrics: what one run counts, two runs with a
``--state-file`` between them must count too.

A restart can come between any two records. The engine then keeps the counters, the read positions
and each stream's ``Parser.state()`` (as JSON), and the new run's parser gets ``restore(state)``,
then ``learn`` of what was logged before the read position, and reads on. Whatever the parser
held in memory and left out of its state is lost at that point: a request in flight loses its
duration, a crash episode or a start-up under way counts a second time, an engine's last stats
line no longer bounds the next one's tokens. ``restart_differences`` finds those cases on a
sample: it restarts the parser at each record boundary (at most ``points`` of them, evenly
spread) and compares the counters and histograms with one run over the whole text.
"""

from __future__ import annotations

import json

from logmetrics.engine.fastcheck import batches, totals
from logmetrics.engine.parsing import run_parser
from logmetrics.events import Event
from logmetrics.plugins import Parser, record_rule
from logmetrics.records import Batch
from logmetrics.records.assembly import split_records
from logmetrics.store.catalog import BY_NAME

#: The restart points tried on one text, at most (each one reads the whole text again).
POINTS = 200


def _events(parser: Parser, text: str, now: float, failures: list[str]) -> list[Event]:
    """The parser's events on ``text``, cut into batches as one read would be; what it failed on
    goes to ``failures``."""
    def failed(_: Parser, exc: BaseException) -> None:
        failures.append(f"{type(exc).__name__}: {exc}")

    out: list[Event] = []
    for piece in batches(text, None, type(parser)):
        got, *_ = run_parser(parser, Batch("test", piece, now, piece.count("\n")), failed, True)
        out += got
    return out


def restart_differences(parser_cls: type[Parser], text: str, *, now: float = 0.0, points: int = POINTS,
                        most: int = 10) -> list[str]:
    """How runs with a restart differ from one run over ``text``: a line per counter or histogram
    series and restart point that differ (``most`` at the most), or the parser's first failure;
    empty if none do."""
    kinds = {fam.name: fam.kind for fam in (*BY_NAME.values(), *parser_cls.metrics)}
    kept = {"counter", "histogram"}

    def counted(events: list[Event]) -> dict[tuple[str, tuple[str, ...]], object]:
        return {key: value for key, value in totals(events, parser_cls).items() if kinds.get(key[0]) in kept}

    failures: list[str] = []
    whole = counted(_events(parser_cls(), text, now, failures))
    records = [r if r.endswith("\n") else r + "\n" for r in split_records(text, record_rule(parser_cls))]
    step = max(1, len(records) // max(1, points))
    out: list[str] = []
    for k in range(1, len(records), step):
        before, after = "".join(records[:k]), "".join(records[k:])
        first = parser_cls()
        events = _events(first, before, now, failures)
        state = json.loads(json.dumps(first.state()))
        second = parser_cls()
        second.restore(state)  # as the engine does: the state, then what was logged before
        second.learn(before)
        got = counted(events + _events(second, after, now, failures))
        if failures:
            return [f"restarted after record {k} of {len(records)}: the parser failed: {failures[0]}"]
        for key in sorted(whole.keys() | got.keys()):
            want, have = whole.get(key, 0.0), got.get(key, 0.0)
            if want != have:
                name = f"{key[0]}{{{','.join(key[1])}}}"
                out.append(f"restarted after record {k} of {len(records)}: {name} is {have!r}, one run gives {want!r}")
                if len(out) >= most:
                    return out
    return out
