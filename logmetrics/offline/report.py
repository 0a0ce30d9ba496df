"""``logmetrics report``: what a log says, for the person reading it, by the log's own time.

The files are read whole through the same engine as ``backfill`` (envelopes, records, parsers,
catalog, labels), in groups of five seconds of log time merged across files
(:mod:`logmetrics.offline.reportread`). The store keeps each event it admits together with the
log time of the group that gave it, and :class:`Figures` sums them per backend and model: requests
by outcome, tokens (audio seconds, embeddings), latency percentiles from the observed values
themselves (nearest rank, not from histogram buckets), errors by type with their first and last
time, start-ups, the busiest minute, and time series for the charts (:mod:`logmetrics.offline.reportview`
renders them). Lines are taken in file order, as backfill takes them: one stamped earlier than a
line before it counts at that line's time.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from datetime import tzinfo
from typing import Any

from logmetrics.app.config import Input
from logmetrics.engine.settings import StaticLabel
from logmetrics.events import UNKNOWN_MODEL, Event, values_of
from logmetrics.store.store import Store

STEP = 5.0  # seconds of log time per group read: how precisely an event's time is known (a finer step
# costs more than the parsing: 2.4 times the CPU at 1 s)
LATENCIES = ("llm_request_duration_seconds", "llm_time_to_first_token_seconds", "llm_time_per_output_token_seconds")
PERCENTILES = (0.5, 0.95, 0.99)
#: Chart buckets (seconds): the smallest that keeps a chart to at most MAX_POINTS points.
BUCKETS = (5, 10, 15, 30, 60, 300, 600, 900, 1800, 3600, 4 * 3600, 12 * 3600, 86400, 7 * 86400, 30 * 86400,
           365 * 86400, 3650 * 86400)
MAX_POINTS = 240


@dataclass(frozen=True)
class Options:
    """What ``logmetrics report`` was asked to read."""

    paths: tuple[str, ...]
    parser: str | None = None
    source: str | None = None
    envelope: str = "auto"
    labels: tuple[StaticLabel, ...] = ()
    inputs: tuple[Input, ...] = ()
    tz: tzinfo | None = None
    max_line_bytes: int = 1 << 23
    include: tuple[str, ...] = ()  # globs of the files found under directories to read (all, if none)
    exclude: tuple[str, ...] = ()  # globs of those to leave out
    workers: int = 0  # processes the files may be read in (0: one per core, where it pays)


@dataclass
class Seen:
    """An error type: how often, and when first and last."""

    count: float = 0.0
    first: float = math.inf
    last: float = -math.inf


@dataclass
class Figures:
    """What one stream's events add up to: a backend's log (backend and source), whatever model it
    served; the models it named are a property of it (one server is one entry, its HTTP requests
    and its tokens together, though only the latter carry a model)."""

    backend: str
    source: str
    models: dict[str, None] = field(default_factory=dict)  # the models named, in order
    first: float = math.inf  # log time of its first and last event
    last: float = -math.inf
    outcomes: dict[str, float] = field(default_factory=dict)  # llm_requests_total by outcome
    http: dict[str, float] = field(default_factory=dict)  # http_requests_total by status class (2xx, ...)
    client_errors: dict[str, float] = field(default_factory=dict)  # llm_client_errors_total by type
    tokens: dict[str, float] = field(default_factory=dict)  # prompt, generation, cached prompt
    latencies: dict[str, list[float]] = field(default_factory=dict)  # observed values by family
    errors: dict[str, Seen] = field(default_factory=dict)  # by error type
    restarts: list[float] = field(default_factory=list)  # log times of start-ups (backend_restarts_total)
    timeline: list[tuple[float, str, float]] = field(default_factory=list)  # (time, what, value) for charts

    @property
    def model(self) -> str:
        """The models the stream named (``unknown`` only if it named no other), joined; "" for none."""
        named = [m for m in self.models if m and m != UNKNOWN_MODEL]
        return ", ".join(named) or (UNKNOWN_MODEL if UNKNOWN_MODEL in self.models else "")

    @property
    def requests(self) -> float:
        """Requests finished: inference requests where the backend logs them, else HTTP requests."""
        return sum(self.outcomes.values()) or sum(self.http.values())


TOKENS = {"llm_prompt_tokens_total": "prompt", "llm_generation_tokens_total": "generation",
          "llm_cached_prompt_tokens_total": "cached_prompt", "llm_audio_seconds_total": "audio_seconds",
          "llm_embeddings_total": "embeddings"}
#: The throughput a backend logs itself (vLLM's stats lines): charted as logged, where there is one.
RATES = {"llm_prompt_throughput_tokens_per_second": "prompt_rate",
         "llm_generation_throughput_tokens_per_second": "generation_rate"}


@dataclass
class RecordingStore(Store):
    """A store that also keeps each event it admits, with the log time set in ``now``, in ``figures``."""

    now: float = 0.0
    figures: dict[tuple[str, str], Figures] = field(default_factory=dict)

    def apply(self, events: Iterable[Event], backend: str, source: str) -> list[tuple[object, str]]:
        batch = list(events)
        refused = super().apply(batch, backend, source)
        gone = {id(ev) for ev, _ in refused}
        for ev in batch:
            if id(ev) not in gone:
                self._record(ev, ev.backend or backend, source)
        return refused

    def _record(self, ev: Event, backend: str, source: str) -> None:
        family = self.families.get(ev.metric)
        values = values_of(ev)
        if family is None or not values or (family.kind == "counter" and not any(values)):
            return  # (a parser makes its counters known with zeros at start-up: nothing happened)
        labels = dict(zip(family.labels, ev.labels, strict=False))
        key = (backend, source)
        fig = self.figures.get(key)
        if fig is None:
            fig = self.figures[key] = Figures(*key)
        model = labels.get("model")
        if model and model not in fig.models:
            fig.models[model] = None
        t = self.now
        name = ev.metric
        if name in LATENCIES:
            fig.latencies.setdefault(name, []).extend(values)
            if name == LATENCIES[0]:  # (the charts draw the request duration's percentiles only)
                fig.timeline.extend((t, name, v) for v in values)
        elif name == "llm_requests_total":
            outcome = labels.get("outcome", "")
            fig.outcomes[outcome] = fig.outcomes.get(outcome, 0.0) + values[0]
            fig.timeline.append((t, "requests", values[0]))
        elif name == "http_requests_total":
            code = labels.get("code", "")
            kind = f"{code[0]}xx" if code[:1].isdigit() else code or "unknown"
            fig.http[kind] = fig.http.get(kind, 0.0) + values[0]
            fig.timeline.append((t, "http", values[0]))
        elif name in TOKENS:
            what = TOKENS[name]
            fig.tokens[what] = fig.tokens.get(what, 0.0) + values[0]
            fig.timeline.append((t, what, values[0]))
        elif name == "llm_client_errors_total":  # (the client's fault: no error of the backend's)
            kind = labels.get("error_type", "unknown")
            fig.client_errors[kind] = fig.client_errors.get(kind, 0.0) + values[0]
        elif name == "backend_errors_total":
            seen = fig.errors.setdefault(labels.get("error_type", "unknown"), Seen())
            seen.count += values[0]
            seen.first, seen.last = min(seen.first, t), max(seen.last, t)
            fig.timeline.append((t, "errors", values[0]))
        elif name == "backend_restarts_total":
            fig.restarts.append(t)
        elif name in RATES:
            fig.timeline.append((t, RATES[name], values[0]))
        else:
            return  # gauges and the rest: not in the report
        fig.first, fig.last = min(fig.first, t), max(fig.last, t)


@dataclass
class Collected:
    """What a report read: the files, their lines, their log time, and the figures by backend and model."""

    files: list[str]
    lines: int
    first: float | None
    last: float | None
    figures: list[Figures]
    untimed: list[str] = field(default_factory=list)  # files that state no time: their modification time
    elapsed: list[str] = field(default_factory=list)  # files that state only time since start: anchored at their end


def percentile(values: Sequence[float], p: float) -> float:
    """The nearest-rank ``p`` percentile (0 < p <= 1) of sorted ``values``."""
    return values[max(0, math.ceil(p * len(values)) - 1)]


def bucket_for(span: float) -> int:
    """The chart bucket (seconds) for a log spanning ``span`` seconds."""
    return next((b for b in BUCKETS if span / b <= MAX_POINTS), BUCKETS[-1])


def busiest(fig: Figures, width: int = 60) -> tuple[float, float] | None:
    """The ``width``-second window (aligned) with the most requests finished: (start, requests)."""
    what = "requests" if fig.outcomes else "http"
    counts: dict[int, float] = {}
    for t, name, v in fig.timeline:
        if name == what:
            counts[int(t // width)] = counts.get(int(t // width), 0.0) + v
    if not counts:
        return None
    k = max(counts, key=lambda i: (counts[i], -i))  # the earliest of equally busy ones
    return k * width, counts[k]


def summary(fig: Figures) -> dict[str, Any]:
    """The figures of one stream as plain values (the JSON form; times as Unix seconds)."""
    span = fig.last - fig.first
    gen = fig.tokens.get("generation")
    latency: dict[str, Any] = {}
    for name in LATENCIES:
        values = sorted(fig.latencies.get(name, ()))
        if values:
            latency[name.removeprefix("llm_")] = {
                "count": len(values), **{f"p{round(p * 100)}": percentile(values, p) for p in PERCENTILES}}
    top = busiest(fig)
    return {
        "backend": fig.backend,
        "source": fig.source,
        "model": fig.model,
        "models": list(fig.models),
        "first": fig.first,
        "last": fig.last,
        "requests": fig.requests,
        "requests_by_outcome": dict(sorted(fig.outcomes.items())),
        "http_requests_by_status": dict(sorted(fig.http.items())),
        "client_errors_by_type": dict(sorted(fig.client_errors.items())),
        "prompt_tokens": fig.tokens.get("prompt"),
        "generation_tokens": gen,
        "cached_prompt_tokens": fig.tokens.get("cached_prompt"),
        "audio_seconds": fig.tokens.get("audio_seconds"),
        "embeddings": fig.tokens.get("embeddings"),
        "generation_tokens_per_second": gen / span if gen is not None and span > 0 else None,
        "latency_seconds": latency,
        "errors": [{"type": k, "count": s.count, "first": s.first, "last": s.last}
                   for k, s in sorted(fig.errors.items(), key=lambda kv: (-kv[1].count, kv[0]))],
        "startups": len(fig.restarts),
        "startup_times": fig.restarts,
        "busiest_minute": None if top is None else {"start": top[0], "requests": top[1]},
    }
