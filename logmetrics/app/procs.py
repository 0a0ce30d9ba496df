"""CPU and memory of the backends' processes, found by command line with psutil at scrape time.

A process belongs to the first backend whose rule matches it: the operator's ``--process
BACKEND=PATTERN`` rules first, in the order given (searched in the full command line, its
arguments joined by spaces), then the parsers' own ``process_names``, by parser name. A parser's
name is a whole name within the process's *program* (``program_words``): the executable's name, the
script or ``-m`` module an interpreter runs, the ``module:app`` an ASGI/WSGI runner serves, a title
the process gave itself (``VLLM::EngineCore``); a name with a ``/`` is matched against the
executable's path. A name matches whole, never inside a longer one (``vllm-exporter`` and
``myvllm-proxy`` are no vLLM), and never in the other arguments: ``tail -F /var/log/vllm.log`` or
``llama-server -m vllm-compare.gguf`` run no vLLM. logmetrics' own process is never counted.

A scan lists the processes and reads the command line of those it has not seen in the last 30
seconds; CPU times and memory are read for the processes that matched, and a scan runs at most
every ``min_interval`` seconds, however often Prometheus scrapes.
"""

from __future__ import annotations

import os
import re
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from itertools import pairwise

from logmetrics import lazyre

Sample = tuple[str, tuple[str, ...], float]
OTHERS_KEEP = 30.0  # seconds a process found to be no backend's is not looked at again (one that execs a
# backend after a wrapper script ran under its pid is found within that)
#: ``--process BACKEND=PATTERN``: the backend label value and the compiled pattern.
ProcessRule = tuple[str, re.Pattern[str]]


def is_logmetrics(cmdline: Sequence[str]) -> bool:
    """Whether a command line runs logmetrics itself (``logmetrics ...`` or ``python -m logmetrics``).

    Only the program and its first arguments count: a backend installed under a folder called
    logmetrics, or one whose arguments name it, is still a backend.
    """
    head = list(cmdline[:3])
    return any(os.path.basename(arg) == "logmetrics" for arg in head) or any(
        a == "-m" and b == "logmetrics" for a, b in pairwise(head))


#: Programs that run another one named by their arguments: its script, or ``-m`` module.
_INTERPRETER = lazyre.compile(r"(?:python|pypy|pythonw)[\d.]*|node(?:js)?|bun|deno")
#: Options of a Python interpreter that take a value (``-W ignore``), and those that end its options.
_PY_VALUE_OPTIONS = frozenset({"-W", "-X", "-Q"})
#: ASGI/WSGI servers: the ``module:app`` they serve is their program.
_RUNNERS = frozenset({"uvicorn", "gunicorn", "hypercorn", "granian", "daphne", "waitress-serve"})
_APP_SPEC = lazyre.compile(r"[A-Za-z_][\w.]*:[A-Za-z_][\w.()]*")


def _name(arg: str) -> str:
    base = arg.replace("\\", "/").rsplit("/", 1)[-1]
    return base[:-4] if base.lower().endswith(".exe") else base


def program_words(cmdline: Sequence[str]) -> list[str]:
    """What a command line runs, as the names of its parts: the executable's name; for an
    interpreter, the script's name or the ``-m`` module (``python -m vllm.entrypoints.openai.api_server``
    gives ``python``, ``vllm.entrypoints.openai.api_server``); for a runner (uvicorn, gunicorn...),
    the ``module:app`` it serves. Paths give their last part only; other arguments nothing."""
    if not cmdline:
        return []
    words = [_name(cmdline[0]).rstrip(":")]  # (``nginx:`` of a title such as ``nginx: master process``)
    rest = list(cmdline[1:])
    if _INTERPRETER.fullmatch(words[0]):
        i = 0
        while i < len(rest) and rest[i].startswith("-") and rest[i] != "-":
            opt = rest[i]
            if opt in ("-m", "-c"):
                if opt == "-m" and i + 1 < len(rest):
                    words.append(rest[i + 1])
                return words
            i += 2 if opt in _PY_VALUE_OPTIONS else 1
        if i < len(rest):
            words.append(_name(rest[i]))
            rest = rest[i + 1:]
    if _name(words[-1]) in _RUNNERS:
        words += [a for a in rest if _APP_SPEC.fullmatch(a)][:1]
    return words


def _whole_name(name: str) -> str:
    """A pattern of ``name`` as a whole name within a program's words: not inside a longer name
    (``myvllm``, ``vllm-exporter``), but followed by a module's or an app's ``.``/``:`` if it likes
    (``vllm.entrypoints…``, ``whisper.py``, ``leapfrogai_api.main:app``). A name that ends in a
    separator (``VLLM::``) is a prefix."""
    tail = "" if not (name[-1:].isalnum() or name[-1:] in "_-") else r"(?![\w-])"
    return rf"(?<![\w-]){re.escape(name)}{tail}"


def _program_has_any(names: tuple[str, ...]) -> Callable[[Sequence[str]], bool]:
    """Whether a command line's program (``program_words``) holds one of ``names`` as a whole name;
    a name with a ``/`` is looked for in the executable's path."""
    words = [n for n in names if "/" not in n]
    pattern = re.compile("|".join(_whole_name(n) for n in words)) if words else None
    path_names = tuple(n for n in names if "/" in n)

    def matches(cmdline: Sequence[str]) -> bool:
        program = " ".join(program_words(cmdline))
        return (pattern is not None and pattern.search(program) is not None) or any(
            n in cmdline[0] for n in path_names)
    return matches


class ProcessWatcher:
    """Sums CPU seconds and resident memory of the processes whose command line names a backend."""

    def __init__(self, patterns: Mapping[str, tuple[str, ...]], *, rules: Sequence[ProcessRule] = (),
                 min_interval: float = 5.0) -> None:
        self.rules: list[tuple[str, Callable[[str], object]]] = [(b, rx.search) for b, rx in rules]
        self.names: list[tuple[str, Callable[[Sequence[str]], bool]]] = [
            (b, _program_has_any(p)) for b, p in sorted(patterns.items()) if p]
        self.min_interval = min_interval
        self._lock = threading.Lock()  # scrapes may come on several threads at once
        self._at = -1e9
        self._scanning = False  # a scan is under way (outside the lock): others take the cached figures
        self._cached: list[Sample] = []
        # (pid, start time) -> backend, CPU seconds last seen; the start time tells a reused pid apart
        self._alive: dict[tuple[int, float], tuple[str, float]] = {}
        self._gone: dict[str, float] = {}  # CPU seconds of a backend's processes that have exited
        self._others: set[int] = set()  # pids whose command line matched no rule, lately
        self._others_at = -1e9

    def backend_of(self, cmdline: Sequence[str]) -> str | None:
        """The backend a command line counts for: the first rule that matches it, or None."""
        if not cmdline or is_logmetrics(cmdline):
            return None
        cmd = " ".join(cmdline)
        for backend, matches in self.rules:
            if matches(cmd):
                return backend
        for backend, runs in self.names:
            if runs(cmdline):
                return backend
        return None

    def samples(self) -> tuple[list[Sample], list[Sample]]:
        """(counter samples, gauge samples), refreshed at most every ``min_interval`` seconds."""
        if not self.rules and not self.names:
            return [], []
        with self._lock:
            now = time.monotonic()
            first = self._at < 0
            stale = now - self._at >= self.min_interval and not self._scanning
            if stale:
                self._at, self._scanning = now, True
            if first and stale:  # the first scrape waits for the first scan; later ones never wait
                try:
                    self._cached = self._scan()
                finally:
                    self._scanning = False
                stale = False
            cached = self._cached
        if stale:  # one scrape scans (one at a time: _scanning); the others take the last figures meanwhile
            try:
                fresh = self._scan()
            finally:
                with self._lock:
                    self._scanning = False
            with self._lock:
                self._cached = cached = fresh
        cpu = [s for s in cached if s[0] == "backend_process_cpu_seconds_total"]
        mem = [s for s in cached if s[0] == "backend_process_resident_memory_bytes"]
        return cpu, mem

    def _scan(self) -> list[Sample]:
        import psutil  # only a server that is scraped needs it: keep --oneshot start-up short

        cpu: dict[str, float] = dict(self._gone)
        rss: dict[str, float] = {}
        alive: dict[tuple[int, float], tuple[str, float]] = {}
        me = os.getpid()
        now = time.monotonic()
        pids = psutil.pids()
        if now - self._others_at >= OTHERS_KEEP:  # looked at again now and then: a pid reused, or a
            self._others, self._others_at = set(), now  # command line rewritten, is found within that
        else:
            self._others.intersection_update(pids)
        for pid in pids:
            if pid == me or pid in self._others:
                continue  # known to be no backend's: not read again (most processes stop here)
            try:
                proc = psutil.Process(pid)
                backend = self.backend_of(proc.cmdline())
                if backend is None:
                    self._others.add(pid)
                    continue
                with proc.oneshot():
                    key, times, mem = (proc.pid, proc.create_time()), proc.cpu_times(), proc.memory_info()
            except psutil.Error:  # gone meanwhile, or not ours to read
                continue
            seen = self._alive.get(key)
            if seen is not None:  # a process keeps its backend, even if it rewrites its command line
                backend = seen[0]
            used = times.user + times.system
            cpu[backend] = cpu.get(backend, 0.0) + used
            alive[key] = (backend, used)
            rss[backend] = rss.get(backend, 0.0) + mem.rss
        for key, (backend, used) in self._alive.items():
            if key not in alive:  # exited: its CPU time stays in the counter, which never goes down
                self._gone[backend] = self._gone.get(backend, 0.0) + used
                cpu[backend] = cpu.get(backend, 0.0) + used
        self._alive = alive
        out: list[Sample] = [("backend_process_cpu_seconds_total", (b, "local"), v) for b, v in cpu.items()]
        out += [("backend_process_resident_memory_bytes", (b, "local"), v) for b, v in rss.items()]
        return out
