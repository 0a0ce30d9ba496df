"""The ``logmetrics report`` command (its work is in :mod:`logmetrics.offline.report` and
:mod:`logmetrics.offline.reportview`, imported when it runs)."""

from __future__ import annotations

import contextlib
import os
import sys

import click

from logmetrics.cli.common import (
    CONTEXT,
    label_flag,
    parser_entries,
    reading_options,
    timezone_option,
    workers_option,
    zone,
)
from logmetrics.errors import UserError

FORMATS = ("table", "json", "html")


def write_output(path: str, data: bytes) -> None:
    """Write ``data`` to ``path``: a regular file is replaced whole (a new file renamed over it, so
    that a reader never sees half a report); a symlink, device or FIFO is written into, as a shell
    redirection would; a file that may not be written is refused."""
    if os.path.lexists(path) and not os.access(path, os.W_OK):
        raise PermissionError(13, "not writable")
    if os.path.islink(path) or (os.path.exists(path) and not os.path.isfile(path)):
        with open(path, "wb") as fh:
            fh.write(data)
        return
    tmp = f"{path}.tmp"
    try:
        with open(tmp, "wb") as fh:
            fh.write(data)
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise


def output_problem(path: str) -> str | None:
    """Why ``path`` cannot take the report, told before the logs are read (which may take long), or None."""
    if os.path.isdir(path):
        return "is a directory"
    if os.path.lexists(path):
        return None if os.access(path, os.W_OK) else "not writable"
    parent = os.path.dirname(os.path.abspath(path))
    if not os.path.isdir(parent):
        return f"no such directory: {parent}"
    return None if os.access(parent, os.W_OK | os.X_OK) else f"directory not writable: {parent}"


@click.command(context_settings=CONTEXT)
@click.argument("paths", nargs=-1, required=True, metavar="FILE|DIR...")
@click.option("--format", "fmt", type=click.Choice(FORMATS), default="table", show_default=True,
              help="table: for the terminal; json: for scripts (times as ISO 8601 and Unix seconds); html: one "
                   "self-contained page with charts of tokens/s, requests, errors and latency percentiles over "
                   "the log's time, to attach to a bug report.")
@click.option("-o", "--output", default=None, metavar="FILE", type=click.Path(dir_okay=False),
              help="Write the report to FILE instead of standard output (a regular file is replaced whole, or not at "
                   "all; a symlink, device or FIFO is written into).")
@timezone_option(", and of the times shown")
@workers_option()
@reading_options
def report(paths: tuple[str, ...], fmt: str, output: str | None, timezone: str | None, workers: int,
           parser: str | None, source: str | None, envelope: str, labels: tuple[str, ...], plugins: tuple[str, ...],
           max_line_bytes: int, include: tuple[str, ...], exclude: tuple[str, ...]) -> None:
    """Summarise what logs say, per backend and model, by the time their lines state.

    Reads every FILE (and the files under each DIR) whole with the parsers of 'watch' and prints
    the log time range; requests by outcome (HTTP requests by status class); prompt and generation
    tokens and tokens/s; p50, p95 and p99 of request duration, time to first token and time per
    output token where the log has them; errors by type, first and last seen; restarts; and the
    busiest minute. No Prometheus needed. Examples:

    \b
      logmetrics report vllm.log
      logmetrics report /var/log/llm/ --format json > report.json
      logmetrics report vllm.log --format html -o report.html --timezone UTC
    """
    from logmetrics.offline import report as rp
    from logmetrics.offline import reportview as view
    from logmetrics.offline.backfill import wants_progress
    from logmetrics.offline.reportread import collect

    if "-" in paths:
        raise UserError("report reads files, not stdin: save the log to a file first")
    if source is not None and not source.strip():
        raise UserError("--source needs a name; leave it out for the file path")
    if output is not None and (problem := output_problem(output)) is not None:
        raise UserError(f"--output {output}: {problem}")
    entries = parser_entries(plugins, parser)
    tz = zone(timezone)
    opts = rp.Options(paths=paths, parser=parser, source=source, envelope=envelope,
                      labels=tuple(label_flag(s) for s in labels), tz=tz, max_line_bytes=max_line_bytes,
                      include=include, exclude=exclude, workers=workers)
    collected = collect(opts, entries, wants_progress())
    if fmt == "table" and output is None:
        view.table(collected, tz)
        return
    if fmt == "table":
        from rich.console import Console

        with open(os.devnull, "w") as sink:  # rendered into a string, written below like the others
            console = Console(file=sink, record=True, width=120)
            view.table(collected, tz, console)
        text = console.export_text()
    else:
        text = view.as_json(collected, tz) + "\n" if fmt == "json" else view.as_html(collected, tz)
    data = text.encode("utf-8", "replace")  # (a file name that is not UTF-8: its bytes as U+FFFD)
    if output is None:
        sys.stdout.flush()
        sys.stdout.buffer.write(data)
        return
    try:
        write_output(output, data)
    except OSError as exc:
        raise UserError(f"--output {output}: {exc.strerror or exc}") from exc
    click.echo(f"logmetrics: report: {len(collected.figures)} backend(s) and model(s) of {len(collected.files)} "
               f"file(s) written to {output}", err=True)
