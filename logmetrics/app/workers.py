"""Worker processes for whole-file work (``--oneshot``, ``report``): a share of the files read in a
forked child, its result pickled back down a pipe; the shares balanced by size; progress posted
in shared memory; and the check that a merged result is the one a single process gives.
"""

from __future__ import annotations

import contextlib
import logging
import os
import signal
import struct
import sys
import time
from collections.abc import Callable, Iterable, Mapping
from functools import partial
from typing import TypeVar

from logmetrics.app.progress import Progress
from logmetrics.engine.settings import Settings
from logmetrics.envelopes.kinds import NAMING
from logmetrics.envelopes.unwrap import head_kind
from logmetrics.sources.chunks import SourceStats
from logmetrics.store.catalog import BY_NAME, Family
from logmetrics.store.guard import DEFAULT_LIMIT, NOISE_SHARE, label_at

#: Below this many bytes in all, one process: a worker costs a fork and a merge (a few ms).
MIN_BYTES = 8 << 20
#: With more files than processes, shares per process at most (``jobs``).
JOBS_PER_PROCESS = 4
FAILED = "a worker process failed"  # why a run is read again in one process (a warning: it costs time)
T = TypeVar("T")
Seen = Mapping[tuple[str, int, str], set[str]]  # a cardinality guard's admitted values


#: Why files whose lines name their sources stay in one process (``naming_files``).
NAMING_WHY = ("files whose lines name their sources (compose services, journald units, kubectl pods, pm2 "
              "apps): two may name one")
#: What ``naming_files`` reads of each file to tell its envelope.
HEAD_BYTES = 16 << 10


def naming_files(sizes: Mapping[str, int], settings: Settings) -> int:
    """How many of the files ``sizes`` name their sources in their lines (``envelopes.kinds.NAMING``,
    forced or told by their first lines), up to 2: two may name the same source, which two
    processes would both make (the run would be read again in one). Each file's head is read only
    where its envelope is ``auto``."""
    found = 0
    for path in sizes:
        kind: str | None = settings.envelope_of(path)
        if kind == "auto":
            try:
                with open(path, "rb") as f:
                    kind = head_kind(f.read(HEAD_BYTES))
            except OSError:
                continue  # (the run says it)
        if kind in NAMING:
            found += 1
            if found > 1:
                break
    return found


def cores() -> int:
    """The cores this process may run on."""
    try:
        return len(os.sched_getaffinity(0))
    except (AttributeError, OSError):  # not Linux
        return os.cpu_count() or 1


def balance(sizes: Mapping[str, int], n: int) -> list[tuple[str, ...]]:
    """The files of ``sizes`` (bytes) in at most ``n`` shares of about equal bytes, the largest share
    first, each share's files in sorted order."""
    shares: list[list[str]] = [[] for _ in range(min(n, len(sizes)))]
    load = [0] * len(shares)
    for path in sorted(sizes, key=lambda p: -sizes[p]):  # the largest first, each to the least loaded
        i = load.index(min(load))
        shares[i].append(path)
        load[i] += sizes[path]
    order = sorted(range(len(shares)), key=lambda i: -load[i])
    return [tuple(sorted(shares[i])) for i in order if shares[i]]


class Said(logging.Handler):
    """What a process' loggers say, kept, formatted as the root logger's first handler does."""

    def __init__(self) -> None:
        super().__init__()
        handlers = logging.getLogger().handlers
        self.setFormatter(handlers[0].formatter if handlers else None)
        self.lines: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.lines.append(self.format(record))


def say_once(lines: Iterable[str], mine: Iterable[str]) -> None:
    """Print the workers' log ``lines`` on stderr, each once, but for those this process said."""
    said = set(mine)
    for line in dict.fromkeys(line for line in lines if line not in said):
        print(line, file=sys.stderr)


class Board(Progress):
    """Where workers post the bytes they read and have left (shared memory), for the first
    process' progress line; each worker's ``update`` writes its slot."""

    def __init__(self, slots: int) -> None:
        import mmap

        super().__init__(sys.stderr, after=0.0, every=0.2)
        self.memory = mmap.mmap(-1, 16 * max(slots, 1))
        self.slot = -1  # a worker's own (set in the child)

    def update(self, stats: SourceStats) -> None:
        now = time.monotonic()
        if now >= self.next:
            self.next = now + self.every
            self.done(stats)

    def done(self, stats: SourceStats) -> None:
        struct.pack_into("<QQ", self.memory, 16 * self.slot, sum(stats.bytes_read.values()),
                         sum(stats.lag_bytes.values()))

    def totals(self) -> tuple[int, int]:
        """The workers' bytes read and left, summed."""
        pairs = [struct.unpack_from("<QQ", self.memory, at) for at in range(0, len(self.memory), 16)]
        return sum(p[0] for p in pairs), sum(p[1] for p in pairs)


class Child:
    """A worker process: its pid, and the pipe its pickled result comes on (-1 once read)."""

    __slots__ = ("fd", "pid")

    def __init__(self, pid: int, fd: int) -> None:
        self.pid, self.fd = pid, fd


def fork(work: Callable[[], object], board: Board | None = None, slot: int = 0) -> Child:
    """Run ``work`` in a child process, its result pickled down a pipe. The child posts its
    progress in ``slot`` of ``board``, if given."""
    read, write = os.pipe()
    import gc

    gc.freeze()  # (what the parent made stays in place: a collection in the child copies no page of it)
    parent = os.getpid()
    pid = os.fork()
    if pid == 0:  # the child: its result down the pipe, then out without the parent's cleanup
        os.close(read)
        end_with_parent(parent)
        code = 0
        if board is not None:
            board.slot = slot
        try:
            import pickle  # only where workers run

            data = pickle.dumps(work(), protocol=pickle.HIGHEST_PROTOCOL)
        except BaseException:  # whatever went wrong, the parent does it all itself
            data, code = b"", 1
        try:
            with os.fdopen(write, "wb") as pipe:
                pipe.write(struct.pack("<Q", len(data)) + data)
        finally:
            os._exit(code)
    os.close(write)
    return Child(pid, read)


def end_with_parent(parent: int) -> None:
    """Have this child killed when its parent ends, even by ``kill -9`` (Linux; elsewhere it reads
    its share to the end, and its result finds no reader)."""
    try:
        import ctypes

        ctypes.CDLL(None, use_errno=True).prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG
    except (OSError, AttributeError):  # no prctl: not Linux
        return
    if os.getppid() != parent:  # the parent ended before the call
        os._exit(1)


class Gathering:
    """The results of children, read from their pipes as they come: each child's once it has
    ended (None: it failed), in the order they were added."""

    def __init__(self) -> None:
        self.children: list[Child] = []
        self.got: list[list[bytes]] = []
        self.results: list[object | None] = []

    def add(self, child: Child) -> None:
        """Read ``child``'s result too."""
        self.children.append(child)
        self.got.append([])
        self.results.append(None)

    def running(self) -> int:
        """How many children have not ended."""
        return sum(1 for c in self.children if c.fd >= 0)

    def wait(self, timeout: float | None) -> None:
        """Read what the children sent within ``timeout`` seconds (None: until one sends); a
        child that ended has its result."""
        import select

        waiting = [c.fd for c in self.children if c.fd >= 0]
        ready = set(select.select(waiting, [], [], timeout)[0]) if waiting else set()
        for i, child in enumerate(self.children):
            if child.fd in ready:
                data = os.read(child.fd, 1 << 20)
                if data:
                    self.got[i].append(data)
                else:
                    os.close(child.fd)
                    child.fd = -1
                    self.results[i] = _result(child, self.got[i])

    def finish(self, tick: Callable[[], None] | None = None) -> list[object | None]:
        """Every child's result, once each has ended; ``tick`` is called about every 0.2 s meanwhile."""
        while self.running():
            self.wait(0.2 if tick is not None else None)
            if tick is not None:
                tick()
        return self.results


def _result(child: Child, parts: list[bytes]) -> object | None:
    """What an ended child sent (None: it failed)."""
    import pickle

    _, status = os.waitpid(child.pid, 0)
    child.pid = -1
    data = b"".join(parts)
    parts.clear()
    size = struct.unpack("<Q", data[:8])[0] if status == 0 and len(data) >= 8 else 0
    return pickle.loads(data[8:8 + size]) if size else None


def gather(children: list[Child], tick: Callable[[], None] | None = None) -> list[object | None]:
    """The children's results, in order (None: one failed), once each has ended; ``tick`` is
    called about every 0.2 s while they run (the progress line goes on)."""
    gathering = Gathering()
    for child in children:
        gathering.add(child)
    return gathering.finish(tick)


def jobs(sizes: Mapping[str, int], n: int) -> list[tuple[str, ...]]:
    """The shares of ``n`` processes: ``n`` of about equal bytes (``balance``) where there are no
    more files; else up to ``JOBS_PER_PROCESS`` times as many, for ``spread`` to hand out to the
    first process free."""
    return balance(sizes, n if len(sizes) <= n else min(len(sizes), JOBS_PER_PROCESS * n))


def spread(shares: list[tuple[str, ...]], work: Callable[[tuple[str, ...], Board | None], object],
           mine: Callable[[tuple[str, ...]], tuple[T, SourceStats]],
           progress: Progress | None, processes: int = 0) -> tuple[T, list[object | None], list[str]]:
    """Each share but one read by ``work`` in a worker process, that one by ``mine`` here (what it
    made, and its sources' figures for the progress line, which goes on while the workers
    finish): what ``mine`` made, the workers' results in the order of their shares (None: one
    failed), and what this process' loggers said meanwhile (printed as ever, kept so that a
    worker's same line is not said twice). Interrupted, the workers end with this process.

    With no more shares than ``processes`` (0: as many), this process reads the first, a worker
    each of the others. With more (``jobs``), at most ``processes`` workers read at once, the
    shares in order (the largest first), each to the first process free: the parsers' cost per
    byte differs threefold, so shares of equal bytes are not of equal time. This process reads
    the last (the smallest) once a worker has ended and no other share is left."""
    board = Board(len(shares) - 1) if progress is not None else None
    said = Said()
    logging.getLogger().addHandler(said)
    gathering = Gathering()
    try:
        if progress is not None and board is not None:
            progress.others = board.totals
        if not processes or len(shares) <= processes:
            for i, share in enumerate(shares[1:]):
                gathering.add(fork(partial(work, share, board), board, i))
            made, stats = mine(shares[0])
        else:
            made, stats = _dispatch(shares, work, mine, progress, processes, board, gathering)
        results = gathering.finish(None if progress is None else lambda: progress.update(stats))
        if progress is not None:
            progress.end(stats)  # (every process has read all it had)
    except BaseException:
        stop(gathering.children)
        raise
    finally:
        logging.getLogger().removeHandler(said)
    return made, results, said.lines


def _dispatch(shares: list[tuple[str, ...]], work: Callable[[tuple[str, ...], Board | None], object],
              mine: Callable[[tuple[str, ...]], tuple[T, SourceStats]], progress: Progress | None,
              processes: int, board: Board | None, gathering: Gathering) -> tuple[T, SourceStats]:
    """``spread`` with more shares than processes: every share but the last to a worker, at most
    ``processes`` at once, in order; then the last read here, once a worker has ended."""
    idle = SourceStats(lag_bytes={path: _size(path) for path in shares[-1]})  # (this process' share, not read yet)
    if board is not None:  # what every share has to read, on the progress line from the start
        for slot, share in enumerate(shares[:-1]):
            board.slot = slot
            board.done(SourceStats(lag_bytes={path: _size(path) for path in share}))
        board.slot = -1
    for i in range(len(shares)):
        while gathering.running() >= processes:
            gathering.wait(0.2 if progress is not None else None)
            if progress is not None:
                progress.update(idle)
        if i < len(shares) - 1:
            gathering.add(fork(partial(work, shares[i], board), board, i))
    return mine(shares[-1])


def _size(path: str) -> int:
    """The size of the file at ``path`` (0 if it cannot be told)."""
    try:
        return os.stat(path).st_size
    except OSError:
        return 0


def again(log: logging.Logger, why: str) -> None:
    """Say that the files are read again in one process, and why: a warning if a worker failed
    (it costs the time of the whole reading again), else a note."""
    (log.warning if why == FAILED else log.info)("reading them again in one process: %s", why)


def stop(children: list[Child]) -> None:
    """End the children that still run (the first process was interrupted, or failed)."""
    for child in children:
        if child.fd >= 0:
            os.close(child.fd)
            child.fd = -1
        if child.pid > 0:
            with contextlib.suppress(OSError):
                os.kill(child.pid, signal.SIGKILL)
                os.waitpid(child.pid, 0)
            child.pid = -1


def folds(counters: Iterable[Mapping[tuple[str, tuple[str, ...]], float]], seen: Iterable[Seen],
          families: Mapping[str, Family], limits: Mapping[str, int]) -> str | None:
    """Why shares read apart could differ from one process (whose cardinality guard would fold
    label values in the order it met them): a value folded in a share, or more values of a label
    in all shares together than the guard keeps; None if neither."""
    for table in counters:
        if any(key[0] == "logmetrics_label_overflow_total" for key in table):
            return "a label value was folded into __other__"
    union: dict[tuple[str, int, str], set[str]] = {}
    for share in seen:
        for place, values in share.items():
            union.setdefault(place, set()).update(values)
    for (name, i, _backend), values in union.items():
        fam = families.get(name) or BY_NAME.get(name)
        if fam is None:
            continue
        label = label_at(fam, i)
        limit = limits.get(label, DEFAULT_LIMIT)
        if len(values) > (int(limit * NOISE_SHARE) if label == "route" else limit):
            return f"more {label} values than the cardinality guard keeps"  # folded in one process's order
    return None
