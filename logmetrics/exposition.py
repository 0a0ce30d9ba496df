"""Exposition: the store read at scrape time by a custom Collector, served over HTTP.

``prometheus_client`` renders the text format 0.0.4 or OpenMetrics, chosen by the scraper's
``Accept`` header; ``--oneshot`` prints the same text on stdout.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator
from typing import TypeVar

from prometheus_client.core import (
    CollectorRegistry,
    CounterMetricFamily,
    GaugeMetricFamily,
    HistogramMetricFamily,
    Metric,
)
from prometheus_client.exposition import choose_encoder, generate_latest
from prometheus_client.registry import Collector
from prometheus_client.utils import floatToGoString

from logmetrics.catalog import COMMON_LABELS, SELF_BY_NAME, SELF_FAMILIES, Family
from logmetrics.store import Key, Snapshot, Store

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

    def collect(self) -> Iterator[Metric]:
        """Every catalog family with samples, then the engine's own families."""
        snap = self.store.snapshot()
        if self.extra is not None:
            for name, labels, value in self.extra():
                fam = snap.families.get(name) or SELF_BY_NAME[name]
                (snap.counters if fam.kind == "counter" else snap.gauges)[(name, labels)] = value
        present = {k[0] for k in snap.counters} | {k[0] for k in snap.gauges} | {k[0] for k in snap.histograms}
        for fam in snap.families.values():
            if fam.name in present:
                yield _family(fam, False, snap)
        for fam in SELF_FAMILIES:
            if fam.name in present:
                yield _family(fam, True, snap)


def make_registry(store: Store, extra: ExtraSource | None = None) -> CollectorRegistry:
    """A registry holding only our collector (no default process/platform collectors)."""
    registry = CollectorRegistry(auto_describe=False)
    registry.register(StoreCollector(store, extra))
    return registry


def render(registry: CollectorRegistry, accept: str = "") -> tuple[bytes, str]:
    """The exposition body and its content type for an ``Accept`` header."""
    encoder, content_type = choose_encoder(accept)
    return encoder(registry), content_type


def text(registry: CollectorRegistry) -> bytes:
    """Text format 0.0.4, as ``--oneshot`` prints it."""
    return generate_latest(registry)


class MetricsServer:
    """``/metrics`` and ``/healthz`` on a background thread."""

    def __init__(self, host: str, port: int, registry: CollectorRegistry) -> None:
        from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer  # not needed by --oneshot

        reg = registry

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self) -> None:
                path = self.path.split("?", 1)[0]
                if path == "/metrics":
                    body, ctype = render(reg, self.headers.get("Accept", ""))
                    self._send(200, ctype, body)
                elif path in ("/healthz", "/-/healthy"):
                    self._send(200, "text/plain; charset=utf-8", b"ok\n")
                elif path == "/":
                    self._send(200, "text/html; charset=utf-8",
                               b'<html><body><h1>logmetrics</h1><a href="/metrics">/metrics</a></body></html>\n')
                else:
                    self._send(404, "text/plain; charset=utf-8", b"not found\n")

            def _send(self, code: int, ctype: str, body: bytes) -> None:
                self.send_response(code)
                self.send_header("Content-Type", ctype)
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, format: str, *args: object) -> None:
                """Scrapes are not worth a line each."""

        class Server(ThreadingHTTPServer):
            allow_reuse_address = True
            daemon_threads = True

        self.httpd = Server((host, port), Handler)
        self.thread = threading.Thread(target=self.httpd.serve_forever, name="http", daemon=True)

    @property
    def url(self) -> str:
        """The metrics URL, with the port actually bound."""
        host, port = str(self.httpd.server_address[0]), int(self.httpd.server_address[1])
        shown = "localhost" if host in ("0.0.0.0", "::", "") else host
        if ":" in str(shown):
            shown = f"[{shown}]"
        return f"http://{shown}:{port}/metrics"

    def start(self) -> None:
        """Serve in the background."""
        self.thread.start()

    def stop(self) -> None:
        """Stop serving and close the socket."""
        self.httpd.shutdown()
        self.httpd.server_close()
