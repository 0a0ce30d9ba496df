"""The randomized fault suite's plans and verdicts: which faults a trial makes and when, derived
from its seed alone, and what its counts say.

A trial's plan is a pure function of (seed, kinds): the same seed and kinds give the same files,
write rate, faults and fault times, so a failing seed is replayed with
``scripts/fault-trials --seed N --kinds ...``. Timing is real, so a replay runs the same plan, not
the same interleaving.
"""

from __future__ import annotations

import random
from dataclasses import dataclass, field

# What a fault does (``arg`` in parentheses):
#   rename        mv x.log x.log-<n> (dateext), the writer reopens x.log
#   shift         logrotate's numbered shift: rm x.log.3, .2 -> .3, .1 -> .2, x.log -> x.log.1
#   copytruncate  cp x.log x.log-<n>; truncate x.log (the writer holds its lines meanwhile)
#   copy          cp x.log x.log.1 (over the copy there, if any), x.log left as it is
#   cpover        cp x.log x.log.1 (over the copy there, if any); truncate x.log
#   delete        rm x.log, the writer creates it again
#   symlink       the file is a symlink into a directory not watched; point it at a new file
#   fdlimit       lower logmetrics' RLIMIT_NOFILE to its open descriptors + (arg) until the end
#   sigkill       SIGKILL, down for (arg) seconds while the writer goes on, start again
#   sigterm       SIGTERM, the same
KINDS = ("rename", "shift", "copytruncate", "copy", "cpover", "delete", "symlink", "fdlimit", "sigkill", "sigterm")
KILLS = frozenset({"sigkill", "sigterm"})

# Fault kinds that trials still find inexact, with what goes wrong; the normal test command runs the
# others, scripts/fault-trials runs them all.
PENDING: dict[str, str] = {
    "copy": "a cp over a copy that still holds lines logmetrics has not read (the copy of a cpover, written over "
            "within about a tenth of a second or while logmetrics is down) loses those lines uncounted: no tailer "
            "sees them (12 of 200 trials of copy, cpover and sigkill lost 4 to 11 lines; none counted one twice)",
    "cpover": "the same: the next cp over the copy, or a second cpover, before that copy was read",
}

LOST_COUNTER = "logmetrics_bytes_lost_total"  # bytes declared lost, by source; absent counts as 0
LOST_FILES = "logmetrics_files_lost_total"  # files declared lost in an amount not known, by source


@dataclass(frozen=True)
class Fault:
    """One fault: ``at`` seconds after the trial's writer started, on file ``file``."""

    at: float
    kind: str
    file: int
    arg: float

    def __str__(self) -> str:
        arg = f",{self.arg:g}" if self.kind in KILLS or self.kind == "fdlimit" else ""
        return f"{self.at:.2f}s:{self.kind}({self.file}{arg})"


@dataclass(frozen=True)
class Plan:
    """A trial: ``files`` log files (file 0 a symlink if ``symlinked``), ``rate`` lines/s in all,
    written for ``duration`` seconds, with ``faults`` in time order."""

    seed: int
    kinds: tuple[str, ...]
    max_kills: int
    files: int
    rate: int
    duration: float
    symlinked: bool
    faults: tuple[Fault, ...]

    def __str__(self) -> str:
        link = " file 0 a symlink" if self.symlinked else ""
        steps = " ".join(str(f) for f in self.faults)
        return f"seed={self.seed} files={self.files}{link} rate={self.rate}/s for {self.duration:.2f}s: {steps}"

    def replay(self) -> str:
        """The command that runs this plan again."""
        return f"scripts/fault-trials --seed {self.seed} --kinds {','.join(self.kinds)} --max-kills {self.max_kills}"


def make_plan(seed: int, kinds: tuple[str, ...], max_kills: int = 2) -> Plan:
    """The plan of trial ``seed``: 2-4 files, 1,000-3,000 lines/s, 2-4 faults of ``kinds`` (at most
    ``max_kills`` of them kills) at random times within 0.4-0.8 s of writing."""
    unknown = set(kinds) - set(KINDS)
    if unknown or not kinds:
        raise ValueError(f"unknown fault kinds: {sorted(unknown)}; known: {', '.join(KINDS)}")
    rnd = random.Random(seed)
    files = rnd.randint(2, 4)
    rate = rnd.randrange(1000, 3001, 100)
    duration = round(rnd.uniform(0.4, 0.8), 2)
    chosen: list[str] = []
    for _ in range(rnd.randint(2, 4)):
        kind = rnd.choice(kinds)
        if kind in KILLS and sum(k in KILLS for k in chosen) >= max_kills:
            kind = rnd.choice([k for k in kinds if k not in KILLS] or [kind])
        if kind in KILLS and sum(k in KILLS for k in chosen) >= max_kills:
            continue
        chosen.append(kind)
    symlinked = "symlink" in chosen
    times = sorted(round(rnd.uniform(0.05, duration - 0.05), 2) for _ in chosen)
    faults = []
    for at, kind in zip(times, chosen, strict=True):
        if kind == "symlink":
            target = 0
        else:
            target = rnd.randrange(1 if symlinked else 0, files)
        arg = 0.0
        if kind in KILLS:
            arg = round(rnd.uniform(0.0, 0.3), 2)  # seconds down
        elif kind == "fdlimit":
            arg = float(rnd.randint(3, 6))  # descriptors left free
        faults.append(Fault(at, kind, target, arg))
    return Plan(seed, tuple(kinds), max_kills, files, rate, duration, symlinked, tuple(faults))


@dataclass
class Verdict:
    """What one trial counted against what it wrote, per file."""

    plan: Plan
    written: list[int]
    counted: list[float]
    declared: list[float]
    notes: list[str] = field(default_factory=list)  # other failures: exit codes, earlier trials changed
    #: lines counted, but under a rotated file's own name instead of its stream's (a label split:
    #: the counts are exact, the series are not); reported apart, see counts_exact
    splits: list[str] = field(default_factory=list)
    #: files that logmetrics declared lost without an amount (logmetrics_files_lost_total): their
    #: shortfall is in a declared window, reported apart as ``unmeasured``
    unmeasured: list[int] = field(default_factory=list)

    def rows(self) -> list[tuple[int, float, float]]:
        """Per file: (written, counted, declared lost)."""
        return list(zip(self.written, self.counted, self.declared, strict=True))

    @property
    def lost(self) -> int:
        """Lines neither counted nor declared lost."""
        return int(sum(max(0.0, w - d - c) for i, (w, c, d) in enumerate(self.rows()) if i not in self.unmeasured))

    @property
    def in_window(self) -> int:
        """Lines short in the files declared lost without an amount (a declared window)."""
        return int(sum(max(0.0, w - d - c) for i, (w, c, d) in enumerate(self.rows()) if i in self.unmeasured))

    @property
    def extra(self) -> int:
        """Lines counted beyond what was written (counted twice). What is declared lost is an upper
        bound in lines (logmetrics declares bytes), so it does not lower this."""
        return int(sum(max(0.0, c - w) for w, c, _ in self.rows()))

    @property
    def exact(self) -> bool:
        """Every file counted exactly under its own stream, and nothing else went wrong."""
        return self.counts_exact and not self.splits and not self.in_window

    @property
    def declared_only(self) -> bool:
        """Not exact only within what logmetrics declared lost without an amount."""
        return self.counts_exact and not self.splits and bool(self.in_window)

    @property
    def counts_exact(self) -> bool:
        """Every line counted once (some maybe under a rotated file's own name), nothing else wrong."""
        return not self.lost and not self.extra and not self.notes

    def __str__(self) -> str:
        files = ", ".join(f"file {i}: wrote {w} counted {c:g} declared lost {d:g}"
                          for i, (w, c, d) in enumerate(self.rows()))
        notes = "".join(f"; {n}" for n in (*self.notes, *self.splits))
        if self.unmeasured:
            notes += f"; declared lost without an amount: file {', file '.join(map(str, self.unmeasured))}"
        return f"{self.plan}\n  {files}{notes}\n  replay: {self.plan.replay()}"
