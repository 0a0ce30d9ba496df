"""The client side of the conformance harness: HTTP requests to a backend on loopback, and the
client's record of what each response said (status code per route, the ``usage`` or ``timings``
token counts of every successful response, audio seconds sent).

Only the standard library: the harness runs in the project's virtualenv and talks to servers that
run in virtualenvs of their own.
"""

from __future__ import annotations

import json
import random
import threading
import time
import urllib.error
import urllib.request
from collections import Counter
from collections.abc import Callable, Iterable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any

Json = dict[str, Any]

WORDS = ("the model serves a request and counts tokens while the engine logs its stats every interval "
         "hello world one two three four five quick brown fox jumps over the lazy dog cache queue").split()


@dataclass
class Record:
    """What the client saw: responses by (method, path, code), and the token counts they reported."""

    codes: Counter[tuple[str, str, int]] = field(default_factory=Counter)
    prompt_tokens: int = 0
    generation_tokens: int = 0
    cached_tokens: int = 0
    ok_inference: int = 0
    audio_seconds: float = 0.0
    lock: threading.Lock = field(default_factory=threading.Lock, repr=False)

    def add(self, method: str, path: str, code: int) -> None:
        """Count one response."""
        with self.lock:
            self.codes[(method, path, code)] += 1

    def usage(self, prompt: int, generated: int, cached: int = 0) -> None:
        """Add one successful inference response's token counts."""
        with self.lock:
            self.prompt_tokens += prompt
            self.generation_tokens += generated
            self.cached_tokens += cached
            self.ok_inference += 1

    def by_code(self) -> Counter[int]:
        """Responses by status code, over every route."""
        out: Counter[int] = Counter()
        for (_, _, code), n in self.codes.items():
            out[code] += n
        return out


def prompt(rng: random.Random, words: int) -> str:
    """A prompt of ``words`` random words."""
    return " ".join(rng.choice(WORDS) for _ in range(words))


def call(base: str, method: str, path: str, body: bytes | None, record: Record,
         content_type: str = "application/json", timeout: float = 120.0) -> tuple[int, bytes]:
    """Send one request, record its status code, return ``(code, body)``."""
    req = urllib.request.Request(base + path, data=body, method=method, headers={"Content-Type": content_type})
    try:
        with urllib.request.urlopen(req, timeout=timeout) as resp:
            code, data = resp.status, resp.read()
    except urllib.error.HTTPError as err:
        code, data = err.code, err.read()
    record.add(method, path, code)
    return code, data


def post_json(base: str, path: str, payload: Json, record: Record) -> tuple[int, bytes]:
    """POST a JSON body."""
    return call(base, "POST", path, json.dumps(payload).encode(), record)


def stream_usage(data: bytes) -> Json | None:
    """The last ``usage`` (or llama.cpp ``timings``-bearing) object of a server-sent event stream."""
    last: Json | None = None
    for line in data.decode("utf-8", "replace").splitlines():
        if not line.startswith("data: ") or line == "data: [DONE]":
            continue
        try:
            obj = json.loads(line[6:])
        except ValueError:
            continue
        if isinstance(obj, dict) and (obj.get("usage") or obj.get("timings")):
            last = obj
    return last


def get(base: str, path: str, record: Record | None = None, timeout: float = 10.0) -> tuple[int, bytes]:
    """GET ``path``; recorded only when ``record`` is given."""
    return call(base, "GET", path, None, record if record is not None else Record(), timeout=timeout)


def wait_ready(base: str, path: str, deadline_s: float, alive: Callable[[], bool],
               record: Record | None = None) -> float:
    """Wait until ``GET path`` answers 200; returns the seconds waited. Raises when the server died
    or the deadline passed. Every answer is recorded in ``record`` (the server logs it too)."""
    start = time.monotonic()
    while time.monotonic() - start < deadline_s:
        if not alive():
            raise RuntimeError("the server exited before it was ready")
        try:
            if get(base, path, record, timeout=2.0)[0] == 200:
                return time.monotonic() - start
        except OSError:
            pass
        time.sleep(0.5)
    raise RuntimeError(f"not ready after {deadline_s:.0f} s")


def run_all(jobs: Iterable[Callable[[], None]], workers: int) -> None:
    """Run the jobs on ``workers`` threads (concurrent requests); the first exception is raised."""
    with ThreadPoolExecutor(max_workers=workers) as pool:
        for fut in [pool.submit(job) for job in jobs]:
            fut.result()
