"""The vLLM parser's crash episodes and clean shutdowns.

One dead engine prints several error records (the engine core's traceback, the API server's, one
per request in flight, "died unexpectedly"). Errors of the ``FATAL_TYPES`` (oom, engine_dead,
cuda, startup) count once per crash episode, with the first record's type: an episode runs from
its first fatal record to the next start-up, ready or stats line. Other error types count per
record. The engine's death in a clean shutdown (``EngineDeadError`` from the output handler) is
the shutdown, no crash.
"""

from __future__ import annotations

from bisect import bisect_left
from collections import Counter

from logmetrics.events import Event

from . import vllm_patterns as P
from .vllm_kinds import Fatal
from .vllm_lines import Records


class Crashes:
    """Whether a crash episode or a clean shutdown is under way, across batches."""

    def __init__(self, records: Records) -> None:
        self.records = records  # the scan's record positions, which the fatal records join
        self.crash = False  # a crash episode is under way
        self.stopping = False  # a clean shutdown began and no start-up followed

    def dump(self) -> list[bool]:
        """Whether a crash episode or a clean shutdown is under way (JSON), for a restart of logmetrics."""
        return [self.crash, self.stopping]

    def load(self, data: object) -> None:
        """Take back what ``dump`` gave (anything else is ignored)."""
        if isinstance(data, list) and len(data) == 2:
            self.crash, self.stopping = data[0] is True, data[1] is True

    def shutdown(self, t: str, rare: Counter[str], fatal: list[Fatal], model: str,
                 events: list[Event]) -> tuple[list[Fatal], int]:
        """``fatal`` (sorted) without the records after the server began a clean shutdown in ``t``
        (or before it, and no start-up came since): the engine's end, recognised, not counted; and
        how many records those make count."""
        found = [at for mark in P.SHUTDOWN_MARKS if (at := t.find(mark)) >= 0] if P.SHUTDOWN_KEYS & rare.keys() else []
        if found:
            self.stopping = True
            stop_at = min(found)
        elif self.stopping and not any(key in P.STARTUP_KEYS for key in rare):
            stop_at = -1  # since before the text
        else:  # a start-up ends the shutdown
            self.stopping = False
            return fatal, 0
        after = [x for x in fatal if x.pos > stop_at]
        events.extend(Event("backend_errors_total", (model, x.type), 0, rule="shutdown") for x in after)
        return [x for x in fatal if x.pos <= stop_at], sum(self.records.place(x.pos, x.head) for x in after)

    def count(self, fatal: list[Fatal], served: list[int], model: str, events: list[Event]) -> int:
        """Fatal errors of a segment, one per crash episode (a stats or ready line at a position in
        ``served`` between them ends one); how many records they are (each matched, counted or not)."""
        s = matched = 0
        crash = self.crash
        counted: Counter[str] = Counter()
        folded: set[str] = set()
        for pos, kind, head in fatal:
            if served:
                i = bisect_left(served, pos, s)
                if i > s:  # serving since the previous one
                    s, crash = i, False
            if crash:
                folded.add(kind)
            else:
                crash = True
                counted[kind] += 1
            matched += self.records.place(pos, head)
        self.crash = crash and s == len(served)
        events.extend(Event("backend_errors_total", (model, kind), n, rule="error") for kind, n in counted.items())
        # the other records of a crash: recognised, worth nothing more (``logmetrics check`` shows them)
        events.extend(Event("backend_errors_total", (model, kind), 0, rule="crash") for kind in folded)
        return matched
