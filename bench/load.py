#!/usr/bin/env python3
"""Load test: logmetrics and mtail following the same files at once, written at a fixed rate.

Not a test: it prints figures. For each scenario (a total rate over a number of files) it creates
the files empty, starts a serving ``logmetrics watch --parser vllm DIR`` and ``mtail --progs
bench/llm.mtail --logs 'DIR/*.log'`` side by side (both read files present at start from their
end), lets them settle, then a writer process appends uvicorn access lines at the rate for
``--seconds`` while a scraper fetches each tool's ``/metrics`` every second. In the second half
of the writing, about once a second, the writer appends one probe line (route ``/probe``) to one
of the files, and a prober per tool polls ``/metrics`` every 10 ms until its
``http_requests_total{route="/probe"}`` shows it: the delay
from write to visible. After the writer stops, each tool is given ``--wait`` seconds to show
every line in ``http_requests_total`` (summed over all series); a count that differs from the
lines written is printed as MISMATCH and the exit status is 1.

Per scenario and tool: lines written and counted, probe delay p50/p99, CPU (user + system, all
threads, from /proc/PID/stat) in the first half of the writing, where only the 1 s scrapes run
("steady": the probers' scrapes every 10 ms would cost more than the lines at low rates), as % of
a core and per 10,000 lines/s; CPU from the start of writing until the tool had counted every line,
probes and catching up included ("all"), as % of a core over the writing time; peak RSS (VmHWM) and how long after
the end of writing the last line was counted. Then the idle CPU of both on 1,000 files with
nothing written, and a burst: 1,000,000 lines appended to one file as fast as possible, and the
time from the end of that write until each tool shows them all (polled every 50 ms).

    .venv/bin/python bench/load.py                          # 20k and 100k lines/s x 1, 100, 1,000 files
    .venv/bin/python bench/load.py --quick                  # about a minute
    .venv/bin/python bench/load.py --rates 100000 --files 1000 --seconds 20 --no-idle --no-burst
    .venv/bin/python bench/load.py --no-mtail --json bench/out/load.json

Scrape time at 10,000 and 100,000 series is measured by ``bench/scrape.py``.
"""

from __future__ import annotations

import argparse
import http.client
import json
import multiprocessing as mp
import os
import platform
import random
import re
import shutil
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import dataclass, field
from multiprocessing.queues import Queue
from multiprocessing.sharedctypes import Synchronized, SynchronizedArray
from multiprocessing.synchronize import Event
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))  # run as a script: find ``bench``
from bench.run import MTAIL_PROG, fmt_row, version
from bench.scrape import ACCEPT, pct

LINE = b'INFO:     10.0.3.7:51408 - "POST /v1/chat/completions HTTP/1.1" 200 OK\n'
PROBE = b'INFO:     10.0.3.7:51408 - "POST /probe HTTP/1.1" 200 OK\n'
PROBE_GAP = (0.8, 1.2)  # seconds between probes, drawn uniformly
REQUESTS = re.compile(r"^http_requests_total\{([^\n]*)\} (\S+)$", re.M)
TICK = os.sysconf("SC_CLK_TCK")
#: The uvicorn access lines of a corpus: what both tools count in ``http_requests_total``.
ACCESS = re.compile(rb'INFO: +\S+ - "\S+ \S+ HTTP/[\d.]+" \d{3}')


class Feed:
    """What the writer appends: ``LINE`` over and over, or the lines of a corpus in turn (``--corpus``:
    the mixed vLLM log, say), and how many of them ``http_requests_total`` must count."""

    def __init__(self, corpus: Path | None) -> None:
        self.lines: list[bytes] = []
        self.counted = [0]  # access lines among the first i lines
        self.pos = 0
        if corpus is not None:
            with corpus.open("rb") as f:
                self.lines = f.read().splitlines(keepends=True)
            if not self.lines or not self.lines[-1].endswith(b"\n"):
                raise SystemExit(f"{corpus}: no whole lines")
            for line in self.lines:
                self.counted.append(self.counted[-1] + bool(ACCESS.match(line)))
        self._same: dict[int, bytes] = {}

    def take(self, n: int) -> tuple[bytes, int]:
        """The next ``n`` lines, and how many of them count."""
        if not self.lines:
            got = self._same.get(n)
            if got is None:
                got = self._same[n] = LINE * n
            return got, n
        parts: list[bytes] = []
        counted = 0
        while n:
            k = min(n, len(self.lines) - self.pos)
            parts += self.lines[self.pos:self.pos + k]
            counted += self.counted[self.pos + k] - self.counted[self.pos]
            self.pos = (self.pos + k) % len(self.lines)
            n -= k
        return b"".join(parts), counted


def counts(text: str) -> tuple[int, int]:
    """``http_requests_total`` summed over every series, and over the ``/probe`` series."""
    total = probes = 0.0
    for labels, value in REQUESTS.findall(text):
        total += float(value)
        if 'route="/probe"' in labels:
            probes += float(value)
    return int(total), int(probes)


class Conn:
    """A kept-alive HTTP connection to one tool's ``/metrics``, opened again after an error."""

    def __init__(self, port: int) -> None:
        self.port = port
        self.conn: http.client.HTTPConnection | None = None

    def get(self, headers: dict[str, str] | None = None) -> bytes:
        """One scrape's body (raises OSError or HTTPException when the scrape fails)."""
        if self.conn is None:
            self.conn = http.client.HTTPConnection("127.0.0.1", self.port, timeout=30)
        try:
            self.conn.request("GET", "/metrics", headers=headers or {})
            resp = self.conn.getresponse()
            body = resp.read()
        except (OSError, http.client.HTTPException):
            self.conn.close()
            self.conn = None
            raise
        if resp.status != 200:
            raise http.client.HTTPException(f"/metrics answered {resp.status}")
        return body

    def counts(self) -> tuple[int, int] | None:
        """``counts`` of a scrape, or None when it failed."""
        try:
            return counts(self.get().decode())
        except (OSError, http.client.HTTPException):
            return None


@dataclass
class Tool:
    """A running follower: its process, port and stderr file."""

    name: str
    proc: subprocess.Popen[bytes]
    port: int
    err: Path
    conn: Conn = field(init=False)

    def __post_init__(self) -> None:
        self.conn = Conn(self.port)

    def cpu(self) -> float:
        """CPU seconds (user + system, every thread) so far, from /proc: the process', its child
        processes' now (logmetrics' prescans, say) and those of the children it waited for."""
        pid = self.proc.pid
        try:
            children = Path(f"/proc/{pid}/task/{pid}/children").read_text().split()
        except OSError:  # (no such file without CONFIG_PROC_CHILDREN)
            children = []
        total = 0
        for i, p in enumerate([str(pid), *children]):
            try:
                fields = Path(f"/proc/{p}/stat").read_text().rsplit(")", 1)[1].split()
            except OSError:  # a child just ended: its time is its parent's once waited for
                continue
            total += sum(int(x) for x in fields[11:15 if i == 0 else 13])
        return total / TICK

    def rss_mib(self) -> float:
        """Peak resident set size (VmHWM) in MiB."""
        for line in Path(f"/proc/{self.proc.pid}/status").read_text().splitlines():
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) / 1024
        return float("nan")

    def stop(self) -> None:
        """SIGTERM, then SIGKILL after 10 s."""
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()


def free_port() -> int:
    """A TCP port free on the loopback interface just now."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


def failed(tool: Tool, what: str) -> SystemExit:
    """The error that ends the run when a tool did not start."""
    return SystemExit(f"{tool.name} {what}: exit {tool.proc.poll()}\n{tool.err.read_text(errors='replace')[-3000:]}")


def start_tools(tmp: Path, logs: Path, a: argparse.Namespace) -> list[Tool]:
    """Start logmetrics (and mtail) on ``logs``; return once both serve /metrics."""
    lm_cmd = [a.python, "-m", "logmetrics", "watch", "--parser", "vllm", "--listen", "127.0.0.1:0"]
    if a.poll_interval is not None:
        lm_cmd += ["--poll-interval", str(a.poll_interval)]
    err = tmp / "logmetrics.err"
    with err.open("wb") as fe:
        proc = subprocess.Popen([*lm_cmd, str(logs)], stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=fe)
    lm = Tool("logmetrics", proc, 0, err)
    deadline = time.monotonic() + 60
    while not (found := re.search(r"serving metrics at http://[^:]+:(\d+)/", err.read_text(errors="replace"))):
        if proc.poll() is not None or time.monotonic() > deadline:
            lm.stop()
            raise failed(lm, "did not start")
        time.sleep(0.05)
    lm.port = lm.conn.port = int(found.group(1))
    tools = [lm]
    if a.mtail:
        port = free_port()
        cmd = [a.mtail, "--progs", str(MTAIL_PROG), "--logs", f"{logs}/*.log", "--address", "127.0.0.1",
               "--port", str(port), "--logtostderr"]
        if a.poll_interval is not None:
            cmd.append(f"--poll_interval={a.poll_interval * 1000:g}ms")
        err = tmp / "mtail.err"
        with err.open("wb") as fe:
            proc = subprocess.Popen(cmd, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=fe)
        mt = Tool("mtail", proc, port, err)
        tools.append(mt)
        while mt.conn.counts() is None:
            if proc.poll() is not None or time.monotonic() > deadline:
                for t in tools:
                    t.stop()
                raise failed(mt, "did not start")
            time.sleep(0.05)
    return tools


def make_files(logs: Path, n: int) -> list[Path]:
    """``n`` empty logs ``vllm-NNNN.log``."""
    logs.mkdir()
    paths = [logs / f"vllm-{i:04d}.log" for i in range(n)]
    for p in paths:
        p.touch()
    return paths


def write_all(fd: int, data: bytes) -> None:
    """os.write until every byte is written."""
    view = memoryview(data)
    while view:
        view = view[os.write(fd, view):]


def writer(paths: list[Path], rate: int, seconds: float, go: Event, probe_times: SynchronizedArray[float],
           probes: Synchronized[int], result: Queue[tuple[int, int, float, float, float, int]], feed: Feed) -> None:
    """Append ``rate`` lines/s of ``feed`` over ``paths`` for ``seconds`` after ``go``, in ticks (one
    os.write per file per tick), and a probe line about every second (0.8 to 1.2 s apart, at random,
    so that the probes do not keep one phase against a poll timer); put (lines, probes, seconds,
    latest tick s, CPU s, lines to count)."""
    fds = [os.open(p, os.O_WRONLY | os.O_APPEND) for p in paths]
    n = len(fds)
    tick = min(0.05, max(0.01, n / 20_000))  # 10 ms for few files, 50 ms for 1,000: bigger writes, fewer calls
    counted = 0
    go.wait()
    cpu0 = time.process_time()
    t0 = time.monotonic()
    end = t0 + seconds
    written = sent = off = 0
    late = 0.0
    next_probe = t0 + seconds / 2  # the first half has only the 1 s scrapes: its CPU is the steady cost
    k = 0
    while True:
        now = min(time.monotonic(), end)
        want = int(rate * (now - t0)) - written
        base, rem = divmod(want, n)
        for j in range(n if base else rem):
            chunk, access = feed.take(base + (j < rem))
            counted += access
            write_all(fds[(off + j) % n], chunk)
        off = (off + rem) % n
        written += want
        if now >= next_probe and now < end and sent < len(probe_times):
            probe_times[sent] = time.monotonic()  # before the write: the line cannot be seen earlier
            probes.value = sent + 1
            write_all(fds[sent % n], PROBE)
            sent += 1
            next_probe += random.uniform(*PROBE_GAP)  # not in step with either tool's poll timer
        if now >= end:
            break
        k = max(k + 1, int((now - t0) / tick) + 1)
        pause = t0 + k * tick - time.monotonic()
        if pause > 0:
            time.sleep(pause)
        else:
            late = max(late, -pause)
    elapsed = time.monotonic() - t0
    for fd in fds:
        os.close(fd)
    result.put((written, sent, elapsed, late, time.process_time() - cpu0, counted))


def prober(tool: Tool, probe_times: SynchronizedArray[float], probes: Synchronized[int], stop: threading.Event,
           delays: list[float]) -> None:
    """Poll ``tool`` every 10 ms while a probe is unseen; a probe's delay runs from its write to the
    start of the first scrape that shows it."""
    conn = Conn(tool.port)
    seen = 0
    while not stop.is_set():
        if seen < probes.value:
            t = time.monotonic()
            got = conn.counts()
            if got is not None:
                while seen < min(got[1], probes.value):
                    delays.append(t - probe_times[seen])
                    seen += 1
        time.sleep(0.01)


def scraper(tool: Tool, stop: threading.Event, times: list[float]) -> None:
    """Scrape ``tool`` every second as Prometheus does (Accept, gzip) until ``stop``; each scrape's seconds."""
    conn = Conn(tool.port)
    while not stop.wait(1.0):
        t = time.perf_counter()
        try:
            conn.get({"Accept": ACCEPT, "Accept-Encoding": "gzip"})
            times.append(time.perf_counter() - t)
        except (OSError, http.client.HTTPException):
            times.append(float("nan"))


def catch_up(tools: list[Tool], want: int, since: float, wait: float, step: float) -> dict[str, dict[str, float]]:
    """Poll every ``step`` s until each tool counts ``want`` lines, or its count stays put for 5 s, or
    ``wait`` s pass; per tool: the count, seconds after ``since`` it got there (nan if not), CPU then."""
    out: dict[str, dict[str, float]] = {}
    last: dict[str, tuple[int, float]] = {}
    deadline = time.monotonic() + wait
    while len(out) < len(tools):
        for tool in tools:
            if tool.name in out:
                continue
            t = time.monotonic()
            got = tool.conn.counts()
            n = got[0] if got is not None else last.get(tool.name, (-1, t))[0]
            if n != last.get(tool.name, (None, 0.0))[0]:
                last[tool.name] = (n, t)
            if n == want or t > deadline or t - last[tool.name][1] > 5:
                out[tool.name] = {"counted": n, "after": t - since if n == want else float("nan"), "cpu": tool.cpu()}
        time.sleep(step)
    return out


def ms(values: list[float], q: float) -> float:
    """The q-quantile of ``values`` in ms (nan when empty)."""
    return pct(values, q) * 1e3 if values else float("nan")


def scenario(rate: int, files: int, a: argparse.Namespace) -> dict[str, Any]:
    """One rate over one number of files: the figures of each tool."""
    with tempfile.TemporaryDirectory(prefix="lm-load-") as name:
        tmp = Path(name)
        paths = make_files(tmp / "logs", files)
        tools = start_tools(tmp, tmp / "logs", a)
        try:
            time.sleep(a.settle)
            ctx = mp.get_context("fork")  # no thread of ours runs yet
            go, probes, probe_times = ctx.Event(), ctx.Value("i", 0), ctx.Array("d", int(a.seconds / PROBE_GAP[0]) + 2)
            result: Queue[tuple[int, int, float, float, float, int]] = ctx.Queue()
            proc = ctx.Process(target=writer, args=(paths, rate, a.seconds, go, probe_times, probes, result,
                                                    a.feed), daemon=True)
            proc.start()
            stop = threading.Event()
            delays: dict[str, list[float]] = {t.name: [] for t in tools}
            scrapes: dict[str, list[float]] = {t.name: [] for t in tools}
            threads = [threading.Thread(target=prober, args=(t, probe_times, probes, stop, delays[t.name]))
                       for t in tools] + [threading.Thread(target=scraper, args=(t, stop, scrapes[t.name]))
                                          for t in tools]
            for th in threads:
                th.start()
            cpu0 = {t.name: t.cpu() for t in tools}
            go.set()
            t_go = time.monotonic()
            time.sleep(a.seconds / 2)
            cpu_half = {t.name: t.cpu() - cpu0[t.name] for t in tools}
            half = time.monotonic() - t_go
            written, sent, elapsed, late, wcpu, counted = result.get(timeout=a.seconds + 120)
            t_end = time.monotonic()
            proc.join()
            cpu_window = {t.name: t.cpu() - cpu0[t.name] for t in tools}
            done = catch_up(tools, counted + sent, t_end, a.wait, 0.1)
            time.sleep(0.5)  # the last probe's scrape
            stop.set()
            for th in threads:
                th.join()
            rows: dict[str, dict[str, Any]] = {}
            for t in tools:
                cpu = done[t.name]["cpu"] - cpu0[t.name]
                rows[t.name] = {"written": counted + sent, "counted": done[t.name]["counted"],
                                "caught_up_s": done[t.name]["after"], "probes_seen": len(delays[t.name]),
                                "delay_p50_ms": ms(delays[t.name], 0.5), "delay_p99_ms": ms(delays[t.name], 0.99),
                                "cpu_s": cpu, "cpu_s_writing": cpu_window[t.name], "cpu_pct": 100 * cpu / elapsed,
                                "cpu_pct_per_10k": 100 * cpu / elapsed / (rate / 10_000), "rss_mib": t.rss_mib(),
                                "cpu_s_first_half": cpu_half[t.name], "first_half_s": half,
                                "cpu_pct_steady": 100 * cpu_half[t.name] / half,
                                "delays_ms": [d * 1e3 for d in delays[t.name]],
                                "scrape_ms": [s * 1e3 for s in scrapes[t.name]]}
        finally:
            for t in tools:
                t.stop()
    return {"rate": rate, "files": files, "seconds": a.seconds, "lines": written, "access": counted, "probes": sent,
            "write_s": elapsed, "achieved_rate": written / elapsed, "writer_late_ms": late * 1e3,
            "writer_cpu_s": wcpu, "tools": rows}


def idle(files: int, a: argparse.Namespace) -> dict[str, dict[str, float]]:
    """CPU % of a core and peak RSS of each tool following ``files`` files that nobody writes."""
    with tempfile.TemporaryDirectory(prefix="lm-idle-") as name:
        tmp = Path(name)
        make_files(tmp / "logs", files)
        tools = start_tools(tmp, tmp / "logs", a)
        try:
            time.sleep(5)
            cpu0 = {t.name: t.cpu() for t in tools}
            t0 = time.monotonic()
            time.sleep(a.idle_seconds)
            wall = time.monotonic() - t0
            return {t.name: {"cpu_pct": 100 * (t.cpu() - cpu0[t.name]) / wall, "rss_mib": t.rss_mib()} for t in tools}
        finally:
            for t in tools:
                t.stop()


def burst(lines: int, a: argparse.Namespace) -> dict[str, Any]:
    """``lines`` lines appended to one followed file at once; how long after the write each tool
    shows them. Each tool alone (logmetrics first, then mtail), so that neither takes the other's CPU."""
    rows: dict[str, dict[str, float]] = {}
    write_s: list[float] = []
    for name in ["logmetrics", "mtail"] if a.mtail else ["logmetrics"]:
        with tempfile.TemporaryDirectory(prefix="lm-burst-") as tmpname:
            tmp = Path(tmpname)
            (path,) = make_files(tmp / "logs", 1)
            tools = start_tools(tmp, tmp / "logs", a)
            for other in [t for t in tools if t.name != name]:
                other.stop()
            tools = [t for t in tools if t.name == name]
            try:
                time.sleep(a.settle)
                (tool,) = tools
                cpu0 = tool.cpu()
                a.feed.pos = 0
                blocks = [a.feed.take(min(10_000, lines - i)) for i in range(0, lines, 10_000)]
                want = sum(k for _, k in blocks)
                fd = os.open(path, os.O_WRONLY | os.O_APPEND)
                t0 = time.monotonic()
                for block, _ in blocks:
                    write_all(fd, block)
                t_end = time.monotonic()
                os.close(fd)
                write_s.append(t_end - t0)
                got = catch_up([tool], want, t_end, a.burst_wait, 0.05)[name]
                rows[name] = {"counted": got["counted"], "want": want, "after_s": got["after"],
                              "cpu_s": got["cpu"] - cpu0, "rss_mib": tool.rss_mib()}
            finally:
                for t in tools:
                    t.stop()
    return {"lines": lines, "write_s": max(write_s), "tools": rows}


def print_scenario(r: dict[str, Any]) -> bool:
    """Print one scenario's table; False when a count differs from the lines written."""
    print(f"\n### {r['rate']:,} lines/s over {r['files']:,} file{'s' if r['files'] > 1 else ''}, {r['seconds']:g} s")
    access = "" if r["access"] == r["lines"] else f" ({r['access']:,} access lines)"
    print(f"writer: {r['lines']:,} lines{access} + {r['probes']} probes in {r['write_s']:.2f} s = "
          f"{r['achieved_rate']:,.0f} lines/s (target {r['rate']:,}); latest tick {r['writer_late_ms']:.0f} ms late; "
          "writer CPU "
          f"{100 * r['writer_cpu_s'] / r['write_s']:.0f} % of a core")
    print(fmt_row(["tool", "written", "counted", "delay p50 ms", "delay p99 ms", "CPU %, steady",
                   "CPU % per 10k lines/s, steady", "CPU %, all", "peak RSS MiB",
                   "last line counted, s after writing"]))
    print(fmt_row(["---"] + ["---:"] * 9))
    ok = True
    for name, t in r["tools"].items():
        counted = f"{t['counted']:,}"
        if t["counted"] != t["written"]:
            counted += f" MISMATCH ({t['counted'] - t['written']:+,})"
            ok = False
        probes = "" if t["probes_seen"] == r["probes"] else f" ({t['probes_seen']}/{r['probes']} probes seen)"
        print(fmt_row([name, f"{t['written']:,}", counted, f"{t['delay_p50_ms']:.0f}{probes}",
                       f"{t['delay_p99_ms']:.0f}", f"{t['cpu_pct_steady']:.1f}",
                       f"{t['cpu_pct_steady'] / (r['rate'] / 10_000):.1f}", f"{t['cpu_pct']:.1f}",
                       f"{t['rss_mib']:.1f}", f"{t['caught_up_s']:.2f}"]))
    tools = r["tools"]
    if "mtail" in tools and tools["mtail"]["cpu_s"] > 0:
        lm, mt = tools["logmetrics"], tools["mtail"]
        print(f"CPU logmetrics / mtail: steady {lm['cpu_s_first_half'] / mt['cpu_s_first_half']:.2f}, "
              f"all {lm['cpu_s'] / mt['cpu_s']:.2f}")
    scr = "; ".join(f"{n} p50 {statistics.median(t['scrape_ms']):.1f} ms, max {max(t['scrape_ms']):.1f} ms"
                    for n, t in tools.items() if t["scrape_ms"])
    print(f"scrapes every 1 s: {scr}")
    return ok


def main() -> int:
    """Command line entry point."""
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--rates", help="total lines/s of the scenarios, comma-separated (default 20000,100000)")
    ap.add_argument("--files", help="numbers of files of the scenarios, comma-separated (default 1,100,1000)")
    ap.add_argument("--seconds", type=float, help="seconds of writing per scenario (default 20)")
    ap.add_argument("--quick", action="store_true",
                    help="about a minute: 20000 lines/s over 1 and 100 files, 10 s each, idle 5 s, burst of 200,000 "
                         "(flags given as well win)")
    ap.add_argument("--wait", type=float, default=60.0,
                    help="seconds after writing for the counts to reach the lines written (default 60)")
    ap.add_argument("--settle", type=float, default=2.0,
                    help="seconds between the start of the tools and the first write (default 2)")
    ap.add_argument("--no-idle", action="store_true", help="skip the idle measure")
    ap.add_argument("--idle-files", type=int, default=1000, help="files followed in the idle measure (default 1000)")
    ap.add_argument("--idle-seconds", type=float, help="seconds over which idle CPU is measured (default 20)")
    ap.add_argument("--no-burst", action="store_true", help="skip the burst measure")
    ap.add_argument("--corpus", type=Path,
                    help="write the lines of this log in turn instead of one access line over and over (the "
                         "mixed vLLM corpus of run.py, say: bench/out/corpus-1000000-7.log); its uvicorn access "
                         "lines are the ones counted")
    ap.add_argument("--no-scenarios", action="store_true",
                    help="skip the scenarios at a fixed rate (only the idle and burst measures)")
    ap.add_argument("--burst-lines", type=int, help="lines appended at once in the burst measure (default 1000000)")
    ap.add_argument("--burst-wait", type=float, default=120.0,
                    help="seconds after the burst for the counts to reach it (default 120)")
    ap.add_argument("--poll-interval", type=float,
                    help="poll interval in seconds for both tools (logmetrics --poll-interval, mtail "
                         "--poll_interval); default: each tool's own, 0.25 s for both")
    ap.add_argument("--no-mtail", action="store_true", help="measure logmetrics alone")
    ap.add_argument("--mtail", default=shutil.which("mtail"), help="the mtail executable (default: mtail on PATH)")
    ap.add_argument("--python", default=sys.executable, help="interpreter that runs logmetrics (python -m logmetrics)")
    ap.add_argument("--json", type=Path, help="also write the raw figures to this file")
    a = ap.parse_args()
    if a.corpus is not None and not a.corpus.is_file():
        ap.error(f"--corpus {a.corpus}: not a log file (a directory, or missing): name one file of lines")
    a.feed = Feed(a.corpus)
    quick = a.quick
    rates = [int(x) for x in (a.rates or ("20000" if quick else "20000,100000")).split(",")]
    file_counts = [int(x) for x in (a.files or ("1,100" if quick else "1,100,1000")).split(",")]
    a.seconds = a.seconds or (10.0 if quick else 20.0)
    a.idle_seconds = a.idle_seconds or (5.0 if quick else 20.0)
    a.burst_lines = a.burst_lines or (200_000 if quick else 1_000_000)
    if a.no_mtail:
        a.mtail = None
    elif not a.mtail:
        print("mtail is not on PATH: measuring logmetrics alone (Debian: apt-get install mtail)", file=sys.stderr)

    info: dict[str, Any] = {"logmetrics": version([a.python, "-m", "logmetrics", "--version"]),
            "mtail": version([a.mtail, "--version"]) if a.mtail else None, "python": platform.python_version(),
            "cpus": os.cpu_count(), "platform": platform.platform(), "loadavg": os.getloadavg()}
    print(f"{info['logmetrics']}; mtail: {info['mtail'] or 'not run'}; Python {info['python']}")
    print(f"machine: {info['cpus']} CPUs, {info['platform']}, load average {info['loadavg'][0]:.2f} at start")
    ok = True
    out: dict[str, Any] = {"info": info, "scenarios": []}
    for rate in [] if a.no_scenarios else rates:
        for files in file_counts:
            r = scenario(rate, files, a)
            out["scenarios"].append(r)
            ok = print_scenario(r) and ok
            sys.stdout.flush()
    if not a.no_idle:
        out["idle"] = idle(a.idle_files, a)
        print(f"\nidle, {a.idle_files:,} files, nothing written, {a.idle_seconds:g} s: " + "; ".join(
            f"{n} {v['cpu_pct']:.1f} % of a core, peak RSS {v['rss_mib']:.1f} MiB" for n, v in out["idle"].items()))
    if not a.no_burst:
        b = out["burst"] = burst(a.burst_lines, a)
        parts = []
        for n, v in b["tools"].items():
            bad = "" if v["counted"] == v["want"] else f" MISMATCH: counted {v['counted']:,} of {v['want']:,}"
            ok = ok and not bad
            parts.append(f"{n} {v['after_s']:.2f} s (CPU {v['cpu_s']:.2f} s){bad}")
        print(f"\nburst, {b['lines']:,} lines written to one file in {b['write_s']:.2f} s at most, each tool alone, "
              f"all shown after the write ended: " + "; ".join(parts))
        times = b["tools"].get("mtail", {}).get("after_s"), b["tools"]["logmetrics"]["after_s"]
        if times[0] is not None and times[1] > 0:
            print(f"burst time mtail / logmetrics: {times[0] / times[1]:.2f}")
    if a.json:
        a.json.write_text(json.dumps(out, indent=1))
    if not ok:
        print("\nMISMATCH: a tool's count differs from the lines written", file=sys.stderr)
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
