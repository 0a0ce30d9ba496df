"""``backfill --state-file``: a state file that a later ``watch --state-file`` goes on from.

It holds what a ``watch`` that had read the files to their ends would have saved: read positions
at the ends of the files (by identity: device, inode, head, fingerprint, birth time), the counters,
gauges and histograms as backfilled, and the parsers' state. A ``watch --state-file PATH`` with the
same FILE|DIR arguments then counts only what is written after the backfill, on top of the
backfilled counters, so its series join up with the backfilled ones.
"""

from __future__ import annotations

import os
import time
from collections.abc import Sequence

from logmetrics.engine.engine import Engine
from logmetrics.errors import UserError
from logmetrics.sources.chunks import Position
from logmetrics.sources.identity import birth, fingerprint
from logmetrics.sources.tailfile import read_head
from logmetrics.state import journal
from logmetrics.state import savefile as state
from logmetrics.state.check import normalised_inputs
from logmetrics.store.store import Store


def check(path: str) -> None:
    """Refuse, before reading anything, a state file that exists or cannot be written."""
    folder = os.path.dirname(os.path.abspath(path))
    if os.path.lexists(path):
        raise UserError(f"--state-file {path}: exists; backfill writes a new state file (remove it, or name another)")
    if not os.path.isdir(folder) or not os.access(folder, os.W_OK | os.X_OK):
        raise UserError(f"--state-file {path}: directory {folder} does not exist or is not writable")


def _position(path: str, offset: int) -> Position:
    fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC)
    try:
        st = os.fstat(fd)
        real = os.path.realpath(path)
        return Position(path, path, st.st_dev, st.st_ino, read_head(fd), offset, fingerprint(fd, offset),
                        real if real != path else None, birth(fd))
    finally:
        os.close(fd)


def save(path: str, args: Sequence[str], files: Sequence[str], offsets: dict[str, int], store: Store,
         engine: Engine) -> None:
    """Write the state file ``path`` for the PATH arguments ``args`` once every file was read."""
    try:
        lock = state.StateLock(path)
    except (state.StateError, OSError) as exc:
        raise UserError(f"--state-file {path}: {exc}") from exc
    try:
        positions = [_position(f, offsets.get(f, 0)) for f in files]
        delta = journal.Delta(time.time(), normalised_inputs(args), store.changes(everything=True), positions,
                              {str(r["key"]): r for r in engine.stream_states(None)}, engine.stream_keys())
        book = journal.Journal(path)
        try:
            book.commit(delta)
        finally:
            book.close()
    except OSError as exc:
        raise UserError(f"--state-file {path}: {exc.strerror or exc}") from exc
    finally:
        lock.close()
