"""The randomized fault suite's harness: a writer appends numbered uvicorn access lines to several
files while the plan's faults happen (``tests.fault_plan``), with one logmetrics process (started
again after each kill, on the same --state-file) following a session of trials.

Each trial writes into its own directory under the watched one, so its files are sources of their
own (the source of a rotated file is the path of the stream it belongs to), and its counts are
``http_requests_total`` per source. The counts of a session's earlier trials must not move either.
"""

from __future__ import annotations

import os
import re
import resource
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Callable
from pathlib import Path

from tests.fault_plan import LOST_COUNTER, LOST_FILES, Fault, Plan, Verdict, make_plan

LINE = 'INFO:     {}:{} - "GET /v1/models HTTP/1.1" 200 OK\n'  # client address, line number
ALIKE = "127.0.0.1"  # the client of every file with ``alike``: all files then start with the same bytes
ARGS = ("--parser", "vllm", "--poll-interval", "0.05")
TICK = 0.01  # seconds between the writer's batches
SEEN_WAIT = 2.0  # seconds a fault that removes a file waits for logmetrics to have found it
EARLIER = "of an earlier trial"
_SAMPLE = re.compile(r'^(\w+)\{(?:[^}]*,)?source="([^"]*)"[^}]*\} (\S+)$', re.M)

_REPO = str(Path(__file__).resolve().parent.parent)  # this repository: its logmetrics and tests.stacks
Counts = dict[tuple[str, str], float]  # (family, source) -> value summed over other labels


class Logmetrics:
    """One 'logmetrics watch' on ``root`` with ``state``; started again by ``restart``."""

    def __init__(self, root: Path, state: Path, log: Path) -> None:
        self.root, self.state, self.log = root, state, log
        self.proc: subprocess.Popen[bytes] | None = None
        self.url = ""
        self.stuck = ""  # the stacks of a process that did not exit after SIGTERM
        self.start()

    def start(self) -> None:
        """Start and wait for the address it serves on."""
        with open(self.log, "ab") as err:
            at = err.tell()
            self.proc = subprocess.Popen(
                [sys.executable, "-m", "tests.stacks", "watch", "--listen", "127.0.0.1:0", str(self.root),
                 "--state-file", str(self.state), *ARGS],
                stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=err,
                env={**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, (_REPO, os.environ.get("PYTHONPATH"))))})
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            with open(self.log, "rb") as f:
                f.seek(at)
                text = f.read().decode(errors="replace")
            if "serving metrics at " in text:
                self.url = text.split("serving metrics at ", 1)[1].split()[0]
                return
            if self.proc.poll() is not None:
                break
            time.sleep(0.01)
        raise AssertionError(f"logmetrics did not start: {text[-500:]!r}")

    def stop(self, sig: int = signal.SIGTERM) -> int:
        """Send ``sig`` and wait; the exit code."""
        assert self.proc is not None
        if self.proc.poll() is None:
            self.proc.send_signal(sig)
        try:
            return self.proc.wait(timeout=20)
        except subprocess.TimeoutExpired:
            self.stuck = self._stacks()
            self.proc.kill()
            return self.proc.wait()

    def _stacks(self) -> str:
        """Every thread's stack of the running process (``tests.stacks``), from its stderr."""
        assert self.proc is not None
        at = self.log.stat().st_size
        self.proc.send_signal(signal.SIGUSR1)
        deadline = time.monotonic() + 5
        text = ""
        while time.monotonic() < deadline:
            with open(self.log, "rb") as f:
                f.seek(at)
                now = f.read().decode(errors="replace")
            if "Thread 0x" in now and now == text:
                break  # written, and nothing more for a moment
            text = now
            time.sleep(0.2)
        return text

    def counts(self, timeout: float = 10.0) -> Counts:
        """Per (family, source), the sum of its samples; retried while the server cannot answer (out
        of descriptors, say) until ``timeout``."""
        deadline = time.monotonic() + timeout
        while True:
            try:
                with urllib.request.urlopen(self.url, timeout=5) as resp:
                    text = resp.read().decode()
                break
            except (urllib.error.URLError, OSError):
                if time.monotonic() > deadline:
                    raise
                time.sleep(0.05)
        out: Counts = {}
        for name, source, value in _SAMPLE.findall(text):
            out[(name, source)] = out.get((name, source), 0.0) + float(value)
        return out

    def holds(self, path: Path) -> bool:
        """Whether the process has the file now at ``path`` open (so it has found it); True if there
        is no file there or the process cannot be looked at."""
        assert self.proc is not None
        fds = f"/proc/{self.proc.pid}/fd"
        try:
            st = os.stat(path)
            names = os.listdir(fds)
        except OSError:
            return True
        for name in names:
            try:
                other = os.stat(f"{fds}/{name}")
            except OSError:
                continue
            if (other.st_dev, other.st_ino) == (st.st_dev, st.st_ino):
                return True
        return False

    def limit_files(self, free: int) -> None:
        """Lower the process' open-file (soft) limit to its open descriptors + ``free``."""
        assert self.proc is not None
        n = len(os.listdir(f"/proc/{self.proc.pid}/fd"))
        hard = resource.prlimit(self.proc.pid, resource.RLIMIT_NOFILE)[1]
        resource.prlimit(self.proc.pid, resource.RLIMIT_NOFILE, (n + free, hard))

    def unlimit_files(self) -> None:
        """Give the open-file limit back (logmetrics raises it to the hard limit at start)."""
        assert self.proc is not None
        hard = resource.prlimit(self.proc.pid, resource.RLIMIT_NOFILE)[1]
        resource.prlimit(self.proc.pid, resource.RLIMIT_NOFILE, (hard, hard))


class Writer(threading.Thread):
    """Appends numbered lines to ``paths`` at ``rate`` lines/s in all; a fault holds ``lock``, so it
    happens between two whole batches, and ``reopen`` makes the writer open the path again."""

    def __init__(self, paths: list[Path], rate: int, clients: list[str] | None = None) -> None:
        super().__init__(daemon=True)
        self.paths, self.rate = paths, rate
        self.clients = clients or [ALIKE] * len(paths)
        self.lock = threading.Lock()
        self.written = [0] * len(paths)
        self.fds: list[int | None] = [None] * len(paths)
        self.halt = threading.Event()

    def reopen(self, i: int, create: bool = True) -> None:
        """Close file ``i`` and open (or create) its path again, as a logger does after a rotation.
        Call with ``lock`` held."""
        fd = self.fds[i]
        if fd is not None:
            os.close(fd)
        self.fds[i] = os.open(self.paths[i], os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644) if create else None

    def run(self) -> None:
        t0 = time.monotonic()
        done = 0
        while not self.halt.wait(TICK):
            want = int(self.rate * (time.monotonic() - t0))
            with self.lock:
                for n in range(done, want):
                    i = n % len(self.paths)
                    fd = self.fds[i]
                    if fd is None:
                        self.reopen(i)
                        fd = self.fds[i]
                        assert fd is not None
                    os.write(fd, LINE.format(self.clients[i], self.written[i]).encode())
                    self.written[i] += 1
            done = max(done, want)

    def finish(self) -> None:
        """Stop and close every file."""
        self.halt.set()
        self.join()
        with self.lock:
            for i in range(len(self.paths)):
                self.reopen(i, create=False)


def _shift(path: Path, keep: int = 3) -> None:
    """logrotate's numbered shift: x.log.<keep> removed, each x.log.<n> renamed x.log.<n+1>."""
    Path(f"{path}.{keep}").unlink(missing_ok=True)
    for n in range(keep - 1, 0, -1):
        if Path(f"{path}.{n}").exists():
            os.rename(f"{path}.{n}", f"{path}.{n + 1}")


class Trial:
    """One plan's files, writer and faults, under ``logs`` (watched) and ``targets`` (not)."""

    def __init__(self, plan: Plan, logs: Path, targets: Path, alike: bool = False) -> None:
        self.plan = plan
        self.dir = logs / f"t{plan.seed}"
        self.targets = targets / f"t{plan.seed}"
        self.dir.mkdir(parents=True)
        self.targets.mkdir(parents=True)
        self.paths = [self.dir / f"f{i}.log" for i in range(plan.files)]
        self.serial = 0
        if plan.symlinked:
            self.paths[0].symlink_to(self._new_target())
        for p in self.paths:
            p.touch()
        seed = plan.seed % 65536
        clients = None if alike else [f"10.{i}.{seed >> 8}.{seed & 255}" for i in range(plan.files)]
        self.writer = Writer(self.paths, plan.rate, clients)
        self.notes: list[str] = []
        self.splits: list[str] = []  # lines counted under a rotated file's own name (Verdict.splits)
        self.unmeasured: set[int] = set()  # files logmetrics declared lost in an amount it cannot know

    def _new_target(self) -> Path:
        self.serial += 1
        target = self.targets / f"f0-{self.serial}.log"
        target.touch()
        return target

    def file_fault(self, fault: Fault, lm: Logmetrics) -> None:
        """A fault on one file (not a kill), made while the writer waits. A fault that takes the file
        out of the followed paths (delete, a symlink moved on, the numbered shift that ends in a
        removal) first waits, up to ``SEEN_WAIT`` seconds, until logmetrics has found the file: one
        that comes and goes between two polls is seen by no poller, a window of its own."""
        path = self.paths[fault.file]
        if fault.kind in ("delete", "symlink", "shift"):
            deadline = time.monotonic() + SEEN_WAIT
            while not lm.holds(path) and time.monotonic() < deadline:
                time.sleep(0.005)
        self.serial += 1
        with self.writer.lock:
            if fault.kind == "rename":
                os.rename(path, f"{path}-{self.serial}")
            elif fault.kind == "shift":
                _shift(path)
                os.rename(path, f"{path}.1")
            elif fault.kind == "copytruncate":
                shutil.copyfile(path, f"{path}-{self.serial}")
                os.truncate(path, 0)
            elif fault.kind == "copy":  # logrotate's copy, or a cp by hand: x.log goes on as it is
                shutil.copyfile(path, f"{path}.1")
            elif fault.kind == "cpover":  # copytruncate into the same copy, round after round
                shutil.copyfile(path, f"{path}.1")
                os.truncate(path, 0)
            elif fault.kind == "delete":
                path.unlink()
            elif fault.kind == "symlink":
                tmp = self.targets / "link"  # made outside the watched directory, moved in at once
                tmp.symlink_to(self._new_target())
                os.replace(tmp, path)
            elif fault.kind == "fdlimit":
                lm.limit_files(int(fault.arg))
            self.writer.reopen(fault.file)

    def source(self, i: int) -> str:
        """The source label of file ``i``."""
        return str(self.paths[i])

    def lines_in(self, i: int, nbytes: float) -> float:
        """At most how many of file ``i``'s lines ``nbytes`` bytes declared lost can hold (or part of)."""
        shortest = len(LINE.format(self.writer.clients[i], 0))
        return float(-(-int(nbytes) // shortest))


def run_session(seeds: list[int], kinds: tuple[str, ...], max_kills: int = 2, alike: bool = False,
                report: Callable[[Verdict], None] | None = None) -> list[Verdict]:
    """Run the trials of ``seeds`` one after another with one logmetrics (restarted by kills) and one
    state file; each trial's verdict, also handed to ``report`` as it comes. Each file's lines start
    with bytes of its own, unless ``alike`` (then every file of every trial starts with the same
    bytes, as the start-up banners of one backend do; the files of each trial are named alike)."""
    verdicts: list[Verdict] = []
    with tempfile.TemporaryDirectory(prefix="lm-faults-") as tmp:
        root = Path(tmp)
        logs, targets = root / "logs", root / "targets"
        logs.mkdir()
        lm = Logmetrics(logs, root / "state.db", root / "stderr.log")
        before: Counts = {}
        try:
            for seed in seeds:
                plan = make_plan(seed, kinds, max_kills)
                try:
                    verdict, before = _trial(plan, lm, logs, targets, before, alike)
                except (OSError, AssertionError) as err:  # the trial could not run: a failure of its own
                    verdict = Verdict(plan, [], [], [], [f"the trial broke off: {err!r}"])
                    if lm.proc is not None and lm.proc.poll() is not None:
                        lm.start()
                if any(EARLIER in note for note in verdict.notes):
                    verdict.notes.append(f"replay the session: scripts/fault-trials --first-seed {seeds[0]} "
                                         f"--trials {len(seeds)} --per-process {len(seeds)} --kinds {','.join(kinds)} "
                                         f"--max-kills {max_kills}"
                                         + (" --alike" if alike else ""))
                verdicts.append(verdict)
                if report is not None:
                    report(verdict)
        finally:
            code = lm.stop()
        if code != 0 and verdicts:
            verdicts[-1].notes.append(f"exit code {code} at the end"
                                      + (f"; its stacks then:\n{lm.stuck}" if lm.stuck else ""))
    return verdicts


def _trial(plan: Plan, lm: Logmetrics, logs: Path, targets: Path, before: Counts,
           alike: bool) -> tuple[Verdict, Counts]:
    """One trial on the running ``lm``: its verdict and the last counts."""
    trial = Trial(plan, logs, targets, alike)
    declared = [0.0] * plan.files
    limited = False
    t0 = time.monotonic()
    trial.writer.start()
    try:
        for fault in plan.faults:
            wait = t0 + fault.at - time.monotonic()
            if wait > 0:
                time.sleep(wait)  # the plan's time of the fault, not a barrier
            if fault.kind in ("sigkill", "sigterm"):
                _add_declared(trial, lm, declared)
                code = lm.stop(signal.SIGKILL if fault.kind == "sigkill" else signal.SIGTERM)
                if fault.kind == "sigterm" and code != 0:
                    trial.notes.append(f"exit code {code} after SIGTERM"
                                       + (f"; its stacks then:\n{lm.stuck}" if lm.stuck else ""))
                    lm.stuck = ""
                time.sleep(fault.arg)  # down for the plan's time while the writer goes on
                lm.start()
                limited = False
            else:
                trial.file_fault(fault, lm)
                limited = limited or fault.kind == "fdlimit"
        wait = t0 + plan.duration - time.monotonic()
        if wait > 0:
            time.sleep(wait)
    finally:
        trial.writer.finish()
        if limited:
            lm.unlimit_files()
    got = _settle(trial, lm, declared)
    for key, value in before.items():  # the streams of the session's earlier trials
        if got.get(key, 0.0) != value:
            trial.notes.append(f"{key[0]}{{source={key[1]!r}}} {EARLIER} went {value:g} -> {got.get(key, 0):g}")
    counted = [got.get(("http_requests_total", trial.source(i)), 0.0) for i in range(plan.files)]
    streams = {trial.source(i) for i in range(plan.files)}
    for (name, source), value in got.items():
        if name == "http_requests_total" and source.startswith(f"{trial.dir}/") and source not in streams:
            trial.splits.append(f"{value:g} counted under source {os.path.basename(source)!r}, no stream of its own")
            name = os.path.basename(source)  # a file's rotated copy or renamed self: f1.log.1, f1.log-3
            owner = next((i for i in range(plan.files) if name.startswith(f"f{i}.log")), 0)
            counted[owner] += value  # counted beyond what was written
    _note_unmeasured(trial, got)
    total = [d + trial.lines_in(i, got.get((LOST_COUNTER, trial.source(i)), 0.0)) for i, d in enumerate(declared)]
    # the streams' counts from now on: each change is reported once, by the trial it happened in
    after = {key: got.get(key, 0.0) for key in before} | {
        ("http_requests_total", source): got.get(("http_requests_total", source), 0.0) for source in streams}
    return Verdict(plan, list(trial.writer.written), counted, total, trial.notes, trial.splits,
                   sorted(trial.unmeasured)), after


def _note_unmeasured(trial: Trial, got: Counts) -> None:
    """The files that logmetrics declared lost in logmetrics_files_lost_total (amount unknown)."""
    for i in range(trial.plan.files):
        if got.get((LOST_FILES, trial.source(i)), 0.0) > 0:
            trial.unmeasured.add(i)


def _add_declared(trial: Trial, lm: Logmetrics, declared: list[float]) -> None:
    """Before a kill: add what this run of logmetrics declared lost (its logmetrics_* counters start
    again from 0 with the next one)."""
    try:
        got = lm.counts(timeout=2.0)
    except OSError:
        trial.notes.append("no scrape before a kill: a declared loss may be missed")
        return
    _note_unmeasured(trial, got)
    for i in range(trial.plan.files):
        declared[i] += trial.lines_in(i, got.get((LOST_COUNTER, trial.source(i)), 0.0))


def _settle(trial: Trial, lm: Logmetrics, declared: list[float]) -> Counts:
    """Scrape until every file is counted exactly, or until nothing moved for 3 s (then the counts
    are what they will stay), at most 20 s."""
    deadline = time.monotonic() + 20
    last: Counts = {}
    still = time.monotonic()
    while True:
        got = lm.counts()
        exact = all(w - declared[i] - trial.lines_in(i, got.get((LOST_COUNTER, trial.source(i)), 0.0))
                    <= got.get(("http_requests_total", trial.source(i)), 0.0) <= w
                    for i, w in enumerate(trial.writer.written))
        if got != last:
            last, still = got, time.monotonic()
        if exact or time.monotonic() - still >= 3.0 or time.monotonic() > deadline:
            return got
        time.sleep(0.02)
