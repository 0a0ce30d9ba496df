"""vLLM: stats lines, request lifecycle, uvicorn access lines, errors, start-ups, model name.

One whole-chunk scan per batch (``parse_batch``); ``parse`` runs the same scan on one record.
Every rule is a ``re`` pattern run over the chunk (see ``vllm_patterns``), aggregated in C where
it can be, so lines that match nothing never reach Python code.

Token counters are exact where the log has per-request counts (``vllm_requests``: token-id lists
of the request log, logged response bodies' ``usage``), from the first line that counts a series
of a model on. Otherwise they are estimates: vLLM logs no per-request token counts by default, so
``llm_prompt_tokens_total`` / ``llm_generation_tokens_total`` integrate the logged average
throughput over the time since the previous stats line of the same engine (``vllm_stats``).

Finished requests and client errors come from the uvicorn access lines where they are logged (a
2xx POST on an inference route; a 4xx of any method on any route, by the shared code table, a 404
on an inference route being ``model_not_found``; see ``_access_outcomes`` and ``_ok_from``): the
access log covers every request, the per-request lines only some.

Gauges follow the last stats line of each engine (``vllm_stats``); with several engines (data
parallelism) counts and throughputs are summed over the engines and ratios averaged.

Series that start at 0: only those the log seen so far can move. Always (once per stream):
``backend_restarts_total`` and ``backend_errors_total`` for every error type (any version can
log them). Per model, once the log shows it:

- token counters: a stats line, or a start-up whose args leave stats logging on;
- ``llm_preemptions_total``: a V0 engine (its stats lines, init line or preemption warnings warn
  per preemption) or a V1 stats line with the ``Preemptions:`` field (0.13+);
- ``llm_requests_total{outcome="ok"}``: V0 AsyncLLMEngine's request lines (``Added``/``Finished
  request`` from ``async_llm_engine.py``, 0.2 - 0.10 non-MQ with request logging), a ``Generated
  response`` line or a logged response body: without them V1 logs no finished request, so it never
  shows ``ok`` 0 next to its aborts;
- ``outcome="aborted"``: those lines, or V1's ``Added request`` (request logging is on);
- ``outcome="error"``: V1's ``Added request`` (only V1 logs ``Request ... failed``).

Crashes: one dead engine prints several error records (the engine core's traceback, the API
server's, one per request in flight, "died unexpectedly"). Errors of the ``FATAL_TYPES`` (oom,
engine_dead, cuda, startup) count once per crash episode, with the first record's type: an
episode runs from its first fatal record to the next start-up, ready or stats line. Other error
types count per record.

Routes: ``RouteLabels`` (``parsers.common``) with vLLM's routes (``ROUTES``) and those its
``Route: ..., Methods: ...`` start-up lines list (also from before the read position, ``learn``):
scanner 404s fold into ``__not_found__``.
"""

from __future__ import annotations

from bisect import bisect_left
from collections import Counter
from typing import ClassVar

from logmetrics.events import UNKNOWN_MODEL, Event
from logmetrics.plugins import Parser
from logmetrics.records import Batch, Record

from . import vllm_patterns as P
from .common import RouteLabels, access_answer
from .vllm_errors import ERROR_TYPES, classify_error
from .vllm_kinds import Control, Fatal, Item, Kind, Mark
from .vllm_lines import Records, access_and_errors, life_lines, record_head
from .vllm_requests import Requests
from .vllm_startup import Startup, life_kind, model_from, startup_kind
from .vllm_stats import Stats

MAX_PENDING = 10000
#: What request lines show the log can produce (see the class docstring).
V0_REQUESTS, V1_REQUESTS = ("ok", "aborted", "preempt"), ("aborted", "error")
#: Routes of vLLM's OpenAI-compatible server (0.2 - 0.33), known to be served before its
#: ``Route: ..., Methods: ...`` start-up lines are seen.
ROUTES = (
    "/health", "/ping", "/metrics", "/version", "/load", "/v1/models", "/v1/chat/completions", "/v1/completions",
    "/v1/embeddings", "/v1/responses", "/v1/responses/{id}", "/v1/responses/{id}/cancel", "/v1/audio/transcriptions",
    "/v1/audio/translations", "/tokenize", "/detokenize", "/pooling", "/classify", "/score", "/v1/score",
    "/rerank", "/v1/rerank", "/v2/rerank", "/invocations", "/v1/load_lora_adapter", "/v1/unload_lora_adapter",
    "/server_info", "/reset_prefix_cache", "/sleep", "/wake_up", "/is_sleeping", "/collective_rpc",
    "/scale_elastic_ep", "/is_scaling_elastic_ep", "/docs", "/redoc", "/openapi.json",
)
#: Routes that run the engine: a 2xx access line on one is a finished request (``outcome="ok"``).
INFERENCE_ROUTES = frozenset({
    "/v1/chat/completions", "/v1/completions", "/v1/embeddings", "/v1/responses", "/v1/audio/transcriptions",
    "/v1/audio/translations", "/pooling", "/classify", "/score", "/v1/score", "/rerank", "/v1/rerank",
    "/v2/rerank", "/invocations", "/v1/chat/completions/batch",
})


#: Zero-started series by what the log must show before they can move (see the class docstring).
ZERO_SERIES: dict[str, tuple[tuple[str, str | None], ...]] = {
    "tokens": (("llm_prompt_tokens_total", None), ("llm_generation_tokens_total", None)),
    "preempt": (("llm_preemptions_total", None),),
    "ok": (("llm_requests_total", "ok"),),
    "aborted": (("llm_requests_total", "aborted"),),
    "error": (("llm_requests_total", "error"),),
}


def aborted_ids(ids: str | None) -> int:
    """How many request ids an ``Aborted request(s) a, b.`` line names (one without a list)."""
    return 1 if not ids else len([i for i in ids.split(",") if i.strip()])


class VllmParser(Parser):
    """vLLM OpenAI-compatible server logs, V0 (0.2 - 0.10) and V1 (0.7 - 0.33)."""

    name: ClassVar[str] = "vllm"
    claims: ClassVar[tuple[str, ...]] = ("*vllm*",)
    continuation = P.CONTINUATION
    process_names: ClassVar[tuple[str, ...]] = ("vllm", "VLLM::")  # VLLM::: the titles its engine processes set

    def __init__(self) -> None:
        self.model = UNKNOWN_MODEL
        self._zeroed: dict[str, set[str]] = {}
        self._stats = Stats()  # the engines' last stats lines, and the clock of the line stamps
        self._started: dict[str, int] = {}
        self._preempt_total = 0
        self._startup = Startup()
        self._records = Records()
        self._routes = RouteLabels(ROUTES)
        self._caps: set[str] = set()
        self._caps_new = False
        self._crash = False
        self._seg_stats = 0
        self._rare = P.RARE
        self._more_lines = 0  # lines after the first of the matched multi-line records, per batch
        self._requests = Requests()
        self._stopping = False  # a clean shutdown began and no start-up followed
        self._gen: dict[str, list[float]] = {}  # per model: generated tokens estimated, counted per request
        self._ok_source: str | None = None  # what counts finished requests: "access" or "finished" lines

    def state(self) -> dict[str, object]:
        """The served model's name and whether the server was ready, so that a restart goes on with
        the same series (``backend_ready`` is a gauge: it is not in the saved counters)."""
        return {**super().state(), "model": self.model, "max_log_len": self._requests.max_log_len}

    def restore(self, state: dict[str, object]) -> None:
        """The model name and readiness an earlier run had learned."""
        super().restore(state)
        model = state.get("model")
        if isinstance(model, str) and model:
            self.model = model
        max_log_len = state.get("max_log_len")
        if isinstance(max_log_len, int):
            self._requests.max_log_len = max_log_len

    def learn(self, text: str) -> None:
        """The model name, readiness and routes from lines logged before we started reading (no events)."""
        t = "\n" + text
        for path in P.ROUTE.findall(t):
            self._routes.learn(path)
        at = [(m.start(1), startup_kind(m.group(1)), m.group(0)) for m in P.STARTUP.finditer(t)]
        at += [(m.start(1), life_kind(m.group(1)), "") for m in P.LIFE.finditer(t)]
        at += [(m.start(), Control.DEAD, "") for m in P.DEAD.finditer(t)]
        ready = False
        for _pos, kind, value in sorted(at):
            model = model_from(value) if value else None
            if model:
                self.model = model
            if kind == Control.MODEL_ONLY:
                self._max_log_len(value)
            ready = kind == Control.READY  # any later start-up or shutdown line says it is not
        self.ready = ready

    @classmethod
    def sniff(cls, lines: list[str]) -> float:
        """High for vLLM start-up, stats or process-prefixed lines; some for vLLM-style headers."""
        text = "\n".join(lines)
        if P.SNIFF_STRONG.search(text):
            return 0.95
        return 0.6 if P.SNIFF_HEADER.search(text) else 0.0

    def parse(self, record: Record) -> list[Event]:
        """Events of one record: the batch scan run on a one-record text."""
        return self._scan(record.text, record.time if record.time is not None else 0.0)[0]

    def parse_batch(self, batch: Batch) -> tuple[list[Event], int, int]:
        """Events of a batch of whole records, how many records produced one, and their lines."""
        self._more_lines = 0
        events, matched = self._scan(batch.text, batch.time)
        return events, matched, matched + self._more_lines

    # -- the scan ---------------------------------------------------------------------------

    def _scan(self, text: str, now: float) -> tuple[list[Event], int]:
        t = "\n" + text if text.endswith("\n") else "\n" + text + "\n"
        if "\r" in t:
            t = t.replace("\r\n", "\n")
        self._stats.clock.at(now)
        rare = Counter(self._rare.findall(t))
        if any(key in P.STARTUP_KEYS or "\u2580" <= key[-1:] <= "\u259f" for key in rare):
            found = [*P.STARTUP.finditer(t), *P.LOGO_MODEL.finditer(t)]
            cuts = sorted({c for m in found if (c := record_head(t, t.rfind("\n", 0, m.start()))) > 0})
            if cuts:  # a start-up may name a new model: what follows it is scanned with that model
                return self._pieces(t, cuts, now)
        events: list[Event] = []
        records = self._records
        records.clear()
        if rare:
            self._learn_routes(t, rare)
        fatal: list[Fatal] = []
        errors: Counter[str] = Counter()
        matched = access_and_errors(t, events, records, self._routes, fatal, errors)
        ok, client = self._access_outcomes(t, events)
        if P.HEADLESS.match(t):
            matched += self._headless(t, errors)
        fatal.sort()
        stop_at = self._stop_at(t, rare)
        if fatal and stop_at < len(t):  # the engine's end in a clean shutdown: recognised, not counted
            events.extend(Event("backend_errors_total", (self.model, kind), 0, rule="shutdown")
                          for pos, kind, _ in fatal if pos > stop_at)
            for pos, _kind, head in fatal:
                if pos > stop_at:  # the record counts here; one inside another record, with it
                    if head:
                        records.heads.add(pos)
                        matched += 1
                    else:
                        records.inside.append(pos)
            fatal = [x for x in fatal if x[0] <= stop_at]
        f = 0
        controls: list[Mark] = []
        life: list[Mark] = []
        after: list[Event] = []
        items: list[Item] = []
        ok, finished = self._ok_from(t, ok, rare[P.FINISHED] + rare[P.FINISHED_V0])
        ended = (0, 0, 0)  # aborted ids, aborted lines, failed lines: counted without positions
        if rare or records.life or self._requests.outputs:
            ended = self._rare_items(t, rare, controls, items, life)
            if life:
                matched += self._life(t, life, events, after)
            if controls and finished:  # count them per segment
                items.extend(Item(m.start(), Kind.FINISHED, "", 0) for m in P.FINISHED_AT.finditer(t))
                finished = 0
            items.sort()
        ready_at = [pos for pos, kind, _ in life if kind == Control.READY]  # (life is left only without start-ups)
        start = k = 0
        for pos, kind, value in [*controls, Mark(len(t), Control.END, "")]:
            end = t.rfind("\n", 0, pos) if kind is not Control.END else pos
            k_end = k
            while k_end < len(items) and items[k_end][0] < end:
                k_end += 1
            f_end = f
            while f_end < len(fatal) and fatal[f_end][0] < end:
                f_end += 1
            served: list[int] | None = [] if f_end > f else None
            matched += self._segment(t, start, end, items[k:k_end], finished, ended, events, served)
            finished, ended = 0, (0, 0, 0)
            k = k_end
            if served is not None:
                if ready_at:
                    served = sorted(served + ready_at)
                matched += self._crashes(fatal[f:f_end], served, events)
                f = f_end
            elif self._seg_stats or ready_at:  # serving again: a crash before is over
                self._crash = False
            if kind not in (Control.END, Control.MODEL_ONLY, Control.STOPPED, Control.DEAD):
                self._crash = False  # a start-up or ready line: a crash is over
            if kind is not Control.END and self._control(kind, value, self._stats.clock.line_time(t, pos), events):
                if kind == Control.LOGO:  # a line of a multi-line record
                    records.inside.append(end)
                else:
                    records.dynamic.add(end)
                    matched += 1
            start = end
        events.extend(after)
        # the model in effect: a batch is scanned in pieces that begin with their start-up line
        model = self.model
        events.extend(Event("backend_errors_total", (model, kind), n, rule="error") for kind, n in errors.items())
        if ok:  # (no zero series from it: an access line shows no more than its own request)
            self._requests.access_ok(model, ok, events)
        events.extend(Event("llm_client_errors_total", (model, kind), n, rule="access") for kind, n in client.items())
        if self._requests.access_from:
            self._requests.access_from = 0
        self._more_lines += records.more_lines
        return events, matched + records.resolve(t)

    def _access_outcomes(self, t: str, events: list[Event]) -> tuple[int, Counter[str]]:
        """Finished requests and client errors by type from the access lines' events in ``events``
        (counted with the model in effect at the end of the scan).

        A 2xx on an inference route is a finished request: the access log covers every request,
        so it is the source of ``outcome="ok"`` once it has counted one (``Requests``: the
        per-request lines then count no ``ok``, so that none counts twice). A 4xx is the client's
        fault: ``llm_client_errors_total`` by type, never a backend error.
        """
        ok = 0
        client: Counter[str] = Counter()
        for e in events:
            if e.metric != "http_requests_total" or e.rule != "access" or isinstance(e.value, tuple):
                continue
            method, route, code = e.labels
            answer = access_answer(code, route, route in INFERENCE_ROUTES, "model_not_found")
            if answer is None:
                continue
            if answer[0]:  # any method, any route (a GET of an unknown path too)
                client[answer[1]] += int(e.value)
            elif method == "POST" and answer[1] == "ok":  # a 5xx is counted from the error record
                ok += int(e.value)
        return ok, client

    def _ok_from(self, t: str, ok: int, finished: int) -> tuple[int, int]:
        """Which source counts ``outcome="ok"``, decided once per stream by the first line seen of
        either: the access lines, or V0's ``Finished request`` lines (both cover every request).
        Returns the access lines' count (0 if they lose) and the finished lines'. From the
        first access line on, the other per-request lines count no ``ok`` (``Requests.access_from``)."""
        if self._ok_source is None and (ok or finished):
            m = P.ACCESS_OK.search(t) if ok else None
            at = (m.start() if m else 0) if ok else len(t)
            m = P.FINISHED_AT.search(t) if finished else None
            done_at = m.start() if m else len(t)
            self._ok_source = "access" if at <= done_at else "finished"
            if self._ok_source == "access":
                self._requests.access_from = at
        return (ok, finished) if self._ok_source == "access" else (0, finished)

    def _stop_at(self, t: str, rare: Counter[str]) -> int:
        """Where in ``t`` the server began a clean shutdown (``len(t)`` if it did not): the engine's
        death after it (``EngineDeadError`` from the output handler) is the shutdown, no crash.
        A start-up ends the shutdown."""
        found = [at for mark in P.SHUTDOWN_MARKS if (at := t.find(mark)) >= 0]
        if found:
            self._stopping = True
            return min(found)
        if self._stopping and not any(key in P.STARTUP_KEYS for key in rare):
            return -1  # since before the text
        self._stopping = False
        return len(t)

    def _headless(self, t: str, errors: Counter[str]) -> int:
        """The rest of a raw traceback at the start of ``t``: one error of its type (its lines continue
        the record, so the scan finds no head for it)."""
        end = t.find("\n", 1)
        cont = P.CONTINUATION.match
        while 0 <= end < len(t) - 1 and cont(t, end + 1):
            end = t.find("\n", end + 1)
        record = t[1:end if end >= 0 else len(t)]
        errors[classify_error(record, traceback=True)] += 1
        self._more_lines += record.count("\n")
        return 1

    def _pieces(self, t: str, cuts: list[int], now: float) -> tuple[list[Event], int]:
        """Scan ``t`` piece by piece, cut before each start-up line (at the ``\n`` ending the line
        above it): the records before a start-up count for the model in effect before it."""
        events: list[Event] = []
        matched = 0
        for a, b in zip([0, *cuts], [*cuts, len(t) - 1], strict=True):
            got, n = self._scan(t[a + 1:b + 1], now)
            events += got
            matched += n
        return events, matched

    def _learn_routes(self, t: str, rare: Counter[str]) -> None:
        """The routes the server lists at start-up."""
        if "Route" in rare:
            for path in P.ROUTE.findall(t):
                self._routes.learn(path)

    def _can(self, *caps: str) -> None:
        """The log shows it can produce the series of ``caps`` (keys of ``ZERO_SERIES``)."""
        if not self._caps.issuperset(caps):
            self._caps.update(caps)
            self._caps_new = True

    def _crashes(self, fatal: list[Fatal], served: list[int], events: list[Event]) -> int:
        """Fatal errors of a segment, one per crash episode (a stats or ready line at a position in
        ``served`` between them ends one); how many records they are (each matched, counted or not)."""
        s = matched = 0
        crash = self._crash
        counted: Counter[str] = Counter()
        folded: set[str] = set()
        heads, inside = self._records.heads, self._records.inside
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
            if head:  # the record counts here; a record that begins inside another one, with it
                heads.add(pos)
                matched += 1
            else:
                inside.append(pos)
        self._crash = crash and s == len(served)
        model = self.model
        events.extend(Event("backend_errors_total", (model, kind), n, rule="error") for kind, n in counted.items())
        # the other records of a crash: recognised, worth nothing more (``logmetrics check`` shows them)
        events.extend(Event("backend_errors_total", (model, kind), 0, rule="crash") for kind in folded)
        return matched

    def _rare_items(self, t: str, rare: Counter[str], controls: list[Mark],
                    items: list[Item], life: list[Mark]) -> tuple[int, int, int]:
        """Positions and values of the rare lines that ``rare`` says are in ``t``.

        Aborted and failed requests need no position when the text has no start-up line (one
        segment, one model): they are then only counted, in C, and returned as (aborted ids,
        aborted lines, failed lines).
        """
        if any(key in P.STARTUP_KEYS for key in rare):
            controls.extend(Mark(m.start(), startup_kind(m.group(1)), m.group(0)) for m in P.STARTUP.finditer(t))
        if any("\u2580" <= key[-1:] <= "\u259f" for key in rare):
            controls.extend(Mark(m.start(), Control.LOGO, m.group(1)) for m in P.LOGO_MODEL.finditer(t))
        if self._records.life:
            life.extend(life_lines(t, self._records.life))
        if any(key in P.DEAD_KEYS or key.endswith("EngineDeadError") for key in rare):
            life.extend(Mark(m.start(), Control.DEAD, "") for m in P.DEAD.finditer(t))
        if controls and life:  # start-up lines too: each in its place, for the model it concerns
            controls.extend(life)
            life.clear()
        controls.sort()
        ended = (0, 0, 0)
        if controls:
            if "Aborted request" in rare or "Request" in rare:
                for m in P.ABORTED.finditer(t):
                    items.append(Item(m.start(), Kind.ABORTED, "", aborted_ids(m.group(1))))
            if "Request" in rare:
                items.extend(Item(m.start(), Kind.FAILED, "", 1) for m in P.FAILED.finditer(t))
        elif "Aborted request" in rare or "Request" in rare:
            lists = P.ABORTED_LIST.findall(t) if "Aborted request" in rare else []
            ones = len(P.ABORTED_ONE.findall(t)) if "Request" in rare else 0
            failed = len(P.FAILED.findall(t)) if "Request" in rare else 0
            ids = sum(1 if "," not in found else aborted_ids(found) for found in lists)
            ended = (ids + ones, len(lists) + ones, failed)
        # request lines that show a series can move, until it is known (positions: the model in effect)
        if (P.ADDED_V0 in rare or P.FINISHED_V0 in rare) and not self._caps.issuperset(V0_REQUESTS):
            items.extend(Item(m.start(), Kind.CAN, "v0" if m.group(1) == "Added" else "v0 finished", 0)
                         for m in P.V0_REQUEST.finditer(t))
        if P.ADDED_V1 in rare and not self._caps.issuperset(V1_REQUESTS):
            items.extend(Item(m.start(), Kind.CAN, "v1", 0) for m in P.ADDED_V1_AT.finditer(t))
        if P.REQUEST_KEYS.intersection(rare) or self._requests.outputs:
            items.extend(self._requests.items(t, rare, self._stats.clock.line_time))
        if P.SUPPORTED_KEY in rare:
            for m in P.SUPPORTED.finditer(t):
                at = self._stats.clock.line_time(t, m.start())
                if at is not None:
                    items.append(Item(m.start(), Kind.ORIGIN, "", at))
        if "Sequence group" in rare:
            for m in P.PREEMPTED.finditer(t):
                total = m.group(1)
                items.append(Item(m.start(), Kind.PREEMPTED, "", int(total) if total else -1))
        if "Prefix cache hit rate: GPU" in rare:
            items.extend(Item(m.start(), Kind.V0_PREFIX, m.group(1), 0) for m in P.V0_PREFIX.finditer(t))
        if P.ADDED_V0 in rare or P.FINISHED_V0 in rare:
            for m in P.V0_REQUEST.finditer(t):
                at = self._stats.clock.line_time(t, m.start())
                if at is not None:
                    items.append(Item(m.start(), Kind.ADDED if m.group(1) == "Added" else Kind.DONE, m.group(2), at))
        return ended

    # -- model-labelled rules, one segment (between two start-up lines) at a time -------------

    def _segment(self, t: str, a: int, b: int, items: list[Item], finished: int, ended: tuple[int, int, int],
                 events: list[Event], served: list[int] | None = None) -> int:
        """Stats lines in ``t[a:b]`` and the rare lines in ``items`` (plus ``finished`` and ``ended``
        requests counted without positions): their events, and how many records matched. The
        positions of the stats lines go to ``served`` if given."""
        model = (self.model,)
        out: list[Event] = []
        matched = finished
        # from these positions on, the tokens are counted from per-request lines, not integrated
        p_from, _ = self._requests.exact_from(self.model, items, b) if items or self._requests.sources \
            else (b, b)
        g_from = b  # generation: always integrated too (``_generation``)
        for _pos, kind, _value, n in items:
            if kind == Kind.ORIGIN:
                self._stats.origin = n
        stats = self._stats.scan(t, a, b, p_from, g_from, served)
        lines = stats.lines
        matched += lines
        gauge_rule = ("stats_v1" if stats.v1 else "stats_v0") if lines else ""
        if gauge_rule:
            self._startup.serving()
            self._can("tokens", "preempt") if stats.preempt_field or stats.any_v0 else self._can("tokens")
        self._seg_stats = lines
        ok = 0
        aborted, aborted_lines, failed = ended
        matched += aborted_lines + failed
        exact: set[int] = set()  # the per-request lines that gave events
        for item in items:
            pos, kind, value, n = item
            if kind == Kind.ORIGIN:
                continue
            if kind >= Kind.PROMPT:
                got, caps = self._requests.item(self.model, item, out)
                if got:  # counted once per line, and not again with an error glued to it
                    exact.add(pos)
                    self._records.dynamic.add(t.rfind("\n", 0, pos))
                    if caps:
                        self._can(*caps)
                continue
            if kind == Kind.FINISHED:
                ok += 1
            elif kind == Kind.ABORTED:
                aborted += n
            elif kind == Kind.FAILED:
                failed += 1
            elif kind == Kind.PREEMPTED:  # n: vLLM's cumulative count, printed every 50th (-1: not printed)
                increase = 1 if n < 0 else n - self._preempt_total if n >= self._preempt_total else n
                if n >= 0:
                    self._preempt_total = n
                if increase <= 0:
                    continue
                self._records.dynamic.add(t.rfind("\n", 0, pos))
                out.append(Event("llm_preemptions_total", model, increase, rule="preemption"))
            elif kind == Kind.V0_PREFIX:
                self._stats.v0_prefix(value)
                gauge_rule = gauge_rule or "stats_v0"
            elif kind == Kind.CAN:
                caps = V1_REQUESTS if value == "v1" else V0_REQUESTS
                if self._caps.issuperset(caps):
                    continue
                self._can(*caps)  # the line's events: the zero series it starts
                if self._caps.issuperset(V1_REQUESTS):  # V1's Added lines have nothing more to tell
                    self._rare = P.RARE_KNOWN
                if value == "v0 finished":  # counted as a finished request
                    continue
                self._records.dynamic.add(t.rfind("\n", 0, pos))
            elif kind == Kind.ADDED:
                self._started[value] = n
                if len(self._started) > MAX_PENDING:
                    del self._started[next(iter(self._started))]
                continue
            else:  # Kind.DONE
                started = self._started.pop(value, None)
                if started is not None and n > started:  # same second: under a second, not known
                    out.append(Event("llm_request_duration_seconds", model, float(n - started), rule="lifecycle"))
                continue
            matched += 1
        matched += len(exact)
        for outcome, count in (("ok", ok + finished), ("aborted", aborted), ("error", failed)):
            if count:  # finished lines are counted by the access lines if those came first (see ``_ok_from``)
                counted = 0 if outcome == "ok" and self._ok_source == "access" else count
                out.append(Event("llm_requests_total", (*model, outcome), counted, rule="lifecycle"))
        for rule, prompt_tokens, gen_tokens, seen in stats.tokens:
            if seen:
                if p_from:
                    out.append(Event("llm_prompt_tokens_total", model, prompt_tokens, rule=rule))
                if g_from:
                    out.append(Event("llm_generation_tokens_total", model, gen_tokens, rule=rule))
        self._generation(self.model, out)
        if stats.preempted:
            out.append(Event("llm_preemptions_total", model, stats.preempted, rule="stats_v1"))
        if gauge_rule:
            self._stats.gauges(model, gauge_rule, out)
        if out or self._caps_new:
            self._zeros(self.model, events)
            events.extend(out)
        return matched

    def _generation(self, model: str, out: list[Event]) -> None:
        """Generated tokens: the larger of the estimate and the per-request count, both cumulative.

        vLLM logs the outputs of some requests only (``/v1/completions`` never, empty outputs
        not, streamed deltas only when a chunk carries text; response bodies only when not
        streamed), so a per-request count is a floor for the requests it covers, never the total:
        the series follows it only where it exceeds the estimate. The generation events in
        ``out`` are replaced by one increment (rule of the larger source)."""
        est = exact = 0.0
        rule = ""
        keep: list[Event] = []
        for e in out:
            if e.metric != "llm_generation_tokens_total" or isinstance(e.value, tuple):
                keep.append(e)
            elif e.rule.startswith("stats"):
                est += e.value
                rule = e.rule
            else:
                exact += e.value
        if len(keep) == len(out):
            return
        sums = self._gen.get(model)
        if sums is None:
            if len(self._gen) >= 64:
                self._gen.clear()
            sums = self._gen[model] = [0.0, 0.0]
        before = max(sums)
        sums[0] += est
        sums[1] += exact
        keep.append(Event("llm_generation_tokens_total", (model,), max(sums) - before,
                          rule="request_log" if sums[1] > sums[0] else rule or "stats_v1"))
        out[:] = keep

    def _zeros(self, model: str, events: list[Event]) -> None:
        """Zero-valued counter events, once per model and series, for the series the log can move."""
        self._caps_new = False
        done = self._zeroed.get(model)
        if done is None:
            if len(self._zeroed) >= 64:
                self._zeroed.clear()
            if not self._zeroed:  # once per stream: so that the first restart shows in increase()
                events.append(Event("backend_restarts_total", (), 0, rule="model"))
            # per model: any version can log any error type
            events.extend(Event("backend_errors_total", (model, kind), 0, rule="model") for kind in ERROR_TYPES)
            done = self._zeroed[model] = set()
        for cap in self._caps - done:
            done.add(cap)
            events.extend(Event(name, (model,) if outcome is None else (model, outcome), 0, rule="model")
                          for name, outcome in ZERO_SERIES[cap])

    def _control(self, kind: Control, value: str, at: int | None, events: list[Event]) -> int:
        """A start-up line: count a start (once per start, not per line of it), learn the model.
        A lifecycle line: the server is ready, or it went down (shut down, died, failed to start)."""
        before = len(events)
        if kind >= Control.READY:
            if kind == Control.READY:
                self.ready = True
                events.append(Event("backend_ready", (self.model,), 1, rule="ready"))
            else:
                self._down(events)
            # an engine's death is an error line, counted as such; the others count if they said something
            return 1 if kind != Control.DEAD and len(events) > before else 0
        starts = self._startup.line(kind, at)
        if starts:  # the old server, if any, is gone
            self._down(events)
        model = value if kind == Control.LOGO else model_from(value)
        if kind == Control.MODEL_ONLY:
            self._max_log_len(value)
        if kind == Control.ENGINE_INIT and ("an LLM engine" in value or "V0 LLM" in value):
            self._can("preempt")  # V0's scheduler warns per preemption
        if model and kind != Control.LOGO and "disable_log_stats=True" not in value and \
                "'disable_log_stats': True" not in value:
            self._can("tokens")
        if model:
            self.model = model
            if kind != Control.LOGO:  # the logo may show the path; the served name follows in the args
                self._zeros(model, events)
        if starts:
            self._stats.engines.clear()
            self._started.clear()
            self._requests.restart()
            self._preempt_total = 0
            self._stats.origin = None
            events.append(Event("backend_restarts_total", (), 1, rule="startup"))
        return 1 if len(events) > before else 0

    def _max_log_len(self, args: str) -> None:
        """``--max-log-len`` from a start-up args line (absent from 0.10+'s non-default args: None)."""
        m = P.MAX_LOG_LEN.search(args)
        self._requests.max_log_len = int(m.group(1)) if m else None

    def _down(self, events: list[Event]) -> None:
        """The server stopped: not ready, and (in the store) its other gauges reset to 0.

        Said only of a server known to have been up, to have logged stats or to serve a model: an
        excerpt's first lines must not make a ``model="unknown"`` series out of nothing.
        """
        if self.ready or self._stats.engines or self.model != UNKNOWN_MODEL:
            events.append(Event("backend_ready", (self.model,), 0, rule="down"))
        self.ready = False

    def _life(self, t: str, life: list[Mark], before: list[Event], after: list[Event]) -> int:
        """Lifecycle lines of a text without start-up lines (one model), without cutting it in segments.

        Only the order against the stats lines matters: if stats lines follow the last stop, the
        reset goes before their gauges (events in ``before``), else after them (``after``); the last
        line says whether the server is ready. Returns the records matched.
        """
        life.sort()
        matched = 0
        last_stop = -1
        live = bool(self._stats.engines) or self.model != UNKNOWN_MODEL
        stats_at = t.find(P.STATS_MARK)
        for pos, kind, _ in life:
            if kind == Control.READY:
                self.ready = counted = True
            else:
                down = self.ready or live or 0 <= stats_at < pos  # as ``_down`` decides
                last_stop = pos if down else last_stop
                counted = down and kind == Control.STOPPED  # DEAD lines are errors, counted as such
                self.ready = False
            if counted:
                matched += 1
                self._records.dynamic.add(t.rfind("\n", 0, pos))
        model = (self.model,)
        last = life[-1][1]
        if last_stop >= 0:  # the reset goes before the gauges if a stats line follows the last stop
            (before if t.rfind(P.STATS_MARK) > last_stop else after).append(
                Event("backend_ready", model, 0, rule="down"))
        if last == Control.READY:
            after.append(Event("backend_ready", model, 1, rule="ready"))
        return matched
