"""The resume state: read positions saved by an earlier run (``--state-file``), and what the first
polls after a restart found of them.

A saved file still there (by identity, starting with the same bytes and with the same fingerprint
at its position) is read on from its position; the tailer's placement decides the rest with what
this holds: the PATH arguments the positions were saved for, when they were saved, the saved files
found still whole (no copy of one of them can be new), those that waited for a descriptor at the
first poll, those the first listing did not show (looked for once more, kept in the state
meanwhile), and the files that did not change while logmetrics was down (read from their end).
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from dataclasses import dataclass, field

from logmetrics.sources.chunks import Position
from logmetrics.sources.copies import same_head_at
from logmetrics.sources.discovery import covers
from logmetrics.sources.identity import other_birth_at
from logmetrics.sources.tailfile import Ident


@dataclass
class ResumeState:
    """Saved read positions and what the first polls after the restart found of them."""

    saved: dict[Ident, Position] = field(default_factory=dict)  # positions saved by an earlier run
    inputs: list[str] | None = None  # the PATH arguments they were saved for (None: not known)
    at: float | None = None  # when they were saved (Unix time); None: no state was resumed
    whole: set[Ident] = field(default_factory=set)  # saved files found whole at the first poll: no copies
    later: set[Ident] = field(default_factory=set)  # files that waited for a descriptor at the first poll
    #: saved files the first listing did not show: looked for once more (a listing may miss a file
    #: renamed while it runs), and kept in the state meanwhile
    unseen: dict[Ident, Position] = field(default_factory=dict)
    unchanged: set[Ident] = field(default_factory=set)  # unchanged since the save: read from their end

    def restore(self, positions: Sequence[Position], saved_at: float, inputs: Sequence[str] | None = None) -> None:
        """Go on from ``positions``, saved at ``saved_at`` for the PATH arguments ``inputs``."""
        self.saved = {(p.dev, p.ino): p for p in positions}
        self.at = saved_at
        self.inputs = None if inputs is None else list(inputs)

    def named(self, path: str) -> bool:
        """Whether one of the PATH arguments the positions were saved for names ``path`` (all do,
        if they are not known): a file under a new one is placed as at a first start."""
        return self.inputs is None or any(covers(arg, path) for arg in self.inputs)

    def still_whole(self, paths: list[str]) -> set[Ident]:
        """At the first poll after a restart: the saved files among ``paths`` that are still whole (as
        long as their position, starting with their saved head), renamed maybe but not cut. Logs of
        identical lines make any new file start like a saved one: it is no copy of one of these. A
        file born at another time than the saved one it has the inode of is another file: the saved
        one was deleted, and is not whole, whatever the new one starts with."""
        whole: set[Ident] = set()
        for path in paths:
            try:
                st = os.stat(path)
                saved = self.saved.get((st.st_dev, st.st_ino))
                if saved is None or st.st_size < saved.offset or other_birth_at(path, saved.birth):
                    continue  # (born at another time: a new file that got the saved file's inode)
                if same_head_at(path, saved.head):
                    whole.add((st.st_dev, st.st_ino))
            except OSError:
                continue  # gone, or out of descriptors: not known whole (a copy of it stays possible)
        return whole
