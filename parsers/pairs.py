"""Requests in flight, for backends that log no running count: from their start and finish lines.

``Pairs`` pairs a request's start with its finish (by a key: a task id, a slot, or the order of
the lines where the backend logs no id) to give its duration and the ``llm_requests_running``
gauge per model. A start whose finish never comes (a line lost, the backend killed) is dropped
after ``timeout`` seconds of record time (or of wall time, from ``Parser.tick``), so the gauge
never leaks; those drops are counted in ``logmetrics_requests_timed_out_total``.
"""

from __future__ import annotations

from collections import Counter, OrderedDict

from logmetrics.events import Event

TIMEOUT = 600.0
MAX_OPEN = 10000
#: Open requests kept in a parser's saved state (the newest): the state is written at every commit.
MAX_SAVED = 256
#: The longest line a parser's saved state keeps (a longer one is left out).
MAX_SAVED_LINE = 4096
TIMED_OUT = "logmetrics_requests_timed_out_total"


class Pairs:
    """Open requests by key: ``(model, start time)``, oldest first; bounded."""

    __slots__ = ("models", "open", "timed_out", "timeout")

    def __init__(self, timeout: float = TIMEOUT) -> None:
        self.open: OrderedDict[str, tuple[str, float]] = OrderedDict()
        self.timeout = timeout
        self.models: set[str] = set()  # models whose gauge has been set: set again when they go to 0
        self.timed_out = 0

    def start(self, key: str, model: str, t: float) -> None:
        """A request began at ``t``. A key already open starts again (its first start is dropped)."""
        self.open.pop(key, None)
        self.open[key] = (model, t)
        self.models.add(model)
        if len(self.open) > MAX_OPEN:
            self.open.popitem(last=False)
            self.timed_out += 1

    def finish(self, key: str | None = None) -> tuple[str, float] | None:
        """A request ended: its ``(model, start time)``, or ``None`` if its start was not seen.
        ``key=None``: the oldest open request (for backends that log no request id)."""
        if key is None:
            return self.open.popitem(last=False)[1] if self.open else None
        return self.open.pop(key, None)

    def expire(self, now: float) -> int:
        """Drop the requests started more than ``timeout`` before ``now``; how many."""
        n = 0
        limit = now - self.timeout
        while self.open:
            key, (_model, t) = next(iter(self.open.items()))
            if t >= limit:
                break
            del self.open[key]
            n += 1
        self.timed_out += n
        return n

    def clear(self) -> None:
        """The backend restarted or died: nothing runs any more (not counted as timed out)."""
        self.open.clear()

    def dump(self) -> list[object]:
        """What a restart of logmetrics must keep (JSON): the newest ``MAX_SAVED`` open requests as
        ``[key, model, start]`` and the models whose gauge was set, so that a request that began
        before the restart still ends with its duration."""
        newest = list(self.open.items())[-MAX_SAVED:]
        return [[[key, model, t] for key, (model, t) in newest], sorted(self.models)]

    def load(self, data: object) -> None:
        """Take back what ``dump`` gave (anything else is ignored)."""
        if not (isinstance(data, list) and len(data) == 2 and isinstance(data[0], list) and isinstance(data[1], list)):
            return
        for row in data[0][-MAX_SAVED:]:
            if isinstance(row, list) and len(row) == 3 and isinstance(row[0], str) and isinstance(row[1], str) \
                    and isinstance(row[2], (int, float)):
                self.open[row[0]] = (row[1], float(row[2]))
        self.models.update(m for m in data[1] if isinstance(m, str))

    def events(self) -> list[Event]:
        """``llm_requests_running`` per model seen, and the time-outs since the last call."""
        running = Counter(model for model, _ in self.open.values())
        out = [Event("llm_requests_running", (model,), running[model], rule="pairs") for model in sorted(self.models)]
        if self.timed_out:
            out.append(Event(TIMED_OUT, (), self.timed_out, rule="pairs"))
            self.timed_out = 0
        return out
