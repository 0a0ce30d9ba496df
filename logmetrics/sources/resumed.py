"""Placement by saved positions: the first polls after a restart with ``--state-file``.

A saved file still there (by identity, starting with the same bytes and with the same fingerprint
at its position) is read on from its position, under its stream, wherever it now lies; one cut
while logmetrics was down is read from its start; logrotate's copy of a saved file, made while it
was down, from that file's position; a file written at a saved stream's path and rotated away
meanwhile is a rotation of that stream. ``Resumed`` decides these with the saved positions kept
in the shared registry (``Followed.resume``); other files are placed as at any poll.
"""

from __future__ import annotations

import os
import time

from logmetrics.sources.chunks import Position
from logmetrics.sources.copies import (
    Known,
    copy_name,
    is_copy,
    nearest_first,
    originals,
    same_head_at,
    same_tail_at,
)
from logmetrics.sources.followed import Followed, ident_at
from logmetrics.sources.identity import birth, other_birth, other_birth_at, same_file
from logmetrics.sources.tailfile import Ident


def _stream(p: Position) -> str:
    return p.stream


class Resumed:
    """Places files by the positions an earlier run saved."""

    def __init__(self, followed: Followed) -> None:
        self.followed = followed

    def real(self, p: Position) -> bool:
        """At the first poll after a restart: follow a saved file that no listed path leads to (its
        symlink moved on while we were down) from its real path, if it is still the same file."""
        followed = self.followed
        if p.real is None or ident_at(p.real) != (p.dev, p.ino):
            return False
        opened = followed.open(p.real, (p.dev, p.ino))
        if opened is None:
            return False
        fd, size, head = opened
        if other_birth(fd, p.birth) or not same_file(fd, size, head, p.head, p.offset, p.fp):
            followed.fds.close(fd)
            return False
        self.follow(fd, (p.dev, p.ino), head, p.real, p.stream, p.offset, size)
        return True


    def place(self, path: str, ident: Ident) -> bool:
        """The first poll after ``resume``: place ``path`` by the saved positions, if they say how."""
        followed = self.followed
        followed.resume.later.discard(ident)
        followed.resume.unseen.pop(ident, None)
        saved = followed.resume.saved.get(ident)
        if saved is None and not followed.resume.named(path):
            return False  # under a PATH argument the state did not have: as at a first start
        if saved is None:
            assert followed.resume.at is not None
            try:
                if os.stat(path).st_mtime <= followed.resume.at:
                    # unchanged while we were down: from its end, as without a state, even with
                    # --from-beginning (which is for a first start): a rotated file read to its end
                    # and let go before the save is no new file
                    followed.resume.unchanged.add(ident)
                    return False
            except OSError:
                return False
        opened = followed.open(path, ident)
        if opened is None:
            if path in followed.waiting:  # out of descriptors: placed by the saved positions later
                followed.resume.later.add(ident)
                if saved is not None:
                    followed.unopened[ident] = saved
            return True
        fd, size, head = opened
        if saved is not None and self._written_copy(saved, fd, head, path, size):
            saved = None  # placed as a copy, as a new file is
        if saved is not None:
            if not other_birth(fd, saved.birth) and same_file(fd, size, head, saved.head, saved.offset, saved.fp):
                original = self._copy_of_saved(fd, head, path, size) \
                    if size > saved.offset and saved.stream == path else None
                if original is not None:
                    # followed as a stream of its own (there at start, named like a copy), then written
                    # over by `cp` of its original while we were down: what it gained is the original's
                    self._keep_copy(fd, ident, head, original)
                    return True
                self.follow(fd, ident, head, path, saved.stream, saved.offset, size)
                return True
            if other_birth(fd, saved.birth):
                # Another file that got the saved file's inode: that one was deleted while we were
                # down, and this one is a new file wherever it lies, placed as one below. Not its
                # stream's file by its path alone: an empty x.log.1, saved as a stream of its own, is
                # written over by `mv x.log x.log.1`, the new x.log gets its inode and is rotated to
                # x.log.1 in turn; it is x.log's rotated file, not x.log.1's successor.
                followed.lost_while_down(saved)
            elif path == saved.stream:  # cut while we were down
                followed.stats.truncations[path] = followed.stats.truncations.get(path, 0) + 1
                self.follow(fd, ident, head, path, path, 0, size)
                return True
            # (elsewhere, with no birth time to tell, another file that got the saved file's inode: a new file)
        # logrotate's copy of a saved file, made while we were down (not of one found whole: renamed,
        # that one was not copied)
        resume = followed.resume
        for pos in nearest_first(path, list(resume.saved.values()), _stream):
            if self._copy_of(pos, fd, head, path, size):
                if (pos.dev, pos.ino) not in resume.whole:
                    self.follow(fd, ident, head, path, pos.stream, min(pos.offset, size), size)
                    return True
                if size >= pos.offset and same_tail_at(fd, pos.stream, size):
                    # a copy kept beside a saved file found whole (logrotate's copy, a cp): its lines
                    # are that file's, read up to the saved position or to be read on from it
                    self._keep_copy(fd, ident, head, pos.stream)
                    return True
        at_path = {p.stream: p for p in followed.resume.saved.values() if p.path == p.stream}
        for stream in originals(path):
            if stream not in at_path:
                continue
            moved = self._moved(at_path[stream])
            if moved or (at_path[stream].dev, at_path[stream].ino) not in followed.resume.whole:
                # written at the stream's path and rotated away while we were down (a rotation); or,
                # its file cut while we were down, a copy of lines written between two copytruncates
                # (a rotation of x.log that lies where a stream of its own was saved, x.log.1 found
                # empty at a start, is x.log's: the file there now is not x.log.1's saved one)
                counts = followed.stats.rotations if moved else followed.stats.truncations
                counts[stream] = counts.get(stream, 0) + 1
                self.follow(fd, ident, head, path, stream, 0, size)
                return True
        if path in at_path:  # the successor of a rotated file (counted once it is known to be no other's)
            followed.stats.rotations[path] = followed.stats.rotations.get(path, 0) + 1
        followed.follow(fd, ident, head, path, path, 0, size, active=True)
        return True

    @staticmethod
    def _moved(p: Position) -> bool:
        """Whether the saved file ``p`` of a stream is no longer at the stream's path: another file
        is there, or none. One that got its inode after it was deleted is another file: born later."""
        return ident_at(p.stream) != (p.dev, p.ino) or other_birth_at(p.stream, p.birth)

    @staticmethod
    def _copy_of(pos: Position, fd: int, head: bytes, path: str, size: int) -> bool:
        """Whether the file ``fd`` at ``path`` is named like a copy of ``pos``'s stream and starts like
        its file: with its saved head, or, where nothing of that file had been read at the save (an
        empty head, which any file starts with), like the file now at the stream's path, and with its
        bytes where the copy ends."""
        if not copy_name(path, pos.stream):
            return False
        if pos.head:
            return is_copy(head, pos.head)
        return bool(head) and same_head_at(pos.stream, head) and same_tail_at(fd, pos.stream, size)

    def _written_copy(self, saved: Position, fd: int, head: bytes, path: str, size: int) -> bool:
        """Whether the saved file ``fd`` at ``path``, written over while logmetrics was down (or with
        nothing read of it, an empty copy, whose saved head tells it from no file), now is named and
        starts like the copy of another saved file: a ``cp`` over it, placed as a copy."""
        if size == 0 or other_birth(fd, saved.birth) or (
                saved.head and same_file(fd, size, head, saved.head, saved.offset, saved.fp)):
            return False
        others = [p for p in self.followed.resume.saved.values() if p is not saved]
        return any(self._copy_of(p, fd, head, path, size) for p in others)

    def _copy_of_saved(self, fd: int, head: bytes, path: str, size: int) -> str | None:
        """The saved stream whose file the file ``fd`` at ``path`` is a copy of, if any: named like
        its copy, starting like it and ending like the file now at that stream's path at the same place."""
        for p in self.followed.resume.saved.values():
            # (with an empty saved head, _copy_of compared the ends already)
            if p.path == p.stream and self._copy_of(p, fd, head, path, size) \
                    and (not p.head or same_tail_at(fd, p.stream, size)):
                return p.stream
        return None

    def _keep_copy(self, fd: int, ident: Ident, head: bytes, stream: str) -> None:
        """Keep the file ``fd`` as a copy of ``stream``'s file that stays: not read (its lines are that
        file's), only what is written to it later; written over by the next ``cp``, a copy again."""
        st = os.fstat(fd)
        self.followed.copies.known[ident] = Known(stream, head, st.st_size, mtime_ns=st.st_mtime_ns,
                                                  seen=time.monotonic(), birth=birth(fd), kept=True)
        self.followed.fds.close(fd)

    def follow(self, fd: int, ident: Ident, head: bytes, path: str, stream: str, offset: int, size: int) -> None:
        """Follow a file of a saved stream: at its path it is the stream's file, elsewhere a rotated one."""
        followed = self.followed
        active = path == stream and stream not in followed.active
        followed.follow(fd, ident, head, path, stream, offset, size, active=active)  # not active: drained
        followed.streams.add(stream)
