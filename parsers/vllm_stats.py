"""vLLM's periodic stats lines: per-engine gauges and token estimates from the logged throughputs.

``Stats.scan`` reads the stats lines of one segment of a chunk (between two start-up lines) and
integrates the logged average throughputs over the time each line covers (``tokens/s x dt``, dt
from the lines' own ``MM-DD HH:MM:SS`` stamps, read by ``Clock``).

V0 averages over the time since its previous line: the first line of a V0 engine only sets the
baseline, and dt is capped at 60 s. V1 (``LoggingStatLogger``) closes its window on every tick of
its logging loop (``VLLM_LOG_STATS_INTERVAL``, 10 s by default), idle ticks included (those are
logged at DEBUG), so every V1 line after an engine's first covers exactly one interval, whatever
its stamp says (the stamps are cut to the second, so 10 and 11 s alternate around the true 10 s):
the shortest time seen between two of the engine's lines, else the default.
The first window of a V1 engine opens when the API server builds its engine client, which it
logs as ``Supported tasks`` (``Stats.origin``): the first line covers the time since then (at least
one interval) when it is the first tick (less than two intervals after that line); a first line
later than that is a later tick (the idle ones before it were logged at DEBUG): one interval, as
without that line in view.

``Stats.gauges`` follows the last stats line of each engine; with several engines (data
parallelism) counts and throughputs are summed over the engines and ratios averaged.
"""

from __future__ import annotations

import calendar
import time
from typing import NamedTuple

from logmetrics.events import Event

from . import vllm_patterns as P
from .common import remember

MAX_DT = 60
#: vLLM V1's default ``VLLM_LOG_STATS_INTERVAL``, seconds.
V1_INTERVAL = 10
MAX_ENGINES = 256


def v1_interval(shortest: int) -> int:
    """V1's logging interval from the shortest time seen between two of an engine's lines: ticks
    ``interval`` apart give stamps ``interval`` or ``interval + 1`` apart (each stamp is cut to the
    second), so a shortest of 11 is the default 10 s seen through that cut."""
    if not shortest or shortest == V1_INTERVAL + 1:
        return V1_INTERVAL
    return shortest


class Engine:
    """One engine index: its last stats line (parsed when the gauges are emitted), baseline."""

    __slots__ = ("last", "line", "min_dt", "prefix", "prefix_tail")

    def __init__(self) -> None:
        self.line: tuple[str | None, ...] = ()
        self.prefix_tail = ""
        self.last: int | None = None
        self.min_dt = 0
        self.prefix: float | None = None


class Clock:
    """Seconds of vLLM's year-less ``MM-DD HH:MM:SS`` line stamps, the year inferred from the
    batch's time; memoised per minute."""

    __slots__ = ("minutes", "year_month")

    def __init__(self) -> None:
        self.minutes: dict[str, int | None] = {}
        self.year_month = (0, 0)

    def at(self, now: float) -> None:
        """The batch's time (Unix seconds): the year and month the stamps are read against."""
        tm = time.gmtime(now)
        if (tm.tm_year, tm.tm_mon) != self.year_month:
            self.year_month = (tm.tm_year, tm.tm_mon)
            self.minutes.clear()

    def line_time(self, t: str, pos: int) -> int | None:
        """The time in the vLLM header of the line holding position ``pos``, if it has one."""
        h = P.LINE_TIME.match(t, t.rfind("\n", 0, pos) + 1)
        return self.secs(h.group(1), h.group(2)) if h else None

    def secs(self, minute: str, seconds: str) -> int | None:
        """Seconds of a year-inferred, zone-less clock for ``MM-DD HH:MM`` and ``SS``."""
        base = self.minutes.get(minute, -1)
        if base == -1:
            base = None
            year, month = self.year_month
            mon, dom, hh, mm = int(minute[:2]), int(minute[3:5]), int(minute[6:8]), int(minute[9:11])
            if 1 <= mon <= 12 and 1 <= dom <= 31 and hh < 24 and mm < 60:
                # no year in the line: the one that puts it within six months of the batch's time
                # (December lines read in January are last year's, and the other way round)
                year += (mon - month < -6) - (mon - month > 6)
                base = calendar.timegm((year, mon, dom, hh, mm, 0))
            remember(self.minutes, minute, base)
        return None if base is None else base + int(seconds)


class Scanned(NamedTuple):
    """What the stats lines of one segment gave."""

    lines: int  # stats lines read
    v1: bool  # the last one is a V1 line
    any_v0: bool
    preempt_field: bool  # a V1 line with the ``Preemptions:`` field (0.13+)
    preempted: int  # the sum of those fields
    tokens: tuple[tuple[str, float, float, bool], ...]  # (rule, prompt, generation, seen) for V0 and V1


class Stats:
    """The engines' last stats lines and baselines, and the clock their stamps are read with."""

    __slots__ = ("clock", "engines", "origin")

    def __init__(self) -> None:
        self.engines: dict[str, Engine] = {}
        self.clock = Clock()
        self.origin: int | None = None  # when the engines' first V1 window opened (``Supported tasks``)

    def scan(self, t: str, a: int, b: int, p_from: int, g_from: int, served: list[int] | None) -> Scanned:
        """The stats lines in ``t[a:b]``; tokens integrated only for lines before ``p_from`` (prompt)
        and ``g_from`` (generation). The positions of the lines go to ``served`` if given."""
        p1 = g1 = p0 = g0 = 0.0  # tokens integrated from V1 / V0 lines
        seen1 = seen0 = False
        preempted = lines = 0
        v1 = preempt_field = any_v0 = False
        engines = self.engines
        minutes = self.clock.minutes
        secs_of = self.clock.secs
        head = P.STATS_HEAD.fullmatch
        rfind = t.rfind
        for m in P.STATS_TAIL.finditer(t, a, b):
            start = m.start()
            h = head(t, rfind("\n", 0, start) + 1, start)
            if h is None:  # the text inside some other line (a prompt, a paste)
                continue
            lines += 1
            if served is not None:
                served.append(start)
            line = h.groups() + m.groups()
            minute, seconds, index, agg, prompt, gen, _running, _pending, waiting, rest = line
            key = index or ("agg" if agg else "")
            eng = engines.get(key)
            if eng is None:
                eng = remember(engines, key, Engine(), MAX_ENGINES)
            eng.line = line
            v1 = waiting is not None
            any_v0 = any_v0 or not v1
            if "Prefix cache" in rest:  # 0.33 leaves it out when there were no queries: keep the last one
                eng.prefix_tail = rest
            if v1 and "Preemptions" in rest:
                preempt_field = True
                pm = P.PREEMPTIONS.search(rest)
                preempted += int(pm.group(1)) if pm else 0
            if minute is None:
                continue
            base = minutes.get(minute, -1)
            secs = (None if base is None else base + int(seconds)) if base != -1 else secs_of(minute, seconds)
            if secs is None:
                continue
            last = eng.last
            eng.last = secs
            if last is None:
                if not v1:  # a V0 line only sets the baseline
                    continue
                # V1: the first window opened with the engine client, and closes at the first tick,
                # an interval after the server starts; an idle tick is logged at DEBUG only, so a first
                # line two intervals or more after that is a later tick: one interval.
                interval = v1_interval(eng.min_dt)
                origin = self.origin
                dt = secs - origin if origin is not None and 0 <= secs - origin < 2 * interval else 0
                dt = max(dt, interval)
            elif secs <= last:
                continue
            else:
                dt = secs - last
                if dt < eng.min_dt or (not eng.min_dt and dt <= MAX_DT):  # the shortest: the logging interval
                    eng.min_dt = dt
                if dt > MAX_DT:
                    dt = MAX_DT
                if v1:  # one window, whatever the stamps say: they are cut to the second
                    dt = v1_interval(eng.min_dt)
            if start >= p_from and start >= g_from:
                continue
            if v1:
                p1 += float(prompt) * dt if start < p_from else 0.0
                g1 += float(gen) * dt if start < g_from else 0.0
                seen1 = True
            else:
                p0 += float(prompt) * dt if start < p_from else 0.0
                g0 += float(gen) * dt if start < g_from else 0.0
                seen0 = True
        return Scanned(lines, v1, any_v0, preempt_field, preempted,
                       (("stats_v0", p0, g0, seen0), ("stats_v1", p1, g1, seen1)))

    def dump(self) -> list[object]:
        """What a restart of logmetrics must keep (JSON): each engine's last line, the time of it
        and the shortest time between its lines (the baseline of the next line's tokens), and when
        the engines' first V1 window opened."""
        return [{key: [list(e.line), e.last, e.min_dt, e.prefix] for key, e in self.engines.items()}, self.origin]

    def load(self, data: object) -> None:
        """Take back what ``dump`` gave (anything else is ignored)."""
        if not (isinstance(data, list) and len(data) == 2 and isinstance(data[0], dict)):
            return
        for key, row in list(data[0].items())[:MAX_ENGINES]:
            if not (isinstance(key, str) and isinstance(row, list) and len(row) == 4):
                continue
            line, last, min_dt, prefix = row
            if not (isinstance(line, list) and all(x is None or isinstance(x, str) for x in line)
                    and (not line or len(line) == 10) and (last is None or type(last) is int)
                    and type(min_dt) is int and (prefix is None or isinstance(prefix, (int, float)))):
                continue
            eng = self.engines[key] = Engine()
            eng.line, eng.last, eng.min_dt = tuple(line), last, min_dt
            eng.prefix = None if prefix is None else float(prefix)
        if data[1] is None or type(data[1]) is int:
            self.origin = data[1]

    def v0_prefix(self, value: str) -> None:
        """A V0 ``Prefix cache hit rate: GPU: x%`` line (engine without an index)."""
        self.engines.setdefault("", Engine()).prefix = float(value) / 100.0

    def gauges(self, model: tuple[str], rule: str, out: list[Event]) -> None:
        """One event per gauge: sums over the engines' last lines, ratios averaged."""
        kv: list[float] = []
        prefix: list[float] = []
        running = waiting = 0
        prompt = gen = 0.0
        for e in self.engines.values():
            if e.line:
                p, g, run, pending, wait, rest = e.line[4:]
                running += int(run or 0)
                waiting += int(pending or wait or 0)
                prompt += float(p or 0)
                gen += float(g or 0)
                m = P.KV_USAGE.search(rest or "")
                if m:
                    kv.append(float(m.group(1)) / 100.0)
            if e.prefix_tail:
                m = P.PREFIX_HIT.search(e.prefix_tail)
                if m:
                    e.prefix = float(m.group(1)) / 100.0
                e.prefix_tail = ""
            if e.prefix is not None:
                prefix.append(e.prefix)
        if any(e.line for e in self.engines.values()):
            out.append(Event("llm_requests_running", model, running, rule=rule))
            out.append(Event("llm_requests_waiting", model, waiting, rule=rule))
            out.append(Event("llm_prompt_throughput_tokens_per_second", model, prompt, rule=rule))
            out.append(Event("llm_generation_throughput_tokens_per_second", model, gen, rule=rule))
        if kv:
            out.append(Event("llm_kv_cache_usage_ratio", model, sum(kv) / len(kv), rule=rule))
        if prefix:
            out.append(Event("llm_prefix_cache_hit_ratio", model, sum(prefix) / len(prefix), rule=rule))
