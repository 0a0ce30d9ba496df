"""The store: plain Python values that events update, one lock taken per batch.

No ``prometheus_client`` metric object is touched per line; the exposition reads a snapshot of
this store at scrape time. Label values that come from log text pass through the cardinality
guard (``logmetrics.store.guard``). ``apply`` refuses values a family cannot take (NaN,
infinities, negative counter increments and observations), counting them per parser and metric.
"""

from __future__ import annotations

import logging
import threading
from bisect import bisect_left
from collections import Counter
from collections.abc import Iterable
from dataclasses import dataclass, field
from functools import partial

from logmetrics.events import SEEN, Event
from logmetrics.store.catalog import BY_NAME, SELF_BY_NAME, Family
from logmetrics.store.guard import LabelGuard, safe_label
from logmetrics.store.values import Changes, Histogram, Key, Snapshot

log = logging.getLogger(__name__)

INF = float("inf")
NAN = float("nan")
MALFORMED = "__malformed__"  # the metric label of refused events that name no known family
REJECTED = "logmetrics_values_rejected_total"

#: The one engine counter that parsers feed with events (``parsers.pairs``), under their own name.
TIMED_OUT = "logmetrics_requests_timed_out_total"

#: The readiness gauge. A parser that sets it to 0 (the backend shut down, died or failed to
#: start) resets every other gauge of that backend and source to 0: nothing runs, waits or is
#: cached in a dead server, and a zero keeps the series continuous where an absent one would look
#: like a scrape failure. The next stats line after a restart sets them again.
READY = "backend_ready"


@dataclass
class Store:
    """Counters, gauges and histograms keyed by (family name, label values incl. backend, source)."""

    families: dict[str, Family] = field(default_factory=lambda: dict(BY_NAME))
    counters: dict[Key, float] = field(default_factory=dict)
    gauges: dict[Key, float] = field(default_factory=dict)
    histograms: dict[Key, Histogram] = field(default_factory=dict)
    lock: threading.Lock = field(default_factory=threading.Lock)
    #: Moves at every batch applied (``apply``, ``add_self_many``): a render made before it moved is old.
    version: int = 0
    #: the cardinality guard of the label values that come from log text
    guard: LabelGuard = field(default_factory=LabelGuard)
    _unknown: set[str] = field(default_factory=set)
    _warned: set[Key] = field(default_factory=set)
    #: Series whose labels the guard admitted unchanged, by (metric, backend, source, the event's
    #: own labels): their next events skip the checks (one per series; a gauge forgotten with its
    #: source is admitted again).
    _admitted: dict[tuple[str, str, str, tuple[str, ...]], tuple[Family, Key]] = field(default_factory=dict)
    #: Series changed since the last ``changes`` (for ``--state-file``): one set add per event, a few
    #: tens of nanoseconds; and the gauges forgotten since.
    _dirty: set[Key] = field(default_factory=set)
    _gone: set[Key] = field(default_factory=set)
    #: The gauges of each (backend, source), for ``_reset`` (some may be forgotten since: it looks
    #: them up), where a scan of every gauge at each stop of a backend made a run over many sources
    #: quadratic.
    _of_source: dict[tuple[str, str], set[Key]] = field(default_factory=dict)
    #: a state file takes ``changes``: forgotten series are kept in ``_gone`` for it (``watch``
    #: without a state file turns this off, so that weeks of expired series are not kept for nothing)
    journaled: bool = True

    @property
    def limits(self) -> dict[str, int]:
        """Distinct values allowed per label before folding (``label_limits`` in the config file)."""
        return self.guard.limits

    @limits.setter
    def limits(self, value: dict[str, int]) -> None:
        self.guard.limits = value

    def register(self, families: Iterable[Family]) -> None:
        """Add a plugin's own families (validated at load)."""
        for fam in families:
            self.families[fam.name] = fam

    def apply(self, events: Iterable[Event], backend: str, source: str) -> list[tuple[object, str]]:
        """Apply one batch of a stream's events (from parser ``backend``) under the lock.

        Events a family cannot take are refused and counted in ``logmetrics_values_rejected_total``:
        values NaN or infinite everywhere, negative in counters and histograms; unknown families,
        the wrong number of labels, label values that are not strings, objects that are no Event.
        Returns the refused events with the reason for each (``logmetrics check`` shows them).
        """
        refused: list[tuple[object, str]] = []
        with self.lock:
            self.version += 1
            for ev in events:
                try:
                    self._one(ev, backend, source, refused)
                except (TypeError, AttributeError, ValueError, IndexError) as exc:  # a plugin's malformed event
                    self._malformed(ev, backend, exc)
                    refused.append((ev, f"malformed: {exc}"))
        return refused

    def _observations(self, ev: Event, backend: str, source: str, refused: list[tuple[object, str]]) -> None:
        """A histogram event with a tuple of observations: each observed, the checks done once (in C:
        the smallest value, and the sum, which is NaN or infinite if any value is)."""
        values = ev.value
        assert isinstance(values, tuple)
        if not values:
            return
        try:
            total = float(sum(values))
            ok = min(values) >= 0.0 and total < INF  # a string or None in it: TypeError above
        except (TypeError, OverflowError, ValueError):
            ok = False
        if not ok:
            for v in values:  # something is wrong: each value through the checks, refused one by one
                self._one(ev._replace(value=v), backend, source, refused)
            return
        self._one(ev._replace(value=values[0]), backend, source, refused)  # admits the series
        hit = self._admitted.get((ev.metric, ev.backend or backend, source, ev.labels))
        hist = self.histograms.get(hit[1]) if hit is not None else None
        if hist is None:  # labels folded by the guard: the checks again for each
            for v in values[1:]:
                self._one(ev._replace(value=v), backend, source, refused)
            return
        counts = hist.buckets
        rest = values[1:]
        for i, n in Counter(map(partial(bisect_left, self.families[ev.metric].buckets), rest)).items():
            counts[i] += n
        hist.sum += sum(rest)
        hist.count += len(rest)

    def _one(self, ev: Event, backend: str, source: str, refused: list[tuple[object, str]]) -> None:
        """Apply one event (lock held); raises TypeError and the like on a malformed one."""
        if type(ev) is Event and type(ev.value) is tuple and ev.metric in self.families \
                and self.families[ev.metric].kind == "histogram":  # (other families refuse a tuple below)
            self._observations(ev, backend, source, refused)
            return
        if type(ev) is Event and type(ev.labels) is tuple:
            hit = self._admitted.get((ev.metric, ev.backend or backend, source, ev.labels))
            one = ev.value
            if hit is not None and not isinstance(one, tuple) and \
                    (type(one) is float or (type(one) is int and one < 1 << 53)) and 0.0 <= one < INF:
                known, key = hit  # a series met before, its labels admitted unchanged: no checks again
                self._dirty.add(key)
                kind = known.kind
                if kind == "counter":
                    self.counters[key] = self.counters.get(key, 0.0) + one
                    return
                if kind == "gauge":
                    if one or ev.metric != READY:  # (ready at 0 resets the backend's gauges: below)
                        self.gauges[key] = float(one)
                        return
                hist = self.histograms.get(key)
                if hist is not None:
                    hist.buckets[bisect_left(known.buckets, one)] += 1
                    hist.sum += one
                    hist.count += 1
                    return
        fam = self.families.get(ev.metric)
        if fam is None and ev == SEEN:  # a record understood, no figure
            return
        if fam is None and ev.metric == TIMED_OUT and not ev.labels:
            fam, ev = SELF_BY_NAME[TIMED_OUT], ev._replace(labels=(backend,))
        if fam is None or len(ev.labels) != len(fam.labels):
            self._reject(ev, backend)
            refused.append((ev, "no such metric" if fam is None else
                            f"{len(fam.labels)} label values wanted ({', '.join(fam.labels)}), got {len(ev.labels)}"))
            return
        kind, raw = fam.kind, ev.value
        value: float = NAN if isinstance(raw, tuple) else raw  # observations of a non-histogram: refused
        try:
            if type(value) is int:
                value = float(value)  # OverflowError past a float's range
            ok = -INF < value < INF if kind == "gauge" else 0.0 <= value < INF
        except (TypeError, OverflowError):  # not a number at all, or too large for one
            ok = False
        if not ok:
            self._refuse(ev, backend)
            refused.append((ev, f"a {kind} cannot take the value {ev.value!r}"))
            return
        if fam.name == TIMED_OUT:  # an engine counter: its own labels, no backend or source
            self.counters[(TIMED_OUT, ev.labels)] = self.counters.get((TIMED_OUT, ev.labels), 0.0) + value
            return
        full = (ev.backend or backend, source, *ev.labels)
        labels = self.guard.admit(ev.metric, full, fam, self.counters, self._tables)
        key = (ev.metric, labels)
        self._dirty.add(key)
        if labels is full and type(ev) is Event and type(ev.labels) is tuple:
            self._admitted[(ev.metric, full[0], source, ev.labels)] = (fam, key)
        if kind == "counter":
            self.counters[key] = self.counters.get(key, 0.0) + value
        elif kind == "gauge":
            self.gauges[key] = value
            self._of_source.setdefault((labels[0], labels[1]), set()).add(key)
            if not value and ev.metric == READY:
                self._reset(labels[0], labels[1])
        else:
            hist = self.histograms.get(key)
            if hist is None:
                hist = self.histograms[key] = Histogram([0] * (len(fam.buckets) + 1))
            hist.buckets[bisect_left(fam.buckets, value)] += 1
            hist.sum += value
            hist.count += 1

    def _refuse(self, ev: Event, parser: str) -> None:
        """Count a refused value per parser and metric; warn once for each pair (lock held)."""
        key = (REJECTED, (parser, ev.metric))
        self.counters[key] = self.counters.get(key, 0.0) + 1
        if key not in self._warned:
            self._warned.add(key)
            kind = self.families[ev.metric].kind
            log.warning("parser %s gave %s the value %r, which a %s cannot take: refused "
                        "(counted in %s)", parser, ev.metric, ev.value, kind, REJECTED)

    def _malformed(self, ev: object, parser: str, exc: Exception) -> None:
        """Count an event that is no proper Event (bad labels, not an Event at all); warn once per parser."""
        metric = getattr(ev, "metric", None)
        name = metric if isinstance(metric, str) and metric in self.families else MALFORMED
        key = (REJECTED, (parser, name))
        self.counters[key] = self.counters.get(key, 0.0) + 1
        if (REJECTED, (parser, MALFORMED)) not in self._warned:
            self._warned.add((REJECTED, (parser, MALFORMED)))
            log.warning("parser %s gave a malformed event %.200r (%s): refused (counted in %s)",
                        parser, ev, exc, REJECTED)

    def _reset(self, backend: str, source: str) -> None:
        """A backend stopped (its ready gauge went to 0): its other gauges go to 0 (lock held)."""
        gauges = self.gauges
        for key in self._of_source.get((backend, source), ()):
            if key[0] != READY and key in gauges:
                gauges[key] = 0.0
                self._dirty.add(key)

    def set_self(self, name: str, labels: tuple[str, ...], value: float) -> None:
        """Set one of the engine's own gauges (``logmetrics_*``)."""
        assert name in SELF_BY_NAME, name
        with self.lock:
            self.gauges[(name, labels)] = value

    def _reject(self, ev: Event, parser: str) -> None:
        """Count an event for an unknown family, or with the wrong number of labels (lock held)."""
        name = ev.metric if ev.metric in self.families else MALFORMED
        key = (REJECTED, (parser, name))
        self.counters[key] = self.counters.get(key, 0.0) + 1
        if ev.metric not in self._unknown:
            self._unknown.add(ev.metric)
            log.warning("parser %s: dropping events for %r: not a known metric or wrong number of labels "
                        "(counted in %s)", parser, ev.metric, REJECTED)

    def drop_gauges(self, source: str) -> int:
        """Forget the gauges of a source that is gone; its counters stay until it expires."""
        with self.lock:
            stale = [key for key in self.gauges if len(key[1]) >= 2 and key[1][1] == source]
            self._forget(self.gauges, stale)
            # a gauge set again is admitted again (its label values counted by the guard anew)
            self._admitted = {k: v for k, v in self._admitted.items() if k[2] != source or v[0].kind != "gauge"}
            self._of_source = {k: v for k, v in self._of_source.items() if k[1] != source}
        return len(stale)

    def expire(self, sources: Iterable[str]) -> int:
        """Forget every series of ``sources``, gone long ago (``--expire-after``): counters,
        histograms, gauges and the engine's own per-source series. Returns how many."""
        gone = set(sources)
        if not gone:
            return 0
        own = {name for name, fam in SELF_BY_NAME.items() if fam.labels == ("source",)}

        def of_gone(key: Key) -> bool:  # a catalog family's source is its second label; ours, their only one
            name, labels = key
            if name.startswith("logmetrics_"):
                return name in own and labels[0] in gone
            return len(labels) >= 2 and labels[1] in gone

        with self.lock:
            counters = [key for key in self.counters if of_gone(key)]
            histograms = [key for key in self.histograms if of_gone(key)]
            gauges = [key for key in self.gauges if of_gone(key)]
            self._forget(self.counters, counters)
            self._forget(self.histograms, histograms)
            self._forget(self.gauges, gauges)
            self._admitted = {k: v for k, v in self._admitted.items() if k[2] not in gone}
            self._of_source = {k: v for k, v in self._of_source.items() if k[1] not in gone}
        return len(counters) + len(histograms) + len(gauges)

    def _forget(self, table: dict[Key, float] | dict[Key, Histogram], keys: list[Key]) -> None:
        """Delete ``keys`` from ``table`` (lock held), for the state file too; their label values
        free their places in the guard."""
        for key in keys:
            del table[key]
            self._dirty.discard(key)
            if self.journaled and not key[0].startswith("logmetrics_"):
                self._gone.add(key)
        if keys:
            self.guard.stale = True

    def add_self(self, name: str, labels: tuple[str, ...], value: float) -> None:
        """Add to one of the engine's own counters (``logmetrics_*``)."""
        assert name in SELF_BY_NAME, name
        with self.lock:
            key = (name, labels)
            self.counters[key] = self.counters.get(key, 0.0) + value

    def add_self_many(self, items: Iterable[tuple[str, tuple[str, ...], float]]) -> None:
        """Add to several of the engine's own counters under one lock."""
        counters = self.counters
        with self.lock:
            self.version += 1
            for name, labels, value in items:
                key = (name, labels)
                counters[key] = counters.get(key, 0.0) + value

    def dump(self) -> dict[str, list[list[object]]]:
        """Counters, gauges and histograms as plain JSON values, for ``--state-file`` (not ``logmetrics_*``)."""
        with self.lock:
            return {
                "counters": [[name, list(labels), value] for (name, labels), value in self.counters.items()
                             if not name.startswith("logmetrics_")],
                "gauges": [[name, list(labels), value] for (name, labels), value in self.gauges.items()
                           if not name.startswith("logmetrics_")],
                "histograms": [[name, list(labels), list(h.buckets), h.sum, h.count]
                               for (name, labels), h in self.histograms.items()],
            }

    def changes(self, everything: bool = False) -> Changes:
        """The series changed since the last call (every one, with ``everything``), and the gauges
        forgotten, for ``--state-file``; the engine's own ``logmetrics_*`` are left out, as in ``dump``."""
        with self.lock:
            dirty, self._dirty = self._dirty, set()
            gone, self._gone = self._gone, set()
            counters, histograms, gauges = self.counters, self.histograms, self.gauges
            keys = [*counters, *histograms, *gauges] if everything else dirty
            out = Changes(gone=[] if everything else
                          [k for k in gone if k not in gauges and k not in counters and k not in histograms])
            for key in keys:
                value = counters.get(key)
                if value is not None:
                    if not key[0].startswith("logmetrics_"):
                        out.counters.append((key, value))
                    continue
                h = histograms.get(key)
                if h is not None:
                    out.histograms.append((key, list(h.buckets), h.sum, h.count))
                    continue
                value = gauges.get(key)
                if value is not None and not key[0].startswith("logmetrics_"):
                    out.gauges.append((key, value))
            return out

    def load(self, data: dict[str, list[list[object]]]) -> int:
        """Take back what ``dump`` gave; series of families no longer known, or malformed, are left out.

        Returns how many series were restored. Values a series cannot hold (NaN, infinite or
        negative, as an older version may have saved them) are left out too.
        """
        restored = 0
        with self.lock:
            for row in data.get("counters", []):
                key = self._key(row, 3)
                if key is not None and isinstance(row[2], int | float) and 0 <= row[2] < INF:
                    self.counters[key] = self.counters.get(key, 0.0) + float(row[2])
                    restored += 1
            for row in data.get("gauges", []):
                key = self._key(row, 3)
                if key is not None and isinstance(row[2], int | float) and -INF < row[2] < INF:
                    self.gauges[key] = float(row[2])
                    if len(key[1]) >= 2:
                        self._of_source.setdefault((key[1][0], key[1][1]), set()).add(key)
                    restored += 1
            for row in data.get("histograms", []):
                key = self._key(row, 5)
                if key is None:
                    continue
                buckets, total, count = row[2], row[3], row[4]
                if (isinstance(buckets, list) and len(buckets) == len(self.families[key[0]].buckets) + 1
                        and all(isinstance(b, int) for b in buckets) and isinstance(total, int | float)
                        and 0 <= total < INF and isinstance(count, int)):
                    self.histograms[key] = Histogram([int(b) for b in buckets], float(total), count)
                    restored += 1
        return restored

    def _key(self, row: list[object], size: int) -> Key | None:
        """The store key of a dumped row, if its family is known and its labels fit."""
        if len(row) != size:
            return None
        name, labels = row[0], row[1]
        fam = self.families.get(name) if isinstance(name, str) else None
        if fam is None or not isinstance(labels, list) or len(labels) != len(fam.labels) + 2:
            return None
        return fam.name, tuple(safe_label(v) for v in labels)

    def _tables(self) -> tuple[dict[Key, float], dict[Key, float], dict[Key, Histogram]]:
        """The three tables of series, for the guard to count the live label values in."""
        return self.counters, self.gauges, self.histograms

    def snapshot(self) -> Snapshot:
        """A copy taken under the lock, for the exposition."""
        with self.lock:
            return Snapshot(
                dict(self.counters),
                dict(self.gauges),
                {k: Histogram(list(h.buckets), h.sum, h.count) for k, h in self.histograms.items()},
                dict(self.families),
            )
