"""Text embeddings: LeapfrogAI's text-embeddings backend, Hugging Face text-embeddings-inference
(TEI) and infinity.

LeapfrogAI's lines (its own format, ``parsers.leapfrog``, or Python's default) pair in order, as it
logs no request id (``parsers.pairs``); TEI's lines and request spans are read by
``parsers.embeddings_tei``; infinity's ``rich`` records and uvicorn lines here. What each server's
log gives: docs/parsers.md, "Text embeddings".
"""

from __future__ import annotations

import math
import re
from collections.abc import Iterable
from functools import partial
from typing import ClassVar

from logmetrics import lazyre
from logmetrics.events import SEEN, UNKNOWN_MODEL, Event
from logmetrics.plugins import Parser, ZeroSeries
from logmetrics.plugins.fastpath import Run
from logmetrics.records import Record
from logmetrics.records.shapes import DEFAULT_SHAPES, EXCEPTION_LINE, Shape
from logmetrics.store.catalog import DURATION_BUCKETS, Family

from .common import PY_DEFAULT_LINE, UVICORN, RouteLabels, access_answer, access_labels, model_label
from .embeddings_batch import FREQUENT, Requests, read_run
from .embeddings_tei import CLIENT_TYPES, PHRASES, REQUEST_SPANS, TeiLine, duration, model_from_args, tei_line
from .embeddings_tei import MARK as TEI_MARK
from .errors import ErrorEnd, is_traceback, restarts_and_errors, traceback_after
from .leapfrog import leapfrog_line

PHASE_BUCKETS = (0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0)
PHASES = (("queue_time", "embeddings_queue_duration_seconds"),
          ("inference_time", "embeddings_inference_duration_seconds"),
          ("tokenization_time", "embeddings_tokenization_duration_seconds"))

#: How a Rust program reports a fatal error (``Error: x`` then ``Caused by:`` and its indented
#: causes, maybe a backtrace) and a panic's note: one record with the line above them. (A bare
#: ``Error:`` is no Python exception line: it starts a record of its own.)
RUST_ERROR = Shape("rust_error", lines=r"Caused by:|[Ss]tack backtrace:|note: run with `RUST_BACKTRACE")
_EXC_FIRST = lazyre.compile(EXCEPTION_LINE)
_START = lazyre.compile(r"processing CreateEmbedding request: char-length: \d+")
_DONE = lazyre.compile(r"finished processing CreateEmbedding request, created (\d+) embeddings")
_ST_MODEL = lazyre.compile(r"Load pretrained SentenceTransformer: (\S+)")
_FATAL = lazyre.compile(r"Error: |thread '[^'\n]*' panicked at ")
_SNIFF_TEI = r"\s(?:INFO|WARN|ERROR|DEBUG)\s.*text_embeddings_(?:router|core|backend)|\"target\":\"text_embeddings_"
_SNIFF_LFAI = r"CreateEmbedding request|load INSTRUCTOR_Transformer|Load pretrained SentenceTransformer"

#: The routes of an embeddings request (OpenAI's ``/v1/embeddings``, infinity's ``/embeddings``).
EMBEDDINGS_ROUTES = ("/embeddings", "/embed")

#: A line of Python's ``rich`` log handler (infinity): ``INFO     2024-05-02 09:14:03,101 <message>``
#: then, right-aligned, ``file.py:84``; a long message goes on over indented lines (one record).
_RICH = lazyre.compile(r"(DEBUG|INFO|WARNING|ERROR|CRITICAL) +\d{4}-\d\d-\d\d \d\d:\d\d:\d\d,\d{3} ")
_RICH_SOURCE = lazyre.compile(r"\s{2,}[\w.-]+\.py:\d+\s*$")
#: infinity: ``infinity_emb INFO: Creating 1 engines: ['bge-small']``: the served model names.
_ENGINES = lazyre.compile(r"Creating \d+ engines?: \[([^\]]*)\]")
_UVICORN_LIFE = lazyre.compile("INFO: +({})".format("|".join(
    map(re.escape, (UVICORN.started, UVICORN.ready[0], *UVICORN.stopping)))))


def rich_message(text: str) -> tuple[str, str] | None:
    """``(level, message)`` of a ``rich`` handler's record, its lines joined (``None`` for another format)."""
    m = _RICH.match(text)
    if m is None:
        return None
    first, _, rest = text[m.end():].partition("\n")
    parts = [_RICH_SOURCE.sub("", first).strip(), *(line.strip() for line in rest.split("\n"))]
    return m.group(1), " ".join(p for p in parts if p)


class EmbeddingsParser(Parser):
    """LeapfrogAI's text-embeddings backend and Hugging Face text-embeddings-inference."""

    name: ClassVar[str] = "embeddings"
    claims: ClassVar[tuple[str, ...]] = ("*text-embeddings*", "*text_embeddings*", "*embeddings-inference*")
    shapes: ClassVar[tuple[Shape, ...]] = (*DEFAULT_SHAPES, RUST_ERROR)
    process_names: ClassVar[tuple[str, ...]] = ("text-embeddings-router", "text-embeddings", "text_embeddings",
                                                "infinity_emb")
    #: TEI's own targets and LeapfrogAI's CreateEmbedding lines; InstructorEmbedding.
    sniffs = ((0.95, rf"{_SNIFF_TEI}|CreateEmbedding request"), (0.5, _SNIFF_LFAI))
    frequent: ClassVar[str] = FREQUENT
    metrics: ClassVar[tuple[Family, ...]] = (
        Family("embeddings_queue_duration_seconds", "histogram", ("model",),
               "Time a text-embeddings-inference request waited in the queue (its span's queue_time).",
               PHASE_BUCKETS),
        Family("embeddings_inference_duration_seconds", "histogram", ("model",),
               "Model inference time of a text-embeddings-inference request (inference_time).", DURATION_BUCKETS),
        Family("embeddings_tokenization_duration_seconds", "histogram", ("model",),
               "Tokenization time of a text-embeddings-inference request (tokenization_time).", PHASE_BUCKETS),
    )

    def __init__(self) -> None:
        self.model = UNKNOWN_MODEL
        self._requests = Requests()
        self._pairs = self._requests.pairs
        self._is_tei = False  # the stream is TEI's (it logs no embeddings count)
        self._starting = False  # a start-up was counted and the server has not been ready since
        self._routes = RouteLabels()
        self._infinity = False  # the stream is infinity's (it logs no embeddings count)
        self._error_end = ErrorEnd()

    # -- across a restart of logmetrics ------------------------------------------------------

    def state(self) -> dict[str, object]:
        """What a restart of logmetrics must go on with, so that it counts what one run would: the
        model and readiness, the kind of stream, a start-up under way, the requests in flight
        (their durations), the routes learned and an error record under way."""
        requests = self._requests
        return {**super().state(), "flags": [self._is_tei, self._starting, self._infinity],
                "open": requests.pairs.dump(), "seq": requests.seq, "offset": requests.offset,
                "routes": self._routes.dump(), "error_end": self._error_end.dump()}

    def restore(self, state: dict[str, object]) -> None:
        """Take back what ``state`` returned; what is missing or malformed starts afresh."""
        super().restore(state)
        flags = state.get("flags")
        if isinstance(flags, list) and len(flags) == 3:
            self._is_tei, self._starting, self._infinity = (flag is True for flag in flags)
        requests = self._requests
        requests.pairs.load(state.get("open"))
        seq, offset = state.get("seq"), state.get("offset")
        if type(seq) is int:
            requests.seq = seq
        if isinstance(offset, (int, float)) and math.isfinite(offset):
            requests.offset = float(offset)
        self._routes.load(state.get("routes"))
        self._error_end.load(state.get("error_end"))

    # -- what came before reading began ----------------------------------------------------

    def learn(self, text: str) -> None:
        """Model and readiness from the lines logged before reading began (no events)."""
        for line in text.split("\n"):
            tei = tei_line(line) if TEI_MARK in line else None
            if tei is not None:
                model = model_from_args(tei.msg) if tei.msg.startswith("Args {") else None
                if model:
                    self.model = model_label(model) or self.model
                    self.ready = False
                elif tei.msg == "Ready":
                    self.ready = True
                elif "graceful shutdown" in tei.msg:
                    self.ready = False
                continue
            m = _ST_MODEL.search(line)
            if m:
                self.model = model_label(m.group(1)) or self.model
            engines = _ENGINES.search(line) if "engine" in line else None
            if engines is not None:  # infinity's start-up (its message wrapped onto a line of its own)
                self.model = _served(engines) or self.model
                self.ready = False
            if "load INSTRUCTOR_Transformer" in line or "Shutdown signal received" in line:
                self.ready = False
            elif "Starting server. Listening on" in line:
                self.ready = True

    # -- records -----------------------------------------------------------------------------

    def parse(self, record: Record) -> Iterable[Event]:
        """Events of one record: a TEI line, a LeapfrogAI line, an access line or an error (the
        rest of the error record before, cut off by a read pause, counts with it)."""
        return self._error_end.parse(record.text, partial(self._events, record))

    def _events(self, record: Record) -> list[Event]:
        text = record.text
        events: list[Event] = []
        tei = tei_line(text) if TEI_MARK in text else None
        if tei is not None:
            self._is_tei = True
            self._tei(tei, text, events)
        else:
            self._other(record, events)
        return events

    def parse_run(self, run: Run) -> tuple[list[Event], int]:
        """A run of frequent lines at once (``embeddings_batch.read_run``): what ``parse`` gives on each."""
        self._error_end.clear()
        got = read_run(run, self.model, self._requests)
        if got is None:
            return super().parse_run(run)
        events, n, tei, started = got
        self._is_tei = self._is_tei or tei
        self._starting = self._starting and not started
        return events, n

    def tick(self, now: float) -> Iterable[Event]:
        """Requests whose finish line never came are dropped after the time-out."""
        return self._pairs.events() if self._pairs.expire(now - self._requests.offset) else ()

    def zero_series(self, model: str) -> Iterable[ZeroSeries]:
        """Restarts, every error type, ``ok`` and ``error`` requests; embeddings where LeapfrogAI's
        backend logs them (not TEI)."""
        zeros = restarts_and_errors(model, PHRASES.types)
        zeros += [("llm_requests_total", (model, "ok")), ("llm_requests_total", (model, "error"))]
        if self._is_tei:
            zeros += [("llm_client_errors_total", (model, kind)) for kind in sorted(set(CLIENT_TYPES.values()))]
        if not self._is_tei and not self._infinity:
            zeros.append(("llm_embeddings_total", (model,)))
        return zeros

    # -- TEI -----------------------------------------------------------------------------------

    def _tei(self, tei: TeiLine, text: str, events: list[Event]) -> None:
        msg = tei.msg
        if tei.level == "ERROR":
            kind = PHRASES.classify(text)
            if kind in CLIENT_TYPES:  # the client's fault: neither a backend error nor a failed request
                events.append(Event("llm_client_errors_total", (self.model, CLIENT_TYPES[kind]), 1, rule="tei_error"))
                return
            events.append(Event("backend_errors_total", (self.model, kind), 1, rule="tei_error"))
            if tei.spans and (tei.spans[0] in REQUEST_SPANS or tei.spans[0].endswith("_inner")):
                events.append(Event("llm_requests_total", (self.model, "error"), 1, rule="tei_error"))
            return
        total = tei.fields.get("total_time")
        if msg == "Success" and total is not None:
            model = (self.model,)
            events.append(Event("llm_requests_total", (self.model, "ok"), 1, rule="tei_success"))
            seconds = duration(total)
            if seconds is not None:
                events.append(Event("llm_request_duration_seconds", model, seconds, rule="tei_success"))
            for field, metric in PHASES:
                value = tei.fields.get(field)
                seconds = duration(value) if value is not None else None
                if seconds is not None:
                    events.append(Event(metric, model, seconds, rule="tei_success"))
            tokens = tei.fields.get("compute_tokens", "")
            if tokens.isdigit():
                events.append(Event("llm_prompt_tokens_total", model, int(tokens), rule="tei_success"))
        elif msg.startswith("Args {"):
            model_id = model_from_args(msg)
            self._start(events)
            if model_id:
                self.model = model_label(model_id) or self.model
        elif msg == "Ready":
            self._up(events)
        elif "starting graceful shutdown" in msg:
            self._down(events)

    # -- LeapfrogAI and the rest -----------------------------------------------------------------

    def _other(self, record: Record, events: list[Event]) -> None:
        text = record.text
        line = leapfrog_line(text)
        level, msg, own_time = "", text.split("\n", 1)[0], None
        if line is not None:
            level, msg, own_time = line.level, line.msg, line.time
        else:
            m = PY_DEFAULT_LINE.match(text)
            rich = None if m else rich_message(text)
            if m:
                level, msg = m.group(1), m.group(3)
            elif rich is not None:
                level, msg = rich
            elif self._uvicorn(text, events):
                if traceback_after(text):
                    self._error(text, True, record.time, events)
                return
        engines = _ENGINES.search(msg) if "engine" in msg else None
        if engines is not None:  # infinity's start-up names the models it serves (the first is the label)
            self._infinity = True
            self._start(events)
            self.model = _served(engines) or self.model
            events.append(Event("backend_ready", (self.model,), 0, rule="model"))
            return
        t = own_time if own_time is not None else record.time
        if own_time is not None and record.time is not None:
            self._requests.offset = record.time - own_time
        if "CreateEmbedding request" in msg:
            self._request(msg, t, own_time is not None, events)
            if level not in ("ERROR", "CRITICAL"):
                return
        m = None if self._infinity else _ST_MODEL.search(msg)  # (infinity named its served model before)
        if m:  # the model InstructorEmbedding serves (its zero series start)
            self.model = model_label(m.group(1)) or self.model
            events.append(SEEN)
        if "load INSTRUCTOR_Transformer" in msg or "Initializing LeapfrogAI" in msg:
            self._start(events)
        elif "Starting server. Listening on" in msg:
            self._up(events)
        elif "Shutdown signal received" in msg or "Server has been shut down" in msg:
            self._down(events)
        if line is None and (level == "" or " HTTP/" in msg):  # (Python's default format: INFO:uvicorn.access:)
            access = access_labels(text)
            if access is not None:
                labels = self._routes.fold(access)
                events.append(Event("http_requests_total", labels, 1, rule="access"))
                self._answer(access[2], labels[1], events)
                if traceback_after(text):
                    self._error(text, True, t, events)
                return
        traceback = is_traceback(text)
        if level in ("ERROR", "CRITICAL") or traceback or (not level and _EXC_FIRST.match(text)) \
                or (not level and _FATAL.match(text)):
            self._error(text, traceback, t, events)

    def _answer(self, code: str, route: str, events: list[Event]) -> None:
        """What an access line says of a request (infinity and other servers under uvicorn): a 4xx is
        the client's error, by type; on an embeddings route a 2xx is a request ``ok``, a 5xx ``error``."""
        answer = access_answer(code, route, route.endswith(EMBEDDINGS_ROUTES))
        if answer is not None:
            metric = "llm_client_errors_total" if answer[0] else "llm_requests_total"
            events.append(Event(metric, (self.model, answer[1]), 1, rule="access"))

    def _uvicorn(self, text: str, events: list[Event]) -> bool:
        """uvicorn's start-up, readiness and shutdown lines (infinity runs under it)."""
        life = _UVICORN_LIFE.match(text)
        if life is None:
            return False
        word = life.group(1)
        if word.startswith("Started"):
            self._start(events)
        elif word.startswith("Application"):
            self._up(events)
        elif self.ready:
            self._down(events)
        else:
            return False
        return True

    def _request(self, msg: str, t: float | None, timed: bool, events: list[Event]) -> None:
        if _START.search(msg):
            self._starting = False
            self._requests.start(self.model, t if timed and t is not None else 0.0, t)
            events.extend(self._pairs.events())
            return
        done = _DONE.search(msg)
        if done is None:
            return
        model, took = self._requests.finish(self.model, t if timed else None)
        events.append(Event("llm_embeddings_total", (model,), int(done.group(1)), rule="lfai_done"))
        events.append(Event("llm_requests_total", (model, "ok"), 1, rule="lfai_done"))
        if took is not None:
            events.append(Event("llm_request_duration_seconds", (model,), took, rule="lfai_done"))
        events.extend(self._pairs.events())

    def _error(self, text: str, traceback: bool, t: float | None, events: list[Event]) -> None:
        kind = PHRASES.classify(text, request_handler=bool(self._pairs.open), traceback=traceback)
        events.append(Event("backend_errors_total", (self.model, kind), 1, rule="error"))
        if _FATAL.match(text):
            self._down(events)
            return
        began = self._pairs.finish() if self._pairs.open else None
        if began is not None:
            events.append(Event("llm_requests_total", (began[0], "error"), 1, rule="error"))
            events.extend(self._pairs.events())

    # -- life ----------------------------------------------------------------------------------

    def _start(self, events: list[Event]) -> None:
        """A start-up line: counted once per start-up; the old server, if any, is gone."""
        if self._starting:
            return
        self._down(events)
        self._starting = True
        events.append(Event("backend_restarts_total", (), 1, rule="startup"))

    def _up(self, events: list[Event]) -> None:
        self.ready = True
        self._starting = False
        events.append(Event("backend_ready", (self.model,), 1, rule="ready"))

    def _down(self, events: list[Event]) -> None:
        """Not ready any more; said only of a server known to have been up or to serve a model."""
        if self.ready or self.model != UNKNOWN_MODEL:
            events.append(Event("backend_ready", (self.model,), 0, rule="down"))
        self.ready = self._starting = False
        if self._pairs.open:
            self._pairs.clear()
            events.extend(self._pairs.events())


def _served(engines: re.Match[str]) -> str | None:
    """The model label of infinity's ``Creating N engines: ['a', 'b']`` line: the first name."""
    names = re.findall(r"'([^'\n]+)'", engines.group(1))
    return model_label(names[0]) if names else None
