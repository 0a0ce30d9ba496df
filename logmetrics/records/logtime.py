"""Event time: the time a log line states, for ``backfill`` (and anything else that reads a log
whole); live serving keeps the time a line was read.

Recognised, leftmost first within a line's first ``HEAD`` characters (so that an outer envelope
stamp wins over the one inside the message):

* ISO 8601 / RFC 3339: ``2024-04-10T03:30:00.123Z``, ``2024-04-10 03:30:00,123``, with a zone
  (``Z``, ``UTC``, ``+02:00``, ``+0200``) or without; this covers the CRI and ``docker logs -t``
  envelopes, Postgres (``2024-04-10 03:30:00.123 UTC``), gunicorn, Python logging and Rust tracing;
* vLLM's ``INFO 04-10 03:30:00`` (no year);
* the common log format's ``10/Apr/2024:03:30:00 +0000`` and nginx's ``2024/04/10 03:30:00``;
* syslog / journald ``Apr 10 03:30:00`` at the start of a line (no year);
* JSON lines (a line starting with ``{``): the first ``"time"``, ``"timestamp"``, ``"ts"`` or
  ``"@timestamp"`` key, a string (as above) or a number: Unix seconds, or milliseconds,
  microseconds, nanoseconds told apart by size (Docker's json-file envelope has ``"time"``);
* ``key=value`` logs: ``time=...``, ``timestamp=1723514800`` (llama.cpp's server before 2024-09),
  ``ts=...``.

A stamp without a zone is local time: of the machine that reads it, or of the zone given
(``LogClock(tz=...)``, ``--timezone``). A stamp without a year (vLLM, syslog) takes it from the
file: the first such stamp gets the latest year that does not put it after the file's modification
time (a day of slack), each later one the year that puts it nearest to the time stated before it,
so a log whose months go from 12 to 01 moves on to the next year. Times of day alone
(``10:00:00.100 [info]``) state no time. llama.cpp's time since start (``0.08.526.747 I``) does
when the clock has an anchor: a file that states only that is anchored at its end, its last
elapsed stamp taken as its modification time (``anchor_of``; after a restart within one file,
the earlier runs are placed as if they had started with the last one).

An indented line states no time (it continues a record: a stack frame, a field of a JSON object
printed over lines), unless it is a JSON line of its own. A line that states no time takes the
time of the last line that did; lines before the first
stated time take that first time; a file that states none takes its modification time
(:class:`LogClock` keeps that state per file).
"""

from __future__ import annotations

import calendar
import math
import re
from datetime import datetime, tzinfo

from logmetrics import lazyre

HEAD = 256  # characters of a line searched for a stamp (keys of key=value logs: the whole line)
NEAR_KEPT = 4096  # yearless stamps whose times a clock keeps (``LogClock._near``)
SLACK = 86400.0  # a yearless stamp may lie this far after the file's modification time
_YEAR = 365.2425 * 86400
MONTHS = {m: i for i, m in enumerate(("Jan", "Feb", "Mar", "Apr", "May", "Jun", "Jul", "Aug", "Sep", "Oct",
                                       "Nov", "Dec"), 1)}
_MON = "Jan|Feb|Mar|Apr|May|Jun|Jul|Aug|Sep|Oct|Nov|Dec"
_ZONE = r"(?:\s?(?P<{}>Z|UTC|GMT|[+-]\d\d(?::?\d\d)?))?"
_STAMP = lazyre.compile(
    r"(?<!\d)(?P<y>\d{4})-(?P<mo>\d\d)-(?P<d>\d\d)[T ](?P<h>\d\d):(?P<mi>\d\d):(?P<s>\d\d)(?:[.,](?P<f>\d{1,9}))?"
    + _ZONE.format("z") + r"(?![\d:])"
    r"|(?:DEBUG|INFO|WARNING|WARN|ERROR|CRITICAL) (?P<vmo>\d\d)-(?P<vd>\d\d) (?P<vh>\d\d):(?P<vmi>\d\d):(?P<vs>\d\d)\b"
    r"|(?<!\d)(?P<cd>\d\d)/(?P<cmo>" + _MON + r")/(?P<cy>\d{4}):(?P<ch>\d\d):(?P<cmi>\d\d):(?P<cs>\d\d)"
    r"(?: (?P<cz>[+-]\d{4}))?"
    r"|(?<!\d)(?P<ny>\d{4})/(?P<nmo>\d\d)/(?P<nd>\d\d) (?P<nh>\d\d):(?P<nmi>\d\d):(?P<ns>\d\d)(?![\d:])"
    r"|^(?:<\d{1,3}>)?(?P<smo>" + _MON + r") (?P<sd>[ \d]\d) (?P<sh>\d\d):(?P<smi>\d\d):(?P<ss>\d\d)\b")
#: What every form of ``_STAMP`` holds (the minutes and seconds of its time of day), and how far at
#: most before it such a stamp starts (``CRITICAL MM-DD hh`` of vLLM's): a line without one is turned
#: away at once, and ``_STAMP`` is searched for only from just before the first (a search tries its
#: five forms at every position).
_TIME_OF_DAY = lazyre.compile(r":\d\d:\d\d")
_STAMP_LEAD = 17
_JSON_KEY = lazyre.compile(r'"(?:@timestamp|timestamp|time|ts)"\s*:\s*'
                           r'(?:"(?P<str>[^"]{1,64})"|(?P<num>-?\d+(?:\.\d+)?))')
_KV = lazyre.compile(r'(?<![\w.])(?:timestamp|time|ts)=(?:"(?P<str>[^"]{1,64})"|(?P<num>\d+(?:\.\d+)?)(?![\w:-])'
                     r'|(?P<bare>\d{4}-\d\d-\d\dT\S+))')
_RFC3339 = lazyre.compile(r"(?P<y>\d{4})-(?P<mo>\d\d)-(?P<d>\d\d)[T ](?P<h>\d\d):(?P<mi>\d\d):(?P<s>\d\d)"
                          r"(?:[.,](?P<f>\d{1,9}))?" + _ZONE.format("z") + r"$")
MIN_TIME, MAX_TIME = 0.0, 4102444800.0  # 1970 .. 2100: anything else is not a time


#: llama.cpp's time since start before a level letter (``0.08.526.747 I``: minutes, seconds,
#: milliseconds, microseconds), the only time its current log format prints.
_ELAPSED = lazyre.compile(r"(\d+)\.(\d\d)\.(\d\d\d)\.(\d\d\d) [IWEDT] ")
_LAST_ELAPSED = lazyre.compile(rb"(?:^|\n)(\d+)\.(\d\d)\.(\d\d\d)\.(\d\d\d) [IWEDT] ")


def elapsed(m: re.Match[str] | re.Match[bytes]) -> float:
    """Seconds since start of an elapsed-time prefix match."""
    return int(m[1]) * 60 + int(m[2]) + int(m[3]) / 1e3 + int(m[4]) / 1e6


def anchor_of(tail: bytes, mtime: float) -> float | None:
    """Where elapsed time 0 is, for a file that states only elapsed time: its last elapsed stamp
    (in ``tail``, the end of the file) is taken to be its modification time, when the line was
    written. None if the tail holds no such stamp."""
    stamps = list(_LAST_ELAPSED.finditer(tail))
    return mtime - elapsed(stamps[-1]) if stamps else None


def _offset(zone: str | None) -> float | None:
    """Seconds east of UTC of a zone suffix, None for none."""
    if zone is None:
        return None
    if zone in ("Z", "UTC", "GMT"):
        return 0.0
    sign = -1.0 if zone[0] == "-" else 1.0
    digits = zone[1:].replace(":", "")
    hours, minutes = int(digits[:2]), int(digits[2:4] or 0)
    return sign * (hours * 3600 + minutes * 60)


def to_epoch(y: int, mo: int, d: int, h: int, mi: int, s: int, frac: str | None, offset: float | None,
             tz: tzinfo | None) -> float | None:
    """Unix seconds of a wall-clock time: at ``offset`` seconds east of UTC, else in ``tz`` (None:
    the machine's local time; in the hour that repeats when clocks go back, the first of its two
    times). None for an impossible date (month 13, February 30)."""
    try:
        if offset is not None:
            if not (1 <= mo <= 12 and 1 <= d <= calendar.monthrange(y, mo)[1] and h < 24 and mi < 60 and s < 61):
                return None
            t = calendar.timegm((y, mo, d, h, mi, s, 0, 0, 0)) - offset
        else:
            t = datetime(y, mo, d, h, mi, min(s, 59), tzinfo=tz).timestamp()
    except (ValueError, OverflowError, OSError):
        return None
    if frac:
        t += int(frac) / 10 ** len(frac)
    return t if MIN_TIME < t < MAX_TIME else None


def epoch_number(value: float) -> float | None:
    """A JSON or key=value number as Unix seconds: seconds, milliseconds, microseconds or
    nanoseconds, told apart by size; None where it is no time of this era."""
    for scale in (1.0, 1e3, 1e6, 1e9):
        t = value / scale
        if t < MAX_TIME:
            return t if t > 1e8 else None  # 1973 on: small numbers are durations or counts
    return None


def parse_time(text: str, tz: tzinfo | None = None) -> float | None:
    """An RFC 3339 / ISO 8601 time (zone optional: else ``tz``, else local) or a Unix time in
    seconds, as Unix seconds; None if ``text`` is neither."""
    text = text.strip()
    m = _RFC3339.match(text)
    if m is not None:
        return to_epoch(int(m["y"]), int(m["mo"]), int(m["d"]), int(m["h"]), int(m["mi"]), int(m["s"]), m["f"],
                        _offset(m["z"]), tz)
    try:
        value = float(text)
    except ValueError:
        return None
    return value if MIN_TIME <= value < MAX_TIME else None


class LogClock:
    """The times the lines of one file state, in file order (see the module's notes).

    ``mtime``: the file's modification time (the year of yearless stamps, and the time of a file
    that states none); ``tz``: the zone of stamps without one (None: the machine's local time).
    """

    __slots__ = ("_near", "_ref", "anchor", "last", "mtime", "tz")

    def __init__(self, mtime: float, tz: tzinfo | None = None, anchor: float | None = None) -> None:
        self.mtime = mtime
        self.tz = tz
        self.last: float | None = None  # the last time stated (committed)
        #: Unix time of elapsed time 0 (llama.cpp's ``0.08.526.747 I`` prefixes), if known (``anchor_of``)
        self.anchor = anchor
        #: a yearless stamp's times in the years around that of the last time stated, by that year and
        #: the stamp (a busy log repeats each second's stamp on many lines); the last time stated and its year
        self._near: dict[tuple[int, int, int, int, int, int], list[float]] = {}
        self._ref: tuple[float, int] = (math.nan, 0)

    def stated(self, line: str) -> float | None:
        """The time ``line`` states, or None; a stated time becomes the reference of the next ones."""
        t = self.peek(line)
        if t is not None:
            self.last = t
        return t

    def time(self, line: str) -> float:
        """The time of ``line``: its own, else the last stated one, else the file's modification time."""
        t = self.stated(line)
        return t if t is not None else self.last if self.last is not None else self.mtime

    def peek(self, line: str) -> float | None:
        """The time ``line`` states, or None, without making it the reference of later lines."""
        if not line:
            return None
        try:
            return self._peek(line)
        except (ValueError, OverflowError, IndexError):  # never: the patterns admit numbers only
            return None

    def _peek(self, line: str) -> float | None:
        if self.anchor is not None and "0" <= line[0] <= "9":
            e = _ELAPSED.match(line)
            if e is not None:
                return self.anchor + elapsed(e)
        first = line[0] if line[0] not in " \t" else line.lstrip()[:1]
        if first == "{":
            m = _JSON_KEY.search(line)
            if m is not None:
                return self._value(m["str"], m["num"])
        elif first != line[0]:  # an indented line continues a record (a frame, a field of an object
            return None  # printed over lines): a time in it is data, never the record's own
        head = line[:HEAD]
        if ":" in head:
            tod = _TIME_OF_DAY.search(head)
            if tod is not None:
                m = _STAMP.search(head, max(tod.start() - _STAMP_LEAD, 0))
                if m is not None:
                    return self._stamp(m)
        if "=" in line:
            m = _KV.search(line)
            if m is not None:
                return self._value(m["str"] or m["bare"], m["num"])
        return None

    def _value(self, text: str | None, num: str | None) -> float | None:
        if num is not None:
            return epoch_number(float(num))
        if text is None:
            return None
        t = parse_time(text, self.tz)
        if t is not None and t > 1e8:
            return t
        try:
            return epoch_number(float(text))
        except ValueError:
            return None

    def _stamp(self, m: re.Match[str]) -> float | None:
        g = m.group
        if g("y") is not None:
            return self._wall(int(g("y")), int(g("mo")), int(g("d")), int(g("h")), int(g("mi")), int(g("s")), g("f"),
                              _offset(g("z")))
        if g("vmo") is not None:
            return self._yearless(int(g("vmo")), int(g("vd")), int(g("vh")), int(g("vmi")), int(g("vs")))
        if g("cy") is not None:
            return self._wall(int(g("cy")), MONTHS[g("cmo")], int(g("cd")), int(g("ch")), int(g("cmi")), int(g("cs")),
                              None, _offset(g("cz")))
        if g("ny") is not None:
            return self._wall(int(g("ny")), int(g("nmo")), int(g("nd")), int(g("nh")), int(g("nmi")), int(g("ns")),
                              None, None)
        return self._yearless(MONTHS[g("smo")], int(g("sd")), int(g("sh")), int(g("smi")), int(g("ss")))

    def _wall(self, y: int, mo: int, d: int, h: int, mi: int, s: int, frac: str | None,
              offset: float | None) -> float | None:
        """A stamp with a year; one with no offset, in the hour that repeats when clocks go back
        (winter time), is the later of its two times where that one is nearer the last time stated."""
        t = to_epoch(y, mo, d, h, mi, s, frac, offset, self.tz)
        return t if offset is not None or t is None else self._fold(t)

    def _fold(self, t: float) -> float:
        """``t`` (a wall-clock time read as the first of its times), or the later of the two times it
        names in the hour that repeats when clocks go back, where that one is nearer the last time stated."""
        ref = self.last
        if ref is None or t >= ref:
            return t
        try:
            later = datetime.fromtimestamp(t, self.tz).replace(fold=1).timestamp()
        except (ValueError, OverflowError, OSError):
            return t
        return later if later > t and abs(later - ref) < ref - t else t

    def _yearless(self, mo: int, d: int, h: int, mi: int, s: int) -> float | None:
        """A stamp without a year: the first gets the latest year that does not put it after the
        modification time; later ones, the year that puts them nearest the last stated time."""
        if self.last is None:
            year = datetime.fromtimestamp(self.mtime, self.tz).year
            for y in (year, year - 1, year - 2, year - 3, year - 4):  # Feb 29 needs a leap year
                t = to_epoch(y, mo, d, h, mi, s, None, None, self.tz)
                if t is not None and t <= self.mtime + SLACK:
                    return t
            return None
        ref = self.last
        if self._ref[0] != ref:
            self._ref = ref, datetime.fromtimestamp(ref, self.tz).year
        year = self._ref[1]
        key = (year, mo, d, h, mi, s)
        times = self._near.get(key)
        if times is None:
            if len(self._near) >= NEAR_KEPT:
                self._near.clear()
            times = self._near[key] = [t for y in (year - 1, year, year + 1)
                                       if (t := to_epoch(y, mo, d, h, mi, s, None, None, self.tz)) is not None]
        best = min(times, key=lambda t: abs(t - ref), default=None)  # (the earliest of two as near)
        if best is not None:
            best = self._fold(best)
        return best if best is not None and abs(best - ref) < _YEAR else None
