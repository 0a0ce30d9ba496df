"""Which files found under a directory or glob an input takes: its ``include`` and ``exclude``
globs (``[[input]]`` keys, and ``watch --include/--exclude`` for every PATH argument).

A glob without ``/`` is matched against a file's name (``*.log``, ``*.expected.prom``); one with
``/`` against its path below the input's directory (``archive/**``, ``*/debug-*``) and its whole
path. A file is taken when it matches an ``include`` glob (every file, if there is none) and no
``exclude`` glob. A file named explicitly (the input's own path) is always taken. What is no log
by its first bytes is left out before these globs apply (``logmetrics.sources.filefilter`` comes after
``logmetrics.sources.filekinds``).
"""

from __future__ import annotations

import fnmatch
import os
from collections.abc import Sequence
from dataclasses import dataclass

from logmetrics.sources.discovery import covers, is_glob, watch_root


@dataclass(frozen=True)
class Rule:
    """The globs of one input: the file, directory or glob ``path`` names."""

    path: str
    include: tuple[str, ...] = ()
    exclude: tuple[str, ...] = ()

    def takes(self, file: str) -> bool:
        """Whether this input takes ``file`` (one it covers)."""
        if os.path.abspath(file) == os.path.abspath(self.path):
            return True
        name = os.path.basename(file)
        root = watch_root(self.path)[0] if is_glob(self.path) else self.path
        below = os.path.relpath(os.path.abspath(file), os.path.abspath(root))
        whole = os.path.abspath(file)

        def hit(globs: tuple[str, ...]) -> bool:
            return any(fnmatch.fnmatchcase(below, g) or fnmatch.fnmatchcase(whole, g) if "/" in g
                       else fnmatch.fnmatchcase(name, g) for g in globs)

        return (not self.include or hit(self.include)) and not hit(self.exclude)


class FileFilter:
    """The rules of the inputs: ``wanted(file)`` applies the first rule whose input covers the file
    (configured inputs first, then the command line's PATH arguments with its globs)."""

    def __init__(self, rules: Sequence[Rule] = ()) -> None:
        self.rules = [r for r in rules if r.include or r.exclude]

    def __bool__(self) -> bool:
        return bool(self.rules)

    def wanted(self, file: str) -> bool:
        """Whether ``file`` is to be read (a few glob matches: nothing is kept per file, so that
        pods coming and going leave nothing behind)."""
        rule = next((r for r in self.rules if covers(r.path, file)), None)
        return rule is None or rule.takes(file)


def file_filter(inputs: Sequence[tuple[str, Sequence[str], Sequence[str]]], paths: Sequence[str],
                include: Sequence[str], exclude: Sequence[str]) -> FileFilter:
    """The filter of configured ``inputs`` (path, include, exclude) and of the command line's
    ``paths`` with its ``include`` and ``exclude`` globs."""
    rules = [Rule(p, tuple(i), tuple(e)) for p, i, e in inputs]
    rules += [Rule(p, tuple(include), tuple(exclude)) for p in paths if p != "-"]
    return FileFilter(rules)
