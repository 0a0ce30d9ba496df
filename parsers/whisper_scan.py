"""The whisper parser's frequent lines, and what reads a run of them in C (``WhisperParser.parse_run``).

Frequent lines are one-line records whose events do not depend on the order of the lines among
themselves (LeapfrogAI's chatter, language and VAD lines, audio durations; its request start and
completion lines are taken in order by the parser). The framework finds runs of them; the other
records go through ``parse`` one by one, in order with the runs.

Which lines are frequent is decided once per batch (``WhisperParser.frequent_lines``): in a stream in the LeapfrogAI
format, its lines of a fixed shape; otherwise faster-whisper's lines under Python's default format.
A frequent line is only ever one whose events ``parse`` gives in the same way: the patterns pin
its logger, its level (never an error level) and every free part of its message to characters
that cannot hold any phrase the per-record rules look for.
"""

from __future__ import annotations

import calendar
import re

#: The messages of frequent lines that give an "alive" event (the server works): faster-whisper's.
_ALIVE = (r"Detected language '[\w-]++' with probability [\d.]++|Processing segment at [\d:.]++"
          r"|VAD filter removed [\d:.]++ of audio|VAD filter kept the following audio segments: [\[\]\d:.,> -]*+")
#: What each alive message holds once (``str.count`` over a run counts them).
ALIVE_MARKS = ("Detected language '", "Processing segment at ", "VAD filter ")
_DURATION = r"Processing audio with duration (?:\d+:)?\d{1,2}:\d{2}[.,]\d++"
#: LeapfrogAI messages that give nothing.
_QUIET = r"Updated metadata: \S++|Temperature \S++ is set|Language \S++ is supported|Completed \S++"
_PAIR = r"Task (?:transcribe|translate) is starting|(?:Transcription|Translation) complete!"
_LFAI_TAIL = r": \d{4}-\d\d-\d\d \d\d:\d\d:\d\d(?:,\d{3})? \| (?:INFO|DEBUG|WARNING) \| [\w.-]++:\d++ >>> "
_PY_HEAD = r"(?:INFO|DEBUG|WARNING):faster_whisper:"

#: The frequent lines of a LeapfrogAI stream, and of others (faster-whisper under Python's format).
FREQUENT_LFAI = (rf"__main__{_LFAI_TAIL}(?:{_QUIET}|{_ALIVE}|{_DURATION}|{_PAIR})"
                 rf"|faster_whisper{_LFAI_TAIL}(?:{_QUIET}|{_ALIVE}|{_DURATION})")
FREQUENT_PY = rf"{_PY_HEAD}(?:{_ALIVE}|{_DURATION})"
#: In a run: an audio duration; a request's start or completion line, with its time.
DURATIONS = re.compile(r"Processing audio with duration ((?:\d+:)?\d{1,2}:\d{2}[.,]\d+)(?![^\n])")
#: (Found by their message; the time is at a fixed place of the line, whose shape was checked.)
PAIR_LINES = re.compile(r" >>> (?:Task \w+ is starting|(T)ra\w+ complete!)(?![^\n])")
#: The mark of a LeapfrogAI line (``parsers.leapfrog.MARK``).
LFAI_MARK = " >>> "


def alive_lines(text: str, a: int, b: int) -> int:
    """The alive lines of a run ``text[a:b]``."""
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
