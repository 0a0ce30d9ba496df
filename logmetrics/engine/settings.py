"""What applies to a raw stream: the configuration file's inputs over the command line's flags.

Inputs of the configuration file (``set_inputs``) may set the parser, envelope, source label and
model of the files they name; the first input that names a file applies. They go over the
command line's --parser, --envelope and --source (which the command line removes from the inputs
when it is given) and over an unscoped --label, not over a scoped one. Static labels
(``--label [GLOB:]model=NAME``): scoped ones (GLOB matched against the source label, the path or
the file name) win over unscoped ones; among each, the last one given.
"""

from __future__ import annotations

import fnmatch
import os
from collections.abc import Sequence
from typing import Protocol

from logmetrics.sources.discovery import covers
from logmetrics.sources.layouts import Layouts
from logmetrics.store.guard import safe_label

StaticLabel = tuple[str | None, str, str]  # (GLOB or None for every input, label name, value)


class Input(Protocol):
    """What the engine reads of a configured input (``[[input]]``, ``logmetrics.app.config.Input``):
    the files it names and what it sets for their streams (None: the engine's default)."""

    @property
    def path(self) -> str: ...
    @property
    def parser(self) -> str | None: ...
    @property
    def envelope(self) -> str | None: ...
    @property
    def source(self) -> str | None: ...
    @property
    def model(self) -> str | None: ...


class Settings:
    """The flags' parser, source, envelope and static labels, and the configured inputs over them."""

    def __init__(self, *, parser: str | None = None, source: str | None = None, envelope: str = "auto",
                 labels: Sequence[StaticLabel] = ()) -> None:
        self.forced = parser
        self.source = source
        self.envelope = envelope
        self.labels = list(labels)
        self.layouts = Layouts()
        self.inputs: tuple[Input, ...] = ()  # the configuration file's, in its order
        self._input_of: dict[str, Input | None] = {}  # raw stream -> the input that names it

    def set_inputs(self, inputs: Sequence[Input]) -> None:
        """The configuration file's inputs (at start, and at each reload): they apply to new streams."""
        self.inputs = tuple(inputs)
        self._input_of = {}

    def input(self, path: str) -> Input | None:
        """The first configured input that names the raw stream ``path``, if any."""
        try:
            return self._input_of[path]
        except KeyError:
            found = None if path == "-" else next((i for i in self.inputs if covers(i.path, path)), None)
            self._input_of[path] = found
            return found

    def envelope_of(self, path: str) -> str:
        """The envelope of a raw stream: its input's, else --envelope."""
        inp = self.input(path) if self.inputs else None
        return inp.envelope if inp is not None and inp.envelope is not None else self.envelope

    def forced_of(self, path: str) -> str | None:
        """The parser a raw stream must have: its input's, else --parser; None: routed."""
        inp = self.input(path) if self.inputs else None
        return inp.parser if inp is not None and inp.parser is not None else self.forced

    def source_label(self, path: str, service: str | None = None) -> str:
        """The ``source`` label of a raw stream (or of one compose service inside it), valid UTF-8
        even for a file name that is not (``vllm-\\xe9.log``): ``--source``, else the service, else
        what the file's layout says (``namespace/pod/container``), else the path."""
        inp = self.input(path) if self.inputs else None
        source = inp.source if inp is not None and inp.source is not None else self.source
        if source or service or path == "-":
            return safe_label(source or service or "stdin")
        layout = self.layouts.of(path)
        return safe_label(layout.source if layout is not None else path)

    def static_model(self, source: str, path: str) -> str | None:
        """The model label --label or an input sets for a stream (a scoped one over an unscoped one)."""
        names = (source, path, os.path.basename(path))
        value = None
        for scoped in (False, True):
            if scoped and self.inputs:
                inp = self.input(path)
                value = inp.model if inp is not None and inp.model is not None else value
            for glob, _name, val in self.labels:
                if (glob is not None) == scoped and (glob is None or any(fnmatch.fnmatch(n, glob) for n in names)):
                    value = val
        return value

    def names(self, source: str, path: str) -> tuple[str, ...]:
        """The names a stream is known by, most specific first: what claims match, what ``named`` gets."""
        layout = self.layouts.of(path) if path != "-" else None
        if layout is not None:  # the container's names; the pod's name or the path may name another backend
            return layout.names if source == layout.source else (*layout.names, source)
        return (os.path.basename(path), source, path)

    def forget(self, path: str) -> None:
        """A raw stream gone for good: what was found out about it."""
        self._input_of.pop(path, None)
        self.layouts.forget(path)
