"""The whisper parser's whole-chunk scan: the frequent lines counted in C, the rest found for ``parse``.

A batch is cut into *stretches* of frequent one-line records, whose events do not depend on the
order of the lines among themselves (LeapfrogAI's chatter, language and VAD lines, audio
durations; its request start and completion lines are taken in order by the parser), and *rare
regions*: whole records that go through ``parse`` one by one, in order with the stretches.

Which lines are frequent is decided once per batch (``FREQUENT``): in a stream in the LeapfrogAI
format, its lines of a fixed shape; otherwise faster-whisper's lines under Python's default format.
A frequent line is only ever one whose events ``parse`` gives in the same way: the patterns pin
its logger, its level (never an error level) and every free part of its message to characters
that cannot hold any phrase the per-record rules look for. Any other line is rare, and so is the
line above a line that might continue a record (a traceback's, a timings block's): the region
then holds the whole record.
"""

from __future__ import annotations

import calendar
import re
from collections.abc import Callable

from logmetrics.shapes import Shape, unconditional

#: The messages of frequent lines that give an "alive" event (the server works): faster-whisper's.
_ALIVE = (r"Detected language '[\w-]++' with probability [\d.]++|Processing segment at [\d:.]++"
          r"|VAD filter removed [\d:.]++ of audio|VAD filter kept the following audio segments: [\[\]\d:.,> -]*+")
#: What each alive message holds once (``str.count`` over a stretch counts them).
ALIVE_MARKS = ("Detected language '", "Processing segment at ", "VAD filter ")
_DURATION = r"Processing audio with duration (?:\d+:)?\d{1,2}:\d{2}[.,]\d++"
#: LeapfrogAI messages that give nothing.
_QUIET = r"Updated metadata: \S++|Temperature \S++ is set|Language \S++ is supported|Completed \S++"
_PAIR = r"Task (?:transcribe|translate) is starting|(?:Transcription|Translation) complete!"
_LFAI_TAIL = r": \d{4}-\d\d-\d\d \d\d:\d\d:\d\d(?:,\d{3})? \| (?:INFO|DEBUG|WARNING) \| [\w.-]++:\d++ >>> "
_PY_HEAD = r"(?:INFO|DEBUG|WARNING):faster_whisper:"

#: Rare lines (``\n`` then a line that is not frequent), for a LeapfrogAI stream and for others:
#: searched in ``"\n" + text``.
RARE_LFAI = re.compile(rf"\n(?!(?:__main__{_LFAI_TAIL}(?:{_QUIET}|{_ALIVE}|{_DURATION}|{_PAIR})"
                       rf"|faster_whisper{_LFAI_TAIL}(?:{_QUIET}|{_ALIVE}|{_DURATION}))\n)[^\n]+")
RARE_PY = re.compile(rf"\n(?!{_PY_HEAD}(?:{_ALIVE}|{_DURATION})\n)[^\n]+")
#: In a stretch: an audio duration; a request's start or completion line, with its time.
DURATIONS = re.compile(r"Processing audio with duration ((?:\d+:)?\d{1,2}:\d{2}[.,]\d+)\n")
PAIR_LINES = re.compile(
    r"__main__: (\d{4}-\d\d-\d\d) (\d\d):(\d\d):(\d\d)(?:,(\d{3}))? \| \w+ \| [\w.-]+:\d+ >>> "
    r"(?:Task \w+ is starting|(T)\w+ complete!)\n"
)
#: The mark of a LeapfrogAI line (``parsers.leapfrog.MARK``).
LFAI_MARK = " >>> "


def rare_regions(text: str, lfai: bool, shapes: tuple[Shape, ...]) -> list[tuple[int, int]]:
    """``(start, end)`` of the runs of whole records in ``text`` that hold a rare line, in order;
    ``end`` is at the newline that ends the run."""
    cont = _continuation(shapes)
    out: list[tuple[int, int]] = []
    for m in (RARE_LFAI if lfai else RARE_PY).finditer("\n" + text):
        start, end = m.start(), m.end() - 1  # in ``text``: the line, without its newline
        if start and cont(text, start):  # it may continue the record above: from that record's line
            head = start - 1
            while head and text[head - 1] == "\n":
                head -= 1
            start = text.rfind("\n", 0, head) + 1
        if out and start <= out[-1][1]:
            out[-1] = (out[-1][0], end)
        else:
            out.append((start, end))
    return out


def has_lines(text: str, a: int, b: int) -> bool:
    """Whether ``text[a:b]`` holds a line that is not blank."""
    return text.count("\n", a, b) < b - a


def alive_lines(text: str, a: int, b: int) -> int:
    """The alive lines of a stretch ``text[a:b]``."""
    return sum(text.count(mark, a, b) for mark in ALIVE_MARKS)


_days: dict[str, int] = {}


def line_time(date: str, hh: str, mm: str, ss: str, ms: str | None) -> float:
    """A LeapfrogAI line's time, as ``parsers.leapfrog.leapfrog_line`` gives it."""
    day = _days.get(date)
    if day is None:
        if len(_days) > 1000:
            _days.clear()
        day = _days[date] = calendar.timegm((int(date[:4]), int(date[5:7]), int(date[8:10]), 0, 0, 0, 0, 0, 0))
    return day + int(hh) * 3600 + int(mm) * 60 + int(ss) + (int(ms) / 1000 if ms else 0.0)


_conts: dict[tuple[Shape, ...], re.Pattern[str]] = {}


def _continuation(shapes: tuple[Shape, ...]) -> Callable[[str, int], re.Match[str] | None]:
    """Lines that might continue the record above them, for any of ``shapes`` (matched at a line's start)."""
    rx = _conts.get(shapes)
    if rx is None:
        rx = _conts[shapes] = re.compile(unconditional(shapes))
    return rx.match
