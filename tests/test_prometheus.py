"""logmetrics against the real thing: a Prometheus server scraping it, promtool linting its output,
and the HTTP endpoint's content negotiation (text 0.0.4 and OpenMetrics).

The binaries come from Debian's ``prometheus`` package (``scripts/test`` installs it). Without them
the integration tests skip on a developer machine and fail in CI (``CI=true``).
"""

from __future__ import annotations

import json
import os
import queue
import random
import re
import shutil
import signal
import socket
import string
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from types import TracebackType

import pytest
from prometheus_client.openmetrics.parser import text_string_to_metric_families as parse_openmetrics
from prometheus_client.parser import text_string_to_metric_families as parse_text

STATS = (
    "INFO 04-10 03:35:27 [loggers.py:80] Engine 000: Avg prompt throughput: 12.5 tokens/s, "
    "Avg generation throughput: 40.1 tokens/s, Running: {running} reqs, Waiting: {waiting} reqs, "
    "GPU KV cache usage: 4.2%, Prefix cache hit rate: 0.0%"
)
ACCESS = 'INFO:     127.0.0.1:{port} - "{method} {path} HTTP/1.1" {status}'
CHAT = "/v1/chat/completions"

SERVING_RE = re.compile(r"serving metrics at http://(?P<host>[^/\s]+):(?P<port>\d+)/metrics")
START_TIMEOUT = 30.0
PROM_TIMEOUT = 60.0
POLL = 0.2


def access(n: int, path: str = CHAT, status: str = "200 OK", method: str = "POST") -> list[str]:
    """``n`` uvicorn access lines for one path and status."""
    return [ACCESS.format(port=40000 + i, method=method, path=path, status=status) for i in range(n)]


def binary(name: str, package: str = "prometheus") -> str:
    """Path of a Prometheus binary (of Debian's ``package``); skip without it, except in CI where it
    must be installed."""
    path = shutil.which(name)
    if path is None:
        msg = f"{name} not on PATH (Debian package '{package}'; scripts/test installs it)"
        if os.environ.get("CI", "").lower() in ("true", "1", "yes"):
            pytest.fail(f"{msg}: CI must run the integration tests")
        pytest.skip(msg)
    return path


def free_port() -> int:
    """A TCP port on 127.0.0.1 that was free a moment ago."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


def http_get(url: str, headers: dict[str, str] | None = None, timeout: float = 5.0) -> tuple[int, str, str]:
    """GET ``url``: status, Content-Type and body (also for error statuses)."""
    req = urllib.request.Request(url, headers=headers or {})
    try:
        with urllib.request.urlopen(req, timeout=timeout) as resp:
            return resp.status, resp.headers.get("Content-Type", ""), resp.read().decode("utf-8")
    except urllib.error.HTTPError as exc:
        return exc.code, exc.headers.get("Content-Type", ""), exc.read().decode("utf-8", "replace")


def stop(proc: subprocess.Popen[str], sig: int = signal.SIGTERM, timeout: float = 10.0) -> int:
    """Signal ``proc`` and wait for it; kill it if it does not exit in time. Returns its exit code."""
    if proc.poll() is None:
        proc.send_signal(sig)
        try:
            proc.wait(timeout)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
    return proc.returncode


def wait_ready(name: str, proc: subprocess.Popen[str], piped: Piped, url: str, timeout: float) -> None:
    """Poll ``url``/-/ready of a Prometheus-family server until it answers 200; fail the test if it
    exits or does not within ``timeout`` seconds, with the end of its stderr."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            pytest.fail(f"{name} exited with {proc.returncode}: {piped.tail()}")
        try:
            if http_get(url + "/-/ready", timeout=2)[0] == 200:
                return
        except OSError:
            pass
        time.sleep(POLL)
    pytest.fail(f"{name} not ready within {timeout}s: {piped.tail()}")


@dataclass
class Piped:
    """A child process whose stderr is drained by a thread into a list (and a queue of lines)."""

    proc: subprocess.Popen[str]
    lines: list[str] = field(default_factory=list)
    fresh: queue.Queue[str] = field(default_factory=queue.Queue)

    def __post_init__(self) -> None:
        threading.Thread(target=self._drain, daemon=True).start()

    def _drain(self) -> None:
        assert self.proc.stderr is not None
        for line in self.proc.stderr:
            self.lines.append(line.rstrip("\n"))
            self.fresh.put(line)

    def wait_for(self, pattern: re.Pattern[str], timeout: float) -> re.Match[str]:
        """The first stderr line matching ``pattern``; fail if the process exits or time runs out."""
        deadline = time.monotonic() + timeout
        while True:
            left = deadline - time.monotonic()
            if left <= 0:
                pytest.fail(f"no line matching {pattern.pattern!r} on stderr within {timeout}s: {self.tail()}")
            try:
                line = self.fresh.get(timeout=min(left, POLL))
            except queue.Empty:
                if self.proc.poll() is not None and self.fresh.empty():
                    time.sleep(POLL)  # let the drain thread hand over the last lines
                    if self.fresh.empty():
                        pytest.fail(f"process exited with {self.proc.returncode} before serving: {self.tail()}")
                continue
            m = pattern.search(line)
            if m:
                return m

    def tail(self, n: int = 30) -> str:
        """The last stderr lines, for failure messages."""
        return "\n".join(self.lines[-n:]) or "(no output on stderr)"


class Logmetrics:
    """``logmetrics watch ... --listen 127.0.0.1:0`` as a real process; knows the port it printed."""

    def __init__(self, *args: str) -> None:
        cmd = [sys.executable, "-m", "logmetrics", "watch", *args, "--listen", "127.0.0.1:0"]
        proc = subprocess.Popen(cmd, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                                stderr=subprocess.PIPE, text=True, errors="replace")
        self.piped = Piped(proc)
        self.proc = proc
        try:
            m = self.piped.wait_for(SERVING_RE, START_TIMEOUT)
            self.port = int(m.group("port"))
            assert self.port != 0, f"the start-up line must name the real port, not 0: {m.group(0)}"
        except BaseException:
            stop(proc)
            raise
        self.url = f"http://127.0.0.1:{self.port}"

    def __enter__(self) -> Logmetrics:
        return self

    def __exit__(self, et: type[BaseException] | None, ev: BaseException | None, tb: TracebackType | None) -> None:
        stop(self.proc)


@pytest.fixture
def vllm_dir(tmp_path: Path) -> Path:
    """A log directory holding a vllm.log with one stats line and a few access lines."""
    logs = tmp_path / "logs"
    logs.mkdir()
    lines = [STATS.format(running=3, waiting=1), *access(3), *access(2, "/health", method="GET")]
    (logs / "vllm.log").write_text("\n".join(lines) + "\n")
    return logs


def series(text: str, name: str, openmetrics: bool = False) -> dict[tuple[tuple[str, str], ...], float]:
    """Samples called ``name`` in an exposition, keyed by their sorted labels."""
    parse = parse_openmetrics if openmetrics else parse_text
    return {tuple(sorted(s.labels.items())): s.value
            for fam in parse(text) for s in fam.samples if s.name == name}


def family_names(text: str, openmetrics: bool = False) -> set[str]:
    """Names of the metric families in an exposition (counters without ``_total``), parsed strictly."""
    parse = parse_openmetrics if openmetrics else parse_text
    return {fam.name for fam in parse(text)}


# --- Prometheus server -------------------------------------------------------------------------


class Prometheus:
    """A real Prometheus server scraping one target every second, with its own tmp storage."""

    def __init__(self, exe: str, workdir: Path, target: str, job: str, extra: str = "") -> None:
        """``extra``: more top-level configuration (rule_files, alerting), as YAML text."""
        workdir.mkdir(parents=True, exist_ok=True)
        config = workdir / "prometheus.yml"
        config.write_text(
            "global:\n  scrape_interval: 1s\n  scrape_timeout: 1s\n  evaluation_interval: 1s\n"
            f"scrape_configs:\n  - job_name: {job}\n    static_configs:\n      - targets: ['{target}']\n" + extra
        )
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        cmd = [exe, f"--config.file={config}", f"--storage.tsdb.path={workdir / 'tsdb'}",
               f"--web.listen-address=127.0.0.1:{self.port}", "--log.level=warn"]
        proc = subprocess.Popen(cmd, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                                stderr=subprocess.PIPE, text=True, errors="replace", cwd=workdir)
        self.piped = Piped(proc)
        self.proc = proc

    def wait_ready(self, timeout: float = PROM_TIMEOUT) -> None:
        """Poll /-/ready until the server answers 200."""
        wait_ready("prometheus", self.proc, self.piped, self.url, timeout)

    def query(self, promql: str) -> list[tuple[dict[str, str], float]]:
        """Instant query: (labels, value) per series."""
        status, _, body = http_get(self.url + "/api/v1/query?" + urllib.parse.urlencode({"query": promql}))
        assert status == 200, f"query {promql!r}: HTTP {status}: {body}"
        data = json.loads(body)
        assert data["status"] == "success", data
        return [(r["metric"], float(r["value"][1])) for r in data["data"]["result"]]

    def targets(self) -> str:
        """The active targets' health and last error, for failure messages."""
        try:
            data = json.loads(http_get(self.url + "/api/v1/targets")[2])
            return "; ".join(f"{t['scrapeUrl']} health={t['health']} lastError={t['lastError']!r}"
                             for t in data["data"]["activeTargets"])
        except (OSError, ValueError, KeyError) as exc:
            return f"(targets unavailable: {exc})"

    def wait_value(self, promql: str, want: float, timeout: float = PROM_TIMEOUT) -> dict[str, str]:
        """Poll an instant query until it returns exactly one series with value ``want``; its labels."""
        deadline = time.monotonic() + timeout
        got: list[tuple[dict[str, str], float]] = []
        while time.monotonic() < deadline:
            got = self.query(promql)
            if len(got) == 1 and got[0][1] == want:
                return got[0][0]
            time.sleep(POLL)
        pytest.fail(f"{promql} did not become {want} within {timeout}s; last result {got}; "
                    f"targets: {self.targets()}")


@pytest.fixture
def prometheus_exe() -> str:
    """The prometheus server binary."""
    return binary("prometheus")


@pytest.fixture
def promtool_exe() -> str:
    """The promtool binary."""
    return binary("promtool")


@pytest.fixture
def served(vllm_dir: Path) -> Iterator[Logmetrics]:
    """logmetrics following ``vllm_dir`` from the beginning and serving on a free port."""
    with Logmetrics(str(vllm_dir), "--from-beginning", "--poll-interval", "0.1") as lm:
        yield lm


@pytest.mark.integration
def test_prometheus_scrapes_vllm_metrics(vllm_dir: Path, prometheus_exe: str, tmp_path: Path) -> None:
    """A real Prometheus scrapes logmetrics and sees the vLLM gauges and access counts, also after appends."""
    job = "logmetrics"
    with Logmetrics(str(vllm_dir), "--poll-interval", "0.1", "--from-beginning") as lm:
        prom = Prometheus(prometheus_exe, tmp_path / "prom", f"127.0.0.1:{lm.port}", job)
        try:
            prom.wait_ready()
            labels = prom.wait_value("llm_requests_running", 3)
            assert labels.get("backend") == "vllm", labels
            assert labels.get("job") == job, labels
            prom.wait_value(f'http_requests_total{{method="POST",route="{CHAT}",code="200"}}', 3)
            prom.wait_value('http_requests_total{method="GET",route="/health",code="200"}', 2)
            prom.wait_value("llm_requests_waiting", 1)
            prom.wait_value(f'up{{job="{job}"}}', 1)

            # Lines appended while running are followed and reach Prometheus too.
            more = [*access(4), *access(1, status="500 Internal Server Error"), STATS.format(running=7, waiting=0)]
            with (vllm_dir / "vllm.log").open("a") as f:
                f.write("\n".join(more) + "\n")
            prom.wait_value("llm_requests_running", 7)
            prom.wait_value(f'http_requests_total{{method="POST",route="{CHAT}",code="200"}}', 7)
            prom.wait_value(f'http_requests_total{{method="POST",route="{CHAT}",code="500"}}', 1)
            prom.wait_value(f'up{{job="{job}"}}', 1)
            # Every scrape of the run succeeded: no failed samples in Prometheus' own view.
            every = prom.query(f'min_over_time(up{{job="{job}"}}[1m])')
            assert [v for _, v in every] == [1.0], f"some scrapes failed: {every}; targets: {prom.targets()}"
        finally:
            code = stop(prom.proc)
            assert code == 0, f"prometheus exited with {code}: {prom.piped.tail()}"
    assert lm.proc.returncode == 0, f"logmetrics exited with {lm.proc.returncode} on SIGTERM: {lm.piped.tail()}"


SAMPLE = [
    "INFO 04-10 03:35:00 [api_server.py:1090] vLLM API server version 0.9.2",
    "INFO 04-10 03:35:01 [api_server.py:1091] args: Namespace(model='Qwen/Qwen2.5-7B-Instruct', port=8000)",
    STATS.format(running=2, waiting=0),
    *access(5),
    *access(2, "/v1/completions"),
    *access(1, status="400 Bad Request"),
    *access(1, status="500 Internal Server Error"),
    *access(3, "/health", method="GET"),
    *access(1, "/v1/models/Qwen/xyz?x=1", method="GET", status="404 Not Found"),
    "ERROR 04-10 03:35:29 [serving_chat.py:222] Error in chat completion: ValueError: This model's maximum "
    "context length is 4096 tokens. However, you requested 5000 tokens.",
    "ERROR 04-10 03:35:30 [core.py:584] EngineCore encountered a fatal error.",
    "WARNING 04-10 03:35:31 [protocol.py:58] The following fields were present in the request but ignored: {'user'}",
    STATS.format(running=1, waiting=2),
]


@pytest.mark.integration
def test_promtool_check_metrics_oneshot(tmp_path: Path, promtool_exe: str) -> None:
    """``promtool check metrics`` finds nothing to report in the --oneshot exposition of a vLLM sample."""
    log = tmp_path / "vllm.log"
    log.write_text("\n".join(SAMPLE) + "\n")
    one = subprocess.run([sys.executable, "-m", "logmetrics", "watch", str(log), "--oneshot", "--parser", "vllm"],
                         stdin=subprocess.DEVNULL, capture_output=True, text=True, timeout=60)
    assert one.returncode == 0, f"--oneshot exited with {one.returncode}: {one.stderr}"
    assert series(one.stdout, "http_requests_total"), f"no http_requests_total in:\n{one.stdout}"
    check = subprocess.run([promtool_exe, "check", "metrics"], input=one.stdout,
                           capture_output=True, text=True, timeout=60)
    report = (check.stdout + check.stderr).strip()
    assert check.returncode == 0 and report == "", f"promtool check metrics (exit {check.returncode}):\n{report}"


@pytest.mark.integration
def test_promtool_clean_and_real_routes_kept_after_10000_scanner_404s(tmp_path: Path, promtool_exe: str) -> None:
    """10,000 scanner 404s on random paths, mixed with real routes: promtool is clean, real routes keep their label."""
    rnd = random.Random(10000)
    real = [("POST", CHAT), ("POST", "/v1/completions"), ("GET", "/health"), ("GET", "/v1/models")]
    lines: list[str] = []
    for i in range(10000):
        word = "".join(rnd.choice(string.ascii_lowercase) for _ in range(rnd.randint(3, 12)))
        lines.append(ACCESS.format(port=i, method="GET", path=f"/{word}/{rnd.choice(['.env', 'x.php', 'a'])}",
                                   status="404 Not Found"))
        if i % 100 == 99:
            method, path = real[(i // 100) % len(real)]
            lines.append(ACCESS.format(port=i, method=method, path=path, status="200 OK"))
    log = tmp_path / "vllm.log"
    log.write_text("\n".join(lines) + "\n")
    one = subprocess.run([sys.executable, "-m", "logmetrics", "watch", str(log), "--oneshot", "--parser", "vllm"],
                         stdin=subprocess.DEVNULL, capture_output=True, text=True, timeout=120)
    assert one.returncode == 0, f"--oneshot exited with {one.returncode}: {one.stderr}"
    check = subprocess.run([promtool_exe, "check", "metrics"], input=one.stdout,
                           capture_output=True, text=True, timeout=60)
    report = (check.stdout + check.stderr).strip()
    assert check.returncode == 0 and report == "", f"promtool check metrics (exit {check.returncode}):\n{report}"
    got = {(s.labels["method"], s.labels["route"], s.labels["code"]): s.value
           for fam in parse_text(one.stdout) if fam.name == "http_requests" for s in fam.samples
           if s.name == "http_requests_total"}
    assert got == {**{(m, p, "200"): 25.0 for m, p in real}, ("GET", "__not_found__", "404"): 10000.0}


def test_default_exposition_is_text_004(served: Logmetrics) -> None:
    """Without an Accept header /metrics answers Prometheus text format 0.0.4 that parses."""
    status, ctype, body = http_get(served.url + "/metrics")
    assert status == 200, body
    assert ctype.startswith("text/plain") and "version=0.0.4" in ctype, ctype
    assert "# EOF" not in body
    assert "logmetrics_lines_read" in family_names(body), "self metrics missing from /metrics"


def test_openmetrics_negotiated(served: Logmetrics) -> None:
    """An OpenMetrics Accept header gets the OpenMetrics content type and a body ending in # EOF."""
    accept = "application/openmetrics-text; version=1.0.0"
    status, ctype, body = http_get(served.url + "/metrics", {"Accept": accept})
    assert status == 200, body
    assert ctype.startswith("application/openmetrics-text"), ctype
    assert "version=1.0.0" in ctype, ctype
    assert body.endswith("# EOF\n"), body[-200:]
    assert "logmetrics_lines_read" in family_names(body, openmetrics=True), "self metrics missing from OpenMetrics"


def test_openmetrics_as_prometheus_asks(served: Logmetrics) -> None:
    """The Accept header Prometheus itself sends (a weighted list) also gets OpenMetrics."""
    accept = ("application/openmetrics-text;version=1.0.0,application/openmetrics-text;version=0.0.1;q=0.75,"
              "text/plain;version=0.0.4;q=0.5,*/*;q=0.1")
    status, ctype, body = http_get(served.url + "/metrics", {"Accept": accept})
    assert status == 200, body
    assert ctype.startswith("application/openmetrics-text"), ctype
    assert body.endswith("# EOF\n"), body[-200:]


def test_healthz(served: Logmetrics) -> None:
    """/healthz answers 200."""
    status, _, body = http_get(served.url + "/healthz")
    assert status == 200, body


def test_served_counts_match_file(served: Logmetrics) -> None:
    """/metrics reports the access lines of the followed file (read from the beginning)."""
    want = {"/v1/chat/completions": 3.0, "/health": 2.0}
    deadline = time.monotonic() + START_TIMEOUT
    got: dict[str, float] = {}
    while time.monotonic() < deadline:
        body = http_get(served.url + "/metrics")[2]
        got = {}
        for labels, value in series(body, "http_requests_total").items():
            route = dict(labels).get("route", "")
            got[route] = got.get(route, 0.0) + value
        got = {k: v for k, v in got.items() if v}
        if got == want:
            return
        time.sleep(POLL)
    pytest.fail(f"http_requests_total by route: want {want}, got {got}")


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGINT], ids=["SIGTERM", "SIGINT"])
def test_signal_exits_zero(vllm_dir: Path, sig: signal.Signals) -> None:
    """SIGTERM and SIGINT stop the server with exit code 0."""
    lm = Logmetrics(str(vllm_dir), "--poll-interval", "0.1")
    try:
        assert http_get(lm.url + "/healthz")[0] == 200
    finally:
        code = stop(lm.proc, sig)
    assert code == 0, f"exit code {code} after {sig.name}: {lm.piped.tail()}"
