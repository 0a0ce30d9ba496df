"""The whisper parser's request accounting: outcomes by kind of server, and LeapfrogAI's requests.

``Outcomes`` counts finished requests (``llm_requests_total``); each kind of server can move its own
set of outcomes, per model, from its first request (they start at 0 together). ``LfaiRequests`` pairs
LeapfrogAI's ``Task t is starting`` and ``Transcription|Translation complete!`` lines in order
(the backend logs no request id) into the running gauge and the durations, taken from the lines'
own times; ``Error transcribing audio`` makes the next completion an ``error``.
"""

from __future__ import annotations

from logmetrics.events import Event

from . import whisper_patterns as P
from .pairs import MAX_SAVED, Pairs

REQUESTS = "llm_requests_total"
DURATION = "llm_request_duration_seconds"
#: The outcomes LeapfrogAI's requests end with.
LFAI_OUTCOMES = ("ok", "error")


class Outcomes:
    """``llm_requests_total`` by model and outcome, and the outcomes the log can move (each kind of
    server's, per model, from its first request: the parser's ``zero_series``)."""

    def __init__(self) -> None:
        self.shown: dict[tuple[str, str], None] = {}  # (model, outcome): a bounded set, in order

    def dump(self) -> list[list[str]]:
        """The outcomes shown, per model (JSON), for a restart of logmetrics."""
        return [list(key) for key in self.shown]

    def load(self, data: object) -> None:
        """Take back what ``dump`` gave (anything else is ignored)."""
        if isinstance(data, list):
            self.shown.update((tuple(key), None) for key in data[:256] if isinstance(key, list) and len(key) == 2
                              and all(isinstance(x, str) for x in key))

    def count(self, outcome: str, outcomes: tuple[str, ...], model: str, out: list[Event]) -> None:
        """One request of ``model`` ended with ``outcome`` (one of the server's ``outcomes``)."""
        self.can(outcomes, model)
        out.append(Event(REQUESTS, (model, outcome), 1.0))

    def can(self, outcomes: tuple[str, ...], model: str) -> None:
        """``outcomes`` of ``model`` can move from now on."""
        if (model, outcomes[0]) not in self.shown:
            if len(self.shown) >= 256:
                self.shown.clear()
            self.shown.update(((model, outcome), None) for outcome in outcomes)


class LfaiRequests:
    """LeapfrogAI's open requests, paired in order from their start and completion lines."""

    def __init__(self, outcomes: Outcomes) -> None:
        self.outcomes = outcomes
        self.pairs = Pairs()
        self.starts: dict[str, float] = {}  # a start line's own time, by pair key
        self.seq = 0
        self.failed = 0  # "Error transcribing audio" lines whose "complete" line is still to come

    def dump(self) -> list[object]:
        """The open requests with their start lines' times, the sequence and the failures whose
        completion is still to come (JSON), for a restart of logmetrics."""
        keys = list(self.pairs.open)[-MAX_SAVED:]  # (the requests ``Pairs.dump`` keeps)
        return [self.pairs.dump(), [self.starts.get(key) for key in keys], self.seq, self.failed]

    def load(self, data: object) -> None:
        """Take back what ``dump`` gave (anything else is ignored)."""
        if not (isinstance(data, list) and len(data) == 4 and isinstance(data[1], list)
                and type(data[2]) is int and type(data[3]) is int):
            return
        self.pairs.load(data[0])
        self.starts = {key: float(t) for key, t in zip(self.pairs.open, data[1], strict=False)
                       if isinstance(t, (int, float))}
        self.seq, self.failed = data[2], max(0, data[3])

    def start(self, model: str, t: float, now: float, out: list[Event]) -> None:
        """A request of ``model`` began at ``t`` (its line's time; ``now``: the record's)."""
        self.pairs.expire(now)
        self.prune()
        self.seq += 1
        key = str(self.seq)
        self.pairs.start(key, model, now)
        self.starts[key] = t
        self.outcomes.can(LFAI_OUTCOMES, model)
        out.extend(self.pairs.events())

    def complete(self, model: str, t: float, out: list[Event]) -> None:
        """A completion line at ``t``: the oldest open request ended, ``error`` if one failed before."""
        outcome = "error" if self.failed else "ok"
        self.failed = max(0, self.failed - 1)
        self.finish(outcome, model, t, out)

    def finish(self, outcome: str, model: str, t: float, out: list[Event]) -> None:
        """The oldest open request (else one of ``model``) ended at ``t`` with ``outcome``."""
        key = next(iter(self.pairs.open), None)
        if key is not None:
            done = self.pairs.finish(key)
            if done is not None:
                model = done[0]
            t0 = self.starts.pop(key, None)
            if t0 is not None and t >= t0:
                out.append(Event(DURATION, (model,), t - t0))
        self.outcomes.count(outcome, LFAI_OUTCOMES, model, out)
        out.extend(self.pairs.events())

    def expire(self, now: float) -> list[Event]:
        """The running gauge, if requests whose completion never came timed out by ``now``."""
        if self.pairs.expire(now):
            self.prune()
            return self.pairs.events()
        return []

    def clear(self, out: list[Event], always: bool = True) -> None:
        """Nothing runs any more (a start-up; unless ``always``, only if requests were open)."""
        if always:
            self.failed = 0
        elif not self.pairs.open:
            return
        self.pairs.clear()
        self.starts.clear()
        if self.pairs.models:
            out.extend(self.pairs.events())

    def prune(self) -> None:
        """Forget the start times of requests the pairs no longer hold (timed out)."""
        if len(self.starts) > len(self.pairs.open):
            for key in [k for k in self.starts if k not in self.pairs.open]:
                del self.starts[key]

    def run(self, text: str, a: int, b: int, model: str, now: float, out: list[Event]) -> int:
        """The start and completion lines in the run ``text[a:b]``, in order, as ``start`` and
        ``complete`` take them one by one; how many there were."""
        pairs, starts, shown, line_time = self.pairs, self.starts, self.outcomes.shown, P.line_time
        done: dict[tuple[str, str], int] = {}
        took: dict[str, list[float]] = {}  # durations by model: one event per series
        n = 0
        expired = False
        for m in P.PAIR_LINES.finditer(text, a, b):
            n += 1
            t = line_time(text, text.rfind("\n", 0, m.start()) + 1)
            if m.group(1) is None:  # a start
                if not expired:  # the batch's time is the same for each: the first start expires them
                    expired = True
                    pairs.expire(now)
                    self.prune()
                self.seq += 1
                key = str(self.seq)
                pairs.start(key, model, now)
                starts[key] = t
                ended = model
            else:
                outcome = "error" if self.failed else "ok"
                if self.failed:
                    self.failed -= 1
                ended = model
                oldest = next(iter(pairs.open), None)
                if oldest is not None:
                    finished = pairs.finish(oldest)
                    if finished is not None:
                        ended = finished[0]
                    t0 = starts.pop(oldest, None)
                    if t0 is not None and t >= t0:
                        took.setdefault(ended, []).append(t - t0)
                labels = (ended, outcome)
                done[labels] = done.get(labels, 0) + 1
            if (ended, "ok") not in shown:  # each kind of server can move "ok" and "error" together
                self.outcomes.can(LFAI_OUTCOMES, ended)
        out += [Event(REQUESTS, labels, float(count)) for labels, count in done.items()]
        out += [Event(DURATION, (name,), tuple(values)) for name, values in took.items()]
        if n:
            out += pairs.events()
        return n
