"""What ``watch`` was asked to do: the flags and the configuration file, merged (``Options``)."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

from logmetrics.app.config import Input
from logmetrics.app.procs import ProcessRule
from logmetrics.sources.filefilter import FileFilter, file_filter
from logmetrics.sources.tailer import RESCAN_INTERVAL

DEFAULT_EXPIRE_AFTER = 3600.0  # --expire-after's default: an hour after a source's last file went away


@dataclass(frozen=True)
class Options:
    """What ``watch`` was asked to do."""

    paths: Sequence[str]
    listen: tuple[str, int] | None  # None: --oneshot
    parser: str | None
    source: str | None
    envelope: str
    from_beginning: bool
    poll_interval: float
    max_line_bytes: int
    #: --rescan-interval: seconds between passes that look at every file when inotify names the changed ones
    rescan_interval: float = RESCAN_INTERVAL
    state_file: str | None = None
    state_adopt: bool = False  # --state-adopt: go on with a state file saved for other PATH arguments
    labels: tuple[tuple[str | None, str, str], ...] = ()  # --label: (GLOB or None, name, value)
    processes: tuple[ProcessRule, ...] = ()  # --process BACKEND=PATTERN, in the order given
    config: str | None = None  # --config FILE, read again on SIGHUP
    inputs: tuple[Input, ...] = ()  # the file's inputs (their paths are in ``paths`` too)
    web_config: str | None = None  # TLS and basic authentication of the HTTP endpoint (--web-config)
    label_limits: tuple[tuple[str, int], ...] = ()  # label_limits in the file: the store's overrides
    #: --expire-after: seconds after its last file went away that a source's series are forgotten
    #: (None: never)
    expire_after: float | None = DEFAULT_EXPIRE_AFTER
    include: tuple[str, ...] = ()  # --include: globs of the files the PATH arguments take (all, if none)
    exclude: tuple[str, ...] = ()  # --exclude: globs of the files they leave out
    workers: int = 0  # --workers: processes --oneshot may read in (0: one per core, where it pays)
    only: frozenset[str] | None = None  # a worker's share: of the files the paths name, those it reads

    def file_filter(self) -> FileFilter:
        """The include and exclude globs of the configured inputs and of the PATH arguments."""
        return inputs_filter(self.inputs, self.paths, self.include, self.exclude)


def inputs_filter(inputs: Sequence[Input], paths: Sequence[str], include: Sequence[str],
                  exclude: Sequence[str]) -> FileFilter:
    """The filter of the configured ``inputs`` (by their own globs) and of the other ``paths``
    (by ``include`` and ``exclude``, the command line's)."""
    configured = {i.path for i in inputs}
    return file_filter([(i.path, i.include, i.exclude) for i in inputs], [p for p in paths if p not in configured],
                       include, exclude)


def wanted(opts: Options) -> Callable[[str], bool] | None:
    """The tailer's filter of the files found under directories and globs, if any glob is set."""
    found = opts.file_filter()
    return found.wanted if found else None
