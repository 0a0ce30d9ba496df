"""Scrape latency under load: a serving ``logmetrics watch`` with N series, idle connections held
open, a log written at a steady rate, and concurrent scrapers. Not a test: it prints figures.

    .venv/bin/python bench/scrape.py                       # 10,000 and 100,000 series
    .venv/bin/python bench/scrape.py --series 10000 --seconds 5

For each series count: starts ``logmetrics watch`` on generated access logs whose routes make
about N series (``label_limits.route`` raised in a config file), waits until they are all
read, opens ``--idle`` connections that send nothing, appends ``--rate`` lines/s to one log, and
runs ``--scrapers`` threads that scrape ``/metrics`` back to back for ``--seconds`` with
Prometheus' Accept and Accept-Encoding headers, on keep-alive connections. Prints p50/p99/max
scrape time, the scrape time alone (no other load: render and transfer), and the in-process
render time of the same number of samples by prometheus_client and by the direct renderer.
"""

from __future__ import annotations

import argparse
import http.client
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from urllib.parse import urlsplit

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))  # run as a script: find ``bench``
from bench.state import start as start_watch

ACCEPT = ("application/openmetrics-text;version=1.0.0;q=0.5,application/openmetrics-text;version=0.0.1;q=0.4,"
          "text/plain;version=0.0.4;q=0.3,*/*;q=0.2")
LETTERS = "ghijklmnopqrstuvwxyz"  # no hex digits: a route segment that is never taken for an id


def word(i: int) -> str:
    """A distinct lower-case word for i (base 20 over letters that are not hex digits)."""
    out = ""
    while True:
        out += LETTERS[i % 20]
        i //= 20
        if i == 0:
            return out


def corpus(root: Path, series: int, files: int) -> int:
    """Access logs over ``series // files`` routes each; the number of lines written."""
    routes = max(series // files, 1)
    for f in range(files):
        with open(root / f"vllm-{f:03d}.log", "w") as out:
            out.writelines(f'INFO:     10.0.0.1:40000 - "POST /v1/{word(i)} HTTP/1.1" 200 OK\n' for i in range(routes))
    return routes * files


def start(root: Path, series: int) -> tuple[subprocess.Popen[bytes], str]:
    """Start a serving watch over ``root``; the process and its metrics URL."""
    cfg = root / "lm.toml"
    cfg.write_text(f"from_beginning = true\n[label_limits]\nroute = {series * 2}\n[[input]]\npath = \"{root}/logs\"\n"
                   "parser = \"vllm\"\n")
    return start_watch(["--config", str(cfg)])


def get(conn: http.client.HTTPConnection, gz: bool = True) -> bytes:
    """One scrape on a kept-alive connection, as Prometheus asks for it."""
    headers = {"Accept": ACCEPT, **({"Accept-Encoding": "gzip"} if gz else {})}
    conn.request("GET", "/metrics", headers=headers)
    resp = conn.getresponse()
    body = resp.read()
    if resp.status != 200:
        raise SystemExit(f"scrape answered {resp.status}")
    return body


def wait_read(host: str, port: int, lines: int, deadline: float) -> int:
    """Wait until every line is counted; the number of samples then exposed."""
    conn = http.client.HTTPConnection(host, port, timeout=60)
    while time.monotonic() < deadline:
        text = get(conn, gz=False).decode()
        read = sum(float(line.rsplit(" ", 1)[1]) for line in text.splitlines()
                   if line.startswith("logmetrics_lines_read_total{"))
        if read >= lines:
            return sum(1 for line in text.splitlines() if line and not line.startswith("#"))
        time.sleep(0.5)  # a progress poll of a benchmark, not a test barrier
    raise SystemExit("the corpus was not read in time")


def writer(path: Path, rate: int, stop: threading.Event) -> None:
    """Append ``rate`` lines per second to ``path`` (in batches every 0.1 s) until ``stop``."""
    line = 'INFO:     10.0.0.1:40000 - "POST /v1/chat/completions HTTP/1.1" 200 OK\n'
    with open(path, "a") as out:
        while not stop.wait(0.1):
            out.write(line * (rate // 10))
            out.flush()


def scraper(host: str, port: int, until: float, times: list[float]) -> None:
    """Scrape back to back until ``until``, recording each scrape's seconds."""
    conn = http.client.HTTPConnection(host, port, timeout=60)
    while time.monotonic() < until:
        t = time.perf_counter()
        get(conn)
        times.append(time.perf_counter() - t)
    conn.close()


def pct(values: list[float], q: float) -> float:
    """The q-quantile (nearest rank) of ``values``."""
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


def render_times(samples: int) -> tuple[float, float]:
    """Seconds to render about ``samples`` counter samples in-process: prometheus_client, direct (warm)."""
    from prometheus_client.exposition import generate_latest

    from logmetrics.store.exposition import StoreRegistry
    from logmetrics.store.render import StoreView
    from logmetrics.store.store import Store

    store = Store()
    for i in range(samples):
        store.counters[("http_requests_total", ("vllm", f"/logs/vllm-{i % 20:03d}.log", "POST", f"/v1/{word(i)}",
                                                "200"))] = float(i)
    registry = StoreRegistry(StoreView(store))
    t = time.perf_counter()
    generate_latest(registry)
    pc = time.perf_counter() - t
    registry.renderer.render(openmetrics=True)  # the first render builds the line prefixes
    t = time.perf_counter()
    registry.renderer.render(openmetrics=True)
    return pc, time.perf_counter() - t


def measure(series: int, a: argparse.Namespace) -> dict[str, float]:
    """One series count: the figures of the table's row."""
    with tempfile.TemporaryDirectory(prefix="lm-scrape-") as tmp:
        root = Path(tmp)
        (root / "logs").mkdir()
        files = max(series // 1000, 10)  # the vllm parser keeps 1,024 routes per stream
        lines = corpus(root / "logs", series, files)
        proc, url = start(root, series)
        parts = urlsplit(url)
        host, port = parts.hostname or "127.0.0.1", parts.port or 80
        try:
            samples = wait_read(host, port, lines, time.monotonic() + 600)
            conn = http.client.HTTPConnection(host, port, timeout=60)
            alone = []
            for _ in range(10):
                time.sleep(0.2)  # past the window in which a finished render is shared: each one renders
                t = time.perf_counter()
                get(conn)
                alone.append(time.perf_counter() - t)
            conn.close()
            idle = [socket.create_connection((host, port)) for _ in range(a.idle)]
            stop = threading.Event()
            feed = threading.Thread(target=writer, args=(root / "logs" / "vllm-000.log", a.rate, stop))
            feed.start()
            times: list[float] = []
            until = time.monotonic() + a.seconds
            threads = [threading.Thread(target=scraper, args=(host, port, until, times)) for _ in range(a.scrapers)]
            for th in threads:
                th.start()
            for th in threads:
                th.join()
            stop.set()
            feed.join()
            for s in idle:
                s.close()
        finally:
            proc.terminate()
            proc.wait(30)
    pc, direct = render_times(samples)
    return {"series": series, "samples": samples, "scrapes": len(times), "p50": statistics.median(times),
            "p99": pct(times, 0.99), "max": max(times), "alone": statistics.median(alone), "pc": pc, "direct": direct}


def main() -> None:
    """Run the measure for each series count and print the table."""
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--series", type=int, nargs="+", default=[10_000, 100_000], help="series counts to measure")
    ap.add_argument("--idle", type=int, default=200, help="idle connections held open during the scrapes")
    ap.add_argument("--scrapers", type=int, default=20, help="concurrent scrapers")
    ap.add_argument("--seconds", type=float, default=10.0, help="how long the scrapers run")
    ap.add_argument("--rate", type=int, default=10_000, help="lines per second appended to a log meanwhile")
    a = ap.parse_args()
    print(f"{a.scrapers} scrapers for {a.seconds:g} s, {a.idle} idle connections, {a.rate} lines/s written; "
          "times in ms")
    print("| series | samples | scrapes | p50 | p99 | max | one scrape alone | render prometheus_client "
          "| render direct |")
    print("|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
    for n in a.series:
        r = measure(n, a)
        print(f"| {n:,} | {int(r['samples']):,} | {int(r['scrapes']):,} | {r['p50'] * 1e3:.1f} | {r['p99'] * 1e3:.1f} "
              f"| {r['max'] * 1e3:.1f} | {r['alone'] * 1e3:.1f} | {r['pc'] * 1e3:.0f} | {r['direct'] * 1e3:.0f} |",
              flush=True)


if __name__ == "__main__":
    main()
