"""``logmetrics check`` (what a parser makes of a file) and ``logmetrics check-config``."""

from __future__ import annotations

import os
import sys

import click

from logmetrics.app import config
from logmetrics.cli.common import CONTEXT, ENVELOPE_HELP, parser_entries, plugin_option
from logmetrics.envelopes.unwrap import MODES
from logmetrics.errors import UserError


@click.command(context_settings=CONTEXT)
@click.argument("files", nargs=-1, required=True, metavar="FILE...", type=click.Path(allow_dash=True))
@click.option("--parser", default=None, metavar="NAME", help="The parser to check (default: routed as watch would).")
@click.option("--envelope", type=click.Choice(MODES), default="auto", show_default=True, metavar="KIND",
              help=ENVELOPE_HELP)
@click.option("--top", default=15, show_default=True, type=click.IntRange(0), metavar="N",
              help="How many series to show per rule, and how many unmatched line shapes.")
@click.option("--strict", is_flag=True,
              help="Exit 1 when the parser fails on a record or makes an event the engine would refuse "
                   "(a label it must not have, a family it did not declare), or when its fast path fails or "
                   "gives other figures than parse: a gate for a plugin's CI. Unmatched records never fail it.")
@plugin_option
def check(files: tuple[str, ...], parser: str | None, envelope: str, top: int, strict: bool,
          plugins: tuple[str, ...]) -> None:
    """Show what a parser makes of FILE: per rule, records matched and events; unmatched lines by shape.

    A `docker compose logs` file is checked per service, each routed by itself, as watch does.
    Several files, a directory or a glob give one line per file (its parser, records, those that
    counted something and those read without a count, and the share read) and the totals per
    parser; files that are not logs are left out, as watch does. With --strict, a parser's fast
    path is run too, as watch runs it, and held to parse. Exit code 0; with --strict, 1 if a parser
    failed on a record, made an event the engine would refuse or has a fast path that fails or
    differs from parse; 2 for a usage error."""
    from logmetrics.engine.fastcheck import problems
    from logmetrics.plugins.checker import report, summary
    from logmetrics.sources.discovery import is_glob

    missing = [f for f in files if f != "-" and not is_glob(f) and not os.path.exists(f)]
    if missing:
        raise UserError(f"{', '.join(missing)}: no such file or directory")
    entries = parser_entries(plugins, parser)
    fast_check = problems if strict else None  # (it runs the parser twice more)
    if len(files) == 1 and (files[0] == "-" or os.path.isfile(files[0])):
        text, faulty = report(files[0], entries, parser=parser, envelope=envelope, top=top, fast_check=fast_check)
    else:
        text, faulty = summary(files, entries, parser=parser, envelope=envelope, fast_check=fast_check)
    click.echo(text, nl=False)
    if strict and faulty:
        click.echo("logmetrics: check --strict: the parser failed on a record, made an event the engine "
                   "would refuse, or has a fast path that fails or differs from parse (listed above)", err=True)
        sys.exit(1)


@click.command("check-config", context_settings=CONTEXT)
@click.argument("file", type=click.Path(dir_okay=False))
@plugin_option
def check_config(file: str, plugins: tuple[str, ...]) -> None:
    """Check the configuration FILE (as 'watch --config FILE' reads it) without starting.

    Exit code 0 with a one-line summary, or 2 with FILE:LINE: what is wrong."""
    cfg = config.load(file, parser_entries(plugins, None))
    click.echo(config.summary(cfg))
    if cfg.web_config is not None:
        from logmetrics.serve import webconfig

        try:
            click.echo(webconfig.summary(cfg.web_config))
        except webconfig.WebConfigError as exc:
            raise UserError(f"{file}: {exc}") from None
