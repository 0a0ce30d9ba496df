"""The state file (``--state-file``): counters, read positions and parser state across restarts.

Committed together, so that a restart goes on where the last run stopped: counters continue
instead of resetting, lines written while logmetrics was down are counted, and none is counted
twice. The file is a database written one transaction per poll (``journal``); the older JSON form
(version 1, ``save``) is still read, and taken over at the first commit. A lock file beside it
keeps a second logmetrics away from it. What is loaded is checked first (``statecheck``).
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import sqlite3
import time
from collections.abc import Sequence
from typing import Any

from logmetrics.state import journal
from logmetrics.state.check import VERSION, Checked, State, check, position_row, within

__all__ = ["VERSION", "State", "StateError", "StateLock", "load", "read", "save"]


class StateError(Exception):
    """A state file that cannot be used whole; ``kept`` is what can still be trusted of it."""

    def __init__(self, message: str, kept: State | None = None) -> None:
        super().__init__(message)
        self.kept = kept


def save(path: str, state: State) -> None:
    """Write ``state`` to ``path`` in the JSON form, atomically; on failure no ``.tmp`` is left behind."""
    data = {
        "version": VERSION,
        "saved_at": state.saved_at or time.time(),
        "inputs": state.inputs,
        "store": state.store,
        "positions": [position_row(p) for p in state.positions],
        "streams": state.streams,
    }
    tmp = f"{path}.tmp"
    try:
        with open(tmp, "w", encoding="utf-8") as f:
            json.dump(data, f, separators=(",", ":"))
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        if not os.path.isdir(tmp):  # a directory in its way is not ours to remove
            with contextlib.suppress(OSError):
                os.remove(tmp)
        raise


def load(path: str, inputs: Sequence[str] | None = None) -> State | None:
    """The state saved at ``path``; None if there is none yet.

    Raises ``StateError`` if it cannot be used whole, with what can still be trusted in its
    ``kept``. Positions of files outside ``inputs`` (normalised PATH arguments), if given, are
    left out: they can never be resumed. Never raises anything else for any content.
    """
    data, mtime = _read(path)
    if mtime is None:
        return None
    checked: Checked = check(data, mtime)
    if inputs is not None:
        checked.state.elsewhere = [p.stream for p in checked.state.positions
                                   if not os.path.isabs(p.stream) and not within(p.stream, inputs)]
        checked.state.positions = [p for p in checked.state.positions if within(p.stream, inputs)]
    if checked.problems:
        raise StateError("; ".join(checked.problems), checked.state)
    return checked.state


def _read(path: str) -> tuple[Any, float | None]:
    """The unchecked content of the state at ``path`` (either form) and when it was written; (None,
    None) if there is none. Raises ``StateError`` if it cannot be read."""
    try:
        if journal.is_journal(path):
            mtime = journal.modified(path)
            try:
                return journal.read(path), mtime
            except sqlite3.Error as exc:
                if "locked" in str(exc):  # another process holds it (through another name: a link)
                    raise StateError("in use by another logmetrics or program (the database is locked); two "
                                     "processes cannot share one state file") from None
                raise StateError(f"not a readable state database ({str(exc)[:80]})", check(None, mtime).state) \
                    from None
        with open(path, "rb") as f:
            mtime = os.fstat(f.fileno()).st_mtime
            raw = f.read()
    except FileNotFoundError:
        return None, None
    except OSError as exc:
        raise StateError(f"cannot read it: {exc.strerror or exc}") from exc
    try:
        return json.loads(raw), mtime
    except (ValueError, RecursionError) as exc:  # not JSON, not UTF-8, or nested too deep to parse
        reason = "nested too deep" if isinstance(exc, RecursionError) else \
            f"neither a state database nor JSON ({str(exc)[:80]})"
        raise StateError(reason, check(None, mtime).state) from None


def read(path: str) -> Any:
    """The content of the state at ``path``, either form, in the JSON form, unchecked (for a look
    at it); None if there is none. Raises ``StateError`` if it cannot be read."""
    return _read(path)[0]


def set_aside(path: str) -> str | None:
    """Rename an unusable state file out of the way, for a look later; the new name, or None."""
    aside = f"{path}.bad-{time.strftime('%Y%m%dT%H%M%S')}"
    n = 1
    while os.path.exists(aside):
        n += 1
        aside = f"{path}.bad-{time.strftime('%Y%m%dT%H%M%S')}-{n}"
    try:
        os.replace(path, aside)
    except OSError:
        return None
    for side in journal.SIDE_FILES:  # a database's log goes with it: it belongs to no other
        with contextlib.suppress(OSError):
            os.replace(path + side, aside + side)
    return aside


class StateLock:
    """An exclusive lock on ``<path>.lock``, held for the life of the process (``flock``)."""

    def __init__(self, path: str) -> None:
        self.path = f"{os.path.realpath(path)}.lock"  # one lock whatever symlink names the file
        self.fd = os.open(self.path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o644)
        try:
            fcntl.flock(self.fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            holder = os.pread(self.fd, 32, 0).decode("ascii", "replace").strip()
            os.close(self.fd)
            raise StateError(f"in use by another logmetrics (pid {holder or '?'}), which holds {self.path}") \
                from None
        st = os.fstat(self.fd)
        #: when the last logmetrics on this state started (it wrote its pid then), None if none did:
        #: a state damaged later than its last commit is older than its own mtime says, not than this
        self.previous: float | None = st.st_mtime if st.st_size else None
        os.ftruncate(self.fd, 0)
        os.pwrite(self.fd, f"{os.getpid()}\n".encode(), 0)

    def close(self) -> None:
        """Release the lock (the file stays: removing it would race a second process taking it)."""
        if self.fd >= 0:
            os.close(self.fd)
            self.fd = -1
