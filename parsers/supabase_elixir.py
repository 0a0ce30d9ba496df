"""Supabase's Elixir services: Realtime, Logflare (``supabase-analytics``) and Supavisor
(``supabase-pooler``). Their Logger lines, crash reports, which service a record names, and an
error's type by its exception.

Elixir's Logger prints ``$date $time $metadata[$level] $message``, any of the first three left out
by a service's format: ``12:20:52.123 [error] msg``, ``2026-09-09 12:20:52.123 [error] msg``,
``12:20:52.123 project=x external_id=x [info] msg``, ``request_id=F1 [error] msg``.

An ``[error]`` line may begin a report over several lines (``CRASH``): the exception
(``** (Postgrex.Error) ERROR 42P01 ...``, ``** (stop) ...``), indented frames (the parser's indented
shape), the report's fields (``Last message:``, ``State:``, ``Client #PID<...> is alive``, a
supervisor's ``Start Call:``). An application that stopped for any reason but being stopped is an
error whatever its level (``[notice] Application realtime exited: Realtime.Application.start(:normal,
[]) returned an error: ...``), and may begin such a report too. A ``** (X)`` line after anything
else (``mix``, ``eval``) is an error record of its own, with its frames.
"""

from __future__ import annotations

import re

from logmetrics import lazyre
from logmetrics.records.shapes import Shape

from . import supabase_patterns as P

#: What comes before ``[level]``: a date, a time and ``key=value`` metadata, each optional.
PREFIX = r"(?:\d{4}-\d{2}-\d{2} )?(?:\d{2}:\d{2}:\d{2}\.\d{3} )?(?:\w+=\S+ )*"
LINE = lazyre.compile(PREFIX + r"\[(?P<level>debug|info|notice|warning|warn|error|critical|alert|emergency)\] ?"
                      r"(?P<msg>[^\n]*)")
#: An Elixir exception printed on its own: ``** (DBConnection.ConnectionError) message``.
RAISE = lazyre.compile(r"\*\* \([\w.]+\) ")
#: An application's exit, at any level: ``Application realtime exited: <reason>``.
_EXIT = "Application "
_EXITED = " exited: "
#: Reasons of an application that was stopped, not one that failed.
_STOPPED = (":stopped", ":normal", "stopped", "normal")
#: A crash report: an ``[error]`` (or worse) line or an application's exit, then the exception, its
#: frames (indented: the parser's indented shape) and the report's fields. The empty group makes
#: those lines continue only a record that such a line began.
CRASH = Shape(
    "elixir_crash",
    head=r"(?P<elixir_crash>)" + PREFIX
    + r"\[(?:(?:error|critical|alert|emergency)\]|\w+\] ?Application [\w.]+ exited: )",
    body=r"(?:\*\* \(|(?:Last message|State|Function|Args|Parent|Reason|Client #PID<[^>\n]*> is"
         r"|Start Call|Start Module|Restart|Shutdown|Type|Pid)\b)(?P=elixir_crash)",
)
#: The report's fields that hold data (a process's state, a message, a query), not what went wrong.
DATA = lazyre.compile(r"^[ \t]*(?:Last message|State|Args|Parent|Client #PID|Start Call|Pid|query:)[^\n]*\n?", re.M)
#: The exception of a report: ``** (Postgrex.Error)``; not ``** (stop)``, ``** (exit)``, ``** (EXIT)``.
_CLASS = lazyre.compile(r"\*\* \((?!EXIT\))([A-Z]\w*(?:\.[A-Z]\w*)*)\)")
_CAMEL = lazyre.compile(r"(?<=[a-z0-9])(?=[A-Z])|(?<=[A-Z])(?=[A-Z][a-z])")
#: At most this many exception classes of a stream become an ``error_type``; later ones are ``exception``.
MAX_CLASSES = 16
#: A service named by a record: a module (``Realtime.Tenants.Connect``, ``LogflareWeb.Endpoint``, also as
#: Erlang's ``'Elixir.Supavisor.X'``), a frame's application (``(realtime 2.30.14) lib/...``), or an
#: application that failed (``{application_start_failure,logflare,...}``, ``Application supavisor exited``).
_SERVICE = lazyre.compile(
    r"(?<!\w)(Realtime|Logflare|Supavisor)(?:Web)?\.[A-Z]"
    r"|\((realtime|logflare|supavisor) \d"
    r"|(?:application_start_failure,|Application )(realtime|logflare|supavisor)\b")
SERVICES = {"realtime": P.REALTIME, "logflare": P.ANALYTICS, "supavisor": P.POOLER}


def exited(msg: str) -> bool:
    """Whether a line's message says an application exited for a reason other than being stopped."""
    if not msg.startswith(_EXIT) or _EXITED not in msg:
        return False
    return msg.split(_EXITED, 1)[1].strip() not in _STOPPED


def service(text: str) -> str:
    """The Elixir service (component) a record names, ``""`` when it names none (the leftmost wins)."""
    if "ealtime" not in text and "ogflare" not in text and "upavisor" not in text:
        return ""
    m = _SERVICE.search(text)
    return SERVICES[(m.group(1) or m.group(2) or m.group(3)).lower()] if m else ""


def snake(name: str) -> str:
    """A class name as a label: ``Postgrex.Error`` -> ``postgrex_error``, ``DBConnection.ConnectionError`` ->
    ``db_connection_connection_error``."""
    return _CAMEL.sub("_", name).replace(".", "_").lower()


def error_type(text: str, classes: set[str]) -> str:
    """The ``error_type`` of an Elixir error record, its data fields left out: a phrase, else the SQLSTATE
    class, else its exception's class in snake case (``runtime_error``; a stream's first ``MAX_CLASSES``
    classes, kept in ``classes``; after that ``exception``), else ``app_exited`` for an application's
    exit, else ``error``."""
    text = DATA.sub("", text)
    kind = P.error_type(text)
    if kind != "error":
        return kind
    m = _CLASS.search(text) if "** (" in text else None
    if m is not None:
        name = snake(m.group(1))
        if name not in classes and len(classes) >= MAX_CLASSES:
            return "exception"
        classes.add(name)
        return name
    first = LINE.match(text)
    return "app_exited" if first is not None and exited(first.group("msg")) else "error"
