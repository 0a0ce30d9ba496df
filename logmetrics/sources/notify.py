"""Notify: what the file system says changed, so that a pass reads only those files.

On Linux, ``InotifyWatcher`` reads inotify events itself, on the tailer's thread, only when a pass
is about to run: the kernel merges the events a busy file gives between two passes into one, so a
file written 20,000 times a second costs one event per pass, not a thread's wake-up per write.
``changes()`` returns the paths whose content changed, and whether anything else happened
(a file created, deleted or renamed, a directory added, the event queue overflowed), after which
the directories are listed again. Elsewhere, ``WatchdogWatcher`` only wakes the poller, and every
pass lists everything, as before.

Either way, polling stays the source of truth: what cannot be watched (no inotify instance left,
out of watches, a directory beyond the limit) is polled at every pass, and everything is listed
again at a slower safety interval (``--rescan-interval``), which also covers what inotify never
reports (writes on another machine to a network file system).
"""

from __future__ import annotations

import contextlib
import logging
import os
import re
import struct
import sys
from collections.abc import Callable, Sequence

from logmetrics.sources.watching import Changes, Root, Watcher

log = logging.getLogger(__name__)

MAX_INOTIFY_TARGETS = 4096  # inotify: the same, where a watch costs about a kilobyte of kernel memory
MAX_TREE_WATCHES = 8192  # inotify: directories watched under the recursive roots, at most

# inotify(7)
IN_MODIFY = 0x2
IN_MOVED_FROM = 0x40
IN_MOVED_TO = 0x80
IN_CREATE = 0x100
IN_DELETE = 0x200
IN_DELETE_SELF = 0x400
IN_MOVE_SELF = 0x800
IN_Q_OVERFLOW = 0x4000
IN_IGNORED = 0x8000
IN_EXCL_UNLINK = 0x04000000
IN_ISDIR = 0x40000000
MASK = (IN_MODIFY | IN_MOVED_FROM | IN_MOVED_TO | IN_CREATE | IN_DELETE | IN_DELETE_SELF | IN_MOVE_SELF
        | IN_EXCL_UNLINK)
#: ``struct inotify_event`` before its name: wd, mask, cookie, len (the name's size, NUL-padded).
EVENT_HEAD = struct.Struct("iIII")
#: the mask and cookie of a write's event as they are read: ``IN_MODIFY``, 0
WRITTEN = struct.pack("II", IN_MODIFY, 0)
READ_BYTES = 1 << 16  # per read(2): many events, each at most 16 + NAME_MAX + 1 bytes
Event = tuple[int, int, int, str]  # wd, mask, cookie, name


def take_events(data: bytes, modified: set[bytes], other: list[Event]) -> None:
    """Put the events in ``data`` (as read(2) gives them) in ``modified`` (a write to a file: the
    event whole, kept once however many writes) or ``other`` (decoded).

    Where many files are written in turn, a read holds thousands of writes' events and little
    else. If they are all writes (``IN_MODIFY``, no cookie) and all of one size, they are cut
    apart in C, with no loop over them in Python. Every event's size field is checked first, so
    the cuts are the events' own bounds: the first ends where the second begins, whose size is
    the same, and so on."""
    end = len(data)
    if end >= EVENT_HEAD.size and data[4:12] == WRITTEN:
        size = EVENT_HEAD.size + EVENT_HEAD.unpack_from(data)[3]
        count, rest = divmod(end, size)
        if not rest and all(data[j::size] == data[j:j + 1] * count for j in range(4, EVENT_HEAD.size)):
            modified.update(re.findall(b"(?s).{%d}" % size, data))  # (re caches the pattern per size)
            return
    unpack = EVENT_HEAD.unpack_from
    pos = 0
    while pos < end:
        wd, mask, cookie, size = unpack(data, pos)
        start = pos
        pos += EVENT_HEAD.size + size
        if mask == IN_MODIFY:
            modified.add(data[start:pos])
        else:
            other.append((wd, mask, cookie, os.fsdecode(data[pos - size:pos].split(b"\0", 1)[0])))


def make_watcher(wake: Callable[[], None], roots: Sequence[Root]) -> Watcher | None:
    """An inotify watcher on Linux, watchdog's elsewhere; None if there can be none (every pass
    then lists everything, every --poll-interval)."""
    try:
        if sys.platform.startswith("linux"):
            return InotifyWatcher(roots)
        from logmetrics.sources.watchdogwatch import WatchdogWatcher

        return WatchdogWatcher(wake, roots)
    except Exception as err:  # EMFILE: fs.inotify.max_user_instances reached, say
        log.warning("no file system notifications (%s): every file is looked at every --poll-interval", err)
        return None


class InotifyWatcher:
    """inotify, read without a thread: see the module's docstring."""

    names_changes = True

    def __init__(self, roots: Sequence[Root]) -> None:
        from inotify_simple import INotify

        self._ino = INotify(nonblocking=True)
        self._dirs: dict[int, str] = {}  # watch descriptor -> absolute directory
        self._wds: dict[str, int] = {}  # absolute directory -> watch descriptor
        self._deep: set[str] = set()  # directories whose new subdirectories are watched too
        self._roots: dict[str, bool] = {}  # absolute root -> recursive
        self._waiting: list[Root] = list(roots)
        self._targets = 0
        # Read and not handled yet (by urgent(), or by changes() before it handles them): the
        # events of files written to, whole as read (watch, mask, cookie, size, raw name), each once
        # however many writes; every other event.
        self._modified: set[bytes] = set()
        self._other: list[Event] = []
        self._rescan = False  # set by a root watched late: what is in it was never listed
        self.retry()

    def fileno(self) -> int | None:
        return int(self._ino.fileno())

    def _add(self, directory: str) -> bool:
        if directory in self._wds:
            return True
        try:
            wd = int(self._ino.add_watch(directory, MASK))
        except OSError as err:  # ENOSPC: out of watches (fs.inotify.max_user_watches); EACCES; gone
            log.debug("cannot watch %s: %s", directory, err)
            return False
        old = self._dirs.get(wd)  # the same directory under another name: one watch, the last name
        if old is not None:
            self._wds.pop(old, None)
        self._dirs[wd] = directory
        self._wds[directory] = wd
        return True

    def _add_tree(self, top: str) -> None:
        """Watch ``top`` and every directory under it (symlinked ones too, each once)."""
        seen: set[tuple[int, int]] = set()
        todo = [top]
        while todo:
            directory = todo.pop()
            try:
                st = os.stat(directory)
            except OSError:
                continue
            if (st.st_dev, st.st_ino) in seen:
                continue
            seen.add((st.st_dev, st.st_ino))
            if len(self._wds) >= MAX_TREE_WATCHES + self._targets or not self._add(directory):
                continue  # not covered: the files in it are looked at every pass
            self._deep.add(directory)
            with contextlib.suppress(OSError):
                with os.scandir(directory) as it:
                    todo += [e.path for e in it if _is_dir(e)]

    def _drop_tree(self, top: str) -> None:
        """Stop watching ``top`` and what is under it (moved away: its watches would report old names)."""
        prefix = top.rstrip(os.sep) + os.sep
        for directory in [d for d in self._wds if d == top or d.startswith(prefix)]:
            wd = self._wds.pop(directory)
            self._dirs.pop(wd, None)
            self._deep.discard(directory)
            with contextlib.suppress(OSError):
                self._ino.rm_watch(wd)

    def covers(self, directory: str) -> bool:
        return directory in self._wds

    def retry(self) -> None:
        if not self._waiting:
            return
        waiting, self._waiting = self._waiting, []
        for root, recursive in waiting:
            directory = os.path.abspath(root)
            if not os.path.isdir(directory):
                self._waiting.append((root, recursive))
                continue
            self._roots[directory] = recursive
            if recursive:
                self._add_tree(directory)
            else:
                self._add(directory)
            self._rescan = True

    def add_root(self, root: Root) -> None:
        self._waiting.append(root)
        self.retry()

    def add_target(self, path: str) -> None:
        real = os.path.dirname(os.path.realpath(path))
        if real not in self._wds and self._targets < MAX_INOTIFY_TARGETS and self._add(real):
            self._targets += 1

    def _read(self) -> bool | None:
        """Take in the events there now (never blocking): whether there were any; None if the
        descriptor cannot be read. Writes to a file, by far the most frequent events (one per
        write when several files of a directory are written in turn: the kernel merges only
        repeats of the last event), are kept once each, their names decoded only then."""
        try:
            data = os.read(self._ino.fileno(), READ_BYTES)
        except (BlockingIOError, InterruptedError):
            return False
        except OSError as err:  # closed, say: list everything, as without a watcher
            log.debug("reading inotify events: %s", err)
            return None
        take_events(data, self._modified, self._other)
        return bool(data)

    def urgent(self) -> bool:
        while (got := self._read()):
            pass
        return got is None or bool(self._other)

    def changes(self) -> Changes:
        while (got := self._read()):
            pass
        if got is None:
            self._modified.clear()
            self._other.clear()
            return Changes(frozenset(), True)
        rescan, self._rescan = self._rescan, False
        modified, self._modified = self._modified, set()
        other, self._other = self._other, []
        paths: set[str] = set()
        dirs = self._dirs
        for event in modified:  # before the other events: a watch they drop may be given again
            directory = dirs.get(EVENT_HEAD.unpack_from(event)[0])
            if directory is not None:
                paths.add(os.path.join(directory, os.fsdecode(event[EVENT_HEAD.size:].split(b"\0", 1)[0])))
        for wd, mask, _cookie, name in other:
            if mask & IN_Q_OVERFLOW:
                rescan = True
                continue
            directory = dirs.get(wd)
            if directory is None:
                continue
            rescan = True
            if mask & IN_IGNORED:  # the directory is gone (or unmounted)
                dirs.pop(wd, None)
                self._wds.pop(directory, None)
                self._deep.discard(directory)
                if directory in self._roots:
                    self._waiting.append((directory, self._roots.pop(directory)))
            elif mask & IN_MOVE_SELF and directory in self._roots:
                self._drop_tree(directory)  # a root renamed: watched again once one is there by its name
                self._waiting.append((directory, self._roots.pop(directory)))
            elif mask & IN_ISDIR:
                sub = os.path.join(directory, name)
                if mask & IN_MOVED_FROM:
                    self._drop_tree(sub)
                elif mask & (IN_CREATE | IN_MOVED_TO) and directory in self._deep:
                    self._add_tree(sub)
        if self._waiting:
            self.retry()
            rescan = rescan or self._rescan
            self._rescan = False
        return Changes(frozenset(paths), rescan)

    def stop(self) -> None:
        with contextlib.suppress(OSError):
            self._ino.close()


def _is_dir(entry: os.DirEntry[str]) -> bool:
    try:
        return entry.is_dir()
    except OSError:
        return False
