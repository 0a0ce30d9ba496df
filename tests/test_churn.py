"""Weeks of pod churn in minutes: sources are created, written, deleted and expire on a simulated
clock, while the label guard and the memory must stay as they were after the first few minutes."""

from __future__ import annotations

import gc
import os
import time
import tracemalloc
from pathlib import Path

from freezegun import freeze_time

from logmetrics.app.options import Options
from logmetrics.app.runner import Runner
from logmetrics.plugins import discover
from logmetrics.store.exposition import text
from tests.helpers import access_line, parse

PODS = 10_000
PER_SECOND = 10  # pods started per simulated second; each lives LIFE seconds, then its log is deleted
LIFE = 2
EXPIRE = 30.0  # --expire-after


def churn_runner(logs: Path, expire_after: float | None) -> Runner:
    """A runner following ``logs`` from the start, not serving, with the api parser."""
    opts = Options(paths=[str(logs)], listen=None, parser="api", source=None, envelope="auto",
                   from_beginning=True, poll_interval=0.25, max_line_bytes=1 << 20, expire_after=expire_after)
    return Runner(opts, discover((), {}))


def test_ten_thousand_pods_keep_their_own_source_and_memory_stays_flat(tmp_path: Path) -> None:
    """10,000 pods through create, write, delete and expiry: the newest still has its own source
    label, no pod was folded into __other__, and memory past the first ten minutes does not grow."""
    logs = tmp_path / "logs"
    logs.mkdir()
    r = churn_runner(logs, EXPIRE)
    root = str(logs)
    used: dict[int, int] = {}
    tracemalloc.start()
    try:
        with freeze_time(time.strftime("%Y-%m-%d %H:%M:%S", time.gmtime()), tick=False) as clock:
            for second in range(PODS // PER_SECOND):
                for pod in range(second * PER_SECOND, (second + 1) * PER_SECOND):
                    with open(os.path.join(root, f"pod-{pod}.log"), "w") as f:  # (not pathlib, which
                        f.write(access_line(pod) * 2)  # interns every name: the test's own memory)
                for pod in range((second - LIFE) * PER_SECOND, (second - LIFE + 1) * PER_SECOND):
                    if pod >= 0:
                        os.unlink(os.path.join(root, f"pod-{pod}.log"))
                r.poll()
                clock.tick(1.0)
                if second in (700, PODS // PER_SECOND - 1):
                    gc.collect()
                    used[second] = tracemalloc.get_traced_memory()[0]
            clock.tick(1.0)
            r.poll()
            r.engine.idle()  # as the poll loop does when quiet: the newest pod's last line, held a
            # moment for a record that may go on, is counted
        samples = parse(text(r.registry).decode())
    finally:
        tracemalloc.stop()
        r.close()
    requests = {dict(labels)["source"]: v for (name, labels), v in samples.items() if name == "http_requests_total"}
    assert requests.get(str(logs / f"pod-{PODS - 1}.log")) == 2
    assert "__other__" not in requests
    assert len(requests) < 500  # only the pods of the last EXPIRE + rotate wait seconds are left
    overflow = [k for k in samples if k[0] == "logmetrics_label_overflow_total"]
    assert not overflow, overflow
    first, last = used[700], used[PODS // PER_SECOND - 1]
    assert last < first * 1.1, f"memory grew from {first} to {last} bytes over the last 3,000 pods"


def test_without_expiry_a_pod_past_the_source_limit_is_folded(tmp_path: Path) -> None:
    """With --expire-after never, the guard keeps every source's place: the 501st pod's counters
    land in __other__ (the test above fails without expiry for this reason)."""
    logs = tmp_path / "logs"
    logs.mkdir()
    r = churn_runner(logs, None)
    try:
        for pod in range(510):
            (logs / f"pod-{pod}.log").write_text(access_line(pod))
        r.poll()
        for pod in range(510):
            (logs / f"pod-{pod}.log").unlink()
        with freeze_time(time.strftime("%Y-%m-%d %H:%M:%S", time.gmtime()), tick=False) as clock:
            for _ in range(3):
                clock.tick(3600.0)
                r.poll()
        (logs / "new.log").write_text(access_line(1))
        r.poll()
        r.engine.finish()  # the end of input: the held last line is counted
        samples = parse(text(r.registry).decode())
    finally:
        r.close()
    requests = {dict(labels)["source"]: v for (name, labels), v in samples.items() if name == "http_requests_total"}
    assert str(logs / "new.log") not in requests and requests["__other__"] >= 11
