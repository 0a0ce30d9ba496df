"""SIGHUP: the ``--config`` file is read again, and what changed is applied to the running watch
(``Runner.reload``; the pieces it uses are here).

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

from logmetrics.app.options import Options
from logmetrics.sources.chunks import SourceStats
from logmetrics.sources.tailer import FileTailer
from logmetrics.sources.waker import Waker

log = logging.getLogger(__name__)

#: Settings a running watch cannot change: (Options field, its name in the file).
FIXED = (("listen", "listen"), ("state_file", "state_file"), ("web_config", "web_config"),
         ("max_line_bytes", "max_line_bytes"))


def keep_fixed(old: Options, new: Options) -> Options:
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


def apply_paths(tailer: FileTailer | None, old: Options, new: Options, stats: SourceStats,
                waker: Waker) -> tuple[FileTailer | None, list[str]]:
    """Follow the new set of files: the tailer (a new one if only stdin was read until now) and the
    streams let go. SourceError (nothing changed) if one is unusable."""
    files = _files(new)
    if tailer is not None:
        found = new.file_filter()
        tailer.wanted = found.wanted if found else None  # the next listing follows the new globs
    if files == _files(old):
        return tailer, []
    if tailer is None:  # only stdin until now
        found = new.file_filter()
        tailer = FileTailer(files, from_beginning=new.from_beginning, stats=stats,
                            max_line_bytes=new.max_line_bytes, wait_for_missing=True,
                            rescan_interval=new.rescan_interval, wanted=found.wanted if found else None)
        tailer.watch(waker)
        return tailer, []
    return tailer, tailer.set_paths(files, from_beginning=new.from_beginning)


def announce(old: Options, new: Options, dropped: list[str]) -> None:
    """The line on stderr that says a reload took: how many inputs, which were added and dropped."""
    added = [p for p in _files(new) if p not in _files(old)]
    parts = [f"added {', '.join(added)}" if added else "", f"dropped {', '.join(dropped)}" if dropped else ""]
    change = "; ".join(p for p in parts if p) or "no input added or dropped"
    print(f"logmetrics: {old.config} read again: {len(new.paths)} input paths ({change}), "
          f"{len(new.processes)} process rules", file=sys.stderr, flush=True)
