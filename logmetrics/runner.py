"""``logmetrics watch``: wires sources, engine, store and exposition, and runs the poll loop."""

from __future__ import annotations

import logging
import os
import signal
import sqlite3
import sys
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from types import FrameType
from typing import TYPE_CHECKING, TextIO

from logmetrics import journal, state
from logmetrics.config import Input
from logmetrics.descriptors import raise_open_file_limit
from logmetrics.engine import HOLD_SECONDS, Engine
from logmetrics.errors import StateNotSaved, UserError
from logmetrics.exposition import host_port, make_registry, text
from logmetrics.filefilter import FileFilter, file_filter
from logmetrics.plugins import ParserEntry
from logmetrics.procs import ProcessRule, ProcessWatcher
from logmetrics.reload import reload
from logmetrics.sources import RESCAN_INTERVAL, Chunk, FileTailer, SourceError, SourceStats, Waker
from logmetrics.statecheck import normalised_inputs
from logmetrics.stdin import StdinSource
from logmetrics.store import Store

if TYPE_CHECKING:
    from logmetrics.webconfig import LiveWebConfig

Sample = tuple[str, tuple[str, ...], float]
LEARN_BYTES = 1 << 20  # a file read from its end: its head and the text before its end, this much of each
LEARN_MIN_BYTES = 64 << 10  # ... at least, when many files start at once and share LEARN_TOTAL_BYTES
LEARN_TOTAL_BYTES = 128 << 20  # read at most about this much in all for the files of one poll
DEFAULT_EXPIRE_AFTER = 3600.0  # --expire-after's default: an hour after a source's last file went away
WARN_AGAIN_SECONDS = 60.0  # a new run of failed saves this soon after the last one warned is not warned again
COALESCE_SECONDS = 0.1  # after a wake-up, a pass waits until this long after the last one began
COALESCE_CHUNKS = 4  # ... times the chunks the last one fed over this many (a pass over many busy files)
CATCH_UP_SECONDS = 10.0  # after a restart, read at most this long before serving (what was written while down)

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class Options:
    """What ``watch`` was asked to do."""

    paths: Sequence[str]
    listen: tuple[str, int] | None  # None: --oneshot
    parser: str | None
    source: str | None
    envelope: str
    from_beginning: bool
    poll_interval: float
    max_line_bytes: int
    #: --rescan-interval: seconds between passes that look at every file when inotify names the changed ones
    rescan_interval: float = RESCAN_INTERVAL
    state_file: str | None = None
    state_adopt: bool = False  # --state-adopt: go on with a state file saved for other PATH arguments
    labels: tuple[tuple[str | None, str, str], ...] = ()  # --label: (GLOB or None, name, value)
    processes: tuple[ProcessRule, ...] = ()  # --process BACKEND=PATTERN, in the order given
    config: str | None = None  # --config FILE, read again on SIGHUP
    inputs: tuple[Input, ...] = ()  # the file's inputs (their paths are in ``paths`` too)
    web_config: str | None = None  # TLS and basic authentication of the HTTP endpoint (--web-config)
    label_limits: tuple[tuple[str, int], ...] = ()  # label_limits in the file: the store's overrides
    #: --expire-after: seconds after its last file went away that a source's series are forgotten
    #: (None: never)
    expire_after: float | None = DEFAULT_EXPIRE_AFTER
    include: tuple[str, ...] = ()  # --include: globs of the files the PATH arguments take (all, if none)
    exclude: tuple[str, ...] = ()  # --exclude: globs of the files they leave out

    def file_filter(self) -> FileFilter:
        """The include and exclude globs of the configured inputs and of the PATH arguments."""
        configured = {i.path for i in self.inputs}
        return file_filter([(i.path, i.include, i.exclude) for i in self.inputs],
                           [p for p in self.paths if p not in configured], self.include, self.exclude)


def _wanted(opts: Options) -> Callable[[str], bool] | None:
    """The tailer's filter of the files found under directories and globs, if any glob is set."""
    found = opts.file_filter()
    return found.wanted if found else None


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


class Progress:
    """A one-line progress report on a terminal for a long ``--oneshot`` run."""

    def __init__(self, stream: TextIO, *, after: float = 2.0, every: float = 1.0) -> None:
        self.stream = stream
        self.start = time.monotonic()
        self.next = self.start + after
        self.every = every
        self.shown = False

    def _line(self, stats: SourceStats) -> str:
        done = sum(stats.bytes_read.values())
        left = sum(stats.lag_bytes.values())
        secs = max(time.monotonic() - self.start, 1e-9)
        share = f" of {(done + left) / 1e6:,.1f} MB ({100 * done / (done + left):.0f} %)" if left else ""
        return f"logmetrics: read {done / 1e6:,.1f} MB{share} in {secs:.1f} s, {done / secs / 1e6:,.1f} MB/s"

    def update(self, stats: SourceStats) -> None:
        """Show the figures, at most every ``every`` seconds once ``after`` seconds have passed."""
        now = time.monotonic()
        if now >= self.next:
            self.next = now + self.every
            self.stream.write("\r" + self._line(stats) + "\x1b[K")
            self.stream.flush()
            self.shown = True

    def done(self, stats: SourceStats) -> None:
        """The last figures and a newline, if anything was shown."""
        if self.shown:
            self.stream.write("\r" + self._line(stats) + "\x1b[K\n")
            self.stream.flush()


class Runner:
    """The poll loop over every source; chunks go to the engine on this one thread."""

    def __init__(self, opts: Options, entries: dict[str, ParserEntry],
                 reloader: Callable[[], Options] | None = None) -> None:
        self.opts = opts
        self.entries = entries
        self.inputs = normalised_inputs(opts.paths)
        self._lock = self._lock_state(opts.state_file) if opts.state_file is not None else None
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
                                     wanted=_wanted(opts)) if files else None
        except SourceError as exc:
            raise UserError(str(exc).removeprefix("logmetrics: ")) from exc
        self.stdin = StdinSource(self.stats, max_line_bytes=opts.max_line_bytes) if "-" in opts.paths else None
        self.procs = ProcessWatcher({n: e.cls.process_names for n, e in entries.items()}, rules=opts.processes)
        self.registry = make_registry(self.store, self._extra)
        self.web: LiveWebConfig | None = None  # set by run() when serving with --web-config
        self.waker = Waker()
        self.stop = threading.Event()
        self._polled_at = time.time()
        self._polled_mono = time.monotonic()  # when the last poll began
        self.journal = journal.Journal(opts.state_file) if opts.state_file is not None else None
        self._save_error: str | None = None  # why the last save failed, None if it did not
        self._save_failures = 0  # logmetrics_state_save_failures_total
        self._commits = 0  # logmetrics_state_commits_total
        self._failed_in_a_row = 0
        self._warned_at = -WARN_AGAIN_SECONDS  # when a failed save was last warned (monotonic)
        self._episode_warned = False  # the failures since the last good save were warned
        self._cut_warned: set[str] = set()  # sources whose cut lines were reported
        if opts.state_file is not None:
            self._load_state(opts.state_file)

    # -- the state file -------------------------------------------------------------------------
    @staticmethod
    def _lock_state(path: str) -> state.StateLock:
        try:
            return state.StateLock(path)
        except state.StateError as exc:
            raise UserError(f"--state-file {path}: {exc}; two processes cannot share one state file") from exc
        except OSError as exc:
            raise UserError(f"--state-file {path}: cannot create its lock file: {exc.strerror or exc}") from exc

    def _load_state(self, path: str) -> None:
        problem: str | None = None
        try:
            saved = state.load(path, self.inputs)
        except state.StateError as exc:
            if exc.kept is None:  # there, but unreadable: refuse rather than overwrite it at the first save
                raise UserError(f"--state-file {path}: {exc}") from exc
            saved, problem = exc.kept, str(exc)
        if saved is None:
            return
        if saved.inputs is not None and saved.inputs != self.inputs:
            self._foreign(path, saved.inputs)
        elif saved.elsewhere and not self.opts.state_adopt:
            raise UserError(f"--state-file {path} names its files by paths relative to the directory logmetrics was "
                            f"started in then ({saved.elsewhere[0]}, say), and from {os.getcwd()} they lie under "
                            "none of the PATH arguments: start it from that directory (or give absolute PATH "
                            "arguments from the start), or add --state-adopt to go on with it (new lines then count "
                            "under the new source names)")
        if problem is not None:
            if self._lock is not None and self._lock.previous is not None:  # damaged after its last commit,
                saved.saved_at = min(saved.saved_at, self._lock.previous)  # maybe: read from the last start
            aside = state.set_aside(path)
            kept = len(saved.positions)
            when = time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(saved.saved_at))
            log.warning("state file %s cannot be used whole (%s); %s; counters start again from 0, %d read "
                        "position%s kept, and files without one that changed since %s are read from their start",
                        path, problem, f"set aside as {aside}" if aside else "could not be set aside",
                        kept, "" if kept == 1 else "s", when)
        series = self.store.load(saved.store)
        rows = sum(len(v) for v in saved.store.values() if isinstance(v, list))
        if series < rows:
            log.warning("state file %s: %d of its %d series left out (of a metric family no parser serves now, "
                        "or with labels that do not fit it)", path, rows - series, rows)
        self.engine.restore_streams(saved.streams)
        if self.tailer is not None:
            self.tailer.resume(saved.positions, saved.saved_at, saved.inputs)
            self.resumed = True
        log.info("state file %s: %d series and %d read positions restored", path, series, len(saved.positions))

    def _foreign(self, path: str, saved: list[str]) -> None:
        """A state saved for other PATH arguments: refused, unless --state-adopt says to go on with it."""
        added = [p for p in self.inputs if p not in saved]
        gone = [p for p in saved if p not in self.inputs]

        def some(paths: list[str]) -> str:
            return ", ".join(paths[:3]) + (f" and {len(paths) - 3} more" if len(paths) > 3 else "")

        diff = "; ".join(part for part in (f"new: {some(added)}" if added else "",
                                           f"no longer given: {some(gone)}" if gone else "") if part)
        if not self.opts.state_adopt:
            raise UserError(f"--state-file {path} was saved for other PATH arguments ({diff}); to go on with its "
                            f"counters and read positions for these ones add --state-adopt, to start afresh give "
                            f"another --state-file")
        log.warning("state file %s was saved for other PATH arguments (%s); adopted (--state-adopt)", path, diff)

    def save_state(self) -> None:
        """Commit what changed since the last commit (``--state-file``): counters, read positions,
        parser state and the text held back uncounted, as one transaction; everything the first
        time and after a failure. A failure is reported once, counted, and retried at the next poll.

        Every line read so far is counted or held in a stream (and so in the state), so positions
        and counters agree without cutting a record that is still being written.
        """
        if self.journal is None:
            return
        path = self.journal.path
        full = self.journal.needs_full
        changed = self.engine.take_changed()
        rows = self.store.changes(everything=full)
        streams = self.engine.stream_states(None if full else changed)
        delta = journal.Delta(self._polled_at, self.inputs, rows,
                              self.tailer.positions() if self.tailer is not None else [],
                              {str(r["key"]): r for r in streams}, self.engine.stream_keys())
        try:
            if self.journal.commit(delta):
                self._commits += 1
        except (OSError, sqlite3.Error, TypeError, ValueError) as exc:  # TypeError, ValueError: a parser
            self._save_failures += 1  # state that is not JSON
            self._failed_in_a_row += 1
            reason = (exc.strerror if isinstance(exc, OSError) else None) or str(exc)
            now = time.monotonic()
            if self._save_error is None and now - self._warned_at >= WARN_AGAIN_SECONDS:  # saves that fail and
                self._warned_at = now  # work by turns (a disk all but full) warn once a minute, not each time
                self._episode_warned = True
                log.warning("cannot save state file %s: %s; retried at every poll, counted in "
                            "logmetrics_state_save_failures_total", path, reason)
            self._save_error = reason
        else:
            if self._save_error is not None and self._episode_warned:
                log.warning("state file %s saved again, after %d failed attempt%s", path, self._failed_in_a_row,
                            "" if self._failed_in_a_row == 1 else "s")
                self._episode_warned = False
            self._save_error = None
            self._failed_in_a_row = 0

    def save_failure(self) -> str | None:
        """Why the last save failed, or None if it did not."""
        return self._save_error

    def _extra(self) -> list[Sample]:
        cpu, mem = self.procs.samples() if self.opts.listen is not None else ([], [])
        own: list[Sample] = ([("logmetrics_state_commits_total", (), float(self._commits)),
                              ("logmetrics_state_save_failures_total", (), float(self._save_failures))]
                             if self.opts.state_file is not None else [])
        if self.opts.config is not None:
            own += [("logmetrics_config_reloads_total", (result,), float(n)) for result, n in self.reloads.items()]
            own.append(("logmetrics_config_last_reload_success_timestamp_seconds", (), self.reloaded_at))
        if self.web is not None:
            own += [("logmetrics_web_config_reloads_total", ("success",), float(self.web.reloads)),
                    ("logmetrics_web_config_reloads_total", ("failure",), float(self.web.failures))]
        return source_samples(self.stats, self.engine.source_label) + cpu + mem + own

    def poll(self) -> int:
        """One pass over every source; returns how many chunks it fed."""
        chunks: list[Chunk] = []
        gone: list[str] = []
        self._polled_at = time.time()
        self._polled_mono = time.monotonic()
        if self.tailer is not None:
            chunks += self.tailer.poll()
            gone = self.tailer.vanished()
            started = self.tailer.started_at_end()
            size = max(LEARN_MIN_BYTES, min(LEARN_BYTES, LEARN_TOTAL_BYTES // (2 * len(started) or 1)))
            for path, offset in started:  # thousands of big files must not mean gigabytes read at start
                self.engine.learn(path, read_before(path, offset, size))
        if self.stdin is not None:
            chunks += self.stdin.poll()
        for chunk in chunks:
            self.engine.feed(chunk)
        for path in gone:
            self.engine.vanished(path)
        if self.engine.orphans and self.opts.expire_after is not None:
            self._expire(self.opts.expire_after)
        if len(self.stats.lines_truncated) > len(self._cut_warned):
            self._warn_cut()
        return len(chunks)

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
        """Poll until asked to stop; quiet periods complete held-back records."""
        stdin_done = False
        while not self.stop.is_set():
            if self.reload_wanted:
                self.reload_wanted = False
                reload(self)
            fed = self.poll()
            if fed:
                self.save_state()
                if self.waker.wait(0.0, events=False):  # a file left with more to read (or stdin, a
                    continue  # signal): read on at once
            if self.stdin is not None and self.stdin.eof and not stdin_done:
                stdin_done = True
                for chunk in self.stdin.flush():
                    self.engine.feed(chunk)
                self.engine.finish(self.stdin.stream)  # the files go on
            self.engine.hold = self.hold()
            self.engine.idle()
            self.save_state()
            timeout = self.opts.poll_interval
            if (due := self.engine.due()) is not None:  # a held-back record counts when due, not at the
                timeout = min(timeout, max(0.0, due - time.monotonic()))  # next poll interval
            if self.waker.wait(timeout) and not (self.tailer is not None and self.tailer.urgent()):
                # Woken by a write: let the writes of the next moments gather (the kernel merges
                # their events), so that a busy file costs one pass per COALESCE_SECONDS, not one
                # per write; and longer when many files are written to at once (up to the poll
                # interval), as each chunk fed costs about as much as 30 lines in it. A file
                # created, renamed or deleted is looked at at once (what a crash then loses is less).
                gap = COALESCE_SECONDS * max(1.0, fed / COALESCE_CHUNKS)
                rest = self._polled_mono + min(gap, self.opts.poll_interval) - time.monotonic()
                if rest > 0:
                    self.waker.wait(rest, events=False)
        self.poll()  # what was written up to the stop, a file deleted since the last poll included:
        self.save_state()  # after a restart nothing would lead to it

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
        if self.journal is not None:
            self.journal.close()
        if self._lock is not None:
            self._lock.close()


def _say(line: str) -> None:
    """One line on stderr (a web config refused on reload)."""
    print(f"logmetrics: error: {line}", file=sys.stderr, flush=True)


def run(opts: Options, entries: dict[str, ParserEntry], reloader: Callable[[], Options] | None = None) -> None:
    """Run ``watch``: print the exposition for ``--oneshot``, else serve until SIGINT/SIGTERM; SIGHUP
    reads the --config file again (``reloader``)."""
    tune_allocator()
    raise_open_file_limit()
    runner = Runner(opts, entries, reloader)
    try:
        if opts.listen is None:
            runner.drain(Progress(sys.stderr) if sys.stderr.isatty() else None)
            sys.stdout.buffer.write(text(runner.registry))
            sys.stdout.flush()
            failed = runner.tailer.failed_args() if runner.tailer is not None else []
            if failed:  # what could be read is printed; a named input that could not be read fails the run
                raise UserError("; ".join(failed))
            return
        host, port = opts.listen
        from logmetrics.server import MetricsServer  # not needed by --oneshot
        from logmetrics.webconfig import LiveWebConfig

        web = LiveWebConfig(opts.web_config, on_failure=_say) if opts.web_config else None
        runner.web = web
        try:
            server = MetricsServer(host, port, runner.registry, web)
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
        runner.poll()  # the first scan fixes which files existed at start before anyone is told we run
        runner.catch_up()
        runner.save_state()  # the first commit: a crash from now on restarts from these positions
        server.start()
        print(f"logmetrics: serving metrics at {server.url}", file=sys.stderr, flush=True)
        try:
            runner.follow()
        finally:
            server.stop()
        failure = runner.save_failure()
        if failure is not None and opts.state_file is not None:
            raise StateNotSaved(f"the last save of --state-file {opts.state_file} failed ({failure}): what was "
                                f"counted since its last good save is not kept")
    finally:
        runner.close()
