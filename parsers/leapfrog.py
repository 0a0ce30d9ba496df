"""The line format LeapfrogAI's Python backends share (whisper, text-embeddings, its API):

``name: 2024-11-13 10:45:39,154 | INFO | main.py:29 >>> Task transcribe is starting``

(``%(name)s: %(asctime)s | %(levelname)s | %(filename)s:%(lineno)s >>> %(message)s``). A record of
a traceback logged with ``logger.exception`` is that line followed by the traceback's lines.
"""

from __future__ import annotations

import calendar
from typing import NamedTuple

from logmetrics import lazyre

LINE = lazyre.compile(
    r"(?P<logger>[\w.]+): (?P<ts>\d{4}-\d{2}-\d{2} \d{2}:\d{2}:\d{2})(?:,(?P<ms>\d{3}))? "
    r"\| (?P<level>[A-Z]+) \| (?P<file>[^:|\n]+):(?P<line>\d+) >>> (?P<msg>[^\n]*)"
)
#: Substring every such line holds: a cheap test before the regular expression.
MARK = " >>> "


class LeapfrogLine(NamedTuple):
    """One LeapfrogAI log line, split into its fields (``time``: Unix seconds, local time read as UTC)."""

    logger: str
    time: float
    level: str
    file: str
    msg: str


def leapfrog_line(text: str) -> LeapfrogLine | None:
    """The fields of ``text``'s first line if it is in the LeapfrogAI format, else ``None``."""
    if MARK not in text:
        return None
    m = LINE.match(text)
    if m is None:
        return None
    ts = m.group("ts")
    secs = calendar.timegm((int(ts[:4]), int(ts[5:7]), int(ts[8:10]), int(ts[11:13]), int(ts[14:16]),
                            int(ts[17:19]), 0, 0, 0))
    ms = m.group("ms")
    return LeapfrogLine(m.group("logger"), secs + (int(ms) / 1000 if ms else 0.0), m.group("level"),
                        m.group("file"), m.group("msg"))
