"""Shapes of multi-line records: which lines continue the record above them.

A parser declares the shapes its logs have (``Parser.shapes``); the records stage compiles them
into one regular expression that cuts a text into records in one ``findall`` (``Shapes``).

A ``Shape`` has up to four parts, each a regular expression matched at the start of a line:

- ``lines``: lines that continue any record above them (indented lines, ``Traceback (most recent
  call last):``);
- ``ends``: a line that continues the record only right after one of its ``lines`` (a Python
  traceback's final ``ValueError: x`` line comes after a frame; after anything else it starts a
  record of its own, as a Node ``TypeError: x`` line does);
- ``head`` and ``body``: a record's first line, and lines that continue it, which may refer to the
  head's named groups (Postgres repeats the first line's prefix on its ``DETAIL:`` lines). Name
  those groups after the shape, as they share one pattern with the other shapes' groups;
- ``close``: a line that ends a record: once it is taken, no line continues that record (the ``}``
  of a JSON object printed over lines). Like ``body``, it refers to the head's groups.

A pattern matches within one line (``[^\\n]``, never ``.`` across lines); the end of a line is
``(?![^\\r\\n])``, not ``$``.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from logmetrics import lazyre

#: An exception's (dotted) name: ``[A-Za-z_][\w.]*(?:Error|Exception|Exit|Interrupt)``, written with a
#: possessive repeat and fixed-width lookbehinds, which ``re`` runs without backtracking; the last
#: letter is tested first (a fifth of the time on lines that name no exception).
EXCEPTION_NAME = (
    r"[A-Za-z_][\w.]*+(?<=[rnt])(?:(?<=[\w.]Error)|(?<=[\w.]Exception)|(?<=[\w.]Exit)|(?<=[\w.]Interrupt))"
)
#: The end of a line, inside a text of many lines (``$`` only works on one line).
EOL = r"(?![^\r\n])"
#: The lines that open and chain the tracebacks of a Python error.
TRACEBACK_LINES = (r"Traceback \(most recent call last\)|During handling of the above exception"
                   r"|The above exception was the direct cause")
#: A line that names a Python exception: ``KeyError: 'x'``, ``SystemExit``.
EXCEPTION_LINE = EXCEPTION_NAME + r"(?::|" + EOL + ")"

#: How the lines end that open or chain a Python traceback: more of the record follows them.
TRACEBACK_OPENERS = ("Traceback (most recent call last):",
                     "During handling of the above exception, another exception occurred:",
                     "The above exception was the direct cause of the following exception:")
#: A traceback's frame line, ``  File "x.py", line 1, in f``, behind a logger's header or not.
FRAME = '  File "'
#: Python 3.11's exception group: its tracebacks and sub-exceptions are drawn in ``|`` and ``+-``
#: lines, the last of which is a rule of dashes (``    +------------------------------------``).
GROUP_OPENER = "Exception Group Traceback (most recent call last):"
_GROUP_END = lazyre.compile(r"\+-{10,}[ \t\r]*$")


def ends_in_traceback(text: str) -> bool:
    """Whether ``text`` (whole lines) ends inside a Python traceback, before its exception line: its
    last line opens or chains one, or is a frame, or a frame's source (and 3.11's carets) indented
    under it; or inside an exception group, before the rule that closes it. A record that ends so
    is not complete: its writer paused in the middle of it."""
    end = len(text) - 1 if text.endswith("\n") else len(text)
    start = end
    for _ in range(4):  # the last line and up to three above it (a frame, its source, its carets)
        start = text.rfind("\n", 0, start - 1) if start > 0 else -1
        if start < 0:
            break
    tail = text[start + 1:end].split("\n")
    if tail[-1].rstrip("\r").endswith(TRACEBACK_OPENERS):
        return True
    if GROUP_OPENER in text and not _GROUP_END.search(tail[-1]):  # (an inner group's end is taken for its own)
        return True
    for i in range(len(tail) - 1, -1, -1):
        col = tail[i].find(FRAME)
        if col >= 0 and '", line ' in tail[i]:  # the lines below it, if any, are its source, indented
            return all(line[col:col + 4] == "    " for line in tail[i + 1:])
    return False


@dataclass(frozen=True)
class Shape:
    """One multi-line shape of log records (see the module docstring)."""

    name: str
    lines: str = ""
    ends: str = ""
    head: str = ""
    body: str = ""
    close: str = ""


#: Indented lines continue the record above (stack frames, the llama.cpp timing block).
INDENTED = Shape("indented", lines=r"[ \t]")
#: A Python traceback: its header and chain lines, its indented frames, and its final exception
#: line, which continues the record only after a frame or source line (not after a Node ``at`` frame).
PYTHON_TRACEBACK = Shape("python_traceback", lines=rf"{TRACEBACK_LINES}|[ \t](?![ \t]*at )", ends=EXCEPTION_LINE)
#: A Node stack trace: ``TypeError: x`` starts the record, its ``    at f (file.js:1:2)`` frames continue
#: it, and so does the object Node prints after the last frame (``... {``, ``  code: 'X',`` lines, ``}``).
NODE_STACK = Shape("node_stack", lines=r"[ \t]+at |[ \t]+[\w$'\"]+: ", ends=r"\}" + EOL)
#: Postgres: ``DETAIL:``/``HINT:``/``CONTEXT:``/``STATEMENT:``/``QUERY:``/``LOCATION:`` lines with
#: the same ``log_line_prefix`` as the ``LOG:``/``ERROR:`` line they follow (two spaces after the colon).
#: Not with ``INDENTED``: a background process's lines begin with a space (an empty ``%h``).
POSTGRES = Shape(
    "postgres",
    head=r"(?P<postgres_prefix>[^\n]*?)(?:DEBUG\d?|INFO|NOTICE|WARNING|ERROR|LOG|FATAL|PANIC):  ",
    body=r"(?P=postgres_prefix)(?:DETAIL|HINT|CONTEXT|STATEMENT|QUERY|LOCATION):  ",
)
#: A JSON object printed over lines (``JSON.stringify(o, null, 2)``, Go's ``json.MarshalIndent``, a
#: logger's pretty option): a ``{`` alone at the start of a line, its indented lines (nested objects,
#: arrays), and the ``}`` at the start of a line that closes it. The indented lines and the ``}`` continue
#: only a record that such a ``{`` began; an object that never closes ends at the next line that is not
#: indented, so it cannot swallow the log after it.
PRETTY_JSON = Shape(
    "pretty_json",
    head=r"(?P<pretty_json>)\{[ \t]*" + EOL,
    body=r"[ \t](?P=pretty_json)",
    close=r"\}[ \t]*" + EOL + r"(?P=pretty_json)",
)
#: What a parser gets unless it declares its own: Python tracebacks and indented lines.
DEFAULT_SHAPES: tuple[Shape, ...] = (PYTHON_TRACEBACK, INDENTED)


def unconditional(shapes: tuple[Shape, ...]) -> str:
    """The shapes' continuation lines as one pattern for one line, with ``ends`` lines taken as
    continuing whatever is above them: for whole-chunk scans that cannot look at the line above."""
    parts = [p for s in shapes for p in (s.lines, s.ends) if p]
    return "|".join(f"(?:{p})" for p in parts) or "(?!)"


class Shapes:
    """Shapes compiled into one pattern that matches a whole record (from the start of its first line).

    ``split(text)`` gives the records of ``text`` (whole lines), ``last_start(text)`` where its last
    record begins. Blank lines never start a record and are left out of the records' text.

    Most lines start a record: one scan finds the lines that might continue one (``candidate``),
    the text between them is split at its newlines, and only the records around a candidate are
    matched with the whole-record pattern.
    """

    __slots__ = ("_candidate", "_is_candidate", "_record", "_starts", "record", "shapes")

    def __init__(self, shapes: tuple[Shape, ...]) -> None:
        self.shapes = shapes
        heads = [s.head for s in shapes if s.head]
        ending = [rf"(?:{s.lines})[^\n]*(?:\n(?:{s.ends})[^\n]*)?" for s in shapes if s.lines and s.ends]
        units = list(ending)
        units += [f"(?:{s.body})[^\n]*" for s in shapes if s.body]
        units += [f"(?:{s.lines})[^\n]*" for s in shapes if s.lines and not s.ends]
        closes = [f"(?:{s.close})[^\n]*" for s in shapes if s.close]
        # a record may begin inside a traceback (reading began there): a frame and its exception line
        first = "|".join([*(f"(?:{h})[^\n]*" for h in heads), *ending, r"[^\n]+"])
        more = rf"(?:\n+(?:{'|'.join(units)}))*" if units else ""
        if closes:
            more += rf"(?:\n+(?:{'|'.join(closes)}))?"
        self.record = re.compile(f"(?:{first}){more}")
        self._record = self.record.match
        # Lines that might continue a record (a body without the head's groups it refers to). The
        # scan leaves out ``ends`` lines: they continue a record only after a ``lines`` line, found.
        loose = [_BACKREF.sub(r"[^\n]*?", p) for s in shapes for p in (s.lines, s.body, s.close) if p]
        scan = "|".join(f"(?:{p})" for p in loose) or "(?!)"
        self._candidate = re.compile(rf"\n(?={scan})")  # ``\n+`` would lose re's fast literal search
        self._starts = re.compile(scan).match
        ends = [s.ends for s in shapes if s.ends]
        self._is_candidate = re.compile("|".join(f"(?:{p})" for p in (*loose, *ends)) or "(?!)").match

    def split(self, text: str) -> list[str]:
        """The records of ``text``, without their final newline."""
        out: list[str] = []
        pos = 0
        record = self._record
        if self._starts(text):  # the first line might be a record's continuation: a record of its own
            rec = record(text)
            assert rec is not None
            got = rec.group()
            out.append(_NL.sub("\n", got) if "\n\n" in got else got)
            pos = rec.end() + 1
        for m in self._candidate.finditer(text):
            at = m.start()  # the newline that ends the line above the candidate (or a blank line)
            if at < pos:
                continue  # inside the record matched last
            while at > pos and text[at - 1] == "\n":
                at -= 1  # blank lines: the record is the one above them
            head = text.rfind("\n", 0, at) + 1
            while text[head] == "\n":
                head += 1  # blank lines at the start of the text
            if head > pos:
                out += text[pos:head].split("\n")
            rec = record(text, head)
            assert rec is not None  # the record pattern matches any non-empty line
            got = rec.group()
            out.append(_NL.sub("\n", got) if "\n\n" in got else got)
            pos = rec.end() + 1
        if pos < len(text):
            out += text[pos:].split("\n")
        return [r for r in out if r]

    def last_start(self, text: str) -> int:
        """Index in ``text`` (whole lines) where its last record begins (``len(text)`` if it has none)."""
        end = len(text)
        while end and text[end - 1] == "\n":
            end -= 1
        if not end:
            return len(text)
        cand = self._is_candidate
        pos = end
        while True:  # back over the lines that might continue a record, to one that cannot
            start = text.rfind("\n", 0, pos) + 1
            if start == 0 or (start < pos and not cand(text, start)):
                break
            pos = start - 1
        while text[start] == "\n":
            start += 1  # blank lines at the start of the text
        record = self._record
        while pos < end:  # the records from that line on (few): the last one's start
            rec = record(text, start)
            assert rec is not None
            pos = rec.end()
            while pos < end and text[pos] == "\n":
                pos += 1
            if pos < end:
                start = pos
        return start


_BACKREF = lazyre.compile(r"\(\?P=\w+\)")
_NL = lazyre.compile(r"\n\n+")
_compiled: dict[tuple[Shape, ...], Shapes] = {}


def compiled(shapes: tuple[Shape, ...]) -> Shapes:
    """The compiled form of ``shapes``, one per distinct tuple."""
    out = _compiled.get(shapes)
    if out is None:
        out = _compiled[shapes] = Shapes(shapes)
    return out
