"""SIGHUP: the ``--config`` file is read again, and what changed is applied to the running watch.

Inputs are added and dropped without any reset: the store stays, the files still followed keep
their read positions and their streams their parser state. The files only a dropped input named
are let go at once (what they held back is counted first). A file that cannot be read, parsed or
checked is refused, on stderr with its name, line and reason, and the running configuration
stays. Settings that need a restart (the listen address, the state file, the web config, the line
cap) are reported and keep their running value. Counted in ``logmetrics_config_reloads_total``.
"""

from __future__ import annotations

import dataclasses
import logging
import sys
import time
from typing import TYPE_CHECKING

from logmetrics.errors import UserError
from logmetrics.procs import ProcessWatcher
from logmetrics.sources import FileTailer, SourceError
from logmetrics.statecheck import normalised_inputs
from logmetrics.store import LABEL_LIMITS

if TYPE_CHECKING:
    from logmetrics.runner import Options, Runner

log = logging.getLogger(__name__)

#: Settings a running watch cannot change: (Options field, its name in the file).
FIXED = (("listen", "listen"), ("state_file", "state_file"), ("web_config", "web_config"),
         ("max_line_bytes", "max_line_bytes"))


def _keep_fixed(old: Options, new: Options) -> Options:
    """``new`` with the settings that need a restart at their running value, each change reported."""
    kept = {}
    for field, name in FIXED:
        if getattr(new, field) != getattr(old, field):
            kept[field] = getattr(old, field)
            log.warning("%s: %s changed; it takes effect at the next restart, the running value stays",
                        old.config, name)
    return dataclasses.replace(new, **kept) if kept else new


def _files(opts: Options) -> list[str]:
    return [p for p in opts.paths if p != "-"]


def _apply_paths(runner: Runner, old: Options, new: Options) -> list[str]:
    """Follow the new set of files; the streams let go. SourceError (nothing changed) if one is unusable."""
    files = _files(new)
    if runner.tailer is not None:
        found = new.file_filter()
        runner.tailer.wanted = found.wanted if found else None  # the next listing follows the new globs
    if files == _files(old):
        return []
    if runner.tailer is None:  # only stdin until now
        found = new.file_filter()
        runner.tailer = FileTailer(files, from_beginning=new.from_beginning, stats=runner.stats,
                                   max_line_bytes=new.max_line_bytes, wait_for_missing=True,
                                   rescan_interval=new.rescan_interval, wanted=found.wanted if found else None)
        runner.tailer.watch(runner.waker)
        return []
    return runner.tailer.set_paths(files, from_beginning=new.from_beginning)


def reload(runner: Runner) -> None:
    """Read the ``--config`` file again and apply it; on any problem keep everything as it is."""
    old = runner.opts
    if runner.reloader is None or old.config is None:
        log.warning("SIGHUP: no --config file to read again; nothing changes")
        return
    try:
        new = _keep_fixed(old, runner.reloader())
        dropped = _apply_paths(runner, old, new)
    except (UserError, SourceError) as exc:
        runner.reloads["failure"] += 1
        log.error("%s; refused, the running configuration stays", str(exc).removeprefix("logmetrics: "))
        return
    for stream in dropped:
        runner.engine.vanished(stream)  # what it held back counts now; its counters stay
    runner.engine.set_inputs(new.inputs)
    if runner.tailer is not None:
        runner.tailer.rescan_interval = new.rescan_interval
    runner.store.limits = {**LABEL_LIMITS, **dict(new.label_limits)}
    if new.processes != old.processes:
        runner.procs = ProcessWatcher({n: e.cls.process_names for n, e in runner.entries.items()},
                                      rules=new.processes)
    runner.inputs = normalised_inputs(new.paths)  # recorded in the state file at the next commit
    runner.opts = new
    runner.reloads["success"] += 1
    runner.reloaded_at = time.time()
    added = [p for p in _files(new) if p not in _files(old)]
    parts = [f"added {', '.join(added)}" if added else "", f"dropped {', '.join(dropped)}" if dropped else ""]
    change = "; ".join(p for p in parts if p) or "no input added or dropped"
    print(f"logmetrics: {old.config} read again: {len(new.paths)} input paths ({change}), "
          f"{len(new.processes)} process rules", file=sys.stderr, flush=True)
