"""Whisper speech-to-text servers: faster-whisper, whisper.cpp, openai-whisper, LeapfrogAI's backend.

Record by record (``parse``), and runs of its frequent lines at once (``parse_run``, the framework's
fast path; which lines, in ``whisper_patterns``) with the same events. A line's message is first taken
out of the host app's wrapper (``whisper_patterns.message``); LeapfrogAI's requests pair in order
(``whisper_requests``); audio seconds are ``whisper_audio``'s. What each server logs and what it
gives: docs/parsers.md, "Whisper". Prompts, transcripts and file names never reach a label.

A record a read pause cut in two (the engine flushes a held-back record when its input goes idle)
counts once: a timings block on its ``total time`` line, an error on its first part (the rest
begins with a line the record shapes would have joined to it).
"""

from __future__ import annotations

import math
import os
from collections.abc import Iterable
from typing import ClassVar

from logmetrics.events import SEEN, UNKNOWN_MODEL, Event
from logmetrics.plugins import Parser, ZeroSeries
from logmetrics.plugins.fastpath import Run
from logmetrics.records import Record
from logmetrics.records.shapes import DEFAULT_SHAPES, Shape

from . import whisper_patterns as P
from .common import UVICORN, RouteLabels, access_answer, access_labels, model_label
from .errors import ErrorEnd, is_traceback, restarts_and_errors
from .whisper_audio import AUDIO, Audio
from .whisper_requests import DURATION, LFAI_OUTCOMES, REQUESTS, LfaiRequests, Outcomes

ERRORS = "backend_errors_total"
READY = "backend_ready"
HTTP = "http_requests_total"
CLIENT_ERRORS = "llm_client_errors_total"
#: Outcomes each kind of server can log.
HTTP_OUTCOMES = ("ok", "error")
SERVER_OUTCOMES = ("ok", "error", "aborted")
CLI_OUTCOMES = ("ok", "error")


def model_name(path: str) -> str:
    """A model label from a whisper.cpp model file: ``models/ggml-base.en.bin`` -> ``base.en``."""
    name = os.path.basename(path.replace("\\", "/")).removesuffix(".bin").removeprefix("ggml-")
    return name or UNKNOWN_MODEL


class WhisperParser(Parser):
    """faster-whisper, whisper.cpp (CLI and server), openai-whisper and LeapfrogAI's whisper backend."""

    name: ClassVar[str] = "whisper"
    claims: ClassVar[tuple[str, ...]] = ("*whisper*",)
    #: Python tracebacks, indented lines, and whisper.cpp's timings block.
    shapes: ClassVar[tuple[Shape, ...]] = (*DEFAULT_SHAPES, P.TIMINGS_BLOCK)
    frequent: ClassVar[str] = P.FREQUENT_PY
    process_names: ClassVar[tuple[str, ...]] = ("whisper", "whisper-server", "whisper-cli", "faster-whisper-server",
                                                "faster_whisper_server", "whisper_server")
    #: Lines only a whisper server prints; openai-whisper-style lines.
    sniffs = ((0.95, P.SNIFF_STRONG), (0.6, P.SNIFF_WEAK))

    def __init__(self) -> None:
        self.model = UNKNOWN_MODEL
        self._outcomes = Outcomes()
        self._starting = False  # a LeapfrogAI start-up was counted; its "Starting server" is the same one
        self._lfai = False  # the stream is in the LeapfrogAI format: raw lines are its prints only
        self._server = False  # whisper.cpp server (its timings block is a shutdown summary)
        self._pending = False  # a whisper.cpp server request whose outcome is not logged yet
        self._audio = Audio()
        self._lfai_requests = LfaiRequests(self._outcomes)
        self._error_end = ErrorEnd()
        self._routes = RouteLabels(P.HTTP_ROUTES)
        self._http = False  # the stream logs HTTP access lines: they count the requests

    # -- the contract ---------------------------------------------------------------------

    def state(self) -> dict[str, object]:
        """What a restart of logmetrics must go on with, so that it counts what one run would: the
        model, readiness and the kind of stream; a start-up, a request or an error record under way;
        the requests in flight (their durations), the outcomes shown and the routes learned."""
        return {**super().state(), "server": self._server, "explicit": self._audio.explicit, "lfai": self._lfai,
                "flags": [self._starting, self._pending, self._http],
                "error_end": self._error_end.dump(),
                "audio": self._audio.dump(), "outcomes": self._outcomes.dump(),
                "lfai_requests": self._lfai_requests.dump(), "routes": self._routes.dump()}

    def restore(self, state: dict[str, object]) -> None:
        """Take back what ``state`` returned; what is missing or malformed starts afresh."""
        super().restore(state)
        self._server = state.get("server") is True
        self._audio.explicit = state.get("explicit") is True
        self._lfai = state.get("lfai") is True
        flags = state.get("flags")
        if isinstance(flags, list) and len(flags) == 3:
            self._starting, self._pending, self._http = (flag is True for flag in flags)
        self._error_end.load(state.get("error_end"))
        self._audio.load(state.get("audio"))
        self._outcomes.load(state.get("outcomes"))
        self._lfai_requests.load(state.get("lfai_requests"))
        self._routes.load(state.get("routes"))

    def learn(self, text: str) -> None:
        """Model, readiness and the kind of stream from lines logged before reading began."""
        for line in text.split("\n"):
            msg = P.message(line.rstrip("\r"))
            body = msg.text
            if msg.leapfrog_time is not None:
                self._lfai = True
            m = P.WCPP_MODEL.match(body)
            if m:
                self.model = model_name(m.group(1))
                self.ready = self._server = False
            elif body.startswith((P.WCPP_LISTENING, P.LFAI_SERVING)):
                self.ready = True
                self._server = self._server or body.startswith(P.WCPP_LISTENING)
            elif body.startswith(P.LFAI_INIT) or body.startswith(P.LFAI_STOPPING) or P.WCPP_SHUTDOWN in body:
                self.ready = False
            elif body.startswith(UVICORN.ready):
                self.ready = True
            elif body.startswith((UVICORN.started, *UVICORN.stopping)):
                self.ready = False
            elif "Model" in body and (f := P.FWS_MODEL.search(body)) is not None:
                self.model = model_label(f.group(2)) or self.model
            if P.FW_DURATION.search(body) or P.WCPP_PROCESSING.match(body):
                self._audio.explicit = True

    def tick(self, now: float) -> Iterable[Event]:
        """Requests whose finish line never came, dropped after the time-out."""
        return self._lfai_requests.expire(now)

    def parse(self, record: Record) -> list[Event]:
        """Events of one record (a line, a traceback, or a whisper.cpp timings block)."""
        text = record.text.replace("\r\n", "\n") if "\r" in record.text else record.text
        head = text.partition("\n")[0]
        msg = P.message(head)
        out: list[Event] = []
        access = access_labels(head) if " HTTP/" in head else None
        if access is not None:
            self._access(access, out)
        elif msg.leapfrog_time is not None:
            self._lfai = True
            self._leapfrog(text, msg, record.time if record.time is not None else msg.leapfrog_time, out)
        elif head.startswith(P.TIMINGS):
            self._timings(text, out)
        elif not self._lines(text, msg.text, out) and not self._lfai:
            self._audio.line(msg.text, self.model, out)
        rest = self._error_end.rest(text)
        if rest:  # the rest of the error record before it, which a read pause cut in two: counted there
            out.append(SEEN)
        elif not any(e.metric == ERRORS for e in out):
            self._error(text, msg, out)
        self._error_end.after(text, rest or any(e.metric == ERRORS for e in out))
        if not out and P.INFO.search(msg.text):  # the stream is a working server's: its zero series
            out.append(SEEN)
        return out

    def frequent_lines(self, text: str) -> str:
        """LeapfrogAI's lines of a fixed shape in a stream of that format, else faster-whisper's
        under Python's default format (``whisper_patterns``); none in a batch with CR LF line ends."""
        if "\r" in text:
            return ""
        return P.FREQUENT_LFAI if self._lfai or P.LFAI_MARK in text else P.FREQUENT_PY

    def parse_run(self, run: Run) -> tuple[list[Event], int]:
        """The events of a run of frequent lines (``whisper_patterns``), and how many gave events."""
        text, a, b = run.text, run.start, run.end
        out: list[Event] = []
        lfai = text.find(P.LFAI_MARK, a, b) >= 0  # every line in a LeapfrogAI stream's runs, none else
        if lfai:
            self._lfai = True
        self._error_end.clear()
        n = 0
        durations = P.DURATIONS.findall(text, a, b)
        if durations:
            n += len(durations)
            self._audio.durations(durations, self.model, out)
        if lfai and text.find("__main__: ", a, b) >= 0:
            n += self._lfai_requests.run(text, a, b, self.model, run.time, out)
        alive = P.alive_lines(text, a, b)
        if alive:
            n += alive
            out.append(SEEN)
        return out, n

    def zero_series(self, model: str) -> Iterable[ZeroSeries]:
        """Series any whisper server can move: restarts; errors by type and audio per model. Those
        the log has shown it can: request outcomes from a stream's first request (they depend on
        the kind of server), client errors once it logs access lines."""
        zeros = [*restarts_and_errors(model, P.ERROR_TYPES), (AUDIO, (model,)),
                 *((REQUESTS, labels) for labels in self._outcomes.shown)]
        if self._http:
            zeros += [(CLIENT_ERRORS, (model, kind)) for kind in P.CLIENT_ERROR_TYPES]
        return zeros

    # -- per kind of line -----------------------------------------------------------------

    def _lines(self, text: str, body: str, out: list[Event]) -> bool:
        """Start-up, readiness, shutdown and whisper.cpp request lines; whether one matched."""
        m = P.WCPP_MODEL.match(body)
        if m:
            self._start_up(out)
            self.model = model_name(m.group(1))
            self._server = False
            return True
        if body.startswith(P.LFAI_INIT):
            self._start_up(out)
            self._starting = True
            return True
        if body.startswith((P.WCPP_LISTENING, P.LFAI_SERVING)):
            if body.startswith(P.LFAI_SERVING) and not self._starting:
                self._start_up(out)
            self._starting = False
            self._server = self._server or body.startswith(P.WCPP_LISTENING)
            self._set_ready(True, out)
            return True
        if body.startswith(P.LFAI_STOPPING) or P.WCPP_SHUTDOWN in body:
            self._settle(out)
            self._set_ready(False, out)
            return True
        if body.startswith(UVICORN.started):
            self._start_up(out)
            return True
        if body.startswith(UVICORN.ready):
            self._set_ready(True, out)
            return True
        if body.startswith(UVICORN.stopping):
            if self.ready:
                self._set_ready(False, out)
            else:
                out.append(SEEN)
            return True
        if "Model" in body and (named := P.FWS_MODEL.search(body)) is not None:
            self._model_line(model_label(named.group(2)), named.group(1) is not None, out)
            return True
        if P.WCPP_ABORTED in body:
            self._pending = False
            self._request("aborted", out, SERVER_OUTCOMES)
            return True
        m = P.WCPP_PROCESSING.match(body)
        if m:
            self._audio.add(float(m.group(2).replace(",", ".")), self.model, out)
            if self._server:
                self._settle(out)
                self._pending = True
                self._outcomes.can(SERVER_OUTCOMES, self.model)
            return True
        return False

    def _timings(self, text: str, out: list[Event]) -> None:
        """A whisper.cpp timings block: one CLI run, or a server's summary at shutdown.

        The block may come as two records (a read pause inside it flushes the first part): a CLI
        run counts on the part that holds its last line, ``total time``; the other part only matches."""
        if self._server:
            if self.ready or self._pending:
                self._settle(out)
                self._set_ready(False, out)
            else:
                out.append(SEEN)
            return
        times = {name: float(val.replace(",", ".")) * (1.0 if unit == "s" else 0.001)
                 for name, val, unit in P.TIMING.findall(text)}
        total = times.get("total")
        if total is None:
            out.append(SEEN)
            return
        self._request("ok", out, CLI_OUTCOMES)
        if math.isfinite(total):
            out.append(Event(DURATION, (self.model,), total))

    def _leapfrog(self, text: str, msg: P.Message, now: float, out: list[Event]) -> None:
        """A LeapfrogAI-format line: the request's steps, or faster-whisper's own lines."""
        body = msg.text
        t = msg.leapfrog_time if msg.leapfrog_time is not None else now
        requests = self._lfai_requests
        step = P.LFAI_STEP.match(body)
        kind = step.lastgroup if step is not None else None
        if kind == "start":
            requests.start(self.model, t, now, out)
        elif kind == "done":
            requests.complete(self.model, t, out)
        elif body.startswith(P.LFAI_FAILED):
            requests.failed += 1
            out.append(Event(ERRORS, (self.model, P.PHRASES.classify(text)), 1.0))
        elif kind == "task":
            out.append(Event(ERRORS, (self.model, P.UNSUPPORTED_TASK), 1.0))
            self._request("error", out, LFAI_OUTCOMES)
        elif kind == "language":
            out.append(Event(ERRORS, (self.model, P.UNSUPPORTED_LANGUAGE), 1.0))
        elif any(p in text for p in P.RPC_FAILED):
            out.append(Event(ERRORS, (self.model, P.PHRASES.classify(text, traceback=is_traceback(text))), 1.0))
            if requests.pairs.open:
                requests.finish("error", self.model, t, out)
        else:
            self._audio.line(body, self.model, out)

    def _error(self, text: str, msg: P.Message, out: list[Event]) -> None:
        """One error event for an error record: a level, a traceback (or its end), an error line.
        A segment line is transcript text, never an error."""
        if msg.text.startswith("[") and P.SEGMENT_ANY.match(msg.text):
            return
        tb = is_traceback(text)
        if (msg.level in ("ERROR", "CRITICAL", "FATAL") or tb or P.EXCEPTION_LINE.search(text)
                or P.WCPP_ERROR.match(msg.text)):
            kind = P.PHRASES.classify(text, traceback=tb)
            out.append(Event(ERRORS, (self.model, kind), 1.0))
            if self._server and kind in ("transcribe_failed", "audio_decode"):
                self._pending = False
                self._request("error", out, SERVER_OUTCOMES)
            elif kind == "transcribe_failed" and msg.leapfrog_time is None and not self._http:
                self._request("error", out, CLI_OUTCOMES)

    def _access(self, access: tuple[str, str, str], out: list[Event]) -> None:
        """An access line, by its ``access_labels``: ``http_requests_total``; on a speech route a
        request, ``ok`` or (5xx) ``error``; any 4xx is the client's error (``llm_client_errors_total``),
        never the backend's."""
        self._http = True
        code = access[2]
        labels = self._routes.fold(access)
        out.append(Event(HTTP, labels, 1.0, rule="access"))
        model = self.model
        answer = access_answer(code, labels[1], labels[1].endswith(P.SPEECH_ROUTES))
        if answer is None:
            return
        if answer[0]:
            out.append(Event(CLIENT_ERRORS, (model, answer[1]), 1.0, rule="access"))
        else:
            self._request(answer[1], out, HTTP_OUTCOMES)

    def _model_line(self, model: str | None, loaded: bool, out: list[Event]) -> None:
        """faster-whisper-server names the model it loads (on first use): the label from then on.
        Loading it, the server is not ready for it; loaded, it is."""
        if model and model != self.model:
            if self.ready:
                out.append(Event(READY, (self.model,), 0.0))
            self.model = model
            self.ready = False
        if loaded or not self.ready:
            self.ready = loaded
            out.append(Event(READY, (self.model,), 1.0 if loaded else 0.0))

    # -- helpers --------------------------------------------------------------------------

    def _settle(self, out: list[Event]) -> None:
        """A whisper.cpp server request with no failure logged before the next one: ``ok``."""
        if self._pending:
            self._pending = False
            self._request("ok", out, SERVER_OUTCOMES)

    def _start_up(self, out: list[Event]) -> None:
        """A new start of the backend: counted; not ready; nothing runs."""
        out.append(Event("backend_restarts_total", (), 1.0))
        if self.ready:
            self._set_ready(False, out)
        self._pending = False
        self._lfai_requests.clear(out)

    def _set_ready(self, ready: bool, out: list[Event]) -> None:
        self.ready = ready
        out.append(Event(READY, (self.model,), 1.0 if ready else 0.0))
        if not ready:
            self._lfai_requests.clear(out, always=False)

    def _request(self, outcome: str, out: list[Event], outcomes: tuple[str, ...]) -> None:
        self._outcomes.count(outcome, outcomes, self.model, out)
