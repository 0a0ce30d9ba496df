"""Checking a state file's content before any of it is used (``--state-file``).

A state file may be damaged (a full disk, a crash of the file system, an edit by hand) or come
from another set of inputs. Every field is checked for its type, range and size here, so that no
malformed value reaches the store, the tailer or a parser. What can still be trusted is kept:
read positions one by one (a position only says where to go on reading a file, so a valid one
is safe on its own), and parser state per stream. The counters are kept only from a file that is
valid as a whole, because counters and positions are saved together and only agree together.
"""

from __future__ import annotations

import base64
import binascii
import math
import os
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import TypeGuard

from logmetrics.sources.chunks import Position
from logmetrics.sources.identity import is_fingerprint
from logmetrics.sources.tailfile import HEAD_BYTES

VERSION = 1
MAX_ID = (1 << 64) - 1  # device and inode numbers
MAX_OFFSET = (1 << 63) - 1  # a file offset (off_t)
MAX_BIRTH = (1 << 63) - 1  # a file's birth time, ns since the epoch
MAX_LABELS = 64  # label values of one series, more than any family has
MAX_BUCKETS = 256  # buckets of one histogram, more than any family has
MAX_HELD = 8 << 20  # characters of text a stream held back, uncounted (a sniffed stream holds up to 1 MiB)
MAX_PATH = 4096  # characters of a real path (PATH_MAX)


@dataclass
class State:
    """Everything a restart needs; ``inputs`` is None for a file saved before inputs were recorded."""

    saved_at: float = 0.0
    store: dict[str, list[list[object]]] = field(default_factory=dict)
    positions: list[Position] = field(default_factory=list)
    streams: list[dict[str, object]] = field(default_factory=list)
    inputs: list[str] | None = None
    #: saved positions named by a relative path that lies under none of the inputs from the
    #: directory logmetrics runs in now: it was started from another one
    elsewhere: list[str] = field(default_factory=list)


@dataclass
class Checked:
    """What a check of a state file's content found: the state to use, and what was wrong."""

    state: State
    problems: list[str] = field(default_factory=list)
    dropped_positions: int = 0  # positions left out as malformed


def normalised_inputs(paths: Sequence[str]) -> list[str]:
    """The PATH arguments as a state file records them: absolute and normalised, sorted, once each."""
    return sorted({p if p == "-" else os.path.normpath(os.path.abspath(p)) for p in paths})


def within(stream: str, inputs: Sequence[str]) -> bool:
    """Whether the file path ``stream`` lies under one of ``inputs`` (normalised PATH arguments)."""
    path = os.path.normpath(os.path.abspath(stream))
    for arg in inputs:
        if arg == "-":
            continue
        base = arg
        if any(c in arg for c in "*?["):  # a glob: what lies under its literal leading directories
            cut = min(i for i in (arg.find("*"), arg.find("?"), arg.find("[")) if i >= 0)
            base = os.path.dirname(arg[:cut]) or "/"
        if path == base or path.startswith(base.rstrip("/") + "/"):
            return True
    return False


def _is_int(v: object, top: int) -> TypeGuard[int]:
    return isinstance(v, int) and not isinstance(v, bool) and 0 <= v <= top


def _is_amount(v: object) -> bool:
    """A value a counter or a histogram's sum may hold: a finite number, not negative."""
    return isinstance(v, int | float) and not isinstance(v, bool) and math.isfinite(v) and v >= 0


def _is_number(v: object) -> bool:
    """A value a gauge may hold: a finite number."""
    return isinstance(v, int | float) and not isinstance(v, bool) and math.isfinite(v)


def _labels(v: object) -> bool:
    return isinstance(v, list) and len(v) <= MAX_LABELS and all(isinstance(x, str) for x in v)


def _store_problem(store: object) -> str | None:
    """Why the saved counters, gauges and histograms cannot be used, or None."""
    if not isinstance(store, dict):
        return "store is not an object"
    for key in store:
        if key not in ("counters", "gauges", "histograms"):
            return f"store has an unknown part {key[:40]!r}"
    counters, histograms, gauges = store.get("counters", []), store.get("histograms", []), store.get("gauges", [])
    if not isinstance(counters, list) or not isinstance(histograms, list) or not isinstance(gauges, list):
        return "store's counters, gauges and histograms are not lists"
    for i, row in enumerate(gauges):
        if not (isinstance(row, list) and len(row) == 3 and isinstance(row[0], str) and _labels(row[1])
                and _is_number(row[2])):
            return f"gauge {i} is not [name, labels, value]"
    for i, row in enumerate(counters):
        if not (isinstance(row, list) and len(row) == 3 and isinstance(row[0], str) and _labels(row[1])
                and _is_amount(row[2])):
            return f"counter {i} is not [name, labels, value >= 0]"
    for i, row in enumerate(histograms):
        if not (isinstance(row, list) and len(row) == 5 and isinstance(row[0], str) and _labels(row[1])
                and isinstance(row[2], list) and 0 < len(row[2]) <= MAX_BUCKETS
                and all(_is_int(b, MAX_OFFSET) for b in row[2]) and _is_amount(row[3])
                and _is_int(row[4], MAX_OFFSET)):
            return f"histogram {i} is not [name, labels, bucket counts, sum >= 0, count]"
    return None


def position_row(p: Position) -> dict[str, object]:
    """A read position in the state file's JSON form (``_position`` reads it back)."""
    return {"stream": p.stream, "path": p.path, "dev": p.dev, "ino": p.ino,
            "head": base64.b64encode(p.head).decode(), "offset": p.offset,
            **({"fp": p.fp} if p.fp is not None else {}), **({"real": p.real} if p.real is not None else {}),
            **({"birth": p.birth} if p.birth is not None else {})}


def _position(p: object) -> Position | None:
    """A saved read position, or None if any of its fields is malformed."""
    if not isinstance(p, dict):
        return None
    stream, path, dev, ino, head, offset = (p.get(k) for k in ("stream", "path", "dev", "ino", "head", "offset"))
    fp = p.get("fp")  # the fingerprint at the offset; none in a file saved before they were kept (then
    # the head alone says whether a file found is the one saved)
    real = p.get("real")  # where a file reached through a symlink really is; none for the others
    if real is not None and not (isinstance(real, str) and real and "\x00" not in real and len(real) <= MAX_PATH):
        return None
    birth = p.get("birth")  # when the file was created; none where the system does not tell
    if birth is not None and not _is_int(birth, MAX_BIRTH):
        return None
    if not (isinstance(stream, str) and stream and isinstance(path, str) and path and "\x00" not in stream + path
            and _is_int(dev, MAX_ID) and _is_int(ino, MAX_ID) and _is_int(offset, MAX_OFFSET)
            and isinstance(head, str) and len(head) <= 4 * HEAD_BYTES and (fp is None or is_fingerprint(fp))):
        return None
    try:
        raw = base64.b64decode(head, validate=True)
    except (binascii.Error, ValueError):
        return None
    if len(raw) > HEAD_BYTES:
        return None
    return Position(stream, path, dev, ino, raw, offset, fp if isinstance(fp, str) else None, real,
                    birth if isinstance(birth, int) else None)


def _stream(s: object) -> dict[str, object] | None:
    """A stream's saved parser (``""``: not routed yet), its state, and the text it held back uncounted."""
    if isinstance(s, dict) and isinstance(s.get("key"), str) and isinstance(s.get("parser"), str) \
            and isinstance(s.get("state"), dict):
        held = s.get("held", "")
        if not (isinstance(held, str) and len(held) <= MAX_HELD and (not held or held.endswith("\n"))):
            return None
        out = {"key": s["key"], "parser": s["parser"], "state": s["state"], "held": held}
        at = s.get("held_at")  # the Unix time a stream still sniffed began to hold its text
        if isinstance(at, int | float) and not isinstance(at, bool) and 0 <= at < 1e11:
            out["held_at"] = float(at)
        return out
    return None


def check(data: object, mtime: float) -> Checked:
    """Check the parsed content of a state file written at ``mtime`` (its modification time).

    Never raises. ``problems`` is empty for a state to use whole; otherwise ``state`` holds what
    can still be trusted: valid read positions and parser state, no counters, and a ``saved_at``
    no later than the file's own time (so that no file changed since is taken for unchanged).
    """
    fallback = State(saved_at=max(0.0, mtime - 2.0))  # 2 s: timestamps may be coarse
    if not isinstance(data, dict):
        return Checked(fallback, ["not a JSON object"])
    version = data.get("version")
    if not (_is_int(version, MAX_ID) and version == VERSION):
        return Checked(fallback, [f"version {str(version)[:20]!r}, expected {VERSION}"])
    inputs = data.get("inputs")
    if inputs is not None and not (isinstance(inputs, list) and all(isinstance(i, str) for i in inputs)):
        return Checked(fallback, ["its inputs are not a list of paths"])
    problems: list[str] = []
    state = State(inputs=sorted(inputs) if isinstance(inputs, list) else None)
    saved_at = data.get("saved_at")
    if _is_amount(saved_at) and isinstance(saved_at, int | float) and 0 < saved_at <= mtime + 60:
        state.saved_at = float(saved_at)
    else:
        problems.append("saved_at is not a time before the file was written")
        state.saved_at = fallback.saved_at
    raw_positions = data.get("positions")
    if isinstance(raw_positions, list):
        dropped = 0
        for p in raw_positions:
            pos = _position(p)
            if pos is None:
                dropped += 1
            else:
                state.positions.append(pos)
        if dropped:
            problems.append(f"{dropped} of {len(raw_positions)} read positions are malformed")
    else:
        dropped = 0
        problems.append("positions is not a list")
    raw_streams = data.get("streams")
    if isinstance(raw_streams, list):
        streams = [s for s in (_stream(x) for x in raw_streams) if s is not None]
        if len(streams) != len(raw_streams):
            problems.append("some parser states are malformed")
        state.streams = streams
    else:
        problems.append("streams is not a list")
    store_problem = _store_problem(data.get("store"))
    if store_problem is not None:
        problems.append(store_problem)
    elif not problems:
        store = data["store"]
        state.store = {k: v for k, v in store.items() if isinstance(v, list)}
    return Checked(state, problems, dropped)
