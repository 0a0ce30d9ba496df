"""Parsers run the engine's way: a stream's records through its parser (its fast path, or record by
record), the zero series and readiness the engine adds, the static model label set, the events
applied to the store and the lines matched and unmatched counted."""

from __future__ import annotations

import logging
import re
import shlex
from collections.abc import Callable

from logmetrics.engine.ahead import Ahead
from logmetrics.engine.streams import Stream
from logmetrics.envelopes.unwrap import Unwrapper
from logmetrics.events import Event
from logmetrics.plugins import PLUGIN_ERRORS, Parser, has_own_batch, record_rule, start_zeros
from logmetrics.plugins.fastpath import Run, Runs, runs
from logmetrics.records import Batch, Record, split_records
from logmetrics.store.store import READY, Store

log = logging.getLogger("logmetrics.engine.engine")  # the engine's messages, under one name

UNROUTED = "none"
NO_MATCH_LINES = 1000  # a routed stream whose first this many lines all go unmatched gets a warning


def parse_records(parser: Parser, batch: Batch, raised: Callable[[Parser, BaseException], None] | None = None,
                  fast: bool = True) -> tuple[list[Event], int, int, int, list[str]]:
    """A stream's records run the engine's way, for a parser without a ``parse_batch`` of its own:
    the runs of its frequent lines (``Parser.frequent``, unless not ``fast``) through ``parse_run``,
    and each other record that passes the prefilter through ``parse``. Gives the events, the
    records matched, their physical lines, the records that raised (each given to ``raised``), and
    the parser's model after each record or run that gave events, when it changed (a model the log
    leaves within the batch has its zero series too)."""
    text = batch.text
    counts = _Counts()
    pattern = _frequent(parser, text, raised) if fast else None
    pos = 0
    if pattern is not None:
        for start, end in pattern.spans(text):
            if start > pos:
                _records(parser, text[pos:start], batch.time, counts, raised)
            pos = end + 1
            lines = text.count("\n", start, end) + 1
            try:
                got, n = parser.parse_run(Run(text, start, end, batch.time))
                got = list(got)
                _check_count("parse_run", n, "lines gave events, of a run of", lines)
            except PLUGIN_ERRORS as exc:  # the run is lost (parse_run may have seen some of it)
                counts.errors += lines
                if raised is not None:
                    raised(parser, exc)
                continue
            if got:
                counts.gave(parser, got, n, n)
    if pos < len(text):
        _records(parser, text[pos:] if pos else text, batch.time, counts, raised)
    return counts.events, counts.matched, counts.lines, counts.errors, counts.models


class _Counts:
    """What ``parse_records`` adds up over a batch."""

    __slots__ = ("errors", "events", "lines", "matched", "model", "models")

    def __init__(self) -> None:
        self.events: list[Event] = []
        self.models: list[str] = []
        self.matched = self.lines = self.errors = 0
        self.model: str | None = None

    def gave(self, parser: Parser, events: list[Event], records: int, lines: int) -> None:
        self.events += events
        self.matched += records
        self.lines += lines
        if parser.model != self.model:
            self.model = parser.model
            self.models.append(self.model)


def _frequent(parser: Parser, text: str,
              raised: Callable[[Parser, BaseException], None] | None) -> Runs | None:
    """The pattern of runs of the parser's frequent lines for this batch (None: no fast path, or
    asking for it raised, or its pattern does not compile)."""
    try:
        line = parser.frequent_lines(text)
        return runs(line, parser.shapes) if line and isinstance(line, str) else None
    except (*PLUGIN_ERRORS, re.error) as exc:
        if raised is not None:
            raised(parser, exc)
        return None


def _records(parser: Parser, text: str, time: float | None, counts: _Counts,
             raised: Callable[[Parser, BaseException], None] | None) -> None:
    """``parse`` on each record of ``text`` that passes the prefilter."""
    pre = parser.prefilter
    for record in split_records(text, record_rule(type(parser))):
        if pre and not any(p in record for p in pre):
            continue
        try:
            got = list(parser.parse(Record(record, time)))
        except PLUGIN_ERRORS as exc:
            counts.errors += 1
            if raised is not None:
                raised(parser, exc)
            continue
        if got:
            counts.gave(parser, got, 1, record.count("\n") + 1)


def fast_records(parser: Parser, batch: Batch) -> tuple[list[Event], int, int, list[str]]:
    """A parser's own ``parse_batch`` on ``batch``: its events, the records matched, their
    physical lines (one per matched record, for a ``parse_batch`` that does not say) and the models
    it passed through. ValueError if it claims more than the batch holds, or a count that is no count."""
    result = parser.parse_batch(batch)
    events, matched = list(result[0]), result[1]
    lines = result[2] if len(result) > 2 else matched
    models = [m for m in result[3] if isinstance(m, str)] if len(result) > 3 else []
    most = batch.lines
    if any(isinstance(n, int) and n > most for n in (matched, lines)):  # (counted only then: a scan of the text)
        most = max(most, batch.text.count("\n") + 1)
        if any(isinstance(n, int) and n > most for n in (matched, lines)):  # a parser may end lines at a lone \r
            most += batch.text.count("\r")
    _check_count("parse_batch", matched, "records matched, of a batch of", most)
    _check_count("parse_batch", lines, "lines matched, of a batch of", most)
    return events, matched, lines, models


def _check_count(who: str, n: object, what: str, most: int) -> None:
    """ValueError unless ``n`` (what ``who`` said) is a count from 0 to ``most``."""
    if not isinstance(n, int) or isinstance(n, bool) or not 0 <= n <= most:
        raise ValueError(f"{who} said {n!r} {what} {most} lines")


def run_parser(parser: Parser, batch: Batch, raised: Callable[[Parser, BaseException], None],
               fast: bool = True) -> tuple[list[Event], int, int, int, list[str]]:
    """A batch through its parser the engine's way: its own ``parse_batch`` (if ``fast``), else
    ``parse_records``. Gives what ``parse_records`` gives."""
    if not fast or not has_own_batch(type(parser)):
        return parse_records(parser, batch, raised, fast)
    try:
        events, matched, lines, models = fast_records(parser, batch)
    except PLUGIN_ERRORS as exc:
        # The parser may have seen some of these records: running them again would advance its
        # state twice. The batch is lost, counted and reported with its own exception.
        raised(parser, exc)
        return [], 0, 0, len(split_records(batch.text, record_rule(type(parser)))), []
    return events, matched, lines, 0, models


def relabel(events: list[Event], model: str, at: dict[str, int]) -> list[Event]:
    """The events with their model label (at position ``at[metric]`` of their own labels) set to
    the static one (few per batch)."""
    out: list[Event] = []
    for ev in events:
        try:
            i = at.get(ev.metric)
            if i is not None and i < len(ev.labels) and ev.labels[i] != model:
                ev = ev._replace(labels=(*ev.labels[:i], model, *ev.labels[i + 1:]))
        except (AttributeError, TypeError):  # a malformed event: the store refuses and counts it
            pass
        out.append(ev)
    return out


class Applier:
    """Runs each stream's parser on its records and applies what it gives to the store, with the
    engine's own figures (lines matched and unmatched, parse errors). ``unwrappers``: the engine's,
    by raw stream, for what a warning says of a stream's envelope."""

    def __init__(self, store: Store, unwrappers: dict[str, Unwrapper]) -> None:
        self.store = store
        self.unwrappers = unwrappers
        #: where batches wait for their prescan (``logmetrics.engine.ahead``), if they do
        self.ahead: Ahead | None = None
        self._warned: set[str] = set()
        # where the model label sits in each family's own labels, for --label model=...
        self._model_at = {f.name: f.labels.index("model") for f in store.families.values() if "model" in f.labels}

    def tick(self, stream: Stream, parser: Parser, now: float) -> bool:
        """A parser's time-driven events (``Parser.tick``), applied like a batch's; whether there were any."""
        try:
            events = list(parser.tick(now))
        except PLUGIN_ERRORS as exc:
            self.raised(parser, exc)
            return False
        if events:
            if stream.model is not None:
                events = relabel(events, stream.model, self._model_at)
            self.store.apply(events, parser.name, stream.source)
        return bool(events)

    def readiness(self, stream: Stream) -> None:
        """After ``learn`` or ``restore``: the model the parser says the backend is ready with, to
        say with the stream's next batch (the line that said so is not read again)."""
        assert stream.parser is not None
        try:
            ready = stream.parser.readiness()
        except PLUGIN_ERRORS as exc:
            self.raised(stream.parser, exc)
            ready = None
        stream.announce = ready if isinstance(ready, str) and ready else None

    def no_match(self, stream: Stream) -> None:
        """Say once that a stream's parser did not match any of its lines, and what to try."""
        n, stream.unmatched = stream.unmatched, -1
        assert stream.parser is not None
        unwrapper = self.unwrappers.get(stream.path)
        kind = unwrapper.kind if unwrapper is not None and unwrapper.kind else "none"
        what = f"any of its first {n} lines" if n >= NO_MATCH_LINES else "its only line" if n == 1 else \
            f"any of its {n} lines"
        # (a name that starts with a dash is no option: ./ before it)
        shown = "./" + stream.path if stream.path.startswith("-") else stream.path
        name, path = stream.parser.name, "FILE" if stream.path == "-" else shlex.quote(shown)
        log.warning("stream %s: parser %s did not match %s (envelope: %s); if they are wrapped, name "
                    "the wrapper with --envelope, and see what the parser makes of them with: "
                    "logmetrics check --parser %s %s", stream.source, name, what, kind, name, path)

    # -- stages ------------------------------------------------------------------------------
    def text(self, stream: Stream, text: str, lines: int | None) -> None:
        if stream.parser is None:
            n = text.count("\n") if lines is None else lines
            self.store.add_self("logmetrics_lines_unmatched_total", (UNROUTED,), n)
            return
        self.records(stream, *stream.assembler.feed(text, lines))

    def records(self, stream: Stream, text: str, lines: int) -> None:
        parser = stream.parser
        if not text or parser is None:
            return
        batch = Batch(stream.source, text, stream.time, lines)
        if self.ahead is not None:
            if len(text) < self.ahead.least:
                self.settle()  # parsed at once, after the batch kept
            else:  # parsed one behind, its prescan run meanwhile
                kept = self.ahead.put(stream, batch, type(parser).prescan is not None)
                if kept is None:
                    return
                stream, batch = kept
        self._parse(stream, batch)

    def settle(self) -> None:
        """Parse the batch kept for its prescan, if any."""
        if self.ahead:
            kept = self.ahead.settle()
            if kept is not None:
                self._parse(*kept)

    def _parse(self, stream: Stream, batch: Batch) -> None:
        parser = stream.parser
        assert parser is not None
        lines = batch.lines
        # models: those of the records that gave events (record by record)
        events, matched, matched_lines, errors, models = run_parser(parser, batch, self.raised)
        if stream.announce is not None:
            events.insert(0, Event(READY, (stream.announce,), 1, rule="ready"))
            stream.announce = None
        if events:
            models.append(parser.model)
            events = self._zeros(stream, parser, models, events)
        if stream.model is not None and events:
            events = relabel(events, stream.model, self._model_at)
        name = parser.name
        self.store.apply(events, name, stream.source)
        self.store.add_self_many((
            ("logmetrics_lines_matched_total", (name,), matched),
            ("logmetrics_lines_unmatched_total", (name,), max(lines - matched_lines, 0)),
            ("logmetrics_parse_errors_total", (name,), errors),
        ))
        if stream.unmatched >= 0:  # until the first match: per batch, not per line
            if matched or errors:  # (a parser that fails is said to fail, not to match nothing)
                stream.unmatched = -1
            else:
                stream.unmatched += lines
                if stream.unmatched >= NO_MATCH_LINES:
                    self.no_match(stream)

    def _zeros(self, stream: Stream, parser: Parser, models: list[str], events: list[Event]) -> list[Event]:
        """``events`` after the zero series ``start_zeros`` gives (a parser's failure reported)."""
        try:
            zeros = start_zeros(parser, models, stream.started, stream.zero_named)
        except PLUGIN_ERRORS as exc:  # counted as one parse error, as the report says
            self.store.add_self("logmetrics_parse_errors_total", (parser.name,), 1)
            self.raised(parser, exc)
            return events
        return zeros + events if zeros else events

    def raised(self, parser: Parser, exc: BaseException) -> None:
        """Report a parser's exception once per parser (it is counted in logmetrics_parse_errors_total)."""
        if parser.name not in self._warned:
            self._warned.add(parser.name)
            log.warning("parser %s raised %s: %s (counted in logmetrics_parse_errors_total)",
                        parser.name, type(exc).__name__, exc)
