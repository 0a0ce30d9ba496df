"""leapfrogai-ui and other SvelteKit apps on Node (adapter-node), one record at a time.

Start-ups, 404s (this plugin's ``ui_not_found_total``, apart from the errors: scanners make many),
Node errors with their frames (one record, typed by class or cause), Node warnings (this plugin's
``ui_warnings_total``), and the same from Node loggers' lines (``parsers.ui_lines``). What each
line gives: docs/parsers.md, "leapfrogai-ui and SvelteKit".

Labels hold only class names and fixed words: never the message, the path or the user's text.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from typing import ClassVar

from logmetrics import lazyre
from logmetrics.events import UNKNOWN_MODEL, Event
from logmetrics.plugins import Parser
from logmetrics.records import Record
from logmetrics.records.shapes import INDENTED, NODE_STACK, Shape
from logmetrics.store.catalog import Family

from .common import strip_prefix
from .errors import COMMON_CAUSES, Phrases, node_error
from .ui_lines import logged

_LISTENING = lazyre.compile(r"Listening on (?:https?://)?\S")
#: 404s: the line on its own (the scanners' many, checked first), and inside a logger's message.
_NOT_FOUND_LINES = ("SvelteKitError: Not found: /", "Error: Not found: /")
_NOT_FOUND = lazyre.compile(r"(?<![\w.])(?:SvelteKitError|Error): Not found: /")
_WARNING = lazyre.compile(r"\(node:\d+\) (?:\[\w+\] )?(\w*Warning): ")
#: A thrown error printed by Node: the record starts with its class (from code, never from a user).
_CLASS_FIRST = lazyre.compile(r"(?:Uncaught )?([A-Z][A-Za-z0-9]{0,39}Error)(?::|\s*$|\s*\{)", re.M)
#: The UI's own ``console.error`` lines and other error lines without a stack.
_ERROR_LINE = lazyre.compile(
    r"(?i:(?:caught |uncaught )?[\w.]*error\b|(?:failed|unable) to "
    r"|un(?:caught|handled)[ _]?(?:promise[ _]?)?(?:rejection|exception))|[^\n]*\berror\b|FATAL ERROR: ")
_CAMEL = lazyre.compile(r"(?<=[a-z0-9])(?=[A-Z])")
#: Error classes of JavaScript, Node and the libraries the UI uses, taken wherever the record names them.
STANDARD = frozenset({
    "Error", "TypeError", "RangeError", "ReferenceError", "SyntaxError", "URIError", "EvalError",
    "AggregateError", "AbortError", "SvelteKitError", "FetchError", "AuthApiError", "AuthRetryableFetchError",
    "PostgrestError", "StorageApiError", "StorageUnknownError",
})
#: A standard class named inside a line, ``... TypeError: x`` (leftmost first, as ``node_error``).
_NAMED = lazyre.compile(r"(?<![\w.])(" + "|".join(sorted(STANDARD, key=len, reverse=True)) + r"):")
PHRASES = Phrases((
    ("connection", ("ECONNREFUSED", "ECONNRESET", "ENOTFOUND", "EAI_AGAIN", "fetch failed", "socket hang up")),
    *COMMON_CAUSES,
))
WARNING_KINDS = ("Warning", "DeprecationWarning", "ExperimentalWarning", "MaxListenersExceededWarning",
                 "UnhandledPromiseRejectionWarning")
#: The error types counted from 0: the standard classes, the causes and ``error``.
ERROR_TYPES = ("type_error", "reference_error", "syntax_error", "range_error",
               *(t for t in PHRASES.types if t not in ("bad_request", "exception")))


def _message(line: str) -> str:
    """A line's message: after a logger's level, or after a process prefix."""
    got = logged(line)
    return strip_prefix(line) if got is None else got.message


def snake(name: str) -> str:
    """``TypeError`` -> ``type_error``; a bare ``Error`` is ``error``."""
    return _CAMEL.sub("_", name).lower()


class UiParser(Parser):
    """leapfrogai-ui (SvelteKit on Node): start-ups, errors with their class, 404s and warnings."""

    name: ClassVar[str] = "ui"
    claims: ClassVar[tuple[str, ...]] = ("*leapfrogai-ui*", "*leapfrogai_ui*", "*sveltekit*", "ui", "ui-*")
    shapes: ClassVar[tuple[Shape, ...]] = (NODE_STACK, INDENTED)
    process_names: ClassVar[tuple[str, ...]] = ("leapfrogai-ui", "node build")
    #: SvelteKit's 404 lines; Node's warnings, ``Listening on`` and ``file://`` frames.
    sniffs = ((0.9, r"SvelteKitError|^Error: Not found: /"), (0.6, r"^\(node:\d+\) (?:\[\w+\] )?\w*Warning: "),
              (0.5, r"^Listening on (?:https?://)?\S+$"), (0.4, r"^\s+at \S.*\((?:file://|node:)"))
    metrics: ClassVar[tuple[Family, ...]] = (
        Family("ui_not_found_total", "counter", (),
               "Requests answered 404 (Not found lines, scanners included), counted apart from the errors."),
        Family("ui_warnings_total", "counter", ("kind",),
               "Node process warnings, (node:N) Warning lines, by warning class (DeprecationWarning, ...)."),
    )

    def __init__(self) -> None:
        self.model = UNKNOWN_MODEL

    def learn(self, text: str) -> None:
        """Whether the server was listening before reading began (no events)."""
        self.ready = self.ready or any("Listening on" in line and _LISTENING.match(_message(line))
                                         for line in text.split("\n"))

    def parse(self, record: Record) -> Iterable[Event]:
        """Events of one record: a start-up, a 404, a warning or an error."""
        events: list[Event] = []
        text = record.text
        if text.startswith(_NOT_FOUND_LINES):
            events.append(Event("ui_not_found_total", (), 1, rule="not_found"))
            return events
        line = logged(text)
        message = strip_prefix(text) if line is None else line.message
        if _LISTENING.match(message):
            self.ready = True
            events += [Event("backend_restarts_total", (), 1, rule="listening"),
                       Event("backend_ready", (self.model,), 1, rule="listening")]
            return events
        head = message.partition("\n")[0]
        if "Not found: /" in head and _NOT_FOUND.search(head):
            events.append(Event("ui_not_found_total", (), 1, rule="not_found"))
            return events
        w = _WARNING.match(message)
        if w:
            kind = w.group(1) if w.group(1) in WARNING_KINDS else "other"
            events.append(Event("ui_warnings_total", (kind,), 1, rule="warning"))
            return events
        if line is None:
            kind = self.error_type(message)
        elif line.error:
            kind = self.error_type(message, whole=text, name=line.name, logged=True)
        else:  # a level below error: no error, whatever the message says
            return events
        if kind is not None:
            events.append(Event("backend_errors_total", (self.model, kind), 1, rule="error"))
        return events

    @staticmethod
    def error_type(text: str, whole: str = "", name: str = "", logged: bool = False) -> str | None:
        """The ``error_type`` of an error record, ``None`` for a record that is no error.

        ``text``: the record, or a logger's message; ``whole``: the whole record, where causes are
        looked for too (a JSON line's ``err.cause``); ``name``: the class the logger named;
        ``logged``: the logger said error or above, so it is an error whatever it says.
        """
        first = _CLASS_FIRST.match(text)
        stack = node_error(text)
        if not logged and first is None and stack is None and not _ERROR_LINE.match(text):
            return None
        cause = PHRASES.classify(whole or text)
        if cause not in ("exception", "error"):
            return cause
        if not name:
            named = _NAMED.search(text.partition("\n")[0])
            name = (first.group(1) if first else stack[0] if stack and stack[0] in STANDARD
                    else named.group(1) if named else "Error")
        return snake(name)

    def zero_series(self, model: str) -> Iterable[tuple[str, tuple[str, ...]]]:
        """Restarts, the usual error types and the usual warning kinds, from 0."""
        zeros: list[tuple[str, tuple[str, ...]]] = [("backend_restarts_total", ()), ("ui_not_found_total", ())]
        zeros += [("backend_errors_total", (model, kind)) for kind in dict.fromkeys(ERROR_TYPES)]
        zeros += [("ui_warnings_total", (kind,)) for kind in WARNING_KINDS[:3]]
        return zeros
