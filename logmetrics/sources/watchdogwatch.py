"""The watcher off Linux: watchdog's observer wakes the poller on any change, and every pass lists
everything (``logmetrics.sources.notify`` has the inotify one, which names what changed)."""

from __future__ import annotations

import logging
import os
from collections.abc import Callable, Sequence

from watchdog.events import (
    DirCreatedEvent,
    DirDeletedEvent,
    DirMovedEvent,
    FileClosedEvent,
    FileCreatedEvent,
    FileDeletedEvent,
    FileModifiedEvent,
    FileMovedEvent,
    FileSystemEvent,
    FileSystemEventHandler,
)
from watchdog.observers import Observer

from logmetrics.sources.watching import MAX_TARGET_WATCHES, Changes, Root

log = logging.getLogger(__name__)

_WATCHED_EVENTS: list[type[FileSystemEvent]] = [  # not opened/closed-without-write: those are our reads
    FileCreatedEvent,
    FileModifiedEvent,
    FileMovedEvent,
    FileDeletedEvent,
    FileClosedEvent,
    DirCreatedEvent,
    DirMovedEvent,
    DirDeletedEvent,
]
_ALL = Changes(frozenset(), True)


class _WakeHandler(FileSystemEventHandler):
    def __init__(self, wake: Callable[[], None]) -> None:
        super().__init__()
        self._wake = wake

    def on_any_event(self, event: FileSystemEvent) -> None:
        if event.event_type not in ("opened", "closed_no_write"):  # our own reads
            self._wake()


class WatchdogWatcher:
    """Calls ``wake`` on changes in the watched directories (watchdog).

    Polling stays the source of truth: a directory that cannot be watched only costs early
    wake-ups. Roots that do not exist yet are tried again by ``retry()``.
    """

    names_changes = False

    def __init__(self, wake: Callable[[], None], roots: Sequence[Root]) -> None:
        self._observer = Observer()
        self._observer.start()
        self._handler = _WakeHandler(wake)
        self._watched: set[str] = set()
        self._waiting = list(roots)
        self._limit = len(self._waiting) + MAX_TARGET_WATCHES
        self.retry()

    def fileno(self) -> int | None:
        return None

    def changes(self) -> Changes:
        return _ALL

    def covers(self, directory: str) -> bool:
        return False

    def urgent(self) -> bool:
        return False

    def _schedule(self, directory: str, recursive: bool) -> bool:
        directory = os.path.abspath(directory)
        if directory in self._watched:
            return True
        if not os.path.isdir(directory):
            return False
        try:
            self._observer.schedule(self._handler, directory, recursive=recursive, event_filter=_WATCHED_EVENTS)
        except Exception as err:  # e.g. out of inotify watches: polling still works
            log.debug("cannot watch %s: %s", directory, err)
        self._watched.add(directory)
        return True

    def retry(self) -> None:
        if self._waiting:
            self._waiting = [root for root in self._waiting if not self._schedule(*root)]

    def add_root(self, root: Root) -> None:
        self._limit += 1
        self._waiting.append(root)
        self.retry()

    def add_target(self, path: str) -> None:
        real = os.path.dirname(os.path.realpath(path))
        if len(self._watched) >= self._limit or real == os.path.dirname(os.path.abspath(path)):
            return
        if not any(real == w or real.startswith(w.rstrip(os.sep) + os.sep) for w in self._watched):
            self._schedule(real, False)

    def stop(self) -> None:
        try:
            self._observer.stop()
            self._observer.join(timeout=2.0)
        except Exception as err:  # closing must not fail on a broken watcher
            log.debug("stopping the watcher: %s", err)
