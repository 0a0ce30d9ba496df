"""Placement: what each file found in a listing is, for ``logmetrics.sources.tailer.FileTailer``.

A file found is the same one followed already (maybe renamed), the stream's new file (a rotation),
logrotate's copy of a followed file (held until its original's truncation shows, then read from
where the original had been read), one retired before (by identity and fingerprint), one an
earlier run saved a position for (``--state-file``), a file rotated out of its stream's path before
it was seen there, or a new file. ``Placement`` holds these decisions; ``FileTailer`` lists the
files, reads them and keeps the state that both share.
"""

from __future__ import annotations

import logging
import os
import stat
import time

from logmetrics.sources.changeindex import ChangeIndex
from logmetrics.sources.chunks import Position, SourceStats
from logmetrics.sources.copies import (
    CopyTracker,
    Cut,
    Known,
    copy_name,
    is_copy,
    nearest_first,
    originals,
    same_tail,
    starts_like,
    still_copy,
)
from logmetrics.sources.descriptors import Descriptors
from logmetrics.sources.identity import birth, other_birth, other_birth_at, same_file
from logmetrics.sources.resume import ResumeState
from logmetrics.sources.tailfile import Ident, LineCutter, TailFile, read_head

log = logging.getLogger("logmetrics.sources.tailer")  # the tailer's messages, under one name

OLD_MARGIN = 1.0  # a file first seen after start but last written this long before start is read from its end


def _stream(item: Cut | TailFile | Position) -> str:
    return item.stream


def _seq(f: TailFile) -> int:
    return f.seq


def _was_cut(f: TailFile) -> bool:
    """Whether an open file's content was cut (or replaced) since it was read: shorter than what
    was read, or not starting with its head any more."""
    if f.fd < 0:
        return False
    try:
        return os.fstat(f.fd).st_size < f.offset or (bool(f.head) and os.pread(f.fd, len(f.head), 0) != f.head)
    except OSError:
        return False


def _ident_at(path: str) -> Ident | None:
    """The identity of the file now at ``path``, None if there is none."""
    try:
        st = os.stat(path)
    except OSError:
        return None
    return st.st_dev, st.st_ino


class Placement:
    """The placement decisions of a tailer: the state they read and change is the tailer's own."""

    stats: SourceStats
    _files: dict[Ident, TailFile]
    _active: dict[str, Ident]
    _copies: CopyTracker
    _streams: set[str]
    _start_at_end: dict[Ident, int]
    _unopened: dict[Ident, Position]
    _rotated: set[str]
    _name_index: dict[str, list[TailFile]] | None
    _resume: ResumeState
    _first: bool
    _from_beginning: bool
    _started: float
    _copy_wait: float
    _fds: Descriptors
    _waiting: set[str]
    _at_end: list[tuple[str, int]]
    _seq: int
    _max_line: int
    _changes: ChangeIndex

    def _report(self, path: str, err: OSError) -> None:
        raise NotImplementedError  # the tailer's: counts and logs a file that cannot be read

    def _check_open_files(self, cuts: list[Cut]) -> None:
        """Find the open files whose content was cut (copytruncate), restart them at 0, add to ``cuts``."""
        for f in list(self._files.values()):
            if f.fd >= 0:
                self._check_cut(f, cuts)

    def _check_cut(self, f: TailFile, cuts: list[Cut], held: int = -1) -> bool:
        """Whether ``f`` was found cut (restarted at 0, its cut claimed or added to ``cuts``) or, a
        drained copy written over, let go. ``held``: the size it was last known to have, if more
        than ``f.size`` says (a closed file reopened)."""
        unread = max(0, max(f.size, held) - f.handed_out())  # known there at the last look, not handed out yet
        try:
            if not f.truncated():
                return False
            if self._active.get(f.stream) != f.ident and (not f.own or (f.moved and self._copied_over(f, cuts))):
                # A rotated copy being drained, written over (cp x.log x.log.1 again): what it holds now
                # is a new copy, for the copy evidence to place, not lines of the stream to read again
                # from the start; so is the stream's rotated file, found renamed before, that now starts
                # like the stream's file (`cp x.log x.log.1` into it). (The stream's own file, cut and
                # then renamed before this look, or copytruncated itself, is cut like the stream's file:
                # its copy holds what was not read.)
                self._fds.release(f)
                del self._files[f.ident]
                return True
            pending = f.cutter.reset()
            cut = Cut(f.stream, f.head, f.offset, pending, time.monotonic(), unread)
            f.seek(0)
            f.head = read_head(f.fd)
        except OSError as err:
            self._report(f.path, err)
            return False
        self._copies.cut_lately[f.stream] = cut.since
        self.stats.truncations[f.stream] = self.stats.truncations.get(f.stream, 0) + 1
        claimed = False
        for known in self._copies.known.values():
            # A copy taken before the cut holds all that was read: as long as what was read, and not
            # empty. An empty one (the copy of a file just cut, two copytruncates in a row) or a
            # shorter one is an older copy, or one still being written: the cut waits in ``cuts``.
            if known.offset is None and known.stream == f.stream and known.head and known.size >= cut.offset:
                known.offset, known.pending = cut.offset, pending
                claimed = True
        if not claimed:  # its copy may show up at a later look; a claimed cut is matched no more, so
            cuts.append(cut)  # that a later copy (logs of identical lines) does not take its offset
        return True

    def _current(self, stream: str) -> TailFile | None:
        """The followed file now at ``stream``'s path, if any."""
        ident = self._active.get(stream)
        return None if ident is None else self._files.get(ident)

    def _copied_over(self, f: TailFile, cuts: list[Cut]) -> bool:
        """Whether open ``f``, cut, now starts like its stream's current file (or like that file was
        before a cut found in this look): a copy of it written in."""
        current = self._current(f.stream)
        heads = [c.head for c in cuts if c.stream == f.stream] + ([current.head] if current is not None else [])
        head = read_head(f.fd) if any(heads) else b""
        return bool(head) and any(h and starts_like(head, h) for h in heads)

    def _lost(self, stream: str, nbytes: int, why: str) -> None:
        """Count ``nbytes`` of ``stream`` as lost (logmetrics_bytes_lost_total), warned once per stream."""
        if stream not in self.stats.bytes_lost:
            log.warning("%s %s: %d bytes of it are lost (counted in logmetrics_bytes_lost_total)", stream, why, nbytes)
        self.stats.bytes_lost[stream] = self.stats.bytes_lost.get(stream, 0) + nbytes

    def _lost_while_down(self, p: Position) -> None:
        """A saved file deleted (or moved out of the followed paths) while logmetrics was down:
        what was written to it after the last commit cannot be known (logmetrics_files_lost_total)."""
        name = p.stream if p.path == p.stream else f"{p.path} (a rotated file of {p.stream})"
        log.warning("%s was deleted or moved away while logmetrics was down: what was written to it after the "
                    "last commit is not counted (logmetrics_files_lost_total)", name)
        self.stats.files_lost[p.stream] = self.stats.files_lost.get(p.stream, 0) + 1

    def _reopen_real(self, f: TailFile) -> bool:
        """Reopen a parked file that no listed path leads to by its real path, to drain it; True if it
        is still there (reopened, or waiting for a descriptor)."""
        if f.real == f.path or _ident_at(f.real) != f.ident:
            return False
        if not self._reopen(f, f.real):
            return f.real in self._waiting  # out of descriptors: tried again at the next poll
        if self._active.get(f.stream) == f.ident:
            del self._active[f.stream]
        self._drain(f)
        return True

    def _resume_real(self, p: Position) -> bool:
        """At the first poll after a restart: follow a saved file that no listed path leads to (its
        symlink moved on while we were down) from its real path, if it is still the same file."""
        if p.real is None or _ident_at(p.real) != (p.dev, p.ino):
            return False
        opened = self._open(p.real)
        if opened is None:
            return False
        fd, size, head = opened
        if other_birth(fd, p.birth) or not same_file(fd, size, head, p.head, p.offset, p.fp):
            self._fds.close(fd)
            return False
        self._follow_resumed(fd, (p.dev, p.ino), head, p.real, p.stream, p.offset, size)
        return True

    def _forget_parked(self, f: TailFile) -> None:
        """A file closed for want of descriptors, then deleted: what it held past the offset is gone."""
        if self._files.get(f.ident) is not f:
            return  # forgotten already
        self._let_go(f)
        if f.size > f.offset:
            self._lost(f.stream, f.size - f.offset, "was deleted while closed for want of descriptors")
        self._vanish_if_last(f.stream)

    def _let_go(self, f: TailFile) -> None:
        """Follow ``f`` no more (closed already): out of the followed files, and its stream's file no more."""
        del self._files[f.ident]
        if self._active.get(f.stream) == f.ident:
            del self._active[f.stream]

    def _vanish_if_last(self, stream: str) -> None:
        raise NotImplementedError  # the tailer's: reports a stream whose files are all gone

    def _drain(self, f: TailFile) -> None:
        f.draining = True
        f.idle_since = time.monotonic()

    def _place(self, path: str, ident: Ident, st: os.stat_result, cuts: list[Cut]) -> None:
        """Decide what the file at ``path`` is: the same, a rotation, a copy, already known, or new."""
        size, mtime = st.st_size, st.st_mtime
        current = self._active.get(path)
        if current is not None and current != ident:  # replaced: drain the old one first
            self._drain(self._files[current])
            del self._active[path]
            self._rotated.add(path)
            self._copies.rotated_lately[path] = time.monotonic()
        f = self._files.get(ident)
        if f is not None and f.fd < 0 and other_birth_at(path, f.birth):
            self._forget_parked(f)  # deleted while closed, and its inode given to this new file
            f = None
        if f is not None:  # followed already (maybe under another name: x.log.1 after `mv x.log x.log.1`)
            f.missed = False
            if path != f.stream:
                f.moved = True
            if f.stream == path and path not in self._active:
                f.draining = False
                f.own = True
                self._active[path] = ident
            if f.fd < 0 and (size != f.offset or (st.st_mtime_ns != f.mtime_ns and f.mtime_ns >= 0)):
                self._unpark(f, path, size, cuts)  # grown, cut, or written over with as many bytes
            return
        if ((self._first or ident in self._resume.later or ident in self._resume.unseen)
                and self._resume.at is not None and self._place_resumed(path, ident)):
            return
        known = self._copies.known.get(ident)
        proven_new = False
        held_born: int | None = None  # the birth of the file a held copy was when first found
        if known is not None:
            if known.offset is None:
                original = self._current(known.stream)
                if still_copy(path, known, original, size, self._copy_wait):
                    return  # still a copy of what was (or is being) read from its original
                del self._copies.known[ident]  # not a copy of that file after all
                # No truncation came in time: a new file. Or its content parted from that file's (a copy
                # seen empty, as cp creates it, looks like any file): it may still be another one's copy.
                proven_new = time.monotonic() - known.since >= self._copy_wait
                held_born, known = known.birth, None
            elif size == known.offset and st.st_mtime_ns == known.mtime_ns:
                return  # retired, and unchanged since it was last found the same
        if self._first:
            self._start_at_end[ident] = size
        opened = self._open(path)
        if opened is None:
            if path in self._waiting:  # out of descriptors: where it will be read from goes in the state
                self._unopened[ident] = self._unread(path, ident, size, mtime, proven_new)
            return
        self._unopened.pop(ident, None)
        fd, size, head = opened
        if proven_new and other_birth(fd, held_born):
            proven_new = False  # not the file held so long: another one that got its inode (a new copy)
        if known is not None:
            del self._copies.known[ident]
            if known.offset is not None and not other_birth(fd, known.birth) \
                    and same_file(fd, size, head, known.head, known.offset, known.fp):
                if size > known.offset:
                    self._follow(fd, ident, head, path, known.stream, known.offset, size, pending=known.pending)
                else:  # the same, only touched (or first looked at since it was retired parked)
                    known.mtime_ns, known.unread = st.st_mtime_ns, 0  # (back: nothing it held is lost)
                    self._copies.known[ident] = known
                    self._fds.close(fd)
                return
            # else another file under its inode (deleted, and the inode reused), or written over: new
        if not self._first and not proven_new and ident not in self._start_at_end:
            for cut in nearest_first(path, cuts[::-1], _stream):  # logrotate's copy of a file just
                # truncated: it holds what we had not read yet. The newest cut first: a new file at the
                # copy's name is the copy of the stream's last truncation
                if is_copy(head, cut.head) and copy_name(path, cut.stream):
                    cuts.remove(cut)
                    self._follow(fd, ident, head, path, cut.stream, min(cut.offset, size), size, pending=cut.pending)
                    return
            for f in self._named_originals(path):  # no size test: the original may be longer now
                # than at its last look, or cut (the content decides)
                if f.draining or _ident_at(f.stream) != f.ident:
                    # A drained copy is no original, but the stream's own file is, just rotated: cut,
                    # then renamed or deleted before this look (its cut shows at the next one). Not cut,
                    # it has no copy: a look-alike beside it was rotated too (logs of identical lines).
                    if not (f.own and _was_cut(f)):
                        continue
                elif f.stream in self._rotated:
                    continue  # the stream's file found new in this look: nothing copied it yet
                if starts_like(head, f.head) and same_tail(fd, f, size):
                    # a copy made before the truncation (or still being written): held back until the
                    # truncation comes, or read as a new file once it proves to be one
                    now = time.monotonic()  # (seen now: once claimed by a cut, it is kept while it is listed)
                    self._copies.known[ident] = Known(f.stream, head, None, since=now, size=size, seen=now,
                                                      birth=birth(fd))
                    self._fds.close(fd)
                    return
        if path in self._streams:
            self._rotated.add(path)
            self._copies.rotated_lately[path] = time.monotonic()
            self.stats.rotations[path] = self.stats.rotations.get(path, 0) + 1
            self._follow(fd, ident, head, path, path, 0, size, active=True)
        elif ident in self._start_at_end:
            at = self._start_at_end.pop(ident)
            self._follow_from(fd, ident, head, path, at if at <= size else 0, size)
        elif not self._from_beginning and not proven_new and mtime < self._started - OLD_MARGIN:
            self._follow_from(fd, ident, head, path, size, size)  # there at start, but not seen then
        elif (owner := self._rotated_into(path)) is not None:
            # its stream was rotated twice between two looks: this file came and went at its path
            # unseen, a rotation not counted yet; or, its file cut, a copy of lines written between
            # two copytruncates, a cut not counted yet
            counts = self.stats.rotations if owner in self._copies.rotated_lately else self.stats.truncations
            counts[owner] = counts.get(owner, 0) + 1
            self._follow(fd, ident, head, path, owner, 0, size)
        elif (owner := self._copied_unread(path, proven_new)) is not None:
            # a copy of what its stream's file held before we read a byte of it
            self._follow(fd, ident, head, path, owner, 0, size)
        else:
            self._follow(fd, ident, head, path, path, 0, size, active=True)

    def _named_originals(self, path: str) -> list[TailFile]:
        """The followed files of the streams that ``path`` is named like a rotated copy of, those in
        its directory first, in the order they were followed: looked up by name in an index made
        once a listing (each new file would compare its name with every followed one's otherwise)."""
        names = {os.path.basename(o) for o in originals(path)}
        if not names:
            return []
        index = self._name_index
        if index is None:
            index = self._name_index = {}
            for f in self._files.values():
                index.setdefault(os.path.basename(f.stream), []).append(f)
        found = [f for name in names for f in index.get(name, ()) if self._files.get(f.ident) is f]
        found.sort(key=_seq)
        return nearest_first(path, found, _stream)

    def _unread(self, path: str, ident: Ident, size: int, mtime: float, proven_new: bool) -> Position:
        """The position a new file waiting for a descriptor will be read from, for the state: a crash
        before it is opened must not take it for a file read to its end."""

        if ident in self._start_at_end:
            at = 0 if self._from_beginning and ident not in self._resume.unchanged else self._start_at_end[ident]
        elif path not in self._streams and not self._from_beginning and not proven_new \
                and mtime < self._started - OLD_MARGIN:
            at = size
        else:
            at = 0
        return Position(path, path, ident[0], ident[1], b"", at)

    def _copied_unread(self, path: str, proven_new: bool) -> str | None:
        """The stream that a new file at ``path`` is a copy of, taken (copytruncate) before anything of
        its file's content was read: named as its copy, beside a file read nothing of, else None."""
        if proven_new:
            return None
        for stream in originals(path):
            f = self._current(stream)
            if f is not None and f.offset == 0 and not f.head:
                return stream
        return None

    def _rotated_into(self, path: str) -> str | None:
        """The stream that a new file at ``path`` was rotated out of unseen: one named as ``path``'s
        original whose own file was replaced or cut since the last look, or lately (a file found
        after waiting for a descriptor; a copy of lines written between two copytruncates), else
        None (a file of its own)."""
        for stream in originals(path):
            ident = self._active.get(stream)
            if ident is not None and _ident_at(stream) != ident:
                self._copies.rotated_lately[stream] = time.monotonic()  # its file moved away unseen
                return stream
            if stream in self._copies.rotated_lately or stream in self._copies.cut_lately:
                return stream
        return None

    def _follow_from(self, fd: int, ident: Ident, head: bytes, path: str, at: int, size: int) -> None:
        """Follow a file that was there at start from ``at`` (its end then), or from its start."""
        end = at > 0 and (not self._from_beginning or ident in self._resume.unchanged)
        skip = end and os.pread(fd, 1, at - 1) != b"\n"  # started mid-line: skip to the next line
        self._follow(fd, ident, head, path, path, at if end else 0, size, active=True, skip=skip)
        if end:
            self._at_end.append((path, at))

    def _place_resumed(self, path: str, ident: Ident) -> bool:
        """The first poll after ``resume``: place ``path`` by the saved positions, if they say how."""
        self._resume.later.discard(ident)
        self._resume.unseen.pop(ident, None)
        saved = self._resume.saved.get(ident)
        if saved is None and not self._resume.named(path):
            return False  # under a PATH argument the state did not have: as at a first start
        if saved is None:
            assert self._resume.at is not None
            try:
                if os.stat(path).st_mtime <= self._resume.at:
                    # unchanged while we were down: from its end, as without a state, even with
                    # --from-beginning (which is for a first start): a rotated file read to its end
                    # and let go before the save is no new file
                    self._resume.unchanged.add(ident)
                    return False
            except OSError:
                return False
        opened = self._open(path)
        if opened is None:
            if path in self._waiting:  # out of descriptors: placed by the saved positions later
                self._resume.later.add(ident)
                if saved is not None:
                    self._unopened[ident] = saved
            return True
        fd, size, head = opened
        if saved is not None:
            if not other_birth(fd, saved.birth) and same_file(fd, size, head, saved.head, saved.offset, saved.fp):
                self._follow_resumed(fd, ident, head, path, saved.stream, saved.offset, size)
                return True
            if path == saved.stream:  # cut while we were down, or replaced by a file that got its inode
                if other_birth(fd, saved.birth):  # replaced: deleted while we were down, as if gone
                    self._lost_while_down(saved)
                else:
                    self.stats.truncations[path] = self.stats.truncations.get(path, 0) + 1
                self._follow_resumed(fd, ident, head, path, path, 0, size)
                return True
            # elsewhere, another file that got the saved file's inode after it was deleted: a new file
        for pos in nearest_first(path, list(self._resume.saved.values()), _stream):  # logrotate's copy of a saved
            # file, made while we were down (not of one found whole: renamed, that one was not copied)
            if is_copy(head, pos.head) and copy_name(path, pos.stream) and (pos.dev, pos.ino) not in self._resume.whole:
                self._follow_resumed(fd, ident, head, path, pos.stream, min(pos.offset, size), size)
                return True
        at_path = {p.stream: (p.dev, p.ino) for p in self._resume.saved.values() if p.path == p.stream}
        if path in at_path:  # the successor of a rotated file
            self.stats.rotations[path] = self.stats.rotations.get(path, 0) + 1
        for stream in originals(path):
            if stream not in at_path:
                continue
            moved = _ident_at(stream) != at_path[stream]
            if moved or at_path[stream] not in self._resume.whole:
                # written at the stream's path and rotated away while we were down (a rotation); or,
                # its file cut while we were down, a copy of lines written between two copytruncates
                counts = self.stats.rotations if moved else self.stats.truncations
                counts[stream] = counts.get(stream, 0) + 1
                self._follow_resumed(fd, ident, head, path, stream, 0, size)
                return True
        self._follow(fd, ident, head, path, path, 0, size, active=True)
        return True

    def _follow_resumed(self, fd: int, ident: Ident, head: bytes, path: str, stream: str, offset: int,
                        size: int) -> None:
        """Follow a file of a saved stream: at its path it is the stream's file, elsewhere a rotated one."""
        active = path == stream and stream not in self._active
        self._follow(fd, ident, head, path, stream, offset, size, active=active)  # not active: drained
        self._streams.add(stream)

    def _open(self, path: str) -> tuple[int, int, bytes] | None:
        """Open ``path`` within the budget: (fd, size, head), or None if gone, unreadable or waiting."""
        fd = self._open_fd(path)
        if fd is None:
            return None
        try:
            st = os.fstat(fd)
            if stat.S_ISREG(st.st_mode):
                return fd, st.st_size, read_head(fd)
        except OSError as err:
            self._report(path, err)
        self._fds.close(fd)
        return None

    def _open_fd(self, path: str) -> int | None:
        try:
            return self._fds.open_path(path)
        except (FileNotFoundError, NotADirectoryError):
            return None
        except OSError as err:
            self._report(path, err)  # out of descriptors: waits for the next poll
            return None

    def _unpark(self, f: TailFile, path: str, size: int, cuts: list[Cut]) -> None:
        """Reopen a parked file that changed (``size`` from stat), if its path still leads to it."""
        held = max(f.size, f.offset)  # what it held when last looked at: unread if it was cut since
        f.size = size if size >= f.offset else held  # for lag and files_waiting until it is reopened
        if not self._reopen(f, path):
            return  # waiting for a descriptor, or replaced meanwhile: placed at the next poll
        f.size = f.offset  # so that truncated() compares the head if it grew: replaced content is a cut
        self._check_cut(f, cuts, held)

    def _reopen(self, f: TailFile, path: str) -> bool:
        """Reopen parked ``f`` through ``path`` at its offset, if ``path`` still leads to it."""
        fd = self._open_fd(path)
        if fd is None:
            return False
        try:
            st = os.fstat(fd)
            if (st.st_dev, st.st_ino) == f.ident and other_birth(fd, f.birth):
                self._forget_parked(f)  # deleted while parked, and its inode given to a new file:
                # placed as one at the next look
            elif (st.st_dev, st.st_ino) == f.ident:
                os.lseek(fd, f.offset, os.SEEK_SET)
                f.fd, f.path = fd, path
                return True
        except OSError as err:
            self._report(path, err)
        self._fds.close(fd)
        return False

    def _follow(
        self,
        fd: int,
        ident: Ident,
        head: bytes,
        path: str,
        stream: str,
        offset: int,
        size: int,
        *,
        active: bool = False,
        skip: bool = False,
        pending: bytes = b"",
    ) -> None:
        self._seq += 1
        f = TailFile(stream, path, fd, ident, head, LineCutter(self._max_line), self._seq)
        f.birth = birth(fd)
        f.seek(offset)
        f.size = size
        f.idle_since = time.monotonic()
        f.cutter.skipping = skip
        f.cutter.pending += pending
        self._files[ident] = f
        if self._name_index is not None:
            self._name_index.setdefault(os.path.basename(stream), []).append(f)
        f.own = active
        real = os.path.realpath(path)
        if real != os.path.abspath(path):  # reached through a symlink
            f.real = real
        if active:
            self._active[stream] = ident
            if stream not in self._streams:
                self._streams.add(stream)
                for counts in (self.stats.bytes_read, self.stats.lines_truncated, self.stats.rotations):
                    counts.setdefault(stream, 0)
                self.stats.truncations.setdefault(stream, 0)
        else:
            self._drain(f)
        self._changes.add_target(path)
