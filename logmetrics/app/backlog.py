"""What a serving ``watch`` has read and not parsed yet: its chunks, kept per stream and parsed in
one batch per stream when a scrape comes, when the oldest is ``DEFER_SECONDS`` old, when they hold
``DEFER_BYTES`` (or a stream ``STREAM_BYTES``, as a file read behind its writer does), or when a
pass reads nothing more (the files went quiet). As a custom collector of
``prometheus_client`` reads its state at scrape time, a scrape first reads what was written (the
``read`` it is given: a pass over the files) and parses it, so it shows everything written before it.

Why: a parser pays a cost per call and the processor's caches are cold after each pause, so many
small batches cost more than one large one. Over 100 busy files a pass every 0.25 s hands each
parser about 50 lines; once a second, about 200, for about a quarter less CPU in all.

The lock is the engine's: whoever feeds it holds the lock, the poll loop or a scrape's thread.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable

from logmetrics.sources.chunks import Chunk

DEFER_SECONDS = 1.0  # the oldest chunk kept is parsed this long after its read at the latest
DEFER_BYTES = 16 << 20  # ... or at once when the backlog holds this much
STREAM_BYTES = 4 << 20  # ... or one stream this much (a backlog being read)
SCRAPE_WAIT = 1.0  # a scrape waits this long at most for the poll loop to let go of the engine
SCRAPE_BYTES = DEFER_BYTES  # a scrape parses at most about this much (more, read by its own pass, is the poll loop's)


class Backlog:
    """Chunks kept for ``feed``, per stream in the order of their reads."""

    __slots__ = ("_chunks", "_clock", "_feed", "_full", "_read", "_scraped", "_settle", "_since", "_size", "_sizes",
                 "_wake", "lock", "reading", "reads")

    def __init__(self, feed: Callable[[Chunk], None], wake: Callable[[], None] | None = None,
                 clock: Callable[[], float] = time.monotonic, read: Callable[[], bool] | None = None,
                 settle: Callable[[], None] | None = None) -> None:
        self.lock = threading.RLock()
        #: chunks kept so far: a scrape that finds it moved renders afresh (its store may move)
        self.reads = 0
        self._feed = feed
        self._wake = wake  # the poll loop's: a scrape parsed the backlog it did not read to the end
        self._read = read  # a pass over the sources that puts what it reads here (lock held): whether it ran
        # parses what the feeds left for later (a batch kept for its prescan): before a scrape shows the store
        self._settle = settle
        #: a scrape reads the sources first (set by the poll loop, where ``read`` is given: not before
        #: its first pass, nor while the files are read behind their writers): what it shows may
        #: have moved since the last scrape
        self.reading = False
        self._scraped = False
        self._clock = clock
        self._chunks: dict[str, list[Chunk]] = {}
        self._sizes: dict[str, int] = {}  # bytes kept per stream
        self._size = 0
        self._full = False  # a stream holds STREAM_BYTES
        self._since = 0.0  # when the oldest chunk kept was put (monotonic)

    def __bool__(self) -> bool:
        return bool(self._chunks)

    def put(self, chunks: list[Chunk]) -> None:
        """Keep ``chunks`` (lock held)."""
        if not chunks:
            return
        if not self._chunks:
            self._since = self._clock()
        for chunk in chunks:
            self._chunks.setdefault(chunk.stream, []).append(chunk)
            size = self._sizes[chunk.stream] = self._sizes.get(chunk.stream, 0) + len(chunk.data)
            self._full = self._full or size >= STREAM_BYTES
            self._size += len(chunk.data)
        self.reads += len(chunks)

    def due(self) -> float | None:
        """When the chunks kept must be parsed (monotonic; 0.0: now), or None if none are."""
        if not self._chunks:
            return None
        return 0.0 if self._full or self._size >= DEFER_BYTES else self._since + DEFER_SECONDS

    def flush(self) -> None:
        """Feed every chunk kept, those of a stream joined into one (lock held). A joined chunk
        has the time of its last read and the file's last write as that read saw it."""
        kept, self._chunks, self._sizes, self._size, self._full = self._chunks, {}, {}, 0, False
        for chunks in kept.values():
            last = chunks[-1]
            self._feed(last if len(chunks) == 1 else
                       Chunk(last.stream, b"".join([c.data for c in chunks]), last.time, last.written))

    def flush_for_scrape(self) -> None:
        """A scrape's turn: read what was written (``read``) and parse it with what is kept, unless
        the poll loop holds the engine longer than ``SCRAPE_WAIT`` or the read found more than
        ``SCRAPE_BYTES`` (a large backlog being read): then the scrape shows what is parsed. Only
        where the poll loop left the backlog ``reading``: before its first pass, or while the files
        are read behind their writers, the scrape shows what is parsed at once (then the passes
        follow one another, each parsed when due: a scrape that waited for the engine between
        them would wait its whole ``SCRAPE_WAIT``)."""
        if not self.reading or not self.lock.acquire(timeout=SCRAPE_WAIT):
            return
        wake = False
        try:
            read = self.reading and self._read is not None and self._read()
            if read and self._size > SCRAPE_BYTES:
                # its own pass found a backlog: the poll loop parses it at once, the scrape shows what is parsed
                self._scraped = wake = True
            elif self._chunks:
                self.flush()
                # Read by a pass of the poll loop, not this one: the poll loop reads on at once.
                self._scraped = wake = not read
            if self._settle is not None:
                self._settle()
        finally:
            self.lock.release()
        if wake and self._wake is not None:
            self._wake()

    def scraped(self) -> bool:
        """Whether, since the last call, a scrape parsed a backlog it did not read itself, or left
        one its read found to the poll loop: the poll loop reads (and parses) at once (the files
        may be read behind their writers; and the records the streams hold back are complete if
        they are quiet, which only a read can tell)."""
        scraped, self._scraped = self._scraped, False
        return scraped
