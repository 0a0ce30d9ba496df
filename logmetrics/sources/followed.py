"""The files a tailer follows: the registry its parts share (``Followed``).

``FileTailer`` lists and reads files, ``Placement`` decides what each file found is, ``Resumed``
places files by the positions an earlier run saved; all three read and change the one registry of
followed files kept here, by identity (device, inode): which file is each stream's now, which
streams were ever followed, which files wait for a descriptor, and the start of following a file
(``follow``), letting it go and counting what was lost.
"""

from __future__ import annotations

import logging
import os
import stat
import time
from collections.abc import Callable

from logmetrics.sources.changeindex import ChangeIndex
from logmetrics.sources.chunks import Position, SourceStats
from logmetrics.sources.copies import CopyTracker
from logmetrics.sources.descriptors import Descriptors
from logmetrics.sources.identity import birth
from logmetrics.sources.resume import ResumeState
from logmetrics.sources.tailfile import Ident, LineCutter, TailFile, read_head

log = logging.getLogger("logmetrics.sources.tailer")  # the tailer's messages, under one name


class Followed:
    """The followed files and what the tailer's parts share about them."""

    def __init__(self, stats: SourceStats, *, from_beginning: bool, max_line: int, copy_wait: float,
                 max_open: int | None, changes: ChangeIndex, report: Callable[[str, OSError], None]) -> None:
        self.stats = stats
        self.from_beginning = from_beginning
        self.max_line = max_line
        self.copy_wait = copy_wait
        self.changes = changes
        #: counts and logs a file that cannot be read (out of descriptors: it waits for the next poll)
        self.report = report
        self.files: dict[Ident, TailFile] = {}  # followed files (open, or parked while idle)
        self.fds = Descriptors(lambda: self.files.values(), max_open)  # the others are parked
        self.active: dict[str, Ident] = {}  # stream -> the file now at its path
        self.streams: set[str] = set()  # every stream ever followed: a new file there is a rotation
        self.copies = CopyTracker()  # what copy tracking remembers between polls
        self.resume = ResumeState()  # positions saved by an earlier run, and what became of them
        self.start_at_end: dict[Ident, int] = {}  # present at the first poll but not opened then: size then
        self.unopened: dict[Ident, Position] = {}  # found, waiting for a descriptor: where they will be read from
        self.waiting: set[str] = set()  # paths that wait for a descriptor in this poll
        self.rotated: set[str] = set()  # streams found rotated in this poll's listing
        self.name_index: dict[str, list[TailFile]] | None = None  # followed files by stream name, in a listing
        self.at_end: list[tuple[str, int]] = []  # files started at their end, and that offset, not yet reported
        self.vanished: list[str] = []  # streams whose last file was closed, not yet reported
        self.first = True  # the first poll has not ended
        self.started = 0.0  # when the first poll began (Unix time)
        self._seq = 0

    def current(self, stream: str) -> TailFile | None:
        """The followed file now at ``stream``'s path, if any."""
        ident = self.active.get(stream)
        return None if ident is None else self.files.get(ident)

    def follow(self, fd: int, ident: Ident, head: bytes, path: str, stream: str, offset: int, size: int, *,
               active: bool = False, skip: bool = False, pending: bytes = b"") -> None:
        """Follow the file open as ``fd`` under ``stream`` from ``offset``: as the stream's file
        (``active``), else drained; ``skip``: up to the next newline; ``pending``: a partial line before."""
        self._seq += 1
        f = TailFile(stream, path, fd, ident, head, LineCutter(self.max_line), self._seq)
        f.birth = birth(fd)
        f.seek(offset)
        f.size = size
        f.idle_since = time.monotonic()
        f.cutter.skipping = skip
        f.cutter.pending += pending
        self.files[ident] = f
        if self.name_index is not None:
            self.name_index.setdefault(os.path.basename(stream), []).append(f)
        f.own = active
        real = os.path.realpath(path)
        if real != os.path.abspath(path):  # reached through a symlink
            f.real = real
        if active:
            self.active[stream] = ident
            if stream not in self.streams:
                self.streams.add(stream)
                for counts in (self.stats.bytes_read, self.stats.lines_truncated, self.stats.rotations):
                    counts.setdefault(stream, 0)
                self.stats.truncations.setdefault(stream, 0)
        else:
            drain(f)
        self.changes.add_target(path)

    def open(self, path: str, ident: Ident | None = None) -> tuple[int, int, bytes] | None:
        """Open ``path`` within the budget: (fd, size, head), or None if gone, unreadable or waiting,
        or (given the ``ident`` a stat of ``path`` found) if another file took its place since: a
        file renamed between the stat and the open is the next look's to place, by what it is then
        (else its successor's lines would be followed under its identity, and read again as a new
        file when found under its own)."""
        fd = self.open_fd(path)
        if fd is None:
            return None
        try:
            st = os.fstat(fd)
            if ident is not None and (st.st_dev, st.st_ino) != ident:
                log.debug("%s was replaced between a look and its open: placed at the next look", path)
            elif stat.S_ISREG(st.st_mode):
                return fd, st.st_size, read_head(fd)
        except OSError as err:
            self.report(path, err)
        self.fds.close(fd)
        return None

    def open_fd(self, path: str) -> int | None:
        """A descriptor of ``path`` within the budget, None if gone, unreadable or waiting."""
        try:
            return self.fds.open_path(path)
        except (FileNotFoundError, NotADirectoryError):
            return None
        except OSError as err:
            self.report(path, err)  # out of descriptors: waits for the next poll
            return None
        finally:
            if self.fds.evicted:  # closed for room with bytes unread: placed again in this pass
                self.waiting.update(self.fds.evicted)
                self.fds.evicted.clear()

    def let_go(self, f: TailFile) -> None:
        """Follow ``f`` no more (closed already): out of the followed files, and its stream's file no more."""
        del self.files[f.ident]
        if self.active.get(f.stream) == f.ident:
            del self.active[f.stream]

    def vanish_if_last(self, stream: str) -> None:
        """A file of ``stream`` was let go: if it was its last, the stream is reported vanished."""
        if stream not in self.active and all(g.stream != stream for g in self.files.values()):
            self.vanished.append(stream)

    def lost(self, stream: str, nbytes: int, why: str) -> None:
        """Count ``nbytes`` of ``stream`` as lost (logmetrics_bytes_lost_total), warned once per stream."""
        if stream not in self.stats.bytes_lost:
            log.warning("%s %s: %d bytes of it are lost (counted in logmetrics_bytes_lost_total)", stream, why, nbytes)
        self.stats.bytes_lost[stream] = self.stats.bytes_lost.get(stream, 0) + nbytes

    def lost_while_down(self, p: Position) -> None:
        """A saved file deleted (or moved out of the followed paths) while logmetrics was down:
        what was written to it after the last commit cannot be known (logmetrics_files_lost_total)."""
        name = p.stream if p.path == p.stream else f"{p.path} (a rotated file of {p.stream})"
        log.warning("%s was deleted or moved away while logmetrics was down: what was written to it after the "
                    "last commit is not counted (logmetrics_files_lost_total)", name)
        self.stats.files_lost[p.stream] = self.stats.files_lost.get(p.stream, 0) + 1


def drain(f: TailFile) -> None:
    """``f`` is no stream's file any more: read to its end, then retired once idle."""
    f.draining = True
    f.idle_since = time.monotonic()


def ident_at(path: str) -> Ident | None:
    """The identity of the file now at ``path``, None if there is none."""
    try:
        st = os.stat(path)
    except OSError:
        return None
    return st.st_dev, st.st_ino
