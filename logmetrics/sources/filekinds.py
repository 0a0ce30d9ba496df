"""Which files found under a watched directory or glob are logs, by their first bytes.

A directory of logs often holds files that are not logs: Prometheus text (a textfile collector's
``*.prom``, the golden files next to sample logs), compressed rotations under names no suffix
gives away, archives, executables, databases. Reading them as logs would route them to a parser
and count their lines as unmatched. ``not_a_log`` reads a file's head once per file (device and
inode) and says what it is, or ``None`` for a log. A file named explicitly is always read.
"""

from __future__ import annotations

import logging
import os

from logmetrics import lazyre

log = logging.getLogger(__name__)

HEAD_BYTES = 4096  # what is read of a file to tell what it is
#: Magic numbers of compressed, archive, executable, image and database files.
MAGIC: tuple[tuple[bytes, str], ...] = (
    (b"\x1f\x8b", "gzip"), (b"BZh", "bzip2"), (b"\xfd7zXZ\x00", "xz"), (b"\x28\xb5\x2f\xfd", "zstd"),
    (b"PK\x03\x04", "zip"), (b"7z\xbc\xaf\x27\x1c", "7-zip"), (b"\x04\x22\x4d\x18", "lz4"),
    (b"\x7fELF", "an executable"), (b"\x89PNG", "an image"), (b"\xff\xd8\xff", "an image"),
    (b"SQLite format 3\x00", "a database"), (b"%PDF-", "a PDF document"),
)
#: Prometheus' text format: comments, at least one naming a metric (``# HELP``/``# TYPE``), and
#: sample lines (``name{labels} value [timestamp]``), nothing else.
_PROM_COMMENT = lazyre.compile(rb"# (?:HELP|TYPE|UNIT) [a-zA-Z_:][\w:]* ")
_PROM_SAMPLE = lazyre.compile(rb"[a-zA-Z_:][\w:]*(?:\{.*\})? [-+]?(?:[\d.]+(?:e[-+]?\d+)?|NaN|[-+]?Inf)(?: \d+)?$")
#: Bytes that text hardly holds: NUL (past those a copytruncate leaves at a file's start) and the
#: other control characters but tab, newlines, form feed and escape.
_CONTROL = lazyre.compile(rb"[\x00-\x08\x0e-\x1a\x1c-\x1f]")
#: (path, inode) -> what it is ("" for a log), the size it was decided at if it may change (else
#: -1), and the listing it was last looked up in (``sweep`` forgets the files a listing no longer has)
_decided: dict[tuple[str, int], tuple[str, int, int]] = {}
_listing = [0]
PROMETHEUS = "Prometheus text"
_MAX_DECIDED = 1 << 20  # a bound of last resort: ``sweep`` keeps it to the files listed


def what_it_is(head: bytes) -> str | None:
    """What a file whose first bytes are ``head`` is, if not a log: ``"Prometheus text"``, a
    compression or archive format, ``"binary"``; ``None`` for text that may be a log."""
    for magic, name in MAGIC:
        if head.startswith(magic):
            return name
    body = head.lstrip(b"\x00")
    if len(_CONTROL.findall(body)) * 10 > 3 * len(body):  # a log may hold a few: never lose one
        return "binary"
    lines = [line.rstrip(b"\r") for line in body.split(b"\n")[:-1] if line.strip()]  # whole lines only
    if lines and any(_PROM_COMMENT.match(line) for line in lines) and all(
            line.startswith(b"#") or _PROM_SAMPLE.match(line) for line in lines):
        return PROMETHEUS
    return None


def not_a_log(path: str, inode: int | None = None) -> str | None:
    """What the file at ``path`` is if it is not a log (see ``what_it_is``), else ``None``. Decided
    once per path and inode (``inode``: known from a directory listing, which saves a ``stat``)
    from its first bytes; an empty file is not decided yet (it may become a log), nor is one
    whose head held less than ``HEAD_BYTES`` of Prometheus text (a log may follow a first write
    that looked like it: looked at again once it grew). Said once in the log at INFO."""
    now = _listing[0]
    if inode is not None:
        got = _decided.get((path, inode))
        if got is not None and got[1] < 0:
            if got[2] != now:
                _decided[(path, inode)] = (got[0], got[1], now)
            return got[0] or None
    try:
        st = os.stat(path)
    except OSError:
        return None  # gone, or not readable: the tailer reports it
    key = (path, st.st_ino)
    got = _decided.get(key)
    if got is not None and (got[1] < 0 or st.st_size <= got[1]):
        _decided[key] = (got[0], got[1], now)
        return got[0] or None
    if st.st_size == 0:
        return None
    try:
        with open(path, "rb") as f:
            head = f.read(HEAD_BYTES)
    except OSError:
        return None
    kind = what_it_is(head) or ""
    if len(_decided) >= _MAX_DECIDED:
        _decided.clear()
    # final unless a short head of Prometheus text: then the size it had, to look again if it grows
    _decided[key] = (kind, len(head) if kind == PROMETHEUS and len(head) < HEAD_BYTES else -1, now)
    if kind and got is None:
        log.info("%s: %s, not a log: skipped (name it on the command line to read it anyway)", path, kind)
    return kind or None


def listing() -> int:
    """Begin a whole listing of the inputs: what it looks up is kept; pass the number to ``sweep``."""
    _listing[0] += 1
    return _listing[0]


def sweep(mark: int) -> None:
    """After the whole listing ``mark``: forget the files it did not look up (gone, rotated away),
    so that the decisions kept stay as many as the files there are (pods come and go)."""
    for key in [k for k, v in _decided.items() if v[2] < mark]:
        del _decided[key]
