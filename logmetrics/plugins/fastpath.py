"""The framework's fast path: a parser's frequent lines found in C, in runs, the rest record by record.

A parser names the lines that make up nearly all of a busy log (``Parser.frequent``: a regular
expression that matches one whole line). The engine then scans each batch with one pattern that
matches *runs* of such lines (``runs``), hands each run to ``Parser.parse_run`` at once (which
reads it with a ``findall`` of its own, say), and gives everything between two runs to ``parse``,
record by record, in its place. A run is whole records: none of its lines, and not the line after
it, is one the parser's shapes join to the line above (``Shape.lines`` and ``ends``). A frequent
line must not be a shape's ``head`` or ``body`` line either; the parser's pattern sees to that.

What the fast path gives must be what ``parse`` gives on each line; ``logmetrics.testing.
assert_fast_path_matches`` holds a parser to that, on its samples cut into batches of several sizes.
"""

from __future__ import annotations

import re
from typing import NamedTuple

from logmetrics.records.shapes import Shape, unconditional


class Run(NamedTuple):
    """A run of frequent lines: ``text[start:end]``, from the start of its first line to the end of
    its last (not its newline; blank lines may lie between them); ``time`` is the batch's."""

    text: str
    start: int
    end: int
    time: float

    def lines(self) -> list[str]:
        """The run's lines, blank ones left out."""
        return [line for line in self.text[self.start:self.end].split("\n") if line]


_compiled: dict[tuple[str, tuple[Shape, ...]], re.Pattern[str]] = {}


def runs(line: str, shapes: tuple[Shape, ...]) -> re.Pattern[str]:
    """The pattern of runs of ``line`` (one whole line) that are whole records under ``shapes``:
    no line of the run, nor the next line that is not blank, continues the line above it."""
    key = (line, shapes)
    rx = _compiled.get(key)
    if rx is None:
        if len(_compiled) > 256:
            _compiled.clear()
        cont = unconditional(shapes)
        one = rf"(?!{cont})(?:{line})(?![^\n])"
        rx = _compiled[key] = re.compile(rf"^{one}(?:\n+{one})*(?!\n+(?:{cont}))", re.MULTILINE)
    return rx
