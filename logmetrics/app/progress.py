"""A one-line progress report on a terminal, for a long ``--oneshot``, ``backfill`` or ``report``."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import TextIO

from logmetrics.sources.chunks import SourceStats


class Progress:
    """A one-line progress report on a terminal for a long ``--oneshot`` run."""

    def __init__(self, stream: TextIO, *, after: float = 2.0, every: float = 1.0) -> None:
        self.stream = stream
        #: bytes read and left by other processes (the workers of a sharded ``--oneshot``)
        self.others: Callable[[], tuple[int, int]] | None = None
        self.start = time.monotonic()
        self.next = self.start + after
        self.every = every
        self.shown = False

    def _line(self, stats: SourceStats) -> str:
        done = sum(stats.bytes_read.values())
        left = sum(stats.lag_bytes.values())
        if self.others is not None:
            more, still = self.others()
            done, left = done + more, left + still
        secs = max(time.monotonic() - self.start, 1e-9)
        share = f" of {(done + left) / 1e6:,.1f} MB ({100 * done / (done + left):.0f} %)" if left else ""
        return f"logmetrics: read {done / 1e6:,.1f} MB{share} in {secs:.1f} s, {done / secs / 1e6:,.1f} MB/s"

    def update(self, stats: SourceStats) -> None:
        """Show the figures, at most every ``every`` seconds once ``after`` seconds have passed."""
        now = time.monotonic()
        if now >= self.next:
            self.next = now + self.every
            self.stream.write("\r" + self._line(stats) + "\x1b[K")
            self.stream.flush()
            self.shown = True

    def done(self, stats: SourceStats) -> None:
        """The last figures and a newline, if anything was shown; nothing while other processes
        read (``others``): the line goes on with their figures, and ``end`` ends it."""
        if self.others is None:
            self.end(stats)

    def end(self, stats: SourceStats) -> None:
        """The last figures, the other processes' with them, and a newline, if anything was shown
        since the last ``end``."""
        if self.shown:
            self.stream.write("\r" + self._line(stats) + "\x1b[K\n")
            self.stream.flush()
            self.shown = False
