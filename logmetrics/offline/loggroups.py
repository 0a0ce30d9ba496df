"""Log files read in groups of lines, each of one step of log time, merged across files by step:
what ``backfill`` and ``report`` feed the engine, so that the store moves through log time.

Cost: the time of a line is looked up only where a step may end: at the last line of each read
block, then by bisection (on byte offsets, the block never split into lines) within a block that
spans a step's end. Lines are assumed in time order within a file; a line stamped earlier than the
step being read counts in that step.
"""

from __future__ import annotations

import heapq
import logging
import os
from collections.abc import Collection, Iterable, Iterator, Sequence
from datetime import datetime, tzinfo

from logmetrics import lazyre
from logmetrics.errors import UserError
from logmetrics.records.logtime import LogClock, anchor_of
from logmetrics.sources.chunks import SourceStats
from logmetrics.sources.discovery import discover, left_out, unreadable
from logmetrics.sources.filefilter import FileFilter

log = logging.getLogger(__name__)

BLOCK = 1 << 18  # bytes read at a time from each file
#: Lines of a block read back one by one for a time stated (``_time_before``), before only those
#: that hold what every stated time holds are: a time of day, or a JSON or key=value time key (three
#: scans, each with its own first character, are ten times quicker than one with the three forms).
WALK = 16
MAY_STATE = (lazyre.compile(rb":\d\d:\d\d"), lazyre.compile(rb'"(?:@timestamp|timestamp|time|ts)"'),
             lazyre.compile(rb"(?:timestamp|time|ts)="))
LATEST = 8  # lines stamped earlier than the one before them, at the end of a block, passed over (``_latest``)
MIN_SPAN = 512  # bytes after a step's start where its end is looked for first (``_boundary``)
#: A step's lines are given in parts of about this many bytes (whole lines, in order): lines that
#: state no time (llama-server's), or a log whose time went back (its lines count in the step being
#: read), are not held in memory whole, nor fed to the engine as one huge chunk.
GROUP_BYTES = 1 << 22
BACK_SAY = 300.0  # a block whose every line is stamped this long before the step being read is said, once


Group = tuple[int, int, int, bytes, float]  # (step, file number, seq, whole lines or b"" at the end, time)


def groups(path: str, number: int, step: float, clock: LogClock, stats: SourceStats | None = None,
           block: int = BLOCK) -> Iterator[Group]:
    """The lines of ``path`` in groups of one step of log time, in file order; the last group is
    ``b""`` (the end of the file) at the step of its last line."""
    cur: int | None = None  # the step being read
    now = clock.mtime  # the time of the group being read: the last one stated
    pending: list[bytes] = []
    seq = 0
    rest = b""
    read = 0  # the bytes of the whole lines read: where the next line starts in the file
    said_back = False
    span = MIN_SPAN  # the bytes of the last step's lines in a block: where to look for the next step's end
    blocks = _blocks(path, block)  # (its file is open only while a block is read: a directory of
    # thousands of logs is read under any open-file limit, their groups merged in log time)
    while True:
        data = next(blocks, b"")
        if stats is not None:
            stats.bytes_read[path] = stats.bytes_read.get(path, 0) + len(data)
            stats.lag_bytes[path] = max(stats.lag_bytes.get(path, 0) - len(data), 0)
        if data:
            rest, data = _cut(rest, data)
            if not data:
                continue
        elif rest:
            data, rest = rest + b"\n", b""
        else:
            break
        read += len(data)
        lo = 0  # where the group being read starts in data
        # (a line stamped earlier than the step being read, at the end of the block, would put
        # every line of the block in that step: the last one stamped in it or later is taken)
        last = _time_before(data, clock, len(data) - 1, 0, None if cur is None else cur * step)
        if last is None:
            pending.append(data)
            if sum(map(len, pending)) >= GROUP_BYTES:  # (a few blocks)
                if cur is None:  # their step is that of the first time stated after them, as ever
                    ahead = _time_ahead(path, read, clock, block)
                    now = clock.mtime if ahead is None else ahead
                    cur = int(now // step)
                yield cur, number, seq, b"".join(pending), now
                seq += 1
                pending.clear()
            continue
        if cur is None:  # the first time stated: what came before it joins its step
            first_t = _first_stated(data, clock)
            cur, now = int(first_t // step), first_t
            if last[1] < cur * step:
                last = _time_before(data, clock, len(data) - 1, 0, cur * step) or last
        if not said_back and last[1] < cur * step - BACK_SAY:
            said_back = True
            _said_back(path, cur * step, last[1], clock.tz)
        last = _latest(data, clock, last)
        while int(last[1] // step) > cur:
            j = _boundary(data, clock, lo, last[0], cur, step, span)
            span = max(j - lo, MIN_SPAN)
            t = _time_before(data, clock, j, lo)
            assert t is not None
            pending.append(data[lo:j])
            body = b"".join(pending)
            if body:
                yield cur, number, seq, body, now
                seq += 1
            pending.clear()
            lo, cur, now = j, int(t[1] // step), t[1]
            clock.last = t[1]
        pending.append(data[lo:] if lo else data)
        now = last[1] if last[1] > now else now
        clock.last = last[1]
        if sum(map(len, pending)) >= GROUP_BYTES:
            yield cur, number, seq, b"".join(pending), now
            seq += 1
            pending.clear()
    if cur is None:  # no time stated anywhere: the file's modification time
        cur, now = int(clock.mtime // step), clock.mtime
    body = b"".join(pending)
    if body:
        yield cur, number, seq, body, now
        seq += 1
    yield cur, number, seq, b"", now


def _said_back(path: str, at: float, back: float, tz: tzinfo | None) -> None:
    when = [datetime.fromtimestamp(x, tz).astimezone(tz).isoformat(timespec="seconds") for x in (at, back)]
    log.warning("%s: log time goes back from %s to %s or earlier (a clock set back, or logs joined out of order): "
                "the lines after it count at %s, as the lines of a file are taken in time order; give such logs as "
                "files of their own", path, when[0], when[1], when[0])


def _cut(rest: bytes, raw: bytes) -> tuple[bytes, bytes]:
    """``rest + raw`` cut after its last newline: what is left of a line, and the whole lines."""
    data = rest + raw
    cut = data.rfind(b"\n") + 1
    return data[cut:], data[:cut]


def _time_ahead(path: str, offset: int, clock: LogClock, block: int) -> float | None:
    """The time that the first line from ``offset`` on that states one states, read ahead in
    ``path`` (as ``groups`` finds the first: the blocks where ``_time_before`` finds one); None if
    no line does (or the file cannot be read: ``groups`` says why)."""
    rest = b""
    try:
        with open(path, "rb") as f:
            f.seek(offset)
            while raw := f.read(block):
                rest, data = _cut(rest, raw)
                if data and _time_before(data, clock, len(data) - 1, 0) is not None:
                    return _first_stated(data, clock)
    except OSError:
        return None
    data = rest + b"\n"
    return _first_stated(data, clock) if rest and _time_before(data, clock, len(data) - 1, 0) else None


def _decode(line: bytes) -> str:
    return line.decode("utf-8", "replace")


def _stated(data: bytes, clock: LogClock, pos: int, lo: int) -> Iterator[tuple[int, float]]:
    """The lines that state a time, from the one holding ``pos`` back to ``lo``: where each starts,
    and its time.

    After ``WALK`` lines that state none, only the lines that may state one are looked at
    (``MAY_STATE``): a log that states no time on most of its lines (llama-server's) is not
    read line by line back to the start of its block."""
    end = data.find(b"\n", pos)
    walk = WALK
    while end > lo:
        start = data.rfind(b"\n", lo, end) + 1 or lo
        t = clock.peek(_decode(data[start:end]))
        if t is not None:
            yield start, t
        end = start - 1
        walk -= 1
        if not walk and clock.anchor is None and data.isascii():  # (``MAY_STATE``'s digits are ASCII)
            for at in sorted({m.start() for rx in MAY_STATE for m in rx.finditer(data, lo, end)}, reverse=True):
                if at < start:  # in a line not looked at yet
                    start = data.rfind(b"\n", lo, at) + 1 or lo
                    t = clock.peek(_decode(data[start:data.find(b"\n", start)]))
                    if t is not None:
                        yield start, t
            return


def _time_before(data: bytes, clock: LogClock, pos: int, lo: int,
                 floor: float | None = None) -> tuple[int, float] | None:
    """The start of the line holding ``pos`` (or of the nearest line before it, from ``lo`` on)
    that states a time, and that time; with ``floor``, the nearest that states one at or after
    ``floor``, if there is one (else the nearest, whatever its time)."""
    earlier: tuple[int, float] | None = None  # the nearest stated before ``floor``
    for got in _stated(data, clock, pos, lo):
        if floor is None or got[1] >= floor:
            return got
        earlier = earlier or got
    return earlier


def _latest(data: bytes, clock: LogClock, last: tuple[int, float]) -> tuple[int, float]:
    """``last`` (the last line of a block that states a time), or the nearest line before it that
    states a later one (``LATEST`` at most): one stamped earlier than the lines before it, at the
    end of a block, does not pull them back to its time."""
    before = _stated(data, clock, last[0] - 1, 0) if last[0] > 0 else iter(())
    for _, got in zip(range(LATEST), before, strict=False):
        if got[1] <= last[1]:
            break
        last = got
    return last


def _blocks(path: str, block: int) -> Iterator[bytes]:
    """``path`` in blocks of ``block`` bytes, the file opened for each read only: if it is gone,
    or another file has taken its name since its first block, what is left of it is not read."""
    offset = 0
    ident: tuple[int, int] | None = None
    while True:
        try:
            with open(path, "rb") as f:
                st = os.fstat(f.fileno())
                if ident is not None and (st.st_dev, st.st_ino) != ident:
                    log.warning("%s was replaced while it was read: the rest of it is left out", path)
                    return
                if st.st_size < offset:
                    log.warning("%s was truncated while it was read (to %d bytes, %d read): the rest of it is "
                                "left out", path, st.st_size, offset)
                    return
                ident = st.st_dev, st.st_ino
                f.seek(offset)
                data = f.read(block)
        except OSError as exc:
            log.warning("cannot read %s: %s; the rest of it is left out", path, exc.strerror or exc)
            return
        if not data:
            return
        offset += len(data)
        yield data


def _first_stated(data: bytes, clock: LogClock) -> float:
    start = 0
    while start < len(data):
        end = data.find(b"\n", start)
        t = clock.peek(_decode(data[start:end]))
        if t is not None:
            return t
        start = end + 1
    raise AssertionError("called on lines that state a time")


def _boundary(data: bytes, clock: LogClock, lo: int, hi: int, cur: int, step: float, span: int = 0) -> int:
    """The start of the first line in ``[lo, hi]`` (byte offsets of line starts in ``data``) whose
    time (its own, else that of a line before it from ``lo`` on) falls after step ``cur`` (that of
    the line at ``hi`` does), by bisection: lines are taken to be in time order.

    ``span``: about how long a step's lines are (the last step's), where to look first; the look
    goes on twice as far each time it falls short, so that a log that moves to a new step every few
    lines (a quiet one, or one whose tasks take minutes) costs a few looks a step, not one per
    halving of the block."""
    a, b = lo, hi
    while span and a + span < b:  # (the probe's line ends before ``b``: ``data.find`` finds its end)
        probe = a + span
        start = data.rfind(b"\n", lo, probe) + 1 or lo
        got = _time_before(data, clock, start, lo)
        if got is not None and int(got[1] // step) > cur:
            b = start
            break
        a = data.find(b"\n", probe) + 1
        span *= 2
    while a < b:
        mid = (a + b) // 2
        start = data.rfind(b"\n", lo, mid) + 1 or lo
        got = _time_before(data, clock, start, lo)
        if got is not None and int(got[1] // step) > cur:
            b = start
        else:
            a = data.find(b"\n", mid) + 1
    return a


def log_files(paths: Sequence[str], chosen: FileFilter | None = None) -> dict[str, int]:
    """The readable log files under ``paths`` (each once, whatever paths lead to it) that ``chosen``
    takes, in the order found, and their sizes. Raises UserError if there is none."""
    found = discover(paths, lambda exc: log.warning("%s", unreadable(exc)), chosen.wanted if chosen else None)
    if not found:
        why = left_out(paths, chosen.wanted) if chosen else ""
        raise UserError(f"no log file found in {', '.join(paths)}{why}")
    files: dict[str, int] = {}
    seen: set[tuple[int, int]] = set()
    for path in found:
        try:
            st = os.stat(path)
            with open(path, "rb"):  # readable (a file that is not is left out, with a warning)
                pass
        except OSError as exc:
            log.warning("cannot read %s: %s; left out", path, exc.strerror or exc)
            continue
        if (st.st_dev, st.st_ino) in seen:
            continue  # the same file by another path (a symlink): read once, as watch does
        seen.add((st.st_dev, st.st_ino))
        files[path] = st.st_size
    if not files:
        raise UserError(f"no readable log file in {', '.join(paths)}")
    return files


def log_groups(found: Iterable[str], step: float, tz: tzinfo | None, stats: SourceStats,
               clocks: list[LogClock] | None = None,
               only: Collection[str] | None = None) -> tuple[list[str], Iterator[Group]]:
    """The files ``found`` (``log_files``; of them, those in ``only``, if given), and the groups of
    all of them merged in log time (by step, then file, then file order); each file's clock is
    appended to ``clocks``."""
    clocks = [] if clocks is None else clocks
    files: list[str] = []
    streams: list[Iterator[Group]] = []
    for path in found:
        if only is not None and path not in only:
            continue
        try:
            st = os.stat(path)
        except OSError as exc:
            log.warning("cannot read %s: %s; left out", path, exc.strerror or exc)
            continue
        stats.lag_bytes[path] = st.st_size
        clocks.append(clock := LogClock(st.st_mtime, tz, _elapsed_anchor(path, st.st_size, st.st_mtime)))
        streams.append(groups(path, len(files), step, clock, stats))
        files.append(path)
    return files, heapq.merge(*streams, key=lambda g: (g[0], g[1], g[2]))


TAIL_BYTES = 65536  # the end of a file read for its last elapsed-time stamp


def _elapsed_anchor(path: str, size: int, mtime: float) -> float | None:
    """For a log that states only elapsed time (llama.cpp's current format): its anchor, its last
    line taken as written at the file's modification time (``logtime.anchor_of``)."""
    try:
        with open(path, "rb") as f:
            f.seek(max(0, size - TAIL_BYTES))
            return anchor_of(f.read(TAIL_BYTES), mtime)
    except OSError:
        return None
