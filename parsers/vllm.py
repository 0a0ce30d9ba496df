"""vLLM: stats lines, request lifecycle, uvicorn access lines, errors, start-ups, model name.

One whole-chunk scan per batch (``parse_batch``); ``parse`` runs the same scan on one record.
Every rule is a ``re`` pattern run over the chunk (``vllm_patterns``), aggregated in C where it
can be, so lines that match nothing never reach Python code. Its parts: access lines and errors
(``vllm_lines``), the rare lines (``vllm_rare``), stats lines, gauges and token estimates
(``vllm_stats``), exact per-request counts (``vllm_requests``), finished requests and client
errors (``vllm_outcomes``), start-ups and the model (``vllm_startup``), crash episodes
(``vllm_crashes``), the series that start at 0 (``vllm_zeros``). What each version logs and
what it gives: docs/parsers.md, "vLLM".

Routes: ``RouteLabels`` (``parsers.common``) with vLLM's routes (``ROUTES``) and those its
``Route: ..., Methods: ...`` start-up lines list (also from before the read position, ``learn``):
scanner 404s fold into ``__not_found__``.
"""

from __future__ import annotations

from bisect import bisect_left
from collections import Counter
from operator import itemgetter
from typing import ClassVar

from logmetrics.events import SEEN, UNKNOWN_MODEL, Event
from logmetrics.plugins import Parser, ZeroSeries
from logmetrics.records import Batch, Record
from logmetrics.records.shapes import Shape

from . import vllm_patterns as P
from .common import RouteLabels
from .pairs import MAX_SAVED
from .vllm_crashes import Crashes
from .vllm_kinds import Control, Fatal, Item, Kind, Mark
from .vllm_lines import (
    Digest,
    Records,
    access_and_errors,
    digest,
    ends_after_exception,
    ends_in_error,
    headless,
    prescan,
    record_head,
    scanned,
    starts_with_rest,
)
from .vllm_outcomes import ROUTES, Generation, OkSource, access_outcomes
from .vllm_rare import RareLines, tally
from .vllm_requests import Requests
from .vllm_startup import Startup, life_kind, life_marks, model_from, startup_kind
from .vllm_stats import Stats
from .vllm_zeros import V0_REQUESTS, V1_REQUESTS, ZERO_SERIES, Capabilities

MAX_PENDING = 10000
class VllmParser(Parser):
    """vLLM OpenAI-compatible server logs, V0 (0.2 - 0.10) and V1 (0.7 - 0.33)."""

    name: ClassVar[str] = "vllm"
    claims: ClassVar[tuple[str, ...]] = ("*vllm*",)
    shapes: ClassVar[tuple[Shape, ...]] = (P.SHAPE,)
    process_names: ClassVar[tuple[str, ...]] = ("vllm", "VLLM::")  # VLLM::: the titles its engine processes set
    #: vLLM start-up, stats or process-prefixed lines; vLLM-style headers.
    sniffs = ((0.95, P.SNIFF_STRONG), (0.6, P.SNIFF_HEADER))
    #: the access-and-error scan, run ahead where a core is free
    prescan = staticmethod(prescan)

    def __init__(self) -> None:
        self.model = UNKNOWN_MODEL
        self._stats = Stats()  # the engines' last stats lines, and the clock of the line stamps
        self._started: dict[str, int] = {}
        self._preempt_total = 0
        self._startup = Startup()
        self._records = Records()
        self._routes = RouteLabels(ROUTES)
        self._caps = Capabilities()
        self._crashes = Crashes(self._records)
        self._seg_stats = 0
        self._rare = P.RARE
        self._more_lines = 0  # lines after the first of the matched multi-line records, per batch
        self._requests = Requests()
        self._ok = OkSource(self._requests)
        self._generation = Generation()
        self._rare_lines = RareLines(self._records, self._caps, self._requests, self._stats)
        #: the last record read was an error record: lines that continue a record at the start of the
        #: next text are its rest (its writer paused longer than a record is held), not a new error
        self._error_open = False  # the last text ended in an error record (more of it may come)
        self._after_exception = False  # ... with an exception line (a traceback next is another error)

    def state(self) -> dict[str, object]:
        """What a restart of logmetrics must go on with, so that it counts what one run would: the
        served model and readiness (``backend_ready`` is a gauge, not in the saved counters), the
        routes learned, a start or crash or shutdown under way (each counts once), the engines'
        last stats lines (the next line's tokens), the source of each exact series, the requests
        in flight (their durations) and V0's cumulative preemptions. All bounded (``MAX_SAVED``)."""
        return {**super().state(), "routes": self._routes.dump(), "startup": self._startup.dump(),
                "crashes": self._crashes.dump(), "stats": self._stats.dump(), "requests": self._requests.dump(),
                "ok_source": self._ok.source, "generation": self._generation.dump(),
                "started": list(self._started.items())[-MAX_SAVED:], "preempt_total": self._preempt_total,
                "caps": sorted(self._caps.caps), "models": self._caps.counted.dump(),
                "error_open": self._error_open, "after_exception": self._after_exception}

    def restore(self, state: dict[str, object]) -> None:
        """Take back what ``state`` gave in an earlier run; what is missing or malformed starts afresh."""
        super().restore(state)
        self._routes.load(state.get("routes"))
        self._startup.load(state.get("startup"))
        self._crashes.load(state.get("crashes"))
        self._stats.load(state.get("stats"))
        self._requests.load(state.get("requests"))
        self._ok.load(state.get("ok_source"))
        self._generation.load(state.get("generation"))
        started = state.get("started")
        if isinstance(started, list):
            self._started.update((row[0], row[1]) for row in started[-MAX_SAVED:] if isinstance(row, list)
                                 and len(row) == 2 and isinstance(row[0], str) and type(row[1]) is int)
        preempt_total = state.get("preempt_total")
        if type(preempt_total) is int:
            self._preempt_total = preempt_total
        max_log_len = state.get("max_log_len")  # (saved at the top level by earlier versions)
        if type(max_log_len) is int:
            self._requests.max_log_len = max_log_len
        self._error_open = state.get("error_open") is True
        self._after_exception = state.get("after_exception") is True
        caps = state.get("caps")
        if isinstance(caps, list):
            self._caps.can(*(cap for cap in caps if isinstance(cap, str) and cap in ZERO_SERIES))
        self._caps.counted.load(state.get("models"))
        if self._caps.has(V1_REQUESTS):  # (what ``_segment`` switches to once the log shows it)
            self._rare = P.RARE_KNOWN

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

    def parse(self, record: Record) -> list[Event]:
        """Events of one record: the batch scan run on a one-record text."""
        self._caps.counted.passed = []
        return self._scan(record.text, record.time if record.time is not None else 0.0)[0]

    def parse_batch(self, batch: Batch) -> tuple[list[Event], int, int, list[str]]:
        """Events of a batch of whole records, how many records produced one, their lines, and the
        models it counted for: every model counted so far when the batch showed a new kind of series
        (their zero series grow with it, as in a read of the whole log at once)."""
        self._more_lines = 0
        counted = self._caps.counted
        counted.passed = []
        caps = len(self._caps.caps)
        events, matched = self._scan(batch.text, batch.time, batch.pre)
        models = counted.passed if len(self._caps.caps) == caps else [*counted.models, *counted.passed]
        return events, matched, matched + self._more_lines, models

    def zero_series(self, model: str) -> list[ZeroSeries]:
        """Only the series the log seen so far can move (``vllm_zeros``)."""
        return self._caps.zero_series(model)

    # -- the scan ---------------------------------------------------------------------------

    def _scan(self, text: str, now: float, pre: object = None) -> tuple[list[Event], int]:
        """The events of ``text`` and how many records matched; ``pre``: what ``prescan`` gave for it."""
        t = scanned(text)
        self._stats.clock.at(now)
        rare, aborted = tally(Counter(self._rare.findall(t)))
        if any(key in P.STARTUP_KEYS or "\u2580" <= key[-1:] <= "\u259f" for key in rare):
            found = [*P.STARTUP.finditer(t), *P.LOGO_MODEL.finditer(t)]
            cuts = sorted({c for m in found if (c := record_head(t, t.rfind("\n", 0, m.start()))) > 0})
            if cuts:  # a start-up may name a new model: what follows it is scanned with that model
                return self._pieces(t, cuts, now)
        events: list[Event] = []
        records = self._records
        records.clear()
        if "Route" in rare:  # the routes the server lists at start-up
            for path in P.ROUTE.findall(t):
                self._routes.learn(path)
        fatal: list[Fatal] = []
        errors: Counter[str] = Counter()
        joined = self._error_open and not (self._after_exception and P.TRACEBACK_FIRST.match(t))
        self._error_open = ends_in_error(t, joined)
        self._after_exception = self._error_open and ends_after_exception(t)
        matched = access_and_errors(t, pre if isinstance(pre, Digest) else digest(t), events, records,
                                    self._routes, fatal, errors, joined)
        ok, client = access_outcomes(events)
        if starts_with_rest(t, joined):  # the rest of a record: of the error record that ended the text
            error_type, more = headless(t)  # before (``joined``), else of one whose start was not read
            self._more_lines += more
            if not joined and error_type in P.FATAL_TYPES:  # counted once per crash, as any fatal error
                fatal.append(Fatal(0, error_type, True))
            else:
                if not joined:
                    errors[error_type] += 1
                matched += 1
        fatal.sort()
        fatal, stopped = self._crashes.shutdown(t, rare, fatal, self.model, events)
        matched += stopped
        f = 0
        controls: list[Mark] = []
        life: list[Mark] = []
        after: list[Event] = []
        items: list[Item] = []
        ok, finished = self._ok.decide(t, ok, rare[P.FINISHED] + rare[P.FINISHED_V0])
        ended = (0, 0, 0)  # aborted ids, aborted lines, failed lines: counted without positions
        if rare or records.life or self._requests.outputs:
            ended = self._rare_lines.find(t, rare, aborted, controls, items, life)
            if life:
                live = bool(self._stats.engines) or self.model != UNKNOWN_MODEL
                n, self.ready, first, last = life_marks(t, life, self.model, self.ready, live, self._records.dynamic)
                matched += n
                events += first
                after += last
            if controls and finished:  # count them per segment
                items.extend(Item(m.start(), Kind.FINISHED, "", 0) for m in P.FINISHED_AT.finditer(t))
                finished = 0
            items.sort()
        ready_at = [pos for pos, kind, _ in life if kind == Control.READY]  # (life is left only without start-ups)
        start = k = 0
        for pos, kind, value in [*controls, Mark(len(t), Control.END, "")]:
            end = t.rfind("\n", 0, pos) if kind is not Control.END else pos
            k_end = bisect_left(items, end, k, key=itemgetter(0))  # the segment's items and fatal errors
            f_end = bisect_left(fatal, end, f, key=itemgetter(0))
            served: list[int] | None = [] if f_end > f else None
            matched += self._segment(t, start, end, items[k:k_end], finished, ended, events, served)
            finished, ended = 0, (0, 0, 0)
            k = k_end
            if served is not None:
                if ready_at:
                    served = sorted(served + ready_at)
                matched += self._crashes.count(fatal[f:f_end], served, self.model, events)
                f = f_end
            elif self._seg_stats or ready_at:  # serving again: a crash before is over
                self._crashes.crash = False
            if kind not in (Control.END, Control.MODEL_ONLY, Control.STOPPED, Control.DEAD):
                self._crashes.crash = False  # a start-up or ready line: a crash is over
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
            self._caps.can("tokens", "preempt") if stats.preempt_field or stats.any_v0 else self._caps.can("tokens")
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
                        self._caps.can(*caps)
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
                if self._caps.has(caps):
                    continue
                self._caps.can(*caps)
                out.append(SEEN)  # the line shows which series can move
                if self._caps.has(V1_REQUESTS):  # V1's Added lines have nothing more to tell
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
            if count:  # finished lines are counted by the access lines if those came first (``OkSource``)
                counted = 0 if outcome == "ok" and self._ok.source == "access" else count
                out.append(Event("llm_requests_total", (*model, outcome), counted, rule="lifecycle"))
        for rule, prompt_tokens, gen_tokens, seen in stats.tokens:
            if seen:
                if p_from:
                    out.append(Event("llm_prompt_tokens_total", model, prompt_tokens, rule=rule))
                if g_from:
                    out.append(Event("llm_generation_tokens_total", model, gen_tokens, rule=rule))
        self._generation.merge(self.model, out)
        if stats.preempted:
            out.append(Event("llm_preemptions_total", model, stats.preempted, rule="stats_v1"))
        if gauge_rule:
            self._stats.gauges(model, gauge_rule, out)
        if out:
            self._caps.moves(self.model)
            events.extend(out)
        return matched

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
            self._caps.can("preempt")  # V0's scheduler warns per preemption
        if model and kind != Control.LOGO and "disable_log_stats=True" not in value and \
                "'disable_log_stats': True" not in value:
            self._caps.can("tokens")
        if model:
            self.model = model
            if kind != Control.LOGO:  # the logo may show the path; the served name follows in the args
                if self._caps.moves(model):  # the line's news: which series can move
                    events.append(SEEN)
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
