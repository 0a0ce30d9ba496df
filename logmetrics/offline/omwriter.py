"""OpenMetrics text with timestamps, written a step at a time, for ``logmetrics backfill``.

OpenMetrics keeps the samples of a family, and within it those of a series, together, while the
store is read a step at a time (every series at once): each family's samples go to a spool file
of their own, each line tagged with its series, and ``finish`` joins the spools, family by family
in catalog order and series by series, into one file ending in ``# EOF`` (one family's samples
are held in memory at a time). A counter or histogram series starts with a
zero at the start of the step of its first event, so that ``increase()`` and ``rate()`` count
that first step (Prometheus takes a series' first sample as its baseline).
"""

from __future__ import annotations

import fcntl
import math
import os
import shutil
import subprocess
import tempfile

from logmetrics.errors import UserError
from logmetrics.store.catalog import COMMON_LABELS, Family
from logmetrics.store.render import escape, go_float
from logmetrics.store.store import Store
from logmetrics.store.values import Histogram, Key


def _number(value: float) -> str:
    if isinstance(value, int) or math.isfinite(value):
        return repr(value)
    return go_float(value)  # +Inf, -Inf, NaN


def _stamp(t: float) -> str:
    return str(int(t)) if t == int(t) else repr(round(t, 3))


class Spool:
    """One family's samples on their way to its spool file: held in memory and appended to the
    file a block at a time, which is open only then, so that any number of families takes one
    file descriptor (a directory of logs may take the others)."""

    __slots__ = ("held", "name", "size")

    BLOCK = 256 * 1024  # characters held before they are appended

    def __init__(self, name: str) -> None:
        self.name = name
        self.held: list[str] = []
        self.size = 0

    def write(self, text: str) -> None:
        """Add ``text`` (whole lines)."""
        self.held.append(text)
        self.size += len(text)
        if self.size >= self.BLOCK:
            self.flush()

    def flush(self) -> None:
        """Append what is held to the file."""
        if self.held:
            with open(self.name, "a", encoding="utf-8", newline="\n") as f:
                f.writelines(self.held)
            self.held.clear()
            self.size = 0


class OpenMetricsWriter:
    """Samples of the store's catalog families (not the engine's own ``logmetrics_*``), per step."""

    def __init__(self, store: Store, folder: str, target_labels: tuple[tuple[str, str], ...] = (),
                 window: int | None = None) -> None:
        self.store = store
        #: steps a series is still written after its value last changed (None: every step, always)
        self.window = window
        self._changed: dict[Key, tuple[object, int]] = {}  # a series' last value written, and its step
        #: labels added to every series (``job``, ``instance``), after the family's own
        self._extra = "".join(f',{n}="{escape(v)}"' for n, v in target_labels)
        _remove_stale_work(folder)
        self.spool = tempfile.mkdtemp(prefix=f".spool-{os.getpid()}-", dir=folder)
        self._files: dict[str, Spool] = {}
        self._prefix: dict[Key, tuple[Spool, str]] = {}  # counters and gauges: "ID\tname{labels} "
        self._hist: dict[Key, tuple[Spool, list[str], str, str]] = {}  # bucket prefixes, _sum, _count
        self._ids = 0
        self.samples = 0
        self._before: set[Key] = set()  # series seen in steps before the first one written (no zero)

    def _file(self, fam: Family) -> Spool:
        f = self._files.get(fam.name)
        if f is None:
            f = self._files[fam.name] = Spool(os.path.join(self.spool, str(len(self._files))))
        return f

    def _labels(self, fam: Family, values: tuple[str, ...]) -> str:
        names = (*COMMON_LABELS, *fam.labels)
        own = ",".join(f'{n}="{escape(v)}"' for n, v in zip(names, values, strict=False))
        return (own + self._extra).lstrip(",")

    def skip(self) -> None:
        """A step before the first one written (``--start``): its series are not new after it."""
        for values in (self.store.counters, self.store.gauges, self.store.histograms):
            self._before.update(values)

    def _stale(self, key: Key, value: object, index: int) -> bool:
        """Whether a series is left out of step ``index`` (a window is set): its value has not
        changed for longer than the window (it was written for the window after its last change;
        Prometheus' lookback carries the last sample on)."""
        last = self._changed.get(key)
        if last is None or last[0] != value:
            self._changed[key] = (value, index)
            return False
        assert self.window is not None  # (``write`` asks only with a window)
        return index - last[1] > self.window

    def write(self, start: float, end: float, index: int = -1) -> None:
        """The value of every series at ``end`` (a zero at ``start`` before a counter's or
        histogram's first sample, unless it was there in a step skipped), but those stale at step
        ``index`` (``_stale``; -1: none)."""
        families = self.store.families
        ts, t0 = " " + _stamp(end) + "\n", " " + _stamp(start) + "\n"
        n = 0
        stale = self._stale if self.window is not None and index >= 0 else None
        for values, kind in ((self.store.counters, "counter"), (self.store.gauges, "gauge")):
            prefixes = self._prefix
            for key, value in values.items():
                if stale is not None and stale(key, value, index):
                    continue
                got = prefixes.get(key)
                if got is None:
                    fam = families.get(key[0])
                    if fam is None or fam.kind != kind or key[0].startswith("logmetrics_"):
                        continue
                    self._ids += 1
                    got = prefixes[key] = (self._file(fam), f"{self._ids}\t{key[0]}{{{self._labels(fam, key[1])}}} ")
                    if kind == "counter" and key not in self._before:
                        got[0].write(got[1] + "0" + t0)
                        n += 1
                got[0].write(got[1] + _number(value) + ts)
                n += 1
        for key, hist in self.store.histograms.items():
            if stale is not None and stale(key, hist.count, index):
                continue
            h = self._hist.get(key)
            if h is None:
                fam = families.get(key[0])
                if fam is None or key[0].startswith("logmetrics_"):
                    continue
                h = self._hist[key] = self._hist_prefixes(fam, key)
                if key not in self._before:
                    n += self._hist_line(h, Histogram([0] * len(h[1])), t0)
            n += self._hist_line(h, hist, ts)
        self.samples += n

    def _hist_prefixes(self, fam: Family, key: Key) -> tuple[Spool, list[str], str, str]:
        labels = self._labels(fam, key[1])
        sep = "," if labels else ""
        bounds = [go_float(b) for b in fam.buckets] + ["+Inf"]
        self._ids += 1
        tag = f"{self._ids}\t"
        buckets = [f'{tag}{fam.name}_bucket{{{labels}{sep}le="{b}"}} ' for b in bounds]
        return self._file(fam), buckets, f"{tag}{fam.name}_sum{{{labels}}} ", f"{tag}{fam.name}_count{{{labels}}} "

    @staticmethod
    def _hist_line(h: tuple[Spool, list[str], str, str], hist: Histogram, ts: str) -> int:
        f, buckets, total, count = h
        acc = 0
        parts = []
        for prefix, k in zip(buckets, hist.buckets, strict=False):
            acc += k
            parts.append(f"{prefix}{acc}{ts}")
        parts.append(total + _number(hist.sum) + ts)
        parts.append(f"{count}{hist.count}{ts}")
        f.write("".join(parts))
        return len(parts)

    def finish(self, path: str) -> None:
        """Join the spools into ``path``: each family with its TYPE and HELP, then ``# EOF``."""
        with open(path, "w", encoding="utf-8", newline="\n") as out:
            for fam in self.store.families.values():
                f = self._files.pop(fam.name, None)
                if f is None:
                    continue
                f.flush()
                base = fam.base if fam.kind == "counter" else fam.name
                out.write(f"# TYPE {base} {fam.kind}\n# HELP {base} {escape(fam.help)}\n")
                series: dict[str, list[str]] = {}
                with open(f.name, encoding="utf-8") as src:
                    for line in src:
                        tag, _, sample = line.partition("\t")
                        got = series.get(tag)
                        if got is None:
                            got = series[tag] = []
                        got.append(sample)
                for samples in series.values():
                    out.writelines(samples)
                series.clear()
            out.write("# EOF\n")
        self.close()

    def close(self) -> None:
        """Remove the spools."""
        self._files.clear()
        shutil.rmtree(self.spool, ignore_errors=True)


def lock_folder(folder: str) -> int:
    """An exclusive lock on ``folder`` (an open descriptor of it, to close when done); UserError if
    another backfill holds it: two runs would write the same text and blocks there."""
    try:
        fd = os.open(folder, os.O_RDONLY | os.O_DIRECTORY)
    except OSError as exc:
        raise UserError(f"--out {folder}: cannot open the directory: {exc.strerror or exc}") from None
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError:
        os.close(fd)
        raise UserError(f"--out {folder}: another backfill is writing into it; wait for it to end, or name "
                        "another directory") from None
    return fd


def _remove_stale_work(folder: str) -> None:
    """Remove the spools and unfinished blocks that a backfill killed on the way left in ``folder``
    (those whose process, named in their name, is gone): a run that ends removes its own."""
    try:
        names = os.listdir(folder)
    except OSError:
        return
    for name in names:
        parts = name.split("-")
        if len(parts) < 3 or parts[0] not in (".spool", ".blocks") or not parts[1].isdigit():
            continue
        try:
            os.kill(int(parts[1]), 0)
        except ProcessLookupError:
            shutil.rmtree(os.path.join(folder, name), ignore_errors=True)
        except (OSError, OverflowError):  # alive (another user's), or no pid at all
            continue


def blocks_in(out: str) -> int:
    """How many TSDB blocks (directories holding a ``meta.json``) ``out`` holds."""
    try:
        return sum(os.path.isfile(os.path.join(out, name, "meta.json")) for name in os.listdir(out))
    except OSError:
        return 0


def create_blocks(text: str, out: str, promtool: str | None = None) -> str:
    """Run ``promtool tsdb create-blocks-from openmetrics`` on ``text`` into ``out``; its output. The
    blocks are made in a directory of their own in ``out`` and moved into it once all are made: if
    promtool fails (or the run is killed), no part of them passes for the whole (a later run
    removes what a killed one left)."""
    tool = promtool or shutil.which("promtool")
    if tool is None:
        raise UserError("promtool not found on PATH: it turns the OpenMetrics text into TSDB blocks (Debian and "
                        "Ubuntu: apt-get install prometheus; or a release from prometheus.io); or stop at the "
                        "text with --openmetrics-only")
    work = tempfile.mkdtemp(prefix=f".blocks-{os.getpid()}-", dir=out)
    try:
        proc = subprocess.run([tool, "tsdb", "create-blocks-from", "openmetrics", text, work],
                              capture_output=True, text=True, check=False)
        if proc.returncode != 0:
            made = blocks_in(work)
            why = (proc.stderr or proc.stdout).strip().splitlines()
            hint = "; raise the open-file limit (ulimit -n)" if "too many open files" in proc.stderr + proc.stdout \
                else ""
            removed = f"; the {made} block(s) it had made are removed" if made else ""
            raise UserError(f"promtool tsdb create-blocks-from openmetrics {text} failed: "
                            f"{why[-1] if why else f'exit code {proc.returncode}'}{removed}{hint}")
        for name in sorted(os.listdir(work)):
            os.rename(os.path.join(work, name), os.path.join(out, name))
    finally:
        shutil.rmtree(work, ignore_errors=True)
    return proc.stdout
