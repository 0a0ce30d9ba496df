"""Tailfile: the mechanics under the tailer (``logmetrics.sources.tailer`` decides what to follow).

``LineCutter`` holds a stream's partial last line and applies the line-length cap; ``TailFile`` is
an open file followed by identity (device, inode) with its read offset (``discovery`` finds the
files under the given paths, ``logmetrics.sources.notify`` says which changed). Reading works per chunk:
nothing runs per line in Python unless a line is longer than the cap.
"""

from __future__ import annotations

import os

from logmetrics.sources.identity import fingerprint

HEAD_BYTES = 1024  # the head of a file: its first bytes, up to this many
LAST_BYTES = 64  # the last bytes read of a file, kept to tell it rewritten to as many bytes
SKIP_BUDGET_FACTOR = 64  # how far past its budget a read goes on to skip the rest of an over-long line

Ident = tuple[int, int]


class LineCutter:
    """Cut a byte stream into whole lines, each ending in ``b"\\n"``, with a line-length cap.

    Bytes after the last newline are held until their newline arrives. A line longer than
    ``max_line`` bytes is cut: its first ``max_line`` bytes are emitted with a newline, the rest of
    it is skipped up to its newline. So at most ``max_line`` bytes are ever held. ``truncated``
    counts the lines cut so far.
    """

    __slots__ = ("max_line", "pending", "skipping", "truncated")

    def __init__(self, max_line: int) -> None:
        if max_line < 1:
            raise ValueError("max_line must be at least 1")
        self.max_line = max_line
        self.pending = bytearray()
        self.skipping = False
        self.truncated = 0

    def feed(self, data: bytes) -> bytes:
        """Take the next bytes of the stream; return the whole lines now complete (maybe ``b""``)."""
        cap = self.max_line
        if self.skipping:
            nl = data.find(b"\n")
            if nl < 0:
                return b""
            self.skipping = False
            data = data[nl + 1 :]
        last = data.rfind(b"\n")
        if last < 0:
            room = cap - len(self.pending)
            if len(data) <= room:
                self.pending += data
                return b""
            line = bytes(self.pending) + data[:room] + b"\n"
            self.pending.clear()
            self.skipping = True
            self.truncated += 1
            return line
        if self.pending:
            whole = bytes(self.pending) + data[: last + 1]
            self.pending.clear()
        else:
            whole = data[: last + 1]
        if len(whole) > cap + 1:  # only then can one of its lines be longer than the cap
            whole = self._cap(whole)
        tail = data[last + 1 :]
        if len(tail) > cap:
            whole += tail[:cap] + b"\n"
            self.skipping = True
            self.truncated += 1
        elif tail:
            self.pending += tail
        return whole

    def _cap(self, whole: bytes) -> bytes:
        """Cut the lines of ``whole`` (whole lines) that are longer than the cap."""
        cap = self.max_line
        parts: list[bytes] = []
        start = pos = 0  # start of the bytes not yet copied out; start of the current line
        size = len(whole)
        while size - pos > cap + 1:
            # The line at pos fits iff a newline lies within its first cap + 1 bytes; the last such
            # newline ends a run of lines that all fit, so jump past it (about cap bytes at a time).
            nl = whole.rfind(b"\n", pos, pos + cap + 1)
            if nl >= 0:
                pos = nl + 1
                continue
            parts.append(whole[start : pos + cap])
            parts.append(b"\n")
            self.truncated += 1
            start = pos = whole.find(b"\n", pos + cap) + 1
        if not parts:
            return whole
        parts.append(whole[start:])
        return b"".join(parts)

    def flush(self) -> bytes:
        """The held partial line with a newline appended (``b""`` if none); forget any skipping."""
        line = bytes(self.pending) + b"\n" if self.pending else b""
        self.pending.clear()
        self.skipping = False
        return line

    def reset(self) -> bytes:
        """Drop the held partial line (the file it came from was truncated); return it."""
        held = bytes(self.pending)
        self.pending.clear()
        self.skipping = False
        return held


def read_head(fd: int) -> bytes:
    """The head of an open file: its first bytes."""
    return os.pread(fd, HEAD_BYTES, 0)


class TailFile:
    """One open file, followed by identity, and the lines cut from it."""

    __slots__ = ("birth", "cutter", "draining", "fd", "fp", "fp_at", "head", "ident", "idle_since", "last",
                 "missed", "moved", "mtime_ns", "offset", "own", "path", "real", "replaced", "seq", "size", "stream")

    def __init__(
        self, stream: str, path: str, fd: int, ident: Ident, head: bytes, cutter: LineCutter, seq: int
    ) -> None:
        self.stream = stream  # the stream its lines belong to (stable across rotation)
        self.path = path  # where it was found
        self.real = path  # its real path then (symlinks resolved): where to find it when no listed path leads to it
        self.fd = fd
        self.ident = ident
        self.head = head
        self.cutter = cutter
        self.seq = seq  # opening order: older files of a stream are read first
        self.offset = 0
        self.size = 0  # from the last fstat
        self.mtime_ns = -1  # from the last fstat (-1: not looked at yet)
        self.last = b""  # the last bytes read, just before the offset (empty: not known)
        self.draining = False  # replaced or gone: read to its end, closed once idle
        self.own = False  # it was its stream's file at the stream's path (not a copy, nor found rotated)
        self.moved = False  # found at another path than its stream's since (renamed: a rotated file)
        self.idle_since = 0.0
        self.missed = False  # parked, and missing from the last listing (a rename may hide it from one)
        self.replaced = False  # a read found its content replaced: the next look reports a cut
        self.fp_at = -1  # the offset ``fp`` was taken at
        self.fp = ""
        self.birth: int | None = None  # when the file was created (``logmetrics.sources.identity.birth``), if known

    def handed_out(self) -> int:
        """The offset up to which lines were handed out: the start of a held partial line."""
        return self.offset if self.cutter.skipping else self.offset - len(self.cutter.pending)

    def fingerprint(self, offset: int) -> str | None:
        """The fingerprint at ``offset`` (``logmetrics.sources.identity``); None if it cannot be taken now."""
        if offset != self.fp_at:
            if self.fd < 0:
                return None
            try:
                self.fp = fingerprint(self.fd, offset)
            except OSError:
                return None
            self.fp_at = offset
        return self.fp

    def park(self) -> None:
        """Close the descriptor of an idle file to make room; it is reopened by path when it grows.

        Its fingerprint and modification time are taken first: a parked file's position is saved
        with the one, and the other says whether it was written to while it was closed.
        """
        self.fingerprint(self.handed_out())
        if self.mtime_ns < 0:
            try:
                self.mtime_ns = os.fstat(self.fd).st_mtime_ns
            except OSError:
                pass
        self.close()

    def seek(self, offset: int) -> None:
        """Continue reading at ``offset``."""
        os.lseek(self.fd, offset, os.SEEK_SET)
        self.offset = offset
        self.fp_at = -1  # the bytes before it may be other ones now (a cut)
        self.last = b""

    def was_cut(self) -> bool:
        """Whether the open file's content was cut (or replaced) since it was read: shorter than
        what was read, or not starting with its head any more (no fstat of its own state)."""
        if self.fd < 0:
            return False
        try:
            return os.fstat(self.fd).st_size < self.offset or (
                bool(self.head) and os.pread(self.fd, len(self.head), 0) != self.head)
        except OSError:
            return False

    def truncated(self) -> bool:
        """fstat the file: whether its content was cut or replaced since the last look (copytruncate)."""
        old, old_mtime = self.size, self.mtime_ns
        st = os.fstat(self.fd)
        self.size = size = st.st_size
        self.mtime_ns = st.st_mtime_ns
        if size < self.offset or self.replaced:
            self.replaced = False
            return True
        if not self.head or (size == old and st.st_mtime_ns == old_mtime and not self.draining):
            return False  # untouched since the last look (a drained copy may be written over with as
            # many bytes, cp x.log x.log.1 again: those few are always compared)
        if os.pread(self.fd, len(self.head), 0) != self.head:
            return True
        # Written to without growing: touched, or rewritten at once to as many bytes. Its head is the
        # same (the whole of a small file): the last bytes read tell.
        last = self.last
        return size == old and bool(last) and os.pread(self.fd, len(last), self.offset - len(last)) != last

    def read(self, read_size: int, budget: int) -> tuple[bytes, int, bool]:
        """Read on from the offset, at most about ``budget`` bytes: (whole lines, bytes read, at end)."""
        parts: list[bytes] = []
        total = 0
        at_end = False
        start, head = self.offset, self.head
        cutter = self.cutter
        before = (bytes(cutter.pending), cutter.skipping, cutter.truncated)
        # Skipping the rest of an over-long line goes on past the budget (it is cheap), so that a poll
        # that reads only such bytes is rare: it would return nothing although more is waiting.
        size = read_size
        while total < budget or (self.cutter.skipping and total < SKIP_BUDGET_FACTOR * budget):
            data = os.read(self.fd, size)
            if not data:
                at_end = True
                break
            if self.offset == len(self.head) < HEAD_BYTES:  # the fingerprint grows with what was read,
                self.head += data[: HEAD_BYTES - len(self.head)]  # never from a second look at the file
            total += len(data)
            self.offset += len(data)
            self.last = data[-LAST_BYTES:] if len(data) >= LAST_BYTES else (self.last + data)[-LAST_BYTES:]
            out = self.cutter.feed(data)
            if out:
                parts.append(out)
            if len(data) < size:
                at_end = True
                break
            # A backlog: read the rest of the budget at once instead of joining many small reads.
            size = max(read_size, budget - total)
        if total and head and os.pread(self.fd, len(head), 0) != head:
            # Cut and written again between the look for a cut and this read (copytruncate, then the
            # writer at once): what was read may be the new content from the old offset. Forget it;
            # the next look reports the cut, and the new content is read from its start.
            self.seek(start)
            self.head = head
            cutter.pending[:], cutter.skipping, cutter.truncated = before
            self.replaced = True
            return b"", 0, True
        return b"".join(parts), total, at_end

    def close(self) -> None:
        """Release the file descriptor (if open)."""
        if self.fd < 0:
            return
        try:
            os.close(self.fd)
        except OSError:
            pass
        self.fd = -1
