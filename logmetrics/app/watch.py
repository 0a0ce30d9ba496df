"""``logmetrics watch`` run: ``--oneshot`` reads its inputs whole and prints the exposition; else
the runner's poll loop goes on while the HTTP endpoint serves, until SIGINT or SIGTERM, and SIGHUP
reads the ``--config`` file again."""

from __future__ import annotations

import logging
import signal
import sys
from collections.abc import Callable
from types import FrameType
from typing import TYPE_CHECKING

from logmetrics.app import shards
from logmetrics.app.options import Options
from logmetrics.app.progress import Progress
from logmetrics.app.runner import Runner, settle_collector, tune_allocator
from logmetrics.app.workers import cores
from logmetrics.engine.ahead import Ahead
from logmetrics.errors import StateNotSaved, UserError
from logmetrics.plugins import ParserEntry
from logmetrics.sources.descriptors import low_limit_warning, raise_open_file_limit
from logmetrics.sources.discovery import left_out
from logmetrics.store.render import text

if TYPE_CHECKING:
    from logmetrics.app.prescan import Prescanner

log = logging.getLogger(__name__)

#: While serving, batches of this many characters or more are prescanned in a second process: a
#: file read behind its writer (a backlog, a burst) gives batches of 4 MiB (``backlog.STREAM_BYTES``).
#: Live tailing's are parsed at once: a second of a file written at 20,000 lines a second is about
#: 2 MiB, and a prescan elsewhere costs more CPU in all than it saves (the text copied, the result
#: sent back), for a batch that is parsed before the next scrape anyway.
LIVE_PRESCAN_CHARS = 3 << 20
#: While serving, a prescan's result that has not come within this many seconds (a child stopped,
#: a prescan that hangs) stops the child: the engine, and every file with it, waits no longer.
LIVE_ANSWER_SECONDS = 2.0


def live_prescans(opts: Options, entries: dict[str, ParserEntry]) -> Prescanner | None:
    """The parsers' prescans in a child for a serving ``watch`` (started before its runner opens a
    file), with a core to spare and no ``--state-file`` (its passes are parsed and committed at once)."""
    if opts.state_file is not None or cores() < 2:
        log.info("the parsers' prescans in this process: %s",
                 "with --state-file, every pass is parsed at once" if opts.state_file is not None
                 else "no second core")
        return None
    from logmetrics.app.prescan import Prescanner  # (its imports cost start-up: only where it runs)

    prescanner = Prescanner(entries, answer_seconds=LIVE_ANSWER_SECONDS)
    if prescanner.running():
        return prescanner
    prescanner.close()
    return None


def _say(line: str) -> None:
    """One line on stderr (a web config refused on reload)."""
    print(f"logmetrics: error: {line}", file=sys.stderr, flush=True)


def run(opts: Options, entries: dict[str, ParserEntry], reloader: Callable[[], Options] | None = None) -> None:
    """Run ``watch``: print the exposition for ``--oneshot``, else serve until SIGINT/SIGTERM; SIGHUP
    reads the --config file again (``reloader``)."""
    tune_allocator()
    settle_collector()
    warning = low_limit_warning(raise_open_file_limit())
    if warning is not None and opts.listen is not None:
        log.warning("%s", warning)
    if opts.listen is None:
        # (SIGINT or SIGTERM before the end of the inputs: nothing printed, and the command line's
        # own handling of an interrupted command, exit code 130)
        chosen = opts.file_filter()
        why = left_out(opts.paths, chosen.wanted) if chosen else ""
        if why:  # as backfill and report say it: printing nothing would look like an empty log
            raise UserError(f"no log file found in {', '.join(opts.paths)}{why}")
        runner, failed = shards.run(opts, entries, opts.workers, Progress(sys.stderr) if sys.stderr.isatty() else None)
        try:
            sys.stdout.buffer.write(text(runner.view))
            sys.stdout.flush()
        finally:
            runner.close()
        if failed:  # what could be read is printed; a named input that could not be read fails the run
            raise UserError("; ".join(dict.fromkeys(failed)))
        return
    prescanner = live_prescans(opts, entries)
    try:
        runner = Runner(opts, entries, reloader)
    except BaseException:
        if prescanner is not None:
            prescanner.close()
        raise
    if prescanner is not None:
        log.info("the parsers' prescans of large batches in a second process")
        runner.engine.applier.ahead = Ahead(prescanner, least=LIVE_PRESCAN_CHARS)
    try:
        host, port = opts.listen
        from logmetrics.serve.server import MetricsServer  # not needed by --oneshot
        from logmetrics.serve.webconfig import LiveWebConfig
        from logmetrics.store.exposition import host_port

        web = LiveWebConfig(opts.web_config, on_failure=_say) if opts.web_config else None
        runner.web = web
        try:
            server = MetricsServer(host, port, runner.registry, web, unparsed=runner.backlog)
        except OSError as exc:
            raise UserError(f"cannot listen on {host_port(host, port)}: {exc.strerror or exc}") from exc

        def stop(signum: int, frame: FrameType | None) -> None:
            runner.stop.set()
            runner.waker.wake()

        def hangup(signum: int, frame: FrameType | None) -> None:
            runner.reload_wanted = True  # the poll loop reloads: nothing more is safe in a handler
            runner.waker.wake()

        signal.signal(signal.SIGINT, stop)
        signal.signal(signal.SIGTERM, stop)
        signal.signal(signal.SIGHUP, hangup)
        for src in (runner.tailer, runner.stdin):
            if src is not None:
                src.watch(runner.waker)
        # Serving at once: /healthz answers (503) while what was written while logmetrics was down
        # is read, and a scrape waits for the counters, which must not show lower than before.
        server.start(opened=False)
        try:
            runner.poll()  # the first scan fixes which files existed at start before anyone is told we run
            runner.catch_up()
            runner.save_state()  # the first commit: a crash from now on restarts from these positions
            server.open()
            print(f"logmetrics: serving metrics at {server.url}", file=sys.stderr, flush=True)
            runner.follow()
        finally:
            server.stop()
        failure = runner.save_failure()
        if failure is not None and opts.state_file is not None:
            raise StateNotSaved(f"the last save of --state-file {opts.state_file} failed ({failure}): what was "
                                f"counted since its last good save is not kept")
    finally:
        runner.close()
        if prescanner is not None:
            prescanner.close()
