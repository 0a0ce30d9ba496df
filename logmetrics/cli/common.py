"""What the commands share: click's settings, the --plugin and reading options, and the checks
of a --label or --listen value."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from datetime import tzinfo

import click

from logmetrics.app import config
from logmetrics.app.config import STATIC_LABELS
from logmetrics.envelopes.unwrap import MODES
from logmetrics.errors import UserError
from logmetrics.plugins import ParserEntry, PluginError, discover

CONTEXT = {"help_option_names": ["-h", "--help"], "max_content_width": 100}


class Interrupted:
    """How a run interrupted (SIGINT, SIGTERM) before its own handling ends: exit code 130 with a
    message, as the job was not done, unless the command said that a signal is how it stops (a
    serving ``watch``: it exits 0)."""

    stops = False

ENVELOPE_HELP = (
    "Container log wrapper to peel off; 'auto' detects it per stream from its first lines. One of: "
    "none, docker-json, cri, docker-timestamps ('docker logs -t'), compose, journald, kubectl "
    "('kubectl logs --prefix'), pm2 ('pm2 logs'), pm2-time (the time pm2 --time writes before an app's "
    "lines), or layers joined with '+', outer first: compose+docker-timestamps "
    "('docker compose logs -t'), kubectl+docker-timestamps ('kubectl logs --prefix --timestamps'), "
    "journald+docker-timestamps, docker-timestamps+compose, journald+compose, "
    "journald+compose+docker-timestamps, pm2+pm2-time ('pm2 logs' of apps started with --time).")


plugin_option = click.option(
    "--plugin", "plugins", multiple=True, metavar="SPEC",
    help="Load a parser of your own: path/to/file.py, file.py:Class or module:Class. Repeatable.")



def workers_option(when: str = "") -> Callable[[Callable[..., None]], Callable[..., None]]:
    """``--workers N``: the processes whole files may be read in (``when``: under what condition)."""
    return click.option(
        "--workers", type=click.IntRange(0, 64), default=0, show_default=True, metavar="N",
        help=f"{when}Read the files in up to N processes, each file and its source in one, and merge what they "
             "count (the output is the same). 0: one per core, where the files are several and large enough to "
             "pay for it; 1: one process.")


def parser_entries(plugins: Sequence[str], parser: str | None, alone: bool = False) -> dict[str, ParserEntry]:
    """The parsers (``--plugin`` specs too); ``alone``: a run that reads every input with
    ``parser`` loads no other installed one (start-up is shorter by their imports and patterns)."""
    broken: dict[str, str] = {}
    try:
        entries = discover(plugins, broken, only=parser if alone else None)
    except PluginError as exc:
        raise UserError(str(exc)) from exc
    if parser is not None and parser not in entries and broken.get(parser):
        raise UserError(broken[parser])  # asked for by name: its failure is the run's
    if parser is not None and parser not in entries:
        known = ", ".join(sorted({*entries, *broken})) or "none"
        raise UserError(f"unknown parser {parser!r} (installed: {known}; see 'logmetrics parsers')")
    return entries


def listen_address(value: str) -> tuple[str, int]:
    """``--listen`` as (host, port); host "" means every interface, IPv6 and IPv4."""
    return config.parse_listen(value)


def label_flag(spec: str) -> tuple[str | None, str, str]:
    """``--label [GLOB:]NAME=VALUE``: the name ends at the first '=', the glob at the last ':' before it."""
    left, eq, value = spec.partition("=")
    glob, colon, name = left.rpartition(":")
    if not eq or not name or not value or (colon and not glob):
        raise UserError(f"--label expects [GLOB:]NAME=VALUE, e.g. model=llama-3-8b or 'vllm-*:model=llama-3-8b'; "
                        f"got {spec!r}")
    if name not in STATIC_LABELS:
        raise UserError(f"--label {spec!r}: only {', '.join(STATIC_LABELS)} can be set per input; "
                        f"{name!r} comes from the log")
    return (glob if colon else None), name, value


TIME_HELP = "RFC 3339 (2024-04-10T03:30:00Z; without a zone: as --timezone says) or Unix seconds"


def timezone_option(also: str = "") -> Callable[[Callable[..., None]], Callable[..., None]]:
    """``--timezone``: the zone of log times that carry none (``also``: what else it is the zone of)."""
    return click.option("--timezone", "timezone", default=None, metavar="ZONE",
                        help="The zone of log times that carry none (vLLM's 'INFO 04-10 03:30:00', ISO times "
                             f"without an offset){also}: an IANA name such as UTC or Europe/Berlin. Default: the "
                             "local time zone of the machine running logmetrics.")


def zone(name: str | None) -> tzinfo | None:
    if name is None:
        return None
    from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

    try:
        return ZoneInfo(name)
    except (ZoneInfoNotFoundError, ValueError) as exc:
        raise UserError(f"--timezone {name!r}: not a time zone known here (IANA names such as UTC or "
                        "Europe/Berlin, from the system's zone database or the tzdata package)") from exc


def time_arg(flag: str, text: str | None, tz: tzinfo | None) -> float | None:
    if text is None:
        return None
    from logmetrics.records.logtime import parse_time

    t = parse_time(text, tz)
    if t is None:
        raise UserError(f"{flag} {text!r}: not a time ({TIME_HELP})")
    return t


def file_options(command: Callable[..., None]) -> Callable[..., None]:
    """``--include`` and ``--exclude``: which of the files found under directories and globs are read."""
    where = "Of the files found under the directories and globs given as arguments,"
    command = click.option("--exclude", "exclude", multiple=True, metavar="GLOB",
                           help=f"{where} leave out those that match (as --include matches). Repeatable.")(command)
    return click.option("--include", "include", multiple=True, metavar="GLOB",
                        help=f"{where} read only those that match: a GLOB without / is matched against the file "
                             "name ('*.log'), one with / against its path below the argument ('pods/*/vllm/**'). "
                             "Repeatable; a file named as an argument is always read. Files that are not logs "
                             "(Prometheus text, compressed or binary) are left out anyway. [[input]] tables of a "
                             "--config file take include and exclude lists of their own.")(command)


def reading_options(command: Callable[..., None]) -> Callable[..., None]:
    """The options that say how past log files are parsed, as in watch (backfill's and report's)."""
    command = file_options(command)
    for option in reversed((
        click.option("--parser", default=None, metavar="NAME",
                     help="Parse every input with this parser instead of routing by path or content."),
        click.option("--source", default=None, metavar="NAME",
                     help="The 'source' label for every input (default: the file path, or the compose service)."),
        click.option("--envelope", type=click.Choice(MODES), default="auto", show_default=True, metavar="KIND",
                     help="Container log wrapper to peel off, as for 'watch --envelope' (see 'logmetrics watch "
                          "--help'); 'auto' detects it per file from its first lines."),
        click.option("--label", "labels", multiple=True, metavar="[GLOB:]model=NAME",
                     help="Set the model label of every input, or with GLOB: of the matching ones, as 'watch "
                          "--label'. Repeatable."),
        click.option("--plugin", "plugins", multiple=True, metavar="SPEC",
                     help="Load a parser of your own: path/to/file.py, file.py:Class or module:Class. Repeatable."),
        click.option("--max-line-bytes", type=click.IntRange(1024), default=1 << 23, show_default=True,
                     metavar="BYTES", help="Longer lines are cut to this length, as in watch."),
    )):
        command = option(command)
    return command


