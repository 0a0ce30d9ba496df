"""Error records, one record at a time: Python tracebacks, Node stack traces, and ``error_type``.

- ``python_exception(text)``: the ``(name, message)`` of a record's last exception line
  (``torch.OutOfMemoryError: CUDA out of memory``), also when the record is only the end of a
  traceback whose header was never read (tailing began inside it, or a rotation cut it).
- ``is_traceback(text)``: whether a record is (part of) a Python traceback.
- ``node_error(text)``: the ``(name, message)`` of a Node error record (``TypeError: x`` followed
  by ``    at ...`` frames).
- ``Phrases``: a backend's table of phrases that decide an ``error_type``; each parser keeps its
  own (vLLM's live in the vLLM parser), built on ``COMMON_CAUSES``.
- ``ErrorEnd``: the end of the error record before, so that its rest, cut off by a read pause,
  counts with it and not as an error of its own.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable, Sequence

from logmetrics import lazyre
from logmetrics.events import SEEN, Event
from logmetrics.plugins import ZeroSeries
from logmetrics.records.shapes import EXCEPTION_NAME as EXCEPTION_NAME  # one definition, re-exported
from logmetrics.records.shapes import PYTHON_TRACEBACK

from .common import PROC_PREFIX_OPT
from .pairs import MAX_SAVED_LINE

TRACEBACK_HEAD = "Traceback (most recent call last)"
#: Lines that chain two tracebacks of one record.
CHAINS = ("During handling of the above exception", "The above exception was the direct cause")

# A line that names the exception: optional process prefix and log header are the caller's to strip;
# here the line starts with the name (``KeyError: 'x'``, ``torch.OutOfMemoryError: CUDA ...``).
_EXC_LINE = lazyre.compile(rf"^{PROC_PREFIX_OPT}({EXCEPTION_NAME})(?:: ?(.*))?$", re.M)
# Anywhere in a line, for error lines that quote an exception: ``Error in x: ValueError: bad``.
_EXC_ANY = lazyre.compile(r"(?<![\w.])([A-Za-z_][\w.]*(?:Error|Exception))\b(?::[ ]?([^\n]*))?")
_FRAME = lazyre.compile(r'^(?:[^\n]*?)  File "[^"\n]+", line \d+', re.M)
_NODE_HEAD = lazyre.compile(r"^(?:[^\n]*?\b)?((?:[A-Z]\w*)?Error)(?:: ?([^\n]*))?\n(?:[^\n]*\n)*?\s+at ", re.M)


def python_exception(text: str) -> tuple[str, str] | None:
    """``(name, message)`` of the last line of ``text`` that names an exception on its own, else
    the last exception quoted inside a line; ``None`` when there is none."""
    found = _EXC_LINE.findall(text) or _EXC_ANY.findall(text)  # (name, message or "") per line
    if not found:
        return None
    name, message = found[-1]
    return name, message.strip()


def is_traceback(text: str) -> bool:
    """Whether ``text`` holds a Python traceback, or the middle or end of one (frames, chain lines)."""
    return TRACEBACK_HEAD in text or any(c in text for c in CHAINS) or _FRAME.search(text) is not None


def traceback_after(text: str) -> bool:
    """Whether a bare traceback follows the first line of the record ``text`` (an access line, say):
    the records stage joins one to the record above it, whatever that is."""
    return "\n" in text and is_traceback(text)


def node_error(text: str) -> tuple[str, str] | None:
    """``(name, message)`` of a Node error record: an ``XError: message`` line with ``at`` frames."""
    m = _NODE_HEAD.search(text)
    return (m.group(1), (m.group(2) or "").strip()) if m else None


Table = Sequence[tuple[str, Sequence[str]]]
#: ``Phrases.classify`` remembers the types of texts up to this long (a line, not a traceback),
#: this many of them at most (then it starts again).
MEMO_CHARS = 400
MEMO_ENTRIES = 2048

#: Causes any Python or native backend can log: they name what went wrong.
COMMON_CAUSES: tuple[tuple[str, tuple[str, ...]], ...] = (
    ("oom", ("OutOfMemoryError", "out of memory", "MemoryError", "failed to allocate")),
    ("timeout", ("TimeoutError", "timed out")),
    ("cuda", ("CUDA error",)),
)


class Phrases:
    """A backend's phrase table: ``error_type`` by phrase, causes before contexts.

    Causes name what went wrong (the exception raised, or its message) and win over contexts,
    which name where it happened; within a tier the leftmost phrase in the text wins. Without a
    phrase: ``bad_request`` for a ``ValueError`` raised while handling a request, ``exception`` for
    a traceback or a named exception, else ``error``.
    """

    __slots__ = ("_cause", "_context", "_known", "_type_of", "types")

    def __init__(self, causes: Table, contexts: Table = ()) -> None:
        self._type_of = {p: kind for kind, phrases in (*causes, *contexts) for p in phrases}
        # No groups: an alternation of plain literals lets ``re`` skip on the first characters.
        self._cause = _alternation(causes)
        self._context = _alternation(contexts)
        #: every error_type ``classify`` can return, so that a parser can start its counters at 0
        self.types: tuple[str, ...] = tuple(dict.fromkeys(
            (*(kind for kind, _ in (*causes, *contexts)), "bad_request", "exception", "error")))
        #: the types of short texts met before: a server repeats its error lines, and a live chunk
        #: holds a few lines of each, so the phrase searches would run again for every chunk
        self._known: dict[tuple[str, bool, bool], str] = {}

    def classify(self, text: str, request_handler: bool = False, traceback: bool = False) -> str:
        """The ``error_type`` of an error record's text (see the class docstring)."""
        if len(text) > MEMO_CHARS:
            return self._classify(text, request_handler, traceback)
        key = text, request_handler, traceback
        kind = self._known.get(key)
        if kind is None:
            known = self._known
            if len(known) >= MEMO_ENTRIES:
                known.clear()
            kind = known[key] = self._classify(text, request_handler, traceback)
        return kind

    def _classify(self, text: str, request_handler: bool, traceback: bool) -> str:
        """``classify`` without the memo."""
        m = self._cause(text) if self._cause else None
        if m is None and self._context:
            m = self._context(text)
        if m:
            return self._type_of[m.group()]
        if request_handler and "ValueError" in text:
            return "bad_request"
        return "exception" if traceback or _EXC_ANY.search(text) else "error"


def restarts_and_errors(model: str, error_types: Iterable[str]) -> list[ZeroSeries]:
    """The zero series every backend starts with: its restarts, and ``model``'s errors of each type."""
    return [("backend_restarts_total", ()), *(("backend_errors_total", (model, kind)) for kind in error_types)]


def _alternation(table: Table) -> Callable[[str], re.Match[str] | None] | None:
    phrases = [p for _, ps in table for p in ps]
    return re.compile("|".join(re.escape(p) for p in phrases)).search if phrases else None


#: A record's first line that continues the record above it whatever that is (``lines`` of the
#: traceback and indented shapes), and one that continues it after such a line only (``ends``).
_CONTINUES = lazyre.compile(rf"(?:{PYTHON_TRACEBACK.lines})|[ \t]")
_ENDS = lazyre.compile(rf"(?:{PYTHON_TRACEBACK.ends})")


def continues(text: str, last: str) -> bool:
    """Whether the record ``text`` continues the one whose last line is ``last``: it begins with a
    line that the record shapes would have joined to it, had a read pause not cut the record in two."""
    return _CONTINUES.match(text) is not None or (_ENDS.match(text) is not None and _CONTINUES.match(last) is not None)


class ErrorEnd:
    """The last line of a stream's record before, if that record was an error (or the rest of one).
    A record that continues it (``continues``) is its rest, which a read pause longer than the engine
    holds a record cut off (an error line, then its traceback): it counts with it, no error of its own.
    A record can only begin so where a batch begins, so a parser's fast path for runs of one-line
    records forgets the end (``clear``)."""

    __slots__ = ("line",)

    def __init__(self) -> None:
        self.line: str | None = None

    def rest(self, text: str) -> bool:
        """Whether the record ``text`` is the rest of the error record before."""
        return self.line is not None and continues(text, self.line)

    def parse(self, text: str, events: Callable[[], list[Event]]) -> list[Event]:
        """The events of the record ``text`` (``events()``), or only ``SEEN`` if it is the rest of
        the error record before; and whether it was an error remembered for the next."""
        if self.rest(text):
            self.after(text, True)
            return [SEEN]
        out = events()
        self.after(text, any(e.metric == "backend_errors_total" for e in out))
        return out

    def after(self, text: str, error: bool) -> None:
        """The record ``text`` was parsed: an error (or the rest of one, ``error``) or not."""
        self.line = text.rpartition("\n")[2] if error else None

    def clear(self) -> None:
        """Records that cannot continue an error were read."""
        self.line = None

    def dump(self) -> str | None:
        """For a parser's ``state`` (a line too long to keep is not kept)."""
        return self.line if self.line is None or len(self.line) <= MAX_SAVED_LINE else None

    def load(self, value: object) -> None:
        """From a parser's ``restore``: what ``dump`` gave; anything else is ignored."""
        if isinstance(value, str):
            self.line = value
