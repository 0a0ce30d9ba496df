"""Placement: what each file found in a listing is, for ``logmetrics.sources.tailer.FileTailer``.

A file found is the same one followed already (maybe renamed), the stream's new file (a rotation),
logrotate's copy of a followed file (held until its original's truncation shows, then read from
where the original had been read), one retired before (by identity and fingerprint), one an
earlier run saved a position for (``--state-file``), a file rotated out of its stream's path before
it was seen there, or a new file. ``Placement`` holds these decisions (those by the positions an
earlier run saved are ``Resumed``'s); ``FileTailer`` lists the files and reads them; the registry
of followed files they share is ``Followed``.
"""

from __future__ import annotations

import logging
import os
import time

from logmetrics.sources.chunks import Position
from logmetrics.sources.copies import (
    HELD,
    KEPT,
    Cut,
    Known,
    copy_name,
    copy_of_cut,
    copy_state,
    head_now,
    is_copy,
    nearest_first,
    same_tail,
    starts_like,
)
from logmetrics.sources.followed import Followed, drain, ident_at
from logmetrics.sources.identity import birth, other_birth, other_birth_at, same_file
from logmetrics.sources.originals import Originals
from logmetrics.sources.resumed import Resumed
from logmetrics.sources.tailfile import Ident, TailFile, read_head

log = logging.getLogger("logmetrics.sources.tailer")  # the tailer's messages, under one name

OLD_MARGIN = 1.0  # a file first seen after start but last written this long before start is read from its end


def _stream(item: Cut | TailFile | Position) -> str:
    return item.stream


class Placement:
    """Decides what each file found is, in the registry of followed files it shares with the tailer."""

    def __init__(self, followed: Followed) -> None:
        self.followed = followed
        self.resumed = Resumed(followed)
        self.originals = Originals(followed)

    def check_open_files(self, cuts: list[Cut]) -> None:
        """Find the open files whose content was cut (copytruncate), restart them at 0, add to ``cuts``."""
        for f in list(self.followed.files.values()):
            if f.fd >= 0:
                self.check_cut(f, cuts)

    def check_cut(self, f: TailFile, cuts: list[Cut], held: int = -1) -> bool:
        """Whether ``f`` was found cut (restarted at 0, its cut claimed or added to ``cuts``) or, a
        drained copy written over, let go. ``held``: the size it was last known to have, if more
        than ``f.size`` says (a closed file reopened)."""
        followed = self.followed
        unread = max(0, max(f.size, held) - f.handed_out())  # known there at the last look, not handed out yet
        try:
            if not f.truncated():
                if f.size > f.offset and self.originals.grew_into(f, cuts):
                    self._let_copy_go(f)  # for the listing that follows to place it as a copy
                    return True
                if f.size > f.offset and self.originals.filled(f, cuts):
                    followed.fds.release(f)  # the same: a copy to place, not lines to read
                    del followed.files[f.ident]
                    return True
                return False
            mine = followed.active.get(f.stream) == f.ident
            if not mine and (not f.own or (f.moved and self.originals.copied_over(f, cuts))):
                # A rotated copy being drained, written over (cp x.log x.log.1 again): what it holds now
                # is a new copy, for the copy evidence to place, not lines of the stream to read again
                # from the start; so is the stream's rotated file, found renamed before, that now starts
                # like the stream's file (`cp x.log x.log.1` into it). (The stream's own file, cut and
                # then renamed before this look, or copytruncated itself, is cut like the stream's file:
                # its copy holds what was not read.)
                followed.fds.release(f)
                del followed.files[f.ident]
                return True
            if mine and self.originals.written_over(f, cuts):
                self._let_copy_go(f)
                return True
            pending = f.cutter.reset()
            cut = Cut(f.stream, f.head, f.offset, pending, time.monotonic(), unread)
            f.seek(0)
            f.head = read_head(f.fd)
        except OSError as err:
            followed.report(f.path, err)
            return False
        followed.copies.cut_lately[f.stream] = cut.since
        followed.stats.truncations[f.stream] = followed.stats.truncations.get(f.stream, 0) + 1
        claimed = False
        for known in followed.copies.known.values():
            # A copy taken before the cut holds all that was read: as long as what was read, and not
            # empty. An empty one (the copy of a file just cut, two copytruncates in a row) or a
            # shorter one is an older copy, or one still being written: the cut waits in ``cuts``.
            if known.offset is None and known.stream == f.stream and known.head and known.size >= cut.offset:
                # what the cut file held unread is this copy's now: lost if the copy goes before it is read
                known.offset, known.pending, known.unread = cut.offset, pending, 0 if claimed else cut.unread
                claimed = True
        if not claimed:  # its copy may show up at a later look; a claimed cut is matched no more, so
            cuts.append(cut)  # that a later copy (logs of identical lines) does not take its offset
        return True

    def _let_copy_go(self, f: TailFile) -> None:
        """Let go of ``f``, followed as a stream of its own and found to be another's copy: the
        listing that follows places it by the copy evidence (a copy held back or kept, not read)."""
        self.followed.fds.release(f)
        self.followed.let_go(f)
        self.followed.vanish_if_last(f.stream)

    def reopen_real(self, f: TailFile) -> bool:
        """Reopen a parked file that no listed path leads to by its real path, to drain it; True if it
        is still there (reopened, or waiting for a descriptor)."""
        if f.real == f.path or ident_at(f.real) != f.ident:
            return False
        if not self._reopen(f, f.real):
            return f.real in self.followed.waiting  # out of descriptors: tried again at the next poll
        if self.followed.active.get(f.stream) == f.ident:
            del self.followed.active[f.stream]
        drain(f)
        return True

    def forget_parked(self, f: TailFile) -> None:
        """A file closed for want of descriptors, then deleted: what it held past the offset is gone."""
        if self.followed.files.get(f.ident) is not f:
            return  # forgotten already
        self.followed.let_go(f)
        if f.size > f.offset:
            self.followed.lost(f.stream, f.size - f.offset, "was deleted while closed for want of descriptors")
        self.followed.vanish_if_last(f.stream)

    def place(self, path: str, ident: Ident, st: os.stat_result, cuts: list[Cut]) -> None:
        """Decide what the file at ``path`` is: the same, a rotation, a copy, already known, or new."""
        followed = self.followed
        size, mtime = st.st_size, st.st_mtime
        current = followed.active.get(path)
        if current is not None and current != ident:  # replaced: drain the old one first
            drain(followed.files[current])
            del followed.active[path]
            followed.rotated.add(path)
            followed.copies.rotated_lately[path] = time.monotonic()
        f = followed.files.get(ident)
        if f is not None and f.fd < 0 and other_birth_at(path, f.birth):
            self.forget_parked(f)  # deleted while closed, and its inode given to this new file
            f = None
        if f is not None:  # followed already (maybe under another name: x.log.1 after `mv x.log x.log.1`)
            f.missed = False
            if path != f.stream:
                f.moved = True
            if f.stream == path and path not in followed.active:
                f.draining = False
                f.own = True
                followed.active[path] = ident
            if f.fd < 0 and (size != f.offset or (st.st_mtime_ns != f.mtime_ns and f.mtime_ns >= 0)):
                self._unpark(f, path, size, cuts)  # grown, cut, or written over with as many bytes
            return
        if ((followed.first or ident in followed.resume.later or ident in followed.resume.unseen)
                and followed.resume.at is not None and self.resumed.place(path, ident)):
            return
        known = followed.copies.known.get(ident)
        proven_new = False
        held_born: int | None = None  # the birth of the file a held copy was when first found
        if known is not None:
            if known.offset is None:
                original = followed.current(known.stream)
                state = copy_state(path, known, original, size, followed.copy_wait)
                if state == HELD:
                    return  # still a copy of what was (or is being) read from its original
                if state == KEPT:  # a copy that stays: counted through its original; read on if written to
                    known.offset, known.mtime_ns, known.kept = size, st.st_mtime_ns, True
                    return
                del followed.copies.known[ident]  # not a copy of that file after all
                # Its original went away: a new file. Or its content parted from that file's (a copy
                # seen empty, as cp creates it, looks like any file): it may still be another one's copy.
                proven_new = time.monotonic() - known.since >= followed.copy_wait
                held_born, known = known.birth, None
            elif size == known.offset and st.st_mtime_ns == known.mtime_ns:
                return  # retired, and unchanged since it was last found the same
        if followed.first:
            followed.start_at_end[ident] = size
        opened = followed.open(path, ident)
        if opened is None:
            if path in followed.waiting:  # out of descriptors: where it will be read from goes in the state
                followed.unopened[ident] = self._unread(path, ident, size, mtime, proven_new)
            return
        followed.unopened.pop(ident, None)
        fd, size, head = opened
        if proven_new and other_birth(fd, held_born):
            proven_new = False  # not the file held so long: another one that got its inode (a new copy)
        if known is not None:
            del followed.copies.known[ident]
            # (a copy that stayed, written over by the copy of its original's copytruncate, is that
            # copy: placed below, as a new file is)
            if known.offset is not None and not other_birth(fd, known.birth) \
                    and same_file(fd, size, head, known.head, known.offset, known.fp) \
                    and not (known.kept and size > known.offset and copy_of_cut(head, (known.stream,), cuts)):
                if known.kept and size > known.offset and self.originals.copy_of(fd, head, size, known.stream):
                    # a copy that stayed, written over by the next `cp` of its original: a copy
                    # again, whose lines are its original's, not lines written to it
                    now = time.monotonic()
                    followed.copies.known[ident] = Known(known.stream, head, None, since=now, size=size, seen=now,
                                                         birth=known.birth)
                    followed.fds.close(fd)
                    return
                if size > known.offset:
                    followed.follow(fd, ident, head, path, known.stream, known.offset, size, pending=known.pending)
                else:  # the same, only touched (or first looked at since it was retired parked)
                    known.mtime_ns, known.unread = st.st_mtime_ns, 0  # (back: nothing it held is lost)
                    followed.copies.known[ident] = known
                    followed.fds.close(fd)
                return
            # else another file under its inode (deleted, and the inode reused), or written over: new
        if not followed.first and not proven_new and ident not in followed.start_at_end:
            hidden = self.originals.cut_shown(path, fd, head, size)
            if hidden is not None:  # its cut did not show in it: noted now, for this copy to be read from it
                hidden.replaced = True
                self.check_cut(hidden, cuts)
            for cut in nearest_first(path, cuts[::-1], _stream):  # logrotate's copy of a file just
                # truncated: it holds what we had not read yet. The newest cut first: a new file at the
                # copy's name is the copy of the stream's last truncation
                if is_copy(head, cut.head) and copy_name(path, cut.stream):
                    cuts.remove(cut)
                    followed.follow(fd, ident, head, path, cut.stream, min(cut.offset, size), size,
                                         pending=cut.pending)
                    return
            for f in self.originals.named(path):  # no size test: the original may be longer now
                # than at its last look, or cut (the content decides)
                if f.draining or ident_at(f.stream) != f.ident:
                    # A drained copy is no original, but the stream's own file is, just rotated: cut,
                    # then renamed or deleted before this look (its cut shows at the next one). Not cut,
                    # it has no copy: a look-alike beside it was rotated too (logs of identical lines).
                    if not (f.own and f.was_cut()):
                        continue
                elif f.stream in followed.rotated:
                    continue  # the stream's file found new in this look: nothing copied it yet
                if starts_like(head, head_now(f)) and same_tail(fd, f, size):
                    # a copy made before the truncation (or still being written): held back until the
                    # truncation comes, or read as a new file once it proves to be one
                    now = time.monotonic()  # (seen now: once claimed by a cut, it is kept while it is listed)
                    followed.copies.known[ident] = Known(f.stream, head, None, since=now, size=size, seen=now,
                                                      birth=birth(fd))
                    followed.fds.close(fd)
                    return
        if path in followed.streams:
            followed.rotated.add(path)
            followed.copies.rotated_lately[path] = time.monotonic()
            followed.stats.rotations[path] = followed.stats.rotations.get(path, 0) + 1
            followed.follow(fd, ident, head, path, path, 0, size, active=True)
        elif ident in followed.start_at_end:
            at = followed.start_at_end.pop(ident)
            self._follow_from(fd, ident, head, path, at if at <= size else 0, size)
        elif not followed.from_beginning and not proven_new and mtime < followed.started - OLD_MARGIN:
            self._follow_from(fd, ident, head, path, size, size)  # there at start, but not seen then
        elif (owner := self.originals.rotated_into(path)) is not None:
            # its stream was rotated twice between two looks: this file came and went at its path
            # unseen, a rotation not counted yet; or, its file cut, a copy of lines written between
            # two copytruncates, a cut not counted yet
            counts = followed.stats.rotations if owner in followed.copies.rotated_lately else followed.stats.truncations
            counts[owner] = counts.get(owner, 0) + 1
            followed.follow(fd, ident, head, path, owner, 0, size)
        elif (owner := self.originals.copied_unread(path, proven_new)) is not None:
            # a copy of what its stream's file held before we read a byte of it
            followed.follow(fd, ident, head, path, owner, 0, size)
        else:
            followed.follow(fd, ident, head, path, path, 0, size, active=True)

    def absent(self, present: set[str], idents: set[Ident]) -> None:
        """What a whole listing did not show (``present``: the paths it found, ``idents``: their
        files): streams whose path is empty drain their file; saved files not found are looked for
        once more, then lost; parked files no path leads to are drained from their real path, or
        lost or remembered after two listings; held copies and files waiting for a descriptor that
        are gone are forgotten."""
        followed = self.followed
        for stream in [s for s in followed.active if s not in present]:
            drain(followed.files[followed.active.pop(stream)])
        if followed.first and followed.resume.at is not None:
            saved = followed.resume.saved.values()
            followed.resume.unseen = {(p.dev, p.ino): p for p in saved if (p.dev, p.ino) not in idents
                                      and (p.dev, p.ino) not in followed.files and not self.resumed.real(p)}
        elif followed.resume.unseen:  # missed by two listings: gone
            for ident, p in followed.resume.unseen.items():  # (a rotated one still being read too: its writer
                if ident not in idents and ident not in followed.files:  # may have gone on writing to it)
                    followed.lost_while_down(p)
            followed.resume.unseen = {}
        for f in [f for f in followed.files.values() if f.fd < 0 and f.ident not in idents]:
            if self.reopen_real(f):
                continue  # no listed path leads to it now (a symlink moved on): drained from its real path
            if f.missed and f.size > f.offset:  # gone from two listings in a row, with bytes unread
                if os.path.isdir(os.path.dirname(f.path)):
                    self.forget_parked(f)  # deleted (or renamed out of the tree): lost
                else:  # its directory moved away, maybe to come back: remembered, lost if it does not
                    self.retire_parked(f)
            elif not f.missed:
                # A listing may miss a file renamed while it runs (under both names), and a directory
                # moved out may come back: it drains, retired once idle, so that its new name finds
                # it. Only what it held unread waits for the next listing to say whether it is lost.
                f.missed = True
                if not f.draining:
                    drain(f)
        for k in followed.copies.forget_absent(idents, time.monotonic()):
            if k.unread:
                followed.lost(k.stream, k.unread, "held bytes that went away unread (a closed file whose directory "
                              "went away, or logrotate's copy of it deleted before it was read)")
        for ident in [i for i in followed.unopened if i not in idents]:
            del followed.unopened[ident]

    def retire_parked(self, f: TailFile) -> None:
        """Let go of a closed file with bytes unread whose directory went away: remembered as read
        to where it was (its partial last line kept), so that it is read on if the directory comes
        back; what it held is counted lost if it does not (``forget_absent``)."""
        followed = self.followed
        followed.let_go(f)
        followed.copies.known[f.ident] = Known(f.stream, f.head, f.offset, pending=bytes(f.cutter.pending),
                                               fp=f.fingerprint(f.offset), seen=time.monotonic(), birth=f.birth,
                                               unread=f.size - f.offset)
        followed.vanish_if_last(f.stream)

    def _unread(self, path: str, ident: Ident, size: int, mtime: float, proven_new: bool) -> Position:
        """The position a new file waiting for a descriptor will be read from, for the state: a crash
        before it is opened must not take it for a file read to its end."""
        followed = self.followed

        if ident in followed.start_at_end:
            unchanged = ident in followed.resume.unchanged
            at = 0 if followed.from_beginning and not unchanged else followed.start_at_end[ident]
        elif path not in followed.streams and not followed.from_beginning and not proven_new \
                and mtime < followed.started - OLD_MARGIN:
            at = size
        else:
            at = 0
        return Position(path, path, ident[0], ident[1], b"", at)

    def _follow_from(self, fd: int, ident: Ident, head: bytes, path: str, at: int, size: int) -> None:
        """Follow a file that was there at start from ``at`` (its end then), or from its start."""
        followed = self.followed
        end = at > 0 and (not followed.from_beginning or ident in followed.resume.unchanged)
        skip = end and os.pread(fd, 1, at - 1) != b"\n"  # started mid-line: skip to the next line
        followed.follow(fd, ident, head, path, path, at if end else 0, size, active=True, skip=skip)
        if end:
            followed.at_end.append((path, at))

    def _unpark(self, f: TailFile, path: str, size: int, cuts: list[Cut]) -> None:
        """Reopen a parked file that changed (``size`` from stat), if its path still leads to it."""
        held = max(f.size, f.offset)  # what it held when last looked at: unread if it was cut since
        f.size = size if size >= f.offset else held  # for lag and files_waiting until it is reopened
        if not self._reopen(f, path):
            return  # waiting for a descriptor, or replaced meanwhile: placed at the next poll
        f.size = f.offset  # so that truncated() compares the head if it grew: replaced content is a cut
        self.check_cut(f, cuts, held)

    def _reopen(self, f: TailFile, path: str) -> bool:
        """Reopen parked ``f`` through ``path`` at its offset, if ``path`` still leads to it."""
        fd = self.followed.open_fd(path)
        if fd is None:
            return False
        try:
            st = os.fstat(fd)
            if (st.st_dev, st.st_ino) == f.ident and other_birth(fd, f.birth):
                self.forget_parked(f)  # deleted while parked, and its inode given to a new file:
                # placed as one at the next look
            elif (st.st_dev, st.st_ino) == f.ident:
                os.lseek(fd, f.offset, os.SEEK_SET)
                f.fd, f.path = fd, path
                return True
        except OSError as err:
            self.followed.report(path, err)
        self.followed.fds.close(fd)
        return False
