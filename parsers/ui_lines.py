"""How Node loggers frame a message: the level a line states, and the message it carries.

``logged(text)`` reads the first line of a record; it gives ``None`` for a line that states no
level (plain ``console.log``/``console.error`` output), else a ``Logged``. The shapes (bracketed
levels, winston's, pino-pretty's, pino's, bunyan's and winston's JSON): docs/parsers.md,
"leapfrogai-ui and SvelteKit". A level word this module does not know (``[ui]``) is no level.
"""

from __future__ import annotations

from typing import Any, NamedTuple

import orjson

from logmetrics import lazyre

#: Levels at error or above, in the words of pino, winston (npm and syslog levels), log4js, consola.
ERROR_LEVELS = frozenset({"error", "err", "fatal", "crit", "critical", "alert", "emerg", "panic"})
#: Levels below error.
LOW_LEVELS = frozenset({"trace", "debug", "verbose", "silly", "http", "info", "notice", "log", "warn",
                        "warning"})
LEVELS = ERROR_LEVELS | LOW_LEVELS
#: pino's and bunyan's numeric level for error (fatal is 60).
PINO_ERROR = 50

_STAMP = (r"(?:\[?\d{4}-\d\d-\d\d[T ]\d\d:\d\d:\d\d[.,\d]*(?: ?Z|[ ]?[+-]\d\d:?\d\d)?\]?[ \t]+"
          r"|\[\d\d:\d\d:\d\d(?:\.\d+)?\][ \t]+)?")
_HEAD = lazyre.compile(_STAMP + r"(?:\[([A-Za-z]{3,8})\]:?|([a-z]{3,8}):|([A-Z]{4,5})(?: \([^)\n]*\))?:)(?:[ \t]+|$)")
#: A class name: what a logger's error object says it is (``TypeError``, ``AuthApiError``).
_CLASS = lazyre.compile(r"[A-Z][A-Za-z0-9]{0,39}Error")


class Logged(NamedTuple):
    """A line with a level: whether that is error or above, its message (with the record's other
    lines), and the error class the logger named (``""`` if none)."""

    error: bool
    message: str
    name: str = ""


def logged(text: str) -> Logged | None:
    """The level and message of a record whose first line a Node logger framed, else ``None``."""
    if text.startswith("{"):
        return _json(text) if '"level"' in text else None
    m = _HEAD.match(text)
    if m is None:
        return None
    word = (m.group(1) or m.group(2) or m.group(3)).lower()
    if word == "http" and not m.group(2):
        return None  # winston's ``http`` level is ``http: ...``; ``[HTTP]`` is a tag
    if word in ERROR_LEVELS:
        return Logged(True, text[m.end():])
    return Logged(False, text[m.end():]) if word in LOW_LEVELS else None


def _json(text: str) -> Logged | None:
    try:
        obj: Any = orjson.loads(text.partition("\n")[0])
    except orjson.JSONDecodeError:
        return None
    if not isinstance(obj, dict):
        return None
    level = obj.get("level")
    if isinstance(level, (int, float)) and not isinstance(level, bool):
        error = level >= PINO_ERROR
    elif isinstance(level, str) and level.lower() in LEVELS:
        error = level.lower() in ERROR_LEVELS
    else:
        return None
    err = obj.get("err", obj.get("error"))
    if not isinstance(err, dict):
        err = obj  # pino before 7 and winston's errors format put the error's fields on the line itself
    name = next((n for n in (err.get("type"), err.get("name")) if isinstance(n, str) and _CLASS.fullmatch(n)), "")
    msg = _text(obj.get("msg")) or _text(obj.get("message"))
    stack = _text(err.get("stack"))
    emsg = _text(err.get("message")) if err is not obj else ""  # on the line itself, that is ``msg``
    head = stack.partition("\n")[0] if stack else f"{name}: {emsg}" if name and emsg else emsg
    return Logged(error, "\n".join(p for p in (head, msg) if p), name)


def _text(value: object) -> str:
    return value if isinstance(value, str) else ""
