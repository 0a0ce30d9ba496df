"""``logmetrics watch``: follow log files and serve their metrics (or print them, ``--oneshot``)."""

from __future__ import annotations

import dataclasses
import math
import os
import re
import stat
from collections.abc import Sequence
from typing import TYPE_CHECKING

import click
from click.core import ParameterSource

from logmetrics.app import config
from logmetrics.app.procs import ProcessRule
from logmetrics.cli.common import (
    CONTEXT,
    ENVELOPE_HELP,
    Interrupted,
    file_options,
    label_flag,
    listen_address,
    parser_entries,
    plugin_option,
    workers_option,
)
from logmetrics.envelopes.unwrap import MODES
from logmetrics.errors import UserError
from logmetrics.sources.discovery import covers
from logmetrics.store.guard import safe_label

if TYPE_CHECKING:
    from logmetrics.app.options import Options

DEFAULT_LISTEN = "0.0.0.0:9877"


def _check_state_file(path: str, inputs: Sequence[str]) -> None:
    """Refuse at start a state file that could never be saved, rather than warn at the first save."""
    folder = os.path.dirname(os.path.abspath(path))
    if not os.path.isdir(folder):
        raise UserError(f"--state-file {path}: directory {folder} does not exist")
    if not os.access(folder, os.W_OK | os.X_OK):
        raise UserError(f"--state-file {path}: directory {folder} is not writable")
    if os.path.isdir(path):
        raise UserError(f"--state-file {path}: is a directory")
    try:
        mode = os.stat(path).st_mode
    except OSError:
        mode = stat.S_IFREG  # not there yet (or unreadable: said when it is opened)
    if not stat.S_ISREG(mode):  # a device or a FIFO: never set aside (renamed) nor waited on
        raise UserError(f"--state-file {path}: is not a regular file (a device, a FIFO or a socket); "
                        "name a file of its own, e.g. /var/lib/logmetrics/state.db")
    sides = [f"{p}{end}" for p in dict.fromkeys((path, os.path.realpath(path))) for end in ("", "-wal", ".lock")]
    for arg in inputs:  # (the lock file is made beside the file a symlink leads to)
        if arg != "-" and any(covers(arg, side) for side in sides):
            raise UserError(f"--state-file {path}: lies among the followed files ({arg}): logmetrics would read "
                            "its own state as a log, or take a log for a damaged state and set it aside; "
                            "put it elsewhere, e.g. /var/lib/logmetrics/state.db")


def _rules(pairs: Sequence[tuple[str, str]]) -> tuple[ProcessRule, ...]:
    """The ``[[process]]`` rules of a configuration file (checked there) as ``--process`` rules."""
    return tuple((safe_label(backend), re.compile(pattern)) for backend, pattern in pairs)


def _finite(ctx: click.Context, param: click.Parameter, value: float) -> float:
    """A number of seconds that is a number: click's FloatRange lets ``nan`` through (no comparison holds)."""
    if math.isnan(value):
        raise click.BadParameter(f"{value} is not a number of seconds")
    return value


def _expiry(ctx: click.Context, param: click.Parameter, text: str) -> float | None:
    """``--expire-after DURATION|never``: seconds, or None."""
    try:
        return config.parse_expiry(text)
    except ValueError as exc:
        raise click.BadParameter(str(exc), ctx, param) from None


def _processes(ctx: click.Context, param: click.Parameter, specs: tuple[str, ...]) -> tuple[ProcessRule, ...]:
    """``--process BACKEND=PATTERN``: the backend ends at the first '='; the pattern is a Python regex."""
    rules: list[ProcessRule] = []
    for spec in specs:
        backend, eq, pattern = spec.partition("=")
        if not eq or not backend.strip() or not pattern:
            raise click.BadParameter(f"expected BACKEND=PATTERN, e.g. vllm='vllm serve|api_server'; got {spec!r}",
                                     ctx, param)
        try:
            rules.append((safe_label(backend), re.compile(pattern)))
        except re.error as exc:
            raise click.BadParameter(f"{spec!r}: {pattern!r} is not a valid regular expression: {exc}",
                                     ctx, param) from None
    return tuple(rules)


PROCESS_HELP = (
    "Count the CPU and memory of the processes whose full command line (arguments joined by spaces) "
    "matches PATTERN, a Python regular expression searched anywhere in it, under backend=BACKEND "
    "(backend_process_cpu_seconds_total, backend_process_resident_memory_bytes), besides the processes "
    "each parser names itself, matched against the program a process runs, never a path argument (vllm: "
    "'vllm serve', 'python -m vllm.entrypoints...', 'VLLM::EngineCore'). A process counts once, for the "
    "first match: the --process rules in the order given, then the parsers' own names. logmetrics "
    "itself is never counted. Repeatable.")


@click.command(context_settings=CONTEXT)
@click.argument("paths", nargs=-1, metavar="PATH...")
@click.option("--config", "config_file", default=None, metavar="FILE", type=click.Path(dir_okay=False),
              help="Read inputs (with their parser, envelope, source and model), process rules, listen, "
                   "state_file, web_config, label_limits, poll_interval, rescan_interval, from_beginning and "
                   "max_line_bytes from this TOML file (see docs/configuration.md; check one with "
                   "'logmetrics check-config'). A flag given on the command line wins over the file, the file over the "
                   "default; PATH arguments and --process rules add to the file's. SIGHUP reads it again: "
                   "inputs are added and dropped with no reset of counters or read positions; a file that is "
                   "not valid is refused and the running configuration stays (web_config names the file that "
                   "--web-config would).")
@click.option("--listen", default=DEFAULT_LISTEN, show_default=True, metavar="HOST:PORT",
              help="Where to serve /metrics and /healthz: HOST:PORT, [IPV6]:PORT, or :PORT for every "
                   "interface (IPv6 and IPv4, as [::]:PORT where the OS allows). Port 0 picks a free port.")
@click.option("--web-config", "web_config", default=None, metavar="FILE", type=click.Path(dir_okay=False),
              help="Serve HTTPS and/or require basic authentication as this YAML file says, in the Prometheus "
                   "exporter toolkit's web config format (tls_server_config, basic_auth_users with bcrypt "
                   "hashes); see docs/security.md. The file and the certificates it names "
                   "are read again when they change; a broken new file is refused and the running one stays. "
                   "/healthz stays open without credentials.")
@click.option("--parser", default=None, metavar="NAME",
              help="Parse every input with this parser instead of routing by path or content.")
@click.option("--source", default=None, metavar="NAME",
              help="The 'source' label for every input (default: the file path, 'stdin', or the compose service).")
@click.option("--envelope", type=click.Choice(MODES), default="auto", show_default=True, metavar="KIND",
              help=ENVELOPE_HELP)
@click.option("--label", "labels", multiple=True, metavar="[GLOB:]model=NAME",
              help="Set the model label of every input, or with GLOB: of the inputs whose source label, path or "
                   "file name matches it (fnmatch; the last ':' before the '=' ends it). It wins over the model "
                   "the log names; a scoped one wins over an unscoped one. Repeatable.")
@click.option("--from-beginning", is_flag=True,
              help="Read files present at start from their beginning (default: from their end, like tail -F); "
                   "with --state-file, only files its state does not show as read.")
@plugin_option
@click.option("--oneshot", is_flag=True,
              help="Read every input from the start to EOF, print the metrics on stdout and exit.")
@workers_option("With --oneshot: ")
@click.option("--poll-interval", type=click.FloatRange(0.01, 60), default=0.25, show_default=True, callback=_finite,
              metavar="SECONDS",
              help="How often files are checked for new data, rotation and truncation where no file system "
                   "notification comes from (no inotify, a directory that cannot be watched); with inotify, "
                   "files are read when they change, at most every 0.1 s; when serving without --state-file, at "
                   "every scrape and at most every SECONDS between.")  # runner.COALESCE_SECONDS, held by a test
@click.option("--rescan-interval", type=click.FloatRange(0.01, 3600), default=5.0, show_default=True,
              callback=_finite,
              metavar="SECONDS",
              help="With inotify, how often every file is looked at all the same. This is how changes that "
                   "inotify does not report are seen: files written from another machine on a network file "
                   "system, say. Set it to --poll-interval there.")
@click.option("--state-file", default=None, metavar="PATH", type=click.Path(dir_okay=False),
              help="Keep counters, read positions and parser state in PATH, a database committed at every poll "
                   "that changed anything, so that a restart (even after kill -9) goes on where it stopped: lines "
                   "written meanwhile are counted, none twice. A JSON state file of an earlier version is taken "
                   "over (kept as PATH.v1). It is locked (PATH.lock) against a second logmetrics. Exit code 3 if "
                   "the last commit failed.")
@click.option("--state-adopt", is_flag=True,
              help="Go on with a --state-file saved for other PATH arguments (after adding or removing one): its "
                   "counters and read positions carry over, and the new PATH arguments are recorded. Without it "
                   "such a state file is refused (exit code 2).")
@click.option("--max-line-bytes", type=click.IntRange(1024), default=1 << 23, show_default=True, metavar="BYTES",
              help="Longer lines are cut to this length, counted in logmetrics_lines_truncated_total and "
                   "reported once per source (8 MiB holds a vLLM request line with a 700k-token prompt).")
@click.option("--process", "processes", multiple=True, metavar="BACKEND=PATTERN", callback=_processes,
              help=PROCESS_HELP)
@click.option("--expire-after", "expire_after", default="1h", show_default=True, metavar="DURATION",
              callback=_expiry,
              help="Forget every series of a source (its counters too) this long after its last file went away "
                   "(a deleted pod's logs, say; a deleted file is let go a few seconds after it was read last), "
                   "so that its label frees its place under the cardinality guard; Prometheus keeps what it "
                   "scraped. Its gauges go at once. 30m, 1h, 7d, seconds, or 'never'.")
@file_options
def watch(paths: tuple[str, ...], config_file: str | None, listen: str, web_config: str | None, parser: str | None,
          source: str | None, envelope: str, labels: tuple[str, ...], from_beginning: bool, plugins: tuple[str, ...],
          oneshot: bool, workers: int,
          poll_interval: float, rescan_interval: float, state_file: str | None, state_adopt: bool, max_line_bytes: int,
          processes: tuple[ProcessRule, ...], expire_after: float | None, include: tuple[str, ...],
          exclude: tuple[str, ...]) -> None:
    """Follow log files and serve their metrics.

    PATH is a file, a directory (followed recursively, new files included), a glob (with **) or
    '-' for stdin. Files are followed across rename and copytruncate rotation. Examples:

    \b
      logmetrics watch /var/log/llm/
      docker logs -f vllm 2>&1 | logmetrics watch - --parser vllm --source vllm-0
      logmetrics watch --oneshot --parser vllm samples/vllm/v1-0.10.log
      logmetrics watch /var/log/llm/ --label 'vllm-a*:model=llama-3-8b' --label 'vllm-b*:model=qwen-7b'
      logmetrics watch /var/log/llm/ --process 'gateway=uvicorn .*my_gateway:app'
      logmetrics watch --config /etc/logmetrics/logmetrics.toml
    """
    from logmetrics.app.options import Options
    from logmetrics.app.watch import run

    ctx = click.get_current_context()
    Interrupted.stops = not oneshot  # a server is stopped by a signal; --oneshot is cut short by one

    def given(name: str) -> bool:
        return ctx.get_parameter_source(name) not in (None, ParameterSource.DEFAULT, ParameterSource.DEFAULT_MAP)

    entries = parser_entries(plugins, parser, alone=oneshot and parser is not None and config_file is None)
    static = tuple(label_flag(spec) for spec in labels)
    if source is not None and not source.strip():
        raise UserError("--source needs a name; leave it out for the file path, 'stdin' or the compose service")

    def options() -> Options:
        """The flags over the --config file (read now) over the defaults."""
        cfg = config.load(config_file, entries) if config_file is not None else config.Config(file="")
        inputs = tuple(dataclasses.replace(i, parser=None if parser is not None else i.parser,
                                           envelope=None if given("envelope") else i.envelope,
                                           source=None if source is not None else i.source) for i in cfg.inputs)
        every = tuple(dict.fromkeys((*paths, *(i.path for i in inputs))))
        if not every:
            raise UserError("no input: give PATH arguments, or [[input]] tables in the --config file"
                            if config_file else "missing PATH argument (a file, a directory, a glob or '-')")
        file_listen = cfg.listen if cfg.listen is not None and not given("listen") else listen
        return Options(
            paths=every, listen=None if oneshot else listen_address(file_listen), parser=parser, source=source,
            envelope=envelope, from_beginning=from_beginning or bool(cfg.from_beginning) or oneshot,
            poll_interval=poll_interval if given("poll_interval") or cfg.poll_interval is None else cfg.poll_interval,
            rescan_interval=(rescan_interval if given("rescan_interval") or cfg.rescan_interval is None
                             else cfg.rescan_interval),
            max_line_bytes=(max_line_bytes if given("max_line_bytes") or cfg.max_line_bytes is None
                            else cfg.max_line_bytes),
            # --oneshot leaves out the file's settings for a running watch (state file, process rules)
            state_file=state_file if state_file is not None or oneshot else cfg.state_file, state_adopt=state_adopt,
            labels=static, processes=processes + (() if oneshot else _rules(cfg.processes)), config=config_file,
            inputs=inputs,
            web_config=web_config if web_config is not None else cfg.web_config, label_limits=cfg.label_limits,
            expire_after=cfg.expire_after if cfg.expire_after_set and not given("expire_after") else expire_after,
            include=include, exclude=exclude, workers=workers)

    opts = options()
    _check_watch(opts, oneshot)
    run(opts, entries, options if config_file is not None else None)


def _check_watch(opts: Options, oneshot: bool) -> None:
    """Refuse, at start, flags that do not go together (from the command line or the file)."""
    state_file, state_adopt, processes = opts.state_file, opts.state_adopt, opts.processes
    if oneshot and state_file:
        raise UserError("--state-file is for a running watch; --oneshot always reads its inputs whole")
    if state_adopt and not state_file:
        raise UserError("--state-adopt goes with --state-file")
    if oneshot and processes:
        raise UserError("--process is for a running watch; --oneshot reports no process metrics")
    if state_file:
        _check_state_file(state_file, opts.paths)


