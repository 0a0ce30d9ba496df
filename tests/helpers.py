"""Shared test helpers: run 'logmetrics watch' as a server and read its metrics."""

from __future__ import annotations

import os
import select
import subprocess
import sys
import time
import urllib.request
import weakref
from collections.abc import Callable, Sequence
from pathlib import Path

from prometheus_client.parser import text_string_to_metric_families

from logmetrics.engine.parsing import run_parser
from logmetrics.events import SEEN, Event, values_of
from logmetrics.plugins import Parser, ZeroKey, start_zeros
from logmetrics.records import Batch
from logmetrics.store.catalog import BY_NAME

Samples = dict[tuple[str, tuple[tuple[str, str], ...]], float]


def access_line(i: int, route: str = "/v1/chat/completions", code: str = "200 OK") -> str:
    """A uvicorn access line as vLLM's API server prints it."""
    return f'INFO:     127.0.0.1:{40000 + i % 20000} - "POST {route} HTTP/1.1" {code}\n'


def parse(text: str) -> Samples:
    """Exposition text -> {(sample name, sorted labels): value}."""
    out: Samples = {}
    for fam in text_string_to_metric_families(text):
        for s in fam.samples:
            out[(s.name, tuple(sorted(s.labels.items())))] = s.value
    return out


def total(samples: Samples, name: str, **labels: str) -> float:
    """Sum of a sample name's values over series whose labels include ``labels``."""
    want = set(labels.items())
    return sum(v for (n, ls), v in samples.items() if n == name and want <= set(ls))


class Server:
    """A running 'logmetrics watch ... --listen 127.0.0.1:0' process."""

    def __init__(self, *args: str, cwd: Path | None = None, stdin: int = subprocess.DEVNULL,
                 preexec_fn: Callable[[], object] | None = None, wrapper: Sequence[str] = (),
                 env: dict[str, str] | None = None, global_args: Sequence[str] = ()) -> None:
        self.proc = subprocess.Popen(
            [*wrapper, sys.executable, "-m", "logmetrics", *global_args, "watch", "--listen", "127.0.0.1:0", *args],
            env=env,
            # unbuffered: a buffered readline could take two lines from the pipe and leave the second
            # (the URL) in its buffer, where select() never sees it
            stdin=stdin, stdout=subprocess.PIPE, stderr=subprocess.PIPE, cwd=cwd, preexec_fn=preexec_fn, bufsize=0)
        assert self.proc.stderr is not None
        self.url = ""
        self.startup: list[str] = []  # what it printed on stderr before the URL
        deadline = time.monotonic() + 30
        line = b""
        while time.monotonic() < deadline and not self.url:
            ready, _, _ = select.select([self.proc.stderr], [], [], 0.5)
            if ready:
                line = self.proc.stderr.readline()
                if not line:
                    break
                text = line.decode()
                self.startup.append(text)
                if "serving metrics at " in text:
                    self.url = text.split("serving metrics at ", 1)[1].strip()
        if not self.url:
            how = "exited" if line == b"" or self.proc.poll() is not None else "no URL within 30 s"
            rc = self.stop()
            rest = self.proc.stderr.read().decode(errors="replace")[-4000:] if self.proc.stderr else ""
            raise AssertionError(f"logmetrics did not start ({how}, exit code {rc}); stderr: "
                                 f"{''.join(self.startup)}{rest}")

    def get(self, path: str = "/metrics", accept: str = "") -> tuple[int, str, str]:
        """(status, content type, body) of a GET on the server."""
        url = self.url.rsplit("/", 1)[0] + path
        req = urllib.request.Request(url, headers={"Accept": accept} if accept else {})
        with urllib.request.urlopen(req, timeout=10) as resp:
            return resp.status, resp.headers.get("Content-Type", ""), resp.read().decode()

    def samples(self) -> Samples:
        """The current metrics."""
        return parse(self.get()[2])

    def wait_for(self, cond: Callable[[Samples], bool], timeout: float = 30.0) -> Samples:
        """Scrape until ``cond`` holds (the engine's own metrics are the barrier), or fail; the deadline
        is generous because a loaded machine may be slow, and a condition met returns at once."""
        deadline = time.monotonic() + timeout
        while True:
            got = self.samples()
            if cond(got):
                return got
            if time.monotonic() > deadline:
                raise AssertionError(f"condition not met in {timeout}s; last scrape: {got}")
            time.sleep(0.02)

    def stop(self) -> int:
        """SIGTERM, then the exit code."""
        if self.proc.poll() is None:
            self.proc.terminate()
        try:
            return self.proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            return self.proc.wait()


def append(path: Path, text: str) -> None:
    """Append and flush, as a logging process would."""
    with open(path, "a") as f:
        f.write(text)
        f.flush()
        os.fsync(f.fileno())


Totals = dict[tuple[str, tuple[str, ...]], object]


def store_view(events: list[Event], digits: int | None = None) -> Totals:
    """What the store makes of ``events``: counters summed, gauges' last values, histogram
    observations sorted (a histogram keeps no order); counters and gauges rounded to ``digits``
    if given (ratios of several engines may be averaged in another order)."""
    out: Totals = {}
    for e in events:
        key = (e.metric, e.labels)
        kind = BY_NAME[e.metric].kind
        if kind == "counter":
            old = out.get(key, 0.0)
            assert isinstance(old, float)
            total = old + sum(values_of(e))
            out[key] = total if digits is None else round(total, digits)
        elif kind == "gauge":
            value = sum(values_of(e))
            out[key] = value if digits is None else round(value, digits)
        else:
            seen = out.setdefault(key, [])
            assert isinstance(seen, list)
            seen.extend(values_of(e))
    return {k: sorted(v) if isinstance(v, list) else v for k, v in out.items()}


_STARTED: weakref.WeakKeyDictionary[Parser, set[ZeroKey]] = weakref.WeakKeyDictionary()


def engine_batch(parser: Parser, text: str, now: float = 0.0, fast: bool = True) -> tuple[list[Event], int]:
    """A batch of ``text`` through ``parser`` the engine's way (its fast path if ``fast``), with
    the zero series the engine starts for it (once per parser instance) and without ``SEEN``
    marks; and the records matched. What the parser raises is raised."""
    def raise_(_: Parser, exc: BaseException) -> None:
        raise exc

    events, matched, _, _, models = run_parser(parser, Batch("test", text, now, text.count("\n")), raise_, fast)
    if events:
        events = start_zeros(parser, [*models, parser.model], _STARTED.setdefault(parser, set())) + events
    return [e for e in events if e != SEEN], matched
