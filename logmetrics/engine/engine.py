"""The engine: chunks from the sources through envelopes, records and parsers into the store.

Each logical stream (a followed file, stdin, one compose service) has its own envelope state,
record assembler and parser instance. The parser of a stream is chosen once: ``--parser``, else
the parser that claims the path or source name, else the best ``sniff`` of its first lines. A file
in a Kubernetes or Docker layout (``logmetrics.sources.layouts``) takes its source label from its place
(``namespace/pod/container``, the container's name) and is claimed by its container's name (and
image) only, not by its path: a sidecar in a pod named ``vllm-0`` is not read as vLLM.

Static labels (``--label [GLOB:]model=NAME``) replace the model label of a stream's events: an
operator's setting wins over what the parser learned. Scoped ones (GLOB matched against the source
label, the path or the file name) win over unscoped ones; among each, the last one given. What
applies to each stream, the configuration file's inputs included, is ``logmetrics.engine.settings``.
A stream keeps what it was given when it was first seen: inputs changed by a reload apply to
streams seen after it.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Sequence

from logmetrics.engine.parsing import Applier
from logmetrics.engine.settings import Input, Settings, StaticLabel
from logmetrics.engine.streams import Stream, stream_key
from logmetrics.envelopes.kinds import own_lines
from logmetrics.envelopes.unwrap import Piece, Unwrapper
from logmetrics.plugins import PLUGIN_ERRORS, Parser, ParserEntry, record_rule
from logmetrics.plugins.routing import SNIFF_LINES, WEAK_SNIFF_LINES, Route, route_text
from logmetrics.records import MAX_RECORD_CHARS, RecordAssembler
from logmetrics.sources.chunks import Chunk
from logmetrics.store.store import Store

log = logging.getLogger(__name__)

SNIFF_MAX_CHARS = 1 << 20  # an unrecognised stream holds at most this much text while it is sniffed
#: A stream's last record, held back in case more of it comes, counts once the stream has been
#: quiet this long (seconds; at least one poll interval): a backend that writes a traceback or a
#: timing block line by line is not cut in two by a read that falls between its lines (as Vector's
#: and Fluent Bit's multi-line time-outs), while the delay to visible stays well under a second.
HOLD_SECONDS = 0.25
#: ... but a record that ends inside a Python traceback, before its exception line
#: (``records.shapes.ends_in_traceback``), is held this long: the rest of it is sure to come, and a
#: writer that pauses inside it (a log shipper's batch ending there, a process stalled) must not
#: make one error count twice.
UNFINISHED_HOLD_SECONDS = 10.0
IDLE_SLACK = 0.005  # a wait of ``hold`` seconds may end a hair early: its records are due all the same
#: A stream whose best sniff is weak (``Route.weak``) is held until a line tells which backend it is,
#: for at most this long and this many lines, then routed on what was seen (a busy vLLM server's
#: log can start with hundreds of access lines that a gateway prints too, before its first stats line).
WEAK_HOLD_SECONDS = 15.0
#: After this long holding lines no parser recognises, a stream is said to be unknown (at INFO, once)
#: and counted in ``logmetrics_streams_unrecognised``, while it waits for a telling line.
UNKNOWN_SAY_SECONDS = 2.0
WEAK_HOLD_LINES = WEAK_SNIFF_LINES


class Engine:
    """Routes chunks to streams and parsers and applies the resulting events to the store."""

    def __init__(self, parsers: dict[str, ParserEntry], store: Store, *, parser: str | None = None,
                 source: str | None = None, envelope: str = "auto", sniff_lines: int = SNIFF_LINES,
                 max_line_bytes: int = 1 << 20, lines_truncated: dict[str, int] | None = None,
                 labels: Sequence[StaticLabel] = (), hold: float = HOLD_SECONDS) -> None:
        self.parsers = parsers
        self.hold = hold
        self.store = store
        self.settings = Settings(parser=parser, source=source, envelope=envelope, labels=labels)
        self.sniff_lines = sniff_lines
        self.max_line_bytes = max_line_bytes
        # Joined lines the envelopes cut, per raw stream: the tailer's own figures (SourceStats), so
        # that logmetrics_lines_truncated_total counts both.
        self.lines_truncated: dict[str, int] = {} if lines_truncated is None else lines_truncated
        self.unwrappers: dict[str, Unwrapper] = {}
        self.streams: dict[str, Stream] = {}
        # stream key -> parser ("": none), its state, the text it held uncounted; from the state file
        self._presets: dict[str, tuple[str, dict[str, object], str]] = {}
        self._changed: set[str] = set()  # streams fed since the last take_changed
        #: sources whose every stream is gone: since when (monotonic), and the raw streams that fed them
        self.orphans: dict[str, tuple[float, set[str]]] = {}
        for entry in parsers.values():
            store.register(entry.cls.metrics)
        self.applier = Applier(store, self.unwrappers)  # (after the plugins' families are registered)

    # -- input -------------------------------------------------------------------------------
    def set_inputs(self, inputs: Sequence[Input]) -> None:
        """The configuration file's inputs (at start, and at each reload): they apply to new streams."""
        self.settings.set_inputs(inputs)

    def source_label(self, path: str, service: str | None = None) -> str:
        """The ``source`` label of a raw stream (or of one compose service inside it): ``Settings.source_label``."""
        return self.settings.source_label(path, service)

    def _unwrapper(self, stream: str) -> Unwrapper:
        unwrapper = self.unwrappers.get(stream)
        if unwrapper is None:
            unwrapper = self.unwrappers[stream] = Unwrapper(self.settings.envelope_of(stream),
                                                            max_line_bytes=self.max_line_bytes)
        return unwrapper

    def envelope_from(self, stream: str, head: bytes) -> None:
        """Decide the envelope of a raw stream (``--envelope auto``) from its first whole lines,
        before they are fed (``report`` and ``backfill`` feed a file a step of log time at a time)."""
        self._unwrapper(stream).detect(head)

    def feed(self, chunk: Chunk) -> None:
        """Take one chunk of whole lines from a source."""
        unwrapper = self._unwrapper(chunk.stream)
        # The last record of a read is held until its stream is quiet for ``hold`` seconds: counted
        # from the file's last write, so that a backlog read long after it was written (a burst
        # read in several passes, or kept a while before its batch is parsed) is not held on top
        # of the time it took to read or to keep.
        quiet = 0.0 if chunk.written is None else \
            min(max(self.hold, UNFINISHED_HOLD_SECONDS), max(0.0, time.time() - chunk.written))
        fed_at = time.monotonic() - quiet
        for piece in unwrapper.feed(chunk.data, chunk.time):
            self._piece(chunk.stream, piece, fed_at)
        if unwrapper.truncated:
            self._truncated(chunk.stream, unwrapper)

    def idle(self, force: bool = False) -> None:
        """The input went quiet: the held-back records of streams quiet for ``hold`` seconds (of
        all streams, with ``force``) are complete now, and time-outs may be due."""
        self.applier.settle()
        now, mono = time.time(), time.monotonic()
        quiet = mono - self.hold + IDLE_SLACK
        unknown = 0
        for key, stream in self.streams.items():
            if stream.unknown and not stream.routed:
                unknown += 1
                if not stream.said and mono - stream.held_since >= UNKNOWN_SAY_SECONDS:
                    stream.said = True
                    log.info("stream %s: no parser recognises its first %d line%s yet; up to %d lines are held "
                             "for one that does, then they count as unmatched (name one with --parser NAME; "
                             "'logmetrics check %s' says why)", stream.source, stream.held_lines,
                             "s" * (stream.held_lines != 1), self.sniff_lines,
                             "FILE" if stream.path == "-" else stream.path)
            if stream.weak and not stream.routed and mono - stream.held_since >= WEAK_HOLD_SECONDS:
                self._route(stream, final=False)  # waited long enough for a telling line
                self._changed.add(key)
            if stream.assembler.pending and (force or (stream.fed_at <= quiet and (
                    not stream.assembler.unfinished() or stream.fed_at <= quiet - self._unfinished_extra()))):
                self._flush(stream)
                self._changed.add(key)
            parser = stream.parser
            if parser is not None and type(parser).tick is not Parser.tick and self.applier.tick(stream, parser, now):
                self._changed.add(key)  # (a tick that gives no event leaves nothing worth a commit)
        self.store.set_self("logmetrics_streams_unrecognised", (), unknown)

    def _flush(self, stream: Stream) -> None:
        """Parse the record ``stream`` holds back, now: not kept for a prescan (``logmetrics.engine.ahead``),
        as everything but ``feed`` leaves no batch unparsed where a parser or the store is read next."""
        self.applier.records(stream, *stream.assembler.flush())
        self.applier.settle()

    def flush_held(self, path: str | None = None) -> None:
        """Let every held-back record (of one raw stream, or of all) count now (``report``: at the
        end of each step of log time, so that a record counts at its own time, not at the next line's)."""
        self.applier.settle()
        for key, stream in self.streams.items():
            if stream.assembler.pending and (path is None or stream.path == path):
                self._flush(stream)
                self._changed.add(key)

    def due(self) -> float | None:
        """When (monotonic) the first held-back record is due to count, if one is held."""
        extra = self._unfinished_extra()
        fed = [s.fed_at + (extra if s.assembler.unfinished() else 0.0) for s in self.streams.values()
               if s.assembler.pending]
        return min(fed) + self.hold - IDLE_SLACK if fed else None

    def _unfinished_extra(self) -> float:
        """How much longer than ``hold`` a record cut inside a traceback is held."""
        return max(0.0, UNFINISHED_HOLD_SECONDS - self.hold)

    def holding(self) -> bool:
        """Whether a routed stream holds back a record that ``idle()`` will let out once it is quiet."""
        return any(s.assembler.pending and s.routed for s in self.streams.values())

    def finish(self, path: str | None = None) -> None:
        """End of input (of one raw stream, or of all): flush envelopes, route, flush records."""
        self.applier.settle()
        for name, unwrapper in self.unwrappers.items():
            if path is None or name == path:
                for piece in unwrapper.flush():
                    self._piece(name, piece, time.monotonic())
                if unwrapper.truncated:
                    self._truncated(name, unwrapper)
        for key, stream in self.streams.items():
            if path is None or stream.path == path:
                self._changed.add(key)
                if not stream.routed and stream.held:
                    self._route(stream, final=True)
                if stream.assembler.pending:
                    self._flush(stream)
                self.applier.settle()  # (what routing it gave: parsed before its count is read)
                if stream.unmatched > 0:
                    self.applier.no_match(stream)

    def vanished(self, path: str) -> None:
        """A followed file is gone for good: count what its streams still hold, then forget them;
        their gauges would only mislead now. Their counters stay until the source expires."""
        self.finish(path)
        self.unwrappers.pop(path, None)
        self.settings.forget(path)
        for key, stream in list(self.streams.items()):
            if stream.path == path:
                del self.streams[key]
                self._changed.discard(key)  # (the state file drops what is not live)
                # several files may feed one source (a restarted container's 0.log and 1.log)
                if all(s.source != stream.source for s in self.streams.values()):
                    self.store.drop_gauges(stream.source)
                    _, paths = self.orphans.pop(stream.source, (0.0, set()))
                    self.orphans[stream.source] = (time.monotonic(), paths | {path})

    def expired(self, after: float) -> list[tuple[str, set[str]]]:
        """The sources orphaned (every stream gone) at least ``after`` seconds ago, with the raw
        streams that fed them, forgotten here: the caller forgets their series."""
        self.applier.settle()
        now = time.monotonic()
        out = []
        for source, (since, paths) in self.orphans.items():  # in the order they were orphaned
            if now - since < after:
                break
            out.append((source, paths))
        for source, _ in out:
            del self.orphans[source]
        return out

    def learn(self, path: str, parts: Sequence[bytes]) -> None:
        """What was logged before a file's read position (its head, its last start-up block, in
        file order, whole lines): routes its streams and gives each parser's ``learn`` the text.
        Nothing is counted."""
        self.applier.settle()
        unwrapper = Unwrapper(self.settings.envelope_of(path), max_line_bytes=self.max_line_bytes)
        texts: dict[str | None, list[str]] = {}
        now = time.time()
        pieces = [p for part in parts for p in unwrapper.feed(part, now)] + unwrapper.flush()
        for piece in pieces:
            texts.setdefault(piece.service, []).append(piece.text)
        for service, text in texts.items():
            stream = self._stream(path, service)
            self._changed.add(stream_key(path, service))
            whole = "".join(text)
            if not stream.routed:
                found = self._choose(stream, whole)
                if found.entry is None:
                    continue
                self._route_to(stream, found)
            if stream.parser is not None:
                try:
                    stream.parser.learn(whole)
                except PLUGIN_ERRORS:  # a plugin's bug here must not stop the stream
                    log.exception("parser %s: learn failed", stream.parser.name)
                self.applier.readiness(stream)

    # -- restarts ----------------------------------------------------------------------------
    def stream_states(self, keys: set[str] | None = None) -> list[dict[str, object]]:
        """Each stream's parser (``""`` if not routed yet), its state and the text it holds back
        uncounted (a record that may go on, lines still sniffed), to go on with after a restart; of
        the streams ``keys`` only, if given. Streams saved before and not seen again yet are kept."""
        self.applier.settle()
        out: list[dict[str, object]] = []
        streams = self.streams
        for key in streams if keys is None else keys:
            s = streams.get(key)
            if s is None:
                continue
            held = "" if s.path == "-" else s.assembler.pending if s.routed else "".join(s.held)  # stdin: never
            if s.parser is not None:  # resumed from where it was
                out.append({"key": key, "parser": s.parser.name, "state": s.parser.state(), "held": held})
            elif held:  # still sniffed: since when (Unix time), so that a restart does not start its wait again
                out.append({"key": key, "parser": "", "state": {}, "held": held,
                            "held_at": round(time.time() - (time.monotonic() - s.held_since), 3)})
        for key, (name, state, held) in self._presets.items():
            if keys is None or key in keys:
                out.append({"key": key, "parser": name, "state": state, "held": held})
        return out

    def take_changed(self) -> set[str]:
        """The keys of the streams fed (or whose state may have changed) since the last call."""
        changed, self._changed = self._changed, set()
        return changed

    def stream_keys(self) -> set[str]:
        """Every stream key known: streams seen, and streams saved before and not seen again yet."""
        return set(self.streams) | set(self._presets)

    def restore_streams(self, states: list[dict[str, object]]) -> None:
        """Streams seen again get the parser (and its state) they had, without routing anew; the
        text a stream held back uncounted is held again, so that it is counted once, whole."""
        self.applier.settle()
        for item in states:
            key, name, state, held = item.get("key"), item.get("parser"), item.get("state"), item.get("held", "")
            if not (isinstance(key, str) and isinstance(name, str) and isinstance(state, dict)
                    and isinstance(held, str)):
                continue
            if name in self.parsers:
                self._presets[key] = (name, state, held)
            elif held:
                self._presets[key] = ("", {}, held)  # not routed then (or its parser is gone): sniffed again
            if held and key in self._presets:
                path, _, service = key.partition("\0")
                stream = self._stream(path, service or None)  # holds its text now: a quiet stream counts it too
                at = item.get("held_at")
                if not stream.routed and isinstance(at, float):  # its wait goes on from when it began
                    stream.held_since -= min(max(0.0, time.time() - at), WEAK_HOLD_SECONDS)

    def _truncated(self, path: str, unwrapper: Unwrapper) -> None:
        counts = self.lines_truncated
        counts[path] = counts.get(path, 0) + unwrapper.truncated
        unwrapper.truncated = 0

    def _stream(self, path: str, service: str | None) -> Stream:
        key = stream_key(path, service)
        stream = self.streams.get(key)
        if stream is None:
            stream = self.streams[key] = Stream(self.source_label(path, service), path, service)
            if self.orphans:
                self.orphans.pop(stream.source, None)  # back before it expired: it goes on
            stream.model = self.settings.static_model(stream.source, stream.path)
            preset = self._presets.pop(key, None)
            if preset is not None:
                self._preset(stream, *preset)
        return stream

    def _preset(self, stream: Stream, name: str, state: dict[str, object], held: str) -> None:
        """A stream seen again: its parser and state from the state file, and the text it held."""
        if name and self.settings.forced_of(stream.path) in (None, name):
            self._route_to(stream, Route(self.parsers[name], "kept", "kept from the state file"))
            assert stream.parser is not None
            try:
                stream.parser.restore(state)
            except Exception as exc:  # any parser, any saved state: a bad one must not stop the stream
                log.warning("stream %s: parser %s could not take back its saved state (%s: %s); it starts "
                            "afresh", stream.source, name, type(exc).__name__, exc)
            self.applier.readiness(stream)
        if not held:
            return
        if stream.routed:  # the record it held back: more of it may come, else it counts when quiet
            stream.assembler.pending, stream.assembler.pending_lines = held, held.count("\n")
            stream.fed_at, stream.time = time.monotonic(), time.time()
        else:  # still sniffed: it goes on waiting for a telling line
            stream.held, stream.held_lines, stream.held_since = [held], held.count("\n"), time.monotonic()
            self._route(stream, final=False)

    def _piece(self, path: str, piece: Piece, fed_at: float) -> None:
        """Take one piece of a raw stream; ``fed_at``: when its file was last written, if that is
        known to be earlier than now (monotonic)."""
        stream = self._stream(path, piece.service)
        self._changed.add(stream_key(path, piece.service))
        stream.time = piece.time
        self.store.add_self("logmetrics_lines_read_total", (stream.source,), piece.lines)
        self.store.set_self("logmetrics_last_line_timestamp_seconds", (stream.source,), piece.time)
        stream.fed_at = fed_at
        if stream.routed:
            self.applier.text(stream, piece.text, piece.lines)
            return
        if not stream.held:
            stream.held_since = time.monotonic()
        stream.held.append(piece.text)
        stream.held_lines += piece.lines
        self._route(stream, final=False)

    def _route(self, stream: Stream, *, final: bool) -> None:
        found = self._choose(stream)
        stream.weak = found.weak
        stream.unknown = found.entry is None
        if not final and sum(map(len, stream.held)) < SNIFF_MAX_CHARS:
            if found.entry is None and stream.held_lines < self.sniff_lines:
                return
            if (found.weak and stream.held_lines < WEAK_HOLD_LINES
                    and time.monotonic() - stream.held_since < WEAK_HOLD_SECONDS):
                return  # wait for a line that tells whose the stream is
        self._route_to(stream, found)

    def _route_to(self, stream: Stream, found: Route) -> None:
        stream.routed = True
        entry = found.entry
        if entry is not None:
            stream.parser = entry.cls()
            try:
                stream.parser.named(self.settings.names(stream.source, stream.path))
            except PLUGIN_ERRORS:  # a plugin's bug here must not stop the stream
                log.exception("parser %s: named failed", entry.name)
            stream.assembler = RecordAssembler(record_rule(entry.cls), min(self.max_line_bytes, MAX_RECORD_CHARS))
            log.info("stream %s: parser %s (%s)", stream.source, entry.name, found.why)
        elif own_lines(u.kind if (u := self.unwrappers.get(stream.path)) is not None else None, stream.service):
            log.info("stream %s: the envelope's own lines (written by the tool that wraps the apps' lines, not "
                     "an app): read by no parser, counted unmatched", stream.source)
        else:
            log.warning("stream %s: %s", stream.source, found.why)
        held, stream.held, stream.held_lines = stream.held, [], 0
        for text in held:
            self.applier.text(stream, text, None)

    def _choose(self, stream: Stream, first: str | None = None) -> Route:
        """The route of ``stream`` from its names and its first lines (``first``, else what it holds)."""
        text = "".join(stream.held) if first is None else first
        names = self.settings.names(stream.source, stream.path)
        return route_text(self.parsers, self.settings.forced_of(stream.path), names, text, self.sniff_lines)
