"""``logmetrics check``: what a parser makes of a file, for plugin authors.

Per rule: how many records matched and which events they produced; then the records that matched
nothing, grouped by shape (numbers, ids and quoted text blanked out), most frequent first.
"""

from __future__ import annotations

import logging
import os
import sys
import time
from collections import Counter, defaultdict
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import NamedTuple

from logmetrics import lazyre
from logmetrics.envelopes.kinds import own_lines
from logmetrics.envelopes.unwrap import Unwrapper
from logmetrics.errors import UserError
from logmetrics.events import SEEN, Event
from logmetrics.plugins.contract import PLUGIN_ERRORS, Parser, ZeroKey, record_rule, start_zeros
from logmetrics.plugins.finder import ParserEntry
from logmetrics.plugins.routing import SNIFF_LINES, route_text
from logmetrics.records import Batch, Record, split_records
from logmetrics.sources.discovery import discover, unreadable
from logmetrics.sources.layouts import Layouts
from logmetrics.store.catalog import BY_NAME
from logmetrics.store.store import Store

log = logging.getLogger(__name__)

SHAPES = (
    (lazyre.compile(r"'[^']*'|\"[^\"]*\""), "'…'"),
    (lazyre.compile(r"\b[0-9a-fA-F]{8,}\b|\b[\w-]*\d[\w-]*\b"), "#"),
)


def shape(line: str) -> str:
    """A line with its variable parts blanked, to group similar lines."""
    for rx, repl in SHAPES:
        line = rx.sub(repl, line)
    return line[:120]


def parse_one(parser: Parser, record: Record) -> list[Event]:
    """Events for one record, through ``parse`` or, if only that is implemented, ``parse_batch``."""
    if type(parser).parse is Parser.parse:
        text = record.text + "\n"
        return parser.parse_batch(Batch("check", text, record.time or 0.0, text.count("\n")))[0]
    return list(parser.parse(record))


def _read(path: str, envelope: str) -> tuple[list[tuple[str | None, str]], float, str | None]:
    """The unwrapped text of ``path`` per stream, as ``watch`` splits it: one per compose service
    (or journald unit), in the order they first appear; one with service ``None`` otherwise. Also
    the file's mtime and the envelope found (``None``: not told, as for an empty file)."""
    try:
        data = sys.stdin.buffer.read() if path == "-" else Path(path).read_bytes()
    except OSError as exc:
        raise UserError(f"cannot read {path}: {exc.strerror or exc}") from exc
    unwrapper = Unwrapper(envelope)
    mtime = time.time() if path == "-" else os.path.getmtime(path)
    pieces = unwrapper.feed(data if data.endswith(b"\n") or not data else data + b"\n", mtime)
    pieces += unwrapper.flush()
    streams: dict[str | None, list[str]] = {}
    for p in pieces:
        streams.setdefault(p.service, []).append(p.text)
    streamed = [(service, "".join(texts)) for service, texts in streams.items()] or [(None, "")]
    return streamed, mtime, unwrapper.kind


def _without_zero_starts(events: list[Event], counters: set[str], zeroed: dict[str, None]) -> list[Event]:
    """``events`` less the rules that only started counters at 0 (noted in ``zeroed``): no match."""
    by_rule: dict[str, list[Event]] = defaultdict(list)
    for ev in events:
        by_rule[ev.rule or ev.metric].append(ev)
    kept: list[Event] = []
    for evs in by_rule.values():
        if all(ev.value == 0 and ev.metric in counters for ev in evs):
            zeroed.update((f"{ev.metric}{{{','.join(ev.labels)}}}", None) for ev in evs)
        else:
            kept += evs
    return kept


#: What is wrong with a parser's fast path on a stream's text (``logmetrics.engine.fastcheck.problems``),
#: given by the caller: the check itself runs each record through ``parse``.
FastCheck = Callable[[type[Parser], str, float, tuple[str, ...]], list[str]]


class Tally(NamedTuple):
    """What one stream's check came to: where it is, its parser, its records, those matched (that
    counted something) and used (read without a count), parse errors and events refused."""

    where: str
    parser: str
    records: int
    matched: int
    used: int
    errors: int
    refused: int
    fast: int = 0  # problems of its fast path (it fails, makes refused events, or differs from parse)

    @property
    def faulty(self) -> bool:
        """Whether the parser failed on a record, made an event the engine would refuse, or has a
        fast path that fails or gives other figures than ``parse``."""
        return bool(self.errors or self.refused or self.fast)


def report(path: str, entries: dict[str, ParserEntry], *, parser: str | None, envelope: str,
           top: int, fast_check: FastCheck | None = None) -> tuple[str, bool]:
    """The text ``logmetrics check`` prints: one report per stream ``watch`` would make of ``path``
    (a ``docker compose logs`` file holds one per service, each routed by itself); and whether a
    parser failed on a record or made an event the engine would refuse (``Tally.faulty``)."""
    reports = _reports(path, entries, parser=parser, envelope=envelope, top=top, fast_check=fast_check)
    return "\n".join(text for text, _ in reports), any(t is not None and t.faulty for _, t in reports)


def _reports(path: str, entries: dict[str, ParserEntry], *, parser: str | None, envelope: str,
             top: int, fast_check: FastCheck | None = None) -> list[tuple[str, Tally | None]]:
    """Each stream's report on ``path`` and its tally (``None``: no parser took it)."""
    streams, mtime, kind = _read(path, envelope)
    layout = Layouts().of(path)
    wrapped = f" ({kind} envelope)" if kind not in (None, "none") else ""
    reports: list[tuple[str, Tally | None]] = []
    for service, text in streams:
        if layout is not None:
            names = layout.names
        elif service is not None:  # as the engine names a compose service's stream
            names = (os.path.basename(path), service, path)
        else:
            names = (os.path.basename(path), path)
        where = (path if service is None else f"{path} [service {service}]") + wrapped
        if own_lines(kind, service):
            lines = text.count("\n")
            reports.append((f"the envelope's own lines on {where}: {lines} line{'s' * (lines != 1)}, written by "
                            f"{kind} itself, not an app: read by no parser, counted unmatched\n", None))
            continue
        try:
            reports.append(_report_stream(where, text, mtime, names, entries, parser=parser, top=top,
                                          fast_check=fast_check))
        except UserError as exc:
            if len(streams) == 1:
                raise
            # one stream of several that no parser takes ('Attaching to ...' before compose's
            # prefixed lines): said, as watch -v says it, and the others reported
            lines = text.count("\n")
            reports.append((f"no parser on {where}: {lines} line{'s' * (lines != 1)}, counted unmatched "
                            f"({str(exc).split(': ', 1)[-1]})\n", None))
    if not any(tally is not None for _, tally in reports) and \
            not all(own_lines(kind, service) for service, _ in streams):  # (a tool's own lines only: said)
        raise UserError(f"{path}: no parser takes any of its {len(streams)} streams")
    return reports


def _shown(name: str) -> str:
    """``name`` on one row: a file name with a newline or another control character in it escaped."""
    return name if name.isprintable() else repr(name)[1:-1]


def summary(paths: Sequence[str], entries: dict[str, ParserEntry], *, parser: str | None,
            envelope: str, fast_check: FastCheck | None = None) -> tuple[str, bool]:
    """What ``logmetrics check`` prints for several files or a directory: a line per stream (its
    parser, records, those matched and used, the share read, and its faults), then the totals
    per parser; and whether any stream was faulty. Files under a directory or glob are found as
    ``watch`` finds them (what is no log left out)."""
    files = discover(paths, lambda err: log.warning("%s", unreadable(err)))
    if not files:
        raise UserError(f"no files under {', '.join(paths)}")
    head = f"{'parser':<16} {'records':>8} {'matched':>8} {'used':>6} {'read':>6}"
    out = [f"{head}  file"]
    totals: dict[str, list[int]] = defaultdict(lambda: [0, 0, 0, 0])
    faulty = False
    for path in files:
        try:
            reports = _reports(path, entries, parser=parser, envelope=envelope, top=0, fast_check=fast_check)
        except UserError as exc:
            out.append(f"{'-':<16} {'':>8} {'':>8} {'':>6} {'':>6}  {_shown(path)}: {str(exc).split(': ', 1)[-1]}")
            totals["(none)"][0] += 1
            continue
        for _, t in reports:
            if t is None:
                continue
            fast = f", fast path: {t.fast} problem{'s' * (t.fast != 1)}" if t.fast else ""
            faults = f" ({t.errors} parse errors, {t.refused} events refused{fast})" if t.faulty else ""
            faulty = faulty or t.faulty
            out.append(f"{t.parser:<16} {t.records:>8} {t.matched:>8} {t.used:>6} "
                       f"{_share(t.matched + t.used, t.records):>6}  {_shown(t.where)}{faults}")
            tot = totals[t.parser]
            tot[0], tot[1], tot[2], tot[3] = tot[0] + 1, tot[1] + t.records, tot[2] + t.matched, tot[3] + t.used
    out += ["", f"{'parser':<16} {'streams':>8} {'records':>8} {'matched':>8} {'used':>6} {'read':>6}"]
    for name, (n, records, matched, used) in sorted(totals.items()):
        share = _share(matched + used, records) if records else ""
        out.append(f"{name:<16} {n:>8} {records:>8} {matched:>8} {used:>6} {share:>6}")
    return "\n".join(out) + "\n", faulty


def _share(part: int, whole: int) -> str:
    return f"{100 * part / whole:.0f} %" if whole else "-"


def _report_stream(path: str, text: str, mtime: float, names: tuple[str, ...], entries: dict[str, ParserEntry],
                   *, parser: str | None, top: int, fast_check: FastCheck | None = None) -> tuple[str, Tally]:
    """The report on one stream's text, and its tally."""
    found = route_text(entries, parser, names, text, SNIFF_LINES)
    entry = found.entry
    if entry is None:
        raise UserError(f"{path}: {found.why}")
    inst = entry.cls()
    inst.named(names)
    store = Store()  # the engine's own checks, on a scratch store: what it would refuse is shown below,
    logging.getLogger("logmetrics.store.store").setLevel(logging.ERROR)  # not warned about on stderr too
    store.register(entry.cls.metrics)
    refused: Counter[str] = Counter()
    records = split_records(text, record_rule(entry.cls))
    counters = {f.name for f in (*BY_NAME.values(), *entry.cls.metrics) if f.kind == "counter"}
    rules: dict[str, int] = Counter()
    produced: dict[str, Counter[str]] = defaultdict(Counter)
    unmatched: Counter[str] = Counter()
    zeroed: dict[str, None] = {}  # series started at 0: they exist, but nothing was counted
    started: set[ZeroKey] = set()
    examples: dict[str, str] = {}
    errors = 0
    used = 0  # records that counted nothing but were read: a model named, a series started at 0
    for rec in records:
        model = getattr(inst, "model", None)
        try:
            events = parse_one(inst, Record(rec, mtime))
            if events:  # the engine's zero series for the parser's model (checked as watch checks them)
                events = start_zeros(inst, [inst.model], started) + events
            bad = store.apply(events, entry.name, path)
            for ev, reason in bad:
                refused[f"{getattr(ev, 'metric', ev)!r}: {reason}"[:200]] += 1
            if bad:  # listed apart; the rules show what was taken
                out_ids = {id(ev) for ev, _ in bad}
                events = [ev for ev in events if id(ev) not in out_ids]
        except PLUGIN_ERRORS as exc:  # reported per record: this is what check is for
            errors += 1
            events = [Event("logmetrics_parse_errors_total", (), 1, rule=f"error: {type(exc).__name__}: {exc}")]
        read = bool(events) or getattr(inst, "model", None) != model
        events = [ev for ev in events if ev != SEEN]
        events = _without_zero_starts(events, counters, zeroed)
        # a counter increment of 0 only makes its series exist: listed with those, not as a count
        zeroed.update((f"{ev.metric}{{{','.join(ev.labels)}}}", None)
                      for ev in events if ev.value == 0 and ev.metric in counters)
        events = [ev for ev in events if ev.value != 0 or ev.metric not in counters]
        if not events and read:
            used += 1
            continue
        if not events:
            first = rec.split("\n", 1)[0]
            key = shape(first)
            unmatched[key] += 1
            examples.setdefault(key, first[:160])
            continue
        for rule in {ev.rule or ev.metric for ev in events}:
            rules[rule] += 1
        for ev in events:
            labels = ",".join(ev.labels)
            produced[ev.rule or ev.metric][f"{ev.metric}{{{labels}}}"] += 1
    lines = text.count("\n")
    matched = len(records) - sum(unmatched.values()) - used
    out = [f"parser {entry.name} ({entry.origin}) on {path}: {lines} line{'s' * (lines != 1)}, "
           f"{len(records)} record{'s' * (len(records) != 1)}, "
           f"{matched} matched, {used} used, {sum(unmatched.values())} unmatched, "
           f"{errors} parse errors, {sum(refused.values())} events refused",
           f"routed: {found.why}", "",
           "rule                          records  events"]
    for rule, n in sorted(rules.items(), key=lambda kv: (-kv[1], kv[0])):
        out.append(f"{rule:<28} {n:>8}")
        for series, k in produced[rule].most_common(top):
            out.append(f"{'':<38}{k:>6} x {series}")
        if len(produced[rule]) > top:
            rest = produced[rule].most_common()[top:]
            out.append(f"{'':<38}{sum(k for _, k in rest):>6} x {len(rest)} more series (--top shows more)")
    if refused:
        out += ["", "events the engine would refuse (fix these in the parser):"]
        out += [f"{n:>8}  {what}" for what, n in refused.most_common(top)]
    counted = {series for got in produced.values() for series in got}
    zero_only = [series for series in zeroed if series not in counted]
    if zero_only:
        out += ["", f"series started at 0 (they exist from the start; no record counted in them): {len(zero_only)}"]
        out += [f"{'':<10}{series}" for series in zero_only]
    if used:
        out += ["", f"records used without a count (a model named, a state kept, series started at 0): {used}"]
    if unmatched:
        out += ["", f"unmatched records by shape (top {top}):"]
        out += [f"{n:>8}  {examples[key]}" for key, n in unmatched.most_common(top)]
    else:
        out += ["", "unmatched records: none"]
    fast = fast_check(entry.cls, text, mtime, names) if fast_check is not None else []
    if fast:
        out += ["", "its fast path, run as watch runs it (fix these in the parser):"]
        out += [f"{'':>8}  {problem}" for problem in fast]
    return "\n".join(out) + "\n", Tally(path, entry.name, len(records), matched, used, errors,
                                         sum(refused.values()), len(fast))
