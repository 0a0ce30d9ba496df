"""Records: physical lines joined into logical records, and batches of whole records.

A multi-line record (a Python traceback, vLLM's re-prefixed exception lines, the llama.cpp timing
block) is one record so that one error is counted once. Which lines continue the previous record is
a regular expression matched at the start of a line; the default knows Python tracebacks and
indented continuation lines, and a parser may bring its own (``Parser.continuation``).

The records stage never lets a batch end inside a record: the trailing record of each read is held
back until more data shows that it is complete, or the stream goes idle (``RecordAssembler``).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import NamedTuple

# Lines that continue the record above them: indented lines (traceback frames, stack lines, the
# llama.cpp timing block), the opening and chaining lines of a traceback, and its final
# ``SomeError: message`` line.
CONTINUATION = re.compile(
    r"[ \t]|Traceback \(most recent call last\)|During handling of the above exception"
    r"|The above exception was the direct cause|[A-Za-z_][\w.]*(?:Error|Exception|Exit|Interrupt)(?::|$)"
)


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


def split_records(text: str, continuation: re.Pattern[str] = CONTINUATION) -> list[str]:
    """Split ``text`` (whole lines) into records, joining continuation lines to the one above."""
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


def last_record_start(text: str, continuation: re.Pattern[str] = CONTINUATION) -> int:
    """Index in ``text`` (whole lines, ending in ``\\n``) where its last record begins."""
    end = len(text) - 1 if text.endswith("\n") else len(text)
    match = continuation.match
    while True:
        start = text.rfind("\n", 0, end) + 1
        if start == 0 or not match(text, start):
            return start
        end = start - 1


class RecordAssembler:
    """Per stream: cut incoming text after its last complete record; keep the rest for later."""

    __slots__ = ("continuation", "pending", "pending_lines")

    def __init__(self, continuation: re.Pattern[str] = CONTINUATION) -> None:
        self.continuation = continuation
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
        self.pending = text[cut:]
        self.pending_lines = self.pending.count("\n")
        return text[:cut], lines - self.pending_lines

    def flush(self) -> tuple[str, int]:
        """The held-back record and its number of lines, at idle or end of input."""
        out = self.pending, self.pending_lines
        self.pending, self.pending_lines = "", 0
        return out
