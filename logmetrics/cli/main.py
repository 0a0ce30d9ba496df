"""The command line: ``logmetrics watch | check | check-config | parsers | metrics | backfill | report``."""

from __future__ import annotations

import logging
import os
import signal
import sys
from collections.abc import Sequence
from types import FrameType

import click

from logmetrics import __version__
from logmetrics.cli.backfill import backfill
from logmetrics.cli.check import check, check_config
from logmetrics.cli.common import CONTEXT, Interrupted
from logmetrics.cli.listing import metrics, parsers
from logmetrics.cli.report import report
from logmetrics.cli.watch import watch
from logmetrics.errors import EXIT_STATE_NOT_SAVED, StateNotSaved, UserError

#: Control characters as a log line writes them (a tab stays a tab): escaped, as stderr escapes
#: what is not UTF-8.
ESCAPES = {c: ("\\n" if c == 10 else "\\r" if c == 13 else f"\\x{c:02x}") for c in [*range(32), 127] if c != 9}


class OneLine(logging.Formatter):
    """Each record on its own line: a control character in the message (from a file name holding
    a newline, say) is written as an escape. What follows the message (a traceback, with -vv)
    keeps its lines."""

    def formatMessage(self, record: logging.LogRecord) -> str:
        record.message = record.message.translate(ESCAPES)
        return super().formatMessage(record)


@click.group(context_settings=CONTEXT)
@click.version_option(__version__, prog_name="logmetrics")
@click.option("-v", "--verbose", count=True, help="Log more on stderr (-v: info, -vv: debug).")
def cli(verbose: int) -> None:
    """Turn the logs of an LLM serving stack into Prometheus metrics.

    Point it at log files, a directory or stdin; it recognises each backend's lines (vLLM,
    llama.cpp, whisper and text-embeddings servers, Supabase, FastAPI gateways, SvelteKit UIs, and
    any parser plugin installed: 'logmetrics parsers' lists them) and serves tokens, latency,
    request, error and cache metrics on /metrics for Prometheus. Start with 'logmetrics watch --help'.
    """
    level = logging.WARNING if verbose == 0 else logging.INFO if verbose == 1 else logging.DEBUG
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(OneLine("logmetrics: %(levelname)s: %(message)s"))
    logging.basicConfig(level=level, handlers=[handler])
    if verbose < 2:  # the libraries' own notes (a TLS client that hung up oddly, watchdog stopping a
        # thread at exit) say nothing an operator can act on; -vv shows them
        for name in ("asyncio", "watchdog"):
            logging.getLogger(name).setLevel(logging.CRITICAL)


for command in (watch, parsers, check, check_config, metrics, backfill, report):
    cli.add_command(command)


def _on_signal(signum: int, frame: FrameType | None) -> None:
    raise KeyboardInterrupt


def main(argv: Sequence[str] | None = None) -> None:
    """Entry point: runs the CLI; user errors are one line on stderr and exit code 2."""
    signal.signal(signal.SIGTERM, _on_signal)
    try:
        cli.main(args=list(argv) if argv is not None else None, prog_name="logmetrics", standalone_mode=False)
    except click.exceptions.Exit as exc:
        sys.exit(exc.exit_code)
    except click.Abort:  # (click's form of a KeyboardInterrupt: SIGINT, or SIGTERM by _on_signal)
        if Interrupted.stops:
            sys.exit(0)
        print("logmetrics: interrupted: the command did not finish", file=sys.stderr, flush=True)
        os._exit(130)  # a thread may be blocked reading stdin: the interpreter's own exit could abort
    except click.ClickException as exc:
        click.echo(f"logmetrics: error: {exc.format_message()}", err=True)
        sys.exit(2)
    except UserError as exc:
        click.echo(f"logmetrics: error: {exc}", err=True)
        sys.exit(2)
    except StateNotSaved as exc:
        click.echo(f"logmetrics: error: {exc}", err=True)
        sys.exit(EXIT_STATE_NOT_SAVED)
    except BrokenPipeError:
        sys.exit(0)
    sys.exit(0)
