"""Envelope kinds: what each container wrapper looks like, and which one a stream carries.

:mod:`logmetrics.envelopes.unwrap` peels the wrappers; this module knows their shapes. A *kind* is one
envelope or several layered ones, written outer first and joined with ``+``:

* whole-line formats, written by the runtime to disk, never layered: ``docker-json``, ``cri``;
* line prefixes: ``docker-timestamps`` (``docker logs -t``, ``kubectl logs --timestamps``),
  ``compose``, ``journald``, ``kubectl`` (``kubectl logs --prefix``) and ``pm2`` (``pm2 logs``);
* the layered forms that tools really print (:data:`LAYERED`): a compose, kubectl or journald
  prefix followed by a ``docker logs -t`` timestamp (``docker compose logs -t``, ``kubectl logs
  --prefix --timestamps``), a timestamp followed by a compose prefix (``docker logs -t`` of a
  container running ``docker compose up``), and journald around compose (a systemd unit running
  ``docker compose up``), with or without compose's timestamps.

:func:`classify` decides the kind of a stream from its first non-empty lines: the outer envelope
first, then, on what is left of the lines it matched, each inner layer that may follow it.
"""

from __future__ import annotations

import calendar
import re
from datetime import datetime

from logmetrics import lazyre

__all__ = ["EVERY_LINE", "LAYERED", "MODES", "NAMING", "OWN_LINES", "PREFIXES", "STAMPS", "classify", "own_lines",
           "parse_rfc3339"]

STAMPS = "docker-timestamps"
PM2_TIME = "pm2-time"
PREFIXES = (STAMPS, "compose", "journald", "kubectl", "pm2", PM2_TIME)  # the kinds that are a prefix of each line
LAYERED = (
    "compose+docker-timestamps",
    "kubectl+docker-timestamps",
    "journald+docker-timestamps",
    "docker-timestamps+compose",
    "journald+compose",
    "journald+compose+docker-timestamps",
    "pm2+pm2-time",
)
MODES = ("auto", "none", "docker-json", "cri", *PREFIXES, *LAYERED)
#: The kinds whose lines name their source (a compose service, a journald unit, a kubectl pod): two
#: files of them may name the same one.
NAMING = frozenset(("compose", "journald", "kubectl", "pm2", *LAYERED))
#: The kinds whose tool prefixes every line of its apps: a line without the prefix is the tool's own
#: (``docker compose up``'s "Attaching to" and "vllm-1 exited with code 137", ``pm2 logs``' header).
EVERY_LINE = frozenset(("compose", "pm2"))
#: The stream name under which a kind's own prefixed lines come, not an app's: pm2's ``PM2  | `` lines.
OWN_LINES = {"pm2": "PM2"}
_INNER = (STAMPS, "compose", PM2_TIME)  # the layers looked for inside another, in this order
#: The prefixes in the order they are tried: pm2 before compose, whose prefix pm2's own "PM2  | " lines
#: also carry (a pm2 log that begins with them is no compose log).
_DETECTED = (STAMPS, "pm2", "compose", "journald", "kubectl", PM2_TIME)

_TS = r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(?:\.(\d+))?(?:Z|[+-]\d\d:?\d\d)"
TS_PREFIX = lazyre.compile(_TS + " ")
CRI_LINE = lazyre.compile(_TS + r" (?:stdout|stderr) [PF](?: |$)")
COMPOSE_PREFIX = lazyre.compile(r"(?:\[([A-Za-z0-9][\w.-]*)\]|([A-Za-z0-9][\w.-]*))\s+\|(?: |$)")
# `journalctl` (the short, short-precise, short-iso, short-iso-precise and short-full formats): the
# time, the host (none with --no-hostname: a first word that is itself "unit[pid]: " is the unit; a
# hostless line without a pid is not told from an application's own "TIME word: " line), the unit or
# program and its pid. Group 1: the unit name. journalctl's own "-- Boot ... --" / "-- No
# entries --" lines are kept.
_JOURNAL_TIME = (
    r"(?:[A-Z][a-z]{2} [ \d]\d \d\d:\d\d:\d\d(?:\.\d+)?"
    r"|\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(?:[.,]\d+)?(?:Z|[+-]\d\d:?\d\d)"
    r"|[A-Z][a-z]{2} \d{4}-\d\d-\d\d \d\d:\d\d:\d\d(?:\.\d+)? [A-Z][A-Za-z0-9+-]{1,5})"
)


def _journal_prefix(hostless_pid: str) -> re.Pattern[str]:
    """The journald prefix whose host may be missing where the unit's ``[pid]`` is ``hostless_pid``."""
    return re.compile(_JOURNAL_TIME + rf" (?:(?=[\w.@/-]+?{hostless_pid}: )|[^\s:]+ )([\w.@/-]+?)(?:\[\d+\])?: ")


JOURNAL_PREFIX = _journal_prefix(r"\[\d+\]")
#: Once a stream is journald's, its lines are peeled by this one, which also takes a hostless line
#: whose unit names no pid (``Dec 05 07:00:02 gateway: ...``, of ``--no-hostname``).
JOURNAL_LINE = _journal_prefix(r"(?:\[\d+\])?")
#: journalctl's own lines: ``-- Boot 0123 --``, ``-- Reboot --``, ``-- No entries --``, its header.
JOURNAL_MARK = lazyre.compile(r"-- [^\n]* --\Z")
# `kubectl logs --prefix`: "[pod/NAME/CONTAINER] ". Group 1: NAME/CONTAINER.
KUBECTL_PREFIX = lazyre.compile(r"\[pod/([a-z0-9][a-z0-9.-]*/[a-z0-9][a-z0-9-]*)\] ")
# `pm2 logs`: "ID|NAME" padded with at least one space, then "| " (pm2's own lines: "PM2"). Group 1
# or 2: the app's name (which may hold a space: `pm2 start app.py --name "my app"`).
PM2_PREFIX = lazyre.compile(r"(?:\d+\|([^\s|](?:[^|\n]*?[^\s|])?)|(PM2)) +\| ")
# The time pm2 writes before what an app prints when started with `--time` or a `log_date_format`
# (`2026-12-05T07:00:00: `, or `2026-12-05 07:00:00 +00:00: ` of the format often set), in its log
# files and in `pm2 logs`' output. pm2 writes it before each chunk the app wrote, so a line without
# it continues the one above.
PM2_TIME_PREFIX = lazyre.compile(r"\d{4}-\d\d-\d\d[T ]\d\d:\d\d:\d\d(?:\.\d+)?(?: ?(?:Z|[+-]\d\d:?\d\d))?: ")
PATTERNS = {STAMPS: TS_PREFIX, "compose": COMPOSE_PREFIX, "journald": JOURNAL_PREFIX, "kubectl": KUBECTL_PREFIX,
            "pm2": PM2_PREFIX, PM2_TIME: PM2_TIME_PREFIX}
# What `docker compose up` prints itself (before the first service line, and as containers stop);
# skipped while detecting, in a stream and inside another layer.
COMPOSE_PREAMBLE = lazyre.compile(
    r"Attaching to |\[\+\] |\s*[✔✘⠿] |\s*(?:Container|Network|Volume) \S+\s+[A-Z][a-z]+$"
    r"|[\w.-]+ exited with code \d+$|Gracefully stopping\.\.\.|Aborting on container exit\.\.\."
    r"|(?:Creating|Starting|Stopping|Recreating|Removing) [\w.-]+ \.\.\. |Error response from daemon: "
)

_EPOCH_CACHE: dict[str, int] = {}


def own_lines(kind: str | None, service: str | None) -> bool:
    """Whether the stream ``service`` (None: the lines without a name) of a stream of ``kind`` holds
    the envelope's own lines, which no parser reads: the unnamed lines of a kind with a layer in
    ``EVERY_LINE`` or journald's, pm2's "PM2" lines."""
    if kind is None:
        return False
    layers = kind.split("+")
    if service is None:  # (journald's: its header and "-- Boot ... --" lines)
        return any(layer in EVERY_LINE or layer == "journald" for layer in layers)
    return any(OWN_LINES.get(layer) == service for layer in layers)


def parse_rfc3339(ts: str) -> float | None:
    """Unix seconds of an RFC 3339 timestamp (any number of fractional digits, ``Z`` or an offset).

    Returns None for anything else (including a timestamp without a zone). The whole-second part
    is cached, so the lines of one second cost a dictionary lookup and a small int conversion.
    """
    n = len(ts)
    if n < 20 or ts[4] != "-" or ts[10] not in "Tt ":
        return None
    end = 19
    frac = 0.0
    if ts[19] in ".,":
        end = 20
        while end < n and "0" <= ts[end] <= "9":
            end += 1
        if end > 20:  # nanoseconds at most: a longer fraction changes nothing, and costs (or raises) in int()
            digits = min(end, 29) - 20
            frac = int(ts[20 : 20 + digits]) / 10**digits
    key = ts[:19] + ts[end:]
    base = _EPOCH_CACHE.get(key)
    if base is None:
        zone = ts[end:]
        if zone in ("Z", "z"):
            zone = "+00:00"
        elif not zone or zone[0] not in "+-":
            return None
        try:
            moment = datetime.fromisoformat(ts[:19] + zone)
            if moment.tzinfo is None:
                return None
            base = calendar.timegm(moment.utctimetuple())
        except (ValueError, OverflowError):  # not a date, or one whose UTC time is out of range (year 0, 10000)
            return None
        if len(_EPOCH_CACHE) >= 4096:
            _EPOCH_CACHE.clear()
        _EPOCH_CACHE[key] = base
    return base + frac


def _agrees(layer: str, lines: list[str]) -> bool:
    """Whether most of ``lines`` carry the prefix of ``layer``.

    A timestamp must also have more than microsecond precision on some line: Docker always prints
    nine digits (kubelet trims trailing zeros), application loggers rarely print more than six.
    """
    if not lines:
        return False
    if layer == STAMPS:
        stamps = [m for m in map(TS_PREFIX.match, lines) if m]
        return 2 * len(stamps) > len(lines) and any(len(m.group(1) or "") > 6 for m in stamps)
    match = PATTERNS[layer].match
    return 2 * sum(1 for line in lines if match(line)) > len(lines)


def _peel(layer: str, lines: list[str]) -> list[str]:
    """What is left of the lines that carry the prefix of ``layer`` once it is removed."""
    match = PATTERNS[layer].match
    return [m.string[m.end() :] for m in map(match, lines) if m]


def _voters(layer: str, lines: list[str]) -> list[str]:
    """The lines that say whether ``layer`` lies inside another: compose's own lines (its progress and
    status, which it prints without its prefix) have no say on compose."""
    return [line for line in lines if not COMPOSE_PREAMBLE.match(line)] if layer == "compose" else lines


def classify(sample: list[str]) -> str:
    """The envelope kind of a stream from its first non-empty lines (cleaned, without newlines).

    JSON-file and CRI lines are written by the runtime itself, so the first line decides. The
    prefixes could be mimicked by an application's own lines, so most of the sample must agree;
    the same holds for each inner layer, among the lines that carried the layer around it.
    """
    first = sample[0]
    if first.startswith('{"log":'):
        return "docker-json"
    if CRI_LINE.match(first):
        return "cri"
    outer = next((layer for layer in _DETECTED if _agrees(layer, sample)), None)
    if outer is None:
        return "none"
    kind, lines = outer, _peel(outer, sample)
    while True:
        inner = next((layer for layer in _INNER
                      if f"{kind}+{layer}" in LAYERED and _agrees(layer, _voters(layer, lines))), None)
        if inner is None:
            return kind
        kind, lines = f"{kind}+{inner}", _peel(inner, lines)
