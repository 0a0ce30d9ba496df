"""``--oneshot`` over several files on several cores: each worker process reads a share of the
files whole, and their stores and figures are merged into the first one's.

The result is the one a single process prints, byte for byte, because nothing is shared between
shares: each source label is read from one file, in one worker (a source's series, its gauges
above all, are made in one process, in file order), every series of the catalog carries its
source, and the engine's own counters are whole counts, exact in any order. A run is sharded only
where that holds and it pays: no stdin, no ``--source`` for every input, every PATH argument
readable, no source read from several files, no file under two names (a link), and enough bytes
to outweigh a fork; and the cardinality guard must not have
folded a label value in any share, nor would it fold the values of all shares together (else the
single process runs after all).
"""

from __future__ import annotations

import contextlib
import copy
import dataclasses
import logging
import os
from functools import partial
from typing import NamedTuple

from logmetrics.app import workers as w
from logmetrics.app.options import Options, wanted
from logmetrics.app.progress import Progress
from logmetrics.app.runner import Runner
from logmetrics.engine.ahead import Ahead
from logmetrics.engine.settings import Settings
from logmetrics.plugins import ParserEntry
from logmetrics.sources.chunks import SourceStats
from logmetrics.sources.discovery import discover, is_glob
from logmetrics.store.catalog import SELF_BY_NAME
from logmetrics.store.guard import DEFAULT_LIMIT, LABEL_LIMITS
from logmetrics.store.values import Histogram

log = logging.getLogger("logmetrics.app.shards")

Key = tuple[str, tuple[str, ...]]


class Share(NamedTuple):
    """What a worker made of its share of the files."""

    counters: dict[Key, float]
    gauges: dict[Key, float]
    histograms: dict[Key, Histogram]
    seen: dict[tuple[str, int, str], set[str]]  # the cardinality guard's admitted values
    stats: SourceStats
    failed: list[str]
    said: list[str]  # its log lines, for the first process to print (each once)


def plan(opts: Options, workers: int) -> tuple[list[tuple[str, ...]] | None, str]:
    """The files of each share, the largest first (``workers.jobs``: more than the processes, where
    files are more); or None, and why one process reads them all. ``workers``: how many processes
    at most (0: one per core, where the files are large enough)."""
    n = workers or w.cores()
    if n < 2:
        return None, "--workers 1" if workers else "one core"
    if "-" in opts.paths:
        return None, "stdin is an input"
    if opts.source is not None or any(i.source is not None for i in opts.inputs):
        return None, "a source label named for an input (--source or an input's source)"
    for arg in opts.paths:
        if not is_glob(arg) and not os.path.exists(arg):
            return None, f"{arg} does not exist"  # the run says it
    errors: list[OSError] = []
    files = discover(opts.paths, errors.append, wanted(opts))
    if errors:
        return None, f"a directory could not be listed ({errors[0]})"
    if len(files) < 2:
        return None, "one file"
    settings = Settings(source=opts.source, envelope=opts.envelope)
    settings.set_inputs(opts.inputs)
    sources: set[str] = set()
    idents: set[tuple[int, int]] = set()
    sizes: dict[str, int] = {}  # by file: each is its source's only one
    for path in files:
        source = settings.source_label(path)
        if source in sources:  # its gauges' last value would be the order of its files' reads
            return None, f"source {source} is read from several files"
        sources.add(source)
        try:
            st = os.stat(path)
        except OSError as exc:
            return None, f"{path}: {exc.strerror or exc}"
        if (st.st_dev, st.st_ino) in idents:  # one process reads it once
            return None, f"{path} is a file named twice (a link)"
        idents.add((st.st_dev, st.st_ino))
        sizes[path] = st.st_size
    if sum(sizes.values()) < w.MIN_BYTES and not workers:
        return None, f"under {w.MIN_BYTES >> 20} MiB in all"
    if w.naming_files(sizes, settings) > 1:
        return None, w.NAMING_WHY
    if len(sources) > {**LABEL_LIMITS, **dict(opts.label_limits)}.get("source", DEFAULT_LIMIT):
        return None, "more sources than the cardinality guard keeps"  # folded in one process' order
    return w.jobs(sizes, n), ""


def run(opts: Options, entries: dict[str, ParserEntry], workers: int,
        progress: Progress | None) -> tuple[Runner, list[str]]:
    """Read every input whole (``--oneshot``), sharded over worker processes where ``plan`` says
    so: the runner whose store and figures hold the whole result, and the PATH arguments that
    could not be read."""
    shares, why = plan(opts, workers)
    if shares is None:
        log.info("reading in one process: %s", why)
    else:
        n = min(len(shares), workers or w.cores())
        log.info("reading %d files in %d processes", sum(map(len, shares)), n)
        runner, results, said = w.spread(shares, partial(_share, opts, entries),
                                         partial(_first, opts, entries, progress), progress, n)
        done = [r for r in results if isinstance(r, Share)]
        differs = _merge(runner, done) if len(done) == len(results) else w.FAILED
        if differs is None:
            w.say_once((line for r in done for line in r.said), said)
            return runner, _failed(runner) + [f for r in done for f in r.failed]
        w.again(log, differs)
        runner.close()
        if progress is not None:
            progress.others = None  # (what the workers read is read again)
    runner = _one_process(opts, entries, workers, progress)
    return runner, _failed(runner)


def _one_process(opts: Options, entries: dict[str, ParserEntry], workers: int, progress: Progress | None) -> Runner:
    """Every input read in this process; the parsers' prescans in a child, where it pays."""
    if not _prescans_pay(opts, workers):
        runner = Runner(opts, entries)
        runner.drain(progress)
        return runner
    from logmetrics.app.prescan import Prescanner  # (only where it runs: its imports cost start-up)

    prescanner = Prescanner(entries)  # (forked before the runner opens a file)
    try:
        runner = Runner(opts, entries)
        if prescanner.running():
            log.info("the parsers' prescans in a second process")
            runner.engine.applier.ahead = Ahead(prescanner)
        runner.drain(progress)
        runner.engine.applier.ahead = None  # (drained: nothing is kept)
        return runner
    finally:
        prescanner.close()


def _prescans_pay(opts: Options, workers: int) -> bool:
    """Whether a run in one process has the parsers' prescans run in a child (``app.prescan``): with
    ``--workers`` 2 or more, or with a core to spare and ``workers.MIN_BYTES`` of files."""
    if workers:
        return workers > 1
    if w.cores() < 2:
        return False
    total = 0
    for path in discover([p for p in opts.paths if p != "-"], lambda _err: None, wanted(opts)):
        with contextlib.suppress(OSError):
            total += os.stat(path).st_size
    return total >= w.MIN_BYTES


def _first(opts: Options, entries: dict[str, ParserEntry], progress: Progress | None,
           paths: tuple[str, ...]) -> tuple[Runner, SourceStats]:
    """The first process' run over its share of the files."""
    runner = Runner(dataclasses.replace(opts, only=frozenset(paths)), entries)
    runner.drain(progress)
    return runner, runner.stats


def _failed(runner: Runner) -> list[str]:
    """The inputs that could not be read, each as a one-line message: PATH arguments, and files
    that never had a descriptor."""
    failed = runner.tailer.failed_args() + runner.tailer.starved() if runner.tailer is not None else []
    if runner.stdin is not None and runner.stdin.failure is not None:
        failed.append(runner.stdin.failure)
    return failed


def _share(opts: Options, entries: dict[str, ParserEntry], paths: tuple[str, ...], board: w.Board | None) -> Share:
    """A worker's run over its files, its figures taken while its files are open (they are
    counted); what its loggers say goes with it."""
    said = w.Said()
    logging.getLogger().handlers = [said]
    runner = Runner(dataclasses.replace(opts, only=frozenset(paths)), entries)
    try:
        runner.drain(board)
        store = runner.store
        return Share(store.counters, store.gauges, store.histograms, store.guard.seen, copy.deepcopy(runner.stats),
                     _failed(runner), said.lines)
    finally:
        runner.close()


def _merge(runner: Runner, shares: list[Share]) -> str | None:
    """The shares' series and figures added to ``runner``'s; or why the result could differ from
    one process's (a label value folded, or one that would be; a series made in two shares)."""
    store, stats = runner.store, runner.stats
    folded = w.folds([store.counters, *(share.counters for share in shares)],
                     [store.guard.seen, *(share.seen for share in shares)], store.families, store.guard.limits)
    if folded is not None:
        return folded
    for share in shares:
        for table, mine in ((share.counters, store.counters), (share.gauges, store.gauges),
                            (share.histograms, store.histograms)):
            if any(key in mine for key in table if key[0] not in SELF_BY_NAME):
                return "a source in two processes (a compose service in two files, say)"
        for key, value in share.gauges.items():
            store.gauges[key] = store.gauges.get(key, 0.0) + value  # the engine's: sums of its shares
        for key, value in share.counters.items():
            store.counters[key] = store.counters.get(key, 0.0) + value  # (whole counts: exact)
        store.histograms.update(share.histograms)
        for name, value in vars(share.stats).items():
            mine_value = getattr(stats, name)
            if isinstance(value, dict):
                mine_value.update(value)
            else:
                setattr(stats, name, mine_value + value)
    return None
