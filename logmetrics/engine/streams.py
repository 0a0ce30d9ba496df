"""A stream as the engine keeps it: one per followed file, stdin, or compose service within one."""

from __future__ import annotations

from dataclasses import dataclass, field

from logmetrics.plugins import Parser, ZeroKey, ZeroSeries
from logmetrics.records import RecordAssembler


def stream_key(path: str, service: str | None) -> str:
    """The key of a raw stream, or of one compose service (journald unit) inside it."""
    return path if service is None else f"{path}\0{service}"


@dataclass
class Stream:
    """One logical stream: its source label, its parser and the text it holds back."""

    source: str
    path: str
    service: str | None = None  # its name in the raw stream's envelope (a compose service, a pm2 app)
    parser: Parser | None = None
    routed: bool = False
    assembler: RecordAssembler = field(default_factory=RecordAssembler)
    held: list[str] = field(default_factory=list)
    held_lines: int = 0
    time: float = 0.0
    unmatched: int = 0  # lines parsed before the first match; -1 once one matched or it was reported
    model: str | None = None  # a static model label (--label)
    started: set[ZeroKey] = field(default_factory=set)  # the series its parser's zero_series started
    zero_named: dict[str, list[ZeroSeries]] = field(default_factory=dict)  # its lists, as last checked, per model
    fed_at: float = 0.0  # monotonic time of the stream's last text (of its file's last write, if earlier)
    held_since: float = 0.0  # monotonic time of the first text held while the stream is not routed
    weak: bool = False  # its best sniff so far is weak: the engine waits for a telling line
    unknown: bool = False  # no parser recognises what it holds so far (it waits for more lines)
    said: bool = False  # that it is unknown was said (once, at INFO)
    announce: str | None = None  # readiness learned or restored: backend_ready 1 for this model with the next batch
