"""The values a store holds and hands out: a histogram's buckets, a scrape's snapshot, and the
series changed since the last commit of the state file."""

from __future__ import annotations

from dataclasses import dataclass, field

from logmetrics.store.catalog import Family

Key = tuple[str, tuple[str, ...]]  # (family name, label values incl. backend and source)


@dataclass
class Histogram:
    """Non-cumulative bucket counts (the last one is +Inf), with sum and count."""

    buckets: list[int]
    sum: float = 0.0
    count: int = 0


@dataclass
class Changes:
    """Counter values, gauge values and histograms (buckets, sum, count) by series, for the state
    file; ``gone``: series forgotten (the gauges of a source gone, every series of one expired)."""

    counters: list[tuple[Key, float]] = field(default_factory=list)
    histograms: list[tuple[Key, list[int], float, int]] = field(default_factory=list)
    gauges: list[tuple[Key, float]] = field(default_factory=list)
    gone: list[Key] = field(default_factory=list)


@dataclass
class Snapshot:
    """A consistent copy of the store's values for one scrape."""

    counters: dict[Key, float]
    gauges: dict[Key, float]
    histograms: dict[Key, Histogram]
    families: dict[str, Family]
