"""The stdin source: a pipe read on a daemon thread, handed out as chunks of whole lines."""

from __future__ import annotations

import errno
import functools
import logging
import os
import queue
import sys
import threading
import time
from collections.abc import Callable
from typing import BinaryIO

from logmetrics.sources.chunks import Chunk, SourceStats
from logmetrics.sources.tailfile import LineCutter
from logmetrics.sources.waker import Waker

log = logging.getLogger(__name__)


class StdinSource:
    """Reads a pipe (stdin) on a daemon thread; ``poll()`` returns the whole lines read so far."""

    def __init__(
        self,
        stats: SourceStats,
        *,
        max_line_bytes: int = 1 << 20,
        stream: str = "-",
        fileobj: BinaryIO | None = None,
        read_size: int = 128 * 1024,
        strict: bool = False,
    ) -> None:
        self.stats = stats
        self._strict = strict  # a read error fails the run (``failure``) instead of a warning
        self.failure: str | None = None  # the read error, once one came
        self.stream = stream
        # stdin itself is read with os.read on its descriptor, not through sys.stdin.buffer: a thread
        # blocked in a buffered read holds the buffer's lock, on which the interpreter's exit aborts
        # ("could not acquire lock ... at interpreter shutdown") while the pipe is still open.
        self._file: BinaryIO | None = fileobj
        self._fd = -1 if fileobj is not None or sys.stdin is None else sys.stdin.fileno()  # None: closed
        self._read_size = read_size
        self._cutter = LineCutter(max_line_bytes)
        self._queue: queue.Queue[bytes | OSError | None] = queue.Queue(maxsize=64)  # bounded: back-pressure
        self._stop = threading.Event()
        self._waker: Waker | None = None
        self._at_eof = False
        for counts in (stats.bytes_read, stats.lines_truncated):
            counts.setdefault(stream, 0)
        self._thread = threading.Thread(target=self._run, name=f"logmetrics-stdin-{stream}", daemon=True)
        self._thread.start()

    def watch(self, waker: Waker) -> None:
        """Wake ``waker`` whenever data (or end of input) arrives."""
        self._waker = waker
        if not self._queue.empty():
            waker.wake()

    def _put(self, item: bytes | OSError | None) -> None:
        while not self._stop.is_set():
            try:
                self._queue.put(item, timeout=0.5)
            except queue.Full:
                continue
            waker = self._waker
            if waker is not None:
                waker.wake()
            return

    def _run(self) -> None:
        if self._file is None and self._fd < 0:  # started with its stdin closed (``<&-``)
            self._put(OSError(errno.EBADF, "stdin is closed"))
            self._put(None)
            return
        read: Callable[[int], bytes] = (functools.partial(os.read, self._fd) if self._file is None
                                        else getattr(self._file, "read1", None) or self._file.read)
        try:
            while not self._stop.is_set():
                data = read(self._read_size)
                if not data:
                    break
                self._put(data)
        except (OSError, ValueError) as err:  # ValueError: the file was closed under us
            self._put(err if isinstance(err, OSError) else OSError(str(err)))
        self._put(None)  # end of input

    def poll(self) -> list[Chunk]:
        """The whole lines read since the last poll; at end of input, the partial last line too."""
        parts: list[bytes] = []
        stats, stream = self.stats, self.stream
        while not self._at_eof:
            try:
                item = self._queue.get_nowait()
            except queue.Empty:
                break
            if item is None:
                self._at_eof = True
            elif isinstance(item, OSError):
                if self.failure is None and not self._strict:
                    log.warning("cannot read stdin: %s", item.strerror or item)
                self.failure = f"cannot read stdin: {item.strerror or item}"
                stats.read_errors[stream] = 1
            else:
                stats.bytes_read[stream] += len(item)
                out = self._cutter.feed(item)
                if out:
                    parts.append(out)
        if self._at_eof:
            parts.append(self._cutter.flush())  # the input ended: its partial last line is complete
        if self._cutter.truncated:
            stats.lines_truncated[stream] += self._cutter.truncated
            self._cutter.truncated = 0
        text = b"".join(parts)
        return [Chunk(stream, text, time.time())] if text else []

    @property
    def eof(self) -> bool:
        """True once the input ended and every byte of it was returned."""
        return self._at_eof and not self._cutter.pending

    def flush(self) -> list[Chunk]:
        """End of input (as the caller decides): the held partial line, with a newline appended."""
        line = self._cutter.flush()
        return [Chunk(self.stream, line, time.time())] if line else []

    def close(self) -> None:
        """Stop reading (the daemon thread ends with its current read)."""
        self._stop.set()
