"""vLLM's per-request lines: exact token counts, finished requests and durations.

Where vLLM logs per-request counts, ``llm_prompt_tokens_total``, ``llm_generation_tokens_total``
and ``llm_requests_total{outcome="ok"}`` are counted from them, exactly: the token-id lists of the
request log (``Received request``, ``Request ... details``, ``Generated response``: a streamed
response is the sum of its deltas, and one that ends is a finished request) and the ``usage`` of
logged response bodies. Which lines, in which versions and at which level: docs/parsers.md, "vLLM".

Each of the three series (prompt, generation, ok) takes its source per model and stream: the
request log (``rule="request_log"``) once one of its lines has counted, else the response bodies
(``rule="usage"``); a line of a lower source than the one in use is not counted, so no request
counts twice. From the position of the first line that counts exactly, the parser stops
integrating the stats lines' throughput for that series (``rule="stats_v0"``/``"stats_v1"``).

With ``--max-log-len N`` (read from the start-up args) vLLM cuts the lists at N ids, and a list of
N ids may stand for a longer one: the lists are then not used (the tokens stay integrated), while
finished requests and durations still are. A list cut without the args in view cannot be told.

Durations: a request's ``Received request`` line paired by id with the ``Generated response`` that
ends it, in whole seconds (the stamps' resolution; vLLM logs no finer per-request time): a pair within
one second gives no observation, not a false 0 (``parsers.pairs.Pairs``: bounded; a start older
than its time-out, by the lines' clock, is forgotten; the running gauge comes from the stats lines,
so ``Pairs`` reports nothing). Received lines without token ids (0.13+) are looked at only from
the stream's first ``Generated response`` line on, so that logs without output logging pay nothing
for them.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable

from logmetrics.events import Event

from . import vllm_patterns as P
from .common import remember
from .pairs import Pairs
from .vllm_kinds import Item, Kind, Source

RULES = {Source.ACCESS: "access", Source.LOG: "request_log", Source.USAGE: "usage"}
MAX_MODELS = 64


def id_count(rest: str, markers: tuple[str, ...]) -> int:
    """How many ids the list after the last of ``markers`` in ``rest`` holds; -1 if none or cut."""
    for marker in markers:
        at = rest.rfind(marker)
        if at >= 0:
            start = at + len(marker)
            end = rest.find("]", start)
            if end < 0:
                return -1
            return 0 if end == start or not rest[start:end].strip() else rest.count(",", start, end) + 1
    return -1


class Requests:
    """Per stream: which source each series of each model uses, open requests, ``--max-log-len``."""

    __slots__ = ("access_from", "max_log_len", "outputs", "pairs", "sources")

    def __init__(self) -> None:
        self.sources: dict[str, dict[str, Source]] = {}  # model -> series ("prompt", "gen", "ok") -> source
        self.pairs = Pairs()
        self.max_log_len: int | None = None
        self.outputs = False  # the stream has logged a Generated response line
        #: where (in the text being scanned) the access lines began to count finished requests
        self.access_from: int | None = None

    def items(self, t: str, rare: Counter[str], line_time: Callable[[str, int], int | None]) -> list[Item]:
        """The items of the per-request lines ``rare`` says ``t`` holds."""
        out: list[Item] = []
        first_gen = -1
        if P.GENERATED_KEY in rare:
            for m in P.GENERATED.finditer(t):
                pos = m.start() + 1  # the patterns begin at the "\n" before their line
                first_gen = pos if first_gen < 0 else first_gen
                rid, stream, details, rest = m.groups()
                n = id_count(rest, P.IDS_OUTPUT)
                if n >= 0:
                    out.append(Item(pos, Kind.GEN_IDS, rid, n))
                if details is None and (stream is None or "complete" in stream):
                    at = line_time(t, pos)
                    out.append(Item(pos, Kind.GEN_END, rid, -1 if at is None else at))
        if P.RECEIVED_KEY in rare or P.DETAILS_KEY in rare:
            for m in P.PROMPT_IDS.finditer(t):
                n = id_count(m.group(2), P.IDS_PROMPT)
                if n >= 0:
                    out.append(Item(m.start() + 1, Kind.PROMPT, m.group(1), n))
        # starts: lines with ids always; any Received line from the stream's first Generated one on
        begin = 0 if self.outputs else first_gen if first_gen >= 0 else len(t)
        self.outputs = self.outputs or first_gen >= 0
        if begin < len(t) or P.RECEIVED_KEY in rare:
            for m in P.RECEIVED.finditer(t, 0 if P.RECEIVED_KEY in rare else max(begin - 1, 0)):
                pos = m.start() + 1
                if pos < begin and id_count(t[m.end():t.find("\n", m.end())], P.IDS_PROMPT) < 0:
                    continue
                at = line_time(t, pos)
                if at is not None:
                    out.append(Item(pos, Kind.RECEIVED, m.group(1), at))
        if P.BODY_KEY in rare:
            for m in P.BODY.finditer(t):
                usage = P.USAGE.search(m.group(1))
                if usage is None or m.group(1).startswith("data:"):
                    continue
                fields = dict(P.USAGE_FIELD.findall(usage.group(1)))
                if "prompt" in fields and "completion" in fields:
                    out.append(Item(m.start(), Kind.USAGE_PROMPT, "", int(fields["prompt"])))
                    out.append(Item(m.start(), Kind.USAGE_GEN, "", int(fields["completion"])))
        return out

    def _series(self, model: str) -> dict[str, Source]:
        """The sources in use for ``model``'s series."""
        got = self.sources.get(model)
        if got is None:
            got = remember(self.sources, model, {}, MAX_MODELS)
        return got

    def exact_from(self, model: str, items: list[Item], end: int) -> tuple[int, int]:
        """Where (positions in the text) prompt and generation tokens of ``model`` start to be exact,
        ``end`` if not in these ``items`` (which are sorted); 0 if they already are."""
        series = self.sources.get(model, {})
        lists = self.max_log_len is None  # token-id lists can be counted: not cut by ``--max-log-len``
        prompt = 0 if "prompt" in series else end
        gen = 0 if "gen" in series else end
        for pos, kind, _, _ in items:
            if prompt == end and (kind == Kind.USAGE_PROMPT or (kind == Kind.PROMPT and lists)):
                prompt = pos
            if gen == end and (kind == Kind.USAGE_GEN or (kind == Kind.GEN_IDS and lists)):
                gen = pos
        return prompt, gen

    def item(self, model: str, item: Item, out: list[Event]) -> tuple[bool, tuple[str, ...]]:
        """One item's events for ``model`` (into ``out``); whether it gave any, and the zero-started
        series (``ZERO_SERIES`` keys) it shows the log can move."""
        _pos, kind, rid, n = item
        labels = (model,)
        if kind == Kind.RECEIVED:  # (the running gauge comes from the stats lines: no time-outs to report)
            self.pairs.start(rid, model, float(n))
            self.pairs.expire(float(n))
            self.pairs.timed_out = 0
            return False, ()
        if kind == Kind.GEN_END:
            started = self.pairs.finish(rid)
            access = self.access_from is not None and _pos > self.access_from
            got = not access and self._count(model, "ok", Source.LOG, 1, out, "llm_requests_total", (model, "ok"))
            if started is not None and n >= 0 and n > started[1]:  # same second: under a second, not known
                out.append(Event("llm_request_duration_seconds", labels, n - started[1], rule="request_log"))
                got = True
            return got, ("ok",)
        if kind in (Kind.PROMPT, Kind.GEN_IDS):
            if self.max_log_len is not None:  # lists that may have been cut
                return False, ()
            series, metric = ("prompt", "llm_prompt_tokens_total") if kind == Kind.PROMPT else \
                ("gen", "llm_generation_tokens_total")
            return self._count(model, series, Source.LOG, n, out, metric, labels), ("tokens",)
        if kind == Kind.USAGE_PROMPT:
            got = self._count(model, "prompt", Source.USAGE, n, out, "llm_prompt_tokens_total", labels)
            if self.access_from is None or _pos < self.access_from:
                got = self._count(model, "ok", Source.USAGE, 1, out, "llm_requests_total", (model, "ok")) or got
            return got, ("tokens", "ok")
        # Kind.USAGE_GEN
        return self._count(model, "gen", Source.USAGE, n, out, "llm_generation_tokens_total", labels), ("tokens",)

    def access_ok(self, model: str, n: int, out: list[Event]) -> bool:
        """``n`` requests finished, from the access lines (which cover them all)."""
        return self._count(model, "ok", Source.ACCESS, n, out, "llm_requests_total", (model, "ok"))

    def _count(self, model: str, series: str, source: Source, n: int, out: list[Event], metric: str,
               labels: tuple[str, ...]) -> bool:
        """Count ``n`` for ``series`` from ``source`` unless a better source is in use."""
        sources = self._series(model)
        if sources.get(series, 0) > source:
            return False
        sources[series] = source
        out.append(Event(metric, labels, n, rule=RULES[source]))
        return True

    def dump(self) -> dict[str, object]:
        """What a restart of logmetrics must keep (JSON): the source each series of each model uses
        (else the stats lines would count again what per-request lines count), whether output lines
        were seen, the open requests and ``--max-log-len``."""
        return {"sources": {m: {k: int(v) for k, v in s.items()} for m, s in self.sources.items()},
                "outputs": self.outputs, "open": self.pairs.dump(), "max_log_len": self.max_log_len}

    def load(self, data: object) -> None:
        """Take back what ``dump`` gave (anything else is ignored)."""
        if not isinstance(data, dict):
            return
        sources = data.get("sources")
        if isinstance(sources, dict):
            for model, series in list(sources.items())[:MAX_MODELS]:
                if isinstance(model, str) and isinstance(series, dict):
                    self.sources[model] = {k: Source(v) for k, v in series.items()
                                           if k in ("prompt", "gen", "ok") and type(v) is int and v in set(Source)}
        self.outputs = data.get("outputs") is True
        self.pairs.load(data.get("open"))
        max_log_len = data.get("max_log_len")
        if type(max_log_len) is int:
            self.max_log_len = max_log_len

    def restart(self) -> None:
        """The server restarted: no request is open any more."""
        self.pairs.clear()
