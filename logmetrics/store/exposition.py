"""Exposition: the store read at scrape time, rendered as text 0.0.4 or OpenMetrics.

The format is chosen by the scraper's ``Accept`` header as ``prometheus_client`` chooses it. Our
own registry is rendered straight from a store snapshot (:class:`~logmetrics.store.render.Renderer`,
byte-identical to ``prometheus_client``'s output, in time proportional to the series); any other
registry, and the formats we do not render ourselves, go through ``prometheus_client``. Serving it
over HTTP is :mod:`logmetrics.serve.server`'s job; ``--oneshot`` prints the renderer's text without
this module.
"""

from __future__ import annotations

from collections.abc import Iterator
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

from logmetrics.store.catalog import Family
from logmetrics.store.render import ExtraSource, Renderer, StoreView, go_float, label_names
from logmetrics.store.store import Store
from logmetrics.store.values import Key, Snapshot

V = TypeVar("V")


def _family(fam: Family, own: bool, snap: Snapshot) -> Metric:
    names = label_names(fam, own)
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
    bounds = [go_float(b) for b in fam.buckets] + ["+Inf"]
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

    def __init__(self, view: StoreView) -> None:
        self.view = view

    def collect(self) -> Iterator[Metric]:
        """Every catalog family with samples, then the engine's own families."""
        snap, fams = self.view.gather()
        for fam, own in fams:
            yield _family(fam, own, snap)


class StoreRegistry(CollectorRegistry):
    """A registry holding only our collector, rendered by :class:`Renderer` where it can."""

    def __init__(self, view: StoreView) -> None:
        super().__init__(auto_describe=False)
        self.view = view
        self.register(StoreCollector(view))
        self.renderer = Renderer(view)


def make_registry(store: Store, extra: ExtraSource | None = None) -> CollectorRegistry:
    """A registry holding only our collector (no default process/platform collectors)."""
    return StoreRegistry(StoreView(store, extra))


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


def host_port(host: str, port: int) -> str:
    """``HOST:PORT`` as the user writes it: ``[::1]:9877`` for IPv6, ``:9877`` for every interface."""
    return f"[{host}]:{port}" if ":" in host else f"{host}:{port}"
