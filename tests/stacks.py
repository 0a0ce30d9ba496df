"""``python -m tests.stacks ARGS``: ``logmetrics ARGS`` that writes every thread's stack to stderr on
SIGUSR1, so that a test can show where a process that does not exit is stuck."""

from __future__ import annotations

import faulthandler
import signal

from logmetrics.cli.main import main

if __name__ == "__main__":
    faulthandler.register(signal.SIGUSR1, all_threads=True)
    main()
