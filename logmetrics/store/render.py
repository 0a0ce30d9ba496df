"""The exposition text written straight from a store snapshot: text 0.0.4 and OpenMetrics 1.0.0.

``StoreView`` reads the store (and the samples computed at read time); ``Renderer`` writes what
``prometheus_client`` writes for the same samples, byte for byte. Nothing here imports
``prometheus_client``: ``--oneshot`` prints this text, and ``backfill`` writes its numbers, without
loading it and the HTTP modules it brings (a sixth of the start-up). The registry that serves
``/metrics`` (:mod:`logmetrics.store.exposition`) renders through the same ``Renderer``.
"""

from __future__ import annotations

import math
from bisect import insort
from collections.abc import Callable
from itertools import accumulate
from operator import itemgetter

from logmetrics.store.catalog import COMMON_LABELS, SELF_BY_NAME, SELF_FAMILIES, Family
from logmetrics.store.store import Store
from logmetrics.store.values import Key, Snapshot

# Samples computed at scrape time (tailer gauges, process metrics): (family, label values, value).
ExtraSource = Callable[[], list[tuple[str, tuple[str, ...], float]]]
#: Series new to a family at one scrape that are put in place one by one; more sort the family anew.
INSERT_MAX = 64


def go_float(value: float) -> str:
    """A sample value or bucket bound as Go writes it, the exposition formats' form (``+Inf``,
    ``NaN``, ``1.5e+07``): ``prometheus_client.utils.floatToGoString``'s output, which the tests
    hold this to."""
    if math.isinf(value):
        return "+Inf" if value > 0 else "-Inf"
    if math.isnan(value):
        return "NaN"
    s = repr(float(value))
    dot = s.find(".")
    if value > 0 and dot > 6:  # Go switches to an exponent sooner than Python
        mantissa = f"{s[0]}.{s[1:dot]}{s[dot + 1:]}".rstrip("0.")
        return f"{mantissa}e+{dot - 1:02d}"
    return s


def label_names(fam: Family, own: bool) -> list[str]:
    """A family's label names: the common ones first, but on the engine's own families."""
    return list(fam.labels) if own else [*COMMON_LABELS, *fam.labels]


class StoreView:
    """The store as a scrape reads it: a snapshot with the scrape-time samples added."""

    def __init__(self, store: Store, extra: ExtraSource | None = None) -> None:
        self.store = store
        self.extra = extra

    def gather(self) -> tuple[Snapshot, list[tuple[Family, bool]]]:
        """A snapshot with the scrape-time samples added, and its families with samples (own or not)."""
        snap = self.store.snapshot()
        if self.extra is not None:
            for name, labels, value in self.extra():
                fam = snap.families.get(name) or SELF_BY_NAME[name]
                (snap.counters if fam.kind == "counter" else snap.gauges)[(name, labels)] = value
        present = {k[0] for k in snap.counters} | {k[0] for k in snap.gauges} | {k[0] for k in snap.histograms}
        fams = [(fam, False) for fam in snap.families.values() if fam.name in present]
        return snap, fams + [(fam, True) for fam in SELF_FAMILIES if fam.name in present]


def text(view: StoreView) -> bytes:
    """Text format 0.0.4, as ``--oneshot`` prints it."""
    return Renderer(view).render(openmetrics=False)


def escape(value: str) -> str:
    """A label value or help text escaped for the exposition formats (backslash, newline, quote)."""
    return value.replace("\\", r"\\").replace("\n", r"\n").replace('"', r'\"')


class Renderer:
    """Text 0.0.4 and OpenMetrics 1.0.0 written straight from a store snapshot.

    The output is byte for byte what ``prometheus_client`` writes for the same samples (labels
    sorted by name, values as ``go_float``), at a fraction of the cost: each family's series
    in their sorted order, with their line prefixes (name and label set), are kept between
    scrapes and sorted again only when the family's set of series changed; a scrape then costs
    one number formatted per sample. Safe to call from several threads at once.
    """

    def __init__(self, view: StoreView) -> None:
        self.view = view
        # family name -> (its series, the series sorted with their line prefixes)
        self._orders: dict[str, tuple[frozenset[Key], list[tuple[Key, tuple[str, ...]]]]] = {}

    def _order(self, fam: Family, own: bool, keys: list[Key]) -> list[tuple[Key, tuple[str, ...]]]:
        """A family's series in prometheus_client's order, with their line prefixes. Series new
        since the last scrape are put in their places in the order kept; one gone sorts anew."""
        cached = self._orders.get(fam.name)
        if cached is not None:
            have, kept = cached
            if len(kept) == len(keys) and have.issuperset(keys):
                return kept
            new = [key for key in keys if key not in have]
            if len(kept) + len(new) == len(keys) and len(new) <= INSERT_MAX:  # only added, and few
                order = kept.copy()  # (a render on another thread may be reading the kept one)
                names = label_names(fam, own)
                for key in new:
                    insort(order, (key, _prefixes(fam, names, key)), key=itemgetter(0))
                self._orders[fam.name] = (have.union(new), order)
                return order
        known = dict(cached[1]) if cached is not None else {}
        names = label_names(fam, own)
        order = [(key, known.get(key) or _prefixes(fam, names, key)) for key in sorted(keys)]
        self._orders[fam.name] = (frozenset(keys), order)  # a race with another render stores the same
        return order

    def render(self, openmetrics: bool) -> bytes:
        """The whole exposition in one format."""
        snap, fams = self.view.gather()
        groups: dict[str, list[Key]] = {}
        for values in (snap.counters, snap.gauges, snap.histograms):
            for key in values:
                groups.setdefault(key[0], []).append(key)
        for name in set(self._orders) - set(groups):
            self._orders.pop(name, None)  # a family with no series left keeps nothing
        out: list[str] = []
        fmt = go_float  # one name looked up per sample
        for fam, own in fams:
            order = self._order(fam, own, groups.get(fam.name, []))
            out.extend(_header(fam, openmetrics))
            if fam.kind == "histogram":
                hists = snap.histograms
                for key, pre in order:
                    hist = hists[key]
                    # cumulative counts: whole numbers, under 1e6 written as repr writes them (inline)
                    cum = [r if len(r := repr(float(a))) < 9 else fmt(a) for a in accumulate(hist.buckets)]
                    out.extend([p + c + "\n" for p, c in zip(pre, cum, strict=False)])
                    out.append(pre[-2] + (cum[-1] if cum else "0.0") + "\n")
                    out.append(pre[-1] + fmt(hist.sum) + "\n")
            else:
                values = snap.counters if fam.kind == "counter" else snap.gauges
                # repr is Go's form for a finite value with under 7 integer digits: the common case, inline
                out.extend([pre[0] + (r if len(r := repr(float(values[key]))) < 9 and r[-1] not in "fn"
                                      else fmt(values[key])) + "\n" for key, pre in order])
        if openmetrics:
            out.append("# EOF\n")
        return "".join(out).encode("utf-8")


def _header(fam: Family, openmetrics: bool) -> list[str]:
    """The HELP and TYPE lines of a family, as prometheus_client writes them."""
    if openmetrics:
        return [f"# HELP {fam.base} {escape(fam.help)}\n", f"# TYPE {fam.base} {fam.kind}\n"]
    doc = fam.help.replace("\\", r"\\").replace("\n", r"\n")
    return [f"# HELP {fam.name} {doc}\n", f"# TYPE {fam.name} {fam.kind}\n"]


def _labels(names: list[str], values: tuple[str, ...], extra: tuple[str, str] | None = None) -> str:
    """``{name="value",...}`` sorted by name, or nothing for no labels."""
    pairs = list(zip(names, values, strict=True)) + ([extra] if extra else [])
    if not pairs:
        return ""
    return "{" + ",".join(f'{k}="{escape(v)}"' for k, v in sorted(pairs)) + "}"


def _prefixes(fam: Family, names: list[str], key: Key) -> tuple[str, ...]:
    """The line prefixes of a series: one for a counter or gauge, those of ``_histogram_prefixes``."""
    if fam.kind == "histogram":
        return _histogram_prefixes(fam, names, key[1])
    return (fam.name + _labels(names, key[1]) + " ",)


def _histogram_prefixes(fam: Family, names: list[str], values: tuple[str, ...]) -> tuple[str, ...]:
    """The line prefixes of a histogram series: one per bucket (+Inf last), then _count and _sum."""
    bounds = [go_float(b) for b in fam.buckets] + ["+Inf"]
    plain = _labels(names, values)
    return (*(f"{fam.name}_bucket{_labels(names, values, ('le', b))} " for b in bounds),
            f"{fam.name}_count{plain} ", f"{fam.name}_sum{plain} ")
