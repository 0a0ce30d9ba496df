"""The parsers' prescans (``Parser.prescan``) run in a forked child process, on a core the run does
not use otherwise: ``--oneshot`` over one file, or over several that one process reads.

A text goes to the child through shared memory (two slots: the batch being parsed and the next
one), with a 16-byte request down a pipe; its result comes back pickled up another. A text larger
than a slot is not sent, and a child that failed or ended sends nothing more: each such batch is
read by its parser alone, as without a child, and the result is the same. The child ends with its
parent (``workers.end_with_parent``), or when the request pipe closes.
"""

from __future__ import annotations

import contextlib
import gc
import logging
import mmap
import os
import pickle
import signal
import struct
from collections.abc import Callable, Mapping

from logmetrics.app.workers import end_with_parent
from logmetrics.plugins import ParserEntry

log = logging.getLogger("logmetrics.app.prescan")

#: The largest text sent, in bytes (UTF-8); a slot's size. Memory is taken only as it is written.
SLOT_BYTES = 32 << 20
_REQUEST = struct.Struct("<IIQ")  # parser index, slot, length
_SIZE = struct.Struct("<Q")
_FAILED = (1 << 64) - 1  # a result's size that says its prescan raised


class Prescanner:
    """A child process that runs the prescans of ``entries`` on the texts it is sent, in order
    (the engine's ``logmetrics.engine.ahead.Prescans``)."""

    def __init__(self, entries: Mapping[str, ParserEntry]) -> None:
        fns = {name: e.cls.prescan for name, e in entries.items() if e.cls.prescan is not None}
        self._index = {name: i for i, name in enumerate(fns)}
        self._sent = 0
        self._pid = -1
        self._requests = self._results = -1
        if not fns:
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
            log.debug("no process for the prescans: %s", exc)
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
                signal.signal(signal.SIGINT, signal.SIG_IGN)  # (a Ctrl-C is the parent's to handle)
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
        except OSError:  # the child ended
            self._lost()
            return False
        self._sent += 1
        return True

    def take(self) -> object:
        """The result of the oldest text sent and not taken yet; None if its prescan failed, or the
        child did (it is sent nothing more)."""
        if self._pid < 0:
            return None
        try:
            head = _read(self._results, _SIZE.size)
            size = _SIZE.unpack(head)[0] if head is not None else None
            if size == _FAILED:
                return None
            data = _read(self._results, size) if size is not None else None
            if data is not None:
                return pickle.loads(data)
        except (OSError, pickle.UnpicklingError):
            pass
        self._lost()
        return None

    def _lost(self) -> None:
        """The child failed: it is stopped, and sent nothing more."""
        if self._pid > 0:
            with contextlib.suppress(OSError):
                os.kill(self._pid, signal.SIGKILL)
        self.close()

    def close(self) -> None:
        """End the child (it reads the end of its requests), and wait for it."""
        for fd in (self._requests, self._results):
            if fd >= 0:
                os.close(fd)
        self._requests = self._results = -1
        if self._pid > 0:
            with contextlib.suppress(OSError):
                os.waitpid(self._pid, 0)
        self._pid = -1


def _serve(fns: list[Callable[..., object]], shm: mmap.mmap, requests: int, results: int) -> None:
    """The child's loop: a request, its prescan, its result; until the requests end."""
    while (head := _read(requests, _REQUEST.size)) is not None:
        index, slot, size = _REQUEST.unpack(head)
        text = shm[slot * SLOT_BYTES:slot * SLOT_BYTES + size].decode("utf-8", "surrogatepass")
        try:
            data = pickle.dumps(fns[index](text), protocol=pickle.HIGHEST_PROTOCOL)
            out = _SIZE.pack(len(data)) + data
        except Exception:  # a plugin's prescan raised (or gave what pickle refuses): its parser does without
            out = _SIZE.pack(_FAILED)
        view = memoryview(out)
        while view:
            view = view[os.write(results, view):]


def _read(fd: int, size: int) -> bytes | None:
    """Exactly ``size`` bytes from ``fd``; None at its end."""
    parts: list[bytes] = []
    while size:
        part = os.read(fd, min(size, 1 << 20))
        if not part:
            return None
        parts.append(part)
        size -= len(part)
    return b"".join(parts)
