"""``logmetrics watch``: wires sources, engine, store and exposition, and runs the poll loop."""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from typing import TYPE_CHECKING

from logmetrics.app import reload as reloading
from logmetrics.app.backlog import Backlog
from logmetrics.app.options import Options, wanted
from logmetrics.app.procs import ProcessWatcher
from logmetrics.app.progress import Progress
from logmetrics.app.statekeeper import StateKeeper
from logmetrics.engine.engine import HOLD_SECONDS, Engine
from logmetrics.errors import UserError
from logmetrics.plugins import ParserEntry
from logmetrics.sources.chunks import Chunk, SourceError, SourceStats
from logmetrics.sources.stdin import StdinSource
from logmetrics.sources.tailer import FileTailer
from logmetrics.sources.waker import Waker
from logmetrics.state.check import normalised_inputs
from logmetrics.state.journal import Journal
from logmetrics.store.guard import LABEL_LIMITS
from logmetrics.store.render import StoreView
from logmetrics.store.store import Store

if TYPE_CHECKING:
    from prometheus_client.registry import CollectorRegistry

    from logmetrics.serve.webconfig import LiveWebConfig

Sample = tuple[str, tuple[str, ...], float]
LEARN_BYTES = 1 << 20  # a file read from its end: its head and the text before its end, this much of each
LEARN_MIN_BYTES = 64 << 10  # ... at least, when many files start at once and share LEARN_TOTAL_BYTES
LEARN_TOTAL_BYTES = 128 << 20  # read at most about this much in all for the files of one poll
COALESCE_SECONDS = 0.1  # after a wake-up, a pass waits until this long after the last one began
COALESCE_CHUNKS = 4  # ... times the chunks the last one fed over this many (a pass over many busy files)
CATCH_UP_SECONDS = 10.0  # after a restart, read at most this long before serving (what was written while down)

log = logging.getLogger(__name__)


def tune_allocator() -> None:
    """Keep freed batch buffers in the heap instead of returning them to the kernel.

    Each batch allocates and frees strings of about a megabyte. With glibc's defaults those go
    back to the kernel and come back as fresh pages, and the page faults cost about a third of
    the run on a large backlog. Raising the mmap and trim thresholds keeps them for reuse; the
    peak memory stays the same. Elsewhere than glibc this does nothing.
    """
    try:
        import ctypes

        libc = ctypes.CDLL("libc.so.6")
        m_trim_threshold, m_mmap_threshold = -1, -3  # from glibc's malloc.h
        libc.mallopt(m_mmap_threshold, 64 << 20)
        libc.mallopt(m_trim_threshold, 128 << 20)
    except (OSError, AttributeError):  # not glibc: keep the platform's allocator as it is
        pass


#: Allocations between two passes of the cyclic collector over the youngest objects (Python's
#: default is 700).
YOUNG_THRESHOLD = 10_000


def settle_collector() -> None:
    """Move what start-up made (modules, compiled patterns, the parsers' tables: about a hundred
    thousand objects, alive as long as the process) out of the cyclic collector's reach: its full
    passes no longer walk them (``gc.freeze``). And pass over the young objects every
    ``YOUNG_THRESHOLD`` allocations: a scan's tuples live as long as its batch, and every 700 they
    were walked again and again on their way to the oldest generation. On the 1M-line corpus the
    collector's time fell from 95 ms to 10 ms; what is made later is collected as ever."""
    import gc

    gc.freeze()
    gc.set_threshold(YOUNG_THRESHOLD, *gc.get_threshold()[1:])


def source_samples(stats: SourceStats, label: Callable[[str], str]) -> list[Sample]:
    """The tailer's figures as samples of the engine's own families, summed per source label."""
    out: list[Sample] = [("logmetrics_open_files", (), float(stats.open_files)),
                         ("logmetrics_files_waiting", (), float(stats.files_waiting))]
    for name, values in (("logmetrics_bytes_read_total", stats.bytes_read),
                         ("logmetrics_lines_truncated_total", stats.lines_truncated),
                         ("logmetrics_rotations_total", stats.rotations),
                         ("logmetrics_truncations_total", stats.truncations),
                         ("logmetrics_read_errors_total", stats.read_errors),
                         ("logmetrics_bytes_lost_total", stats.bytes_lost),
                         ("logmetrics_files_lost_total", stats.files_lost),
                         ("logmetrics_lag_bytes", stats.lag_bytes)):
        summed: dict[str, float] = {}  # several files may have one label (a container's 0.log and 1.log)
        for stream, v in values.copy().items():  # one C call (no item tuples, so no GC and no thread
            # switch inside it): the poll loop may add a stream meanwhile
            key = label(stream)
            summed[key] = summed.get(key, 0.0) + v
        out += [(name, (key,), v) for key, v in summed.items()]
    return out


def read_before(path: str, offset: int, size: int = LEARN_BYTES) -> list[bytes]:
    """Whole lines logged before ``offset``: the file's first ``size`` bytes and the last ``size``
    bytes before ``offset`` (where its last start-up block most likely is), or all of it if short."""
    try:
        with open(path, "rb") as f:
            if offset <= 2 * size:
                data = f.read(offset)
                return [data[: data.rfind(b"\n") + 1]]
            head = f.read(size)
            f.seek(offset - size)
            tail = f.read(size)
    except OSError as exc:  # it was readable a moment ago; without it the stream only learns later
        log.debug("cannot read what came before the end of %s: %s", path, exc)
        return []
    return [head[: head.rfind(b"\n") + 1], tail[tail.find(b"\n") + 1 : tail.rfind(b"\n") + 1]]


class Runner:
    """The poll loop over every source; chunks go to the engine on this one thread."""

    def __init__(self, opts: Options, entries: dict[str, ParserEntry],
                 reloader: Callable[[], Options] | None = None) -> None:
        self.opts = opts
        self.entries = entries
        self.inputs = normalised_inputs(opts.paths)
        self.keeper = (StateKeeper(opts.state_file, self.inputs, adopt=opts.state_adopt)
                       if opts.state_file is not None else None)  # takes the lock before anything else
        self.store = Store()
        self.store.limits.update(opts.label_limits)
        self.store.journaled = opts.state_file is not None
        self.reloader = reloader  # reads the --config file again and merges the flags: the new Options
        self.reload_wanted = False  # set by SIGHUP; the poll loop reloads
        self.resumed = False  # read positions were restored from a state file: caught up before serving
        self.reloads = {"success": 0, "failure": 0}  # logmetrics_config_reloads_total
        self.reloaded_at = time.time()  # the last successful read of the --config file
        self.stats = SourceStats()
        self.engine = Engine(entries, self.store, parser=opts.parser, source=opts.source, envelope=opts.envelope,
                             max_line_bytes=opts.max_line_bytes, lines_truncated=self.stats.lines_truncated,
                             labels=opts.labels, hold=max(HOLD_SECONDS, opts.poll_interval))
        self.engine.set_inputs(opts.inputs)
        files = [p for p in opts.paths if p != "-"]
        try:
            self.tailer = FileTailer(files, from_beginning=opts.from_beginning, stats=self.stats,
                                     max_line_bytes=opts.max_line_bytes, wait_for_missing=opts.listen is not None,
                                     strict=opts.listen is None, rescan_interval=opts.rescan_interval,
                                     wanted=wanted(opts), only=opts.only) if files else None
        except SourceError as exc:
            raise UserError(str(exc).removeprefix("logmetrics: ")) from exc
        self.stdin = (StdinSource(self.stats, max_line_bytes=opts.max_line_bytes, strict=opts.listen is None)
                      if "-" in opts.paths else None)
        self.procs = ProcessWatcher({n: e.cls.process_names for n, e in entries.items()}, rules=opts.processes)
        self.view = StoreView(self.store, self._extra)
        self._registry: CollectorRegistry | None = None
        self.web: LiveWebConfig | None = None  # set by run() when serving with --web-config
        self.waker = Waker()
        # chunks read and not parsed yet, while following; a scrape reads before it parses them
        self.backlog = Backlog(self.engine.feed, self.waker.wake, read=self._read_for_scrape,
                               settle=self.engine.applier.settle)
        self.deferring = False
        self.stop = threading.Event()
        self._polled_at = time.time()
        self._polled_mono = time.monotonic()  # when the last poll began
        self._cut_warned: set[str] = set()  # sources whose cut lines were reported
        if self.keeper is not None:
            self.resumed = self.keeper.load(self.store, self.engine, self.tailer)

    @property
    def registry(self) -> CollectorRegistry:
        """The registry the HTTP endpoint serves, made when first asked for: ``--oneshot`` prints
        ``view``'s text and never loads ``prometheus_client``."""
        if self._registry is None:
            from logmetrics.store.exposition import StoreRegistry  # prometheus_client: only to serve

            self._registry = StoreRegistry(self.view)
        return self._registry

    # -- the state file -------------------------------------------------------------------------
    @property
    def journal(self) -> Journal | None:
        """The state file's database, if any."""
        return self.keeper.journal if self.keeper is not None else None

    def save_state(self) -> None:
        """Commit what changed since the last commit to the ``--state-file``, if any (``StateKeeper.save``)."""
        if self.keeper is not None:
            self.keeper.save(self._polled_at, self.store, self.engine, self.tailer)

    def save_failure(self) -> str | None:
        """Why the last save failed, or None if it did not."""
        return self.keeper.failure() if self.keeper is not None else None

    def reload(self) -> None:
        """SIGHUP: read the ``--config`` file again and apply what changed (``logmetrics.app.reload``);
        on any problem keep everything as it is."""
        old = self.opts
        if self.reloader is None or old.config is None:
            reloading.log.warning("SIGHUP: no --config file to read again; nothing changes")
            return
        try:
            new = reloading.keep_fixed(old, self.reloader())
            self.tailer, dropped = reloading.apply_paths(self.tailer, old, new, self.stats, self.waker)
        except (UserError, SourceError) as exc:
            self.reloads["failure"] += 1
            reloading.log.error("%s; refused, the running configuration stays", str(exc).removeprefix("logmetrics: "))
            return
        for stream in dropped:
            self.engine.vanished(stream)  # what it held back counts now; its counters stay
        self.engine.set_inputs(new.inputs)
        if self.tailer is not None:
            self.tailer.rescan_interval = new.rescan_interval
        self.store.limits = {**LABEL_LIMITS, **dict(new.label_limits)}
        if new.processes != old.processes:
            self.procs = ProcessWatcher({n: e.cls.process_names for n, e in self.entries.items()},
                                        rules=new.processes)
        self.inputs = normalised_inputs(new.paths)  # recorded in the state file at the next commit
        if self.keeper is not None:
            self.keeper.inputs = self.inputs
        self.opts = new
        self.reloads["success"] += 1
        self.reloaded_at = time.time()
        reloading.announce(old, new, dropped)

    def _extra(self) -> list[Sample]:
        cpu, mem = self.procs.samples() if self.opts.listen is not None else ([], [])
        own = self.keeper.samples() if self.keeper is not None else []
        if self.opts.config is not None:
            own += [("logmetrics_config_reloads_total", (result,), float(n)) for result, n in self.reloads.items()]
            own.append(("logmetrics_config_last_reload_success_timestamp_seconds", (), self.reloaded_at))
        if self.web is not None:
            own += [("logmetrics_web_config_reloads_total", ("success",), float(self.web.reloads)),
                    ("logmetrics_web_config_reloads_total", ("failure",), float(self.web.failures))]
        return source_samples(self.stats, self.engine.source_label) + cpu + mem + own

    def poll(self, flush: bool = True) -> int:
        """One pass over every source; returns how many chunks it read. While following, they are
        kept in the backlog (parsed in batches, ``logmetrics.app.backlog``), else fed at once;
        the backlog is parsed when due, unless not ``flush`` (a scrape's pass: the scrape decides)."""
        chunks: list[Chunk] = []
        gone: list[str] = []
        started: list[tuple[str, int]] = []
        self._polled_at = time.time()
        self._polled_mono = time.monotonic()
        if self.tailer is not None:
            chunks += self.tailer.poll()
            gone = self.tailer.vanished()
            started = self.tailer.started_at_end()
        if self.stdin is not None:
            chunks += self.stdin.poll()
        with self.backlog.lock:  # (a scrape's thread may feed the backlog meanwhile)
            size = max(LEARN_MIN_BYTES, min(LEARN_BYTES, LEARN_TOTAL_BYTES // (2 * len(started) or 1)))
            for path, offset in started:  # thousands of big files must not mean gigabytes read at start
                self.engine.learn(path, read_before(path, offset, size))
            if self.deferring:
                self.backlog.put(chunks)
                due = self.backlog.due()
                if due is not None and (gone or (flush and (not chunks or time.monotonic() >= due))):
                    self.backlog.flush()  # (a file gone: what it held back counts, after what it said)
            else:
                for chunk in chunks:
                    self.engine.feed(chunk)
            for path in gone:
                self.engine.vanished(path)
            if self.engine.orphans and self.opts.expire_after is not None:
                self._expire(self.opts.expire_after)
            # A scrape reads the files itself, unless they are read behind their writers (a
            # backlog: the poll loop reads on and the scrape shows what is parsed, without waiting
            # for a pass of a megabyte a file; and before the first pass, which tells) or there is
            # a state file (its passes are parsed and committed by the poll loop).
            self.backlog.reading = self.deferring and not any(self.stats.lag_bytes.values())
        if len(self.stats.lines_truncated) > len(self._cut_warned):
            self._warn_cut()
        return len(chunks)

    def _read_for_scrape(self) -> bool:
        """A scrape's pass (on its thread, the backlog's lock held), where ``poll`` left the backlog
        ``reading``: what was written before the scrape is in it, read and parsed, not only what
        the last pass read. Not once stopping. Whether it read."""
        if self.stop.is_set():
            return False
        self.poll(flush=False)
        return True

    def _expire(self, after: float) -> None:
        """Forget the series of the sources whose files went away ``after`` seconds ago or more:
        Prometheus keeps what it scraped, and the places they held in the label guard are free."""
        expired = self.engine.expired(after)
        if not expired:
            return
        sources = [source for source, _ in expired]
        n = self.store.expire(sources)
        for _, paths in expired:
            if self.tailer is not None:
                self.tailer.forget(paths)
            self._cut_warned.difference_update(paths)
        log.info("expired %d series of %d sources gone for %g s or more", n, len(sources), after)

    def _warn_cut(self) -> None:
        """Say once per source that a line was cut at the cap: what it held past it is lost."""
        for path, n in self.stats.lines_truncated.items():
            if n and path not in self._cut_warned:
                self._cut_warned.add(path)
                log.warning("%s: a line longer than --max-line-bytes (%d) was cut; what it held past the cap "
                            "is not counted (a vLLM prompt's token ids, say): raise --max-line-bytes if such lines "
                            "are expected (counted in logmetrics_lines_truncated_total)",
                            self.engine.source_label(path), self.opts.max_line_bytes)

    def catch_up(self) -> None:
        """After a restart from a state file, before ``/metrics`` is served: read what was written
        since the last commit, to the end of every file, and let the records held back complete, so
        that no counter is served lower than before the restart (Prometheus would take that for a
        reset and count it all again). Bounded by ``CATCH_UP_SECONDS``: a longer backlog is read on
        while serving."""
        if not self.resumed:
            return
        deadline = time.monotonic() + CATCH_UP_SECONDS
        while True:
            if self.stop.is_set() or time.monotonic() > deadline:
                log.info("still reading what was written while logmetrics was down; serving meanwhile")
                return
            fed = self.poll()
            if fed:  # committed as in the poll loop: a crash loop must not keep the state where it was
                self.save_state()
            if not sum(self.stats.lag_bytes.values()):  # read to where the files stood: caught up, even
                break  # if their writers go on
            if not fed:
                self.waker.wait(self.opts.poll_interval)  # files waiting for a descriptor, say
        # The last record of each file is held back until its file is quiet (more lines of it may
        # come). Files written to all along are never quiet: their records are complete by then.
        quiet = time.monotonic() + self.engine.hold
        while self.engine.holding() and time.monotonic() < quiet and not self.stop.is_set():
            self.waker.wait(self.opts.poll_interval)
            self.poll()
            self.engine.idle()
        self.engine.idle(force=True)
        self.save_state()

    def drain(self, progress: Progress | None = None) -> None:
        """Read to the end of every input (``--oneshot``), reporting progress if asked."""
        read = self.stats.bytes_read
        while True:
            before = sum(read.values())
            # a poll may read part of a line longer than a poll's budget and give no chunk: go on
            if self.poll() or sum(read.values()) != before:
                if progress is not None:
                    progress.update(self.stats)
                continue
            if self.stdin is None or self.stdin.eof:
                break
            self.waker.wait(0.05)
        if progress is not None:
            progress.done(self.stats)
        for src in (self.tailer, self.stdin):
            if src is not None:
                for chunk in src.flush():
                    self.engine.feed(chunk)
        self.engine.finish()
        self._warn_cut()

    def follow(self) -> None:
        """Poll until asked to stop, what is read kept in the backlog for a batch (or a scrape)
        unless there is a state file; quiet periods complete held-back records."""
        stdin_done = False
        # With a state file every pass is parsed and committed at once, as before: a commit holds
        # what the tailer decided (a rotated file's copy, say) with the lines parsed up to it.
        self.deferring = self.keeper is None
        while not self.stop.is_set():
            with self.backlog.lock:
                if self.reload_wanted:
                    self.reload_wanted = False
                    self.backlog.flush()  # the streams it drops count what they read first
                    self.reload()
                fed = self.poll()
                if fed:
                    self.save_state()
                    if self.waker.wait(0.0, events=False):  # a file left with more to read (or stdin, a
                        continue  # signal): read on at once
                if self.stdin is not None and self.stdin.eof and not stdin_done:
                    stdin_done = True
                    self.backlog.flush()
                    for chunk in self.stdin.flush():
                        self.engine.feed(chunk)
                    self.engine.finish(self.stdin.stream)  # the files go on
                self.engine.hold = self.hold()
                if not self.backlog:  # (a stream's next chunk, kept, may continue the record it holds)
                    self.engine.idle()
                self.save_state()
                timeout = self.opts.poll_interval
                # the backlog is parsed when due, then a held-back record counts when due, not at
                # the next poll interval
                due = self.backlog.due() if self.backlog else self.engine.due()
                if due is not None:
                    timeout = min(timeout, max(0.0, due - time.monotonic()))
            if self.waker.wait(timeout) and not self._urgent() and not self.backlog.scraped():
                # Woken by a write: let the writes of the next moments gather (the kernel merges
                # their events), so that a busy file costs one pass per COALESCE_SECONDS, not one
                # per write; and longer when many files are written to at once (up to the poll
                # interval), as each chunk fed costs about as much as 30 lines in it. While the
                # passes are kept for a batch, a pass per poll interval as long as they read (a
                # scrape reads the files itself before it parses: what a pass reads only waits for
                # its batch), but COALESCE_SECONDS after one that read nothing (a burst after a
                # pause). A file created, renamed or deleted is looked at at once (what a crash
                # then loses is less), and so are the files after a scrape parsed a backlog it did
                # not read (the files may be behind; the records they hold back may be complete:
                # only a read tells).
                gap = COALESCE_SECONDS * max(1.0, fed / COALESCE_CHUNKS)
                if self.deferring and fed:
                    gap = self.opts.poll_interval
                rest = self._polled_mono + min(gap, self.opts.poll_interval) - time.monotonic()
                if rest > 0:
                    self.waker.wait(rest, events=False)
        with self.backlog.lock:
            self.backlog.flush()
            self.deferring = False
            self.poll()  # what was written up to the stop, a file deleted since the last poll included:
            self.save_state()  # after a restart nothing would lead to it

    def _urgent(self) -> bool:
        """Whether the file system named a file created, renamed or deleted (the inotify events are
        read under the lock: a scrape's pass may read them too)."""
        with self.backlog.lock:
            return self.tailer is not None and self.tailer.urgent()

    def hold(self) -> float:
        """How long a stream's last record is held back: until a read would have come, that is at
        once with inotify naming every change, else a poll interval."""
        if self.tailer is None or self.tailer.event_driven():
            return HOLD_SECONDS
        return max(HOLD_SECONDS, self.opts.poll_interval)

    def close(self) -> None:
        """Release files and threads."""
        for src in (self.tailer, self.stdin):
            if src is not None:
                src.close()
        self.waker.close()
        if self.keeper is not None:
            self.keeper.close()
