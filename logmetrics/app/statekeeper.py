"""The ``--state-file`` of a running ``watch``: its lock, what it restores at start, and one commit
per poll cycle that changed anything, its failures counted and warned once per episode."""

from __future__ import annotations

import logging
import os
import sqlite3
import time

from logmetrics.engine.engine import Engine
from logmetrics.errors import UserError
from logmetrics.sources.tailer import FileTailer
from logmetrics.state import journal
from logmetrics.state import savefile as state
from logmetrics.store.store import Store

Sample = tuple[str, tuple[str, ...], float]
WARN_AGAIN_SECONDS = 60.0  # a new run of failed saves this soon after the last one warned is not warned again

log = logging.getLogger("logmetrics.app.runner")  # the watch's messages, under one name


class StateKeeper:
    """The state file at ``path``, locked for this process; ``inputs`` are the PATH arguments it is
    saved for, ``adopt`` says to go on with one saved for others (``--state-adopt``)."""

    def __init__(self, path: str, inputs: list[str], *, adopt: bool = False) -> None:
        self.path = path
        self.inputs = inputs
        self.adopt = adopt
        self._lock = self._lock_state(path)
        self.journal = journal.Journal(path)
        self._save_error: str | None = None  # why the last save failed, None if it did not
        self._save_failures = 0  # logmetrics_state_save_failures_total
        self._commits = 0  # logmetrics_state_commits_total
        self._failed_in_a_row = 0
        self._warned_at = -WARN_AGAIN_SECONDS  # when a failed save was last warned (monotonic)
        self._episode_warned = False  # the failures since the last good save were warned

    @staticmethod
    def _lock_state(path: str) -> state.StateLock:
        try:
            return state.StateLock(path)
        except state.StateError as exc:
            raise UserError(f"--state-file {path}: {exc}; two processes cannot share one state file") from exc
        except OSError as exc:
            raise UserError(f"--state-file {path}: cannot create its lock file: {exc.strerror or exc}") from exc

    def load(self, store: Store, engine: Engine, tailer: FileTailer | None) -> bool:
        """Restore counters, parser state and read positions; True if read positions were restored
        (the files are then caught up before serving)."""
        path = self.path
        problem: str | None = None
        try:
            saved = state.load(path, self.inputs)
        except state.StateError as exc:
            if exc.kept is None:  # there, but unreadable: refuse rather than overwrite it at the first save
                raise UserError(f"--state-file {path}: {exc}") from exc
            saved, problem = exc.kept, str(exc)
        if saved is None:
            return False
        if saved.inputs is not None and saved.inputs != self.inputs:
            self._foreign(saved.inputs)
        elif saved.elsewhere and not self.adopt:
            raise UserError(f"--state-file {path} names its files by paths relative to the directory logmetrics was "
                            f"started in then ({saved.elsewhere[0]}, say), and from {os.getcwd()} they lie under "
                            "none of the PATH arguments: start it from that directory (or give absolute PATH "
                            "arguments from the start), or add --state-adopt to go on with it (new lines then count "
                            "under the new source names)")
        if problem is not None:
            if self._lock.previous is not None:  # damaged after its last commit, maybe: read from the last start
                saved.saved_at = min(saved.saved_at, self._lock.previous)
            aside = state.set_aside(path)
            kept = len(saved.positions)
            when = time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(saved.saved_at))
            log.warning("state file %s cannot be used whole (%s); %s; counters start again from 0, %d read "
                        "position%s kept, and files without one that changed since %s are read from their start",
                        path, problem, f"set aside as {aside}" if aside else "could not be set aside",
                        kept, "" if kept == 1 else "s", when)
        series = store.load(saved.store)
        rows = sum(len(v) for v in saved.store.values() if isinstance(v, list))
        if series < rows:
            log.warning("state file %s: %d of its %d series left out (of a metric family no parser serves now, "
                        "or with labels that do not fit it)", path, rows - series, rows)
        engine.restore_streams(saved.streams)
        if tailer is not None:
            tailer.resume(saved.positions, saved.saved_at, saved.inputs)
        log.info("state file %s: %d series and %d read positions restored", path, series, len(saved.positions))
        return tailer is not None

    def _foreign(self, saved: list[str]) -> None:
        """A state saved for other PATH arguments: refused, unless --state-adopt says to go on with it."""
        added = [p for p in self.inputs if p not in saved]
        gone = [p for p in saved if p not in self.inputs]

        def some(paths: list[str]) -> str:
            return ", ".join(paths[:3]) + (f" and {len(paths) - 3} more" if len(paths) > 3 else "")

        diff = "; ".join(part for part in (f"new: {some(added)}" if added else "",
                                           f"no longer given: {some(gone)}" if gone else "") if part)
        if not self.adopt:
            raise UserError(f"--state-file {self.path} was saved for other PATH arguments ({diff}); to go on with its "
                            f"counters and read positions for these ones add --state-adopt, to start afresh give "
                            f"another --state-file")
        log.warning("state file %s was saved for other PATH arguments (%s); adopted (--state-adopt)", self.path, diff)

    def save(self, polled_at: float, store: Store, engine: Engine, tailer: FileTailer | None) -> None:
        """Commit what changed since the last commit: counters, read positions, parser state and the
        text held back uncounted, as one transaction; everything the first time and after a failure.
        A failure is reported once, counted, and retried at the next poll.

        Every line read so far is counted or held in a stream (and so in the state), so positions
        and counters agree without cutting a record that is still being written.
        """
        full = self.journal.needs_full
        changed = engine.take_changed()
        rows = store.changes(everything=full)
        streams = engine.stream_states(None if full else changed)
        delta = journal.Delta(polled_at, self.inputs, rows, tailer.positions() if tailer is not None else [],
                              {str(r["key"]): r for r in streams}, engine.stream_keys())
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
                            "logmetrics_state_save_failures_total", self.path, reason)
            self._save_error = reason
        else:
            if self._save_error is not None and self._episode_warned:
                log.warning("state file %s saved again, after %d failed attempt%s", self.path, self._failed_in_a_row,
                            "" if self._failed_in_a_row == 1 else "s")
                self._episode_warned = False
            self._save_error = None
            self._failed_in_a_row = 0

    def failure(self) -> str | None:
        """Why the last save failed, or None if it did not."""
        return self._save_error

    def samples(self) -> list[Sample]:
        """logmetrics_state_commits_total and logmetrics_state_save_failures_total."""
        return [("logmetrics_state_commits_total", (), float(self._commits)),
                ("logmetrics_state_save_failures_total", (), float(self._save_failures))]

    def close(self) -> None:
        """Close the database and release the lock."""
        self.journal.close()
        self._lock.close()
