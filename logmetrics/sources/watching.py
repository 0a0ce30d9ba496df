"""Watching: what a file-system watcher tells the tailer, whichever one it is (``notify`` has
inotify's and picks one; ``watchdogwatch`` has watchdog's)."""

from __future__ import annotations

from typing import NamedTuple, Protocol

MAX_TARGET_WATCHES = 16  # watchdog: extra directories watched for symlink targets (a thread each)

Root = tuple[str, bool]  # a directory to watch, and whether its subdirectories too


class Changes(NamedTuple):
    """What changed since the last call."""

    paths: frozenset[str]  # absolute paths of files whose content changed
    rescan: bool  # anything else: list the directories again


class Watcher(Protocol):
    """What the tailer asks of a watcher."""

    #: whether ``changes()`` names what changed; if not, every pass lists everything
    names_changes: bool

    def fileno(self) -> int | None:
        """A descriptor readable when there are events, for the poller to wait on (None: it wakes by itself)."""

    def changes(self) -> Changes:
        """The changes since the last call (never blocks)."""

    def urgent(self) -> bool:
        """Whether something other than a write happened since the last ``changes()`` (a file created,
        renamed or deleted): the pass should come at once, not after the writes have gathered."""

    def covers(self, directory: str) -> bool:
        """Whether changes in the absolute ``directory`` are reported."""

    def retry(self) -> None:
        """Watch the roots that exist by now."""

    def add_root(self, root: Root) -> None:
        """Also watch ``root`` (a PATH argument that did not exist at start, or added on reload)."""

    def add_target(self, path: str) -> None:
        """Also watch the directory a symlink points into (Kubernetes), unless covered or too many."""

    def stop(self) -> None:
        """Stop watching."""
