"""``logmetrics backfill``: past logs as Prometheus TSDB blocks, by the log's own time.

The files are read whole, each in file order, through the same engine as ``watch --oneshot``
(envelopes, records, parsers, catalog, labels), in groups of lines that fall into one step of log
time (:mod:`logmetrics.records.logtime`). The groups of all files are merged by step, so the store moves
through log time as a running ``watch`` would have; at the end of each step every series is
written as it would have been served then (:mod:`logmetrics.offline.omwriter`): a sample per series per
step, from the step of its first event on. ``promtool`` then turns that text into blocks. The
groups come from :mod:`logmetrics.offline.loggroups`.
"""

from __future__ import annotations

import logging
import math
import os
import sys
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from datetime import UTC, datetime, tzinfo
from typing import TextIO

from logmetrics.app.config import Input, parse_duration
from logmetrics.app.options import inputs_filter
from logmetrics.engine.engine import Engine
from logmetrics.engine.settings import StaticLabel
from logmetrics.errors import UserError
from logmetrics.offline.loggroups import Group, log_files, log_groups
from logmetrics.offline.omwriter import OpenMetricsWriter, blocks_in, create_blocks, lock_folder
from logmetrics.plugins import ParserEntry
from logmetrics.sources.chunks import Chunk, SourceStats
from logmetrics.sources.descriptors import raise_open_file_limit
from logmetrics.store.store import Store

log = logging.getLogger(__name__)

GAP_STEPS = 100_000  # a jump in log time of more steps than this is reported (with --staleness forever:
# every step is written)
TEXT_NAME = "backfill.om"  # the OpenMetrics text, in --out (kept with --openmetrics-only)


@dataclass(frozen=True)
class Options:
    """What ``logmetrics backfill`` was asked to do."""

    paths: tuple[str, ...]
    out: str
    step: float = 15.0
    start: float | None = None
    end: float | None = None
    parser: str | None = None
    source: str | None = None
    envelope: str = "auto"
    labels: tuple[StaticLabel, ...] = ()
    inputs: tuple[Input, ...] = ()
    label_limits: tuple[tuple[str, int], ...] = ()
    tz: tzinfo | None = None
    max_line_bytes: int = 1 << 23
    include: tuple[str, ...] = ()  # globs of the files found under directories and globs to read (all, if none)
    exclude: tuple[str, ...] = ()  # globs of those to leave out
    openmetrics_only: bool = False
    state_file: str | None = None
    target_labels: tuple[tuple[str, str], ...] = ()  # added to every series, as a scrape's target labels
    #: seconds a series is still written, every step, after its value last changed (None: always)
    staleness: float | None = 300.0


@dataclass
class Result:
    """What a backfill wrote: files, lines, steps, samples, the log time covered, the text's path."""

    files: int
    lines: int
    steps: int
    samples: int
    first: float | None
    last: float | None
    text: str


def run(opts: Options, entries: dict[str, ParserEntry], progress: TextIO | None = None) -> Result:
    """Backfill: read, write the OpenMetrics text into ``opts.out``, and (unless asked not to)
    create the TSDB blocks there."""
    raise_open_file_limit()  # (the OpenMetrics spools: one file per family, open until the end)
    store = Store()
    store.limits.update(opts.label_limits)
    stats = SourceStats()
    chosen = inputs_filter(opts.inputs, opts.paths, opts.include, opts.exclude)
    files, merged = log_groups(log_files(opts.paths, chosen), opts.step, opts.tz, stats)
    try:
        os.makedirs(opts.out, exist_ok=True)
    except OSError as exc:  # a file where a directory must be, no permission, a full disk
        raise UserError(f"--out {opts.out}: cannot make the directory: {exc.strerror or exc}") from None
    lock = lock_folder(opts.out)
    try:
        return _run(opts, entries, progress, store, stats, files, merged)
    finally:
        os.close(lock)


def _run(opts: Options, entries: dict[str, ParserEntry], progress: TextIO | None, store: Store,
         stats: SourceStats, files: list[str], merged: Iterator[Group]) -> Result:
    """``run`` once ``--out`` is there and locked."""
    engine = Engine(entries, store, parser=opts.parser, source=opts.source, envelope=opts.envelope,
                    max_line_bytes=opts.max_line_bytes, lines_truncated=stats.lines_truncated, labels=opts.labels)
    engine.set_inputs(opts.inputs)
    envelopes(engine, files)
    bar = _Bar(progress, stats) if progress is not None else None
    window = None if opts.staleness is None else max(1, math.ceil(opts.staleness / opts.step))
    writer = OpenMetricsWriter(store, opts.out, opts.target_labels, window)
    text = os.path.join(opts.out, TEXT_NAME)
    step = opts.step
    lo = -math.inf if opts.start is None else opts.start
    hi = math.inf if opts.end is None else opts.end
    cur: int | None = None
    steps = 0
    first_t: float | None = None
    last_t: float | None = None

    def emit(a: int, b: int, final: bool = False) -> int:
        """Write steps ``a`` to ``b - 1`` (the store stays as it is over them) within --start/--end:
        with a staleness window, only until every series has been written for the window after
        step ``a`` (later steps would hold no sample). The ``final`` step writes every series: the
        log's end state, which a live watch goes on from."""
        first = a if lo == -math.inf else max(a, math.ceil(lo / step) - 1)
        last = b - 1 if hi == math.inf else min(b - 1, math.floor(hi / step) - 1)
        skipped = first > a
        if skipped:
            writer.skip()
        if window is not None:
            last = min(last, max(first, a + window))
        for j in range(first, last + 1):
            writer.write(j * step, (j + 1) * step, -1 if (skipped and j == first) or final else j)
        return max(last + 1 - first, 0)

    try:
        for k, _n, _seq, data, t in merged:
            if cur is not None and k > cur:
                engine.flush_held()  # a record held for lines that may continue it counts in its own step
                if window is None and k - cur > GAP_STEPS:
                    _gap(cur, k, step, files[_n])
                steps += emit(cur, k)
            cur = k if cur is None or k > cur else cur
            path = files[_n]
            if not data:
                engine.finish(path)
                continue
            first_t = t if first_t is None or t < first_t else first_t
            last_t = t if last_t is None or t > last_t else last_t
            engine.feed(Chunk(path, data, t))
            if bar is not None:
                bar.update()
        engine.finish()
        if opts.state_file is not None:
            from logmetrics.offline import backfillstate

            backfillstate.save(opts.state_file, opts.paths, files, stats.bytes_read, store, engine)
        if cur is not None:
            steps += emit(cur, cur + 1, final=True)
        if bar is not None:
            bar.done()
        writer.finish(text)
    finally:
        writer.close()
    if not writer.samples and first_t is not None and (opts.start is not None or opts.end is not None):
        log.warning("no sample written: the log's times run from %s to %s, outside --start/--end", _iso(first_t),
                    _iso(last_t if last_t is not None else first_t))
    if not opts.openmetrics_only:
        if old := blocks_in(opts.out):
            log.warning("--out %s holds %d TSDB block(s) already (an earlier backfill?): the new ones go beside them, "
                        "and a Prometheus that loads both merges them where their times overlap; remove the old ones "
                        "if this run replaces them", opts.out, old)
        if progress is not None:  # (promtool says nothing while it works: a large text takes a while)
            progress.write(f"logmetrics: making the TSDB blocks of {writer.samples:,} samples with promtool\n")
        try:
            create_blocks(text, opts.out)
        finally:
            os.unlink(text)
    lines = sum(v for (name, _), v in store.counters.items() if name == "logmetrics_lines_read_total")
    return Result(len(files), int(lines), steps, writer.samples, first_t, last_t, text)


HEAD_BYTES = 65536  # the start of a file read for its envelope (``envelopes``)


def envelopes(engine: Engine, files: Iterable[str]) -> None:
    """Let the engine decide each file's envelope on its first lines (as ``watch`` does, which
    reads a file in large chunks), not on its first group, which may be one line."""
    for path in files:
        try:
            with open(path, "rb") as f:
                head = f.read(HEAD_BYTES)
        except OSError:
            continue  # (said when it is read)
        cut = head.rfind(b"\n") + 1
        if cut:
            engine.envelope_from(path, head[:cut])


def _iso(t: float) -> str:
    return datetime.fromtimestamp(t, UTC).isoformat(timespec="seconds")


def _gap(cur: int, k: int, step: float, path: str) -> None:
    when = [_iso(x * step) for x in (cur, k)]
    log.warning("log time jumps from %s to %s (at %s): the %d steps between are written too, as a running "
                "watch would have served them; bound them with --start/--end, or backfill files of "
                "different periods apart", when[0], when[1], path, k - cur)


class _Bar:
    """A progress bar on a terminal: bytes read of all the files' bytes."""

    def __init__(self, stream: TextIO, stats: SourceStats) -> None:
        from logmetrics.app.progress import Progress  # the same report as --oneshot's

        self.progress = Progress(stream)
        self.stats = stats

    def update(self) -> None:
        self.progress.update(self.stats)

    def done(self) -> None:
        self.progress.done(self.stats)


def wants_progress() -> TextIO | None:
    """stderr, when it is a terminal."""
    return sys.stderr if sys.stderr.isatty() else None


def parse_step(text: str) -> float:
    """A step such as ``15s``, ``1m``, ``500ms``, ``2h`` or ``30`` (seconds), in seconds."""
    return parse_duration(text, "a step", 0.001)

