"""Sources: follow log files and hand out whole lines in chunks (stdin is ``logmetrics.sources.stdin``).

``FileTailer`` follows the files found under its paths (files, directories recursively, globs with
``**``), re-discovered on every ``poll()``. A file is followed by identity (device, inode), not by
name, so rename and delete+recreate rotation, copytruncate and symlink flips lose and repeat no
line: a replaced file is drained to its end before its successor is read from the start; a file
whose size drops below the read offset is read again from the start, and logrotate's copy of it is
recognised by what a copytruncate leaves behind (``logmetrics.sources.copies``) and read only from where
the original had been read. The stream id of a file is the path it was found at, stable across
rotation. What each file found is, is decided in ``logmetrics.sources.placement``. Beyond the open-file
budget, idle files are closed and reopened by path when they change (``logmetrics.sources.descriptors``);
a file waiting for a descriptor is tried again at the next poll.

Polling is the source of truth; ``watch()`` only wakes the poller early through watchdog. Every
chunk holds whole lines (the cut of a partial last line waits for its newline, ``flush()`` at end
of input) and no line is longer than the cap.
"""

from __future__ import annotations

import bisect
import logging
import os
import resource
import stat
import time
from collections.abc import Callable, Collection, Iterable, Sequence

from logmetrics.sources import filekinds
from logmetrics.sources.changeindex import ChangeIndex
from logmetrics.sources.chunks import Chunk, Position, SourceStats
from logmetrics.sources.copies import COPY_WAIT, Cut
from logmetrics.sources.descriptors import out_of_descriptors
from logmetrics.sources.discovery import covers, discover, is_glob, validate, watch_root
from logmetrics.sources.followed import Followed
from logmetrics.sources.placement import Placement
from logmetrics.sources.reading import PASS_BUDGET, Reader
from logmetrics.sources.tailfile import Ident, TailFile
from logmetrics.sources.waker import Waker

log = logging.getLogger(__name__)

POLL_BUDGET = 1 << 20  # bytes read from one file in one poll, so one busy file does not starve others
ROTATE_WAIT = 5.0  # seconds a replaced file stays open after its last new byte (its writer may lag)
MAX_TURNS = 256  # rounds of files waiting for a descriptor in one pass, at most
COPY_WAIT_STARVED = 6  # a cut waits this many times copy_wait while found files wait for descriptors
RESCAN_INTERVAL = 5.0  # seconds between two passes that look at every file, when inotify names what changed


def _deleted_and_read(f: TailFile, offset: int) -> bool:
    """Whether the open file ``f`` was deleted (no name leads to it) and read to its end."""
    if f.fd < 0:
        return False
    try:
        st = os.fstat(f.fd)
    except OSError:
        return False
    return st.st_nlink == 0 and offset >= st.st_size


class FileTailer:
    """Follows the files under ``paths``; ``poll()`` returns the whole lines written since the last one."""

    def __init__(
        self,
        paths: Sequence[str],
        *,
        from_beginning: bool,
        stats: SourceStats,
        max_line_bytes: int = 1 << 20,
        read_size: int = 128 * 1024,
        rotate_wait: float = ROTATE_WAIT,
        copy_wait: float = COPY_WAIT,
        poll_budget: int = POLL_BUDGET,
        pass_budget: int = PASS_BUDGET,
        max_open: int | None = None,
        wait_for_missing: bool = False,
        strict: bool = False,
        rescan_interval: float = RESCAN_INTERVAL,
        wanted: Callable[[str], bool] | None = None,
        only: Collection[str] | None = None,
    ) -> None:
        #: the inputs' include and exclude globs on the files found under directories and globs
        self.wanted = wanted
        #: of the files the paths name, the only ones to follow (a worker's share of a --oneshot)
        self.only = only
        self._missing = [path for path in paths if not validate(path, wait_for_missing)]
        self.stats = stats
        self._paths = list(paths)
        self._turn = ""  # the last waiting path given a descriptor: the next pass begins after it
        self._walk_incomplete = False  # a directory could not be listed (no descriptor): forget nothing
        self._strict = strict  # errors on the PATH arguments themselves are kept for failed_args(), not logged
        self._args = {os.path.normpath(p) for p in paths if not is_glob(p)}
        self._reported: dict[str, str] = {}  # path -> the error reported for it
        self._followed = Followed(stats, from_beginning=from_beginning, max_line=max_line_bytes,
                                  copy_wait=copy_wait, max_open=max_open, changes=ChangeIndex(rescan_interval),
                                  report=self._report)
        self._placement = Placement(self._followed)
        self._reader = Reader(self._followed, read_size=read_size, budget=max(poll_budget, read_size),
                              rotate_wait=rotate_wait, pass_budget=pass_budget)

    @property
    def rescan_interval(self) -> float:
        """Seconds between passes that look at every file, when the watcher names what changed."""
        return self._followed.changes.rescan_interval

    @rescan_interval.setter
    def rescan_interval(self, seconds: float) -> None:
        self._followed.changes.rescan_interval = seconds

    def watch(self, waker: Waker) -> None:
        """Wake ``waker`` on changes in the directories involved; polling stays the source of truth."""
        followed = self._followed
        self._reader.waker = waker
        fd = followed.changes.start(waker.wake, [watch_root(path) for path in self._paths])
        if followed.changes.watcher is None:
            return
        waker.watch_fd(fd)
        for f in followed.files.values():
            followed.changes.add_target(f.path)

    def _watch_appeared(self) -> None:
        """Watch the PATH arguments that were missing at start and exist now as they should be."""
        for path in [p for p in self._missing if os.path.exists(p)]:
            self._missing.remove(path)
            self._followed.changes.add_root(watch_root(path))

    def positions(self) -> list[Position]:
        """Where every open file stands: what has been handed out, not a partial last line."""
        followed = self._followed
        out = []
        for f in followed.files.values():
            offset = f.handed_out()
            if f.draining and _deleted_and_read(f, offset):
                continue  # nothing of it can be resumed, or lost: a restart must not declare it lost
            out.append(Position(f.stream, f.path, f.ident[0], f.ident[1], f.head, offset, f.fingerprint(offset),
                                f.real if f.real != f.path else None, f.birth))
        out += [p for ident, p in followed.unopened.items() if ident not in followed.files]  # found, not opened yet
        out += [p for ident, p in followed.resume.unseen.items() if ident not in followed.files]  # not found yet
        return out

    def resume(self, positions: Sequence[Position], saved_at: float, inputs: Sequence[str] | None = None) -> None:
        """Before the first poll: go on from ``positions``, saved at ``saved_at`` (Unix time).

        A saved file still there (by identity, starting with the same bytes and with the same
        fingerprint at its position) is read on from its position, under its stream, wherever it
        now lies (renamed while we were down); one cut while we were down is read from its start.
        Another file that got a saved file's inode is a new file, read as if none were saved.
        Other files that changed since ``saved_at`` were written while we were down and are read
        from their start, except logrotate's copy of a saved file, read from that file's position.
        Unchanged files start at their end as usual. Files that none of the saved PATH arguments
        ``inputs`` named (new ones adopted, ``--state-adopt``) are placed as at a first start.
        """
        self._followed.resume.restore(positions, saved_at, inputs)

    def set_paths(self, paths: Sequence[str], *, from_beginning: bool | None = None) -> list[str]:
        """Follow ``paths`` from now on (the configuration was read again); returns the streams let go.

        The files only dropped PATH arguments named are closed at once, and forgotten: one named
        again later starts at its end, like a file there at start. The files of new PATH arguments
        that exist now are read from their end (from their start with ``from_beginning``), like
        files there at start; files that appear later are read whole. What the kept ones follow,
        and where, does not change. SourceError (nothing changed) if a new PATH cannot be used.
        """
        followed = self._followed
        added = [p for p in paths if p not in self._paths]
        missing = [p for p in added if not validate(p, True)]
        if from_beginning is not None:
            followed.from_beginning = from_beginning
        self._paths = list(paths)
        self._args = {os.path.normpath(p) for p in paths if not is_glob(p)}
        self._missing = [p for p in self._missing if p in self._paths] + missing
        dropped = sorted({f.stream for f in followed.files.values() if not any(covers(p, f.stream) for p in paths)})
        for f in [f for f in followed.files.values() if f.stream in dropped]:
            followed.fds.release(f)
            del followed.files[f.ident]
        for stream in dropped:
            followed.active.pop(stream, None)
            followed.streams.discard(stream)
        followed.copies.forget_streams(dropped)
        for path in discover(added, lambda err: None, self.wanted):
            try:
                st = os.stat(path)
            except OSError:
                continue
            ident = (st.st_dev, st.st_ino)
            if stat.S_ISREG(st.st_mode) and ident not in followed.files:
                followed.start_at_end[ident] = st.st_size
        for path in added:
            if path not in missing:
                followed.changes.add_root(watch_root(path))
        return dropped

    # -- polling --------------------------------------------------------------------------------

    def poll(self) -> list[Chunk]:
        """One pass: find files, follow rotation and truncation, read what is there (bounded per file).

        A full pass lists the directories and looks at every file. When inotify names the files
        whose content changed, and nothing else happened, a light pass reads only those and the
        busy ones; a full pass still comes every ``rescan_interval`` seconds.
        """
        followed = self._followed
        changed, asked = self._changed()
        if followed.first:
            followed.started = time.time()
        followed.fds.new_poll()
        followed.waiting = set()
        now = time.monotonic()
        # A file found but waiting for a descriptor may be the copy that a cut waits for: the cuts
        # (and what rotated lately) wait on with it, up to COPY_WAIT_STARVED times as long.
        wait = followed.copy_wait * (COPY_WAIT_STARVED if followed.unopened else 1)
        for cut in followed.copies.expire(now, wait):  # no copy came: what it held is gone
            followed.lost(cut.stream, cut.unread, "was truncated before it was read to its end, with no copy found")
        cuts = followed.copies.cuts
        if changed is not None:
            files = [followed.files[ident] for ident in changed]
            if not any([self._placement.check_cut(f, cuts) for f in files]):  # (a list: every file is checked)
                return self._reader.read({f.stream for f in files} | self._reader.busy)
            # A file was cut (copytruncate): its copy, found or still to come, is placed by a full pass.
        self._placement.check_open_files(cuts)
        self._scan(cuts)
        followed.first = False
        by_ident = followed.files
        followed.changes.after_full(now, asked, by_ident.values(), (by_ident[i] for i in followed.active.values()))
        followed.copies.note_held()
        chunks = self._reader.read(None)
        for _ in range(MAX_TURNS):  # more files changed than descriptors: they take turns, until
            before = len(followed.waiting)  # each had one (or no descriptor frees up)
            if not before:
                break
            chunks += self._place_waiting(cuts)
            if len(followed.waiting) >= before:
                break
        return chunks

    def _place_waiting(self, cuts: list[Cut]) -> list[Chunk]:
        """Place again the files that waited for a descriptor in this pass, now that the files just
        read to their end can be closed for room, and read them: with more files changing than
        descriptors, each gets its turn instead of the open ones keeping theirs."""
        followed = self._followed
        waiting, followed.waiting = followed.waiting, set()
        followed.fds.new_poll()
        # In turns: from the path after the last one served, so that no file waits for ever behind
        # others that always come first (a file still comes before its copies: its cut first).
        order = sorted(waiting)
        k = bisect.bisect_right(order, self._turn)
        order = order[k:] + order[:k]
        for path in order:
            if self._stat_and_place(path, cuts) is not None and path not in followed.waiting:
                self._turn = path
        streams = {f.stream for f in followed.files.values() if f.path in waiting and f.fd >= 0}
        if not streams:
            self.stats.files_waiting = len(followed.waiting)
            return []
        busy = self._reader.busy
        chunks = self._reader.read(streams)
        self._reader.busy |= busy
        return chunks

    def event_driven(self) -> bool:
        """Whether the file system names every change of every followed file (inotify covers them all)."""
        return self._followed.changes.event_driven()

    def urgent(self) -> bool:
        """Whether the file system reported more than writes since the last poll (a file created,
        renamed or deleted): then the next poll should not wait for writes to gather."""
        return self._followed.changes.urgent()

    def _changed(self) -> tuple[set[Ident] | None, frozenset[str]]:
        """The files a light pass reads (beyond the busy ones), None for a full pass; and the paths
        the file system named as changed."""
        followed = self._followed
        if followed.changes.watcher is None:
            return None, frozenset()
        if self._missing:
            self._watch_appeared()
        copies = followed.copies
        full = bool(followed.first or followed.waiting or followed.unopened or copies.cuts or copies.held
                    or followed.resume.later or followed.resume.unseen or self._walk_incomplete)
        return followed.changes.changed(full, followed.files)

    def _report(self, path: str, err: OSError) -> None:
        if out_of_descriptors(err):
            self._followed.waiting.add(path)  # not unreadable: tried again at the next poll
            return
        if path not in self._reported:
            reason = err.strerror or str(err)
            self._reported[path] = reason
            self.stats.read_errors[path] = self.stats.read_errors.get(path, 0) + 1
            if not (self._strict and os.path.normpath(path) in self._args):
                log.warning("cannot read %s: %s", path, reason)

    def failed_args(self) -> list[str]:
        """The PATH arguments that could not be read, each as a one-line message."""
        return [f"cannot read {path}: {reason}" for path, reason in self._reported.items()
                if os.path.normpath(path) in self._args]

    def starved(self) -> list[str]:
        """The files that found no descriptor in the last pass (after the files read to their end
        were closed for room), each as a one-line message: where no more can be opened, what
        they hold is never read."""
        soft = resource.getrlimit(resource.RLIMIT_NOFILE)[0]
        return [f"cannot read {path}: no file descriptor is left for it (the open-file limit, ulimit -n, is {soft})"
                for path in sorted(self._followed.waiting)]

    def _walk_error(self, err: OSError) -> None:
        if out_of_descriptors(err):
            self._walk_incomplete = True
        elif not isinstance(err, FileNotFoundError) and err.filename:
            self._report(os.fsdecode(err.filename), err)

    def _scan(self, cuts: list[Cut]) -> None:
        followed = self._followed
        present: set[str] = set()
        idents: set[Ident] = set()
        self._walk_incomplete = False
        followed.rotated.clear()
        followed.changes.listing()
        followed.name_index = None  # made again at its first use in this listing
        mark = filekinds.listing()
        listed = discover(self._paths, self._walk_error, self.wanted)
        if self.only is not None:
            listed = [path for path in listed if path in self.only]
        if not self._walk_incomplete:
            filekinds.sweep(mark)
        if followed.first and followed.resume.at is not None:
            followed.resume.whole = followed.resume.still_whole(listed)
        for path in listed:
            ident = self._stat_and_place(path, cuts)
            if ident is not None:
                present.add(path)
                idents.add(ident)
                followed.changes.listed(path, ident)
        if self._walk_incomplete:
            return  # what was not listed may still be there: decide at the next poll
        self._placement.absent(present, idents)

    def _stat_and_place(self, path: str, cuts: list[Cut]) -> Ident | None:
        """Place the file at ``path`` (``Placement._place``); its identity, None if it is gone or no
        regular file (an error on it reported)."""
        try:
            st = os.stat(path)
        except (FileNotFoundError, NotADirectoryError):
            return None  # gone, or a dangling symlink
        except OSError as err:
            self._report(path, err)
            return None
        if not stat.S_ISREG(st.st_mode):
            return None
        ident = (st.st_dev, st.st_ino)
        try:
            self._placement.place(path, ident, st, cuts)
        except OSError as err:
            self._report(path, err)
        return ident

    def vanished(self) -> list[str]:
        """Streams whose files are all gone (deleted, not replaced) since the last call."""
        followed = self._followed
        gone, followed.vanished = followed.vanished, []
        return gone

    def forget(self, streams: Iterable[str]) -> None:
        """Forget ``streams``, vanished long ago (their source expired), and their figures: a file
        at one of their paths later is a new file, not a rotation. A stream followed again is kept."""
        followed = self._followed
        back = {f.stream for f in followed.files.values()}
        gone = [s for s in streams if s not in back and s not in followed.active]
        followed.streams.difference_update(gone)
        self.stats.forget(gone)

    def started_at_end(self) -> list[tuple[str, int]]:
        """Files (stream = path) first read from their end since the last call, with that offset."""
        followed = self._followed
        found, followed.at_end = followed.at_end, []
        return found

    def flush(self) -> list[Chunk]:
        """End of input: every held partial last line, with a newline appended. A file cut before
        it was read to its end, whose copy did not show up, will not be read: what it held unread
        is counted lost now (a run that serves waits ``copy_wait`` for the copy)."""
        followed = self._followed
        for cut in followed.copies.expire(time.monotonic(), 0.0):
            followed.lost(cut.stream, cut.unread, "was truncated before it was read to its end, with no copy found")
        chunks: list[Chunk] = []
        for f in sorted(self._followed.files.values(), key=lambda f: (f.stream, not f.draining, f.seq)):
            line = f.cutter.flush()
            if line:
                chunks.append(Chunk(f.stream, line, time.time()))
        return chunks

    def close(self) -> None:
        """Stop watching and close every file."""
        followed = self._followed
        followed.changes.stop()
        for f in followed.files.values():
            followed.fds.release(f)
        followed.files.clear()
        followed.active.clear()
        self.stats.open_files = 0
