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
import stat
import time
from collections.abc import Callable, Iterable, Sequence

from logmetrics.sources import filekinds
from logmetrics.sources.changeindex import ChangeIndex
from logmetrics.sources.chunks import Chunk, Position, SourceError, SourceStats
from logmetrics.sources.copies import COPY_WAIT, CopyTracker, Cut, Known
from logmetrics.sources.descriptors import Descriptors, out_of_descriptors
from logmetrics.sources.placement import Placement
from logmetrics.sources.resume import ResumeState
from logmetrics.sources.tailfile import (
    Ident,
    TailFile,
    covers,
    discover,
    is_glob,
    watch_root,
)
from logmetrics.sources.waker import Waker

log = logging.getLogger(__name__)

POLL_BUDGET = 1 << 20  # bytes read from one file in one poll, so one busy file does not starve others
ROTATE_WAIT = 5.0  # seconds a replaced file stays open after its last new byte (its writer may lag)
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


def _validate(path: str, wait_for_missing: bool) -> bool:
    """Check a PATH argument; False: it does not exist yet (and ``wait_for_missing`` says to wait)."""
    if is_glob(path):
        if discover([path], lambda err: None):
            return True
        if wait_for_missing:
            log.warning("%s matches no file yet; waiting for one", path)
            return True  # discovered again at every poll
        raise SourceError(f"logmetrics: no file matches {path}")
    try:
        st = os.stat(path)
    except (FileNotFoundError, NotADirectoryError):
        if wait_for_missing:
            log.warning("%s does not exist yet; waiting for it", path)
            return False
        raise SourceError(f"logmetrics: no such file or directory: {path}") from None
    except OSError as err:
        raise SourceError(f"logmetrics: cannot access {path}: {err.strerror}") from None
    if not (stat.S_ISREG(st.st_mode) or stat.S_ISDIR(st.st_mode)):
        raise SourceError(f"logmetrics: not a regular file or directory: {path}")
    return True


def _written(f: TailFile) -> float | None:
    """When open ``f`` was last written (its modification time), None if that cannot be told."""
    try:
        return os.fstat(f.fd).st_mtime
    except OSError:
        return None


class FileTailer(Placement):
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
        max_open: int | None = None,
        wait_for_missing: bool = False,
        strict: bool = False,
        rescan_interval: float = RESCAN_INTERVAL,
        wanted: Callable[[str], bool] | None = None,
    ) -> None:
        #: the inputs' include and exclude globs on the files found under directories and globs
        self.wanted = wanted
        self._missing = [path for path in paths if not _validate(path, wait_for_missing)]
        self.stats = stats
        self._paths = list(paths)
        self._from_beginning = from_beginning
        self._max_line = max_line_bytes
        self._read_size = read_size
        self._rotate_wait = rotate_wait
        self._copy_wait = copy_wait
        self._fds = Descriptors(lambda: self._files.values(), max_open)  # the others are parked
        self._waiting: set[str] = set()  # paths that wait for a descriptor in this poll
        self._turn = ""  # the last waiting path given a descriptor: the next pass begins after it
        self._walk_incomplete = False  # a directory could not be listed (no descriptor): forget nothing
        self._strict = strict  # errors on the PATH arguments themselves are kept for failed_args(), not logged
        self._args = {os.path.normpath(p) for p in paths if not is_glob(p)}
        self._started = 0.0  # when the first poll began (Unix time)
        self._budget = max(poll_budget, read_size)
        self._files: dict[Ident, TailFile] = {}  # followed files (open, or parked while idle)
        self._active: dict[str, Ident] = {}  # stream -> the file now at its path
        self._copies = CopyTracker()  # what copy tracking remembers between polls
        self._name_index: dict[str, list[TailFile]] | None = None  # followed files by stream name, in a listing
        self._streams: set[str] = set()  # every stream ever followed: a new file there is a rotation
        self._start_at_end: dict[Ident, int] = {}  # present at the first poll but not opened then: size then
        self._unopened: dict[Ident, Position] = {}  # found, waiting for a descriptor: where they will be read from
        self._reported: dict[str, str] = {}  # path -> the error reported for it
        self._first = True
        self._vanished: list[str] = []  # streams whose last file was closed, not yet reported
        self._at_end: list[tuple[str, int]] = []  # files started at their end, and that offset, not yet reported
        self._rotated: set[str] = set()  # streams found rotated in this poll's listing
        self._resume = ResumeState()  # positions saved by an earlier run, and what became of them
        self._seq = 0
        self._waker: Waker | None = None
        self._changes = ChangeIndex(rescan_interval)
        self._busy: set[str] = set()  # streams read at every pass: a file draining, parked, behind or held

    @property
    def rescan_interval(self) -> float:
        """Seconds between passes that look at every file, when the watcher names what changed."""
        return self._changes.rescan_interval

    @rescan_interval.setter
    def rescan_interval(self, seconds: float) -> None:
        self._changes.rescan_interval = seconds

    def watch(self, waker: Waker) -> None:
        """Wake ``waker`` on changes in the directories involved; polling stays the source of truth."""
        self._waker = waker
        fd = self._changes.start(waker.wake, [watch_root(path) for path in self._paths])
        if self._changes.watcher is None:
            return
        waker.watch_fd(fd)
        for f in self._files.values():
            self._changes.add_target(f.path)

    def _watch_appeared(self) -> None:
        """Watch the PATH arguments that were missing at start and exist now as they should be."""
        for path in [p for p in self._missing if os.path.exists(p)]:
            self._missing.remove(path)
            self._changes.add_root(watch_root(path))

    def positions(self) -> list[Position]:
        """Where every open file stands: what has been handed out, not a partial last line."""
        out = []
        for f in self._files.values():
            offset = f.handed_out()
            if f.draining and _deleted_and_read(f, offset):
                continue  # nothing of it can be resumed, or lost: a restart must not declare it lost
            out.append(Position(f.stream, f.path, f.ident[0], f.ident[1], f.head, offset, f.fingerprint(offset),
                                f.real if f.real != f.path else None, f.birth))
        out += [p for ident, p in self._unopened.items() if ident not in self._files]  # found, not opened yet
        out += [p for ident, p in self._resume.unseen.items() if ident not in self._files]  # not found yet
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
        self._resume.restore(positions, saved_at, inputs)

    def set_paths(self, paths: Sequence[str], *, from_beginning: bool | None = None) -> list[str]:
        """Follow ``paths`` from now on (the configuration was read again); returns the streams let go.

        The files only dropped PATH arguments named are closed at once, and forgotten: one named
        again later starts at its end, like a file there at start. The files of new PATH arguments
        that exist now are read from their end (from their start with ``from_beginning``), like
        files there at start; files that appear later are read whole. What the kept ones follow,
        and where, does not change. SourceError (nothing changed) if a new PATH cannot be used.
        """
        added = [p for p in paths if p not in self._paths]
        missing = [p for p in added if not _validate(p, True)]
        if from_beginning is not None:
            self._from_beginning = from_beginning
        self._paths = list(paths)
        self._args = {os.path.normpath(p) for p in paths if not is_glob(p)}
        self._missing = [p for p in self._missing if p in self._paths] + missing
        dropped = sorted({f.stream for f in self._files.values() if not any(covers(p, f.stream) for p in paths)})
        for f in [f for f in self._files.values() if f.stream in dropped]:
            self._fds.release(f)
            del self._files[f.ident]
        for stream in dropped:
            self._active.pop(stream, None)
            self._streams.discard(stream)
        self._copies.forget_streams(dropped)
        for path in discover(added, lambda err: None, self.wanted):
            try:
                st = os.stat(path)
            except OSError:
                continue
            ident = (st.st_dev, st.st_ino)
            if stat.S_ISREG(st.st_mode) and ident not in self._files:
                self._start_at_end[ident] = st.st_size
        for path in added:
            if path not in missing:
                self._changes.add_root(watch_root(path))
        return dropped

    # -- polling --------------------------------------------------------------------------------

    def poll(self) -> list[Chunk]:
        """One pass: find files, follow rotation and truncation, read what is there (bounded per file).

        A full pass lists the directories and looks at every file. When inotify names the files
        whose content changed, and nothing else happened, a light pass reads only those and the
        busy ones; a full pass still comes every ``rescan_interval`` seconds.
        """
        changed, asked = self._changed()
        if self._first:
            self._started = time.time()
        self._fds.new_poll()
        self._waiting = set()
        now = time.monotonic()
        # A file found but waiting for a descriptor may be the copy that a cut waits for: the cuts
        # (and what rotated lately) wait on with it, up to COPY_WAIT_STARVED times as long.
        wait = self._copy_wait * (COPY_WAIT_STARVED if self._unopened else 1)
        for cut in self._copies.expire(now, wait):  # no copy came: what it held is gone
            self._lost(cut.stream, cut.unread, "was truncated before it was read to its end, with no copy found")
        cuts = self._copies.cuts
        if changed is not None:
            files = [self._files[ident] for ident in changed]
            if not any([self._check_cut(f, cuts) for f in files]):  # (a list: every file is checked)
                return self._read_all({f.stream for f in files} | self._busy)
            # A file was cut (copytruncate): its copy, found or still to come, is placed by a full pass.
        self._check_open_files(cuts)
        self._scan(cuts)
        self._first = False
        self._changes.after_full(now, asked, self._files.values(), (self._files[i] for i in self._active.values()))
        self._copies.note_held()
        chunks = self._read_all(None)
        if self._waiting:
            chunks += self._place_waiting(cuts)
        return chunks

    def _place_waiting(self, cuts: list[Cut]) -> list[Chunk]:
        """Place again the files that waited for a descriptor in this pass, now that the files just
        read to their end can be closed for room, and read them: with more files changing than
        descriptors, each gets its turn instead of the open ones keeping theirs."""
        waiting, self._waiting = self._waiting, set()
        self._fds.new_poll()
        # In turns: from the path after the last one served, so that no file waits for ever behind
        # others that always come first (a file still comes before its copies: its cut first).
        order = sorted(waiting)
        k = bisect.bisect_right(order, self._turn)
        order = order[k:] + order[:k]
        for path in order:
            if self._stat_and_place(path, cuts) is not None and path not in self._waiting:
                self._turn = path
        streams = {f.stream for f in self._files.values() if f.path in waiting and f.fd >= 0}
        if not streams:
            self.stats.files_waiting = len(self._waiting)
            return []
        busy = self._busy
        chunks = self._read_all(streams)
        self._busy |= busy
        return chunks

    def event_driven(self) -> bool:
        """Whether the file system names every change of every followed file (inotify covers them all)."""
        return self._changes.event_driven()

    def urgent(self) -> bool:
        """Whether the file system reported more than writes since the last poll (a file created,
        renamed or deleted): then the next poll should not wait for writes to gather."""
        return self._changes.urgent()

    def _changed(self) -> tuple[set[Ident] | None, frozenset[str]]:
        """The files a light pass reads (beyond the busy ones), None for a full pass; and the paths
        the file system named as changed."""
        if self._changes.watcher is None:
            return None, frozenset()
        if self._missing:
            self._watch_appeared()
        full = bool(self._first or self._waiting or self._unopened or self._copies.cuts or self._copies.held
                    or self._resume.later or self._resume.unseen or self._walk_incomplete)
        return self._changes.changed(full, self._files)

    def _report(self, path: str, err: OSError) -> None:
        if out_of_descriptors(err):
            self._waiting.add(path)  # not unreadable: tried again at the next poll
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

    def _walk_error(self, err: OSError) -> None:
        if out_of_descriptors(err):
            self._walk_incomplete = True
        elif not isinstance(err, FileNotFoundError) and err.filename:
            self._report(os.fsdecode(err.filename), err)

    def _scan(self, cuts: list[Cut]) -> None:
        present: set[str] = set()
        idents: set[Ident] = set()
        self._walk_incomplete = False
        self._rotated.clear()
        self._changes.listing()
        self._name_index = None  # made again at its first use in this listing
        mark = filekinds.listing()
        listed = discover(self._paths, self._walk_error, self.wanted)
        if not self._walk_incomplete:
            filekinds.sweep(mark)
        if self._first and self._resume.at is not None:
            self._resume.whole = self._resume.still_whole(listed)
        for path in listed:
            ident = self._stat_and_place(path, cuts)
            if ident is not None:
                present.add(path)
                idents.add(ident)
                self._changes.listed(path, ident)
        if self._walk_incomplete:
            return  # what was not listed may still be there: decide at the next poll
        for stream in [s for s in self._active if s not in present]:
            self._drain(self._files[self._active.pop(stream)])
        if self._first and self._resume.at is not None:
            saved = self._resume.saved.values()
            self._resume.unseen = {(p.dev, p.ino): p for p in saved if (p.dev, p.ino) not in idents
                                   and (p.dev, p.ino) not in self._files and not self._resume_real(p)}
        elif self._resume.unseen:  # missed by two listings: gone
            for ident, p in self._resume.unseen.items():  # (a rotated one still being read too: its writer
                if ident not in idents and ident not in self._files:  # may have gone on writing to it)
                    self._lost_while_down(p)
            self._resume.unseen = {}
        for f in [f for f in self._files.values() if f.fd < 0 and f.ident not in idents]:
            if self._reopen_real(f):
                continue  # no listed path leads to it now (a symlink moved on): drained from its real path
            if f.missed and f.size > f.offset:  # gone from two listings in a row, with bytes unread
                if os.path.isdir(os.path.dirname(f.path)):
                    self._forget_parked(f)  # deleted (or renamed out of the tree): lost
                else:  # its directory moved away, maybe to come back: remembered, lost if it does not
                    self._retire_parked(f)
            elif not f.missed:
                # A listing may miss a file renamed while it runs (under both names), and a directory
                # moved out may come back: it drains, retired once idle, so that its new name finds
                # it. Only what it held unread waits for the next listing to say whether it is lost.
                f.missed = True
                if not f.draining:
                    self._drain(f)
        for k in self._copies.forget_absent(idents, time.monotonic()):
            if k.unread:
                self._lost(k.stream, k.unread, "was in a directory that went away while closed for want of descriptors")
        for ident in [i for i in self._unopened if i not in idents]:
            del self._unopened[ident]

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
            self._place(path, ident, st, cuts)
        except OSError as err:
            self._report(path, err)
        return ident

    def _read_all(self, streams: set[str] | None) -> list[Chunk]:
        """Read the files of ``streams`` (None: of all)."""
        chunks: list[Chunk] = []
        stats = self.stats
        if streams is None:
            files = list(self._files.values())
            lag: dict[str, int] = {}
        else:
            files = [f for f in self._files.values() if f.stream in streams]
            lag = {s: n for s, n in stats.lag_bytes.items() if s not in streams}
        held: set[str] = set()  # streams whose older file has more to read: their newer ones wait
        busy: set[str] = set()
        now = time.monotonic()
        if len(files) > 1:
            files.sort(key=lambda f: (f.stream, not f.draining, f.seq))
        for f in files:
            stream = f.stream
            if f.draining or f.fd < 0:
                busy.add(stream)
            if f.fd < 0:  # parked: reopened by _scan once it changes
                if f.offset < f.size:
                    held.add(stream)
                    self._waiting.add(f.path)
                elif f.draining and now - f.idle_since >= self._rotate_wait:
                    self._retire(f, chunks)
                    continue
            elif stream not in held:
                try:
                    data, nbytes, at_end = f.read(self._read_size, self._budget)
                except OSError as err:
                    self._report(f.path, err)
                    data, nbytes, at_end = b"", 0, True
                if nbytes:
                    stats.bytes_read[stream] = stats.bytes_read.get(stream, 0) + nbytes
                    f.idle_since = now
                    f.size = max(f.size, f.offset)
                if data:
                    chunks.append(Chunk(stream, data, time.time(), _written(f) if at_end else None))
                if f.cutter.truncated:
                    stats.lines_truncated[stream] = stats.lines_truncated.get(stream, 0) + f.cutter.truncated
                    f.cutter.truncated = 0
                if not at_end:
                    held.add(stream)
                    if self._waker is not None and nbytes:
                        self._waker.wake()  # more to read now
                elif f.draining and not nbytes and now - f.idle_since >= self._rotate_wait:
                    self._retire(f, chunks)
                    continue
            behind = f.size - f.offset
            if behind > 0:
                busy.add(stream)
            lag[stream] = lag.get(stream, 0) + max(0, behind)
        self._busy = busy | held
        stats.lag_bytes = lag
        stats.open_files = len(self._files)
        stats.files_waiting = len(self._waiting)
        return chunks

    def _retire(self, f: TailFile, chunks: list[Chunk]) -> None:
        """Close a drained file; remember it so that its new name is not read as a new file."""
        line = f.cutter.flush()
        if line:
            chunks.append(Chunk(f.stream, line, time.time()))
        mtime_ns = -1  # not known (parked): its content is compared when it is found next
        if f.fd >= 0:
            try:
                mtime_ns = os.fstat(f.fd).st_mtime_ns
            except OSError:
                pass
        fp = f.fingerprint(f.offset)
        self._fds.release(f)
        del self._files[f.ident]
        self._copies.known[f.ident] = Known(f.stream, f.head, f.offset, fp=fp, mtime_ns=mtime_ns, seen=time.monotonic(),
                                     birth=f.birth)
        self._vanish_if_last(f.stream)

    def _retire_parked(self, f: TailFile) -> None:
        """Let go of a closed file with bytes unread whose directory went away: remembered as read
        to where it was (its partial last line kept), so that it is read on if the directory comes
        back; what it held is counted lost if it does not (``forget_absent``)."""
        self._let_go(f)
        self._copies.known[f.ident] = Known(f.stream, f.head, f.offset, pending=bytes(f.cutter.pending),
                                     fp=f.fingerprint(f.offset), seen=time.monotonic(), birth=f.birth,
                                     unread=f.size - f.offset)
        self._vanish_if_last(f.stream)

    def _vanish_if_last(self, stream: str) -> None:
        """A file of ``stream`` was let go: if it was its last, the stream is reported vanished."""
        if stream not in self._active and all(g.stream != stream for g in self._files.values()):
            self._vanished.append(stream)

    def vanished(self) -> list[str]:
        """Streams whose files are all gone (deleted, not replaced) since the last call."""
        gone, self._vanished = self._vanished, []
        return gone

    def forget(self, streams: Iterable[str]) -> None:
        """Forget ``streams``, vanished long ago (their source expired), and their figures: a file
        at one of their paths later is a new file, not a rotation. A stream followed again is kept."""
        back = {f.stream for f in self._files.values()}
        gone = [s for s in streams if s not in back and s not in self._active]
        self._streams.difference_update(gone)
        self.stats.forget(gone)

    def started_at_end(self) -> list[tuple[str, int]]:
        """Files (stream = path) first read from their end since the last call, with that offset."""
        found, self._at_end = self._at_end, []
        return found

    def flush(self) -> list[Chunk]:
        """End of input: every held partial last line, with a newline appended."""
        chunks: list[Chunk] = []
        for f in sorted(self._files.values(), key=lambda f: (f.stream, not f.draining, f.seq)):
            line = f.cutter.flush()
            if line:
                chunks.append(Chunk(f.stream, line, time.time()))
        return chunks

    def close(self) -> None:
        """Stop watching and close every file."""
        self._changes.stop()
        for f in self._files.values():
            self._fds.release(f)
        self._files.clear()
        self._active.clear()
        self.stats.open_files = 0
