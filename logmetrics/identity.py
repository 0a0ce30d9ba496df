"""Identity: whether a file found now is one read before, when its (device, inode) may be reused.

A deleted file's inode number is soon given to a new file, so device and inode alone do not say
that a file is the one read before. A read position is trusted only together with the file's
first bytes (its head) and a *fingerprint* taken at the position: a hash of up to ``FP_BYTES``
bytes just before it. Bytes appended later leave both unchanged; another file under the same
inode matches both only if it holds the same bytes in the same places, and then reading it on
from that position is right anyway.

Files read to their end and let go (*retired*) are remembered by identity so that a new name of
one (``x.log.2`` -> ``x.log.3``) is not read again as a new file. A listing that races such a
rename may miss the file once, so one missing from a listing is remembered on for ``KEEP``
seconds, at most ``MAX_ABSENT`` of them; the fingerprint check makes a reused inode harmless.
"""

from __future__ import annotations

import hashlib
import os
import string
from typing import TYPE_CHECKING

if TYPE_CHECKING:  # copies imports tailfile, which imports this module
    from logmetrics.copies import Known

FP_BYTES = 256  # bytes before a read position that its fingerprint covers
FP_CHARS = 32  # the fingerprint as a state file holds it: 16 bytes in hex
KEEP = 600.0  # seconds a retired file missing from the listings is remembered
MAX_ABSENT = 10_000  # retired files missing from the listings remembered at most (the oldest go first)
_HEX = frozenset(string.hexdigits.lower())

Ident = tuple[int, int]


def fingerprint(fd: int, offset: int) -> str:
    """The fingerprint of an open file at ``offset``: a hash of the (up to) ``FP_BYTES`` bytes before it."""
    start = max(0, offset - FP_BYTES)
    data = os.pread(fd, offset - start, start) if offset > start else b""
    return hashlib.blake2b(data, digest_size=FP_CHARS // 2).hexdigest()


def is_fingerprint(value: object) -> bool:
    """Whether ``value`` is a fingerprint as ``fingerprint`` makes it (for checking a state file)."""
    return isinstance(value, str) and len(value) == FP_CHARS and _HEX.issuperset(value)


def same_file(fd: int, size: int, head: bytes, saved_head: bytes, offset: int, fp: str | None) -> bool:
    """Whether the open file ``fd`` (``size`` bytes, starting with ``head``) is the one read to ``offset``.

    ``saved_head`` and ``fp`` are what that file started with and its fingerprint at ``offset``;
    without a fingerprint (a state file from before they were kept) the head alone decides.
    """
    if size < offset or head[: len(saved_head)] != saved_head[: len(head)]:
        return False
    return fp is None or fingerprint(fd, offset) == fp


def forget_absent(known: dict[Ident, Known], listed: set[Ident], now: float) -> None:
    """After a full listing: note when each remembered file was last ``listed``, forget old absent ones.

    A presumed copy (``offset`` None) missing from a listing is forgotten at once: it is compared
    with its original again if it shows up. A retired file is kept for ``KEEP`` seconds.
    """
    absent: list[tuple[float, Ident]] = []
    for ident, k in list(known.items()):
        if ident in listed:
            k.seen = now
        elif k.offset is None or now - k.seen > KEEP:
            del known[ident]
        else:
            absent.append((k.seen, ident))
    if len(absent) > MAX_ABSENT:
        absent.sort()
        for _, ident in absent[: len(absent) - MAX_ABSENT]:
            del known[ident]
