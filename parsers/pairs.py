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

    def events(self) -> list[Event]:
        """``llm_requests_running`` per model seen, and the time-outs since the last call."""
        running = Counter(model for model, _ in self.open.values())
        out = [Event("llm_requests_running", (model,), running[model], rule="pairs") for model in sorted(self.models)]
        if self.timed_out:
            out.append(Event(TIMED_OUT, (), self.timed_out, rule="pairs"))
            self.timed_out = 0
        return out
