"""The test kit for a parser's own tests: events checked where they are made, golden samples run as
a user runs them, and a fast path held to what ``parse`` gives.

``check_events(MyParser, events)`` runs the store's own checks on ``events`` (as the engine would
apply them for this parser) and fails with every problem listed: a family that is neither in the
catalog nor among the parser's ``metrics``, the wrong number of label values, a value the family
cannot take (a negative counter increment, NaN), a label value that is not a string, an object
that is no ``Event``. It returns the events, so that a test can wrap a call::

    events = check_events(MyParser, parser.parse(Record("...")))

``check_golden(log, "myparser", plugins=["my_parser.py"])`` runs ``logmetrics watch --oneshot``
on a sample log in a new process and compares the series it prints with ``<log>.expected.prom``
beside it (``LOGMETRICS_UPDATE_GOLDEN=1`` writes that file instead; check each value by hand).

``assert_fast_path_matches(MyParser, text)`` holds a parser's fast path (the runs of its
``frequent`` lines through ``parse_run``, or its own ``parse_batch``) to ``parse``: on
``text`` cut into batches the way the engine cuts reads, it must give the same totals, the same
records and lines matched, and the same state.

``assert_restarts_match(MyParser, text)`` holds a parser's saved state to a restart of logmetrics
with ``--state-file`` between any two records: two runs must count what one run counts.
"""

from __future__ import annotations

import math
import os
import subprocess
import sys
from collections.abc import Callable, Iterable, Sequence
from pathlib import Path

from prometheus_client.parser import text_string_to_metric_families

from logmetrics.engine.fastcheck import Outcome, Totals, batches, differences, refused, run, totals
from logmetrics.engine.restartcheck import POINTS, restart_differences
from logmetrics.events import Event
from logmetrics.plugins import Parser, has_fast_path, has_frequent, has_own_batch, validate

__all__ = [
    "EventError",
    "GoldenError",
    "Run",
    "Totals",
    "assert_fast_path_matches",
    "assert_restarts_match",
    "batches",
    "check_events",
    "check_golden",
    "diff",
    "golden_path",
    "has_fast_path",
    "has_frequent",
    "has_own_batch",
    "oneshot",
    "refused",
    "render",
    "run_batches",
    "samples_of",
    "totals",
]

#: Series a golden file leaves out: the engine's own figures and the processes found on the machine.
IGNORED_PREFIXES = ("logmetrics_", "backend_process_")
UPDATE_VARIABLE = "LOGMETRICS_UPDATE_GOLDEN"
MAX_LISTED = 20  # refused events listed in a failure, at the most
Key = tuple[str, tuple[tuple[str, str], ...]]


class EventError(AssertionError):
    """Events the engine would refuse; the message lists each with its reason."""


class GoldenError(AssertionError):
    """A sample's metrics differ from its golden file; the message lists each series that differs."""


def check_events(parser_cls: type[Parser], events: Iterable[Event]) -> list[Event]:
    """``events`` as a list, or ``EventError`` naming every event the engine would refuse and why."""
    out = list(events)
    bad = refused(parser_cls, out)
    if bad:
        lines = [f"  {ev!r}: {reason}" for ev, reason in bad[:MAX_LISTED]]
        if len(bad) > MAX_LISTED:
            lines.append(f"  ... and {len(bad) - MAX_LISTED} more")
        raise EventError(f"{len(bad)} event(s) of parser {parser_cls.name!r} would be refused:\n" + "\n".join(lines))
    return out


# -- golden samples ------------------------------------------------------------------------------

def oneshot(log: str | Path, parser: str, *, plugins: Sequence[str] = (), cwd: str | Path | None = None) -> str:
    """What ``logmetrics watch --oneshot --parser PARSER --source sample LOG`` prints, run in a new
    process as a user runs it (``plugins``: ``--plugin`` specs); AssertionError if it fails."""
    cmd = [sys.executable, "-m", "logmetrics", "watch", "--oneshot", "--parser", parser, "--source", "sample",
           *(arg for spec in plugins for arg in ("--plugin", spec)), str(log)]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=300, cwd=cwd)
    assert proc.returncode == 0, f"{' '.join(cmd)} exited {proc.returncode}:\n{proc.stderr}"
    return proc.stdout


def samples_of(text: str) -> dict[Key, float]:
    """{(sample name, sorted labels): value} of the series a golden file covers in exposition ``text``."""
    out: dict[Key, float] = {}
    for family in text_string_to_metric_families(text):
        for s in family.samples:
            if not s.name.startswith(IGNORED_PREFIXES):
                out[(s.name, tuple(sorted(s.labels.items())))] = s.value
    return out


def render(text: str) -> str:
    """The covered families of an exposition text, in the text format, families and series sorted."""
    lines: list[str] = []
    for family in sorted(text_string_to_metric_families(text), key=lambda f: f.name):
        kept = [s for s in family.samples if not s.name.startswith(IGNORED_PREFIXES)]
        if not kept:
            continue
        name = family.name + ("_total" if family.type == "counter" else "")
        lines.append(f"# HELP {name} {family.documentation}")
        lines.append(f"# TYPE {name} {family.type}")
        for s in sorted(kept, key=lambda s: (s.name, sorted((k, v) for k, v in s.labels.items() if k != "le"),
                                             float(s.labels.get("le", 0.0)))):
            labels = ",".join(f'{k}="{v}"' for k, v in sorted(s.labels.items()))
            lines.append(f"{s.name}{{{labels}}} {s.value!r}")
    return "\n".join(lines) + "\n"


def header(path: Path) -> str:
    """The leading comment lines of a golden file (not HELP/TYPE lines), kept when it is rewritten."""
    if not path.exists():
        return ""
    kept: list[str] = []
    for line in path.read_text(encoding="utf-8").splitlines():
        if not line.startswith("#") or line.startswith(("# HELP ", "# TYPE ")):
            break
        kept.append(line)
    return "".join(line + "\n" for line in kept)


def same(a: float, b: float) -> bool:
    """Equal values: floats to a relative 1e-9, NaN equal to NaN."""
    if math.isnan(a) or math.isnan(b):
        return math.isnan(a) and math.isnan(b)
    return math.isclose(a, b, rel_tol=1e-9, abs_tol=1e-12)


def diff(want: dict[Key, float], got: dict[Key, float]) -> str:
    """The series that differ, one line each: missing, unexpected, or with a wrong value."""
    def show(key: Key) -> str:
        return key[0] + "{" + ",".join(f'{k}="{v}"' for k, v in key[1]) + "}"

    rows = []
    for key in sorted(set(want) | set(got)):
        if key not in got:
            rows.append(f"  missing     {show(key)} (expected {want[key]!r})")
        elif key not in want:
            rows.append(f"  unexpected  {show(key)} = {got[key]!r}")
        elif not same(want[key], got[key]):
            rows.append(f"  wrong value {show(key)}: expected {want[key]!r}, got {got[key]!r}")
    return "\n".join(rows)


def golden_path(log: str | Path) -> Path:
    """The golden file of a sample log: ``<case>.expected.prom`` beside ``<case>.log``."""
    return Path(log).with_suffix(".expected.prom")


def check_golden(log: str | Path, parser: str | None = None, *, plugins: Sequence[str] = (),
                 update: bool | None = None, cwd: str | Path | None = None) -> bool:
    """The series ``oneshot`` prints for ``log`` (with ``parser``, by default the name of the
    log's folder) are exactly those of its golden file; ``GoldenError`` lists every difference.
    With ``update`` (by default: ``LOGMETRICS_UPDATE_GOLDEN=1``) the golden file is written from the
    run instead, its leading comment lines kept, and True is returned."""
    log = Path(log)
    golden = golden_path(log)
    out = oneshot(log, parser or log.parent.name, plugins=plugins, cwd=cwd)
    if update if update is not None else os.environ.get(UPDATE_VARIABLE) == "1":
        golden.write_text(header(golden) + render(out), encoding="utf-8")
        return True
    if not golden.exists():
        raise GoldenError(f"{golden} is missing; write it with {UPDATE_VARIABLE}=1 and check its values by hand")
    problems = diff(samples_of(golden.read_text(encoding="utf-8")), samples_of(out))
    if problems:
        raise GoldenError(f"{log} differs from {golden.name}:\n{problems}")
    return False


# -- the fast path against parse ----------------------------------------------------------------

Run = tuple[Totals, int, int, object]


def run_batches(parser_cls: type[Parser], text: str, size: int | None, *, fast: bool = True, now: float = 0.0,
                prepare: Callable[[Parser], None] | None = None,
                state: Callable[[Parser], object] | None = None, digits: int = 9) -> Run:
    """Totals, records and lines matched, and the final state of a new parser on ``text`` in
    batches: through its fast path (``fast``: its ``parse_batch``, or the runs of its ``frequent``
    lines through ``parse_run``), or record by record through ``parse`` alone. AssertionError if
    the parser fails on a record, ``EventError`` if it makes an event the engine would refuse."""
    out = _checked(parser_cls, run(parser_cls, text, size, fast=fast, now=now, prepare=prepare, state=state,
                                   digits=digits), "its fast path" if fast else "parse")
    return out.totals, out.matched, out.lines, out.state


def assert_fast_path_matches(parser_cls: type[Parser], text: str, sizes: Sequence[int | None] = (None, 4096, 500),
                             *, now: float = 0.0, prepare: Callable[[Parser], None] | None = None,
                             state: Callable[[Parser], object] | None = None, digits: int = 9,
                             lines: bool = True) -> Run:
    """The parser's fast path (its ``parse_batch``, or its ``frequent`` lines) on ``text`` cut into
    batches of each size gives what ``parse`` gives record by record: the same totals, records and
    (unless ``lines`` is False) lines matched, and final state (``state(parser)``, by default
    ``parser.state()``), totals rounded to ``digits``; ``prepare(parser)`` runs on each new parser
    first (``learn``, say). The failure names each series that differs. Returns the
    record-by-record run of the last size. A parser with neither has no fast path: it is run
    through ``parse`` alone, its events checked as ``check_events`` does."""
    want: Run = ({}, 0, 0, None)
    validate(parser_cls, "the test kit")  # as logmetrics loads it
    for size in sizes:
        slow = _checked(parser_cls, run(parser_cls, text, size, fast=False, now=now, prepare=prepare, state=state,
                                        digits=digits), "parse")
        want = (slow.totals, slow.matched, slow.lines, slow.state)
        if not has_fast_path(parser_cls):
            continue
        got = _checked(parser_cls, run(parser_cls, text, size, fast=True, now=now, prepare=prepare, state=state,
                                       digits=digits), "its fast path")
        wrong = differences(slow, got, lines=lines)
        if wrong:
            raise AssertionError(f"{parser_cls.__name__}: the fast path differs from parse in batches of "
                                 f"{size or 'the whole text'}:\n" + "\n".join(f"  {w}" for w in wrong))
    return want


def assert_restarts_match(parser_cls: type[Parser], text: str, *, now: float = 0.0, points: int = POINTS) -> None:
    """A restart of logmetrics with ``--state-file`` between any two records of ``text`` (``points``
    of them at the most) counts what one run counts: the parser's ``state()``, through JSON, and
    ``restore`` then ``learn`` of the text before, carry whatever it holds across records (a
    request in flight, a crash under way). The failure names each series that differs, and where."""
    wrong = restart_differences(parser_cls, text, now=now, points=points)
    if wrong:
        raise AssertionError(f"{parser_cls.__name__}: a restart changes what is counted:\n"
                             + "\n".join(f"  {w}" for w in wrong))


def _checked(parser_cls: type[Parser], out: Outcome, path: str) -> Outcome:
    """``out``, or AssertionError if the parser failed on a record (through ``path``: "parse" or
    "its fast path"), ``EventError`` if it made an event the engine would refuse."""
    assert not out.errors, (f"{parser_cls.__name__}: {path} failed on {out.errors} record(s) or lines of runs "
                            f"(first: {out.failure})")
    check_events(parser_cls, out.events)
    return out
