"""Originals: which followed file a file found is named like a copy of, and whether its content
says it is one, for ``logmetrics.sources.placement.Placement``.

A file is compared only with the followed files of the streams its name makes it a copy of
(``copies.copy_name``): looked up by name in an index made once a listing. The evidence is the
content: it starts like the original (or like the original was before a cut found in this look)
and ends like it at the same place (``copies.same_tail``). These questions read files but decide
nothing; ``Placement`` acts on the answers.
"""

from __future__ import annotations

import os
import time
from functools import lru_cache

from logmetrics.sources.copies import (
    Cut,
    copy_of_cut,
    head_now,
    is_copy,
    nearest_first,
    originals,
    same_tail,
    starts_like,
    tails_equal,
)
from logmetrics.sources.followed import Followed, ident_at
from logmetrics.sources.tailfile import TailFile, read_head


@lru_cache(maxsize=4096)
def original_names(path: str) -> frozenset[str]:
    """The names of the files ``path`` is named like a rotated copy of: a pure function of the
    path, asked for every busy file at every pass, so answered once per path."""
    return frozenset(os.path.basename(o) for o in originals(path))


def _stream(f: TailFile) -> str:
    return f.stream


def _seq(f: TailFile) -> int:
    return f.seq


class Originals:
    """Answers, from the registry of followed files, which of them a file is (named like) a copy of."""

    def __init__(self, followed: Followed) -> None:
        self.followed = followed

    def named(self, path: str) -> list[TailFile]:
        """The followed files of the streams that ``path`` is named like a rotated copy of, those in
        its directory first, in the order they were followed: looked up by name in an index made
        once a listing (each new file would compare its name with every followed one's otherwise)."""
        names = original_names(path)
        if not names:
            return []
        index = self.followed.name_index
        if index is None:
            index = self.followed.name_index = {}
            for f in self.followed.files.values():
                index.setdefault(os.path.basename(f.stream), []).append(f)
        found = [f for name in names for f in index.get(name, ()) if self.followed.files.get(f.ident) is f]
        if not found:
            return found
        found.sort(key=_seq)
        return nearest_first(path, found, _stream)

    def of(self, f: TailFile) -> list[TailFile]:
        """The followed files, their streams' own and open, that ``f``'s path is named like a copy of."""
        return [g for g in self.named(f.path) if g is not f and g.own and g.fd >= 0 and not g.draining]

    def copied_over(self, f: TailFile, cuts: list[Cut]) -> bool:
        """Whether open ``f``, cut, now starts like its stream's current file (or like that file was
        before a cut found in this look): a copy of it written in."""
        current = self.followed.current(f.stream)
        heads = [c.head for c in cuts if c.stream == f.stream] + ([current.head] if current is not None else [])
        head = read_head(f.fd) if any(heads) else b""
        return bool(head) and any(h and starts_like(head, h) for h in heads)

    def written_over(self, f: TailFile, cuts: list[Cut]) -> bool:
        """Whether ``f``, cut, is named like the copy of another stream's file and now starts like it
        (or like it was before a cut found in this look: the copy of a copytruncate written in), or
        is empty (the copy is being written)."""
        found = self.of(f)
        if not found:
            return False
        head = read_head(f.fd)
        # empty: a cp under way (it empties its target first), caught before the copy's bytes came
        return (not head or any(starts_like(head, head_now(g)) for g in found)
                or copy_of_cut(head, {g.stream for g in found}, cuts))

    def grew_into(self, f: TailFile, cuts: list[Cut]) -> bool:
        """Whether ``f``, its stream's own file, grew into a copy of another stream's file: named like
        its copy, starting like it and ending like it at the same place, or starting like it was
        before a cut found in this look, what it gained is that file's (`cp x.log x.log.1` over an
        x.log.1 there at start, or saved as a stream of its own; then x.log cut, for copytruncate)."""
        if not f.own or self.followed.active.get(f.stream) != f.ident:
            return False
        found = self.of(f)
        head = read_head(f.fd) if found else b""
        return bool(head) and (any(starts_like(head, head_now(g)) and same_tail(f.fd, g, f.size) for g in found)
                               or copy_of_cut(head, {g.stream for g in found}, cuts))

    @staticmethod
    def filled(f: TailFile, cuts: list[Cut]) -> bool:
        """Whether ``f``, a rotated file of its stream of which nothing was read (empty when found: an
        empty copy), now starts like a cut of that stream found in this look: written over by the
        copy of the next copytruncate, whose lines are that cut's."""
        if f.own or f.head:
            return False
        head = read_head(f.fd)
        return bool(head) and copy_of_cut(head, (f.stream,), cuts)

    def copy_of(self, fd: int, head: bytes, size: int, stream: str) -> bool:
        """Whether the open file ``fd`` starts like ``stream``'s current file and ends like it at ``size``."""
        f = self.followed.current(stream)
        return f is not None and f.fd >= 0 and starts_like(head, head_now(f)) and same_tail(fd, f, size)

    def cut_shown(self, path: str, fd: int, head: bytes, size: int) -> TailFile | None:
        """The followed file whose cut the new file ``fd`` at ``path`` proves, if any: named as its
        copy, holding what was read of it (its head, and its last bytes read at the same place) and
        more bytes than it holds now, which shrank since its last look or are not the copy's start.
        That file was cut after the copy was taken and written again with the bytes it began with
        (a banner), or cut between its own look and the listing, so the cut did not show."""
        for f in self.named(path):
            last = f.last
            if not (f.own and f.fd >= 0 and not f.draining and last and f.head and size >= f.offset
                    and is_copy(head, f.head) and ident_at(f.stream) == f.ident):
                continue
            try:
                now = os.fstat(f.fd).st_size
                if now >= size or os.pread(fd, len(last), f.offset - len(last)) != last:
                    continue
                if now >= f.size and tails_equal(fd, f.fd, now):
                    continue  # not shrunk since its last look, and the copy's start: a copy that grew past it
            except OSError:
                continue
            return f
        return None

    def copied_unread(self, path: str, proven_new: bool) -> str | None:
        """The stream that a new file at ``path`` is a copy of, taken (copytruncate) before anything of
        its file's content was read: named as its copy, beside a file read nothing of, else None."""
        if proven_new:
            return None
        for stream in originals(path):
            f = self.followed.current(stream)
            if f is not None and f.offset == 0 and not f.head:
                return stream
        return None

    def rotated_into(self, path: str) -> str | None:
        """The stream that a new file at ``path`` was rotated out of unseen: one named as ``path``'s
        original whose own file was replaced or cut since the last look, or lately (a file found
        after waiting for a descriptor; a copy of lines written between two copytruncates), else
        None (a file of its own)."""
        followed = self.followed
        for stream in originals(path):
            ident = followed.active.get(stream)
            if ident is not None and ident_at(stream) != ident:
                followed.copies.rotated_lately[stream] = time.monotonic()  # its file moved away unseen
                return stream
            if stream in followed.copies.rotated_lately or stream in followed.copies.cut_lately:
                return stream
        return None
