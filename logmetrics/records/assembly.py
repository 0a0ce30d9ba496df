"""Records: physical lines joined into logical records, and batches of whole records.

A multi-line record (a Python traceback, vLLM's re-prefixed exception lines, the llama.cpp timing
block) is one record so that one error is counted once. Which lines continue the previous record is said
either by shapes (``logmetrics.records.shapes``: Python tracebacks, Node stacks, Postgres ``DETAIL:``
lines, indented lines, a parser's own; ``Parser.shapes``), compiled into one pattern for whole
records, or by a regular expression matched at the start of each line (``Parser.continuation``).

The records stage never lets a batch end inside a record: the trailing record of each read is held
back until more data shows that it is complete, or the stream goes idle (``RecordAssembler``).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import NamedTuple

from logmetrics.records.shapes import DEFAULT_SHAPES, Shapes, compiled, unconditional

#: Lines that continue the record above them, one line at a time: the default shapes' lines, with
#: a ``SomeError: message`` line taken as continuing whatever is above it. The per-line form of
#: ``DEFAULT_SHAPES`` (which join that line only to a traceback), for ``Parser.continuation``.
CONTINUATION = re.compile(unconditional(DEFAULT_SHAPES))
#: How records are told apart: a per-line continuation pattern, or compiled shapes.
Rule = re.Pattern[str] | Shapes
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
    lines in ``text``.
    """

    source: str
    text: str
    time: float
    lines: int


def split_records(text: str, continuation: Rule = DEFAULT_RULE) -> list[str]:
    """Split ``text`` (whole lines) into records, joining continuation lines to the one above."""
    if isinstance(continuation, Shapes):
        return continuation.split(text)
    records: list[str] = []
    match = continuation.match
    for line in text.split("\n"):
        if not line:
            continue
        if records and match(line):
            records[-1] += "\n" + line
        else:
            records.append(line)
    return records


def last_record_start(text: str, continuation: Rule = DEFAULT_RULE) -> int:
    """Index in ``text`` (whole lines, ending in ``\\n``) where its last record begins."""
    if isinstance(continuation, Shapes):
        return continuation.last_start(text)
    end = len(text) - 1 if text.endswith("\n") else len(text)
    match = continuation.match
    while True:
        start = text.rfind("\n", 0, end) + 1
        if start == 0 or not match(text, start):
            return start
        end = start - 1


class RecordAssembler:
    """Per stream: cut incoming text after its last complete record; keep the rest for later.

    At most ``max_chars`` of a record are held: a longer one is let out as it stands, and what
    follows it continues as records of their own.
    """

    __slots__ = ("continuation", "max_chars", "pending", "pending_lines")

    def __init__(self, continuation: Rule = DEFAULT_RULE, max_chars: int = MAX_RECORD_CHARS) -> None:
        self.continuation = continuation
        self.max_chars = max_chars
        self.pending = ""
        self.pending_lines = 0

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
        cut = last_record_start(text, self.continuation)
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
