"""The parser contract and the plugin finder.

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
  series where a gap would look like a failed scrape. Nothing else is needed for it.

Multi-line records: ``shapes`` names the shapes the backend logs (``logmetrics.shapes``:
``PYTHON_TRACEBACK``, ``NODE_STACK``, ``POSTGRES``, ``PRETTY_JSON``, ``INDENTED``, or a ``Shape`` of the parser's
own); the records stage joins them into one pattern. The older ``continuation`` (a compiled regex:
lines that continue the record above, matched at each line's start) still works: a parser that
sets it and not ``shapes`` has its records cut by it, line by line.

Counters at zero: ``zero_series(model)`` names the series (metric, label values) to start at 0;
the engine applies it once per stream and model, when a batch of the stream produced events, for
the model in ``self.model`` (after each record that gave events, for a ``parse`` parser: a model
the log leaves within a batch gets its zeros too). ``tick(now)`` gives time-driven events (see ``parsers.pairs``).
``logmetrics.testing.check_events`` checks events against the catalog in a parser's tests.

Built-in parsers and third-party ones are found the same way, through the ``logmetrics.parsers``
entry-point group; ``--plugin path.py`` and ``--plugin module:Class`` become the same kind of
entry. Every parser is validated when it is loaded; a bad one is refused with a message that names
it and the problem, never half-loaded.
"""

from __future__ import annotations

import importlib
import importlib.util
import inspect
import logging
import os
import re
import sys
from collections.abc import Iterable
from dataclasses import dataclass
from importlib.metadata import EntryPoint, entry_points
from pathlib import Path
from typing import ClassVar

from logmetrics.catalog import BY_NAME, COMMON_LABELS, Family
from logmetrics.events import UNKNOWN_MODEL, Event
from logmetrics.records import CONTINUATION, Batch, Record, Rule, split_records
from logmetrics.shapes import DEFAULT_SHAPES, Shape, compiled

log = logging.getLogger(__name__)

GROUP = "logmetrics.parsers"
#: What a plugin's code may raise that must not end logmetrics: any error, and ``sys.exit()``.
PLUGIN_ERRORS = (Exception, SystemExit)
NAME_RE = re.compile(r"[a-z][a-z0-9_]{0,31}\Z")
LABEL_RE = re.compile(r"[a-zA-Z_][a-zA-Z0-9_]*\Z")
#: What ``parse_batch`` returns: events and records matched, and optionally the physical lines of
#: the records that matched (else the engine counts one line per matched record).
BatchResult = tuple[list[Event], int] | tuple[list[Event], int, int]


class Parser:
    """Base class of every parser plugin; subclasses set ``name`` and implement ``parse``."""

    name: ClassVar[str] = ""
    #: Globs (fnmatch) matched against a stream's path, file name or container/source name.
    claims: ClassVar[tuple[str, ...]] = ()
    #: Substrings; a record that contains none of them is not given to ``parse`` (empty: no filter).
    prefilter: ClassVar[tuple[str, ...]] = ()
    #: The shapes of this backend's multi-line records (``logmetrics.shapes``), joined into one pattern.
    shapes: ClassVar[tuple[Shape, ...]] = DEFAULT_SHAPES
    #: The older way: lines that continue the record above them (matched at the start of each
    #: line). Used instead of ``shapes`` by a parser that sets it and not ``shapes``.
    continuation: ClassVar[re.Pattern[str]] = CONTINUATION
    #: Extra metric families of this plugin's own, each named ``<name>_...``.
    metrics: ClassVar[tuple[Family, ...]] = ()
    #: Substrings of a process's program that identify this backend's processes (psutil): the
    #: executable's name, the script or ``-m`` module an interpreter runs, the ``module:app`` a
    #: runner serves (``logmetrics.procs.program_words``), never its other arguments.
    process_names: ClassVar[tuple[str, ...]] = ()
    #: The model this stream serves, as far as the parser knows (it may set it): ``zero_series``
    #: is applied for it.
    model: str = UNKNOWN_MODEL

    @classmethod
    def sniff(cls, lines: list[str]) -> float:
        """How sure this parser is that ``lines`` (a stream's first lines) are its own, 0-1."""
        return 0.0

    def parse(self, record: Record) -> Iterable[Event]:
        """Events for one record. Pure apart from this instance's bounded per-stream state."""
        raise NotImplementedError

    def zero_series(self, model: str) -> Iterable[tuple[str, tuple[str, ...]]]:
        """Counter series (family, label values) to start at 0 for ``model``, so that the first
        increase shows in ``increase()``. The engine applies them once per stream and model, after
        a batch that produced events. Default: none."""
        return ()

    def state(self) -> dict[str, object]:
        """Per-stream state worth keeping across a restart (JSON values), e.g. the model name."""
        return {}

    def restore(self, state: dict[str, object]) -> None:
        """Take back what ``state`` returned in an earlier run."""

    def learn(self, text: str) -> None:
        """Take what the lines logged before reading began say (the model name): state only, no events."""

    def named(self, names: tuple[str, ...]) -> None:
        """The names of the stream this instance reads (file name, source, path, or a container's
        names; most specific first), given once before its first record: a parser of several
        components may tell from them which one a stream is. Default: no-op."""

    def tick(self, now: float) -> Iterable[Event]:
        """Events due with the passing of time while the stream is quiet (``now``: Unix seconds),
        e.g. requests whose finish line never came (``parsers.pairs``). Called by the engine when
        its input goes idle. Default: none."""
        return ()

    def parse_batch(self, batch: Batch) -> BatchResult:
        """Events for a batch of whole records, how many records matched, and (optional third
        value) how many physical lines those records have, for ``logmetrics_lines_unmatched_total``.

        The default splits the batch into records and calls ``parse`` on each; a parser may
        override it with a faster scan of the whole text that gives the same events. The engine
        runs a parser that does not override it record by record itself (an exception then costs
        one record); an override that raises loses its batch, which is counted and never run again
        through ``parse``, so that a parser's state never advances twice.
        """
        events: list[Event] = []
        matched = lines = 0
        pre = self.prefilter
        for text in split_records(batch.text, record_rule(type(self))):
            if pre and not any(p in text for p in pre):
                continue
            before = len(events)
            events.extend(self.parse(Record(text, batch.time)))
            if len(events) > before:
                matched += 1
                lines += text.count("\n") + 1
        return events, matched, lines


def record_rule(cls: type[Parser]) -> Rule:
    """How a parser's records are cut: its ``continuation`` if it sets that and not ``shapes``,
    else its shapes, compiled (once per distinct tuple)."""
    rule = _rules.get(cls)
    if rule is None:
        own = _own(cls)
        rule = _rules[cls] = cls.continuation if "continuation" in own and "shapes" not in own else compiled(cls.shapes)
    return rule


_rules: dict[type[Parser], Rule] = {}


def _own(cls: type) -> set[str]:
    """The attributes set by ``cls`` or its bases below ``Parser``."""
    return {name for klass in cls.__mro__ if klass is not Parser and issubclass(klass, Parser)
            for name in vars(klass)}


@dataclass(frozen=True)
class ParserEntry:
    """A loaded, validated parser class and where it came from."""

    name: str
    cls: type[Parser]
    origin: str


class PluginError(Exception):
    """A plugin that cannot be loaded; the message names the plugin and the problem."""


def validate(cls: object, origin: str) -> ParserEntry:
    """Check a parser class against the contract, or raise ``PluginError``."""
    label = getattr(cls, "__name__", repr(cls))
    if not (inspect.isclass(cls) and issubclass(cls, Parser)):
        raise PluginError(f"plugin {label} ({origin}): not a subclass of logmetrics.plugins.Parser")
    name = cls.name
    who = f"plugin {name or label!r} ({origin})"
    if not isinstance(name, str) or not NAME_RE.match(name):
        raise PluginError(f"{who}: name must match [a-z][a-z0-9_]* (at most 32 characters), got {name!r}")
    if cls.parse is Parser.parse and cls.parse_batch is Parser.parse_batch:
        raise PluginError(f"{who}: implements neither parse() nor parse_batch()")
    for attr in ("claims", "prefilter", "process_names"):
        value = getattr(cls, attr)
        if not isinstance(value, tuple) or not all(isinstance(v, str) and v for v in value):
            raise PluginError(f"{who}: {attr} must be a tuple of non-empty strings")
    if not isinstance(cls.continuation, re.Pattern) or not isinstance(cls.continuation.pattern, str):
        raise PluginError(f"{who}: continuation must be a compiled str regular expression")
    if not isinstance(cls.shapes, tuple) or not all(isinstance(s, Shape) for s in cls.shapes):
        raise PluginError(f"{who}: shapes must be a tuple of logmetrics.shapes.Shape values")
    if {"continuation", "shapes"} <= _own(cls):
        raise PluginError(f"{who}: sets both continuation and shapes; give its own lines as a Shape")
    try:
        compiled(cls.shapes)
    except re.error as exc:
        raise PluginError(f"{who}: its shapes do not make a regular expression: {exc}") from exc
    for fam in cls.metrics:
        if not isinstance(fam, Family):
            raise PluginError(f"{who}: metrics must hold logmetrics.catalog.Family values, got {fam!r}")
        if not fam.name.startswith(name + "_"):
            raise PluginError(f"{who}: metric {fam.name!r} must be named {name}_...")
        if fam.name in BY_NAME:
            raise PluginError(f"{who}: metric {fam.name!r} is already in the catalog")
        if fam.kind not in ("counter", "gauge", "histogram"):
            raise PluginError(f"{who}: metric {fam.name!r} has unknown type {fam.kind!r}")
        if fam.kind == "counter" and not fam.name.endswith("_total"):
            raise PluginError(f"{who}: counter {fam.name!r} must end in _total")
        if fam.kind == "histogram" and (not fam.buckets or list(fam.buckets) != sorted(set(fam.buckets))):
            raise PluginError(f"{who}: histogram {fam.name!r} needs increasing buckets")
        for lab in fam.labels:
            if not LABEL_RE.match(lab) or lab in COMMON_LABELS or lab.startswith("__"):
                raise PluginError(f"{who}: metric {fam.name!r} has a bad label name {lab!r}")
    return ParserEntry(name, cls, origin)


def _load_file(path: Path, attr: str | None) -> list[ParserEntry]:
    if not path.is_file():
        raise PluginError(f"plugin {str(path)!r}: no such file")
    modname = "logmetrics_plugin_" + re.sub(r"\W", "_", path.stem)
    spec = importlib.util.spec_from_file_location(modname, path)
    if spec is None or spec.loader is None:
        raise PluginError(f"plugin {str(path)!r}: cannot be imported as a Python file")
    module = importlib.util.module_from_spec(spec)
    sys.modules[modname] = module
    try:
        spec.loader.exec_module(module)
    except PLUGIN_ERRORS as exc:  # a broken plugin must not take the engine down with a traceback
        raise PluginError(f"plugin {str(path)!r}: import failed: {type(exc).__name__}: {exc}") from exc
    origin = f"file {path}"
    if attr:
        return [validate(_attribute(module, attr, f"{path}:{attr}"), origin)]
    found = [obj for obj in vars(module).values()
             if inspect.isclass(obj) and issubclass(obj, Parser) and obj is not Parser
             and obj.__module__ == modname]
    if not found:
        raise PluginError(f"plugin {str(path)!r}: defines no subclass of logmetrics.plugins.Parser")
    return [validate(cls, origin) for cls in found]


def _attribute(module: object, attr: str, spec: str) -> object:
    """The class ``attr`` of a plugin module, or a ``PluginError`` that names it and what there is."""
    try:
        return getattr(module, attr)
    except AttributeError:
        there = sorted(name for name, obj in vars(module).items()
                       if inspect.isclass(obj) and issubclass(obj, Parser) and obj is not Parser)
        hint = f"; its parser classes: {', '.join(there)}" if there else "; it defines no parser class"
        raise PluginError(f"plugin {spec!r}: has no class {attr!r}{hint}") from None


def load_spec(spec: str) -> list[ParserEntry]:
    """Load ``--plugin`` SPEC: ``path/to/file.py``, ``path.py:Class`` or ``module:Class``.

    A module is looked up on ``sys.path`` and, as ``python -m`` does, in the current directory.
    """
    target, _, attr = spec.partition(":") if not spec.endswith(".py") else (spec, "", "")
    if target.endswith(".py") or "/" in target:
        return _load_file(Path(target), attr or None)
    if not attr:
        raise PluginError(f"plugin {spec!r}: expected path/to/file.py or module:Class")
    here = os.getcwd()
    if here not in sys.path and "" not in sys.path:
        sys.path.append(here)  # after the installed packages: a local file never shadows one of them
    try:
        module = importlib.import_module(target)
    except PLUGIN_ERRORS as exc:  # same reason as above: report, do not crash
        raise PluginError(f"plugin {spec!r}: import failed: {type(exc).__name__}: {exc}") from exc
    return [validate(_attribute(module, attr, spec), f"module {spec}")]


def _load_entry_point(ep: EntryPoint) -> ParserEntry:
    """One installed parser, loaded and validated, or ``PluginError``."""
    dist = ep.dist.name if ep.dist is not None else "?"
    origin = f"entry point {ep.value} ({dist})"
    try:
        cls = ep.load()
    except PLUGIN_ERRORS as exc:  # reported by the caller with the plugin's name
        raise PluginError(f"plugin {ep.name!r} ({origin}): import failed: {type(exc).__name__}: {exc}") from exc
    entry = validate(cls, origin)
    if entry.name != ep.name:
        raise PluginError(f"plugin {ep.name!r} ({origin}): entry point name differs from its name {entry.name!r}")
    return entry


def discover(extra: Iterable[str] = (), broken: dict[str, str] | None = None) -> dict[str, ParserEntry]:
    """All parsers: the entry-point group first, then ``--plugin`` specs (which may override).

    An installed parser that fails to load is left out with a warning (and its message put in
    ``broken`` under its name), so that one broken third-party package does not stop the others.
    A ``--plugin`` the user named that fails is an error (``PluginError``).
    """
    found: dict[str, ParserEntry] = {}
    for ep in entry_points(group=GROUP):
        try:
            entry = _load_entry_point(ep)
        except PluginError as exc:
            log.warning("%s; left out", exc)
            if broken is not None:
                broken[ep.name] = str(exc)
            continue
        found[entry.name] = entry
    for spec in extra:
        for entry in load_spec(spec):
            replaced = found.get(entry.name)
            if replaced is not None:
                log.warning("parser %r from --plugin %s replaces the one from %s", entry.name, spec, replaced.origin)
            found[entry.name] = entry
    return found
