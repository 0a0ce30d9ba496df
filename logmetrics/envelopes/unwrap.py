"""Envelopes: container wrappers peeled off the raw lines of one stream.

An :class:`Unwrapper` takes the raw bytes of one stream (whole lines, each ending in ``\\n``) and
hands back :class:`Piece` objects holding decoded text without the container envelope:

* ``docker-json``: Docker's json-file driver, one ``{"log": ..., "stream": ..., "time": ...}``
  object a line; a ``log`` value without a trailing newline is a partial entry (Docker splits
  lines longer than 16 KiB) and is joined with the following entries of the same stream.
* ``cri``: the Kubernetes CRI file format, ``<RFC3339Nano> <stream> <P|F> <content>``; ``P``
  fragments are joined, per stream, up to the ``F`` line that ends them.
* ``docker-timestamps``: ``docker logs -t`` / ``kubectl logs --timestamps`` output.
* ``compose``: ``docker compose logs`` output, ``service  | content``; one piece per service.
* ``journald``: ``journalctl`` output (``short``, ``short-iso``, their ``-precise`` forms or
  ``short-full``; with or without the host), ``Jan 02 03:04:05 host unit[pid]: content``; one piece
  per unit, which becomes the source like a compose service.
* ``kubectl``: ``kubectl logs --prefix`` output, ``[pod/NAME/CONTAINER] content``; one piece per
  pod and container (``NAME/CONTAINER`` becomes the source).
* ``pm2``: ``pm2 logs`` output, ``ID|NAME  | content`` (pm2's own lines ``PM2  | ``); one piece
  per app, whose name becomes the source.
* layered prefixes, outer first (see :data:`~logmetrics.envelopes.kinds.LAYERED`): e.g.
  ``compose+docker-timestamps`` for ``docker compose logs -t``, ``kubectl+docker-timestamps`` for
  ``kubectl logs --prefix --timestamps``, ``docker-timestamps+compose``, ``journald+compose``.
  Each layer is peeled in turn; the innermost name (service, unit, pod) becomes the source and
  the timestamp, where there is one, the piece's time. A line whose outer prefix is missing is
  kept whole (with the name of the line before it), as are its inner layers.
* ``none``: plain text, the hot path: decoded and cleaned a whole chunk at a time.

Every mode decodes UTF-8 with ``errors="replace"`` and removes NUL bytes, ANSI escape sequences
and carriage returns at line ends. With ``mode="auto"`` the kind is decided once per stream from
its first non-empty lines (:func:`logmetrics.envelopes.kinds.classify`), then fixed. Nothing here raises
on malformed input: lines that do not fit the envelope are kept as they are.

A line joined again from json-file partial entries or CRI ``P`` fragments is held at most up to
``max_line_bytes``: a longer one is cut there and let out at once, the rest of it (up to its final
entry) skipped, and counted in ``truncated``, like the tailer's own cap on raw lines.
"""

from __future__ import annotations

import re
from typing import Any, NamedTuple

import orjson

from logmetrics.envelopes.kinds import (
    COMPOSE_PREAMBLE,
    EVERY_LINE,
    JOURNAL_LINE,
    JOURNAL_MARK,
    LAYERED,
    MODES,
    PATTERNS,
    STAMPS,
    TS_PREFIX,
    classify,
    parse_rfc3339,
)
from logmetrics.envelopes.text import clean, cut_bytes, cut_line, newlines

__all__ = ["MODES", "Piece", "Unwrapper", "parse_rfc3339"]


class Piece(NamedTuple):
    """Decoded, unwrapped text of one stream (or of one compose service within it)."""

    service: str | None  # compose service name for `docker compose logs` lines, else None
    text: str  # whole lines, each ending in "\n", envelope and escape sequences removed
    time: float  # envelope timestamp of the last line (Unix seconds), else the feed() time
    lines: int  # number of lines in text


_SAMPLE_LINES = 10  # non-empty lines looked at to decide the kind of a stream
_SCAN_LINES = 50  # lines scanned at most to find them
_SAMPLE_CHARS = 4096  # only the start of each line matters for detection
_COMPACT_PARTS = 1024  # partial entries held per stream before they are joined into one (tiny parts)
# The prefix layers of each layered kind, outer first: (pattern, whether it is a timestamp).
_LAYERS = {kind: tuple((PATTERNS[layer], layer == STAMPS) for layer in kind.split("+")) for kind in LAYERED}
#: The prefixes of the kinds whose tool prefixes every line of its apps: inside another layer, a line
#: without one is the tool's own.
_EVERY_PATTERNS = frozenset(PATTERNS[kind] for kind in EVERY_LINE)


def _envelope_time(ts: object, default: float) -> float:
    """The parsed envelope timestamp, or ``default`` when there is none or it does not parse."""
    if isinstance(ts, bytes):
        ts = ts.decode("ascii", "replace")
    if isinstance(ts, str):
        parsed = parse_rfc3339(ts)
        if parsed is not None:
            return parsed
    return default


def _load_lossy(raw: bytes) -> tuple[Any, object]:
    """A json-file entry holding invalid UTF-8: parse it decoded with replacement characters."""
    text = raw.decode("utf-8", "replace")
    if "\ufffd" not in text:
        return None, None  # valid UTF-8, so it is simply not an entry
    try:
        obj: Any = orjson.loads(text)
        return obj, obj["log"]
    except (ValueError, KeyError, TypeError, IndexError):
        return None, None


def head_kind(data: bytes) -> str | None:
    """The envelope kind that the first non-empty lines of ``data`` show (``auto``), or None while
    it holds none."""
    sample: list[str] = []
    pos, size, scanned = 0, len(data), 0
    while pos < size and len(sample) < _SAMPLE_LINES and scanned < _SCAN_LINES:
        end = data.find(b"\n", pos)
        if end < 0:
            end = size
        line = clean(data[pos : min(end, pos + _SAMPLE_CHARS)].decode("utf-8", "replace"))
        pos, scanned = end + 1, scanned + 1
        line = line.rstrip("\r")
        if line.strip() and not COMPOSE_PREAMBLE.match(line) and not JOURNAL_MARK.match(line):
            sample.append(line)  # (the tools' own lines do not vote: compose's, journalctl's "-- ... --")
    return classify(sample) if sample else None


class Unwrapper:
    """Peels the envelope off the raw lines of one stream; keep one per stream.

    ``feed`` takes whole lines (a trailing incomplete line is held back until its newline comes or
    ``flush`` is called); ``flush`` emits what is still pending at the end of input. ``truncated``
    counts the joined lines cut at ``max_line_bytes``; the caller reads and resets it.
    """

    __slots__ = ("_cri_parts", "_cri_times", "_json_parts", "_json_times", "_last_time", "_rest",
                 "_service", "_sizes", "_skipping", "kind", "max_line_bytes", "mode", "truncated")

    def __init__(self, mode: str = "auto", *, max_line_bytes: int = 1 << 20) -> None:
        if mode not in MODES:
            raise ValueError(f"unknown envelope mode {mode!r} (expected one of: {', '.join(MODES)})")
        if max_line_bytes < 1:
            raise ValueError("max_line_bytes must be at least 1")
        self.mode = mode
        self.kind: str | None = None if mode == "auto" else mode
        self.max_line_bytes = max_line_bytes
        self.truncated = 0
        self._rest = b""  # an incomplete trailing line
        self._last_time = 0.0
        self._json_parts: dict[str, list[str]] = {}  # docker partial entries, per stream
        self._json_times: dict[str, object] = {}
        self._cri_parts: dict[bytes, list[bytes]] = {}  # CRI P fragments, per stream
        self._cri_times: dict[bytes, bytes] = {}
        self._sizes: dict[str | bytes, int] = {}  # bytes held in the parts, per stream
        self._skipping: set[str | bytes] = set()  # streams whose line was cut: the rest is skipped
        self._service: str | None = None  # compose service of the previous line

    def feed(self, data: bytes, time: float) -> list[Piece]:
        """Unwrap whole lines read at ``time`` (Unix seconds)."""
        self._last_time = time
        if self._rest:
            data = self._rest + data
            self._rest = b""
        if not data.endswith(b"\n"):
            cut = data.rfind(b"\n") + 1
            self._rest = data[cut:]
            data = data[:cut]
            if not data:
                return []
        kind = self.kind
        if kind is None:
            kind = self._detect(data)
        if kind == "none":
            text = clean(data.decode("utf-8", "replace"))
            return [Piece(None, text, time, newlines(data))]
        if kind == "docker-json":
            return self._docker(data, time)
        if kind == "cri":
            return self._cri(data, time)
        if kind == STAMPS:
            return self._stamps(data, time)
        layers = _LAYERS.get(kind)
        if layers is not None:
            return self._layered(data, time, layers)
        return self._grouped(data, time, JOURNAL_LINE if kind == "journald" else PATTERNS[kind], kind)

    def flush(self) -> list[Piece]:
        """End of input: emit the held-back line and partial entries that never got their end."""
        time = self._last_time
        rest, self._rest = self._rest, b""
        pieces = self.feed(rest + b"\n", time) if rest else []
        self._sizes.clear()
        self._skipping.clear()
        if self._json_parts:
            text = clean("".join("".join(parts) + "\n" for parts in self._json_parts.values()))
            last = list(self._json_times.values())[-1] if self._json_times else None
            pieces.append(Piece(None, text, _envelope_time(last, time), text.count("\n")))
            self._json_parts.clear()
            self._json_times.clear()
        if self._cri_parts:
            raw = b"".join(b"".join(parts) + b"\n" for parts in self._cri_parts.values())
            text = clean(raw.decode("utf-8", "replace"))
            last_b = list(self._cri_times.values())[-1] if self._cri_times else None
            pieces.append(Piece(None, text, _envelope_time(last_b, time), text.count("\n")))
            self._cri_parts.clear()
            self._cri_times.clear()
        return pieces

    def detect(self, head: bytes) -> None:
        """Decide the kind (``auto``) from ``head``, the first whole lines of the stream, before they
        are fed: a reader that feeds a stream in small pieces (a few lines of log time at a time)
        decides on as many lines as one that reads it whole."""
        if self.kind is None:
            self._detect(head)

    def _detect(self, data: bytes) -> str:
        """Decide the kind from the first non-empty lines of ``data``; fix it once decided."""
        kind = head_kind(data)
        if kind is None:
            return "none"  # nothing to go by yet: pass this chunk through, decide later
        self.kind = kind
        return kind

    def _hold(self, key: str | bytes, size: int) -> bool:
        """Count ``size`` more bytes held for the line of ``key``; False once that passes the cap."""
        held = self._sizes.get(key, 0) + size
        self._sizes[key] = held
        return held <= self.max_line_bytes

    def _docker(self, data: bytes, time: float) -> list[Piece]:
        out: list[str] = []
        last: object = None
        parts, times, skipping = self._json_parts, self._json_times, self._skipping
        sizes, cap = self._sizes, self.max_line_bytes
        loads = orjson.loads
        for raw in data.split(b"\n"):
            if not raw:
                continue
            try:
                obj: Any = loads(raw)
                log = obj["log"]
            except (ValueError, KeyError, TypeError, IndexError):
                obj, log = _load_lossy(raw)
            if not isinstance(log, str):
                out.append(raw.decode("utf-8", "replace") + "\n")  # not an entry: keep the line
                last = None
                continue
            stream = obj.get("stream")
            key = stream if isinstance(stream, str) else ""
            complete = log.endswith("\n")
            if skipping and key in skipping:  # the rest of a line already cut at the cap
                if complete:
                    skipping.discard(key)
                continue
            if not complete:
                pending = parts.setdefault(key, [])
                pending.append(log)
                times[key] = obj.get("time")
                if self._hold(key, len(log.encode())):
                    if len(pending) >= _COMPACT_PARTS:
                        pending[:] = ["".join(pending)]
                    continue
                log = cut_line("".join(parts.pop(key)), cap)  # too long: out now, cut; the rest is skipped
                del sizes[key]
                last = times.pop(key, None)
                skipping.add(key)
                self.truncated += 1
            elif parts and key in parts:  # the end of a line split into partial entries
                size = sizes.pop(key) + len(log.encode()) - 1
                log = "".join(parts.pop(key)) + log
                times.pop(key, None)
                if size > cap:
                    log = cut_line(log[:-1], cap)
                    self.truncated += 1
                last = obj.get("time")
            else:
                last = obj.get("time")
            out.append(log)
        if not out:
            return []
        text = clean("".join(out))
        return [Piece(None, text, _envelope_time(last, time), text.count("\n"))]

    def _cri(self, data: bytes, time: float) -> list[Piece]:
        out: list[bytes] = []
        last: bytes | None = None
        parts, times, skipping = self._cri_parts, self._cri_times, self._skipping
        sizes, cap = self._sizes, self.max_line_bytes
        for raw in data.split(b"\n"):
            if not raw:
                continue
            fields = raw.split(b" ", 3)
            if (len(fields) < 3 or len(fields[0]) < 20 or fields[0][4:5] != b"-" or fields[0][10:11] != b"T"
                    or fields[1] not in (b"stdout", b"stderr") or fields[2] not in (b"F", b"P")):
                out.append(raw + b"\n")  # not a CRI line: keep it
                last = None
                continue
            stamp, stream, tag = fields[0], fields[1], fields[2]
            content = fields[3] if len(fields) == 4 else b""
            if skipping and stream in skipping:  # the rest of a line already cut at the cap
                if tag == b"F":
                    skipping.discard(stream)
                continue
            if tag == b"P":
                pending = parts.setdefault(stream, [])
                pending.append(content)
                times[stream] = stamp
                if self._hold(stream, len(content)):
                    if len(pending) >= _COMPACT_PARTS:
                        pending[:] = [b"".join(pending)]
                    continue
                content = cut_bytes(b"".join(parts.pop(stream)), cap)  # too long: out now; the rest is skipped
                del sizes[stream], times[stream]
                skipping.add(stream)
                self.truncated += 1
            elif parts and stream in parts:  # the F that ends P fragments
                content = b"".join(parts.pop(stream)) + content
                del sizes[stream], times[stream]
                if len(content) > cap:
                    content = cut_bytes(content, cap)
                    self.truncated += 1
            out.append(content + b"\n")
            last = stamp
        if not out:
            return []
        text = clean(b"".join(out).decode("utf-8", "replace"))
        return [Piece(None, text, _envelope_time(last, time), text.count("\n"))]

    def _stamps(self, data: bytes, time: float) -> list[Piece]:
        lines = clean(data.decode("utf-8", "replace")).split("\n")
        lines.pop()  # the empty string after the final newline
        last: str | None = None
        match = TS_PREFIX.match
        for i, line in enumerate(lines):
            m = match(line)
            if m is None:
                last = None  # no timestamp: keep the line as it is
                continue
            cut = m.end()
            last = line[: cut - 1]
            lines[i] = line[cut:]
        lines.append("")
        return [Piece(None, "\n".join(lines), _envelope_time(last, time), len(lines) - 1)]

    def _grouped(self, data: bytes, time: float, prefix: re.Pattern[str], kind: str) -> list[Piece]:
        """Lines prefixed with a service (compose), unit (journald), pod (kubectl) or app (pm2): a piece
        per name. A line without the prefix continues the one before (journald's multi-line messages);
        of a kind in ``EVERY_LINE`` (the tool prefixes every line of its apps), it is the tool's own:
        the piece of no name (compose's "vllm-1 exited with code 137", pm2's "[TAILING]" header), as
        journalctl's own ``-- Boot ... --`` lines are."""
        every, journal = kind in EVERY_LINE, kind == "journald"
        lines = clean(data.decode("utf-8", "replace")).split("\n")
        lines.pop()
        groups: dict[str | None, list[str]] = {}
        service = self._service
        match = prefix.match
        for line in lines:
            m = match(line)
            if m is not None:
                service = next((name for name in m.groups() if name), service)
                line = line[m.end() :]
            elif (every and line) or (journal and line.startswith("-- ") and JOURNAL_MARK.match(line)):
                service = None
            group = groups.get(service)
            if group is None:
                group = groups[service] = []
            group.append(line)
        self._service = service
        return [Piece(name, "\n".join(group) + "\n", time, len(group)) for name, group in groups.items()]

    def _layered(self, data: bytes, time: float, layers: tuple[tuple[re.Pattern[str], bool], ...]) -> list[Piece]:
        """Layered prefixes, outer first: each is peeled in turn while it matches.

        The innermost name becomes the piece's source; the timestamp layer, the piece's time (that
        of its last line, else the feed time, as for ``docker-timestamps``).
        """
        lines = clean(data.decode("utf-8", "replace")).split("\n")
        lines.pop()
        groups: dict[str | None, list[str]] = {}
        stamps: dict[str | None, str | None] = {}
        service = self._service
        for line in lines:
            stamp = None
            pos = 0
            for pattern, is_stamp in layers:
                m = pattern.match(line, pos)
                if m is None:
                    if pattern in _EVERY_PATTERNS and pos < len(line):  # (compose's own line, inside)
                        service = None
                    break
                if is_stamp:
                    stamp = line[pos : m.end() - 1]
                elif m.lastindex:
                    service = m[m.lastindex]
                pos = m.end()
            group = groups.get(service)
            if group is None:
                group = groups[service] = []
            group.append(line[pos:] if pos else line)
            stamps[service] = stamp
        self._service = service
        return [Piece(name, "\n".join(group) + "\n", _envelope_time(stamps[name], time), len(group))
                for name, group in groups.items()]
