"""The ``logmetrics backfill`` command (its work is in :mod:`logmetrics.offline.backfill`, imported when it runs)."""

from __future__ import annotations

import dataclasses
from datetime import datetime

import click

from logmetrics.app import config
from logmetrics.cli.common import (
    CONTEXT,
    TIME_HELP,
    label_flag,
    parser_entries,
    reading_options,
    time_arg,
    timezone_option,
    zone,
)
from logmetrics.errors import UserError


@click.command(context_settings=CONTEXT)
@click.argument("paths", nargs=-1, metavar="FILE|DIR...")
@click.option("--out", required=True, metavar="DIR", type=click.Path(file_okay=False),
              help="Where to write the TSDB blocks (created if missing; with --openmetrics-only, the text "
                   "file backfill.om).")
@click.option("--step", "step_text", default="15s", show_default=True, metavar="DURATION",
              help="Log time between two samples of a series, like a scrape interval: 15s, 1m, 500ms, or seconds.")
@click.option("--start", default=None, metavar="TIME",
              help=f"Write no sample before this log time ({TIME_HELP}). Counters still count from the start "
                   "of the files, so that they join up.")
@click.option("--end", default=None, metavar="TIME", help=f"Write no sample after this log time ({TIME_HELP}).")
@timezone_option()
@click.option("--config", "config_file", default=None, metavar="FILE", type=click.Path(dir_okay=False),
              help="Take inputs (with their parser, envelope, source and model) and label_limits from this "
                   "TOML file, as 'watch --config' does; its other settings are for a running watch.")
@reading_options
@click.option("--state-file", default=None, metavar="PATH", type=click.Path(dir_okay=False),
              help="Also write a state file (PATH must not exist) that 'watch --state-file PATH' with the same "
                   "FILE|DIR arguments goes on from: read positions at the files' ends, counters as backfilled, "
                   "so that the live series join up with the backfilled ones.")
@click.option("--openmetrics-only", is_flag=True,
              help="Stop at the OpenMetrics text (DIR/backfill.om): do not run promtool.")
@click.option("--staleness", "staleness_text", default="5m", show_default=True, metavar="DURATION",
              help="How long a series that stopped changing is still written, a sample every --step, after "
                   "its last change (Prometheus' lookback carries its last sample 5 minutes further): a quiet "
                   "stretch of the log costs nothing, and the totals join up when the series moves again. "
                   "'forever' writes every series at every step, as a scrape would have.")
@click.option("--target-label", "target_labels", multiple=True, metavar="NAME=VALUE",
              help="Add this label to every series written, as Prometheus adds a scrape's target labels: "
                   "job=logmetrics and instance=HOST:PORT make the backfilled history line up with the "
                   "scraped series and the alerts that group by them. Repeatable.")
def backfill(paths: tuple[str, ...], out: str, step_text: str, start: str | None, end: str | None,
             timezone: str | None, config_file: str | None, parser: str | None, source: str | None, envelope: str,
             labels: tuple[str, ...], plugins: tuple[str, ...], max_line_bytes: int, state_file: str | None,
             openmetrics_only: bool, target_labels: tuple[str, ...], staleness_text: str, include: tuple[str, ...],
             exclude: tuple[str, ...]) -> None:
    """Turn past logs into Prometheus TSDB blocks, by the time their lines state.

    Reads every FILE (and the files under each DIR) from start to end with the parsers, catalog
    and labels of 'watch', and writes each series as 'watch' would have served it at the end of
    every --step of log time, as OpenMetrics text with timestamps; then runs 'promtool tsdb
    create-blocks-from openmetrics' (promtool must be on PATH) to make blocks in --out. Copy the
    block directories into Prometheus's --storage.tsdb.path to load them. Examples:

    \b
      logmetrics backfill /var/log/llm/ --out blocks/
      logmetrics backfill vllm.log --out blocks/ --step 30s --timezone Europe/Berlin
      logmetrics backfill vllm.log --out text/ --openmetrics-only --start 2024-04-10T00:00:00Z
      logmetrics backfill /var/log/llm/ --out blocks/ --target-label job=logmetrics --target-label instance=gpu-1:9877
    """
    from logmetrics.offline import backfill as bf

    entries = parser_entries(plugins, parser)
    tz = zone(timezone)
    try:
        step = bf.parse_step(step_text)
    except ValueError as exc:
        raise UserError(f"--step: {exc}") from exc
    try:
        staleness = None if staleness_text == "forever" else bf.parse_step(staleness_text)
    except ValueError as exc:
        raise UserError(f"--staleness: {exc} (or 'forever')") from exc
    t0, t1 = time_arg("--start", start, tz), time_arg("--end", end, tz)
    if t0 is not None and t1 is not None and t1 < t0:
        raise UserError(f"--end {end} is before --start {start}")
    if source is not None and not source.strip():
        raise UserError("--source needs a name; leave it out for the file path or the compose service")
    cfg = config.load(config_file, entries) if config_file is not None else config.Config(file="")
    given = click.get_current_context().get_parameter_source("envelope") not in (
        None, click.core.ParameterSource.DEFAULT)
    inputs = tuple(dataclasses.replace(i, parser=None if parser is not None else i.parser,
                                       envelope=None if given else i.envelope,
                                       source=None if source is not None else i.source) for i in cfg.inputs)
    every = tuple(dict.fromkeys((*paths, *(i.path for i in inputs))))
    if not every:
        raise UserError("missing FILE or DIR argument" + (" (or [[input]] tables in the --config file)"
                                                         if config_file else ""))
    if "-" in every:
        raise UserError("backfill reads files, not stdin: save the log to a file first")
    if state_file is not None:
        from logmetrics.offline.backfillstate import check

        check(state_file)
    extra = tuple(_target_label(text) for text in target_labels)
    opts = bf.Options(paths=every, out=out, step=step, start=t0, end=t1, parser=parser, source=source,
                      envelope=envelope, labels=tuple(label_flag(s) for s in labels), inputs=inputs,
                      label_limits=cfg.label_limits, tz=tz, max_line_bytes=max_line_bytes, include=include,
                      exclude=exclude, openmetrics_only=openmetrics_only, state_file=state_file, target_labels=extra,
                      staleness=staleness)
    result = bf.run(opts, entries, bf.wants_progress())

    def when(t: float | None) -> str:
        return "-" if t is None else datetime.fromtimestamp(t, tz).isoformat(timespec="seconds")

    where = result.text if openmetrics_only else f"blocks in {out}"
    click.echo(f"logmetrics: backfill: {result.lines} lines of {result.files} files, log time {when(result.first)} "
               f"to {when(result.last)}: {result.steps} steps, {result.samples} samples; {where}", err=True)


#: Labels a catalog family or the engine sets itself: a target label may not take their place.
_OWN_LABELS = frozenset({"backend", "source", "model", "le", "quantile", "__name__"})


def _target_label(text: str) -> tuple[str, str]:
    """``(name, value)`` of one --target-label NAME=VALUE, checked as Prometheus checks a label."""
    import re

    from logmetrics.store import catalog

    name, sep, value = text.partition("=")
    if not sep or not re.fullmatch(r"[a-zA-Z_][a-zA-Z0-9_]*", name) or name.startswith("__"):
        raise UserError(f"--target-label {text!r}: give NAME=VALUE, NAME a label name (letters, digits, _; "
                        "not starting with __), as in job=logmetrics")
    taken = _OWN_LABELS | {label for fam in catalog.FAMILIES for label in fam.labels}
    if name in taken:
        raise UserError(f"--target-label {name}: logmetrics sets that label itself; choose another name "
                        "(job and instance are what Prometheus adds to scraped series)")
    return name, value
