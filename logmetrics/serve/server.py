"""The HTTP endpoint: ``/metrics``, ``/healthz`` (``/-/healthy``) and ``/``, over HTTP or HTTPS.

One asyncio event loop on its own thread holds every connection, so idle keep-alive connections
and slow clients cost no worker; requests are parsed by ``h11`` (heads bounded to 16 KiB) and
renders run in a small thread pool. Identical scrapes that arrive while one is rendering (and
less than :data:`SHARE_WINDOW` after it started) share its result. Every stage has a time-out.
TLS and basic authentication come from a web config file (:mod:`logmetrics.serve.webconfig`), read
again when it changes: each new connection gets the certificate current when it arrives.
"""

from __future__ import annotations

import asyncio
import base64
import binascii
import concurrent.futures
import contextlib
import errno
import gzip
import ipaddress
import logging
import socket
import ssl
import threading
from http import HTTPStatus
from typing import Any, Protocol

from prometheus_client.core import CollectorRegistry
from prometheus_client.exposition import choose_encoder

from logmetrics.serve.webconfig import LiveWebConfig
from logmetrics.store.exposition import StoreRegistry, host_port, render

log = logging.getLogger(__name__)

TEXT = "text/plain; charset=utf-8"
INDEX = b'<html><body><h1>logmetrics</h1><a href="/metrics">/metrics</a></body></html>\n'
BACKLOG = max(socket.SOMAXCONN, 1024)
MAX_HEAD = 16 * 1024  # bytes of request line and headers; more is answered 431
IDLE_TIMEOUT = 60.0  # seconds a connection may wait for its next request
HEAD_TIMEOUT = 10.0  # seconds from a request's first byte to the end of its headers
HANDSHAKE_TIMEOUT = 10.0  # seconds for a TLS handshake
WRITE_TIMEOUT = 30.0  # seconds for a client to take a response
RENDER_TIMEOUT = 30.0  # seconds a request waits for its render before a 503
SHARE_WINDOW = 0.1  # seconds during which a render in progress is shared by identical scrapes
OPEN_WAIT = 30.0  # seconds a scrape waits for the server to be opened (a restart reading its backlog)
OPEN_POLL = 0.05  # ... looking this often
HEALTH_PATHS = ("/healthz", "/-/healthy")
Answer = tuple[int, str, bytes]


def _candidates(host: str, port: int) -> list[tuple[socket.AddressFamily, tuple[str, int], bool]]:
    """(family, address, dual-stack) to try in turn for a ``--listen`` host."""
    if host == "":  # every interface: IPv6 and IPv4 on one socket, or IPv4 alone without IPv6
        v4 = (socket.AF_INET, ("0.0.0.0", port), False)
        return [(socket.AF_INET6, ("::", port), True), v4] if socket.has_ipv6 else [v4]
    if ":" in host:
        return [(socket.AF_INET6, (host, port), ipaddress.ip_address(host.split("%", 1)[0]).is_unspecified)]
    family, _, _, _, address = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE)[0]
    return [(family, (str(address[0]), port), False)]


class Unparsed(Protocol):
    """Lines read and not parsed yet (``logmetrics.app.backlog``): parsed before a scrape renders."""

    reads: int  # moves when lines are kept: a render shared before then is not shared after
    reading: bool  # a scrape reads the files first: a render done before it is not shared

    def flush_for_scrape(self) -> None:
        """Read what was written, if ``reading``, and parse it now, unless the engine is busy for long."""


def _listen(host: str, port: int) -> socket.socket:
    """A listening socket for ``--listen`` (dual stack where asked and allowed), with a real backlog."""
    last: OSError | None = None
    for family, address, dual in _candidates(host, port):
        sock = socket.socket(family, socket.SOCK_STREAM)
        try:
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            if dual:  # where the OS lets one socket serve both
                with contextlib.suppress(OSError, AttributeError):
                    sock.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_V6ONLY, 0)
            if family == socket.AF_INET6 and "%" in address[0]:
                sock.bind(socket.getaddrinfo(*address, family, socket.SOCK_STREAM)[0][4])
            else:
                sock.bind(address)
            sock.listen(BACKLOG)
            sock.setblocking(False)
            return sock
        except OSError as exc:  # no IPv6 here: every interface means IPv4 alone
            sock.close()
            if exc.errno in (errno.EADDRINUSE, errno.EACCES):
                raise
            last = exc
    assert last is not None
    raise last


class MetricsServer:
    """``/metrics``, ``/healthz`` and an index page on a background thread.

    A scrape that cannot be rendered answers 500 with a one-line reason (logged once per kind of
    error) and the next one is tried afresh; ``/healthz`` renders too and answers 503 while
    ``/metrics`` cannot be served, and at once before the server is opened (``start``). HEAD
    answers like GET, without the body. Other paths answer 404, other methods 405. With users in
    the web config, everything but the health check needs their credentials (401 otherwise).
    """

    def __init__(self, host: str, port: int, registry: CollectorRegistry, web: LiveWebConfig | None = None,
                 workers: int = 4, unparsed: Unparsed | None = None) -> None:
        self.registry = registry
        self.web = web
        self.unparsed = unparsed
        self._lock = threading.Lock()
        self._failing: dict[str, str] = {}  # content type -> an Accept header that failed to render
        self._logged: set[str] = set()
        self.sock = _listen(host, port)
        self.address: tuple[str, int] = self.sock.getsockname()[:2]
        self._pool = concurrent.futures.ThreadPoolExecutor(workers, thread_name_prefix="render")
        self._auth_pool = concurrent.futures.ThreadPoolExecutor(2, thread_name_prefix="auth")
        self._loop = asyncio.new_event_loop()
        self._loop.set_exception_handler(_quiet)
        # per (format, gzip): when a render started, the store's version then, and the render
        self._renders: dict[tuple[str, bool], tuple[float, int, asyncio.Future[tuple[int, str, bytes, bytes]]]] = {}
        self._writers: set[asyncio.StreamWriter] = set()
        self._started = threading.Event()
        #: set once the counters may be shown (after the first pass; after a restart, once what was
        #: written while down is read): until then ``/healthz`` answers 503 at once and ``/metrics`` waits
        self.opened = threading.Event()
        self._ticker: asyncio.Task[None] | None = None  # held here: the loop keeps only a weak reference
        self.thread = threading.Thread(target=self._run, name="http", daemon=True)

    # --- what to answer ---------------------------------------------------------------------------

    def scrape(self, accept: str) -> Answer:
        """(status, content type, body) of ``/metrics`` for an ``Accept`` header."""
        try:
            if self.unparsed is not None:
                self.unparsed.flush_for_scrape()
            body, ctype = render(self.registry, accept)
        except Exception as exc:  # a scrape that fails must not take the next ones down
            return 500, TEXT, self._failed(exc, accept)
        with self._lock:
            self._failing.pop(ctype, None)
        return 200, ctype, body

    def health(self) -> Answer:
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

    def _version(self) -> int:
        """The store's version, where the registry renders one (``Store.version``), plus the reads
        kept unparsed (a scrape parses them first: its store moves)."""
        version = self.registry.view.store.version if isinstance(self.registry, StoreRegistry) else 0
        return version + (self.unparsed.reads if self.unparsed is not None else 0)

    def _scrape_encoded(self, accept: str, gz: bool) -> tuple[int, str, bytes, bytes]:
        """A scrape, gzipped if asked: (status, content type, body, content encoding)."""
        code, ctype, body = self.scrape(accept)
        if gz and code == 200:
            return code, ctype, gzip.compress(body, compresslevel=1, mtime=0), b"gzip"
        return code, ctype, body, b""

    # --- lifecycle ----------------------------------------------------------------------------------

    @property
    def tls(self) -> bool:
        """Whether the endpoint speaks HTTPS."""
        return self.web is not None and self.web.context is not None

    @property
    def url(self) -> str:
        """The metrics URL, with the port actually bound."""
        host, port = self.address
        shown = "localhost" if host in ("0.0.0.0", "::", "") else host.replace("%", "%25")
        return f"{'https' if self.tls else 'http'}://{host_port(shown, port)}/metrics"

    def start(self, opened: bool = True) -> None:
        """Serve in the background; not ``opened``: ``/metrics`` waits for ``open`` (up to
        ``OPEN_WAIT``) and ``/healthz`` answers 503 meanwhile."""
        if opened:
            self.opened.set()
        self.thread.start()
        self._started.wait(10)

    def open(self) -> None:
        """Show the counters from now on (see ``start``)."""
        self.opened.set()

    def stop(self) -> None:
        """Stop serving and close the socket."""
        if self.thread.is_alive():
            self._loop.call_soon_threadsafe(self._loop.stop)
            self.thread.join(10)
        else:
            self.sock.close()
        self._pool.shutdown(wait=False, cancel_futures=True)
        self._auth_pool.shutdown(wait=False, cancel_futures=True)

    def _run(self) -> None:
        loop = self._loop
        asyncio.set_event_loop(loop)
        server = loop.run_until_complete(asyncio.start_server(self._client, sock=self.sock, limit=MAX_HEAD * 4))
        self._ticker = loop.create_task(self._refresh_web()) if self.web is not None else None
        self._started.set()
        try:
            loop.run_forever()
        finally:
            server.close()
            for writer in list(self._writers):
                writer.transport.abort()
            tasks = asyncio.all_tasks(loop)
            for task in tasks:  # the connections and the ticker end now, each by its own handler
                task.cancel()
            with contextlib.suppress(Exception):
                loop.run_until_complete(asyncio.gather(*tasks, return_exceptions=True))
            loop.close()

    async def _refresh_web(self) -> None:
        """Look at the web config's files once a second (off the loop: they are read from disk)."""
        assert self.web is not None
        while True:
            await asyncio.get_running_loop().run_in_executor(self._auth_pool, self.web.refresh)
            await asyncio.sleep(1.0)

    # --- connections ------------------------------------------------------------------------------

    async def _client(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        """One connection: TLS handshake if configured, then requests until closed or idle."""
        self._writers.add(writer)
        try:
            if self.web is not None and self.web.context is not None:
                await writer.start_tls(self.web.context, ssl_handshake_timeout=HANDSHAKE_TIMEOUT)
            await self._requests(reader, writer)
        except (OSError, ssl.SSLError, TimeoutError, asyncio.IncompleteReadError, asyncio.CancelledError):
            pass  # a client that went away, failed its handshake or timed out: nothing to tell
        except Exception:  # a bug must cost one connection, not the server
            log.exception("HTTP connection failed")
        finally:
            self._writers.discard(writer)
            writer.transport.abort()

    async def _requests(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        import h11  # not needed by --oneshot

        conn = h11.Connection(h11.SERVER, max_incomplete_event_size=MAX_HEAD)
        loop = asyncio.get_running_loop()
        while True:
            head_deadline: float | None = None
            idle_deadline = loop.time() + IDLE_TIMEOUT
            try:
                while True:
                    event = conn.next_event()
                    if event is not h11.NEED_DATA:
                        break
                    deadline = head_deadline if head_deadline is not None else idle_deadline
                    data = await asyncio.wait_for(reader.read(65536), max(deadline - loop.time(), 0.0))
                    if data and head_deadline is None:
                        head_deadline = loop.time() + HEAD_TIMEOUT
                    conn.receive_data(data)
            except h11.RemoteProtocolError as exc:
                if conn.our_state in (h11.IDLE, h11.SEND_RESPONSE):
                    status = exc.error_status_hint
                    reason = b"request header fields too large\n" if status == 431 else b"bad request\n"
                    await self._send(conn, writer, status, TEXT, reason, close=True)
                return
            if isinstance(event, h11.ConnectionClosed) or not isinstance(event, h11.Request):
                return
            size = len(event.method) + len(event.target) + sum(len(k) + len(v) + 4 for k, v in event.headers)
            if size > MAX_HEAD:  # h11 bounds a head that arrives in parts; one that came whole is checked here
                await self._send(conn, writer, 431, TEXT, b"request header fields too large\n", close=True)
                return
            headers = {k.decode("latin-1").lower(): v.decode("latin-1") for k, v in event.headers}
            if int(headers.get("content-length", "0") or 0) > 0 or "transfer-encoding" in headers:
                await self._send(conn, writer, 413, TEXT, b"request bodies are not accepted\n", close=True)
                return
            while not isinstance(conn.next_event(), h11.EndOfMessage):  # a request without a body
                pass
            await self._answer(conn, writer, event.method.decode("latin-1"), event.target.decode("latin-1"), headers)
            if conn.our_state is h11.MUST_CLOSE or conn.their_state is not h11.DONE:
                return
            conn.start_next_cycle()

    async def _answer(self, conn: Any, writer: asyncio.StreamWriter, method: str, target: str,
                      headers: dict[str, str]) -> None:
        path = target.split("?", 1)[0]
        loop = asyncio.get_running_loop()
        extra: list[tuple[str, str]] = []
        encoding = b""
        if path in HEALTH_PATHS and method in ("GET", "HEAD"):
            if self.opened.is_set():
                code, ctype, body = await self._wait(loop.run_in_executor(self._pool, self.health))
            else:  # (at once: a probe is not left waiting for the first pass or a restart's backlog)
                code, ctype, body = 503, TEXT, b"starting: reading the logs before the counters are shown\n"
        elif not await self._authorized(headers.get("authorization", "")):
            code, ctype, body = 401, TEXT, b"unauthorized\n"
            extra.append(("WWW-Authenticate", 'Basic realm="logmetrics"'))
        elif path not in ("/metrics", "/", *HEALTH_PATHS):
            code, ctype, body = 404, TEXT, b"not found\n"
        elif method not in ("GET", "HEAD"):
            code, ctype, body = 405, TEXT, b"method not allowed\n"
            extra.append(("Allow", "GET, HEAD"))
        elif path == "/":
            code, ctype, body = 200, "text/html; charset=utf-8", INDEX
        else:
            gz = _wants_gzip(headers.get("accept-encoding", ""))
            code, ctype, body, encoding = await self._metrics(headers.get("accept", ""), gz)
            extra.append(("Vary", "Accept, Accept-Encoding"))
        if encoding:
            extra.append(("Content-Encoding", encoding.decode()))
        await self._send(conn, writer, code, ctype, body, head=method == "HEAD", extra=extra)

    async def _wait(self, fut: asyncio.Future[Answer]) -> Answer:
        try:
            return await asyncio.wait_for(asyncio.shield(fut), RENDER_TIMEOUT)
        except TimeoutError:
            return 503, TEXT, b"the metrics took too long to render\n"

    async def _metrics(self, accept: str, gz: bool) -> tuple[int, str, bytes, bytes]:
        """A scrape, shared with identical ones whose render started less than SHARE_WINDOW ago
        (once done, only while the store has not moved since it started, and never where a scrape
        reads the files first: what was counted or written meanwhile is shown at once)."""
        loop = asyncio.get_running_loop()
        waited = 0.0
        while not self.opened.is_set() and waited < OPEN_WAIT:  # (a restart reading its backlog)
            await asyncio.sleep(OPEN_POLL)
            waited += OPEN_POLL
        key = (choose_encoder(accept)[1], gz)
        now = loop.time()
        version = self._version()
        shared = self._renders.get(key)
        reading = self.unparsed is not None and self.unparsed.reading
        if shared is None or now - shared[0] > SHARE_WINDOW or (shared[2].done() and (
                reading or shared[1] != version or shared[2].result()[0] != 200)):
            fut = loop.run_in_executor(self._pool, self._scrape_encoded, accept, gz)
            self._renders[key] = shared = (now, version, fut)
        try:
            return await asyncio.wait_for(asyncio.shield(shared[2]), RENDER_TIMEOUT)
        except TimeoutError:
            return 503, TEXT, b"the metrics took too long to render\n", b""

    async def _authorized(self, header: str) -> bool:
        """Whether the request may see the metrics: no users configured, or right credentials."""
        if self.web is None:
            return True
        auth = self.web.auth
        if not auth.required:
            return True
        scheme, _, value = header.partition(" ")
        if scheme.lower() != "basic":
            return False
        try:
            user, sep, password = base64.b64decode(value.strip(), validate=True).decode("utf-8").partition(":")
        except (binascii.Error, UnicodeDecodeError):
            return False
        if not sep:
            return False
        if auth.cached(user, password):
            return True
        return await asyncio.get_running_loop().run_in_executor(self._auth_pool, auth.check, user, password)

    async def _send(self, conn: Any, writer: asyncio.StreamWriter, code: int, ctype: str, body: bytes, *,
                    head: bool = False, close: bool = False, extra: list[tuple[str, str]] | None = None) -> None:
        import h11

        headers = [("Content-Type", ctype), ("Content-Length", str(len(body))), *(extra or [])]
        if close:
            headers.append(("Connection", "close"))
        out = conn.send(h11.Response(status_code=code, headers=headers, reason=HTTPStatus(code).phrase.encode()))
        if body and not head:
            out += conn.send(h11.Data(data=body))
        out += conn.send(h11.EndOfMessage())
        writer.write(out)
        await asyncio.wait_for(writer.drain(), WRITE_TIMEOUT)


def _wants_gzip(header: str) -> bool:
    """Whether an ``Accept-Encoding`` header takes gzip (and does not refuse it with q=0)."""
    for part in header.split(","):
        name, _, params = part.strip().partition(";")
        if name.strip().lower() in ("gzip", "x-gzip"):
            q = params.strip().replace(" ", "")
            return not (q.startswith("q=") and q[2:].strip("0.") == "" and q[2:] != "")
    return False


def _quiet(loop: asyncio.AbstractEventLoop, context: dict[str, Any]) -> None:
    """Clients that hang up or fail a handshake are no errors worth a line; anything else is."""
    exc = context.get("exception")
    if isinstance(exc, OSError | ssl.SSLError | asyncio.CancelledError):
        log.debug("%s: %s", context.get("message"), exc)
        return
    loop.default_exception_handler(context)
