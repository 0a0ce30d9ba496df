"""The change index: what the file system says changed, turned into the files a light pass reads.

It holds the watcher (``notify``), which path leads to which followed file as the last full pass
listed them, the changed paths that pass found not to be ours (a state file among the logs), and
whether every followed file lies where changes are reported. A light pass reads only the files
named as changed; anything it cannot place (a path not listed yet, a file let go or parked, a
rescan the watcher asks for) makes the pass a full one, and so does the rescan interval.
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable, Iterable, Mapping, Sequence

from logmetrics.sources.notify import make_watcher
from logmetrics.sources.tailfile import Ident, TailFile
from logmetrics.sources.watching import Root, Watcher

MAX_UNLISTED = 10_000  # changed paths remembered as not followed (a state file among the logs), at most


class ChangeIndex:
    """The watcher of a tailer and what it knows of the paths it reports."""

    def __init__(self, rescan_interval: float) -> None:
        self.watcher: Watcher | None = None
        #: seconds between passes that look at every file, when the watcher names what changed
        self.rescan_interval = rescan_interval
        self.last_full = -rescan_interval  # when a pass last looked at every file (monotonic)
        #: what the last full pass listed, absolute path (or real path of a symlinked file) -> file
        self.paths: dict[str, Ident] = {}
        self._unlisted: set[str] = set()  # changed paths a full pass did not list: their changes are not ours
        self.uncovered = True  # a followed file lies where no notification comes from: every pass is full

    def start(self, wake: Callable[[], None], roots: Sequence[Root]) -> int | None:
        """Watch ``roots``; the descriptor to wait on for news, if the watcher has one."""
        self.watcher = make_watcher(wake, roots)
        return self.watcher.fileno() if self.watcher is not None else None

    def add_root(self, root: Root) -> None:
        """Also watch ``root`` (a PATH argument that appeared, or one added on reload)."""
        if self.watcher is not None:
            self.watcher.add_root(root)

    def add_target(self, path: str) -> None:
        """Also watch the directory a followed symlink points into."""
        if self.watcher is not None:
            self.watcher.add_target(path)

    def event_driven(self) -> bool:
        """Whether the file system names every change of every followed file."""
        w = self.watcher
        return w is not None and w.names_changes and not self.uncovered

    def urgent(self) -> bool:
        """Whether the file system reported more than writes since the last poll."""
        return self.watcher is not None and self.watcher.urgent()

    def changed(self, full: bool, files: Mapping[Ident, TailFile]) -> tuple[set[Ident] | None, frozenset[str]]:
        """The files a light pass reads (beyond the busy ones), None for a full pass (``full``: the
        tailer needs one anyway); and the paths the file system named as changed."""
        w = self.watcher
        if w is None:
            return None, frozenset()
        w.retry()
        changes = w.changes()  # read every time: events wait in the kernel, merged, until asked for
        if (changes.rescan or not w.names_changes or full or self.uncovered
                or time.monotonic() - self.last_full >= self.rescan_interval):
            return None, changes.paths
        idents: set[Ident] = set()
        for path in changes.paths:
            ident = self.paths.get(path)
            if ident is None:
                if path in self._unlisted:
                    continue
                return None, changes.paths  # a file not listed yet: what it is, the listing decides
            f = files.get(ident)
            if f is None or f.fd < 0:
                return None, changes.paths  # let go, or parked: reopened (or placed anew) by a full pass
            idents.add(ident)
        return idents, changes.paths

    def listing(self) -> None:
        """A full pass begins: its listing makes the index anew (``listed``)."""
        self.paths = {}

    def listed(self, path: str, ident: Ident) -> None:
        """The full pass found ``path`` to be the followed file ``ident``."""
        self.paths[os.path.abspath(path)] = ident

    def after_full(self, now: float, asked: frozenset[str], files: Iterable[TailFile],
                   active: Iterable[TailFile]) -> None:
        """After a full pass that began at ``now`` (monotonic): the real paths of the ``files``
        followed through symlinks, which of the changed paths ``asked`` are not ours, and whether
        every ``active`` file is covered."""
        self.last_full = now
        w = self.watcher
        if w is None or not w.names_changes:
            return
        index = self.paths
        for f in files:
            if f.real != f.path:
                index[f.real] = f.ident
        unknown = [p for p in asked if p not in index]
        if len(self._unlisted) + len(unknown) > MAX_UNLISTED:
            self._unlisted.clear()
        self._unlisted.update(unknown)
        self._unlisted.difference_update(index)
        self.uncovered = False
        for f in active:
            if not w.covers(os.path.dirname(os.path.abspath(f.path))) or (
                    f.real != f.path and not w.covers(os.path.dirname(f.real))):
                self.uncovered = True
                break

    def stop(self) -> None:
        """Stop watching."""
        if self.watcher is not None:
            self.watcher.stop()
            self.watcher = None
