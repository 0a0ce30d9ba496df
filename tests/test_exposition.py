"""The exposition never fails for good: label values from bytes always serialise, a failed render
answers 500 and the next scrape is tried afresh, /healthz tells, HEAD works, and --listen takes
IPv4, IPv6 and dual-stack addresses.
"""

from __future__ import annotations

import http.client
import logging
import os
import socket
import ssl
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from prometheus_client.core import CollectorRegistry, GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

from logmetrics.cli.common import listen_address as _listen
from logmetrics.engine.engine import Engine
from logmetrics.errors import UserError
from logmetrics.serve.server import MetricsServer
from logmetrics.store.store import Store
from tests.helpers import Server, access_line, parse, total
from tests.test_prometheus import binary

NON_UTF8 = os.fsdecode(b"vllm-\xe9.log")  # as os.walk gives a file name that is not UTF-8
SHOWN = "vllm-\\xe9.log"  # the label value it becomes


def has_ipv6() -> bool:
    """Whether this machine can bind the IPv6 loopback."""
    try:
        with socket.socket(socket.AF_INET6, socket.SOCK_STREAM) as s:
            s.bind(("::1", 0))
        return True
    except OSError:
        return False


needs_ipv6 = pytest.mark.skipif(not has_ipv6(), reason="no IPv6 on this machine")


def request(host: str, port: int, path: str, method: str = "GET", headers: dict[str, str] | None = None,
            ctx: ssl.SSLContext | None = None) -> tuple[int, dict[str, str], bytes]:
    """One HTTP request over a new connection (HTTPS when ``ctx``): status, headers (lower-case names) and body."""
    conn: http.client.HTTPConnection = (http.client.HTTPSConnection(host, port, context=ctx, timeout=10)
                                        if ctx else http.client.HTTPConnection(host, port, timeout=10))
    try:
        conn.request(method, path, headers=headers or {})
        resp = conn.getresponse()
        return resp.status, {k.lower(): v for k, v in resp.getheaders()}, resp.read()
    finally:
        conn.close()


# --- label values from bytes ---------------------------------------------------------------------


def test_source_label_of_a_non_utf8_file_name_is_valid_utf8() -> None:
    """The source label of a surrogate-escaped path is its \\xNN form, and --source is cleaned too."""
    assert Engine({}, Store()).source_label(f"/logs/{NON_UTF8}") == f"/logs/{SHOWN}"
    assert Engine({}, Store(), source="s\udcff").source_label("x") == "s\\xff"
    assert Engine({}, Store()).source_label("/logs/caf\u00e9.log") == "/logs/caf\u00e9.log"


@pytest.fixture
def non_utf8_dir(tmp_path: Path) -> Path:
    """A directory holding a vLLM log whose file name is not UTF-8."""
    logs = tmp_path / "logs"
    logs.mkdir()
    with open(os.path.join(os.fsencode(logs), b"vllm-\xe9.log"), "w") as f:
        f.write("".join(access_line(i, "/health") for i in range(3)))
    return logs


def test_watch_serves_a_non_utf8_file_name_scrape_after_scrape(non_utf8_dir: Path) -> None:
    """A running watch serves a non-UTF-8 file name as a label, scrape after scrape, and /healthz says 200."""
    srv = Server(str(non_utf8_dir), "--from-beginning", "--poll-interval", "0.1")
    try:
        source = f"{non_utf8_dir}/{SHOWN}"
        got = srv.wait_for(lambda s: total(s, "http_requests_total", source=source) == 3)
        assert total(got, "logmetrics_lines_read_total", source=source) == 3
        for _ in range(2):
            status, ctype, body = srv.get("/metrics")
            assert status == 200 and ctype.startswith("text/plain"), (status, ctype)
            assert f'source="{source}"'.replace("\\", "\\\\") in body, body
        status, _, body = srv.get("/healthz")
        assert (status, body) == (200, "ok\n")
        os.unlink(os.path.join(os.fsencode(non_utf8_dir), b"vllm-\xe9.log"))
        srv.wait_for(lambda s: total(s, "logmetrics_open_files") == 0)
        assert srv.get("/metrics")[0] == 200 and srv.get("/healthz")[0] == 200
    finally:
        code = srv.stop()
        assert srv.proc.stderr is not None
        err = srv.proc.stderr.read().decode("utf-8", "replace")
    assert code == 0, err
    assert "Traceback" not in err and "vllm-\\udce9" not in err, err


PLUGIN = '''
from logmetrics.events import Event
from logmetrics.plugins import Parser


class Nanny(Parser):
    name = "nanny"
    claims = ("nan-*",)

    def parse(self, record):
        word, _, value = record.text.strip().partition(" ")
        if word == "obs":
            return [Event("llm_request_duration_seconds", ("m",), float(value))]
        if word == "tokens":
            return [Event("llm_prompt_tokens_total", ("m",), float(value))]
        return []
'''


@pytest.mark.integration
def test_promtool_clean_after_non_utf8_name_and_nan(tmp_path: Path) -> None:
    """promtool check metrics is clean after a non-UTF-8 file name, a plugin's NaN (refused and counted) and
    10,000 scanner 404s (folded into one route) have gone through one run together."""
    promtool = binary("promtool")
    logs = tmp_path / "logs"
    logs.mkdir()
    raw = os.fsencode(logs)
    with open(os.path.join(raw, b"vllm-\xe9.log"), "w") as f:
        f.write(access_line(1) + access_line(2, "/health"))
        f.writelines(access_line(i, f"/scan-{i}/wp-login.php", "404 Not Found") for i in range(10000))
    with open(os.path.join(raw, b"nan-\xe9.log"), "w") as f:
        f.write("obs 0.5\nobs nan\nobs -2\ntokens inf\ntokens 7\nobs 1.5\n")
    plugin = tmp_path / "nanny.py"
    plugin.write_text(PLUGIN)
    one = subprocess.run([sys.executable, "-m", "logmetrics", "watch", str(logs), "--oneshot", "--plugin", str(plugin)],
                         stdin=subprocess.DEVNULL, capture_output=True, text=True, errors="replace", timeout=60)
    assert one.returncode == 0, one.stderr
    assert "Traceback" not in one.stderr, one.stderr
    got = parse(one.stdout)
    nan_source = f"{logs}/nan-\\xe9.log"
    assert total(got, "llm_request_duration_seconds_count", source=nan_source) == 2
    assert total(got, "llm_request_duration_seconds_sum", source=nan_source) == 2.0
    assert total(got, "llm_prompt_tokens_total", source=nan_source) == 7
    assert total(got, "logmetrics_values_rejected_total", parser="nanny", metric="llm_request_duration_seconds") == 2
    assert total(got, "logmetrics_values_rejected_total", parser="nanny", metric="llm_prompt_tokens_total") == 1
    assert total(got, "http_requests_total", source=f"{logs}/{SHOWN}", code="200") == 2
    assert total(got, "http_requests_total", source=f"{logs}/{SHOWN}", route="__not_found__") == 10000
    assert total(got, "http_requests_total", route="/v1/chat/completions") == 1
    warned = [line for line in one.stderr.splitlines() if "parser nanny" in line]
    assert len(warned) == 2, one.stderr
    check = subprocess.run([promtool, "check", "metrics"], input=one.stdout, capture_output=True, text=True,
                           timeout=60)
    report = (check.stdout + check.stderr).strip()
    assert check.returncode == 0 and report == "", f"promtool check metrics (exit {check.returncode}):\n{report}"


# --- a failing render ----------------------------------------------------------------------------


class Flaky(Collector):
    """A collector that raises while ``broken`` is set."""

    def __init__(self) -> None:
        self.broken = False

    def collect(self) -> Iterator[Metric]:
        """One gauge, or an exception."""
        if self.broken:
            raise UnicodeEncodeError("utf-8", "x\udce9", 1, 2, "surrogates not\nallowed")
        g = GaugeMetricFamily("up_gauge", "A gauge.")
        g.add_metric([], 1.0)
        yield g


@pytest.fixture
def flaky() -> Iterator[tuple[MetricsServer, Flaky]]:
    """An in-process metrics server on 127.0.0.1 over a collector that can be made to fail."""
    coll = Flaky()
    registry = CollectorRegistry(auto_describe=False)
    registry.register(coll)
    srv = MetricsServer("127.0.0.1", 0, registry)
    srv.start()
    try:
        yield srv, coll
    finally:
        srv.stop()


def test_failed_render_is_a_500_and_the_next_scrape_is_fresh(
        flaky: tuple[MetricsServer, Flaky], caplog: pytest.LogCaptureFixture) -> None:
    """A render error answers 500 with one line, is logged once, /healthz says 503 meanwhile; then all recovers."""
    srv, coll = flaky
    port = srv.address[1]
    om = {"Accept": "application/openmetrics-text; version=1.0.0"}
    coll.broken = True
    with caplog.at_level(logging.ERROR, logger="logmetrics.serve.server"):
        for headers in ({}, om, {}):
            status, hdrs, body = request("127.0.0.1", port, "/metrics", headers=headers)
            assert status == 500 and hdrs["content-type"].startswith("text/plain"), (status, hdrs)
            assert body.count(b"\n") == 1 and body.startswith(b"cannot render metrics: UnicodeEncodeError"), body
        assert request("127.0.0.1", port, "/healthz")[0] == 503
    assert len(caplog.records) == 1, [r.getMessage() for r in caplog.records]
    coll.broken = False
    assert request("127.0.0.1", port, "/healthz")[:3:2] == (200, b"ok\n")
    for headers in ({}, om):
        status, _, body = request("127.0.0.1", port, "/metrics", headers=headers)
        assert status == 200 and b"up_gauge 1.0" in body, body


def test_head_answers_like_get_without_a_body(flaky: tuple[MetricsServer, Flaky]) -> None:
    """HEAD on /metrics, /healthz and / gives GET's status, type and length, and no body."""
    srv, _ = flaky
    port = srv.address[1]
    for path in ("/metrics", "/healthz", "/"):
        status, hdrs, body = request("127.0.0.1", port, path, "HEAD")
        get_status, get_hdrs, get_body = request("127.0.0.1", port, path)
        assert (status, get_status, body) == (200, 200, b""), (path, status, body)
        assert hdrs["content-type"] == get_hdrs["content-type"], path
        assert int(hdrs["content-length"]) == len(get_body) > 0, (path, hdrs)
    assert request("127.0.0.1", port, "/nope", "HEAD")[0] == 404


# --- --listen ------------------------------------------------------------------------------------


@pytest.mark.parametrize(("value", "want"), [
    ("127.0.0.1:9877", ("127.0.0.1", 9877)), (":9877", ("", 9877)), ("[::1]:0", ("::1", 0)),
    ("[::]:9877", ("::", 9877)), ("localhost:80", ("localhost", 80)), ("0.0.0.0:9877", ("0.0.0.0", 9877)),
])
def test_listen_forms(value: str, want: tuple[str, int]) -> None:
    """HOST:PORT, :PORT and [IPV6]:PORT are understood."""
    assert _listen(value) == want


@pytest.mark.parametrize("value", ["9877", "::1:9877", "[::1:9877", "[foo]:9877", "[]:80", "x:99999", "x:", "x:8o"])
def test_bad_listen_values_are_refused(value: str) -> None:
    """Malformed --listen values are refused with a message quoting them."""
    with pytest.raises(UserError, match="--listen"):
        _listen(value)


def test_bad_listen_is_one_line_and_exit_2(tmp_path: Path) -> None:
    """On the command line a bare IPv6 address without brackets ends in one error line and exit code 2."""
    proc = subprocess.run([sys.executable, "-m", "logmetrics", "watch", str(tmp_path), "--listen", "::1:9877"],
                          stdin=subprocess.DEVNULL, capture_output=True, text=True, timeout=60)
    assert proc.returncode == 2, proc.stderr
    assert proc.stderr.count("\n") == 1 and "in brackets" in proc.stderr, proc.stderr


@needs_ipv6
def test_listen_on_ipv6_loopback(tmp_path: Path) -> None:
    """--listen [::1]:0 serves on the IPv6 loopback and prints a bracketed URL that works."""
    srv = Server(str(tmp_path), "--listen", "[::1]:0")
    try:
        assert srv.url.startswith("http://[::1]:") and srv.url.endswith("/metrics"), srv.url
        assert srv.get("/healthz")[0] == 200
        assert "logmetrics_open_files" in srv.get()[2]
    finally:
        assert srv.stop() == 0


@needs_ipv6
@pytest.mark.parametrize("listen", ["[::]:0", ":0"])
def test_listen_dual_stack(tmp_path: Path, listen: str) -> None:
    """[::]:PORT and :PORT answer on IPv4 and IPv6 alike."""
    srv = Server(str(tmp_path), "--listen", listen)
    try:
        assert srv.url.startswith("http://localhost:"), srv.url
        port = int(srv.url.rsplit(":", 1)[1].split("/")[0])
        assert request("127.0.0.1", port, "/healthz")[0] == 200
        assert request("::1", port, "/healthz")[0] == 200
    finally:
        assert srv.stop() == 0
