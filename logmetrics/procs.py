"""CPU and memory of the backends' processes, found by command line with psutil at scrape time."""

from __future__ import annotations

import os
import time
from collections.abc import Mapping, Sequence
from itertools import pairwise

Sample = tuple[str, tuple[str, ...], float]


def is_logmetrics(cmdline: Sequence[str]) -> bool:
    """Whether a command line runs logmetrics itself (``logmetrics ...`` or ``python -m logmetrics``).

    Only the program and its first arguments count: a backend installed under a folder called
    logmetrics, or one whose arguments name it, is still a backend.
    """
    head = list(cmdline[:3])
    return any(os.path.basename(arg) == "logmetrics" for arg in head) or any(
        a == "-m" and b == "logmetrics" for a, b in pairwise(head))


class ProcessWatcher:
    """Sums CPU seconds and resident memory of the processes whose command line names a backend."""

    def __init__(self, patterns: Mapping[str, tuple[str, ...]], *, min_interval: float = 5.0) -> None:
        self.patterns = {b: p for b, p in patterns.items() if p}
        self.min_interval = min_interval
        self._at = -1e9
        self._cached: list[Sample] = []
        self._alive: dict[int, tuple[str, float]] = {}  # pid -> backend, CPU seconds last seen
        self._gone: dict[str, float] = {}  # CPU seconds of a backend's processes that have exited

    def samples(self) -> tuple[list[Sample], list[Sample]]:
        """(counter samples, gauge samples), refreshed at most every ``min_interval`` seconds."""
        if not self.patterns:
            return [], []
        now = time.monotonic()
        if now - self._at >= self.min_interval:
            self._at = now
            self._cached = self._scan()
        cpu = [s for s in self._cached if s[0] == "backend_process_cpu_seconds_total"]
        mem = [s for s in self._cached if s[0] == "backend_process_resident_memory_bytes"]
        return cpu, mem

    def _scan(self) -> list[Sample]:
        import psutil  # only a server that is scraped needs it: keep --oneshot start-up short

        cpu: dict[str, float] = dict(self._gone)
        rss: dict[str, float] = {}
        alive: dict[int, tuple[str, float]] = {}
        me = os.getpid()
        for proc in psutil.process_iter(["cmdline", "cpu_times", "memory_info"]):
            argv = proc.info.get("cmdline") or ()
            if proc.pid == me or not argv or is_logmetrics(argv):
                continue
            cmd = " ".join(argv)
            for backend, pats in self.patterns.items():
                if any(p in cmd for p in pats):
                    times, mem = proc.info.get("cpu_times"), proc.info.get("memory_info")
                    if times is not None:
                        used = times.user + times.system
                        cpu[backend] = cpu.get(backend, 0.0) + used
                        alive[proc.pid] = (backend, used)
                    if mem is not None:
                        rss[backend] = rss.get(backend, 0.0) + mem.rss
                    break
        for pid, (backend, used) in self._alive.items():
            if pid not in alive:  # exited: its CPU time stays in the counter, which never goes down
                self._gone[backend] = self._gone.get(backend, 0.0) + used
                cpu[backend] = cpu.get(backend, 0.0) + used
        self._alive = alive
        out: list[Sample] = [("backend_process_cpu_seconds_total", (b, "local"), v) for b, v in cpu.items()]
        out += [("backend_process_resident_memory_bytes", (b, "local"), v) for b, v in rss.items()]
        return out
