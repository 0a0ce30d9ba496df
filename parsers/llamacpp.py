"""llama.cpp's ``llama-server`` (every era) and llama-cpp-python: per-request timings, slots,
HTTP request lines, errors, start-ups and the model name.

A request's timing block (``prompt eval time`` / ``eval time`` / ``total time``) is assembled per
task: Era E prints each line as its own record with its slot and task, and lines of several slots
may interleave; Era D prints the three lines under one ``slot print_timing: id S | task T`` line
(one record, or separate lines under router mode); Era C carries ``id_task`` on every line; the
library blocks (``llama_print_timings``, ``llama_perf_context_print``) and Era B's
``print_timings`` carry no id and are one block at a time. Token counters move on each line (so a
block cut short still counts its tokens); the request (its duration, time to first token = prompt
eval time, time per output token = eval ms per token, ``outcome="ok"``) is observed on its
``total time`` line.

Running requests: ``processing task`` starts a request on its slot, ``stop processing`` /
``slot released`` ends it, ``all slots are idle`` clears them (``parsers.pairs``, with a time-out).

Errors: one per error record (level ``E``/``ERR``, or an error phrase on a line without a level;
a Python traceback counts once), read by ``llamacpp_errors``.
"""

from __future__ import annotations

import math
import posixpath
from collections import OrderedDict
from collections.abc import Iterable
from typing import ClassVar

import orjson

from logmetrics.events import UNKNOWN_MODEL, Event
from logmetrics.plugins import Parser, ZeroSeries
from logmetrics.records import Batch, Record
from logmetrics.records.shapes import Shape

from . import llamacpp_patterns as P
from .common import HTTP_METHODS, Counted, RouteLabels, access_line, route_template
from .errors import is_traceback, restarts_and_errors
from .llamacpp_batch import LIB_KEY, MAX_OPEN_TIMINGS, Timing, scan
from .llamacpp_errors import Errors, error
from .pairs import MAX_SAVED, Pairs


def number(text: str | None) -> float | None:
    """A printf number of llama.cpp (``12.5``, ``12,5`` in some locales), or ``None`` for ``nan``/``inf``."""
    if not text:
        return None
    if "," in text:
        text = text.replace(",", ".") if "." not in text else text.replace(",", "")
    try:
        value = float(text)
    except ValueError:
        return None
    return value if math.isfinite(value) else None


def model_of_path(path: str) -> str:
    """The model label of a model file path: its base name without ``.gguf``/``.bin``."""
    base = posixpath.basename(path.strip().rstrip("/").replace("\\", "/"))
    for ext in (".gguf", ".bin"):
        if base.lower().endswith(ext):
            base = base[: -len(ext)]
    return base or UNKNOWN_MODEL


#: Events of a start-up or shutdown line alone: no reason yet to start a model's zero series.
LIFE_ONLY = frozenset(("backend_restarts_total", "backend_ready", "llm_requests_running"))


class LlamaCppParser(Parser):
    """llama-server (eras A-E) and llama-cpp-python (library timing blocks, uvicorn)."""

    name = "llamacpp"
    claims = ("*llama-server*", "*llama_server*", "*llamacpp*", "*llama-cpp*", "*llama_cpp*", "*llama.cpp*")
    shapes: ClassVar[tuple[Shape, ...]] = (P.SHAPE,)
    process_names = ("llama-server", "llama_cpp.server", "llama-cpp-python", "llama.cpp/server")
    #: llama.cpp library, llama-server slot/srv and llama-cpp-python lines.
    sniffs = ((0.9, P.SNIFF_STRONG),)

    def __init__(self) -> None:
        self.model = UNKNOWN_MODEL
        self._from_path = False  # the model name came from a file path: general.name does not override it
        self._pairs = Pairs()
        self._timings: OrderedDict[str, Timing] = OrderedDict()
        self._block_key = LIB_KEY  # the key of the last ``slot print_timing`` line without timings
        self._errors = Errors()
        self._starting: str | None = None  # the start-up marker seen since the server was last ready
        self._ready: str | None = None  # the model the server said it was ready with
        self._counted = Counted()
        self._server = False  # a llama-server line seen: its client errors can come
        self._routes = RouteLabels()
        self._route_labels: dict[tuple[str, ...], tuple[str, str, str]] = {}  # raw -> labels, known routes

    def state(self) -> dict[str, object]:
        """What a restart of logmetrics must go on with, so that it counts what one run would: the
        model and readiness (``backend_ready`` is a gauge, not in the saved counters), a start-up
        under way, the requests in flight and their timing blocks so far (durations, time to first
        token), what the error lines said, the models counted and the routes learned."""
        timings = list(self._timings.items())[-MAX_SAVED:]
        return {"model": self.model, "from_path": self._from_path, "ready": self._ready,
                "starting": self._starting, "server": self._server, "open": self._pairs.dump(),
                "timings": [[key, t.prompt_ms, t.tpot_ms] for key, t in timings], "block_key": self._block_key,
                "errors": [self._errors.after_decode, self._errors.load_failed],
                "counted": self._counted.dump(), "routes": self._routes.dump()}

    def restore(self, state: dict[str, object]) -> None:
        """Take back what ``state`` returned; what is missing or malformed starts afresh."""
        model = state.get("model")
        if isinstance(model, str) and model:
            self.model = model
            self._from_path = bool(state.get("from_path"))
        ready = state.get("ready")
        if isinstance(ready, str) and ready:
            self._ready = ready
        starting = state.get("starting")
        if isinstance(starting, str):
            self._starting = starting
        self._server = state.get("server") is True
        self._pairs.load(state.get("open"))
        timings = state.get("timings")
        for row in timings[-MAX_SAVED:] if isinstance(timings, list) else ():
            if isinstance(row, list) and len(row) == 3 and isinstance(row[0], str) \
                    and all(x is None or isinstance(x, (int, float)) for x in row[1:]):
                timing = self._timings[row[0]] = Timing()
                timing.prompt_ms, timing.tpot_ms = row[1], row[2]
        block_key = state.get("block_key")
        if isinstance(block_key, str):
            self._block_key = block_key
        errors = state.get("errors")
        if isinstance(errors, list) and len(errors) == 2:
            self._errors.after_decode, self._errors.load_failed = errors[0] is True, errors[1] is True
        self._counted.load(state.get("counted"))
        self._routes.load(state.get("routes"))

    def learn(self, text: str) -> None:
        """The model name and readiness from the lines logged before reading began."""
        ready: str | None = None
        for line in text.split("\n"):
            self._learn_model(line)
            if P.STARTUP.search(line) or P.SHUTDOWN.search(line):
                ready = None
            elif P.READY.search(line):
                ready = self.model
        self._ready = ready

    def readiness(self) -> str | None:
        """The model the server said it was ready with, until a start-up or shutdown."""
        return self._ready

    def tick(self, now: float) -> Iterable[Event]:
        """Requests whose release line never came are dropped after the time-out."""
        return self._pairs.events() if self._pairs.expire(now) else ()

    # -- records ----------------------------------------------------------------------------

    def parse_batch(self, batch: Batch) -> tuple[list[Event], int, int, list[str]]:
        """Events of a batch of whole records in one scan (``llamacpp_batch``): the same as ``parse``
        on each record, with the frequent records counted per run and the silent ones skipped; and
        the models it counted for."""
        self._counted.passed = []
        return (*scan(self, batch.text, batch.time), self._counted.passed)

    def zero_series(self, model: str) -> list[ZeroSeries]:
        """For a model events counted for: restarts, errors by type, requests ``ok`` and
        ``error``, and client errors once the log is known to be llama-server's."""
        if model not in self._counted.models:
            return []
        zeros = restarts_and_errors(model, P.ERROR_TYPES)
        zeros += [("llm_requests_total", (model, outcome)) for outcome in ("ok", "error")]
        if self._server:
            zeros += [("llm_client_errors_total", (model, kind)) for kind in P.CLIENT_TYPES]
        return zeros

    def parse(self, record: Record) -> list[Event]:
        """Events of one record: a traceback as one error, else each of its lines."""
        t = record.time if record.time is not None else 0.0
        out = self._pairs.events() if self._pairs.open and self._pairs.expire(t) else []
        text = record.text
        if is_traceback(text) or P.EXCEPTION_START.match(text):
            error(text, self.model, out, traceback=True)
        else:
            for line in text.split("\n"):
                self._line(line, t, out)
        if out:
            self._counts(out)
        return out

    def _line(self, raw: str, t: float, out: list[Event]) -> None:
        """One line of a record: its format read, then what its message says (``_message``)."""
        m = P.PREFIX.match(raw)  # never None: every part of it is optional
        level = (m.group("lvl") or "") if m else ""
        s = raw[m.end():] if m else raw
        if s.startswith("{"):
            self._json(s, t, out)
            return
        access = access_line(s)
        if access is not None:
            self._http(*access, out)
            return
        kv: dict[str, str] = {}
        if (c := P.ERA_C.fullmatch(s)) is not None:
            self._server = True
            kv = {k: v.strip('"') for k, v in P.KV.findall(c.group("kv") or "")}
            msg, lvl = c.group("msg"), c.group("lvl")
            level = "E" if lvl in ("ERR", "ERROR") else lvl[:1]
        elif (sl := P.SLOT.match(s)) is not None:
            self._server = True
            task = int(sl.group("task"))
            kv["id_slot"] = sl.group("slot")
            if task >= 0:
                kv["id_task"] = str(task)
            msg = sl.group("msg")
            if sl.group("func").strip() == "print_timing" and not msg.strip():
                self._block_key = self._key(kv)
                return
        elif (sv := P.SRV.match(s)) is not None:
            self._server = True
            msg = sv.group("msg")
        elif (lib := P.LIB_TIMING.match(s)) is not None:
            msg = lib.group("msg")
            kv["lib"] = "1"
        else:
            msg = s.lstrip(" \r")
        self._message(s, msg, level, kv, t, out)

    def _json(self, s: str, t: float, out: list[Event]) -> None:
        try:
            obj = orjson.loads(s)
        except orjson.JSONDecodeError:
            self._message(s, s, "", {}, t, out)
            return
        if not isinstance(obj, dict):
            return
        msg = obj.get("msg", obj.get("message", ""))
        kv = {str(k): str(v) for k, v in obj.items() if isinstance(v, (str, int, float)) and not isinstance(v, bool)}
        level = str(obj.get("level", ""))
        self._message(s, msg if isinstance(msg, str) else "", "E" if level in ("ERR", "ERROR") else level[:1],
                      kv, t, out)

    # -- one message --------------------------------------------------------------------------

    def _key(self, kv: dict[str, str]) -> str:
        if "id_task" in kv:
            return "task " + kv["id_task"]
        if "id_slot" in kv:
            return "slot " + kv["id_slot"]
        return LIB_KEY

    def _message(self, line: str, msg: str, level: str, kv: dict[str, str], t: float, out: list[Event]) -> None:
        """Everything one line can say: timings, slots, cache, HTTP, model, life, errors."""
        if "time" in msg and self._timing(msg, kv, out):
            return
        slot = kv.get("id_slot")
        if slot is not None and (msg.startswith("processing task") or msg == "slot is processing task"):
            self._errors.after_decode = False
            self._start("slot " + slot, t, out)
        elif slot is not None and (msg.startswith("stop processing") or msg == "slot released"):
            self._finish("slot " + slot, out)
        elif "slot " in msg and (b := P.SLOT_B.search(msg)):
            if b.group(2):
                self._finish("slot " + b.group(1), out)
            else:
                self._start("slot " + b.group(1), t, out)
        elif "all slots are idle" in msg:
            self._clear_running(out)
        cached = P.CACHED.search(msg)
        if cached is not None:
            n = cached.group(cached.lastindex or 0)
            n = kv.get("p0", "") if n == "p0" else n
            if n.isdigit():
                out.append(Event("llm_cached_prompt_tokens_total", (self.model,), int(n), rule="cache"))
        if "request" in msg or "log_server_response" in line:
            self._request(line, msg, kv, out)
        self._learn_model(line)
        self._life(line, out)
        if level == "E" or P.ERROR_LINE.search(line):
            self._errors.line(line, msg, self.model, out)

    def _timing(self, msg: str, kv: dict[str, str], out: list[Event]) -> bool:
        """A line of a timing block; True if it was one."""
        msg = msg.lstrip(" \r")  # a timing message starts with its name: nothing else's "total time"
        m = P.TIMING.match(msg)
        if m is None:
            return False
        key = self._key(kv) if "id_task" in kv or "id_slot" in kv else self._block_key if "lib" not in kv else LIB_KEY
        timing = self._timings.get(key)
        if timing is None:
            timing = self._timings[key] = Timing()
            if len(self._timings) > MAX_OPEN_TIMINGS:
                self._timings.popitem(last=False)
        if m.group("kind") is not None:
            n = int(m.group("n")) if m.group("n") else None
            ms = number(m.group("ms"))
            if m.group("kind") == "prompt eval":
                self._errors.after_decode = False
                if n is not None:
                    out.append(Event("llm_prompt_tokens_total", (self.model,), n, rule="timing"))
                timing.prompt_ms = ms
            else:
                if n is not None:
                    out.append(Event("llm_generation_tokens_total", (self.model,), n, rule="timing"))
                per = number(m.group("per"))
                if per is None and ms is not None and n:
                    per = ms / n
                timing.tpot_ms = per
            return True
        del self._timings[key]
        if key == self._block_key:
            self._block_key = LIB_KEY
        model = (self.model,)
        ms = number(m.group("total"))
        if ms is not None:
            out.append(Event("llm_request_duration_seconds", model, ms / 1000.0, rule="timing"))
        if timing.prompt_ms is not None:
            out.append(Event("llm_time_to_first_token_seconds", model, timing.prompt_ms / 1000.0, rule="timing"))
        if timing.tpot_ms is not None:
            out.append(Event("llm_time_per_output_token_seconds", model, timing.tpot_ms / 1000.0, rule="timing"))
        out.append(Event("llm_requests_total", (self.model, "ok"), 1, rule="timing"))
        return True

    def _start(self, key: str, t: float, out: list[Event]) -> None:
        self._pairs.start(key, self.model, t)
        out.extend(self._pairs.events())

    def _finish(self, key: str, out: list[Event]) -> None:
        self._pairs.finish(key)
        if self._pairs.models:
            out.extend(self._pairs.events())

    def _request(self, line: str, msg: str, kv: dict[str, str], out: list[Event]) -> None:
        m = P.REQUEST.search(msg) or P.RESPONSE_BOX.search(line)
        if m is not None:
            self._http(m.group("method"), m.group("path"), m.group("code"), out)
        elif msg == "request" and "method" in kv and "path" in kv and kv.get("status", "").isdigit():
            self._http(kv["method"], kv["path"], kv["status"], out)

    def _http(self, method: str, path: str, code: str, out: list[Event]) -> None:
        labels = self._routes.fold(((method if method in HTTP_METHODS else "OTHER"), route_template(path), code))
        out.append(Event("http_requests_total", labels, 1, rule="http"))

    # -- model, life, errors ------------------------------------------------------------------

    def _learn_model(self, line: str) -> None:
        """The model name from a line naming the model file (its base name), else ``general.name``."""
        m = P.MODEL_PATH.search(line) if "model" in line else None
        if m is not None:
            name = model_of_path(next(g for g in m.groups() if g))
            # a content-addressed blob (ollama) names no model: general.name is better
            self._from_path = not name.startswith("sha256-")
            if self._from_path:
                self.model = name
        elif "general.name" in line and not self._from_path:
            g = P.GENERAL_NAME.search(line)
            if g is not None:
                self.model = g.group("name")

    def _life(self, line: str, out: list[Event]) -> None:
        start = P.STARTUP.search(line)
        if start is not None:
            self._clear_running(out)
            self._timings.clear()
            self._errors.load_failed = False
            self._from_path = False
            self._not_ready("startup", out)
            # one start-up may print two markers (a build line, then the server's first line):
            # a marker of another kind before the server got ready is the same start-up
            marker = start.group(0)[:12]
            if self._starting is None or self._starting == marker:
                out.append(Event("backend_restarts_total", (), 1, rule="startup"))
            self._starting = marker
        elif P.READY.search(line):
            self._starting = None
            self._errors.load_failed = False
            if self._ready is not None and self._ready != self.model:
                self._not_ready("ready", out)
            self._ready = self.model
            out.append(Event("backend_ready", (self.model,), 1, rule="ready"))
        elif P.SHUTDOWN.search(line):
            self._starting = None
            self._clear_running(out)
            self._not_ready("shutdown", out)

    def _clear_running(self, out: list[Event]) -> None:
        """No request runs any more (the server starts again or stops): the gauge says so."""
        self._pairs.clear()
        if self._pairs.models:
            out.extend(self._pairs.events())

    def _not_ready(self, rule: str, out: list[Event]) -> None:
        """The server went down (or starts again): not ready, under the model it was ready with."""
        if self._ready is not None:
            out.append(Event("backend_ready", (self._ready,), 0, rule=rule))
        self._ready = None

    def _counts(self, out: list[Event]) -> None:
        """A record's events count for the current model (``zero_series``), unless they are only
        a start-up's or shutdown's while the model is not known yet (it is named in the lines after)."""
        if self.model != UNKNOWN_MODEL or not all(e.metric in LIFE_ONLY for e in out):
            self._counted.add(self.model)
