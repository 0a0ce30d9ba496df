"""The HTTP endpoint under a real TLS client: basic auth, mTLS, minimum version, certificates rotated
on disk, broken reloads, 404/405/431/413, gzip, and slow or idle clients that never block a scrape."""

from __future__ import annotations

import base64
import gzip
import http.client
import re
import shutil
import socket
import ssl
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import bcrypt
import pytest
import trustme
from hypothesis import given, settings
from hypothesis import strategies as st

from logmetrics.events import Event
from logmetrics.serve import server as server_module
from logmetrics.serve.server import MetricsServer
from logmetrics.serve.webconfig import LiveWebConfig
from logmetrics.store.exposition import make_registry, text
from logmetrics.store.store import Store
from tests.helpers import access_line
from tests.test_exposition import request

HASH = bcrypt.hashpw(b"s3cret", bcrypt.gensalt(rounds=4)).decode()
PROMETHEUS_ACCEPT = ("application/openmetrics-text;version=1.0.0;q=0.5,application/openmetrics-text;version=0.0.1;"
                     "q=0.4,text/plain;version=1.0.0;escaping=allow-utf-8;q=0.3,text/plain;version=0.0.4;q=0.2,*/*;q=0.1")
GOOD = {"Authorization": "Basic " + base64.b64encode(b"alice:s3cret").decode()}


def wait_until(check: Callable[[], bool], what: str, seconds: float = 10) -> None:
    """Poll ``check`` until it holds, or fail naming ``what``."""
    deadline = time.monotonic() + seconds
    while not check():
        if time.monotonic() > deadline:
            raise AssertionError(f"not within {seconds} s: {what}")
        time.sleep(0.05)


class Pki:
    """A CA with a server certificate for localhost written to a directory, and a web config beside them."""

    def __init__(self, root: Path) -> None:
        self.root = root
        self.ca = trustme.CA()
        self.issue(self.ca)
        self.ca.cert_pem.write_to_path(str(root / "ca.crt"))

    def issue(self, ca: trustme.CA) -> None:
        """Write a fresh server certificate and key signed by ``ca``."""
        cert = ca.issue_cert("localhost", "127.0.0.1")
        cert.private_key_pem.write_to_path(str(self.root / "server.key"))
        cert.cert_chain_pems[0].write_to_path(str(self.root / "server.crt"))

    def web(self, extra: str = "", users: bool = True) -> str:
        """Write web.yml (TLS, alice's bcrypt hash, and ``extra`` lines under tls_server_config)."""
        text = "tls_server_config:\n  cert_file: server.crt\n  key_file: server.key\n" + extra
        if users:
            text += f"basic_auth_users:\n  alice: {HASH}\n"
        (self.root / "web.yml").write_text(text)
        return str(self.root / "web.yml")

    def client(self, ca: trustme.CA | None = None, cert_from: trustme.CA | None = None) -> ssl.SSLContext:
        """A client context trusting ``ca`` (ours by default), with a client certificate from ``cert_from``."""
        ctx = ssl.create_default_context()
        (ca or self.ca).configure_trust(ctx)
        if cert_from is not None:
            cert_from.issue_cert("scraper@example.com").configure_cert(ctx)
        return ctx


@pytest.fixture
def pki(tmp_path: Path) -> Pki:
    """Certificates for localhost under tmp_path."""
    return Pki(tmp_path)


@pytest.fixture
def serve() -> Iterator[Callable[..., MetricsServer]]:
    """Start in-process servers over a store with one counter; all are stopped at the end."""
    started: list[MetricsServer] = []

    def start(web: str | None = None, on_failure: Callable[[str], None] | None = None) -> MetricsServer:
        store = Store()
        store.counters[("llm_prompt_tokens_total", ("vllm", "a.log", "m"))] = 7.0
        live = LiveWebConfig(web, on_failure=on_failure) if web else None
        srv = MetricsServer("127.0.0.1", 0, make_registry(store), live)
        srv.start()
        started.append(srv)
        return srv

    yield start
    for srv in started:
        srv.stop()


def get(srv: MetricsServer, path: str = "/metrics", ctx: ssl.SSLContext | None = None, method: str = "GET",
        headers: dict[str, str] | None = None) -> tuple[int, dict[str, str], bytes]:
    """One request over a new connection (HTTPS when ``ctx``): status, headers (lower-case), body."""
    return request("localhost" if ctx else "127.0.0.1", srv.address[1], path, method, headers, ctx)


def refused(srv: MetricsServer, ctx: ssl.SSLContext) -> bool:
    """Whether the TLS handshake (or the first read after it, in TLS 1.3) fails."""
    try:
        get(srv, "/healthz", ctx)
    except (ssl.SSLError, ConnectionError, http.client.RemoteDisconnected):
        return True
    return False


def test_basic_auth_over_tls(pki: Pki, serve: Callable[..., MetricsServer]) -> None:
    """Over TLS: 401 with a Basic challenge without or with wrong credentials, 200 with right ones, /healthz open."""
    srv = serve(pki.web())
    ctx = pki.client()
    assert srv.url.startswith("https://127.0.0.1:")
    wrong = {"Authorization": "Basic " + base64.b64encode(b"alice:nope").decode()}
    nobody = {"Authorization": "Basic " + base64.b64encode(b"mallory:s3cret").decode()}
    for headers in ({}, wrong, nobody, {"Authorization": "Bearer x"}, {"Authorization": "Basic !!"}):
        for path in ("/metrics", "/"):
            status, hdrs, _ = get(srv, path, ctx, headers=headers)
            assert status == 401 and hdrs["www-authenticate"] == 'Basic realm="logmetrics"', (path, headers)
    status, _, body = get(srv, "/metrics", ctx, headers=GOOD)
    assert status == 200 and b'llm_prompt_tokens_total{backend="vllm",model="m",source="a.log"} 7.0' in body
    for path in ("/healthz", "/-/healthy"):
        assert get(srv, path, ctx)[::2] == (200, b"ok\n")


def test_mtls_refuses_a_missing_or_foreign_client_certificate(pki: Pki, serve: Callable[..., MetricsServer]) -> None:
    """RequireAndVerifyClientCert: a client certificate from our CA passes; none, or one from another CA, fails."""
    srv = serve(pki.web("  client_auth_type: RequireAndVerifyClientCert\n  client_ca_file: ca.crt\n"))
    assert get(srv, "/metrics", pki.client(cert_from=pki.ca), headers=GOOD)[0] == 200
    assert refused(srv, pki.client())
    assert refused(srv, pki.client(cert_from=trustme.CA()))


def test_min_version_tls13_refuses_tls12(pki: Pki, serve: Callable[..., MetricsServer]) -> None:
    """min_version TLS13: a client limited to TLS 1.2 cannot connect; a TLS 1.3 one can."""
    srv = serve(pki.web("  min_version: TLS13\n", users=False))
    old = pki.client()
    old.maximum_version = ssl.TLSVersion.TLSv1_2
    assert refused(srv, old)
    assert get(srv, "/metrics", pki.client())[0] == 200


def test_a_certificate_rotated_on_disk_is_served_to_the_next_connection(
        pki: Pki, serve: Callable[..., MetricsServer]) -> None:
    """A new certificate written over the old files is served to new connections without a restart."""
    srv = serve(pki.web(users=False))
    assert get(srv, "/healthz", pki.client())[0] == 200
    other = trustme.CA()
    pki.issue(other)
    wait_until(lambda: not refused(srv, pki.client(other)), "the rotated certificate served")
    assert refused(srv, pki.client())  # the old CA no longer matches
    assert srv.web is not None and srv.web.reloads == 1


def test_a_broken_reload_is_refused_and_the_running_config_stays(
        pki: Pki, serve: Callable[..., MetricsServer]) -> None:
    """A web config broken on disk is refused with one line naming the file; TLS and auth go on as before."""
    said: list[str] = []
    path = pki.web()
    srv = serve(path, said.append)
    shutil.copy(pki.root / "server.crt", pki.root / "server.key")  # a key file that holds no key
    wait_until(lambda: bool(said), "the broken reload reported")
    assert said[0].startswith(f"web config {path}: tls_server_config.cert_file/key_file: cannot load"), said
    assert "\n" not in said[0] and said[0].endswith("the running web config stays")
    assert get(srv, "/metrics", pki.client())[0] == 401
    assert get(srv, "/metrics", pki.client(), headers=GOOD)[0] == 200
    assert srv.web is not None and srv.web.failures == 1


def test_paths_methods_gzip_bodies_and_header_size(serve: Callable[..., MetricsServer]) -> None:
    """404 for other paths, 405 with Allow for other methods, gzip when asked, 413 for a body, 431 for big headers."""
    srv = serve()
    assert get(srv, "/nope")[0] == 404
    with socket.create_connection(srv.address, timeout=10) as raw:
        raw.sendall(b"GET /nope HTTP/1.1\r\nHost: x\r\n\r\n")
        assert raw.recv(100).startswith(b"HTTP/1.1 404 Not Found\r\n")
    status, hdrs, _ = get(srv, "/metrics", method="DELETE")
    assert status == 405 and hdrs["allow"] == "GET, HEAD"
    plain = get(srv, "/metrics")[2]
    status, hdrs, body = get(srv, "/metrics", headers={"Accept-Encoding": "gzip"})
    assert status == 200 and hdrs["content-encoding"] == "gzip" and gzip.decompress(body) == plain
    assert "content-encoding" not in get(srv, "/metrics", headers={"Accept-Encoding": "gzip;q=0"})[1]
    status, _, _ = get(srv, "/metrics", method="POST", headers={"Content-Length": "3"})
    assert status == 413
    assert get(srv, "/metrics", headers={"X-Big": "a" * 20000})[0] == 431


def test_keep_alive_serves_several_scrapes_on_one_connection(serve: Callable[..., MetricsServer]) -> None:
    """One connection carries several requests (as Prometheus keeps its connections)."""
    srv = serve()
    conn = http.client.HTTPConnection("127.0.0.1", srv.address[1], timeout=10)
    try:
        for path in ("/metrics", "/healthz", "/metrics"):
            conn.request("GET", path)
            resp = conn.getresponse()
            assert resp.status == 200 and resp.read()
    finally:
        conn.close()


def test_slow_and_idle_clients_do_not_block_scrapes(serve: Callable[..., MetricsServer],
                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    """200 idle connections and a client that sent half a request line leave scrapes answered; the slow one
    is dropped when its header time-out passes."""
    monkeypatch.setattr(server_module, "HEAD_TIMEOUT", 1.0)
    srv = serve()
    idle = [socket.create_connection(srv.address, timeout=10) for _ in range(200)]
    slow = socket.create_connection(srv.address, timeout=10)
    try:
        slow.sendall(b"GET /met")
        started = time.monotonic()
        for _ in range(20):
            assert get(srv, "/metrics")[0] == 200
        assert time.monotonic() - started < 8, "scrapes waited behind idle or slow connections"
        assert slow.recv(100) == b""  # closed by the server after HEAD_TIMEOUT (recv waits up to 10 s)
    finally:
        for s in [*idle, slow]:
            s.close()


def test_concurrent_identical_scrapes_share_a_fresh_render(serve: Callable[..., MetricsServer]) -> None:
    """Many scrapes at once all get the full, same body."""
    from concurrent.futures import ThreadPoolExecutor

    srv = serve()
    with ThreadPoolExecutor(16) as pool:
        bodies = list(pool.map(lambda _: get(srv, "/metrics")[2], range(64)))
    assert len(set(bodies)) == 1 and b"llm_prompt_tokens_total" in bodies[0]


def test_what_was_counted_after_a_render_is_not_hidden_by_sharing_it(serve: Callable[..., MetricsServer]) -> None:
    """A batch applied just after a scrape shows in the next one, even within the time a finished
    render is shared; with nothing applied, that render is shared."""
    srv = serve()
    store = srv.registry.view.store  # type: ignore[attr-defined]  # (serve's StoreRegistry)
    for n in range(1, 6):
        store.apply([Event("http_requests_total", ("GET", "/x", "200"), 1)], "vllm", "a.log")
        started = time.monotonic()
        body = get(srv, "/metrics")[2]
        again = get(srv, "/metrics")[2]
        if time.monotonic() - started < server_module.SHARE_WINDOW:  # the window holds both scrapes
            assert again is not None and again == body
        assert f'route="/x",source="a.log"}} {n}.0'.encode() in body, body.decode()


# --- the whole program, with curl --------------------------------------------------------------


def start_watch(args: list[str]) -> tuple[subprocess.Popen[bytes], str]:
    """Start ``logmetrics watch`` and give the process and the URL it printed."""
    proc = subprocess.Popen([sys.executable, "-m", "logmetrics", "watch", "--listen", "127.0.0.1:0", *args],
                            stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    assert proc.stderr is not None
    line = proc.stderr.readline().decode()
    match = re.search(r"serving metrics at (\S+)", line)
    if match is None:
        proc.kill()
        raise AssertionError(f"no URL: {line}{proc.stderr.read().decode()}")
    return proc, match.group(1)


def curl(*args: str) -> tuple[int, str]:
    """curl's exit code and the status code it printed."""
    run = subprocess.run(["curl", "-sS", "-o", "/dev/null", "-w", "%{http_code}", *args],
                         capture_output=True, text=True, timeout=30)
    return run.returncode, run.stdout


@pytest.mark.skipif(shutil.which("curl") is None, reason="curl is installed by scripts/test")
def test_watch_with_web_config_answers_curl(pki: Pki, tmp_path: Path) -> None:
    """logmetrics watch --web-config: curl gets 401 without credentials, 200 with them, and fails without a
    client certificate once mTLS is on; a broken file at start is exit code 2 naming it."""
    log = tmp_path / "vllm.log"
    log.write_text(access_line(1))
    web = pki.web()
    proc, url = start_watch([str(log), "--from-beginning", "--web-config", web])
    try:
        assert url.startswith("https://127.0.0.1:")
        ca = str(pki.root / "ca.crt")
        assert curl("--cacert", ca, url) == (0, "401")
        assert curl("--cacert", ca, "-u", "alice:s3cret", url) == (0, "200")
        assert curl("--cacert", ca, url.replace("/metrics", "/healthz")) == (0, "200")
    finally:
        proc.terminate()
        assert proc.wait(30) == 0
    pki.web("  client_auth_type: RequireAndVerifyClientCert\n  client_ca_file: ca.crt\n")
    proc, url = start_watch([str(log), "--web-config", web])
    try:
        code, status = curl("--cacert", str(pki.root / "ca.crt"), "-u", "alice:s3cret", url)
        assert code != 0 and status == "000"
        client = pki.ca.issue_cert("scraper")
        client.cert_chain_pems[0].write_to_path(str(tmp_path / "client.crt"))
        client.private_key_pem.write_to_path(str(tmp_path / "client.key"))
        assert curl("--cacert", str(pki.root / "ca.crt"), "--cert", str(tmp_path / "client.crt"),
                    "--key", str(tmp_path / "client.key"), "-u", "alice:s3cret", url) == (0, "200")
    finally:
        proc.terminate()
        assert proc.wait(30) == 0
    (pki.root / "web.yml").write_text("tls_server_config:\n  cert_file: gone.crt\n  key_file: server.key\n")
    bad = subprocess.run([sys.executable, "-m", "logmetrics", "watch", "--listen", "127.0.0.1:0", str(log),
                          "--web-config", web], capture_output=True, text=True, timeout=60)
    assert bad.returncode == 2 and bad.stderr.count("\n") == 1, bad.stderr
    assert f"web config {web}: tls_server_config.cert_file/key_file: cannot load" in bad.stderr


@given(st.one_of(st.floats(), st.integers(min_value=-10**20, max_value=10**20)))
@settings(max_examples=500, deadline=None)
def test_go_float_writes_what_prometheus_client_writes(value: float) -> None:
    """Every number the direct renderer and backfill write is prometheus_client's form of it."""
    from prometheus_client.utils import floatToGoString

    from logmetrics.store.render import go_float

    assert go_float(value) == floatToGoString(value)  # type: ignore[no-untyped-call]  # untyped upstream


def test_oneshot_does_not_load_prometheus_client(tmp_path: Path) -> None:
    """--oneshot prints the direct renderer's text without importing prometheus_client (and the HTTP
    modules it brings), which only the HTTP endpoint needs."""
    log = tmp_path / "vllm.log"
    log.write_text(access_line(1))
    probe = ("import runpy, sys\n"
             "sys.argv = ['logmetrics', 'watch', '--oneshot', '--parser', 'vllm', sys.argv[1]]\n"
             "try:\n    runpy.run_module('logmetrics', run_name='__main__')\n"
             "except SystemExit:\n    pass\n"
             "print('LOADED' if 'prometheus_client' in sys.modules else 'NOT LOADED', file=sys.stderr)\n")
    out = subprocess.run([sys.executable, "-c", probe, str(log)], capture_output=True, text=True, timeout=60)
    assert 'http_requests_total{backend="vllm"' in out.stdout
    assert out.stderr.strip().endswith("NOT LOADED"), out.stderr


def test_direct_render_is_byte_identical_to_prometheus_client() -> None:
    """The direct renderer writes exactly prometheus_client's text and OpenMetrics for counters, gauges,
    histograms and label values that need escaping."""
    from prometheus_client.exposition import generate_latest
    from prometheus_client.openmetrics.exposition import generate_latest as openmetrics

    from logmetrics.store.values import Histogram

    store = Store()
    for i, src in enumerate(["a.log", 'we"ird\\path\nx', "caf\u00e9"]):
        labels = ("vllm", src, f"m{i}")
        store.counters[("llm_prompt_tokens_total", labels)] = 1e21 * i + 0.5
        store.gauges[("llm_kv_cache_usage_ratio", labels)] = float("nan") if i == 1 else 0.25
        n = len(store.families["llm_request_duration_seconds"].buckets) + 1
        store.histograms[("llm_request_duration_seconds", labels)] = Histogram(list(range(n)), 12.5, sum(range(n)))
    big = [999_990 + k for k in range(n)]  # cumulative counts past 1e6: Go's exponent form
    store.histograms[("llm_request_duration_seconds", ("vllm", "big.log", "m"))] = Histogram(big, 1e7, sum(big))
    store.counters[("logmetrics_lines_read_total", ("a.log",))] = 3.0
    for i, value in enumerate([1234567.0, 123456.5, 1e-7, 0.1 + 0.2, 7, float("-inf"), float("inf"), -2.5e9]):
        store.gauges[("logmetrics_lag_bytes", (f"{i}.log",))] = value  # an int among them
    registry = make_registry(store)
    assert text(registry) == generate_latest(registry)
    from logmetrics.store.exposition import StoreRegistry
    assert isinstance(registry, StoreRegistry)
    assert registry.renderer.render(openmetrics=True) == openmetrics(registry)  # type: ignore[no-untyped-call]  # untyped upstream
    from prometheus_client.exposition import choose_encoder

    from logmetrics.store.exposition import render
    store.counters[("llm_prompt_tokens_total", ("vllm", "a.log", "m00"))] = 2.0  # a new series sorts in
    assert text(registry) == generate_latest(registry)
    del store.counters[("llm_prompt_tokens_total", ("vllm", "a.log", "m0"))]  # and one gone drops out
    store.counters[("llm_prompt_tokens_total", ("vllm", "0.log", "m"))] = 3.0
    assert text(registry) == generate_latest(registry)
    for accept in ("", PROMETHEUS_ACCEPT, "application/openmetrics-text; version=1.0.0; escaping=allow-utf-8",
                   "text/plain;version=1.0.0;escaping=allow-utf-8", "text/plain;version=1.0.0;escaping=dots",
                   "application/openmetrics-text"):
        encoder, ctype = choose_encoder(accept)
        assert render(registry, accept) == (encoder(registry), ctype), accept


def test_a_server_not_opened_yet_answers_health_at_once_and_holds_scrapes_until_opened() -> None:
    """Started not opened (a restart reading what was written while down), the endpoint answers
    ``/healthz`` with 503 at once, not after the read; a scrape waits, and shows the counters as
    they stand when the server is opened."""
    store = Store()
    store.counters[("logmetrics_lines_read_total", ("a.log",))] = 1.0
    srv = MetricsServer("127.0.0.1", 0, make_registry(store))
    srv.start(opened=False)
    try:
        port = srv.address[1]
        began = time.monotonic()
        status, _, body = request("127.0.0.1", port, "/healthz")
        assert status == 503 and b"starting" in body and time.monotonic() - began < 2
        got: list[tuple[int, bytes]] = []
        scrape = threading.Thread(target=lambda: got.append(request("127.0.0.1", port, "/metrics")[::2]))
        scrape.start()
        time.sleep(0.5)
        assert not got  # held
        store.counters[("logmetrics_lines_read_total", ("a.log",))] = 5.0
        srv.open()
        scrape.join(10)
        assert got and got[0][0] == 200 and b'logmetrics_lines_read_total{source="a.log"} 5.0' in got[0][1]
        assert request("127.0.0.1", port, "/healthz")[0] == 200
    finally:
        srv.stop()
