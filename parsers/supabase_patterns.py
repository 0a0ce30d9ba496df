"""Line formats of Supabase's components and the error phrase table (route labels:
``supabase_routes``; the Elixir services' lines: ``supabase_elixir``).

Each pattern is matched at the start of a record (the envelope and any compose prefix already
peeled) and stays within one line. Which component prints which format: docs/parsers.md, "Supabase".
"""

from __future__ import annotations

import re
from typing import NamedTuple

from logmetrics import lazyre

from .errors import COMMON_CAUSES, Phrases

KONG = "supabase-kong"
REST = "supabase-rest"
AUTH = "supabase-auth"
STORAGE = "supabase-storage"
DB = "supabase-db"
REALTIME = "supabase-realtime"
ANALYTICS = "supabase-analytics"
POOLER = "supabase-pooler"  # Supavisor
COMPONENTS = (KONG, REST, AUTH, STORAGE, DB, REALTIME, ANALYTICS, POOLER)
#: The paths Kong routes to Supabase's services.
KONG_PREFIXES = ("/rest/v1/", "/auth/v1/", "/storage/v1/", "/realtime/v1/", "/functions/v1/", "/graphql/v1/",
                 "/pg/", "/analytics/v1/")

#: Apache/nginx combined access line (Kong, PostgREST); the request may be ``-`` or junk.
CLF = lazyre.compile(r'[^\s"]+ \S+ (?P<user>\S+) \[[^\]\n]+\] "(?P<req>[^"\n]*)" (?P<status>[0-9]{3}) (?:\d+|-)'
                     r'(?P<rest>[^\n]*)')
REQUEST = lazyre.compile(r"(?P<method>[A-Z]{3,10}) (?P<path>\S+)(?: HTTP/[\d.]+)?\Z")
PGRST = lazyre.compile(r"\d{2}/[A-Z][a-z]{2}/\d{4}:\d{2}:\d{2}:\d{2} [+-]\d{4}: (?P<msg>[^\n]*)")
POSTGRES = lazyre.compile(
    r"[^\w\n]*(?:(?:[0-9A-Fa-f.:]+|\[local\]) )?\d{4}-\d{2}-\d{2} \d{2}:\d{2}:\d{2}(?:\.\d{1,6})?"
    r" (?:[A-Z]{2,5}|[+-]\d{2}(?::?\d{2})?) \[\d+\] (?:[^@\s]*@\S* )?"
    r"(?P<sev>DEBUG\d?|INFO|NOTICE|WARNING|ERROR|LOG|FATAL|PANIC):  (?P<msg>[^\n]*)")
ERLANG_HALT = "Kernel pid terminated"
ERLANG_DUMP = "Crash dump is being written"


class TextFormat(NamedTuple):
    """A text line format with a level and a message (groups ``level``, ``msg``): the component
    that writes it ("": the one its ``module`` group names), the format's name, and the message
    start that says the component is up ("": none)."""

    pattern: re.Pattern[str]
    component: str
    kind: str
    ready: str = ""


#: The text formats with a level, tried in this order.
TEXT_FORMATS = (
    # the nginx error log (Kong)
    TextFormat(lazyre.compile(r"\d{4}/\d{2}/\d{2} \d{2}:\d{2}:\d{2} \[(?P<level>[a-z]+)\] \d+#\d+: (?P<msg>[^\n]*)"),
               KONG, "nginx_error"),
    # GoTrue's logrus text, and pop's lines
    TextFormat(lazyre.compile(r'time="[^"\n]*" level=(?P<level>\w+) msg="(?P<msg>(?:[^"\\\n]|\\.)*)"'), AUTH, "logrus",
               "GoTrue API started"),
    TextFormat(lazyre.compile(r"\[POP\] \d{4}/\d{2}/\d{2} \d{2}:\d{2}:\d{2} (?P<level>\w+) - (?P<msg>[^\n]*)"), AUTH,
               "logrus", "GoTrue API started"),
    # Bitnami's init-script lines: the component is the one their module names
    TextFormat(lazyre.compile(r"(?P<module>[a-z][\w-]*) \d{2}:\d{2}:\d{2}\.\d{2} "
                              r"(?:(?P<level>INFO|WARN|ERROR|DEBUG) +)?==>(?P<msg>[^\n]*)"), "", "bitnami"),
    # pino-pretty (Storage): ``[time] LEVEL (pid on host): msg``; the time as epoch ms, ``HH:MM:ss.l``,
    # ``yyyy-mm-dd HH:MM:ss.l o`` (``SYS:standard``) or ISO; ``(pid)``, ``(pid on host)``,
    # ``(name/pid on host)`` or none
    TextFormat(lazyre.compile(
        r"\[(?:\d{10,13}|\d{2}:\d{2}:\d{2}(?:\.\d{1,3})?"
        r"|\d{4}-\d{2}-\d{2}[T ]\d{2}:\d{2}:\d{2}(?:\.\d{1,9})?(?: ?(?:Z|[+-]\d{2}:?\d{2}|[A-Z]{2,5}))?)\] "
        r"(?P<level>TRACE|DEBUG|INFO|WARN|ERROR|FATAL|USERLVL)(?: \((?:[^\s/()]+/)?\d+(?: on [^)\n]+)?\))?"
        r": (?P<msg>[^\n]*)"), STORAGE, "pino", "Server listening at"),
)
#: A log viewer's copy prefix (Docker Desktop): ``2024-06-03 16:12:18 `` before the component's line.
VIEWER = lazyre.compile(r"\d{4}-\d{2}-\d{2} \d{2}:\d{2}:\d{2}(?: [+-]\d{4})? (?=\S)")
#: ``docker compose logs``' prefix, ``service   | ``, where the envelope layer did not take it off.
COMPOSE = lazyre.compile(r"(?P<service>[A-Za-z0-9][\w.-]*) +\| ?")

#: Levels of every format, folded into the few of ``supabase_log_records_total``.
LEVELS = {
    "trace": "debug", "debug": "debug", "info": "info", "log": "info", "notice": "notice",
    "warn": "warning", "warning": "warning", "error": "error",
    "fatal": "critical", "panic": "critical", "crit": "critical", "critical": "critical", "alert": "critical",
    "emerg": "critical", "emergency": "critical",
    "10": "debug", "20": "debug", "30": "info", "40": "warning", "50": "error", "60": "critical",
}
ERROR_LEVELS = frozenset({"error", "critical"})

PHRASES = Phrases(
    causes=(
        ("auth_failed", ("password authentication failed", "no pg_hba.conf entry", "invalid_password", "28P01")),
        ("too_many_connections", ("too many connections", "too many clients", "remaining connection slots", "53300")),
        ("deadlock", ("deadlock detected", "40P01")),
        ("connection_refused", ("Connection refused", "connection refused", "ECONNREFUSED", "econnrefused",
                                "no live upstreams")),
        ("jwt", ("JsonWebTokenError", "invalid signature", "jwt expired", "invalid JWT", "TokenExpiredError")),
        ("constraint", ("violates unique constraint", "violates foreign key constraint", "violates not-null constraint",
                        "violates check constraint")),
        ("disk_full", ("No space left on device", "53100")),
        ("timeout", ("statement timeout", "lock timeout", "(EXIT) time out", ":timeout")),
        ("dns", ("no such host", ":nxdomain")),
        ("shutdown", ("terminating connection due to administrator command", "the database system is shutting down",
                      "the database system is starting up", "57P01", "57P03")),
        *COMMON_CAUSES,
        ("crash", (ERLANG_HALT, ERLANG_DUMP, "terminated by signal", "was terminated by exception")),
    ),
    contexts=(  # where it failed; a cause in the same record (a wrong password, a refused port) wins
        ("connection_refused", ("could not connect", "Could not connect", "failed to connect", "connect() failed",
                                "connection not available", "Database connection error",
                                "DBConnection.ConnectionError")),
        ("schema_cache", ("loading the schema cache",)),
        ("migration", ("migrations", "Migrator", "migration")),
        ("dns", ("could not be resolved", "host not found", "Name or service not known")),
    ),
)
#: SQLSTATE classes (where the text carries a code: PostgREST's JSON, Postgrex's ``FATAL 28P01``).
SQLSTATE_CLASSES = {
    "08": "connection_refused", "28": "auth_failed", "40": "deadlock", "53": "resources", "57": "shutdown",
    "58": "system", "42": "sql", "23": "constraint", "22": "data", "XX": "internal",
}
_SQLSTATE = lazyre.compile(r'"code": ?"(?P<a>[0-9A-Z]{5})"|\b(?:FATAL|ERROR|SQLSTATE) (?P<b>[0-9A-Z]{5})\b')
ERROR_TYPES = (*PHRASES.types[:-3], *dict.fromkeys(SQLSTATE_CLASSES.values()), "error")


def error_type(text: str) -> str:
    """The ``error_type`` of an error record: a phrase, else its SQLSTATE class, else ``error``."""
    kind = PHRASES.classify(text)
    if kind not in ("exception", "error", "bad_request"):
        return kind
    m = _SQLSTATE.search(text)
    if m:
        code = m.group("a") or m.group("b") or ""
        return SQLSTATE_CLASSES.get(code[:2], "error")
    return "error"
