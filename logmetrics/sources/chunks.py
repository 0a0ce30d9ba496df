"""What the sources hand the stages after them: chunks of whole lines, read positions for the
state file, the sources' own counters, and the error a PATH argument gives."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import NamedTuple


class Chunk(NamedTuple):
    """Whole lines read from one stream: ``data`` ends in ``b"\\n"``; ``time`` is when it was read;
    ``written``, when the read reached the end of a file, is when that file was last written."""

    stream: str
    data: bytes
    time: float
    written: float | None = None


class SourceError(Exception):
    """A PATH argument that cannot be followed; the message is one line for the user."""


@dataclass
class SourceStats:
    """The sources' own counters, per stream, updated by the tailer only and read at scrape time."""

    bytes_read: dict[str, int] = field(default_factory=dict)
    lines_truncated: dict[str, int] = field(default_factory=dict)
    rotations: dict[str, int] = field(default_factory=dict)
    truncations: dict[str, int] = field(default_factory=dict)
    read_errors: dict[str, int] = field(default_factory=dict)
    bytes_lost: dict[str, int] = field(default_factory=dict)
    files_lost: dict[str, int] = field(default_factory=dict)
    open_files: int = 0
    files_waiting: int = 0
    lag_bytes: dict[str, int] = field(default_factory=dict)

    def forget(self, streams: Iterable[str]) -> None:
        """Drop the figures of ``streams``, whose source expired."""
        tables = [v for v in vars(self).values() if isinstance(v, dict)]
        for stream in streams:
            for values in tables:
                values.pop(stream, None)


@dataclass(frozen=True, slots=True)
class Position:
    """How far a file was read, for a restart to go on from there (``--state-file``)."""

    stream: str
    path: str
    dev: int
    ino: int
    head: bytes  # the file's first bytes then: the same content must start with them
    offset: int  # the start of the first line not yet handed out
    fp: str | None = None  # its fingerprint at ``offset`` (``logmetrics.sources.identity``); None: not known
    real: str | None = None  # its real path (symlinks resolved), where ``path`` was a symlink; None: ``path``
    birth: int | None = None  # when the file was created, ns (``logmetrics.sources.identity.birth``); None: not known
