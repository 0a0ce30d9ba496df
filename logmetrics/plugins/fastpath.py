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
from collections.abc import Iterator
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


class Runs:
    """The runs of a parser's frequent lines in a text, found by one pattern that begins with the
    newline before a run (``after``). A pattern that begins with a character is searched for that
    character (in a tight loop), where a ``^`` of ``MULTILINE`` is tried at every position of the
    text: ten times the cost on long lines. A run at the text's start is matched on a copy of the
    text behind a newline: compiling a second pattern for it would cost more than the copy."""

    __slots__ = ("after",)

    def __init__(self, one: str, cont: str) -> None:
        # (no group: a capture costs 5 to 10 %)
        self.after = re.compile(rf"\n{one}(?:\n+{one})*(?!\n+(?:{cont}))", re.MULTILINE)

    def spans(self, text: str) -> Iterator[tuple[int, int]]:
        """Where each run starts and ends in ``text`` (from its first line's start to its last line's
        end), in order."""
        pos = 0
        m = self.after.match("\n" + text)
        if m is not None:
            pos = m.end() - 1
            yield 0, pos
        for m in self.after.finditer(text, pos):
            yield m.start() + 1, m.end()


_compiled: dict[tuple[str, tuple[Shape, ...]], Runs] = {}


def runs(line: str, shapes: tuple[Shape, ...]) -> Runs:
    """The runs of ``line`` (one whole line) that are whole records under ``shapes``: no line of the
    run, nor the next line that is not blank, continues the line above it."""
    key = (line, shapes)
    found = _compiled.get(key)
    if found is None:
        if len(_compiled) > 256:
            _compiled.clear()
        cont = unconditional(shapes)
        found = _compiled[key] = Runs(rf"(?!{cont})(?:{line})(?![^\n])", cont)
    return found
