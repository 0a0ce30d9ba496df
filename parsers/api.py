"""FastAPI gateways of an LLM stack: LeapfrogAI's API (``leapfrogai-api``) and the like, served by
uvicorn, alone or as gunicorn workers.

Access lines wherever they start in the line (``common.access_line``), by route template with
scanner noise folded (``common.RouteLabels``); errors, once per record, and the server's life from
the LeapfrogAI (``parsers.leapfrog``), uvicorn, gunicorn and Python default formats. What each
line gives: docs/parsers.md, "FastAPI gateways".
"""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Iterable
from functools import partial
from typing import ClassVar

from logmetrics import lazyre
from logmetrics.events import UNKNOWN_MODEL, Event
from logmetrics.plugins import Parser, ZeroSeries
from logmetrics.plugins.fastpath import Run
from logmetrics.records import Record
from logmetrics.records.shapes import EXCEPTION_LINE

from .common import PROC_PREFIX, PY_DEFAULT_LINE, UVICORN, UVICORN_ACCESS, RouteLabels, access_labels, access_line
from .errors import (
    CHAINS,
    COMMON_CAUSES,
    TRACEBACK_HEAD,
    ErrorEnd,
    Phrases,
    is_traceback,
    python_exception,
    restarts_and_errors,
    traceback_after,
)
from .leapfrog import leapfrog_line

PHRASES = Phrases(
    causes=(
        ("supabase_connect", ("httpx.ConnectError", "supabase", "Supabase", "gotrue", "AuthApiError",
                              "postgrest.exceptions", "All connection attempts failed")),
        ("upstream", ("AioRpcError", "StatusCode.UNAVAILABLE", "StatusCode.INTERNAL",
                      "StatusCode.DEADLINE_EXCEEDED", "failed to connect to all addresses",
                      "Connection refused", "grpc._channel")),
        *COMMON_CAUSES,
    ),
    contexts=(
        ("worker_timeout", ("WORKER TIMEOUT",)),
        ("worker_killed", ("was terminated due to signal", "was sent SIGKILL")),
        ("validation", ("The client sent invalid data",)),
        ("config", ("Failed to load config file", "Unsupported file type", "The config directory")),
        ("not_found", ("model {name} not found", "not found.", "doesn't exist")),
        ("indexing", ("Error indexing file",)),
    ),
)
#: At most this many exception class names become an ``error_type``; later ones are ``exception``.
MAX_EXCEPTION_TYPES = 32

_GUNICORN = lazyre.compile(r"\[\d{4}-\d{2}-\d{2} \d{2}:\d{2}:\d{2} [+-]\d{4}\] \[\d+\] \[([A-Z]+)\] ([^\n]*)")
#: A time a logging config puts before uvicorn's ``LEVEL:`` (``2026-09-09 12:20:52 +0200 ``,
#: ``2026-09-09T12:20:52.123Z ``, ``[2026-09-09 12:20:52,120] ``).
_TIME_PREFIX = lazyre.compile(r"\[?\d{4}-\d\d-\d\d[T ]\d\d:\d\d:\d\d(?:[.,]\d+)?(?: ?(?:Z|[+-]\d\d:?\d\d))?\]? +")
#: The lines of a busy gateway: uvicorn's access line, after an optional time or process prefix
#: (``Parser.frequent``), and what reads a run of them: each request's ``UVICORN_ACCESS`` capture.
FREQUENT = rf"(?:{_TIME_PREFIX.pattern}|{PROC_PREFIX})?{UVICORN_ACCESS}[^\n]*"
_REQUESTS = lazyre.compile(rf"^(?:{_TIME_PREFIX.pattern}|{PROC_PREFIX})?{UVICORN_ACCESS}", re.MULTILINE)
_UVICORN = lazyre.compile(r"(TRACE|DEBUG|INFO|WARNING|ERROR|CRITICAL):\s+([^\n]*)")
_EXC_FIRST = lazyre.compile(EXCEPTION_LINE)
_SNIFF_STRONG = r'"[A-Z]+ /(?:openai|leapfrogai)/v1/|leapfrogai_api[\w.]*: \d{4}-'
_SNIFF_SOME = r"Exception in ASGI application|Using worker: uvicorn|\] \[[A-Z]+\] Booting worker"
_SNIFF_WEAK = r"httpx\.ConnectError|httpcore\.|starlette\.|fastapi\."
_ERROR_LEVELS = ("ERROR", "CRITICAL")
_READY = (*UVICORN.ready, "Listening at: ")


class ApiParser(Parser):
    """LeapfrogAI's API and other FastAPI gateways under uvicorn or gunicorn."""

    name: ClassVar[str] = "api"
    claims: ClassVar[tuple[str, ...]] = ("*leapfrogai-api*", "*leapfrogai_api*", "api", "api.log", "api-*",
                                         "api_*")
    process_names: ClassVar[tuple[str, ...]] = ("leapfrogai_api.main", "leapfrogai-api")
    #: LeapfrogAI API routes or loggers; ASGI tracebacks and gunicorn with uvicorn workers.
    sniffs = ((0.9, _SNIFF_STRONG), (0.6, _SNIFF_SOME), (0.4, _SNIFF_WEAK))
    frequent: ClassVar[str] = FREQUENT

    def __init__(self) -> None:
        self.model = UNKNOWN_MODEL
        self._routes = RouteLabels(fixed=("/healthz", "/docs", "/metrics"),
                                   prefixes=("/openai/v1/", "/leapfrogai/v1/"))
        self._classes: set[str] = set()
        self._error_end = ErrorEnd()

    def state(self) -> dict[str, object]:
        """Readiness and the model, the routes learned, the exception classes counted as error
        types and an error record under way, kept across a restart of logmetrics."""
        return {**super().state(), "routes": self._routes.dump(), "classes": sorted(self._classes),
                "error_end": self._error_end.dump()}

    def restore(self, state: dict[str, object]) -> None:
        """Take back what ``state`` gave; what is missing or malformed starts afresh."""
        super().restore(state)
        self._routes.load(state.get("routes"))
        self._error_end.load(state.get("error_end"))
        classes = state.get("classes")
        if isinstance(classes, list):
            self._classes = {c for c in classes[:MAX_EXCEPTION_TYPES] if isinstance(c, str)}

    def learn(self, text: str) -> None:
        """Readiness from the lines logged before reading began (no events)."""
        for line in text.split("\n"):
            if any(r in line for r in _READY):
                self.ready = True
            elif any(s in line for s in UVICORN.stopping):
                self.ready = False

    @classmethod
    def sniff(cls, lines: list[str]) -> float:
        """``sniffs``; else a little for bare uvicorn access lines (other backends score higher)."""
        return super().sniff(lines) or (0.35 if any(access_line(line) for line in lines) else 0.0)

    def zero_series(self, model: str) -> Iterable[ZeroSeries]:
        """Start-ups and the error types of the phrase table."""
        return restarts_and_errors(model, PHRASES.types)

    # -- records -----------------------------------------------------------------------------

    def parse(self, record: Record) -> Iterable[Event]:
        """Events of one record: an access line, a log line of the server's life, or an error (the
        rest of the error record before, cut off by a read pause, counts with it)."""
        return self._error_end.parse(record.text, partial(self._events, record.text))

    def _events(self, text: str) -> list[Event]:
        events: list[Event] = []
        labels = access_labels(text)
        if labels is not None:
            events.append(Event("http_requests_total", self._routes.fold(labels), 1, rule="access"))
            traceback = error = traceback_after(text)
        else:
            level, msg, gunicorn = _header(text)
            self._life(msg, gunicorn, level, events)
            traceback = is_traceback(text)
            error = level in _ERROR_LEVELS or (level == "WARNING" and "was terminated due to signal" in msg) \
                or (not level and _headless_error(text)) or (bool(level) and traceback)
        if error:
            events.append(Event("backend_errors_total", (self.model, self._kind(text, traceback)), 1,
                                rule="error"))
        return events

    def parse_run(self, run: Run) -> tuple[list[Event], int]:
        """A run of access lines: ``http_requests_total`` once per label set, as ``parse`` counts them."""
        self._error_end.clear()
        counts = Counter(map(self._routes.labels, _REQUESTS.findall(run.text, run.start, run.end)))
        return ([Event("http_requests_total", labels, n, rule="access") for labels, n in counts.items()],
                sum(counts.values()))

    def _kind(self, text: str, traceback: bool) -> str:
        kind = PHRASES.classify(text, traceback=traceback)
        if kind not in ("exception", "error") or "Exception in ASGI application" not in text:
            return kind
        exc = python_exception(text)
        if exc is None:
            return kind
        name = exc[0].rsplit(".", 1)[-1]
        if name in self._classes:
            return name
        if len(self._classes) < MAX_EXCEPTION_TYPES:
            self._classes.add(name)
            return name
        return "exception"

    def _life(self, msg: str, gunicorn: bool, level: str, events: list[Event]) -> None:
        """A start-up (the server, if up, went down), readiness or shutdown line."""
        start = msg.startswith("Starting gunicorn") or (not gunicorn and level and msg.startswith(UVICORN.started))
        if msg.startswith(_READY):
            if not self.ready:
                self.ready = True
                events.append(Event("backend_ready", (self.model,), 1, rule="ready"))
        elif start or (msg.startswith("Shutting down: Master") if gunicorn else
                       (level and (msg == UVICORN.stopping[0] or msg.startswith(UVICORN.stopping[1])))):
            if self.ready:
                events.append(Event("backend_ready", (self.model,), 0, rule="down"))
            self.ready = False
            if start:
                events.append(Event("backend_restarts_total", (), 1, rule="startup"))


def _header(text: str) -> tuple[str, str, bool]:
    """``(level, message, gunicorn format)`` of a record's first line ("" level: no known format)."""
    line = leapfrog_line(text)
    if line is not None:
        return line.level, line.msg, False
    m = _GUNICORN.match(text)
    if m is not None:
        return m.group(1), m.group(2), True
    t = _TIME_PREFIX.match(text)
    at = t.end() if t is not None else 0
    m = _UVICORN.match(text, at) or PY_DEFAULT_LINE.match(text, at)
    if m is not None:
        return m.group(1), m.group(m.lastindex or 1), False
    return "", text.split("\n", 1)[0], False


_QUOTED = lazyre.compile(r"(?:^|[\s)])[A-Za-z_][\w.]*(?:Error|Exception): ")


def _headless_error(text: str) -> bool:
    """A record of no known format that is an error: a traceback's header or chain line, or a line
    naming an exception with its message (``│ httpx.ConnectError: ...``). Frames alone are not: the
    exception line that ends them belongs to the same record, unless the text was cut off."""
    return TRACEBACK_HEAD in text or any(c in text for c in CHAINS) or _EXC_FIRST.match(text) is not None \
        or _QUOTED.search(text) is not None
