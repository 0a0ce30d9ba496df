"""The state file on disk (``--state-file``): SQLite in WAL mode, one transaction per poll.

Every poll cycle that changed anything commits, as one transaction, the counters and histograms
changed since the last commit, the read positions that moved, and the parser state and held-back
text of the streams that were fed. A crash, SIGKILL included, then loses at most the poll that was
under way, and a restart reads that poll's lines again.

Why SQLite rather than a journal file of our own: a commit writes only the pages of the rows that
changed, appended to the write-ahead log, and the library does the framing, the checksums, the
recovery after a torn write and the compaction (checkpoints) that an append-only journal would
need written and tested here; it ships with Python. ``synchronous=NORMAL`` in WAL mode does not
``fsync`` at each commit: a committed transaction survives a crash of the process, and a crash of
the machine may take back the last commits but never leaves a half-written state. A full rewrite
of the store at each poll (the JSON form) would cost milliseconds per poll with 10,000 series.

Each row is the JSON of one item of the JSON state file's form (version 1), keyed by what
identifies it, so that ``read`` gives back that form and ``statecheck`` checks what is loaded from
either. A JSON state file found at the path is taken over at the first commit: the new database
replaces it, and the old file is kept beside it as ``PATH.v1``, read no more.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import sqlite3
from dataclasses import dataclass, field

import orjson

from logmetrics.sources.chunks import Position
from logmetrics.state.check import VERSION, position_row
from logmetrics.store.values import Changes, Key

MAGIC = b"SQLite format 3\x00"
TABLES = ("counters", "gauges", "histograms", "positions", "streams")
#: A series is a row with a number for its id (an update by id costs a third of one by its labels),
#: its key (the JSON of its family name and label values) and its value(s).
SCHEMA = [*(f"CREATE TABLE IF NOT EXISTS {t} (key TEXT PRIMARY KEY, row TEXT NOT NULL) WITHOUT ROWID"
            for t in ("meta", "positions", "streams")),
          *(f"CREATE TABLE IF NOT EXISTS {t} (id INTEGER PRIMARY KEY, key TEXT NOT NULL, value REAL NOT NULL)"
            for t in ("counters", "gauges")),
          "CREATE TABLE IF NOT EXISTS histograms (id INTEGER PRIMARY KEY, key TEXT NOT NULL, buckets TEXT NOT NULL, "
          "sum REAL NOT NULL, count INTEGER NOT NULL)"]
#: The files SQLite keeps beside the database while it is open (and after a crash).
SIDE_FILES = ("-wal", "-shm")
WAL_PAGES = 256  # pages written to the write-ahead log before it is copied into the database (SQLite: 1000)
WAL_BYTES = 1 << 20  # the size the write-ahead log is cut back to after it was copied


def is_journal(path: str) -> bool:
    """Whether ``path`` holds a SQLite database (this format), by its first bytes."""
    try:
        with open(path, "rb") as f:
            return f.read(len(MAGIC)) == MAGIC
    except OSError:
        return False


def modified(path: str) -> float:
    """When the state at ``path`` was last written: the database or its write-ahead log."""
    times = [os.stat(path).st_mtime]
    for side in SIDE_FILES[:1]:
        with contextlib.suppress(OSError):
            times.append(os.stat(path + side).st_mtime)
    return max(times)


def _connect(path: str) -> sqlite3.Connection:
    con = sqlite3.connect(path, isolation_level=None, timeout=0)
    try:
        con.execute("PRAGMA locking_mode=EXCLUSIVE")  # one process (the lock file says so): no -shm file
        con.execute("PRAGMA journal_mode=WAL")
        con.execute("PRAGMA synchronous=NORMAL")
        # The log is copied into the database every WAL_PAGES pages and cut back to WAL_BYTES after
        # that: left alone, it keeps the size of its largest round, the whole store after a restart.
        con.execute(f"PRAGMA wal_autocheckpoint={WAL_PAGES}")
        con.execute(f"PRAGMA journal_size_limit={WAL_BYTES}")
        for statement in SCHEMA:
            con.execute(statement)
    except BaseException:
        con.close()
        raise
    return con


def _text(key: str) -> str:
    """A stream key as SQLite can hold it: a file name that is not UTF-8 (``api-\\xff.log``, decoded
    with surrogate escapes) in JSON's ASCII form; the row itself names the stream."""
    try:
        key.encode("utf-8")
    except UnicodeEncodeError:
        return json.dumps(key)
    return key


def _row(text: str) -> object:
    """A row's JSON, or None where it is not JSON (the check then names what is malformed)."""
    try:
        return json.loads(text)
    except (ValueError, RecursionError):
        return None


def read(path: str) -> dict[str, object]:
    """The state in the database at ``path`` in the JSON state file's form, unchecked.

    Raises ``sqlite3.Error`` or ``OSError`` if it cannot be read.
    """
    con = sqlite3.connect(f"file:{path}?mode=rw", uri=True, isolation_level=None, timeout=0)
    try:
        con.execute("PRAGMA locking_mode=EXCLUSIVE")
        meta = {k: _row(v) for k, v in con.execute("SELECT key, row FROM meta")}
        parts = {t: [_row(r) for (r,) in con.execute(f"SELECT row FROM {t} ORDER BY key")]  # (constant names)
                 for t in ("positions", "streams")}
        values = {t: [_series(k, v) for k, v in con.execute(f"SELECT key, value FROM {t} ORDER BY id")]
                  for t in ("counters", "gauges")}  # (constant names)
        histograms = [_series(k, _row(b), s, n)
                      for k, b, s, n in con.execute("SELECT key, buckets, sum, count FROM histograms ORDER BY id")]
    finally:
        con.close()
    data: dict[str, object] = {k: meta[k] for k in ("version", "saved_at", "inputs") if k in meta}
    data.update(store={**values, "histograms": histograms},
                positions=parts["positions"], streams=parts["streams"])
    return data


def _series(key: str, *values: object) -> list[object] | None:
    """A series row in the JSON form (``[name, labels, values...]``); None if its key is not JSON."""
    k = _row(key)
    return [*k, *values] if isinstance(k, list) and len(k) == 2 else None


def remove_side_files(path: str) -> None:
    """Remove what SQLite may have left beside ``path`` (never valid for another database there)."""
    for side in SIDE_FILES:
        with contextlib.suppress(FileNotFoundError):
            os.remove(path + side)


@dataclass
class Delta:
    """What changed since the last commit (everything, for a full one)."""

    saved_at: float
    inputs: list[str]
    store: Changes  # changed counters, gauges and histograms
    positions: list[Position]  # every read position now; the journal keeps what moved
    streams: dict[str, dict[str, object]]  # the state of the streams fed, by key
    live: set[str] = field(default_factory=set)  # every stream key still known: others are deleted


class Journal:
    """The open state database; ``commit`` writes one ``Delta`` as one transaction."""

    def __init__(self, path: str) -> None:
        self.path = path
        self._con: sqlite3.Connection | None = None
        self._positions: dict[str, Position] = {}  # as last committed, by file ("dev:ino")
        self._streams: dict[str, str] = {}  # the JSON last committed, by key
        self._ids: dict[Key, int] = {}  # the row of each series committed
        self._next = self._pending_next = 0  # the id of the next new series (committed, in the transaction)
        self._inputs: list[str] | None = None  # the PATH arguments last committed (a reload changes them)

    @property
    def needs_full(self) -> bool:
        """True until a commit succeeded, and again after one failed: the next one writes everything."""
        return self._con is None

    def commit(self, delta: Delta) -> bool:
        """Write ``delta`` (everything if ``needs_full``) as one transaction; False if nothing changed
        (nothing is written then). On any failure nothing of it is kept, the exception is raised, and
        the next commit must be a full one."""
        full = self._con is None
        try:
            if full:
                self._open()
            assert self._con is not None
            return self._write(self._con, delta, full)
        except BaseException:
            self.close()
            self._positions, self._streams, self._ids = {}, {}, {}
            raise

    def _open(self) -> None:
        """Open the database at the path; a JSON state file there is replaced (kept as ``PATH.v1``)."""
        path = self.path
        if os.path.exists(path) and not is_journal(path):
            new = f"{path}.new"
            for stale in (new, *(new + s for s in SIDE_FILES)):
                with contextlib.suppress(FileNotFoundError):
                    os.remove(stale)
            con = _connect(new)
            con.close()  # an empty database; the caller's full commit fills it once it is in place
            with contextlib.suppress(FileNotFoundError):
                os.remove(f"{path}.v1")
            try:
                os.link(path, f"{path}.v1")
            except OSError:  # a file system without hard links
                shutil.copy2(path, f"{path}.v1")
            remove_side_files(path)
            os.replace(new, path)
        self._con = _connect(path)

    def _write(self, con: sqlite3.Connection, delta: Delta, full: bool) -> bool:
        dumps = orjson.dumps
        # by file, not by stream: a rotated stream has two files open for a while (the one drained
        # and its successor), and both positions must survive a restart
        positions = {f"{p.dev}:{p.ino}": p for p in delta.positions}
        moved = [(k, p) for k, p in positions.items() if self._positions.get(k) != p]
        gone_positions = [(s,) for s in self._positions if s not in positions]
        streams = {k: json.dumps(v, separators=(",", ":")) for k, v in delta.streams.items()}  # (raises on a
        streams = {k: v for k, v in streams.items() if self._streams.get(k) != v}  # state that is not JSON)
        gone_streams = [(k,) for k in self._streams if k not in delta.live and k not in delta.streams]
        store = delta.store
        if not (full or moved or gone_positions or streams or gone_streams or store.counters or store.histograms
                or store.gauges or store.gone or delta.inputs != self._inputs):
            return False
        ids: dict[Key, int] = {} if full else self._ids  # (a failure forgets them all: the next commit is full)
        self._pending_next = 0 if full else self._next
        con.execute("BEGIN")
        try:
            if full:
                for table in TABLES:
                    con.execute(f"DELETE FROM {table}")  # (table names: the constants above)
            con.executemany("INSERT OR REPLACE INTO meta VALUES (?, ?)", [
                ("version", str(VERSION)), ("saved_at", repr(delta.saved_at)),
                ("inputs", json.dumps(delta.inputs))])
            self._series(con, ids, "counters", [(key, (value,)) for key, value in store.counters])
            self._series(con, ids, "gauges", [(key, (value,)) for key, value in store.gauges])
            dropped = [(ids[key],) for key in store.gone if key in ids]
            for table in ("counters", "gauges", "histograms"):  # one id names one series in one table
                con.executemany(f"DELETE FROM {table} WHERE id = ?", dropped)  # (constant names)
            self._series(con, ids, "histograms", [(key, (dumps(b).decode(), total, n))
                                                  for key, b, total, n in store.histograms])
            con.executemany("INSERT OR REPLACE INTO positions VALUES (?, ?)",
                            [(k, json.dumps(position_row(p), separators=(",", ":"))) for k, p in moved])
            con.executemany("DELETE FROM positions WHERE key = ?", gone_positions)
            con.executemany("INSERT OR REPLACE INTO streams VALUES (?, ?)", [(_text(k), v) for k, v in streams.items()])
            con.executemany("DELETE FROM streams WHERE key = ?", [(_text(k),) for (k,) in gone_streams])
            con.execute("COMMIT")
        except BaseException:
            with contextlib.suppress(sqlite3.Error):
                con.execute("ROLLBACK")
            raise
        for series in store.gone:
            ids.pop(series, None)
        self._ids, self._next = ids, self._pending_next
        self._positions = positions
        self._inputs = list(delta.inputs)
        for (key,) in gone_streams:
            self._streams.pop(key, None)
        self._streams.update(streams)
        return True

    def _series(self, con: sqlite3.Connection, ids: dict[Key, int], table: str,
                rows: list[tuple[Key, tuple[object, ...]]]) -> None:
        """Update the series of ``rows`` known by id; insert the others (and learn their ids)."""
        old = [(*values, ids[key]) for key, values in rows if key in ids]
        if old:
            sets = "buckets = ?, sum = ?, count = ?" if table == "histograms" else "value = ?"
            con.executemany(f"UPDATE {table} SET {sets} WHERE id = ?", old)  # (constant names)
        new = [(key, values) for key, values in rows if key not in ids]
        if new:
            first = self._pending_next
            self._pending_next += len(new)
            holes = ", ?" * len(new[0][1])
            con.executemany(f"INSERT INTO {table} VALUES (?, ?{holes})",  # (constant names)
                            [(first + i, orjson.dumps([key[0], key[1]]).decode(), *values)
                             for i, (key, values) in enumerate(new)])
            ids.update((key, first + i) for i, (key, _) in enumerate(new))

    def close(self) -> None:
        """Close the database (its write-ahead log is folded in and removed when it can be)."""
        if self._con is not None:
            with contextlib.suppress(sqlite3.Error):
                self._con.close()
            self._con = None

