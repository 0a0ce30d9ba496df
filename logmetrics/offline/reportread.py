"""``logmetrics report``'s reading: the files through the engine, in log time, in one process or
in several (each file in one, where the result is the same as one process's).

The files' groups of five seconds of log time are merged across files
(:func:`logmetrics.offline.loggroups.log_groups`) and fed to the engine, with the group's time set
in the :class:`~logmetrics.offline.report.RecordingStore`; at the end of each step what a file
held back counts at the time of that file's own last group. Nothing read from one file then
depends on another: several files large enough are read in worker processes
(:mod:`logmetrics.app.workers`), on the same conditions as ``watch --oneshot``'s, and their
figures put together.
"""

from __future__ import annotations

import logging
from collections.abc import Collection
from functools import partial
from typing import TYPE_CHECKING, NamedTuple, TextIO

from logmetrics.app import workers
from logmetrics.app.options import inputs_filter
from logmetrics.engine.engine import Engine
from logmetrics.engine.settings import Settings
from logmetrics.offline.backfill import envelopes
from logmetrics.offline.loggroups import log_files, log_groups
from logmetrics.offline.report import STEP, Collected, Options, RecordingStore
from logmetrics.plugins import ParserEntry
from logmetrics.records.logtime import LogClock
from logmetrics.sources.chunks import Chunk, SourceStats
from logmetrics.sources.descriptors import raise_open_file_limit

if TYPE_CHECKING:
    from logmetrics.app.progress import Progress

log = logging.getLogger("logmetrics.offline.reportread")


def collect(opts: Options, entries: dict[str, ParserEntry], progress: TextIO | None = None) -> Collected:
    """Read every file under ``opts.paths`` through the engine; the figures of what it logged.

    Several files large enough are read in worker processes (``opts.workers``), each file in one,
    where the result is the same as one process's (``_plan``, ``_merge``)."""
    from logmetrics.app.progress import Progress  # the same report as --oneshot's

    raise_open_file_limit()
    sizes = log_files(opts.paths, inputs_filter(opts.inputs, opts.paths, opts.include, opts.exclude))
    shares, why = _plan(opts, sizes)
    shown = Progress(progress) if progress is not None else None
    if shares is None:
        log.info("reading in one process: %s", why)
    else:
        n = min(len(shares), opts.workers or workers.cores())
        log.info("reading %d files in %d processes", len(sizes), n)
        mine, results, said = workers.spread(shares, partial(_part, opts, entries, sizes),
                                             partial(_first, opts, entries, sizes, shown), shown, n)
        parts = [mine, *(r for r in results if isinstance(r, Part))]
        merged = _merge(list(sizes), parts) if len(parts) == len(shares) else workers.FAILED
        if isinstance(merged, Collected):
            workers.say_once((line for part in parts[1:] for line in part.said), said)
            if shown is not None:
                shown.done(mine.stats)
            return merged
        workers.again(log, merged)
        if shown is not None:
            shown.others = None  # (what the workers read is read again)
    alone = _read(opts, entries, sizes, shown)
    if shown is not None:
        shown.done(alone.stats)
    return alone.collected


class Part(NamedTuple):
    """What one process made of its share of the files."""

    collected: Collected
    stats: SourceStats  # the sources' figures: bytes read, for the progress line
    said: list[str]  # its log lines, for the first process to print (each once)


def _plan(opts: Options, sizes: dict[str, int]) -> tuple[list[tuple[str, ...]] | None, str]:
    """The files of each process, the largest share first; or None, and why one process reads
    them all: as ``--oneshot`` (``logmetrics.app.shards``), but for the cardinality guard, which
    folds no figure of a report (they are made of the events as the parsers give them)."""
    n = opts.workers or workers.cores()
    if n < 2:
        return None, "--workers 1" if opts.workers else "one core"
    if len(sizes) < 2:
        return None, "one file"
    if opts.source is not None or any(i.source is not None for i in opts.inputs):
        return None, "a source label named for an input (--source or an input's source)"
    settings = Settings(source=opts.source, envelope=opts.envelope)
    settings.set_inputs(opts.inputs)
    sources = {settings.source_label(path) for path in sizes}
    if len(sources) < len(sizes):  # a source's figures would be made in two processes
        return None, "a source is read from several files"
    if sum(sizes.values()) < workers.MIN_BYTES and not opts.workers:
        return None, f"under {workers.MIN_BYTES >> 20} MiB in all"
    if workers.naming_files(sizes, settings) > 1:
        return None, workers.NAMING_WHY
    return workers.jobs(sizes, n), ""


def _first(opts: Options, entries: dict[str, ParserEntry], found: dict[str, int], progress: Progress | None,
           share: tuple[str, ...]) -> tuple[Part, SourceStats]:
    """The first process' reading of its share of the files ``found``."""
    part = _read(opts, entries, found, progress, share)
    return part, part.stats


def _part(opts: Options, entries: dict[str, ParserEntry], found: dict[str, int], share: tuple[str, ...],
          board: workers.Board | None) -> Part:
    """A worker's reading of its share of the files ``found``; what its loggers say goes with it."""
    said = workers.Said()
    logging.getLogger().handlers = [said]
    part = _read(opts, entries, found, board, share)
    if board is not None:
        board.done(part.stats)  # (its last figures: the first process' line adds them up)
    return part._replace(said=said.lines)


def _read(opts: Options, entries: dict[str, ParserEntry], found: dict[str, int], progress: Progress | None,
          only: Collection[str] | None = None) -> Part:
    """Read the files ``found`` (those in ``only``, if given) through the engine, in one process."""
    store = RecordingStore()
    stats = SourceStats()
    clocks: list[LogClock] = []
    files, merged = log_groups(found, STEP, opts.tz, stats, clocks, only)
    engine = Engine(entries, store, parser=opts.parser, source=opts.source, envelope=opts.envelope,
                    max_line_bytes=opts.max_line_bytes, lines_truncated=stats.lines_truncated, labels=opts.labels)
    engine.set_inputs(opts.inputs)
    envelopes(engine, files)
    first: float | None = None
    last: float | None = None
    step: int | None = None
    fed: dict[int, float] = {}  # the files read in this step: the time of their last group
    for k, n, _seq, data, t in merged:
        if step is not None and k > step:
            for i, at in fed.items():  # what a file held counts at the time of its own last group (a
                store.now = at  # record whose lines state times in two steps is cut in two: rare, as
                engine.flush_held(files[i])  # continuation lines state none)
            fed.clear()
        step = k
        store.now = fed[n] = t
        if not data:
            engine.finish(files[n])  # what the file still held counts at its last line's time
            continue
        first = t if first is None or t < first else first
        last = t if last is None or t > last else last
        engine.feed(Chunk(files[n], data, t))
        if progress is not None:
            progress.update(stats)
    engine.finish()
    lines = sum(v for (name, _), v in store.counters.items() if name == "logmetrics_lines_read_total")
    figures = sorted((f for f in store.figures.values() if f.first <= f.last), key=lambda f: (f.backend, f.source))
    untimed = [path for path, clock in zip(files, clocks, strict=True) if clock.last is None]
    elapsed = [path for path, clock in zip(files, clocks, strict=True) if clock.anchor is not None]
    return Part(Collected(files, int(lines), first, last, figures, untimed, elapsed), stats, [])


def _merge(files: list[str], parts: list[Part]) -> Collected | str:
    """The parts of several processes as one process's ``Collected`` (``files``: all of them, in
    the order found); or why that could differ (a source in two processes)."""
    got = [p.collected for p in parts]
    figures = [f for c in got for f in c.figures]
    if len({(f.backend, f.source) for f in figures}) < len(figures):
        return "a source in two processes (a compose service in two files, say)"
    order = {path: i for i, path in enumerate(files)}
    firsts = [c.first for c in got if c.first is not None]
    lasts = [c.last for c in got if c.last is not None]
    return Collected(
        files=sorted((f for c in got for f in c.files), key=order.__getitem__),
        lines=sum(c.lines for c in got),
        first=min(firsts) if firsts else None,
        last=max(lasts) if lasts else None,
        figures=sorted(figures, key=lambda f: (f.backend, f.source)),
        untimed=sorted((f for c in got for f in c.untimed), key=order.__getitem__),
        elapsed=sorted((f for c in got for f in c.elapsed), key=order.__getitem__),
    )
