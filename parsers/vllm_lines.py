"""vLLM's uvicorn access lines and error records, and counting each record once in ``matched``.

Access lines and single-line errors come out of one ``findall`` over the chunk, aggregated in C.
A chunk that holds a multi-line error record (a traceback, however it is printed) is scanned a
second time, error by error, so that each record counts once. Positions below are those of the
newline that begins a line in the scanned text (which starts with a newline).
"""

from __future__ import annotations

from collections import Counter
from typing import NamedTuple

from logmetrics import lazyre
from logmetrics.events import Event

from . import vllm_patterns as P
from .common import UVICORN_LINE, RouteLabels, access_labels
from .vllm_kinds import Fatal, Mark
from .vllm_startup import life_kind

#: How uvicorn's access lines begin (its level name padded to 9 characters).
ACCESS_START = "\nINFO:     "
#: In the reversed text, `` HTTP/`` and what comes before it in its line, back to the line's start
#: (``prefixed_access``, for a text where the scan saw such a line: ``P.LINES``' last group), but
#: in a line that can hold no access line other than the scan's: uvicorn's
#: own (``INFO:`` at the line's start, the client, ``"METHOD PATH``, reversed), which the scan
#: counted, and a line that starts with a vLLM header, whose level word no access line's prefix may
#: hold (``common.access_line``).
_HTTP_LINE_REVERSED = lazyre.compile(
    r'/PTTH (?![^ "\n]+ [^ "\n]+" - [^ \n]+ +:OFNI(?![^\n]))[^\n]*+'
    + "".join(rf"(?<! \d\d-\d\d {level[::-1]})" for level in ("DEBUG", "INFO", "WARNING", "ERROR", "CRITICAL"))
)


class Records:
    """Per scan, what it takes to count each record once in ``matched``.

    ``heads``: where the records already counted begin. ``inside``: lines that produced events
    inside another line's record (errors after a line they are glued to, the logo), resolved by
    ``resolve`` once every rule has run. ``dynamic``: lines whose events depend on state (start-up
    lines, preemption warnings) and that produced some. ``life``: the uvicorn lifecycle lines (server
    ready, shutting down) the scan saw, by their text, to be handled with the start-up lines.
    ``more_lines``: the lines after the first of the multi-line error records (matched lines).
    """

    __slots__ = ("dynamic", "heads", "inside", "life", "more_lines")

    def __init__(self) -> None:
        self.heads: set[int] = set()
        self.inside: list[int] = []
        self.dynamic: set[int] = set()
        self.life: set[str] = set()
        self.more_lines = 0

    def clear(self) -> None:
        """Forget the previous scan."""
        self.more_lines = 0
        self.heads.clear()
        self.inside.clear()
        self.dynamic.clear()
        self.life.clear()

    def place(self, pos: int, head: bool) -> int:
        """A record at ``pos`` gave events: 1 if it starts its record (counted here), else 0 (a line
        inside another record, counted with it by ``resolve``)."""
        if head:
            self.heads.add(pos)
        else:
            self.inside.append(pos)
        return int(head)

    def resolve(self, t: str) -> int:
        """How many records, not counted yet, hold the lines in ``inside``."""
        matched = 0
        for pos in sorted(self.inside):
            head = record_head(t, pos)
            if head in self.heads:
                continue
            self.heads.add(head)
            if head == pos or not (head in self.dynamic or always_events(t, head)):
                matched += 1
        return matched


def scanned(text: str) -> str:
    """A batch's text as the scans read it: after a newline (every line begins with one), ended by
    one, with no ``\r`` before a newline."""
    t = "\n" + text if text.endswith("\n") else "\n" + text + "\n"
    return t.replace("\r\n", "\n") if "\r" in t else t


class Digest(NamedTuple):
    """What the access-and-error scan reads of a text, which no parser state changes (``digest``):
    run ahead of the parser where a core is free (``prescan``), as it is the largest part of a
    batch's reading. ``access_and_errors`` makes the events of it."""

    access: Counter[str]  # uvicorn access lines by key (``UVICORN_ACCESS``' group)
    only_access: bool  # every line is one (``matched``: how many)
    matched: int  # the access lines and the errors counted in ``errors``
    errors: Counter[str]  # errors by type, but client errors and those of a ``FATAL_TYPES`` kind
    fatal: list[Fatal]  # the fatal one-line errors, placed by their text (``locate``), in order
    relocate: bool  # ... or some could not be: placed by a scan of the errors (``error_records``)
    life: tuple[str, ...]  # the uvicorn lifecycle lines' texts
    prefixed: bool  # a line holds ``HTTP/`` and no vLLM header: an access line behind a prefix, perhaps
    multi: bool  # a multi-line error record: every error is counted again, record by record


def prescan(text: str) -> Digest:
    """``digest`` of a batch's text (``Parser.prescan``)."""
    return digest(scanned(text))


def digest(t: str) -> Digest:
    """Access lines and errors of ``t``, as far as no parser state decides (``Digest``)."""
    # nothing but access lines, likely (a busy API server): its first and last lines tell at once
    # when not, sparing the two counts
    if t.startswith(ACCESS_START) and t.startswith(ACCESS_START, t.rfind("\n", 0, len(t) - 1)) \
            and t.count(ACCESS_START) == (n_lines := t.count("\n") - 1):
        keys = P.ACCESS.findall(t)  # a simpler scan, with one group, gives the same keys
        if len(keys) == n_lines:
            return Digest(Counter(keys), True, n_lines, Counter(), [], False, (), False, False)
    access: Counter[str] = Counter()
    errors: Counter[str] = Counter()
    lines: dict[str, tuple[str, int]] = {}  # fatal single-line errors: message -> type, how many
    life: list[str] = []
    matched = 0
    multi = prefixed = False
    for (key, source, inside, raw, text, more, life_text, http), n in Counter(P.LINES.findall(t)).items():
        if http:
            prefixed = True
        elif life_text:
            life.append(life_text)
        elif key:
            access[key] += n
            matched += n
        elif inside or raw or more:
            multi = True
        elif client_error(text):  # the client's fault: counted from its access line (no events)
            pass
        else:
            kind = P.classify_error(text, "serving" in source)
            if kind in P.FATAL_TYPES:
                lines[text] = kind, lines[text][1] + n if text in lines else n
            else:
                errors[kind] += n
                matched += n
    fatal: list[Fatal] = []
    relocate = bool(lines) and not multi and not locate(t, lines, fatal)
    return Digest(access, False, matched, errors, [] if relocate else fatal, relocate, tuple(life), prefixed, multi)


def access_and_errors(t: str, d: Digest, events: list[Event], records: Records, routes: RouteLabels,
                      fatal: list[Fatal], errors: Counter[str], joined: bool = False) -> int:
    """The events of the access lines and errors of ``t`` (its ``digest``, ``d``), and how many
    records they make count.

    Errors of a ``FATAL_TYPES`` kind give no event and no count here: they go to ``fatal``, for
    the parser to count once per crash (and then to count their records: ``Fatal``). The others
    are counted by type in ``errors``, for the parser to label with the model.
    """
    access: Counter[tuple[str, str, str]] = Counter()
    final = routes.final
    for key, n in d.access.items():
        access[final.get(key) or routes.labels(key)] += n
    matched = d.matched
    if not d.only_access:
        records.life.update(d.life)
        errors.update(d.errors)
        if d.prefixed:  # access lines behind a prefix, perhaps
            matched += prefixed_access(t, access, routes)
        if d.multi:  # a multi-line error record: count every error again, record by record
            errors.clear()
            matched = sum(access.values()) + error_records(t, errors, records, fatal, joined)
        elif d.relocate:
            error_records(t, Counter(), Records(), fatal)
        else:
            fatal += d.fatal
    events.extend(_access_events(access))
    return matched


def prefixed_access(t: str, access: Counter[tuple[str, str, str]], routes: RouteLabels) -> int:
    """Access lines of ``t`` that the scan did not see: behind a prefix that a process manager or
    logging config adds (a time with its zone, pm2's ``0|api  | ``, ``INFO   `` with no colon; see
    ``common.access_line``), or uvicorn's in another form. Added to ``access``; returns how many.
    Lines of the scanned form (the scan counted them), and lines that start as an error record
    (counted as one), are skipped.

    The lines that hold `` HTTP/`` are found by one regex over the reversed text, which reads each
    such line back to its start, but uvicorn's own lines and vLLM's header lines
    (``_HTTP_LINE_REVERSED``)."""
    size = len(t)
    uvicorn = UVICORN_LINE.match
    n = 0
    for m in _HTTP_LINE_REVERSED.finditer(t[::-1]):
        line = t[size - m.end():t.find("\n", size - m.start())]
        if uvicorn(line) is None and not line.startswith(("ERROR", "CRITICAL")):
            got = access_labels(line)
            if got is not None:
                access[routes.fold(got)] += 1
                n += 1
    return n


def client_error(text: str) -> bool:
    """Whether an error line reports a client error (``P.CLIENT_ERROR``, whose every form holds
    ``code``: looked for first, as the regex has no literal to start its search from)."""
    return "code" in text and P.CLIENT_ERROR.search(text) is not None


def _access_events(access: Counter[tuple[str, str, str]]) -> list[Event]:
    """One ``http_requests_total`` event per (method, route, code) counted."""
    return [Event("http_requests_total", lab, n, rule="access") for lab, n in access.items()]


def life_lines(t: str, texts: set[str]) -> list[Mark]:
    """Where the uvicorn lifecycle lines with these ``texts`` are in ``t``, and their kinds: found
    with ``str.find`` (they are few), each checked to be a whole uvicorn line."""
    out: list[Mark] = []
    at_line = P.LIFE_AT.match
    for text in texts:
        kind = life_kind(text)
        pos = t.find(text)
        while pos >= 0:
            m = at_line(t, t.rfind("\n", 0, pos) + 1)
            if m is not None and m.end() == pos:
                out.append(Mark(pos, kind, ""))
            pos = t.find(text, pos + len(text))
    return out


def locate(t: str, lines: dict[str, tuple[str, int]], fatal: list[Fatal]) -> bool:
    """Add the single-line error records of ``lines`` (message: type and count, in the order of
    their first lines) to ``fatal``, found with ``str.find`` (no regex scan of the whole text);
    whether all were found. Each message's first line comes after the previous message's."""
    first = 0
    head = P.ERROR_HEAD.fullmatch
    for text, (kind, n) in lines.items():
        at = first
        found = 0
        needle = text + "\n"
        while text and found < n:
            at = t.find(needle, at)
            if at < 0:
                return False
            start = t.rfind("\n", 0, at)
            if head(t, start, at):
                if not found:
                    first = at
                fatal.append(Fatal(start, kind, True))
                found += 1
            at += 1
        if not text:
            return False
    return True


def error_records(t: str, counts: Counter[str], records: Records, fatal: list[Fatal], joined: bool = False) -> int:
    """One error per error record, classified by its exception lines (the last first), then its
    first line; how many records that start with an error line. Fatal ones go to ``fatal``.
    ``joined``: lines at the start of ``t`` that continue a record belong to the error record that
    ended the text before (counted then: its writer paused longer than a record is held), and
    count no error of their own."""
    matched = 0
    covered = rest_end(t) if starts_with_rest(t, joined) else 0  # (that rest: counted by the parser)
    lead = P.EMPTY_FIRST.match(t) if joined else None
    first = lead.end() if lead is not None else -1  # where the first line that is not empty begins
    for m in P.ERROR_START.finditer(t):
        start = m.start()
        if start < covered:  # inside the record of an earlier error
            continue
        source, inside, raw, text, more = m.groups()
        if start == first and (inside is not None or raw is not None):
            covered = record_end(t, start, m.end()) if more is not None else m.end()
            records.more_lines += t.count("\n", m.end(), covered)  # (its lines, as when read at once)
            records.place(start, False)  # (a line of a record counted before: matched, no error)
            continue
        traceback = raw is not None or P.TRACEBACK_TEXT in text
        if more is not None:
            end = record_end(t, start, m.end())
            records.more_lines += t.count("\n", m.end(), end)
            traceback = traceback or P.TRACEBACK_TEXT in t[start:end]
            text = "\n".join(reversed(P.EXCEPTION_IN.findall(t, m.end(), end + 1))) + "\n" + text
            covered = end
        if more is None and client_error(text):  # the client's fault: counted from its access line
            continue
        kind = P.classify_error(text, source is not None and "serving" in source, traceback)
        if kind in P.FATAL_TYPES:
            fatal.append(Fatal(start, kind, inside is None and raw is None))
            continue
        counts[kind] += 1
        matched += records.place(start, inside is None and raw is None)
    return matched


def record_end(t: str, start: int, end: int) -> int:
    """Where the error record whose first line spans ``start`` to ``end`` ends.

    It goes on over continuation lines, but a traceback that directly follows an exception line
    (no "During handling ..." between them) is another error.
    """
    last = len(t) - 1
    cont = P.CONTINUATION.match
    after_exception = bool(P.EXCEPTION_AT.match(t, start + 1))
    while end < last and cont(t, end + 1):
        if after_exception and P.TRACEBACK_AT.match(t, end + 1):
            break
        if not P.EMPTY_AT.match(t, end + 1):
            after_exception = bool(P.EXCEPTION_AT.match(t, end + 1))
        end = t.find("\n", end + 1)
    return end


def record_head(t: str, pos: int) -> int:
    """Where the record holding the line at ``pos`` begins."""
    cont = P.CONTINUATION.match
    while pos > 0 and cont(t, pos + 1):
        pos = t.rfind("\n", 0, pos)
    return pos


def always_events(t: str, pos: int) -> bool:
    """Whether the line at ``pos`` is of a kind that always gives events."""
    line = t[pos : t.find("\n", pos + 1) + 1]
    return bool(P.ERROR_START.match(line) or P.ACCESS.match(line) or P.STATS.match(line, 1)
                or any(rx.search(line) for rx in (P.FINISHED_AT, P.ABORTED_LIST, P.REQUEST_ENDED, P.V0_PREFIX)))


def ends_in_error(t: str, joined: bool = False) -> bool:
    """Whether the last record of ``t`` holds an error (more lines of it may come later); with
    ``joined`` (``t`` begins with the rest of an error record), also where that rest fills ``t``."""
    head = record_head(t, t.rfind("\n", 0, len(t) - 1))
    if P.ERROR_START.search(t, head) is not None:
        return True
    return joined and head == 0 and P.CONTINUATION.match(t, 1) is not None


def ends_after_exception(t: str) -> bool:
    """Whether the last line of ``t`` that is not empty names an exception: a traceback that comes
    right after it is another error (``record_end``)."""
    pos = t.rfind("\n", 0, len(t) - 1)
    while pos > 0 and P.EMPTY_AT.match(t, pos + 1):
        pos = t.rfind("\n", 0, pos)
    return pos >= 0 and P.EXCEPTION_AT.match(t, pos + 1) is not None


def starts_with_rest(t: str, joined: bool) -> bool:
    """Whether ``t`` begins with the rest of a record whose first lines came before it, which no
    scan of errors finds: a raw traceback's (its frames, its exception line), or with ``joined``
    (an error record ended the text before) any line that continues a record."""
    return P.HEADLESS.match(t) is not None or (joined and P.REST.match(t) is not None)


def rest_end(t: str) -> int:
    """Where the rest of a record at the start of ``t`` (``starts_with_rest``) ends."""
    return record_end(t, 0, t.find("\n", 1))


def headless(t: str) -> tuple[str, int]:
    """The rest of a record at the start of ``t`` (``starts_with_rest``): its error type, and its
    lines after the first."""
    record = t[1:rest_end(t)]
    return P.classify_error(record, traceback=True), record.count("\n")
