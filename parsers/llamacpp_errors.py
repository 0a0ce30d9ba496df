"""The llama.cpp parser's errors: one per error record, client errors apart, a failed load once.

A failed model load prints several lines: it counts once per start-up. The library's
``llama_decode: failed to decode`` lines are left to the server's own ``failed to decode the
batch`` line, and the ``send_error`` lines that follow it for each request count the requests as
``outcome="error"`` but not as further errors. A request refused for the client's fault (HTTP 4xx)
counts by type in ``llm_client_errors_total``, neither as a backend error nor as a failed request.
"""

from __future__ import annotations

import orjson

from logmetrics.events import Event

from . import llamacpp_patterns as P


def client_type(kind: str, message: str) -> str:
    """The ``llm_client_errors_total`` type of a 4xx JSON error body: ``bad_json`` for a body the
    JSON parser refused, else the body's ``type`` if it is one llama-server uses
    (``invalid_request_error`` -> ``invalid_request``), else ``client_error``: the body is text a
    client can shape, so a type outside that set never becomes a label."""
    if "parse_error" in message:
        return "bad_json"
    return P.CLIENT_KINDS.get(kind, "client_error")


class Errors:
    """What a stream's error lines have said so far, and the events of the next one."""

    def __init__(self) -> None:
        self.after_decode = False  # a failed decode was counted: its requests' send_error lines are not
        self.load_failed = False  # a failed model load was counted in this start-up

    def line(self, line: str, msg: str, model: str, out: list[Event]) -> None:
        """An error line (its text and message) of a stream serving ``model``."""
        if P.LIB_DECODE.match(msg) or P.LIB_DECODE.match(line):
            self.after_decode = True  # the server's own line says it, once
            return
        if self.client(line, model, out):
            return
        if P.SEND_ERROR.search(line):
            out.append(Event("llm_requests_total", (model, "error"), 1, rule="send_error"))
            if self.after_decode:
                return
        elif "failed to decode" in line or "decode() failed" in line:
            self.after_decode = True
        if P.LOAD_FAILED.search(line):
            if self.load_failed:
                return
            self.load_failed = True
        error(line, model, out)

    def client(self, line: str, model: str, out: list[Event]) -> bool:
        """A client's error (HTTP 4xx), counted by type; whether the line was one."""
        kind: str | None = None
        if "got exception: " in line:
            m = P.GOT_EXCEPTION.search(line)
            if m is None:
                return False
            code, kind, message = error_body(m.group("json"))
            if code is None or not 400 <= code < 500:
                return False
            kind = client_type(kind, message)
        elif P.SEND_ERROR.search(line):
            kind = next((k for k, rx in P.CLIENT_SEND if rx.search(line)), None)
        if kind is None:
            return False
        out.append(Event("llm_client_errors_total", (model, kind), 1, rule="client_error"))
        return True


def error(text: str, model: str, out: list[Event], traceback: bool = False) -> None:
    """One backend error, typed by the phrase table."""
    kind = P.PHRASES.classify(text, traceback=traceback)
    out.append(Event("backend_errors_total", (model, kind), 1, rule="error"))


def error_body(text: str) -> tuple[int | None, str, str]:
    """Code, type and message of an error body (``{"error":{...}}`` or the error itself), read as
    JSON, or field by field when the line was cut."""
    try:
        obj = orjson.loads(text)
    except orjson.JSONDecodeError:
        m = P.ERROR_FIELDS.search(text)
        if m is None:
            return None, "", ""
        return int(m.group("code")), m.group("type"), m.group("msg") or ""
    err = obj.get("error", obj) if isinstance(obj, dict) else None
    if not isinstance(err, dict):
        return None, "", ""
    code, kind, message = err.get("code"), err.get("type"), err.get("message")
    return (code if isinstance(code, int) and not isinstance(code, bool) else None,
            kind if isinstance(kind, str) else "", message if isinstance(message, str) else "")
