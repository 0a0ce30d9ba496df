"""Descriptors: how many log files the tailer may hold open, and which idle ones to close for room.

The soft limit on open files is raised to the hard limit at start. The tailer keeps at most a
budget of files open (most of the limit, leaving room for sockets, inotify, directory walks and
the state file); beyond it files read to their end are *parked*: closed, and reopened by path
once a stat shows they changed. Drained rotated files go first, then the least recently active.
A file that cannot get a descriptor waits until the files read in the same pass leave room (the
files waiting take turns within the pass), or for the next poll; it is neither reported unreadable
nor forgotten. With no file idle, a stream's newer file that may not be read before its older one
gives its descriptor up to that older one, which waits for one: else both could wait for good.
"""

from __future__ import annotations

import errno
import logging
import os
import resource
from collections.abc import Callable, Iterable

from logmetrics.sources.tailfile import TailFile

log = logging.getLogger(__name__)

RESERVED = 64  # descriptors left for everything but log files
#: Under a very low limit, fewer are left, but never less than this: the endpoint's socket and its
#: connections, the event loop, inotify, the wake-up pipe, the state file and its journal, a
#: directory being listed. Below it a scrape may find no descriptor for its connection.
SERVING_MIN = 24
SMALL_BUDGET = 8  # log files open at once under a low limit, where it leaves room for them
HEADROOM = 8  # descriptors left free when the process ran out of them below the budget
OPEN_FLAGS = os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC


def out_of_descriptors(err: OSError) -> bool:
    """Whether ``err`` says the process or the system ran out of file descriptors."""
    return err.errno in (errno.EMFILE, errno.ENFILE)


def raise_open_file_limit() -> int:
    """Raise the soft limit on open files to the hard limit; return the soft limit now in force."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if hard == resource.RLIM_INFINITY or hard > soft:
        want = hard if hard != resource.RLIM_INFINITY else max(soft, 1 << 20)
        try:
            resource.setrlimit(resource.RLIMIT_NOFILE, (want, hard))
            soft = want
        except (OSError, ValueError) as err:
            log.debug("cannot raise the open-file limit to %s: %s", want, err)
    return soft


def budget() -> int:
    """How many log files may be open at once under the current soft limit (see ``budget_for``)."""
    soft = resource.getrlimit(resource.RLIMIT_NOFILE)[0]
    return 1 << 16 if soft == resource.RLIM_INFINITY else budget_for(soft)


def budget_for(soft: int) -> int:
    """How many log files may be open at once under a soft limit of ``soft``: most of it, leaving
    ``RESERVED``; under a low limit up to ``SMALL_BUDGET``, leaving ``SERVING_MIN``; at least one
    (a tailer holds two all the same: ``Descriptors``)."""
    return max(1, min(soft * 3 // 4, soft - RESERVED), min(SMALL_BUDGET, soft - SERVING_MIN))


def low_limit_warning(soft: int) -> str | None:
    """What to say at start when the open-file limit leaves logmetrics too few descriptors."""
    if soft == resource.RLIM_INFINITY or soft >= SERVING_MIN + SMALL_BUDGET:
        return None
    return (f"the open-file limit is {soft} (ulimit -n), and could not be raised: logmetrics needs about "
            f"{SERVING_MIN} descriptors besides the log files it holds open (at most {budget_for(soft)} now, "
            "the others taking turns), and with fewer /metrics may not answer; raise it to 1024 or more")


def _parkable(f: TailFile) -> bool:
    return f.fd >= 0 and f.offset >= f.size


def _park_order(f: TailFile) -> tuple[bool, float]:
    """Drained rotated files first (rarely written again, and closed soon anyway), then the least
    recently active: the key of the candidates sorted so that the first to park comes last."""
    return not f.draining, f.idle_since


class Descriptors:
    """The open-file budget of one tailer; ``files`` gives the tailer's followed files."""

    def __init__(self, files: Callable[[], Iterable[TailFile]], max_open: int | None = None) -> None:
        self._files = files
        self.max_open = max(2, max_open if max_open is not None else budget())
        self.open = 0  # descriptors held for followed files (and files being placed)
        self._idle: list[TailFile] | None = None  # parking candidates, least recently active last
        self._none_idle = False  # no file could be parked in this poll
        self._behind: list[TailFile] | None = None  # newer files held behind their older one, this poll
        #: paths of files closed with bytes unread (``_park_behind``), to be placed again in this pass
        self.evicted: list[str] = []

    def new_poll(self) -> None:
        """Forget this poll's candidates: files read since may be idle now."""
        self._idle = None
        self._none_idle = False
        self._behind = None

    def open_path(self, path: str) -> int:
        """A descriptor for ``path``, parking an idle file if needed; raises OSError (EMFILE: wait)."""
        if self.open >= self.max_open and not self._make_room():
            raise OSError(errno.EMFILE, os.strerror(errno.EMFILE), path)
        try:
            fd = os.open(path, OPEN_FLAGS)
        except OSError as err:
            if not out_of_descriptors(err):
                raise
            # The budget was too high for this process (its limit lowered, or other descriptors in
            # use): lower it and park files down to it, so that the process keeps some room for
            # directory listings, sockets and the state file, which would fail silently otherwise.
            self.max_open = max(2, self.open - HEADROOM)
            while self.open >= self.max_open:
                if not self._make_room():
                    raise
            fd = os.open(path, OPEN_FLAGS)
        self.open += 1
        return fd

    def close(self, fd: int) -> None:
        """Close a descriptor from ``open_path``."""
        os.close(fd)
        self.open -= 1

    def release(self, f: TailFile) -> None:
        """Close a followed file for good (if it is not parked)."""
        if f.fd >= 0:
            f.close()
            self.open -= 1

    def _make_room(self) -> bool:
        """Park the least recently active idle file (else ``_park_behind``); False if none can be."""
        for _ in range(2):
            if self._none_idle:
                break
            if self._idle is None:
                idle = [f for f in self._files() if _parkable(f)]
                self._idle = sorted(idle, key=_park_order, reverse=True)
                self._none_idle = not self._idle
            while self._idle:
                f = self._idle.pop()
                if _parkable(f):
                    f.park()
                    self.open -= 1
                    return True
            self._idle = None  # files opened since the list was made may be idle: look once more
        return self._park_behind()

    def _park_behind(self) -> bool:
        """No file is idle: close a stream's newer file that cannot be read before its older one,
        itself closed with bytes unread and waiting for a descriptor; else, with every descriptor
        held by such newer files, no older file would ever get one. False if there is none."""
        if self._behind is None:
            files = list(self._files())
            behind = {f.stream for f in files if f.fd < 0 and f.draining and f.offset < f.size}
            self._behind = [f for f in files if f.fd >= 0 and not f.draining and f.stream in behind] if behind else []
        while self._behind:
            f = self._behind.pop()
            if f.fd >= 0:
                f.park()
                self.open -= 1
                self.evicted.append(f.path)
                return True
        return False
