"""Copies: the evidence that a new file is logrotate's copy of a followed one (copytruncate).

Logs of one backend often start with the same banner lines, so a fingerprint of the first bytes
alone cannot say that a file is a copy. A new file is *held back* as a copy only if it is named
like a rotated copy of a followed file (``copy_name``), starts like it and ends like it at the
same place (no size test: the original may have grown since its last look, or been cut). It
stays held until its original is truncated (then it is read from where the original had been
read), and is read as a new file, from its start, once it differs from its original. A copy
that stays the same as its original's start for ``COPY_WAIT`` seconds with no truncation is
*kept*: a copy that stays (logrotate's ``copy``, a ``cp`` by hand), whose lines were counted
through its original; it is remembered as a retired file read to its end, and only what is
written to it later is read, unless it is the next round's ``cp`` over it: a kept copy that grew
and still starts and ends like its original is held as a copy again. A drained copy written over
by the next round's ``cp`` is forgotten and placed again as a new copy. An original read nothing
of yet is compared by its bytes now (a copy may be taken before its first read).
"""

from __future__ import annotations

import functools
import os
import time
from collections.abc import Callable, Collection, Iterable
from dataclasses import dataclass, field
from typing import TypeVar

from logmetrics import lazyre
from logmetrics.sources import identity
from logmetrics.sources.tailfile import Ident, TailFile, read_head

COPY_WAIT = 10.0  # seconds a look-alike of a followed file waits for the truncation that makes it a copy
TAIL_CHECK = 256  # bytes compared at the end of a presumed copy with the original at the same place
_COPY_SUFFIX = lazyre.compile(r"[.\-_][^/]+")  # x.log.1, x.log-20240101, x.log.2024-01-01, x.log.bak
_DATE_BEFORE_EXT = lazyre.compile(r"[.\-_][0-9][0-9.\-_]*")  # x-20240101.log (dateext before the extension)
_T = TypeVar("_T")


@dataclass(slots=True)
class Known:
    """An identity seen before and not held open: a retired file, or a copy of a followed one."""

    stream: str
    head: bytes
    offset: int | None  # read on from here if it grows; None: a copy, read only if its original is truncated
    pending: bytes = b""  # the partial line its original held when truncated
    since: float = 0.0  # a presumed copy: when it last changed; it is read as a new file if no truncation follows
    size: int = -1  # a presumed copy: its size when its content was last compared with the original
    fp: str | None = None  # a retired file: its fingerprint at ``offset`` (``logmetrics.sources.identity``)
    mtime_ns: int = -1  # a retired file: its modification time when last found the same (-1: not yet)
    seen: float = 0.0  # when it was last found in a listing (monotonic)
    birth: int | None = None  # when it was created (``logmetrics.sources.identity.birth``), if known
    #: bytes it holds that were never read: a file let go whose directory moved away, or the copy a
    #: truncated file's unread bytes are in (counted lost if it goes before it is read)
    unread: int = 0
    kept: bool = False  # a copy that stayed (``KEPT``): written over by the next ``cp``, it is held again


@dataclass(slots=True)
class Cut:
    """A file found truncated: what had been read of it, kept for ``COPY_WAIT`` seconds for its copy."""

    stream: str
    head: bytes
    offset: int
    pending: bytes
    since: float = 0.0  # when it was found: its copy may show up a few polls later (out of descriptors)
    unread: int = 0  # bytes the file was known to hold past ``offset`` before the cut: lost if no copy comes


def is_copy(head: bytes, original: bytes) -> bool:
    """Whether a file starting with ``head`` starts with all of ``original``'s fingerprint."""
    return bool(original) and head.startswith(original)


def copy_name(path: str, original: str) -> bool:
    """Whether ``path`` is named like a rotated copy of ``original``.

    A copy is the original's name plus a suffix after a separator (x.log.1, x.log-20240101,
    x.log.2024-01-01), or a date or number inserted before its extension (x-20240101.log).
    ``vllm-10.log`` is not a copy of ``vllm-1.log``.
    """
    name, orig = os.path.basename(path), os.path.basename(original)
    if name.startswith(orig) and _COPY_SUFFIX.fullmatch(name, len(orig)):
        return True
    stem, ext = os.path.splitext(orig)
    if not ext or not name.endswith(ext) or not name.startswith(stem):
        return False
    return _DATE_BEFORE_EXT.fullmatch(name[len(stem) : len(name) - len(ext)]) is not None


@functools.lru_cache(maxsize=4096)  # asked for the followed files that grow, poll after poll
def originals(path: str) -> tuple[str, ...]:
    """The paths in ``path``'s directory that it is named like a rotated copy of (``copy_name``)."""
    here, name = os.path.split(path)
    stem, ext = os.path.splitext(name)
    cuts = [i for i, ch in enumerate(name) if ch in ".-_" and i]
    out = [name[:i] for i in cuts] + [stem[:i] + ext for i in cuts if i < len(stem)]
    return tuple(os.path.join(here, o) for o in dict.fromkeys(out) if copy_name(path, os.path.join(here, o)))


def nearest_first(path: str, streams: list[_T], stream: Callable[[_T], str]) -> list[_T]:
    """``streams`` with those in ``path``'s own directory first: logs of the same name sit in many
    directories (``0.log`` of every container), and logrotate keeps a copy beside its original."""
    here = os.path.dirname(path)
    return sorted(streams, key=lambda s: os.path.dirname(stream(s)) != here)


def head_now(f: TailFile) -> bytes:
    """``f``'s head; for a file read nothing of yet, its first bytes now (a copy of them may be
    made before they are read)."""
    if f.head or f.fd < 0:
        return f.head
    try:
        return read_head(f.fd)
    except OSError:
        return b""


def starts_like(head: bytes, original: bytes) -> bool:
    """Whether ``head`` holds ``original``'s fingerprint, or a part of it (a copy still being written)."""
    return is_copy(head, original) or original.startswith(head)


def tails_equal(fd: int, other: int, size: int) -> bool:
    """Whether the last bytes of the first ``size`` of ``fd`` are those of ``other`` there."""
    start = max(0, size - TAIL_CHECK)
    theirs = os.pread(other, size - start, start)
    return len(theirs) == size - start and os.pread(fd, size - start, start) == theirs


def same_tail_at(fd: int, path: str, size: int) -> bool:
    """``same_tail`` against the file at ``path`` (False where it cannot be read)."""
    try:
        other = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC)
    except OSError:
        return False
    try:
        return tails_equal(fd, other, size)
    except OSError:
        return False
    finally:
        os.close(other)


def copy_of_cut(head: bytes, streams: Collection[str], cuts: list[Cut]) -> bool:
    """Whether a file starting with ``head`` starts like a cut of one of ``streams`` that waits for its copy."""
    return any(c.stream in streams and is_copy(head, c.head) for c in cuts)


def same_head_at(path: str, head: bytes) -> bool:
    """Whether the file at ``path`` starts with ``head`` (False where it cannot be read)."""
    try:
        with open(path, "rb") as fh:
            return fh.read(len(head)) == head
    except OSError:
        return False


def same_tail(fd: int, original: TailFile, size: int) -> bool:
    """Whether the last bytes of the first ``size`` of ``fd`` are those of ``original`` there."""
    if original.fd < 0 or size <= 0:
        return True  # nothing to compare (now)
    if tails_equal(fd, original.fd, size):
        return True
    # Different, or the original was cut (and maybe written again) since its size was taken: then
    # it is a copy that the coming truncation will show, not a new file.
    head = original.head
    return bool(head) and os.pread(original.fd, len(head), 0) != head


HELD, KEPT, PARTED = "held", "kept", "parted"


def copy_state(path: str, known: Known, original: TailFile | None, size: int, wait: float) -> str:
    """What the file at ``path``, held back as ``known``, is now: ``HELD``, still a copy of
    ``original`` waiting for its truncation; ``KEPT``, unchanged and the same as its original's
    start for ``wait`` seconds with no truncation (logrotate's ``copy``, a ``cp`` by hand): its
    lines are counted through its original; ``PARTED``, its content parted from the original's
    (or its original is gone): a file of its own."""
    now = time.monotonic()
    if original is None:
        return HELD if now - known.since < wait else PARTED
    if size != known.size:  # changed (a copy still being written?): compare its content again
        known.since, known.size = now, size
        if original.fd >= 0 and not _same_content(path, known, original, size):
            return PARTED
    if now - known.since < wait:
        return HELD
    same = _still_same(path, known, original, size)
    return HELD if same is None else KEPT if same else PARTED


def _same_content(path: str, known: Known, original: TailFile, size: int) -> bool:
    """Whether the file at ``path`` still looks like a copy of ``original`` (yes where that cannot
    be told now: it is looked at again at its next change)."""
    return _looks_like(path, known, original, lambda fd: same_tail(fd, original, size)) is not False


def _still_same(path: str, known: Known, original: TailFile, size: int) -> bool | None:
    """At the end of the wait: whether the file at ``path`` still starts like ``original`` and ends
    like it at ``size``, compared by path where the original is closed (parked)."""
    return _looks_like(path, known, original, lambda fd: tails_equal(fd, original.fd, size) if original.fd >= 0
                       else same_tail_at(fd, original.path, size))


def _looks_like(path: str, known: Known, original: TailFile, tail: Callable[[int], bool]) -> bool | None:
    """Whether the file at ``path`` starts like ``original`` (its head then kept in ``known``) and
    its descriptor passes ``tail``; None if it cannot be read now (out of descriptors, say)."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC)
    except OSError:
        return None
    try:
        head = read_head(fd)
        if not starts_like(head, head_now(original)):
            return False
        known.head = head
        return tail(fd)
    except OSError:
        return None
    finally:
        os.close(fd)


@dataclass
class CopyTracker:
    """What copy tracking remembers between polls: the files seen before and not held open (retired
    files, presumed copies), the cuts waiting for their copy, the streams rotated or cut lately,
    and whether a presumed copy waits for its original's truncation."""

    known: dict[Ident, Known] = field(default_factory=dict)
    cuts: list[Cut] = field(default_factory=list)  # files found cut lately: a copy may show up a few polls later
    rotated_lately: dict[str, float] = field(default_factory=dict)  # streams whose file was replaced: when
    cut_lately: dict[str, float] = field(default_factory=dict)  # streams whose file was cut: when (monotonic)
    held: bool = False  # files that look like a copy wait for their original's truncation

    def expire(self, now: float, wait: float) -> list[Cut]:
        """Forget the cuts, rotations and truncations older than ``wait`` seconds (monotonic
        ``now``); the cuts forgotten that held bytes no copy came for, in order: those are lost."""
        lost = [c for c in self.cuts if now - c.since >= wait and c.unread]
        self.cuts = [c for c in self.cuts if now - c.since < wait]
        self.rotated_lately = {s: at for s, at in self.rotated_lately.items() if now - at < wait}
        self.cut_lately = {s: at for s, at in self.cut_lately.items() if now - at < wait}
        return lost

    def note_held(self) -> None:
        """After a full pass: whether a presumed copy waits for its original's truncation."""
        self.held = any(k.offset is None for k in self.known.values())

    def forget_streams(self, streams: Iterable[str]) -> None:
        """Forget what is remembered of the files of ``streams`` (no longer followed)."""
        gone = set(streams)
        for ident in [i for i, k in self.known.items() if k.stream in gone]:
            del self.known[ident]

    def forget_absent(self, listed: set[Ident], now: float) -> list[Known]:
        """After a full listing: note when each remembered file was last ``listed``, forget old absent
        ones; the retired files forgotten (their ``unread`` bytes are lost).

        A presumed copy (``offset`` None) missing from a listing is forgotten at once: it is compared
        with its original again if it shows up. A retired file is kept for ``identity.KEEP`` seconds.
        """
        known = self.known
        absent: list[tuple[float, Ident]] = []
        gone: list[Known] = []
        for ident, k in list(known.items()):
            if ident in listed:
                k.seen = now
            elif k.offset is None or now - k.seen > identity.KEEP:
                gone.append(known.pop(ident))
            else:
                absent.append((k.seen, ident))
        if len(absent) > identity.MAX_ABSENT:
            absent.sort()
            for _, ident in absent[: len(absent) - identity.MAX_ABSENT]:
                gone.append(known.pop(ident))
        return [k for k in gone if k.offset is not None]
