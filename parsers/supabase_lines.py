"""One record of a Supabase stream read into a ``Line``: which component wrote it, at what level,
whether it is a request (and its duration), a start-up, readiness or an error.

The reading is per format (``supabase_patterns``, ``supabase_elixir``); what is counted is the
parser's business (``parsers.supabase``). Nothing here keeps state: what depends on the records
before (a PostgREST error's JSON line, the second line of an Erlang crash, which Elixir service a
stream is) is decided by the parser.

A JSON object may fill a line or be printed over lines (the ``PRETTY_JSON`` shape: ``{``, its
indented lines, ``}``); either way it is read the same, and one that never closed (cut off) is read
from its top-level fields that did arrive.
"""

from __future__ import annotations

import json
import math
from typing import NamedTuple

import orjson

from logmetrics import lazyre

from . import supabase_elixir as E
from . import supabase_patterns as P

#: ``Line.life`` values: a start-up (``start``), ready (``ready``), both, or down (``down``).
START, READY, START_READY, DOWN = "start", "ready", "start+ready", "down"
_PG_READY = "database system is ready to accept connections"
_PG_DOWN = ("database system is shut down", "received fast shutdown request", "received smart shutdown request",
            "received immediate shutdown request", "terminating any other active server processes")
_PGRST_READY = ("Connection successful", "Successfully connected", "Schema cache loaded", "Listening on port")
#: The code label of a status that is a number outside 100..599 (``099``), never the number itself.
INVALID_CODE = "invalid"
_PGRST_ERROR = ("error", "Error", "ERROR", "failed", "Failed", "Could not", "could not", "FATAL")


class Line(NamedTuple):
    """What one record says. ``component`` "" when the format does not tell (Elixir, a JSON object of no
    known service)."""

    component: str
    kind: str  # the format, for the events' rule: "access", "postgres", "json", ...
    level: str = "info"  # debug, info, notice, warning, error or critical; "" for a request line (not a log record)
    request: tuple[str, str, str] | None = None  # method, raw path, status code
    seconds: float | None = None
    life: str = ""
    error: bool = False


def read(text: str) -> Line | None:
    """The ``Line`` of a record, or ``None`` for a record of no known format. A prefix left on the
    line (a log viewer's time; a compose service name where compose output was itself captured in
    a container's log, so that the envelope layer saw no compose stream) is tried without."""
    line = _read(text)
    if line is None:
        m = P.VIEWER.match(text) or P.COMPOSE.match(text)
        if m is not None:
            line = _read(text[m.end():])
            service = m.groupdict().get("service")
            if line is not None and service:
                line = line._replace(component=component_named(service) or line.component)
    return line


def _read(text: str) -> Line | None:
    first = text.split("\n", 1)[0]
    if first.startswith(("{", '"{')):
        if first.rstrip() == "{" and "\n" in text:
            return _object(_loads(text) or _fields(text))
        return _json(first)
    m = P.POSTGRES.match(text)
    if m is not None:
        return _postgres(m.group("sev"), m.group("msg"))
    m = P.CLF.match(first)
    if m is not None:
        return _access(m.group("user"), m.group("req"), m.group("status"), m.group("rest"))
    m = P.PGRST.match(first)
    if m is not None:
        return _pgrst(m.group("msg"))
    m = E.LINE.match(first) if "]" in first else None
    if m is not None:
        level = P.LEVELS.get(m.group("level"), "info")
        msg = m.group("msg")
        life = START_READY if msg.startswith("Running ") and "Web.Endpoint with" in msg else ""
        return Line("", "elixir", level, life=life, error=level in P.ERROR_LEVELS or E.exited(msg))
    for f in P.TEXT_FORMATS:
        m = f.pattern.match(first)
        if m is not None:
            level = P.LEVELS.get((m.group("level") or "info").lower(), "info")
            life = START_READY if f.ready and m.group("msg").startswith(f.ready) else ""
            component = f.component or component_named(m.group("module"))
            return Line(component, f.kind, level, life=life, error=level in P.ERROR_LEVELS)
    if first.startswith(P.ERLANG_HALT) or first.startswith(P.ERLANG_DUMP):
        return Line("", "erlang", "critical", life=DOWN, error=True)
    if E.RAISE.match(first):
        return Line("", "elixir", "error", error=True)
    return None


def component_named(name: str) -> str:
    """The component a Bitnami init-script module, a compose service or a container names ("" when none)."""
    name = name.rsplit("/", 1)[-1].lower()
    for word, component in (("postgrest", P.REST), ("postgres", P.DB), ("kong", P.KONG), ("gotrue", P.AUTH),
                            ("storage", P.STORAGE), ("realtime", P.REALTIME), ("analytics", P.ANALYTICS),
                            ("logflare", P.ANALYTICS), ("supavisor", P.POOLER), ("pooler", P.POOLER),
                            ("supabase-db", P.DB), ("supabase-auth", P.AUTH), ("supabase-rest", P.REST)):
        if word in name:
            return component
    return ""


def _postgres(sev: str, msg: str) -> Line:
    level = P.LEVELS.get(sev.lower().rstrip("0123456789"), "info")
    life = START_READY if msg.startswith(_PG_READY) else DOWN if msg.startswith(_PG_DOWN) else ""
    return Line(P.DB, "postgres", level, life=life, error=level in P.ERROR_LEVELS)


def _access(user: str, req: str, status: str, rest: str) -> Line:
    m = P.REQUEST.match(req)
    method, path = (m.group("method"), m.group("path")) if m else ("OTHER", "")
    kong = user == "-" or "kong_request_id:" in rest or path.startswith(P.KONG_PREFIXES)
    return Line(P.KONG if kong else P.REST, "access", "", request=(method, path, _code(status)))


def _pgrst(msg: str) -> Line:
    if msg.startswith("Starting PostgREST"):
        return Line(P.REST, "pgrst", "info", life=START)
    if msg.startswith(_PGRST_READY):
        return Line(P.REST, "pgrst", "info", life=READY)
    if msg.startswith("{"):  # an error object: the parser decides whether it belongs to the line above
        return Line(P.REST, "pgrst_json", "error", error=True)
    error = any(w in msg for w in _PGRST_ERROR)
    return Line(P.REST, "pgrst", "error" if error else "info", error=error)


def _json(first: str) -> Line | None:
    return _object(_loads(first if first.startswith("{") else first[1: first.rfind("}") + 1]))  # or a CSV field


def _loads(raw: str) -> object:
    """The value of a JSON text; ``None`` when it is no JSON."""
    try:
        return orjson.loads(raw)  # duplicated keys: the last one wins
    except orjson.JSONDecodeError:
        try:  # a number orjson will not take (``1e400``): the standard library makes it inf
            return json.loads(raw)
        except ValueError:
            return None


def _fields(text: str) -> dict[str, object]:
    """The top-level fields of an object printed over lines that never closed (cut off): the lines
    indented as its first field is, each ``"key": value`` with a value that ends on its line."""
    lines = text.split("\n")
    indent = lines[1][: len(lines[1]) - len(lines[1].lstrip(" \t"))]
    obj: dict[str, object] = {}
    for line in lines[1:]:
        m = _FIELD.match(line)
        if m is None or m.group(1) != indent or m.group(3).endswith(("{", "[")):
            continue  # not a top-level field, or one whose value goes on over lines
        key, value = _loads(m.group(2)), _loads(m.group(3))
        if isinstance(key, str) and not isinstance(value, (dict, list)):
            obj[key] = value
    return obj


_FIELD = lazyre.compile(r'([ \t]+)("(?:[^"\\]|\\.)*")[ \t]*:[ \t]*(.*?),?[ \t]*\Z')


def _object(obj: object) -> Line | None:
    """A JSON log record: Storage's pino (a numeric level, its request, tenant and process keys), GoTrue's
    logrus (a level and ``msg``), or another logger's (a level and ``message``: the stream's component)."""
    if not isinstance(obj, dict) or "level" not in obj:
        return None
    msg = obj.get("msg", obj.get("message", ""))
    if not isinstance(msg, str):
        return None
    level_raw = obj["level"]
    level = P.LEVELS.get(str(level_raw).lower(), "info")
    error = level in P.ERROR_LEVELS
    if isinstance(level_raw, int) or obj.get("type") == "request" or \
            any(k in obj for k in ("tenantId", "reqId", "pid", "hostname")):
        return _storage(obj, level, msg, error)
    if "msg" not in obj and "message" in obj:
        return Line("", "json", level, error=error)
    life = START_READY if msg.startswith("GoTrue API started") else ""
    if msg == "request completed":
        seconds = _seconds(obj.get("duration"), 1e9)
        status = obj.get("status")
        if status is None:  # GoTrue always logs it: a record cut short, whose answer is not known
            return Line(P.AUTH, "json", level, error=error)
        return Line(P.AUTH, "json", "", request=_request(obj.get("method"), obj.get("path"), status),
                    seconds=seconds, error=error)
    return Line(P.AUTH, "json", level, life=life, error=error)


def _storage(obj: dict[str, object], level: str, msg: str, error: bool) -> Line:
    if obj.get("type") == "request":
        req, res = obj.get("req"), obj.get("res")
        method = req.get("method") if isinstance(req, dict) else None
        url = req.get("url") if isinstance(req, dict) else None
        status = res.get("statusCode") if isinstance(res, dict) else None
        seconds = _seconds(obj.get("responseTime"), 1000)
        return Line(P.STORAGE, "json", "", request=_request(method, url, status), seconds=seconds, error=error)
    life = START_READY if msg.startswith("Server listening at") else ""
    return Line(P.STORAGE, "json", level, life=life, error=error)


def _seconds(value: object, per_second: float) -> float | None:
    """A duration in seconds from a JSON number; ``None`` for anything else, or one that is negative,
    infinite or NaN (the line still counts, without a duration)."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return None
    seconds = value / per_second
    return seconds if math.isfinite(seconds) and seconds >= 0 else None


def _request(method: object, path: object, status: object) -> tuple[str, str, str]:
    """Labels' raw parts of a JSON request line; a status that is no number (Storage's ``ABORTED REQ``,
    a client that went away) is ``499``, nginx's code for it."""
    digits = isinstance(status, str) and status.isascii() and status.isdigit()
    code = _code(str(status)) if digits or (isinstance(status, int) and not isinstance(status, bool)) else "499"
    return (method if isinstance(method, str) else "OTHER"), (path if isinstance(path, str) else ""), code


def _code(status: str) -> str:
    """A status of ASCII digits as the code label: itself within 100..599, else ``INVALID_CODE``."""
    return status if len(status) == 3 and "100" <= status <= "599" else INVALID_CODE
