"""The parser contract: what a parser class is, and how its records are cut.

A parser is a small class: a ``name``, the paths or container names it ``claims``, an optional
cheap substring ``prefilter``, an optional ``sniff(first_lines) -> score`` for auto-routing, and
``parse(record) -> iterable of events``, and the ``shapes`` of its multi-line records. One instance
serves one stream, so it may keep bounded
per-stream state (the model name, a request's start line). It never touches the store, the clock or
the registry: time comes with the record.

``named(names)`` gives a new instance the names of the stream it reads (those its ``claims`` are
matched against), before its first record; a parser of a multi-component backend (Supabase) may
take from them which component a stream is. Default: no-op.

Two optional parts concern the backend's life:

- ``learn(text)``: a file present at start is read from its end, so its start-up lines are never
  parsed. The engine hands the parser the file's head and its last start-up block (bounded, in file
  order, envelopes removed) before the first line is read; ``learn`` only updates state (the model
  name, whether the server was ready), it produces no events and counts nothing. Default: no-op.
- Readiness and the reset of a dead backend: emit ``backend_ready`` (labels ``model``) 1 on the
  server-ready line and 0 when the log shows a shutdown, a death, a failed start or a new start-up.
  The store then resets every other gauge of that backend and source to 0 (running, waiting, KV
  cache, throughputs, and a plugin's own gauges): a dead server runs nothing, and a zero keeps the
  series where a gap would look like a failed scrape. ``readiness()`` says which model the server
  is ready with, as far as the parser knows: after ``learn`` and after ``restore`` (a file read
  from its end, a restart of logmetrics) the engine says ``backend_ready`` 1 for it with the
  stream's next batch, since the line that said so will not be read again. Default: None.

Multi-line records: ``shapes`` names the shapes the backend logs (``logmetrics.records.shapes``:
``PYTHON_TRACEBACK``, ``NODE_STACK``, ``POSTGRES``, ``PRETTY_JSON``, ``INDENTED``, or a ``Shape`` of the parser's
own); the records stage joins them into one pattern.

Counters at zero: the engine alone makes them. ``zero_series(model)`` names the series (metric,
label values, optionally a backend) to start at 0; the engine asks it after every batch of the
stream that gave events, for ``self.model`` and each model the batch passed through (after each
record that gave events, or those ``parse_batch`` names), and starts each series once per stream.
What it names may grow with what the log shows (a parser that has seen request lines names their
outcomes). ``tick(now)`` gives time-driven events (see ``parsers.pairs``).

Speed: a parser that names its ``frequent`` lines and reads a run of them in ``parse_run`` gets
the framework's fast path (``logmetrics.plugins.fastpath``); ``parse_batch`` is a whole-batch
path of the parser's own, for formats whose frequent records span lines.
``logmetrics.testing.check_events`` checks events against the catalog in a parser's tests.

The finder (``logmetrics.plugins.finder``) loads and validates parsers.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable
from itertools import islice
from typing import ClassVar

from logmetrics.events import UNKNOWN_MODEL, Event
from logmetrics.plugins.fastpath import Run
from logmetrics.records import Batch, Record, Rule
from logmetrics.records.shapes import DEFAULT_SHAPES, Shape, compiled
from logmetrics.store.catalog import Family

#: What a plugin's code may raise that must not end logmetrics: any error, and ``sys.exit()``.
PLUGIN_ERRORS = (Exception, SystemExit)
#: What ``parse_batch`` returns: events and records matched, and optionally the physical lines of
#: the records that matched (else the engine counts one line per matched record), and the models
#: it passed through before its last (for their zero series; the last is ``model``).
BatchResult = tuple[list[Event], int] | tuple[list[Event], int, int] | tuple[list[Event], int, int, list[str]]
#: A series to start at 0: its family, its label values, and optionally a backend of its own.
ZeroSeries = tuple[str, tuple[str, ...]] | tuple[str, tuple[str, ...], str]
#: A series started at 0: family, label values, backend (None: the parser's).
ZeroKey = tuple[str, tuple[str, ...], str | None]
MAX_STARTED = 4096  # the zero-started series a stream remembers


class Parser:
    """Base class of every parser plugin; subclasses set ``name`` and implement ``parse``."""

    name: ClassVar[str] = ""
    #: Globs (fnmatch) matched against a stream's path, file name or container/source name.
    claims: ClassVar[tuple[str, ...]] = ()
    #: Substrings; a record that contains none of them is not given to ``parse`` (empty: no filter).
    prefilter: ClassVar[tuple[str, ...]] = ()
    #: The shapes of this backend's multi-line records (``logmetrics.records.shapes``), joined into one pattern.
    shapes: ClassVar[tuple[Shape, ...]] = DEFAULT_SHAPES
    #: The frequent lines, for the framework's fast path (``logmetrics.plugins.fastpath``): a regular
    #: expression that matches one whole line (not its newline), each a record whose events
    #: ``parse_run`` gives for a run of them at once. Empty: every record goes through ``parse``.
    frequent: ClassVar[str] = ""
    #: What tells this backend's lines among a stream's first ones, for auto-routing (``sniff``):
    #: ``(score, pattern)`` pairs from the surest down, each pattern a regular expression searched
    #: for in the lines (``re.MULTILINE``: ``^`` and ``$`` are each line's); the first found gives
    #: its score, 0 to 1.
    sniffs: ClassVar[tuple[tuple[float, str], ...]] = ()
    #: Optional, with ``parse_batch``: a pure function of a batch's text (no parser state, no I/O)
    #: whose picklable result ``parse_batch`` finds in ``Batch.pre``. Where a run has a core to
    #: spare, the engine runs it on each batch in another process while the parser reads the batch
    #: before (``logmetrics.engine.ahead``); elsewhere, or where it failed, ``pre`` is None. The
    #: events must be the same either way: a prescan does what the parser would do first itself
    #: (a whole-text regex scan, counted), and ``parse_batch`` uses its result only for that text.
    prescan: ClassVar[Callable[..., object] | None] = None  # (of a str: [str] would read as a method's self)
    #: Extra metric families of this plugin's own, each named ``<name>_...``.
    metrics: ClassVar[tuple[Family, ...]] = ()
    #: Substrings of a process's program that identify this backend's processes (psutil): the
    #: executable's name, the script or ``-m`` module an interpreter runs, the ``module:app`` a
    #: runner serves (``logmetrics.app.procs.program_words``), never its other arguments.
    process_names: ClassVar[tuple[str, ...]] = ()
    #: The model this stream serves, as far as the parser knows (it may set it): ``zero_series``
    #: is applied for it.
    model: str = UNKNOWN_MODEL
    #: Whether the backend said it is ready (and has not stopped since), as far as the parser knows
    #: (it sets it with its ``backend_ready`` events): kept across restarts by ``state``/``restore``
    #: (as ``model`` is),
    #: and said again by the engine after them and after ``learn`` (``readiness``).
    ready: bool = False

    @classmethod
    def sniff(cls, lines: list[str]) -> float:
        """How sure this parser is that ``lines`` (a stream's first lines) are its own, 0-1.
        Default: the score of the first of ``sniffs`` whose pattern is found in them (joined,
        line ends without ``\r``), else 0."""
        if not cls.sniffs:
            return 0.0
        text = "\n".join(line.rstrip("\r") for line in lines)
        for score, pattern in sniff_patterns(cls):
            if pattern.search(text):
                return score
        return 0.0

    def parse(self, record: Record) -> Iterable[Event]:
        """Events for one record. Pure apart from this instance's bounded per-stream state."""
        raise NotImplementedError

    def zero_series(self, model: str) -> Iterable[ZeroSeries]:
        """Counter series (family, label values[, backend]) to start at 0 for ``model``, so that
        the first increase shows in ``increase()``: those the log seen so far can move. The engine
        asks after every batch that produced events, and starts each series once per stream.
        Default: none."""
        return ()

    def state(self) -> dict[str, object]:
        """Per-stream state worth keeping across a restart (JSON values). Default: whether the
        backend was ready, and the model (extend it with ``super().state()``)."""
        return {"ready": self.ready, "model": self.model}

    def restore(self, state: dict[str, object]) -> None:
        """Take back what ``state`` returned in an earlier run. Default: readiness and the model."""
        self.ready = state.get("ready") is True
        model = state.get("model")
        if isinstance(model, str) and model:
            self.model = model

    def learn(self, text: str) -> None:
        """Take what the lines logged before reading began say (the model name): state only, no events."""

    def readiness(self) -> str | None:
        """The model the backend is ready with, as far as this parser knows (None: not ready, or it
        cannot tell). Asked after ``learn`` and ``restore``: the engine then says ``backend_ready``
        1 for that model with the stream's next batch. Default: ``model`` while ``ready``."""
        return self.model if self.ready else None

    def named(self, names: tuple[str, ...]) -> None:
        """The names of the stream this instance reads (file name, source, path, or a container's
        names; most specific first), given once before its first record: a parser of several
        components may tell from them which one a stream is. Default: no-op."""

    def tick(self, now: float) -> Iterable[Event]:
        """Events due with the passing of time while the stream is quiet (``now``: Unix seconds),
        e.g. requests whose finish line never came (``parsers.pairs``). Called by the engine when
        its input goes idle. Default: none."""
        return ()

    def frequent_lines(self, text: str) -> str:
        """The frequent lines' pattern for the batch ``text`` (empty: none). Default: ``frequent``;
        a parser whose frequent lines depend on what the stream turns out to be may choose."""
        return self.frequent

    def parse_run(self, run: Run) -> tuple[list[Event], int]:
        """The events of a run of frequent lines, and how many of them gave events: the same as
        ``parse`` on each line, in order (a ``findall`` over the run, counters summed, is what
        makes it fast). Default: ``parse`` on each line that passes the prefilter."""
        events: list[Event] = []
        matched = 0
        pre = self.prefilter
        for line in run.lines():
            if pre and not any(p in line for p in pre):
                continue
            got = list(self.parse(Record(line, run.time)))
            if got:
                events += got
                matched += 1
        return events, matched

    def parse_batch(self, batch: Batch) -> BatchResult:
        """Optional, a whole-batch fast path of the parser's own (``frequent`` is the framework's): events for a
        batch of whole records, how many records matched, and (optional third value) how many physical
        lines those records have, for ``logmetrics_lines_unmatched_total``, and (optional fourth) the
        models it counted for, for their zero series; the same as ``parse`` on each record (hold it
        to that with ``logmetrics.testing.assert_fast_path_matches``).

        A parser without one is run record by record by the engine (an exception then costs one
        record). One that raises loses its batch, which is counted and never run again through
        ``parse``, so that a parser's state never advances twice.
        """
        raise NotImplementedError


def record_rule(cls: type[Parser]) -> Rule:
    """How a parser's records are cut: its shapes, compiled (once per distinct tuple)."""
    rule = _rules.get(cls)
    if rule is None:
        rule = _rules[cls] = compiled(cls.shapes)
    return rule


_rules: dict[type[Parser], Rule] = {}


def sniff_patterns(cls: type[Parser]) -> list[tuple[float, re.Pattern[str]]]:
    """A parser's ``sniffs``, compiled (once per class)."""
    found = _sniffs.get(cls)
    if found is None:
        found = _sniffs[cls] = [(score, re.compile(pattern, re.MULTILINE)) for score, pattern in cls.sniffs]
    return found


_sniffs: dict[type[Parser], list[tuple[float, re.Pattern[str]]]] = {}


def start_zeros(parser: Parser, models: list[str], started: set[ZeroKey],
                named: dict[str, list[ZeroSeries]] | None = None) -> list[Event]:
    """Zero-valued events for the series ``parser.zero_series`` names for ``models`` (those the
    parser passed through in a batch that gave events) and that are not in ``started`` (the
    stream's, which they join). Asked after every such batch: what a parser can name grows with
    what its log shows. ``named``, if given, keeps what each model's list was when last checked,
    so that a list unchanged since is not checked again. Both are bounded (forgotten, a series
    starts again: +0)."""
    zeros: list[Event] = []
    for model in dict.fromkeys(models):
        got = parser.zero_series(model)
        items = list(islice(got, MAX_STARTED + 1)) if got is not None else []
        if named is not None and named.get(model) == items:
            continue
        for item in items:
            key = _zero_key(item)
            if key not in started:
                started.add(key)
                zeros.append(Event(key[0], key[1], 0, key[2], rule="zero"))
        if len(zeros) > MAX_STARTED:
            raise ValueError(f"zero_series gave more than {MAX_STARTED} series")
        if named is not None:
            named[model] = items
    if len(started) > MAX_STARTED or (named is not None and len(named) > MAX_STARTED):
        started.clear()
        if named is not None:
            named.clear()
    return zeros


def _zero_key(item: object) -> ZeroKey:
    """A series ``zero_series`` named, or ValueError: (family, label values[, backend]), strings."""
    if isinstance(item, tuple | list) and len(item) in (2, 3):
        metric, labels, backend = item[0], item[1], item[2] if len(item) == 3 else None
        if isinstance(metric, str) and isinstance(labels, tuple | list) and all(type(v) is str for v in labels) \
                and (backend is None or isinstance(backend, str)):
            return metric, tuple(labels), backend
    raise ValueError(f"zero_series gave {item!r}: not (family, label values[, backend]) of strings")


def has_own_batch(parser_cls: type[Parser]) -> bool:
    """Whether the parser has a ``parse_batch`` of its own."""
    return parser_cls.parse_batch is not Parser.parse_batch


def has_frequent(parser_cls: type[Parser]) -> bool:
    """Whether the parser names frequent lines (``frequent``, or ``frequent_lines`` of its own)."""
    return bool(parser_cls.frequent) or parser_cls.frequent_lines is not Parser.frequent_lines


def has_fast_path(parser_cls: type[Parser]) -> bool:
    """Whether the parser has a fast path of either kind."""
    return has_own_batch(parser_cls) or has_frequent(parser_cls)


def own_attributes(cls: type) -> set[str]:
    """The attributes set by ``cls`` or its bases below ``Parser``."""
    return {name for klass in cls.__mro__ if klass is not Parser and issubclass(klass, Parser)
            for name in vars(klass)}


