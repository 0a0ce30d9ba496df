"""The conformance harness: real backends on tiny random-weight models, their logs read by
logmetrics, every figure held against the backend's own ``/metrics`` and the client's record.

    bash scripts/conformance/run [--backend NAME ...] [--mode NAME ...] [--out DIR]

For each backend and each logging mode that changes what it logs, the harness:

1. starts ``logmetrics watch`` on an empty log file (live, as an operator runs it);
2. starts the backend writing into that file, waits until it is ready, sends the traffic mix
   (inference of every kind, several at once, and client errors), waits for the backend's last
   stats line, and reads the backend's ``/metrics``;
3. kills the backend with ``kill -9``, starts it again into the same file, sends more traffic and
   reads its ``/metrics`` again (its counters start again from 0: the two readings are added);
4. stops it with SIGTERM, lets the live logmetrics read to the end, reads its ``/metrics``, and
   runs ``logmetrics watch --oneshot`` over the same file;
5. prints a table: each figure from logmetrics live and ``--oneshot``, the truth (the backend's own
   counter or the client's record) and the tolerance.

It exits 1 when any figure is outside its tolerance or any run failed, 0 otherwise. The backends
are installed by ``scripts/conformance/install.sh``; ``run`` calls it first.
"""

from __future__ import annotations

import argparse
import os
import random
import signal
import socket
import subprocess
import sys
import time
import traceback
from pathlib import Path
from typing import IO

import client
from backends import Backend, Mode, backends
from figures import Check, table, total

ROOT = Path(__file__).resolve().parents[2]
LOGMETRICS = [sys.executable, "-m", "logmetrics"]


def free_port() -> int:
    """A port free on loopback now."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


def say(msg: str) -> None:
    """One line of progress on stderr."""
    print(f"[conformance {time.strftime('%H:%M:%S')}] {msg}", file=sys.stderr, flush=True)


class Process:
    """A child in a session of its own, so that a kill reaches its whole process group."""

    def __init__(self, argv: list[str], env: dict[str, str] | None, out: IO[bytes] | int) -> None:
        self.proc = subprocess.Popen(argv, env=env, stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                     start_new_session=True)

    def alive(self) -> bool:
        """Whether it still runs."""
        return self.proc.poll() is None

    def send(self, sig: int) -> None:
        """Send ``sig`` to its process group."""
        try:
            os.killpg(self.proc.pid, sig)
        except ProcessLookupError:
            pass

    def stop(self, sig: int = signal.SIGTERM, timeout: float = 60.0) -> int:
        """Signal it and wait; SIGKILL after ``timeout``. Returns its exit code."""
        self.send(sig)
        try:
            return self.proc.wait(timeout)
        except subprocess.TimeoutExpired:
            self.send(signal.SIGKILL)
            return self.proc.wait(10)
        finally:
            self.send(signal.SIGKILL)  # what the group left behind (an engine process, say)


class Watcher:
    """A live ``logmetrics watch`` of one log file."""

    def __init__(self, log: Path, parser: str, out: IO[bytes]) -> None:
        self.log = log
        self.port = free_port()
        self.proc = Process([*LOGMETRICS, "watch", str(log), "--parser", parser, "--listen",
                             f"127.0.0.1:{self.port}", "--poll-interval", "0.1"], None, out)
        client.wait_ready(self.base, "/healthz", 30, self.proc.alive)

    @property
    def base(self) -> str:
        """Its URL."""
        return f"http://127.0.0.1:{self.port}"

    def scrape(self) -> str:
        """Its ``/metrics`` now."""
        return client.get(self.base, "/metrics")[1].decode()

    def settle(self, deadline: float = 30.0) -> str:
        """Wait until it has read the whole file and its figures stop changing; its ``/metrics``."""
        start, last, since = time.monotonic(), "", time.monotonic()
        while time.monotonic() - start < deadline:
            text = self.scrape()
            read = total(text, "logmetrics_bytes_read_total")
            body = "\n".join(ln for ln in text.splitlines() if not ln.startswith(("logmetrics_", "backend_process_")))
            if read >= self.log.stat().st_size and body == last:
                if time.monotonic() - since >= 1.5:
                    return text
            else:
                last, since = body, time.monotonic()
            time.sleep(0.2)
        raise RuntimeError(f"logmetrics did not read {self.log} to its end within {deadline:.0f} s")


def serve(b: Backend, mode: Mode, log: Path, record: client.Record) -> tuple[Process, str]:
    """Start the backend appending to ``log``; wait until it is ready."""
    port = free_port()
    with log.open("ab") as out:
        proc = Process(b.command(mode, port), b.env(mode), out)
    base = f"http://127.0.0.1:{port}"
    waited = client.wait_ready(base, b.ready_path, b.ready_deadline, proc.alive, record)
    say(f"{b.name} [{mode.name}] ready in {waited:.0f} s")
    time.sleep(b.warmup)
    return proc, base


def own_metrics(b: Backend, base: str, record: client.Record) -> str:
    """The backend's ``/metrics`` (a request its log may show, so recorded); empty without one."""
    if b.metrics_path is None:
        return ""
    code, data = client.get(base, b.metrics_path, record, timeout=30)
    if code != 200:
        raise RuntimeError(f"the backend's /metrics answered {code}")
    return data.decode()


def run_one(b: Backend, mode: Mode, out: Path, quiet: float) -> list[Check]:
    """One backend in one logging mode, as the module docstring says."""
    work = out / f"{b.name}-{mode.name}"
    work.mkdir(parents=True, exist_ok=True)
    log = work / "server.log"
    log.write_bytes(b"")
    rng = random.Random(f"{b.name}/{mode.name}")
    record = client.Record()
    own: dict[str, float] = {}

    def add_own(text: str) -> None:
        for k, v in b.own(text).items():
            own[k] = own.get(k, 0.0) + v

    with (work / "logmetrics.log").open("wb") as lm_out:
        watcher = Watcher(log, b.parser, lm_out)
        server: Process | None = None
        try:
            server, base = serve(b, mode, log, record)
            b.traffic(base, record, "main", rng)
            time.sleep(quiet)
            add_own(own_metrics(b, base, record))
            say(f"{b.name} [{mode.name}] kill -9 after {sum(record.codes.values())} requests")
            server.stop(signal.SIGKILL)
            server, base = serve(b, mode, log, record)
            b.traffic(base, record, "after", rng)
            time.sleep(quiet)
            add_own(own_metrics(b, base, record))
            ready_before = total(watcher.settle(), "backend_ready", lambda lab: lab.get("model") == b.served)
            code = server.stop(signal.SIGTERM)
            server = None
            say(f"{b.name} [{mode.name}] exited {code} on SIGTERM after {sum(record.codes.values())} requests")
            live = watcher.settle()
        finally:
            if server is not None:
                server.stop(signal.SIGKILL)
            watcher.proc.stop()
    oneshot = subprocess.run([*LOGMETRICS, "watch", "--oneshot", "--parser", b.parser, str(log)], check=True,
                             capture_output=True, text=True).stdout
    (work / "live.prom").write_text(live)
    (work / "oneshot.prom").write_text(oneshot)
    return b.checks(live, oneshot, own, record, mode, 2, ready_before)


def main(argv: list[str] | None = None) -> int:
    """Run the chosen backends in the chosen modes; print the tables; 1 on any failure."""
    known: dict[str, Backend] = backends(Path(os.environ.get(
        "LOGMETRICS_CONFORMANCE_HOME", Path.home() / ".cache" / "logmetrics-conformance")))
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0] if __doc__ else None)
    ap.add_argument("--backend", action="append", choices=sorted(known),
                    help="run this backend (repeatable; default: all)")
    ap.add_argument("--mode", action="append", help="run only this logging mode (repeatable; default: all)")
    ap.add_argument("--check-only", action="store_true",
                    help="check the arguments and exit (run does it before installing anything)")
    ap.add_argument("--out", type=Path, default=Path(os.environ.get("TMPDIR", "/tmp")) / "logmetrics-conformance",
                    help="where the logs, expositions and report.md go (default: %(default)s)")
    args = ap.parse_args(argv)
    chosen = [known[name] for name in args.backend or list(known)]
    modes = {m.name for b in chosen for m in b.modes}
    for name in args.mode or ():
        if name not in modes:
            ap.error(f"argument --mode: {name!r} is no logging mode of {', '.join(b.name for b in chosen)} "
                     f"(choose from {', '.join(sorted(modes))})")
    if args.check_only:
        return 0
    args.out.mkdir(parents=True, exist_ok=True)
    report: list[str] = []
    failed: list[str] = []
    passed = bad_checks = 0
    started = time.monotonic()
    for b in chosen:
        b.prepare()
        for mode in b.modes:
            if args.mode and mode.name not in args.mode:
                continue
            title = f"{b.name}, {mode.name} logging"
            say(f"{title}: start")
            t0 = time.monotonic()
            try:
                rows = run_one(b, mode, args.out, quiet=QUIET.get(b.name, 1.0))
            except Exception:  # any failure of a run is reported, and fails the harness
                failed.append(title)
                bad_checks += 1
                text = f"### {title}\n\n**the run failed**:\n\n```\n{traceback.format_exc()}```\n"
            else:
                bad = [c.name for c in rows if not c.ok]
                bad_checks += len(bad)
                passed += sum(1 for c in rows if c.ok and c.truth is not None)
                if bad:
                    failed.append(f"{title}: {', '.join(bad)}")
                text = table(f"{title} ({time.monotonic() - t0:.0f} s)", rows)
            print(text, flush=True)
            report.append(text)
    (args.out / "report.md").write_text("\n".join(report))
    say(f"done in {time.monotonic() - started:.0f} s; report in {args.out / 'report.md'}")
    if failed:
        print("conformance: FAILED:\n  " + "\n  ".join(failed), file=sys.stderr)
    print(f"conformance: {passed} passed, {bad_checks} failed")
    return 1 if failed else 0


#: Seconds to wait after the traffic before reading the backend's counters and stopping it: vLLM
#: logs its stats every 10 s, and the interval that holds the last requests must be logged.
QUIET: dict[str, float] = {"vllm": 12.0}

if __name__ == "__main__":
    sys.exit(main())
