"""Reading the followed files: whole lines in chunks, bounded per file and pass (``Reader``).

Files are read stream by stream, a stream's older (draining) file before its newer one: while the
older has more to read, the newer waits. A file reads at most ``read_size`` bytes a call and
``budget`` bytes a pass, so that one busy file does not starve the others; a pass reads at most
about ``pass_budget`` bytes over all files, the next one beginning with the stream it stopped at,
so that a first pass over thousands of big files (``--from-beginning``, or a restart after a long
stop) does not keep ``/metrics`` waiting while gigabytes are read and parsed. A parked file (closed
for want of descriptors) waits for a descriptor. A drained file idle for ``rotate_wait`` seconds is
retired: closed, and remembered (``CopyTracker.known``) so that its new name is not read as a new
file.
"""

from __future__ import annotations

import os
import time
from bisect import bisect_left

from logmetrics.sources.chunks import Chunk
from logmetrics.sources.copies import Known
from logmetrics.sources.followed import Followed
from logmetrics.sources.tailfile import TailFile
from logmetrics.sources.waker import Waker

#: Bytes read in one pass over all the files (then the files left wait for the next pass, at once).
PASS_BUDGET = 16 << 20


def _written(f: TailFile) -> float | None:
    """When open ``f`` was last written (its modification time), None if that cannot be told."""
    try:
        return os.fstat(f.fd).st_mtime
    except OSError:
        return None


class Reader:
    """Reads the followed files of a tailer and retires the drained ones."""

    def __init__(self, followed: Followed, *, read_size: int, budget: int, rotate_wait: float,
                 pass_budget: int = PASS_BUDGET) -> None:
        self.followed = followed
        self.read_size = read_size
        self.budget = budget
        self.pass_budget = pass_budget
        self._resume = ""  # the stream the last pass stopped at, its budget spent: the next one begins there
        self.rotate_wait = rotate_wait
        self.waker: Waker | None = None  # woken when a file has more to read than one pass takes
        self.busy: set[str] = set()  # streams read at every pass: a file draining, parked, behind or held

    def read(self, streams: set[str] | None) -> list[Chunk]:
        """Read the files of ``streams`` (None: of all)."""
        followed = self.followed
        chunks: list[Chunk] = []
        stats = followed.stats
        if streams is None:
            files = list(followed.files.values())
            lag: dict[str, int] = {}
        else:
            files = [f for f in followed.files.values() if f.stream in streams]
            lag = {s: n for s, n in stats.lag_bytes.items() if s not in streams}
        held: set[str] = set()  # streams whose older file has more to read: their newer ones wait
        busy: set[str] = set()
        now = time.monotonic()
        if len(files) > 1:
            files.sort(key=lambda f: (f.stream, not f.draining, f.seq))
            if self._resume:  # (at a stream's first file: a stream's files stay in their order)
                at = bisect_left(files, self._resume, key=lambda f: f.stream)
                files = files[at:] + files[:at]
        total = 0
        resume = ""
        for f in files:
            stream = f.stream
            if f.draining or f.fd < 0:
                busy.add(stream)
            if f.fd < 0:  # parked: reopened by _scan once it changes
                if f.offset < f.size:
                    held.add(stream)
                    followed.waiting.add(f.path)
                elif f.draining and now - f.idle_since >= self.rotate_wait:
                    self.retire(f, chunks)
                    continue
            elif total >= self.pass_budget and stream not in held:  # the pass read its share
                held.add(stream)
                resume = resume or stream
            elif stream not in held:
                try:
                    data, nbytes, at_end = f.read(self.read_size, self.budget)
                except OSError as err:
                    followed.report(f.path, err)
                    data, nbytes, at_end = b"", 0, True
                if nbytes:
                    total += nbytes
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
                    if self.waker is not None and nbytes:
                        self.waker.wake()  # more to read now
                elif f.draining and not nbytes and now - f.idle_since >= self.rotate_wait:
                    self.retire(f, chunks)
                    continue
            behind = f.size - f.offset
            if behind > 0:
                busy.add(stream)
            lag[stream] = lag.get(stream, 0) + max(0, behind)
        self.busy = busy | held
        self._resume = resume
        if resume and self.waker is not None:
            self.waker.wake()  # the files left wait for the next pass, at once
        stats.lag_bytes = lag
        stats.open_files = len(followed.files)
        stats.files_waiting = len(followed.waiting)
        return chunks

    def retire(self, f: TailFile, chunks: list[Chunk]) -> None:
        """Close a drained file; remember it so that its new name is not read as a new file."""
        followed = self.followed
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
        followed.fds.release(f)
        del followed.files[f.ident]
        followed.copies.known[f.ident] = Known(f.stream, f.head, f.offset, fp=fp, mtime_ns=mtime_ns,
                                               seen=time.monotonic(), birth=f.birth)
        followed.vanish_if_last(f.stream)
