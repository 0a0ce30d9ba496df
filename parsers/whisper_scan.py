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

from logmetrics.records.shapes import Shape, unconditional

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
#: (Found by their message; the time is at a fixed place of the line, whose shape was checked.)
PAIR_LINES = re.compile(r" >>> (?:Task \w+ is starting|(T)ra\w+ complete!)\n")
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


_hours: dict[str, int] = {}
#: ``MM:SS`` -> seconds, ``mmm`` -> its fraction of a second (as ``leapfrog_line`` computes them).
_MIN_SEC = {f"{m:02d}:{s:02d}": m * 60 + s for m in range(100) for s in range(100)}
_MILLIS = {f"{ms:03d}": ms / 1000 for ms in range(1000)}


def line_time(text: str, at: int) -> float:
    """The time of the frequent LeapfrogAI line at ``at`` (``__main__: 2024-11-13 10:45:38,004 | ...``),
    as ``parsers.leapfrog.leapfrog_line`` gives it."""
    hour = text[at + 10:at + 23]
    base = _hours.get(hour)
    if base is None:
        if len(_hours) > 4096:
            _hours.clear()
        base = _hours[hour] = calendar.timegm((int(hour[:4]), int(hour[5:7]), int(hour[8:10]), int(hour[11:13]),
                                               0, 0, 0, 0, 0))
    secs = base + _MIN_SEC[text[at + 24:at + 29]]
    return secs + _MILLIS[text[at + 30:at + 33]] if text[at + 29] == "," else secs + 0.0


_conts: dict[tuple[Shape, ...], re.Pattern[str]] = {}


def _continuation(shapes: tuple[Shape, ...]) -> Callable[[str, int], re.Match[str] | None]:
    """Lines that might continue the record above them, for any of ``shapes`` (matched at a line's start)."""
    rx = _conts.get(shapes)
    if rx is None:
        rx = _conts[shapes] = re.compile(unconditional(shapes))
    return rx.match
