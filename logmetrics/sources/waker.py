"""The poller's wake-up: a pipe that watchdog, the stdin reader or a signal handler writes to."""

from __future__ import annotations

import contextlib
import os
import select
import weakref


class Waker:
    """Wakes the poller early: set by watchdog, the stdin reader or a signal handler, waited on
    between polls.

    A pipe, not a lock: a signal handler runs in the main thread between two bytecodes, maybe
    while that thread is inside ``wait``; had ``wait`` taken a lock (``threading.Event`` does),
    the handler's ``wake`` would wait for it for ever (a SIGTERM that never stops the process).
    """

    def __init__(self) -> None:
        self._r, self._w = os.pipe()
        os.set_blocking(self._r, False)
        os.set_blocking(self._w, False)
        self._woken = False
        self._events: int | None = None  # a descriptor readable when the file system has news (inotify)
        weakref.finalize(self, os.close, self._w)  # once no thread can wake it any more

    def wake(self) -> None:
        """Ask for a poll now (safe from any thread and from a signal handler)."""
        if not self._woken:  # (a race here costs one byte more in the pipe, never a lost wake-up)
            self._woken = True
            with contextlib.suppress(BlockingIOError, OSError):
                os.write(self._w, b"!")

    def watch_fd(self, fd: int | None) -> None:
        """Also end a wait when ``fd`` is readable (inotify events; read by the poll, not here)."""
        self._events = fd

    def wait(self, timeout: float, *, events: bool = True) -> bool:
        """Wait up to ``timeout`` seconds, or until woken or (with ``events``) the file system has
        news; True if woken or news came. Clears the wake-up."""
        ready: list[int] = []
        if not self._woken:
            fds = [self._r] if self._events is None or not events else [self._r, self._events]
            with contextlib.suppress(OSError, ValueError):
                ready = select.select(fds, [], [], max(0.0, timeout))[0]
        woken, self._woken = self._woken or bool(ready), False
        with contextlib.suppress(BlockingIOError, OSError):
            while os.read(self._r, 4096):
                pass
        return woken

    def close(self) -> None:
        """Close the pipe's end that is waited on; a late ``wake`` from a thread finds it closed (EPIPE),
        never another file that got the number of a closed descriptor."""
        with contextlib.suppress(OSError):
            os.close(self._r)
