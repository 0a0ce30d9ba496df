"""The llama.cpp parser's whole-chunk path: one scan of a batch with ``llamacpp_patterns.SCAN``.

The frequent records of llama-server (timing blocks, slot start and release lines, request lines,
``kv cache rm``, ``all slots are idle``) are read from the scan's match groups; the records that
say nothing (prompt progress, new prompt, prompt done, the chat format) are skipped inside the
regular expression and never reach Python code; every other record goes to ``parse``, in line
order, so that the state it reads and changes (the model, open requests, the timing block, the
last failed decode) is the one record-by-record parsing would have. Counters are summed over the
batch (one event per label set), histograms one event per series with its observations (a
tuple), and the running-requests gauge is given once per run of frequent records (its last value is what counts).
"""

from __future__ import annotations

from collections import Counter, OrderedDict
from typing import Protocol

from logmetrics.events import Event
from logmetrics.records import Record

from . import llamacpp_patterns as P
from .common import HTTP_METHODS, Counted, RouteLabels, remember, route_template
from .llamacpp_errors import Errors, client_type
from .pairs import Pairs

#: Open timing blocks kept (by task) while their lines come one by one; the oldest is dropped.
MAX_OPEN_TIMINGS = 1024
LIB_KEY = "lib"  # timing blocks without an id: one at a time
#: Match groups (``llamacpp_patterns.SCAN``) that close each kind of record.
BLOCK, BLOCK_E, LAUNCH, RELEASE, KV, REQUEST, IDLE, CLIENT, OTHER = 8, 16, 17, 18, 19, 22, 23, 26, 27
ROUTE_CACHE_MAX = 1024


class Timing:
    """The lines of one request's timing block seen so far."""

    __slots__ = ("prompt_ms", "tpot_ms")

    def __init__(self) -> None:
        self.prompt_ms: float | None = None
        self.tpot_ms: float | None = None


class LlamaStream(Protocol):
    """What the scan reads and updates of the llama.cpp parser of one stream (``LlamaCppParser``)."""

    model: str
    _pairs: Pairs
    _timings: OrderedDict[str, Timing]
    _routes: RouteLabels
    _route_labels: dict[tuple[str, ...], tuple[str, str, str]]
    _server: bool
    _errors: Errors
    _block_key: str
    _counted: Counted

    def parse(self, record: Record) -> list[Event]: ...
    def _counts(self, out: list[Event]) -> None: ...


#: The counters of a batch, summed: (metric, labels) -> value.
Sums = Counter[tuple[str, tuple[str, ...]]]


class _Run:
    """What a run of frequent records (between two other records) adds up to."""

    __slots__ = ("cached", "client", "gen", "http", "kv", "ok", "pairs", "prompt")

    def __init__(self, prompt: int, gen: int, ok: int, cached: int, kv: int, http: dict[tuple[str, str, str], int],
                 pairs: bool, client: dict[str, int]) -> None:
        self.prompt, self.gen, self.ok, self.cached, self.kv, self.http, self.pairs, self.client = (
            prompt, gen, ok, cached, kv, http, pairs, client)


def scan(parser: LlamaStream, text: str, t: float) -> tuple[list[Event], int, int]:
    """Events of a batch of whole records, how many records gave one, and their lines."""
    if not text.endswith("\n"):
        text += "\n"
    events: list[Event] = []  # in line order: other records' events, observations, the gauge
    sums: Sums = Counter()  # the runs' counters, given once at the end (counters do not depend on order)
    matched = lines = 0
    pos = 0
    pairs = parser._pairs
    if pairs.open and pairs.expire(t):
        # record by record, the first record carries the time-outs: parse it that way
        first = P.FIRST_RECORD.match(text)
        assert first is not None  # a text of whole lines: its first line is a record
        pos = first.end()
        record = _clean(first.group(1))
        out = pairs.events() + (parser.parse(Record(record, t)) if record else [])
        parser._counts(out)
        events += out
        matched, lines = 1, record.count("\n") + 1
    timings = parser._timings
    routes = parser._routes
    cache = parser._route_labels
    add = events.extend
    # the blocks' observations per model (duration, TTFT, TPOT): one event per histogram series
    obs: dict[str, tuple[list[float], list[float], list[float]]] = {}
    # the run in progress, in locals: records that gave events, token sums, blocks, cache lines
    produced = prompt = gen = ok = cached = kv = 0
    http: dict[tuple[str, str, str], int] = {}
    client: dict[str, int] = {}
    touched = False  # the run started, released or cleared requests
    for m in P.SCAN.finditer(text, pos):
        kind = m.lastindex
        if not parser._server and (text[m.start():m.start(OTHER) if kind == OTHER else m.end()].strip()
                                   if kind is None or kind == OTHER else True):
            parser._server = True  # a llama-server line read here (the skipped ones too), as parse would
        if kind == REQUEST:
            key = m.group(20, 21, 22)
            labels = cache.get(key)
            if labels is None:
                method, path, code = key
                labels = routes.fold(((method if method in HTTP_METHODS else "OTHER"), route_template(path), code))
                if labels[1] in routes.known:  # a known route keeps its labels
                    remember(cache, key, labels, ROUTE_CACHE_MAX)
            http[labels] = http.get(labels, 0) + 1
            produced += 1
        elif kind == LAUNCH:
            parser._errors.after_decode = False
            pairs.start("slot " + m.group(17), parser.model, t)
            touched = True
            produced += 1
        elif kind == RELEASE:
            pairs.finish("slot " + m.group(18))
            touched = True
            if pairs.models:
                produced += 1
        elif kind == BLOCK or kind == BLOCK_E:
            if kind == BLOCK:
                task, pms, pn, en, eper, tms = m.group(1, 2, 3, 6, 7, 8)
                parser._block_key = LIB_KEY
                lines += 3  # and one below: the block is one record of four lines
            else:
                task, pms, pn, en, eper, tms = m.group(9, 10, 11, 14, 15, 16)
                produced += 2  # and one below: three records of one line each
                if parser._block_key == f"task {int(task)}":
                    parser._block_key = LIB_KEY
            if timings:
                _forget(parser, task)
            parser._errors.after_decode = False
            prompt += int(pn)
            gen += int(en)
            ok += 1
            got = obs.get(parser.model)
            if got is None:
                got = obs[parser.model] = ([], [], [])
            got[0].append(float(tms) / 1000.0)
            got[1].append(float(pms) / 1000.0)
            got[2].append(float(eper) / 1000.0)
            produced += 1
        elif kind == KV:
            cached += int(m.group(19))
            kv += 1
            produced += 1
        elif kind == IDLE:
            pairs.clear()
            touched = True
            if pairs.models:
                produced += 1
        elif kind == CLIENT:
            ctype = client_type(m.group(26), m.group(25))
            client[ctype] = client.get(ctype, 0) + 1
            produced += 1
        elif kind == OTHER:
            if produced:
                matched += produced
                lines += produced
                _flush(parser, _Run(prompt, gen, ok, cached, kv, http, touched, client), events, sums)
                produced = prompt = gen = ok = cached = kv = 0
                http = {}
                client = {}
                touched = False
            record = _clean(m.group(27))
            if record:
                out = parser.parse(Record(record, t))
                if out:
                    add(out)
                    matched += 1
                    lines += record.count("\n") + 1
    if produced:
        matched += produced
        lines += produced
        _flush(parser, _Run(prompt, gen, ok, cached, kv, http, touched, client), events, sums)
    add(Event(metric, labels, value, rule=RULES[metric]) for (metric, labels), value in sums.items())
    for name, got in obs.items():
        add(Event(metric, (name,), tuple(values), rule="timing")
            for metric, values in zip(HISTOGRAMS, got, strict=True))
    return events, matched, lines


def _clean(record: str) -> str:
    """A record's text as the records stage gives it: no empty lines, no final newline."""
    if "\n\n" in record or record.startswith("\n"):
        return "\n".join(line for line in record.split("\n") if line)
    return record[:-1] if record.endswith("\n") else record


def _forget(parser: LlamaStream, task: str) -> None:
    """A whole timing block ends its task's open block, as its lines would one by one (a new
    block beyond the bound pushes the oldest open one out first)."""
    key = f"task {int(task)}"
    timings = parser._timings
    if key in timings:
        del timings[key]
    elif len(timings) >= MAX_OPEN_TIMINGS:
        timings.popitem(last=False)


HISTOGRAMS = ("llm_request_duration_seconds", "llm_time_to_first_token_seconds", "llm_time_per_output_token_seconds")
RULES = {"llm_prompt_tokens_total": "timing", "llm_generation_tokens_total": "timing", "llm_requests_total": "timing",
         "llm_cached_prompt_tokens_total": "cache", "http_requests_total": "http",
         "llm_client_errors_total": "client_error"}


def _flush(parser: LlamaStream, run: _Run, events: list[Event], sums: Sums) -> None:
    """A run's counters added to the batch's sums, and its gauge (the model is the run's)."""
    model = (parser.model,)
    if run.ok:
        sums["llm_prompt_tokens_total", model] += run.prompt
        sums["llm_generation_tokens_total", model] += run.gen
        sums["llm_requests_total", (parser.model, "ok")] += run.ok
    if run.kv:
        sums["llm_cached_prompt_tokens_total", model] += run.cached
    for labels, n in run.http.items():
        sums["http_requests_total", labels] += n
    for kind, n in run.client.items():
        sums["llm_client_errors_total", (parser.model, kind)] += n
    if run.pairs and parser._pairs.models:
        events += parser._pairs.events()
    parser._server = True  # every record the scan reads is llama-server's
    parser._counted.add(parser.model)  # the run gave events: they count for its model
