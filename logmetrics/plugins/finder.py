"""The plugin finder: parsers loaded from entry points and ``--plugin``, each validated.

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

from logmetrics import lazyre
from logmetrics.plugins.contract import PLUGIN_ERRORS, Parser, has_own_batch, own_attributes, sniff_patterns
from logmetrics.plugins.fastpath import runs
from logmetrics.records.shapes import Shape, compiled
from logmetrics.store.catalog import BY_NAME, COMMON_LABELS, Family

log = logging.getLogger(__name__)

GROUP = "logmetrics.parsers"
NAME_RE = lazyre.compile(r"[a-z][a-z0-9_]{0,31}\Z")
LABEL_RE = lazyre.compile(r"[a-zA-Z_][a-zA-Z0-9_]*\Z")


@dataclass(frozen=True)
class ParserEntry:
    """A loaded, validated parser class and where it came from."""

    name: str
    cls: type[Parser]
    origin: str


class PluginError(Exception):
    """A plugin that cannot be loaded; the message names the plugin and the problem."""


#: A pattern (or an alternative of one) that begins with ``^``: never true inside a shape's pattern.
_ANCHORED = lazyre.compile(r"(?:^|[(|])\^")


def _shape_for(cls: type) -> str:
    """The ``shapes`` line to write for the ``continuation`` a parser of earlier releases set."""
    cont = getattr(cls, "continuation", None)
    pattern = getattr(cont, "pattern", cont)
    text = pattern.removeprefix("^") if isinstance(pattern, str) else "PATTERN"
    return (f"shapes = (Shape({getattr(cls, 'name', 'mine') or 'mine'!r}, lines={text!r}),) with "
            "from logmetrics.records.shapes import Shape")


def validate(cls: object, origin: str) -> ParserEntry:
    """Check a parser class against the contract, or raise ``PluginError``."""
    label = getattr(cls, "__name__", repr(cls))
    if not (inspect.isclass(cls) and issubclass(cls, Parser)):
        raise PluginError(f"plugin {label} ({origin}): not a subclass of logmetrics.plugins.Parser")
    name = cls.name
    who = f"plugin {name or label!r} ({origin})"
    if not isinstance(name, str) or not NAME_RE.match(name):
        raise PluginError(f"{who}: name must match [a-z][a-z0-9_]* (at most 32 characters), got {name!r}")
    if cls.parse is Parser.parse and not has_own_batch(cls):
        raise PluginError(f"{who}: implements neither parse() nor parse_batch()")
    for attr in ("claims", "prefilter", "process_names"):
        value = getattr(cls, attr)
        if not isinstance(value, tuple) or not all(isinstance(v, str) and v for v in value):
            raise PluginError(f"{who}: {attr} must be a tuple of non-empty strings")
    if "continuation" in own_attributes(cls):  # the attribute of earlier releases: refused, not ignored
        raise PluginError(f"{who}: sets continuation, which logmetrics no longer reads; name those lines as a "
                          f"record shape instead: {_shape_for(cls)}")
    if not isinstance(cls.shapes, tuple) or not all(isinstance(s, Shape) for s in cls.shapes):
        raise PluginError(f"{who}: shapes must be a tuple of logmetrics.records.shapes.Shape values")
    for shape in cls.shapes:
        for part in ("lines", "ends", "head", "body", "close"):
            pattern = getattr(shape, part)
            if not isinstance(pattern, str):
                raise PluginError(f"{who}: shape {shape.name!r}: {part} must be the text of a regular expression "
                                  f"(a str, not {type(pattern).__name__}): write {part}=PATTERN.pattern")
            if _ANCHORED.search(pattern):
                raise PluginError(f"{who}: shape {shape.name!r}: {part} starts with ^, which never matches there: "
                                  "a shape's patterns are matched at the start of each line; leave the ^ out")
    try:
        compiled(cls.shapes)
    except re.error as exc:
        raise PluginError(f"{who}: its shapes do not make a regular expression: {exc}") from exc
    sniffs = cls.sniffs
    if not isinstance(sniffs, tuple) or not all(
            isinstance(pair, tuple) and len(pair) == 2 and isinstance(pair[0], int | float)
            and not isinstance(pair[0], bool) and 0 <= pair[0] <= 1 and isinstance(pair[1], str) and pair[1]
            for pair in sniffs):
        raise PluginError(f"{who}: sniffs must be a tuple of (score from 0 to 1, pattern str) pairs")
    try:
        sniff_patterns(cls)
    except re.error as exc:
        raise PluginError(f"{who}: a pattern of sniffs is not a regular expression: {exc}") from exc
    if not isinstance(cls.frequent, str):
        raise PluginError(f"{who}: frequent must be a regular expression (a str) of one whole line")
    try:
        runs(cls.frequent, cls.shapes) if cls.frequent else None
    except re.error as exc:
        raise PluginError(f"{who}: frequent is not a regular expression: {exc}") from exc
    if cls.prescan is not None and not (callable(cls.prescan) and has_own_batch(cls)):
        raise PluginError(f"{who}: prescan must be a function of a batch's text (or None), for a parser with a "
                          "parse_batch of its own (which finds its result in batch.pre)")
    for fam in cls.metrics:
        if not isinstance(fam, Family):
            raise PluginError(f"{who}: metrics must hold logmetrics.store.catalog.Family values, got {fam!r}")
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


def discover(extra: Iterable[str] = (), broken: dict[str, str] | None = None,
             only: str | None = None) -> dict[str, ParserEntry]:
    """All parsers: the entry-point group first, then ``--plugin`` specs (which may override).

    An installed parser that fails to load is left out with a warning (and its message put in
    ``broken`` under its name), so that one broken third-party package does not stop the others.
    A ``--plugin`` the user named that fails is an error (``PluginError``). ``only``: of the
    installed parsers, load that one alone (a run that reads every input with it); the names of
    the others are put in ``broken`` with an empty message, for an error to list them.
    """
    found: dict[str, ParserEntry] = {}
    for ep in entry_points(group=GROUP):
        if only is not None and ep.name != only:
            if broken is not None:
                broken.setdefault(ep.name, "")
            continue
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
