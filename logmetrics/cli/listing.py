"""``logmetrics parsers`` (the installed parsers) and ``logmetrics metrics`` (the metric catalog)."""

from __future__ import annotations

import click

from logmetrics.cli.common import CONTEXT, parser_entries, plugin_option
from logmetrics.store import catalog


@click.command(context_settings=CONTEXT)
@plugin_option
def parsers(plugins: tuple[str, ...]) -> None:
    """List the installed parsers and where each one comes from."""
    for name, entry in sorted(parser_entries(plugins, None).items()):
        claims = ", ".join(entry.cls.claims) or "-"
        click.echo(f"{name:<16} {entry.origin}  (claims: {claims})")


@click.command(context_settings=CONTEXT)
def metrics() -> None:
    """Print the metric catalog (name, type, labels, help) as Markdown."""
    click.echo(catalog.markdown(), nl=False)
