"""Exposition: the store read at scrape time, rendered as text 0.0.4 or OpenMetrics.

The format is chosen by the scraper's ``Accept`` header as ``prometheus_client`` chooses it. Our
own registry is rendered straight from a store snapshot (:class:`Renderer`, byte-identical to
``prometheus_client``'s output, in time proportional to the series); any other registry, and
the formats we do not render ourselves, go through ``prometheus_client``. ``--oneshot`` prints the
same text on stdout. Serving it over HTTP is :mod:`logmetrics.serve.server`'s job.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import TypeVar

from prometheus_client.core import (
    CollectorRegistry,
    CounterMetricFamily,
    GaugeMetricFamily,
    HistogramMetricFamily,
    Metric,
)
from prometheus_client.exposition import CONTENT_TYPE_PLAIN_0_0_4, choose_encoder, generate_latest
from prometheus_client.openmetrics.exposition import CONTENT_TYPE_LATEST as OPENMETRICS
from prometheus_client.registry import Collector
from prometheus_client.utils import floatToGoString

from logmetrics.store.catalog import COMMON_LABELS, SELF_BY_NAME, SELF_FAMILIES, Family
from logmetrics.store.store import Store
from logmetrics.store.values import Key, Snapshot

V = TypeVar("V")

# Samples computed at scrape time (tailer gauges, process metrics): (family, label values, value).
ExtraSource = Callable[[], list[tuple[str, tuple[str, ...], float]]]


def _label_names(fam: Family, own: bool) -> list[str]:
    return list(fam.labels) if own else [*COMMON_LABELS, *fam.labels]


def _family(fam: Family, own: bool, snap: Snapshot) -> Metric:
    names = _label_names(fam, own)
    if fam.kind == "counter":
        c = CounterMetricFamily(fam.base, fam.help, labels=names)
        for (_name, labels), value in sorted(_items(snap.counters, fam.name)):
            c.add_metric(list(labels), value)
        return c
    if fam.kind == "gauge":
        g = GaugeMetricFamily(fam.name, fam.help, labels=names)
        for (_name, labels), value in sorted(_items(snap.gauges, fam.name)):
            g.add_metric(list(labels), value)
        return g
    h = HistogramMetricFamily(fam.name, fam.help, labels=names)
    bounds = [floatToGoString(b) for b in fam.buckets] + ["+Inf"]  # type: ignore[no-untyped-call]  # untyped upstream
    for (_name, labels), hist in sorted(_items(snap.histograms, fam.name), key=lambda kv: kv[0]):
        cum, acc = [], 0
        for bound, n in zip(bounds, hist.buckets, strict=True):
            acc += n
            cum.append((bound, float(acc)))
        h.add_metric(list(labels), cum, hist.sum)
    return h


def _items(values: dict[Key, V], name: str) -> list[tuple[Key, V]]:
    return [(k, v) for k, v in values.items() if k[0] == name]


class StoreCollector(Collector):
    """Reads the store (and the tailer's gauges) when Prometheus scrapes."""

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

    def collect(self) -> Iterator[Metric]:
        """Every catalog family with samples, then the engine's own families."""
        snap, fams = self.gather()
        for fam, own in fams:
            yield _family(fam, own, snap)


class StoreRegistry(CollectorRegistry):
    """A registry holding only our collector, rendered by :class:`Renderer` where it can."""

    def __init__(self, store: Store, extra: ExtraSource | None = None) -> None:
        super().__init__(auto_describe=False)
        self.collector = StoreCollector(store, extra)
        self.register(self.collector)
        self.renderer = Renderer(self.collector)


def make_registry(store: Store, extra: ExtraSource | None = None) -> CollectorRegistry:
    """A registry holding only our collector (no default process/platform collectors)."""
    return StoreRegistry(store, extra)


def render(registry: CollectorRegistry, accept: str = "") -> tuple[bytes, str]:
    """The exposition body and its content type for an ``Accept`` header."""
    encoder, content_type = choose_encoder(accept)
    if isinstance(registry, StoreRegistry):
        kind = _direct(content_type)
        if kind is not None:
            return registry.renderer.render(openmetrics=kind), content_type
    return encoder(registry), content_type


def _direct(content_type: str) -> bool | None:
    """Whether the direct renderer writes this content type (True: as OpenMetrics), or None if it does not.

    It writes text 0.0.4 and 1.0.0 and OpenMetrics 1.0.0, with the escapings that leave our names
    as they are (all of them are valid legacy names): none, underscores, allow-utf-8.
    """
    if content_type in (CONTENT_TYPE_PLAIN_0_0_4, OPENMETRICS):
        return content_type == OPENMETRICS
    media, *params = (p.strip() for p in content_type.split(";"))
    values = dict(p.partition("=")[::2] for p in params)
    if values.get("escaping", "underscores") not in ("underscores", "allow-utf-8"):
        return None
    if media == "application/openmetrics-text" and values.get("version") == "1.0.0":
        return True
    if media == "text/plain" and values.get("version") in ("0.0.4", "1.0.0"):
        return False
    return None


def text(registry: CollectorRegistry) -> bytes:
    """Text format 0.0.4, as ``--oneshot`` prints it."""
    if isinstance(registry, StoreRegistry):
        return registry.renderer.render(openmetrics=False)
    return generate_latest(registry)


def _escape(value: str) -> str:
    return value.replace("\\", r"\\").replace("\n", r"\n").replace('"', r'\"')


class Renderer:
    """Text 0.0.4 and OpenMetrics 1.0.0 written straight from a store snapshot.

    The output is byte for byte what ``prometheus_client`` writes for the same samples (labels
    sorted by name, values as ``floatToGoString``), at a fraction of the cost: each family's series
    in their sorted order, with their line prefixes (name and label set), are kept between
    scrapes and sorted again only when the family's set of series changed; a scrape then costs
    one number formatted per sample. Safe to call from several threads at once.
    """

    def __init__(self, collector: StoreCollector) -> None:
        self.collector = collector
        # family name -> (its series, the series sorted with their line prefixes)
        self._orders: dict[str, tuple[frozenset[Key], list[tuple[Key, tuple[str, ...]]]]] = {}

    def _order(self, fam: Family, own: bool, keys: list[Key]) -> list[tuple[Key, tuple[str, ...]]]:
        """A family's series in prometheus_client's order, with their line prefixes."""
        cached = self._orders.get(fam.name)
        if cached is not None and len(cached[1]) == len(keys) and cached[0].issuperset(keys):
            return cached[1]
        known = dict(cached[1]) if cached is not None else {}
        names = _label_names(fam, own)
        order = []
        for key in sorted(keys):
            pre = known.get(key)
            if pre is None:
                pre = (_histogram_prefixes(fam, names, key[1]) if fam.kind == "histogram"
                       else (fam.name + _labels(names, key[1]) + " ",))
            order.append((key, pre))
        self._orders[fam.name] = (frozenset(keys), order)  # a race with another render stores the same
        return order

    def render(self, openmetrics: bool) -> bytes:
        """The whole exposition in one format."""
        snap, fams = self.collector.gather()
        groups: dict[str, list[Key]] = {}
        for values in (snap.counters, snap.gauges, snap.histograms):
            for key in values:
                groups.setdefault(key[0], []).append(key)
        for name in set(self._orders) - set(groups):
            self._orders.pop(name, None)  # a family with no series left keeps nothing
        out: list[str] = []
        fmt: Callable[[float], str] = floatToGoString  # one name looked up per sample, typed here
        for fam, own in fams:
            order = self._order(fam, own, groups.get(fam.name, []))
            out.extend(_header(fam, openmetrics))
            if fam.kind == "histogram":
                hists = snap.histograms
                for key, pre in order:
                    hist = hists[key]
                    acc = 0
                    for p, n in zip(pre, hist.buckets, strict=False):
                        acc += n
                        out.append(p + fmt(float(acc)) + "\n")
                    out.append(pre[-2] + fmt(float(acc)) + "\n")
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
        return [f"# HELP {fam.base} {_escape(fam.help)}\n", f"# TYPE {fam.base} {fam.kind}\n"]
    doc = fam.help.replace("\\", r"\\").replace("\n", r"\n")
    return [f"# HELP {fam.name} {doc}\n", f"# TYPE {fam.name} {fam.kind}\n"]


def _labels(names: list[str], values: tuple[str, ...], extra: tuple[str, str] | None = None) -> str:
    """``{name="value",...}`` sorted by name, or nothing for no labels."""
    pairs = list(zip(names, values, strict=True)) + ([extra] if extra else [])
    if not pairs:
        return ""
    return "{" + ",".join(f'{k}="{_escape(v)}"' for k, v in sorted(pairs)) + "}"


def _histogram_prefixes(fam: Family, names: list[str], values: tuple[str, ...]) -> tuple[str, ...]:
    """The line prefixes of a histogram series: one per bucket (+Inf last), then _count and _sum."""
    bounds = [floatToGoString(b) for b in fam.buckets] + ["+Inf"]  # type: ignore[no-untyped-call]  # untyped upstream
    plain = _labels(names, values)
    return (*(f"{fam.name}_bucket{_labels(names, values, ('le', b))} " for b in bounds),
            f"{fam.name}_count{plain} ", f"{fam.name}_sum{plain} ")




def host_port(host: str, port: int) -> str:
    """``HOST:PORT`` as the user writes it: ``[::1]:9877`` for IPv6, ``:9877`` for every interface."""
    return f"[{host}]:{port}" if ":" in host else f"{host}:{port}"
