"""The parsers' prescans (``Parser.prescan``) run in a forked child process, on a core the run does
not use otherwise: ``--oneshot`` over one file, or over several that one process reads; and the
large batches of a serving ``watch`` (a backlog, a burst: ``logmetrics.app.watch``).

A text goes to the child through shared memory (two slots: the batch being parsed and the next
one), with a 16-byte request down a pipe; its result comes back pickled up another. A text larger
than a slot is not sent, and a child that failed, ended or did not answer in time
(``ANSWER_SECONDS``, or what the run gives) is stopped and sent nothing more: each such batch is
read by its parser alone, as without a child, and the result is the same. A prescan that raised
is said once per parser, as is a child that failed. The child writes what a prescan prints to
stderr (stdout is the run's output), leaves the signals a process group is sent to its parent,
and ends with its parent (``workers.end_with_parent``), when the request pipe closes, or when the
parent stops it (``close``).
"""

from __future__ import annotations

import collections
import contextlib
import gc
import logging
import mmap
import os
import pickle
import resource
import select
import signal
import struct
import sys
from collections.abc import Callable, Mapping

from logmetrics.app.workers import end_with_parent
from logmetrics.plugins import ParserEntry

log = logging.getLogger("logmetrics.app.prescan")

#: The largest text sent, in bytes (UTF-8); a slot's size. Memory is taken only as it is written.
SLOT_BYTES = 32 << 20
#: A child that has not answered this long after a text was due (seconds) is stopped: a prescan
#: that hangs, or a child stopped (SIGSTOP), must not hang the run.
ANSWER_SECONDS = 10.0
#: Below this open-file limit no child: its two pipes would take descriptors the log files need.
MIN_OPEN_FILES = 64
_REQUEST = struct.Struct("<IIQ")  # parser index, slot, length
_SIZE = struct.Struct("<Q")
_FAILED = (1 << 64) - 1  # a result's size that says its prescan raised: the reason follows


class Prescanner:
    """A child process that runs the prescans of ``entries`` on the texts it is sent, in order
    (the engine's ``logmetrics.engine.ahead.Prescans``)."""

    def __init__(self, entries: Mapping[str, ParserEntry], answer_seconds: float | None = None) -> None:
        #: how long a result may take (``ANSWER_SECONDS`` unless given): then the child is stopped
        self.answer_seconds = ANSWER_SECONDS if answer_seconds is None else answer_seconds
        fns = {name: e.cls.prescan for name, e in entries.items() if e.cls.prescan is not None}
        self._index = {name: i for i, name in enumerate(fns)}
        self._sent = 0
        self._pending: collections.deque[str] = collections.deque()  # the parsers of the texts sent, not taken
        self._said: set[str] = set()
        self._pid = -1
        self._requests = self._results = -1
        soft = resource.getrlimit(resource.RLIMIT_NOFILE)[0]
        if not fns:
            return
        if 0 <= soft < MIN_OPEN_FILES:
            log.info("no process for the parsers' prescans: the open-file limit (%d) is below %d", soft,
                     MIN_OPEN_FILES)
            return
        fds: list[int] = []
        try:
            self._shm = mmap.mmap(-1, 2 * SLOT_BYTES)  # (shared with the child: MAP_SHARED)
            req_r, self._requests = os.pipe()
            fds += [req_r, self._requests]
            self._results, res_w = os.pipe()
            fds += [self._results, res_w]
            gc.freeze()  # (what the parent made stays in place: a collection in the child copies no page of it)
            parent = os.getpid()
            pid = os.fork()
        except OSError as exc:  # no descriptor, memory or process to spare: the parsers do it all
            log.info("no process for the parsers' prescans: %s", exc)
            for fd in fds:
                os.close(fd)
            self._requests = self._results = -1
            return
        if pid == 0:  # the child: never back into the parent's code
            code = 1
            try:
                os.close(self._requests)
                os.close(self._results)
                end_with_parent(parent)
                for signum in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP):
                    # (the parent's to handle, sent to the whole process group by a Ctrl-C or
                    # systemd's stop: the parent stops the child, or the child ends with it)
                    signal.signal(signum, signal.SIG_IGN)
                os.dup2(2, 1)  # what a prescan prints is no metric
                sys.stdout = sys.stderr
                _serve(list(fns.values()), self._shm, req_r, res_w)
                code = 0
            finally:
                os._exit(code)
        self._pid = pid
        os.close(req_r)
        os.close(res_w)

    def running(self) -> bool:
        """Whether the child runs (it was started, and has not failed)."""
        return self._pid > 0

    def send(self, parser: str, text: str) -> bool:
        """Send ``text`` to ``parser``'s prescan; whether it was sent (a result is to be taken)."""
        index = self._index.get(parser)
        if index is None or self._pid < 0:
            return False
        data = text.encode("utf-8", "surrogatepass")
        if len(data) > SLOT_BYTES:
            return False
        slot = self._sent % 2
        self._shm[slot * SLOT_BYTES:slot * SLOT_BYTES + len(data)] = data
        try:
            os.write(self._requests, _REQUEST.pack(index, slot, len(data)))
        except OSError as exc:  # the child ended
            self._lost(f"it ended ({exc.strerror or exc})")
            return False
        self._sent += 1
        self._pending.append(parser)
        return True

    def take(self) -> object:
        """The result of the oldest text sent and not taken yet; None if its prescan failed, or the
        child did (it is sent nothing more)."""
        if self._pid < 0 or not self._pending:
            return None
        parser = self._pending.popleft()
        try:
            head = self._read(_SIZE.size)
            size = _SIZE.unpack(head)[0]
            if size == _FAILED:
                why = self._read(_SIZE.unpack(self._read(_SIZE.size))[0]).decode("utf-8", "replace")
                if parser not in self._said:
                    self._said.add(parser)
                    log.warning("parser %s: its prescan failed (%s); the parser reads each such batch itself",
                                parser, why)
                return None
            return pickle.loads(self._read(size))
        except TimeoutError:
            self._lost(f"it did not answer in {self.answer_seconds:g} s")
        except EOFError:
            self._lost("it ended")
        except (OSError, pickle.UnpicklingError, ValueError) as exc:
            self._lost(f"what it sent could not be read: {exc}")
        return None

    def _read(self, size: int) -> bytes:
        """Exactly ``size`` bytes of the results; TimeoutError if they do not come in time, EOFError
        if the child ended."""
        data = _read_all(self._results, size, self.answer_seconds)
        if data is None:
            raise EOFError
        return data

    def _lost(self, why: str) -> None:
        """The child failed: said once, stopped, and sent nothing more."""
        log.warning("the process of the parsers' prescans is stopped: %s; the parsers read the rest themselves", why)
        self.close()

    def close(self) -> None:
        """Stop the child (whatever it is doing: a prescan may hang), and wait for it."""
        for fd in (self._requests, self._results):
            if fd >= 0:
                os.close(fd)
        self._requests = self._results = -1
        self._pending.clear()
        if self._pid > 0:
            with contextlib.suppress(OSError):
                os.kill(self._pid, signal.SIGKILL)
            with contextlib.suppress(OSError):
                os.waitpid(self._pid, 0)
        self._pid = -1


def _serve(fns: list[Callable[..., object]], shm: mmap.mmap, requests: int, results: int) -> None:
    """The child's loop: a request, its prescan, its result; until the requests end."""
    while (head := _read_all(requests, _REQUEST.size)) is not None:
        index, slot, size = _REQUEST.unpack(head)
        text = shm[slot * SLOT_BYTES:slot * SLOT_BYTES + size].decode("utf-8", "surrogatepass")
        try:
            data = pickle.dumps(fns[index](text), protocol=pickle.HIGHEST_PROTOCOL)
            out = _SIZE.pack(len(data)) + data
        except Exception as exc:  # a plugin's prescan raised (or gave what pickle refuses): its parser does without
            why = f"{type(exc).__name__}: {exc}"[:500].encode("utf-8", "replace")
            out = _SIZE.pack(_FAILED) + _SIZE.pack(len(why)) + why
        view = memoryview(out)
        while view:
            view = view[os.write(results, view):]


def _read_all(fd: int, size: int, wait: float | None = None) -> bytes | None:
    """Exactly ``size`` bytes from ``fd``; None at its end; TimeoutError if none come for ``wait``
    seconds (None: no limit)."""
    parts: list[bytes] = []
    while size:
        if wait is not None and not select.select([fd], [], [], wait)[0]:
            raise TimeoutError
        part = os.read(fd, min(size, 1 << 20))
        if not part:
            return None
        parts.append(part)
        size -= len(part)
    return b"".join(parts)
