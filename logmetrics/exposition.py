"""Exposition: the store read at scrape time by a custom Collector, served over HTTP.

``prometheus_client`` renders the text format 0.0.4 or OpenMetrics, chosen by the scraper's
``Accept`` header; ``--oneshot`` prints the same text on stdout.
"""

from __future__ import annotations

import contextlib
import errno
import ipaddress
import logging
import socket
import sys
import threading
from collections.abc import Callable, Iterator
from typing import TYPE_CHECKING, TypeVar

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

if TYPE_CHECKING:
    from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

V = TypeVar("V")
log = logging.getLogger(__name__)

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


TEXT = "text/plain; charset=utf-8"
INDEX = b'<html><body><h1>logmetrics</h1><a href="/metrics">/metrics</a></body></html>\n'


def host_port(host: str, port: int) -> str:
    """``HOST:PORT`` as the user writes it: ``[::1]:9877`` for IPv6, ``:9877`` for every interface."""
    return f"[{host}]:{port}" if ":" in host else f"{host}:{port}"


def _candidates(host: str, port: int) -> list[tuple[socket.AddressFamily, tuple[str, int], bool]]:
    """(family, address, dual-stack) to try in turn for a ``--listen`` host."""
    if host == "":  # every interface: IPv6 and IPv4 on one socket, or IPv4 alone without IPv6
        v4 = (socket.AF_INET, ("0.0.0.0", port), False)
        return [(socket.AF_INET6, ("::", port), True), v4] if socket.has_ipv6 else [v4]
    if ":" in host:
        return [(socket.AF_INET6, (host, port), ipaddress.ip_address(host.split("%", 1)[0]).is_unspecified)]
    family, _, _, _, address = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE)[0]
    return [(family, (str(address[0]), port), False)]


def _http_server(family: socket.AddressFamily, address: tuple[str, int], dual: bool,
                 handler: type[BaseHTTPRequestHandler]) -> ThreadingHTTPServer:
    """A threading HTTP server bound to ``address``; ``dual``: an IPv6 socket that takes IPv4 too."""
    from http.server import ThreadingHTTPServer  # not needed by --oneshot

    class Server(ThreadingHTTPServer):
        allow_reuse_address = True
        daemon_threads = True
        address_family = family

        def server_bind(self) -> None:
            if dual:  # where the OS lets one socket serve both
                with contextlib.suppress(OSError, AttributeError):
                    self.socket.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_V6ONLY, 0)
            super().server_bind()

        def handle_error(self, request: object, client_address: object) -> None:
            if not isinstance(sys.exc_info()[1], ConnectionError):  # a scraper that hung up is no error
                super().handle_error(request, client_address)  # type: ignore[arg-type]  # typeshed wants a socket

    return Server(address, handler)


class MetricsServer:
    """``/metrics``, ``/healthz`` and an index page on a background thread.

    A scrape that cannot be rendered answers 500 with a one-line reason (logged once per kind of
    error) and the next one is tried afresh; ``/healthz`` renders too and answers 503 while
    ``/metrics`` cannot be served. HEAD answers like GET, without the body.
    """

    def __init__(self, host: str, port: int, registry: CollectorRegistry) -> None:
        from http.server import BaseHTTPRequestHandler  # not needed by --oneshot

        self.registry = registry
        self._lock = threading.Lock()
        self._failing: dict[str, str] = {}  # content type -> an Accept header that failed to render
        self._logged: set[str] = set()
        server = self

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self) -> None:
                self._answer(head=False)

            def do_HEAD(self) -> None:
                self._answer(head=True)

            def _answer(self, head: bool) -> None:
                path = self.path.split("?", 1)[0]
                if path == "/metrics":
                    code, ctype, body = server.scrape(self.headers.get("Accept", ""))
                elif path in ("/healthz", "/-/healthy"):
                    code, ctype, body = server.health()
                elif path == "/":
                    code, ctype, body = 200, "text/html; charset=utf-8", INDEX
                else:
                    code, ctype, body = 404, TEXT, b"not found\n"
                self.send_response(code)
                self.send_header("Content-Type", ctype)
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                if not head:
                    self.wfile.write(body)

            def log_message(self, format: str, *args: object) -> None:
                """Scrapes are not worth a line each."""

        last: OSError | None = None
        for family, address, dual in _candidates(host, port):
            try:
                self.httpd = _http_server(family, address, dual, Handler)
                break
            except OSError as exc:  # no IPv6 here: every interface means IPv4 alone
                if exc.errno in (errno.EADDRINUSE, errno.EACCES):
                    raise
                last = exc
        else:
            assert last is not None
            raise last
        self.thread = threading.Thread(target=self.httpd.serve_forever, name="http", daemon=True)

    def scrape(self, accept: str) -> tuple[int, str, bytes]:
        """(status, content type, body) of ``/metrics`` for an ``Accept`` header."""
        try:
            body, ctype = render(self.registry, accept)
        except Exception as exc:  # a scrape that fails must not take the next ones down
            return 500, TEXT, self._failed(exc, accept)
        with self._lock:
            self._failing.pop(ctype, None)
        return 200, ctype, body

    def health(self) -> tuple[int, str, bytes]:
        """(status, content type, body) of ``/healthz``: 503 while ``/metrics`` cannot be served."""
        with self._lock:
            accepts = {"", *self._failing.values()}
        for accept in sorted(accepts):
            code, _, reason = self.scrape(accept)
            if code != 200:
                return 503, TEXT, reason
        return 200, TEXT, b"ok\n"

    def _failed(self, exc: Exception, accept: str) -> bytes:
        """Remember a failed render, log it once per kind, and give its one-line reason."""
        reason = " ".join(f"cannot render metrics: {type(exc).__name__}: {exc}".split())[:500]
        with self._lock:
            self._failing[choose_encoder(accept)[1]] = accept
            first = type(exc).__name__ not in self._logged
            self._logged.add(type(exc).__name__)
        if first:
            log.error("%s (answering 500 until the metrics render again)", reason, exc_info=exc)
        return (reason + "\n").encode("utf-8", "backslashreplace")

    @property
    def url(self) -> str:
        """The metrics URL, with the port actually bound."""
        host, port = str(self.httpd.server_address[0]), int(self.httpd.server_address[1])
        shown = "localhost" if host in ("0.0.0.0", "::", "") else host.replace("%", "%25")
        return f"http://{host_port(shown, port)}/metrics"

    def start(self) -> None:
        """Serve in the background."""
        self.thread.start()

    def stop(self) -> None:
        """Stop serving and close the socket."""
        self.httpd.shutdown()
        self.httpd.server_close()
