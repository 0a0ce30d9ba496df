"""The poller's waker: woken from threads and from signal handlers, never blocking either."""

from __future__ import annotations

import subprocess
import sys
import textwrap
import threading
import time
from pathlib import Path

from logmetrics.sources.waker import Waker

ROOT = Path(__file__).resolve().parent.parent

STRESS = textwrap.dedent("""
    import os, signal, threading, time
    from logmetrics.sources.waker import Waker
    waker = Waker()
    signal.signal(signal.SIGUSR1, lambda signum, frame: waker.wake())  # as SIGTERM's handler does
    done = threading.Event()
    def signals() -> None:
        while not done.is_set():
            os.kill(os.getpid(), signal.SIGUSR1)
            time.sleep(0.0001)
    threading.Thread(target=signals, daemon=True).start()
    end = time.monotonic() + 2.0
    while time.monotonic() < end:
        waker.wait(0)
    done.set()
    print("done")
""")


def test_a_signal_handler_that_wakes_the_waiting_thread_never_blocks() -> None:
    """Signals whose handler wakes the poller, arriving while it waits, never hang it (SIGTERM did, once in
    thousands of stops, when the handler came inside the wait's lock)."""
    proc = subprocess.run([sys.executable, "-c", STRESS], cwd=ROOT, capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0 and proc.stdout == "done\n", proc.stderr[-2000:]


def test_a_wake_from_another_thread_ends_the_wait_and_is_cleared() -> None:
    """A wake-up from a thread ends a long wait at once; the next wait, with none pending, waits its time."""
    waker = Waker()
    try:
        threading.Timer(0.05, waker.wake).start()
        started = time.monotonic()
        assert waker.wait(30.0)
        assert time.monotonic() - started < 10.0
        assert not waker.wait(0.01)
        waker.wake()
        waker.wake()
        assert waker.wait(0.0) and not waker.wait(0.0)
    finally:
        waker.close()
    waker.wake()  # after close: nothing to wake, no error
