"""Identity: whether a file found now is one read before, when its (device, inode) may be reused.

A deleted file's inode number is soon given to a new file, so device and inode alone do not say
that a file is the one read before. A read position is trusted only together with the file's
first bytes (its head) and a *fingerprint* taken at the position: a hash of up to ``FP_BYTES``
bytes just before it. Bytes appended later leave both unchanged; another file under the same
inode matches both only if it holds the same bytes in the same places. Logs of identical lines (a
health probe's access line, with no time in it) do, so where the system tells a file's *birth*
time (``statx``, on Linux with ext4, XFS, Btrfs and others), a file born at another time is
another file whatever it holds.

Files read to their end and let go (*retired*) are remembered by identity so that a new name of
one (``x.log.2`` -> ``x.log.3``) is not read again as a new file. A listing that races such a
rename may miss the file once, so one missing from a listing is remembered on for ``KEEP``
seconds, at most ``MAX_ABSENT`` of them; the fingerprint check makes a reused inode harmless.
"""

from __future__ import annotations

import ctypes
import hashlib
import os
import string
import struct
import sys
from collections.abc import Callable

FP_BYTES = 256  # bytes before a read position that its fingerprint covers
FP_CHARS = 32  # the fingerprint as a state file holds it: 16 bytes in hex
KEEP = 600.0  # seconds a retired file missing from the listings is remembered
MAX_ABSENT = 10_000  # retired files missing from the listings remembered at most (the oldest go first)
_HEX = frozenset(string.hexdigits.lower())
_STATX_BTIME = 0x800  # the statx mask bit of the birth time
_AT_EMPTY_PATH = 0x1000  # statx of the descriptor itself
_AT_FDCWD = -100  # statx of a path from the working directory
_BTIME_AT = 80  # offset of stx_btime (seconds: s64, then nanoseconds: u32) in struct statx



def _load_statx() -> Callable[..., int] | None:
    if not sys.platform.startswith("linux"):
        return None
    try:
        func = ctypes.CDLL(None, use_errno=True).statx
    except (AttributeError, OSError):  # a C library older than statx (glibc < 2.28)
        return None
    func.argtypes = [ctypes.c_int, ctypes.c_char_p, ctypes.c_int, ctypes.c_uint, ctypes.c_char_p]
    func.restype = ctypes.c_int
    return func


_statx = _load_statx()


def birth(fd: int) -> int | None:
    """When the open file ``fd`` was created, in nanoseconds, where the system and its file system
    tell (``statx``); None where they do not."""
    return _btime(fd, b"", _AT_EMPTY_PATH)


def birth_at(path: str) -> int | None:
    """``birth`` of the file at ``path`` (symlinks followed), without a descriptor for it."""
    return _btime(_AT_FDCWD, os.fsencode(path), 0)


def _btime(dirfd: int, path: bytes, flags: int) -> int | None:
    if _statx is None:
        return None
    buf = ctypes.create_string_buffer(256)
    if _statx(dirfd, path, flags, _STATX_BTIME, buf) != 0:
        return None
    mask, = struct.unpack_from("I", buf, 0)
    if not mask & _STATX_BTIME:
        return None
    sec, nsec = struct.unpack_from("qI", buf, _BTIME_AT)
    return int(sec) * 1_000_000_000 + int(nsec)


def other_birth(fd: int, born: int | None) -> bool:
    """Whether the open file ``fd`` was born at another time than ``born`` (None: not known)."""
    if born is None:
        return False
    now = birth(fd)
    return now is not None and now != born


def other_birth_at(path: str, born: int | None) -> bool:
    """``other_birth`` of the file at ``path``."""
    if born is None:
        return False
    now = birth_at(path)
    return now is not None and now != born


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
