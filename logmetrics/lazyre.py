"""Regular expressions compiled on first use.

The parsers and stages define a few hundred patterns at import; ``re`` compiled them in 0.11 s,
half of the start-up of ``watch`` (every parser is loaded to recognise the files, most of their
patterns never run on a given log). ``compile`` returns a stand-in that compiles its pattern the
first time one of its methods or attributes is used, then holds the compiled pattern's bound
methods as its own attributes: from then on a call costs what it costs on the compiled pattern.

What it does not do: be an ``re.Pattern`` for ``isinstance``, or be taken by ``re.compile`` and the
module-level functions of ``re`` (give them ``.pattern``). A pattern that does not compile raises
``re.error`` at its first use, not at import: every built-in pattern is compiled by the tests.
"""

from __future__ import annotations

import re
from typing import Any, AnyStr, cast

#: The compiled pattern's attributes the stand-in takes over at its first use.
ATTRIBUTES = ("match", "fullmatch", "search", "findall", "finditer", "sub", "subn", "split", "scanner",
              "flags", "groups", "groupindex")


class LazyPattern:
    """``re.compile(pattern, flags)``, done the first time an attribute of it is asked for."""

    def __init__(self, pattern: str | bytes, flags: int = 0) -> None:
        self.pattern = pattern
        self._flags = flags

    def compiled(self) -> re.Pattern[str] | re.Pattern[bytes]:
        """The compiled pattern (compiled now if it was not; ``re`` caches it either way)."""
        return re.compile(self.pattern, self._flags)

    def __getattr__(self, name: str) -> Any:  # (an attribute the instance lacks: its first use)
        compiled = self.compiled()
        for attr in ATTRIBUTES:
            setattr(self, attr, getattr(compiled, attr))
        return getattr(compiled, name)

    def __repr__(self) -> str:
        return f"lazyre.compile({self.pattern!r}, {self._flags})"

    def __reduce__(self) -> tuple[type[LazyPattern], tuple[str | bytes, int]]:
        return LazyPattern, (self.pattern, self._flags)

    def __copy__(self) -> LazyPattern:
        return self  # (as a compiled pattern: immutable)

    def __deepcopy__(self, memo: object) -> LazyPattern:
        return self


def compile(pattern: AnyStr, flags: int = 0) -> re.Pattern[AnyStr]:
    """A pattern compiled on first use, typed as the ``re.Pattern`` it stands for."""
    return cast("re.Pattern[AnyStr]", LazyPattern(pattern, flags))  # it has every attribute of one
