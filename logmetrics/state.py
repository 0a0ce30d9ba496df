"""The state file (``--state-file``): counters, read positions and parser state across restarts.

Saved together at a quiet moment, when every line read has been counted, so that a restart goes
on where the last run stopped: counters continue instead of resetting, lines written while
logmetrics was down are counted, and none is counted twice. Written to a temporary file and
renamed over the old one, so a crash never leaves half a state.
"""

from __future__ import annotations

import base64
import json
import os
import time
from dataclasses import dataclass, field
from typing import Any

from logmetrics.sources import Position

VERSION = 1


class StateError(Exception):
    """A state file that cannot be used."""


@dataclass
class State:
    """Everything a restart needs."""

    saved_at: float = 0.0
    store: dict[str, list[list[object]]] = field(default_factory=dict)
    positions: list[Position] = field(default_factory=list)
    streams: list[dict[str, object]] = field(default_factory=list)


def save(path: str, state: State) -> None:
    """Write ``state`` to ``path`` atomically."""
    data = {
        "version": VERSION,
        "saved_at": state.saved_at or time.time(),
        "store": state.store,
        "positions": [{"stream": p.stream, "path": p.path, "dev": p.dev, "ino": p.ino,
                       "head": base64.b64encode(p.head).decode(), "offset": p.offset} for p in state.positions],
        "streams": state.streams,
    }
    tmp = f"{path}.tmp"
    with open(tmp, "w", encoding="utf-8") as f:
        json.dump(data, f, separators=(",", ":"))
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, path)


def load(path: str) -> State | None:
    """The state saved at ``path``; None if there is none yet; ``StateError`` if it is unusable."""
    try:
        with open(path, encoding="utf-8") as f:
            data: Any = json.load(f)
    except FileNotFoundError:
        return None
    except (OSError, ValueError) as exc:
        raise StateError(f"cannot read state file {path}: {exc}") from exc
    try:
        if data["version"] != VERSION:
            raise StateError(f"state file {path} has version {data['version']!r}, expected {VERSION}")
        positions = [Position(str(p["stream"]), str(p["path"]), int(p["dev"]), int(p["ino"]),
                              base64.b64decode(p["head"]), int(p["offset"])) for p in data["positions"]]
        store = data["store"]
        streams = data["streams"]
        if not isinstance(store, dict) or not isinstance(streams, list):
            raise TypeError("store must be an object and streams a list")
        return State(float(data["saved_at"]), store, positions, streams)
    except (KeyError, TypeError, ValueError) as exc:
        raise StateError(f"state file {path} is malformed: {type(exc).__name__}: {exc}") from exc
