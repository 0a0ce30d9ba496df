"""Pieces shared by the parsers of Python-based backends (vLLM, llama-cpp-python, FastAPI apps).

- process prefixes that multi-process servers put in front of every line (``(APIServer pid=1) ``,
  ``(EngineCore_DP0 pid=8884) ``, ``(RayWorkerWrapper pid=1, ip=10.0.0.1) ``, ``[rank0]: ``);
- Python's default log line ``LEVEL:logger:message`` (``PY_DEFAULT_LINE``);
- the uvicorn access line, the route template that turns a raw path into a bounded label, and
  ``RouteLabels``, which keeps the routes a backend serves and folds scanner noise;
- Python tracebacks: which lines continue one (built from ``logmetrics.records.shapes``). The
  classification of an error record into an ``error_type`` is per backend (``errors.Phrases``).

Patterns here are strings or compiled ``re`` patterns meant to be embedded in ``\\n``-anchored
whole-chunk scans: none of them can cross a newline.
"""

from __future__ import annotations

import re
from typing import NamedTuple, TypeVar

from logmetrics import lazyre
from logmetrics.records.shapes import EOL, EXCEPTION_LINE, INDENTED, TRACEBACK_LINES
from logmetrics.records.shapes import EXCEPTION_NAME as EXCEPTION_NAME  # one definition, re-exported for the parsers
from logmetrics.store.guard import NOT_FOUND as NOT_FOUND  # the engine's fold values, one definition,
from logmetrics.store.guard import OTHER as OTHER  # re-exported for the parsers

# --- process prefixes ------------------------------------------------------------------------

#: One process prefix with its trailing space: multiprocessing / Ray worker names, torch ranks;
#: optionally after a bracketed tag from vLLM's ``VLLM_LOGGING_PREFIX`` (``[Stage-1] ``).
_PROC_FORMS = r"\([A-Za-z_][\w.-]* pid=\d+(?:,? ip=[^)\s]*)?\) |\[rank\d+\]: "
_PROC = rf"(?:{_PROC_FORMS})"
PROC_PREFIX = rf"(?:\[[\w.-]{{1,40}}\] {_PROC}?|{_PROC_FORMS})"
#: ``(?:PROC_PREFIX)?`` written as alternatives that each start with their first character and an
#: empty last one: the regex engine turns most lines away on that character, where an optional
#: group costs its bookkeeping at every line start (a fifth of a whole-chunk scan's time). Atomic:
#: what follows a prefix never starts with one (a level word, a traceback line, an exception name,
#: a line's end), so a line that has one cannot match without it, and a line that matches nothing
#: is not tried again from its start (a tenth of a scan of a log whose every line has a prefix).
PROC_PREFIX_OPT = rf"(?>\[[\w.-]{{1,40}}\] {_PROC}?|{_PROC_FORMS}|)"

_PREFIX = lazyre.compile(PROC_PREFIX)


def strip_prefix(line: str) -> str:
    """``line`` without the process prefix a multi-process server put in front of it, if any."""
    m = _PREFIX.match(line)
    return line[m.end():] if m else line


# --- Python's default log format -------------------------------------------------------------

#: ``logging.basicConfig()``'s default format ``LEVEL:logger:message`` (``INFO:faster_whisper:...``),
#: matched at a line's start: groups level, logger, message.
PY_DEFAULT_LINE = lazyre.compile(r"(DEBUG|INFO|WARNING|ERROR|CRITICAL):([\w.]+):([^\n]*)")



class UvicornLife(NamedTuple):
    """uvicorn's own life lines (its messages after ``INFO:     ``), as message starts."""

    started: str = "Started server process"
    ready: tuple[str, ...] = ("Application startup complete.", "Uvicorn running on ")
    stopping: tuple[str, ...] = ("Shutting down", "Finished server process")


UVICORN = UvicornLife()


# --- uvicorn access lines --------------------------------------------------------------------

#: ``INFO:     127.0.0.1:51408 - "POST /v1/chat/completions HTTP/1.1" 200 OK`` after the line's
#: start (and optional process prefix). One group: ``METHOD PATH HTTP/x.y" CODE``, so that a
#: ``findall`` yields plain strings that ``collections.Counter`` aggregates in C; split them with
#: ``split_access_key``. The client is ``host:port``, ``[v6]:port`` or ``-``.
UVICORN_ACCESS = r'INFO: +[^ \n]+ - "([^ "\n]+ [^ "\n]+ HTTP/[0-9.]+" \d{3})'

#: uvicorn's access line at the start of its line (after an optional process prefix): the form
#: whole-chunk scans count; ``access_line`` reads every other form too.
UVICORN_LINE = lazyre.compile(rf"{PROC_PREFIX_OPT}{UVICORN_ACCESS}")


#: An access line wherever it starts in its line: uvicorn's (``CLIENT - "REQUEST" CODE``, the
#: client ``host:port``, ``[v6]:port``, the old ``('ip', port)`` or ``-``), optionally after its
#: level however a logging config prints it (``INFO:``, ``INFO``, ``[INFO]``, ``INFO -``), and
#: gunicorn's Apache-style one (``HOST - USER [TIME] "REQUEST" CODE SIZE``). Groups: the level,
#: then method, path and code of either form.
_ACCESS_ANY = lazyre.compile(
    r"(?:(?<=[\s|\]:])|^)"
    r"(?:\[?((?:DEBUG|INFO|WARNING|WARN|ERROR|CRITICAL)|(?:debug|info|warning|warn|error|critical))"
    r"\]?(?::| -)?[ \t]+)?"
    r'(?:(?:\S+:\d+|\(\'[^\']*\', \d+\)|-) - "(\S+) (\S+) HTTP/[\d.]+" (\d{3})'
    r'|[^\s"\[]+ \S+ \S+ \[[^\]\n]+\] "(\S+) (\S+) HTTP/[\d.]+" (\d{3}) )'
)
#: What may end the prefix before an access line that has no level of its own: a separator a
#: process manager writes (pm2's and compose's ``|``, journald's ``prog[pid]:``, a bracketed tag)
#: or a time (``12:20:52``, ``2026-09-09T12:20:52.1Z``, a zone offset ``+0200``, a zone name after
#: the time: ``12:20:52 UTC``, ``12:20:52.123 CEST``).
_ZONE = r"(?<=\d )(?!GET\b)(?:UTC|GMT|Z|[A-Z]{1,3}[SD]?T)\b"
_PREFIX_END = lazyre.compile(rf"(?:[|\]]|[\])]:|(?=[\d:.,TZ+-]*\d)[\d:.,TZ+-]+|{_ZONE})\s*\Z")
#: A logging config's ``asctime - name - `` before the level: a prefix that starts with a time may
#: end in `` - ``.
_TIME_FIRST = lazyre.compile(r"\[?\d{4}-\d\d-\d\d[T ]\d\d:\d\d")
#: A level word anywhere in a prefix: the line's level came before, so what follows is its message.
_LEVEL_WORD = lazyre.compile(r"\b(?:DEBUG|INFO|WARNING|WARN|ERROR|CRITICAL|TRACE)\b", re.IGNORECASE)
#: What a prefix is made of, token by token: times and dates (``2026-09-09``, ``12:20:52,123``,
#: ``+0200``, ``Sep``), bracketed or parenthesised tags (``[12]``, ``(APIServer pid=1)``), pm2's
#: ``0|worker``, a name before ``|`` (compose, honcho), journald's ``host prog[pid]:``, a logger
#: name between `` - `` separators, and the separators. A word of a message is none of these.
#: A run of time characters is one token, taken whole (possessive): split in every possible way, a
#: date and time that is no prefix after all took exponential time to turn away.
_PREFIX_TOKENS = lazyre.compile(
    rf"\s*(?:(?:(?=[\d:.,TZ+/-]*\d)[\d:.,TZ+/-]++|{_ZONE}|(?:Jan|Feb|Mar|Apr|May|Jun|Jul|Aug|Sep|Oct|Nov|Dec)"
    r"|\[[^\]\n]*\]:?|\([^)\n]*\):?|\d+\|[\w.@-]+|[|-]|[\w.@/-]+\[\d+\]:"
    r"|[\w.@-]+(?=\s*\||\s+[\w.@/-]+\[\d+\]:|\s+-(?:\s|$)))\s*)+")
#: Python's default format on uvicorn's own access logger: ``INFO:uvicorn.access:`` is no message.
_PY_UVICORN = lazyre.compile(r"INFO:uvicorn(?:\.access)?:")
#: Process prefixes at the end of a prefix (``_prefix_ok``).
_PROC_AT_END = lazyre.compile(rf"(?:{_PROC_FORMS})+\Z")
#: The longest prefix taken before an access line that does not start its line.
MAX_ACCESS_PREFIX = 160
HTTP_METHODS = frozenset({"GET", "HEAD", "POST", "PUT", "DELETE", "CONNECT", "OPTIONS", "TRACE", "PATCH"})


def _prefix_ok(prefix: str) -> bool:
    """Whether what comes before an access line is a prefix, not a message that quotes one: at
    most ``MAX_ACCESS_PREFIX`` characters, no quote, no level word (the line's own level came
    before: the rest is its message; but Python's default ``INFO:uvicorn.access:``), made of
    prefix tokens only (``_PREFIX_TOKENS``: no word of a message), and it ends
    with a separator, a bracket or a time (``_PREFIX_END``), or in `` - `` after a leading time
    (a logging config's ``asctime - name - ``). Process prefixes at its end (vLLM's
    ``(APIServer pid=1) `` behind pm2's ``0|vllm  | ``, say) are left out of the checks: what is
    before them is the prefix checked, if anything."""
    if len(prefix) > MAX_ACCESS_PREFIX or '"' in prefix or "'" in prefix:
        return False
    if prefix.endswith((") ", "]: ")) and (proc := _PROC_AT_END.search(prefix)) is not None:
        prefix = prefix[:proc.start()]
        if not prefix:
            return True
    if _PY_UVICORN.fullmatch(prefix):
        return True
    if _LEVEL_WORD.search(prefix) or _PREFIX_TOKENS.fullmatch(prefix) is None:
        return False
    return _PREFIX_END.search(prefix) is not None or (
        prefix.rstrip().endswith(" -") and _TIME_FIRST.match(prefix) is not None)


def access_line(line: str) -> tuple[str, str, str] | None:
    """``(method, raw path, code)`` of an access line, else ``None``: a method HTTP does not
    define is ``OTHER`` (never text of the line). Turn the path into a label with
    ``route_template`` or ``RouteLabels.fold``.

    uvicorn's line at the start (after an optional process prefix) is the common case and is
    matched first. Otherwise the access line may follow any prefix a process manager or logging
    config puts before it (a time with a zone, pm2's ``0|worker  | ``, journald's ``host
    prog[pid]: ``, gunicorn's ``[time] [pid] `` before its ``[INFO]``), as long as that prefix is
    no message (``_prefix_ok``). A line that quotes an access line inside a message
    (``INFO: proxied: 10.0.0.1:5 - "GET / HTTP/1.1" 200``) is not one.
    """
    m = UVICORN_LINE.match(line)
    if m is not None:
        key = m.group(1)
        method, _, rest = key.partition(" ")
        return (method if method in HTTP_METHODS else "OTHER"), rest[: rest.rfind(" HTTP/")], key[-3:]
    http = line.find(" HTTP/")
    quote = line.rfind('"', 0, http)  # the request's: no quote may come before it, but in ('ip', port)
    if quote < 0 or line.find('"', 0, quote) >= 0 or (line.find("'", 0, quote) >= 0 and "('" not in line[:quote]):
        return None  # (a message quoting an access line)
    a = _ACCESS_ANY.search(line, 0, http + 20)
    if a is None:
        return None
    start = a.start()
    if start and not _prefix_ok(line[:start]):
        return None
    g = a.groups()
    method, path, code = (g[1], g[2], g[3]) if g[1] is not None else (g[4], g[5], g[6])
    return (method if method in HTTP_METHODS else "OTHER"), path, code


def access_labels(line: str) -> tuple[str, str, str] | None:
    """``(method, route template, code)`` of an access line (``access_line``), else ``None``: the
    labels before ``RouteLabels.fold``."""
    got = access_line(line)
    return None if got is None else (got[0], route_template(got[1]), got[2])

_ID_SEGMENT = lazyre.compile(
    r"\d+"                                                     # 42
    r"|[0-9a-fA-F]{8}-?[0-9a-fA-F]{4}-?[0-9a-fA-F]{4}-?[0-9a-fA-F]{4}-?[0-9a-fA-F]{12}"  # UUID
    r"|[0-9a-fA-F]{16,}"                                       # long hex
    r"|(?=[0-9a-fA-F]*\d)[0-9a-fA-F]{8,}"                      # hex with a digit
    r"|[A-Za-z]+[-_][\w-]*\d[\w-]*"                            # chatcmpl-abc123, file_9x
    r"|(?=[\w=+-]*\d)[\w=+-]{20,}"                             # long base64-ish token
    r"|.*%.*|.{41,}"                                           # encoded or long
    r"|(?:[^-_]+[-_]){4,}.*"                                   # a sentence typed as a slug
    r"|.*[^A-Za-z0-9_.~:-].*"                                  # e-mail, name=value, quotes, non-ASCII
    r"|[\d.:]+|\d[\w.-]*"                                      # versions, addresses, 3abc
)
MAX_ROUTE_SEGMENTS = 8
_route_cache: dict[str, str] = {}
_labels_cache: dict[str, tuple[str, str, str]] = {}  # (``split_access_key``)
_K = TypeVar("_K")
_V = TypeVar("_V")


def remember(cache: dict[_K, _V], key: _K, value: _V, most: int = 4096) -> _V:
    """``value``, kept as ``cache[key]``: a bounded memo of what is met again and again (routes,
    labels, models), emptied when it holds ``most`` entries."""
    if len(cache) >= most:
        cache.clear()
    cache[key] = value
    return value


def route_template(path: str) -> str:
    """A bounded route label for a raw request path: no query string, ids replaced by ``{id}``."""
    route = _route_cache.get(path)
    if route is not None:
        return route
    raw = path
    if "?" in path or "#" in path:
        path = path.partition("?")[0].partition("#")[0]
    if "://" in path:  # absolute-form request target (proxies): keep only the path
        path = "/" + path.split("://", 1)[1].partition("/")[2]
    if not path.startswith("/"):
        route = path if path == "*" else "/{id}"
    else:
        parts = path.split("/")[1:]
        more = len(parts) > MAX_ROUTE_SEGMENTS
        parts = [p if p in _WORDS else "{id}" if _is_id(p) else p for p in parts[:MAX_ROUTE_SEGMENTS]]
        route = "/" + "/".join(parts) + ("/..." if more else "")
    return remember(_route_cache, raw, route)


def _is_id(segment: str) -> bool:
    """Whether a path segment (or, with a file extension, its stem) is an id (``_ID_SEGMENT``). A
    short segment of ASCII letters only (``threads``, ``models``) never is: no alternative of
    ``_ID_SEGMENT`` matches it, so it is told without a regex (most segments are such words), and
    ASCII digits always are; the segments found no id are kept in ``_WORDS``."""
    if segment.isascii():
        if len(segment) < 16 and segment.isalpha():
            remember(_WORDS, segment, None)
            return False
        if segment.isdigit():  # (the first alternative)
            return True
    stem = segment.rpartition(".")[0] if "." in segment else ""  # ("" is never an id)
    if _ID_SEGMENT.fullmatch(segment) or (stem and _ID_SEGMENT.fullmatch(stem)):
        return True
    remember(_WORDS, segment, None)
    return False


#: Segments found no id (``v1``, ``threads``): met again and again, told by a look-up (bounded).
_WORDS: dict[str, None] = {}


def split_access_key(key: str) -> tuple[str, str, str]:
    """``(method, route, code)`` labels from one ``UVICORN_ACCESS`` capture."""
    labels = _labels_cache.get(key)
    if labels is None:
        method, _, rest = key.partition(" ")
        path = rest[: rest.rfind(" HTTP/")]
        labels = (method if method in HTTP_METHODS else "OTHER"), route_template(path), key[-3:]
        remember(_labels_cache, key, labels)
    return labels


# --- client errors ----------------------------------------------------------------------------

#: ``llm_client_errors_total`` types of an HTTP 4xx answer, by code (a request the client got wrong:
#: never a backend error). FastAPI answers a body it cannot read (bad JSON, a missing field) 422.
CLIENT_ERROR_TYPES = {"400": "invalid_request", "401": "unauthorized", "403": "forbidden", "404": "not_found",
                      "405": "method_not_allowed", "408": "timeout", "413": "too_large",
                      "415": "unsupported_media_type", "422": "invalid_request", "429": "rate_limited"}


def client_error_type(code: str, route: str) -> str | None:
    """The ``llm_client_errors_total`` type of an answer (``None`` unless 4xx): a 404/405 on a route
    the backend does not serve (``RouteLabels`` folded it) is ``not_found_route``."""
    if len(code) != 3 or code[0] != "4":
        return None
    return "not_found_route" if route == NOT_FOUND else CLIENT_ERROR_TYPES.get(code, "client_error")


def access_answer(code: str, route: str, served: bool, not_found: str = "") -> tuple[bool, str] | None:
    """What an access line's answer says of a request, for every parser that reads access lines:
    ``(True, type)`` for a 4xx, the client's error by ``llm_client_errors_total`` type (a 404 on a
    ``served`` route is ``not_found`` when given: the model asked for, not the route, is missing);
    on a route where the backend serves requests (``served``) ``(False, "ok")`` for a 2xx and
    ``(False, "error")`` for a 5xx, the request's outcome; ``None`` for anything else."""
    kind = client_error_type(code, route)
    if kind is not None:
        return True, (not_found if served and not_found and code == "404" else kind)
    if served and code[:1] in ("2", "5"):
        return False, ("ok" if code[0] == "2" else "error")
    return None


# --- model names -------------------------------------------------------------------------------


#: What no model id or file name holds, and typed text (an e-mail, a query string, a sentence) does.
_NOT_MODEL = lazyre.compile(r"[\s@?=&'\"<>{}|\\]")


def model_label(value: str) -> str | None:
    """A model label from a model id or path a server logs: a local path gives its last part
    (``/models/ct2-whisper-tiny`` -> ``ct2-whisper-tiny``), a hub id stays (``Systran/faster-whisper-small``);
    ``None`` for nothing usable (``.``, ``model``)."""
    value = value.strip().rstrip("/")
    if value.startswith(("/", ".", "~")) or "\\" in value:
        value = value.replace("\\", "/").rsplit("/", 1)[-1]
    if not value or value in (".model", "model", ".") or _NOT_MODEL.search(value):
        return None  # (a name with a space, ``@``, ``?``, ``=`` or a quote is text, not a model)
    return value


# --- the models a stream counted for -------------------------------------------------------


class Counted:
    """The models a stream's events counted for, whose series can move (a bounded set: the
    parser's ``zero_series``), and those of the batch being read, in order (``parse_batch``'s
    fourth value: reset it per batch)."""

    __slots__ = ("models", "passed")

    MOST = 64  # models kept

    def __init__(self) -> None:
        self.models: dict[str, None] = {}
        self.passed: list[str] = []

    def add(self, model: str) -> bool:
        """Events count for ``model``; whether it is new."""
        if not self.passed or self.passed[-1] != model:
            self.passed.append(model)
        if model in self.models:
            return False
        remember(self.models, model, None, self.MOST)
        return True

    def dump(self) -> list[str]:
        """The models counted for (JSON), for a restart of logmetrics: their zero series go on."""
        return list(self.models)

    def load(self, data: object) -> None:
        """Take back what ``dump`` gave (anything else is ignored)."""
        if isinstance(data, list):
            self.models.update((m, None) for m in data[: self.MOST] if isinstance(m, str))


# --- which routes keep their label ----------------------------------------------------------

MAX_KNOWN_ROUTES = 1024
MAX_UNKNOWN_ROUTES = 64
_PARAM = lazyre.compile(r"\{[^/{}]*\}")


class RouteLabels:
    """Per stream, the ``(method, route, code)`` labels of access keys, with scanner noise folded.

    A route is *known* to be served when the parser declares it (``fixed`` routes, ``prefixes``
    such as a FastAPI app's mount points), when the backend lists it at start-up (``learn``, e.g.
    vLLM's ``Route: ..., Methods: ...`` lines; ``{param}`` segments become ``{id}``), or once it
    answered 1xx/2xx/3xx. A known route always keeps its label. A 404 or 405 on a route not known
    to be served becomes ``NOT_FOUND`` (scanners probing random paths); other answers on unknown
    routes keep their label for up to ``MAX_UNKNOWN_ROUTES`` routes per stream, then ``OTHER``.
    Both sets are bounded. Decisions are taken per distinct access key, never per line.
    """

    __slots__ = ("final", "known", "prefixes", "unknown")

    def __init__(self, fixed: tuple[str, ...] = (), prefixes: tuple[str, ...] = ()) -> None:
        self.known: set[str] = set()
        self.unknown: set[str] = set()
        #: labels of access keys on known routes: final, since a known route stays known
        self.final: dict[str, tuple[str, str, str]] = {}
        self.prefixes = prefixes
        for path in fixed:
            self.learn(path)

    def learn(self, path: str) -> None:
        """A route the backend says it serves (a path, or a template with ``{param}`` segments)."""
        if len(self.known) < MAX_KNOWN_ROUTES:
            route = route_template(_PARAM.sub("0", path))
            self.known.add(route)
            self.unknown.discard(route)

    def dump(self) -> list[list[str]]:
        """The routes learned from the log (JSON), for a restart of logmetrics: known, then unknown."""
        return [sorted(self.known), sorted(self.unknown)]

    def load(self, data: object) -> None:
        """Take back what ``dump`` gave, within the bounds (anything else is ignored)."""
        if not (isinstance(data, list) and len(data) == 2 and all(isinstance(part, list) for part in data)):
            return
        known, unknown = ([r for r in part if isinstance(r, str)] for part in data)
        self.known.update(known[: max(0, MAX_KNOWN_ROUTES - len(self.known))])
        self.unknown.update(r for r in unknown[:MAX_UNKNOWN_ROUTES] if r not in self.known)
        self.unknown = set(sorted(self.unknown)[:MAX_UNKNOWN_ROUTES])

    def labels(self, key: str) -> tuple[str, str, str]:
        """``(method, route, code)`` labels of one ``UVICORN_ACCESS`` capture, noise folded."""
        labels = self.final.get(key)
        if labels is None:
            labels = self.fold(split_access_key(key))
            if labels[1] in self.known:
                remember(self.final, key, labels)
        return labels

    def fold(self, labels: tuple[str, str, str]) -> tuple[str, str, str]:
        """``(method, route template, code)`` labels, from any access format, noise folded."""
        method, route, code = labels
        if route in self.known:
            return labels
        if code < "400" or (self.prefixes and route.startswith(self.prefixes)):
            if len(self.known) < MAX_KNOWN_ROUTES:
                self.known.add(route)
                self.unknown.discard(route)
                return labels
        elif code in ("404", "405"):
            return method, NOT_FOUND, code
        if route in self.unknown:
            return labels
        if len(self.unknown) < MAX_UNKNOWN_ROUTES:
            self.unknown.add(route)
            return labels
        return method, OTHER, code


# --- Python tracebacks -----------------------------------------------------------------------

#: The body of a line that continues the record above it: indented lines, the opening and
#: chaining lines of a traceback, a ``SomeError: message`` line (whatever is above it: a whole-chunk
#: scan cannot look at the line above), and empty lines (Python puts them around "During handling
#: ..."). Built from the shapes of ``logmetrics.records.shapes`` (``INDENTED``, ``PYTHON_TRACEBACK``).
TRACEBACK_BODY = rf"(?:{INDENTED.lines}|{TRACEBACK_LINES}|{EXCEPTION_LINE}|{EOL})"
