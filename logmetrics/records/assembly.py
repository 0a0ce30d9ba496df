"""Records: physical lines joined into logical records, and batches of whole records.

A multi-line record (a Python traceback, vLLM's re-prefixed exception lines, the llama.cpp timing
block) is one record so that one error is counted once. Which lines continue the previous record is said
by shapes (``logmetrics.records.shapes``: Python tracebacks, Node stacks, Postgres ``DETAIL:``
lines, indented lines, a parser's own; ``Parser.shapes``), compiled into one pattern for whole
records.

The records stage never lets a batch end inside a record: the trailing record of each read is held
back until more data shows that it is complete, or the stream goes idle (``RecordAssembler``).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import NamedTuple

from logmetrics.records.shapes import DEFAULT_SHAPES, Shapes, compiled, ends_in_traceback

#: How records are told apart: a parser's shapes, compiled.
Rule = Shapes
DEFAULT_RULE: Rule = compiled(DEFAULT_SHAPES)
#: A record held back longer than this (characters) is let out as it is, in parts: a block of
#: indented lines that never ends (a backend that prints nothing else) must neither grow without
#: bound nor be scanned again on every read.
MAX_RECORD_CHARS = 1 << 18


class Record(NamedTuple):
    """One logical record: its text (``\\n`` inside a multi-line record, none at the end)."""

    text: str
    time: float | None = None


@dataclass(slots=True)
class Batch:
    """Whole records from one stream, read together.

    ``text`` holds complete records, each ending in ``\\n``; ``time`` is the envelope timestamp of
    the batch's last line (or the time it was read), in Unix seconds; ``lines`` counts the physical
    lines in ``text``. ``pre``: what the parser's ``prescan`` gave for ``text``, where the engine ran
    it ahead of the parser (``logmetrics.engine.ahead``), else None.
    """

    source: str
    text: str
    time: float
    lines: int
    pre: object = None


def split_records(text: str, rule: Rule = DEFAULT_RULE) -> list[str]:
    """Split ``text`` (whole lines) into records, joining continuation lines to the one above."""
    return rule.split(text)


def last_record_start(text: str, rule: Rule = DEFAULT_RULE) -> int:
    """Index in ``text`` (whole lines, ending in ``\\n``) where its last record begins."""
    return rule.last_start(text)


class RecordAssembler:
    """Per stream: cut incoming text after its last complete record; keep the rest for later.

    At most ``max_chars`` of a record are held: a longer one is let out as it stands, and what
    follows it continues as records of their own.
    """

    __slots__ = ("_looked_at", "_unfinished", "max_chars", "pending", "pending_lines", "rule")

    def __init__(self, rule: Rule = DEFAULT_RULE, max_chars: int = MAX_RECORD_CHARS) -> None:
        self.rule = rule
        self.max_chars = max_chars
        self.pending = ""
        self.pending_lines = 0
        self._looked_at = ""  # the held-back text ``unfinished`` last looked at, and what it found
        self._unfinished = False

    def unfinished(self) -> bool:
        """Whether the held-back record ends inside a Python traceback (more of it must come)."""
        if self._looked_at is not self.pending:
            self._looked_at, self._unfinished = self.pending, ends_in_traceback(self.pending)
        return self._unfinished

    def feed(self, text: str, lines: int | None = None) -> tuple[str, int]:
        """Take whole lines (``lines`` of them, if known); return the complete records among them.

        Returns the records' text (possibly ``""``) and its number of lines.
        """
        if lines is None:
            lines = text.count("\n")
        if self.pending:
            text = self.pending + text
            lines += self.pending_lines
        if not text:
            return "", 0
        cut = last_record_start(text, self.rule)
        if len(text) - cut > self.max_chars:
            cut = len(text)  # a record that does not end: out now, held no longer
        self.pending = text[cut:]
        self.pending_lines = self.pending.count("\n")
        return text[:cut], lines - self.pending_lines

    def flush(self) -> tuple[str, int]:
        """The held-back record and its number of lines, at idle or end of input."""
        out = self.pending, self.pending_lines
        self.pending, self.pending_lines = "", 0
        return out
