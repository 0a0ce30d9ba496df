"""The randomized fault suite: 100 seeded trials of a writer under load while files are rotated,
copy-truncated, deleted, re-linked and logmetrics is stopped and started again on its --state-file;
every file's count must equal the lines written minus what logmetrics declares lost.

The fault kinds still pending a fix (``tests.fault_plan.PENDING``) run only in
``scripts/fault-trials``. A failing trial prints its seed, plan, counts and replay command.
"""

from __future__ import annotations

import subprocess
import sys
import threading
import time
from pathlib import Path

from tests.fault_plan import KINDS, PENDING, Plan, Verdict, make_plan
from tests.faults import Logmetrics, Writer, run_session

ENABLED = tuple(k for k in KINDS if k not in PENDING)
SESSIONS = 4  # logmetrics processes side by side, each with its trials one after another
TRIALS = 100


def test_a_hundred_trials_count_every_line_once() -> None:
    """100 trials (seeds 0-99) of the enabled fault kinds: each file counted exactly, or declared lost."""
    verdicts: list[Verdict] = []
    errors: list[BaseException] = []

    def session(seeds: list[int]) -> None:
        try:
            verdicts.extend(run_session(seeds, ENABLED, max_kills=1))
        except BaseException as err:  # handed to the test's thread, which fails on it
            errors.append(err)

    threads = [threading.Thread(target=session, args=(list(range(s, TRIALS, SESSIONS)),)) for s in range(SESSIONS)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors, errors
    assert len(verdicts) == TRIALS
    bad = sorted((v for v in verdicts if not (v.exact or v.declared_only)), key=lambda v: v.plan.seed)
    assert not bad, "\n".join(str(v) for v in bad)


def test_a_plan_is_the_same_for_the_same_seed_and_kinds() -> None:
    """Replaying a seed gives its plan again; another seed or other kinds give another one."""
    plans = [make_plan(seed, ENABLED) for seed in range(50)]
    assert plans == [make_plan(seed, ENABLED) for seed in range(50)]
    assert len({str(p).split(" ", 1)[1] for p in plans}) == 50
    assert all(2 <= len(p.faults) <= 4 and 2 <= p.files <= 4 and p.rate <= 3000 for p in plans)
    assert all(p.faults == tuple(sorted(p.faults, key=lambda f: f.at)) for p in plans)
    assert make_plan(7, ("rename",)) != make_plan(7, ("delete",))


def test_every_kind_is_drawn_and_kills_are_capped() -> None:
    """Over 200 seeds every kind appears; no plan has more kills than asked; a symlink fault acts on file 0 only."""
    plans: list[Plan] = [make_plan(seed, KINDS, max_kills=1) for seed in range(200)]
    assert {f.kind for p in plans for f in p.faults} == set(KINDS)
    assert all(sum(f.kind in ("sigkill", "sigterm") for f in p.faults) <= 1 for p in plans)
    assert all(f.file == 0 for p in plans for f in p.faults if f.kind == "symlink")
    assert all(f.file != 0 for p in plans if p.symlinked for f in p.faults if f.kind != "symlink")


def test_a_verdict_counts_lost_and_extra_lines_outside_the_declared_ones() -> None:
    """Lost: written minus declared minus counted; extra: counted beyond what was written."""
    plan = make_plan(1, ENABLED)
    v = Verdict(plan, [10, 10, 10], [10.0, 7.0, 12.0], [0.0, 2.0, 0.0])
    assert (v.lost, v.extra, v.exact) == (1, 2, False)
    assert Verdict(plan, [10, 10], [10.0, 8.0], [0.0, 2.0]).exact
    split = Verdict(plan, [10, 10], [10.0, 10.0], [0.0, 0.0], [], ["3 counted under source 'f0.log.1'"])
    assert (split.counts_exact, split.exact) == (True, False)
    window = Verdict(plan, [10, 10], [10.0, 6.0], [0.0, 0.0], [], [], [1])  # file 1 declared lost, no amount
    assert (window.lost, window.in_window, window.exact, window.declared_only) == (0, 4, False, True)
    assert "replay: scripts/fault-trials --seed 1 --kinds" in str(v)


def test_the_writer_writes_whole_numbered_lines_at_its_rate(tmp_path: Path) -> None:
    """Every line the writer counts is in its file, numbered from 0, none cut."""
    paths = [tmp_path / "a.log", tmp_path / "b.log"]
    w = Writer(paths, 2000)
    w.start()
    deadline = time.monotonic() + 30
    while min(w.written) < 100 and time.monotonic() < deadline:
        time.sleep(0.01)
    w.finish()
    for path, n in zip(paths, w.written, strict=True):
        lines = path.read_text().splitlines()
        assert len(lines) == n > 0
        assert [int(line.split(":")[2].split(" ")[0]) for line in lines] == list(range(n))


def test_a_process_that_does_not_exit_shows_where_it_is(tmp_path: Path) -> None:
    """The stacks a stuck logmetrics gives on SIGUSR1 name its poll loop, for a failing trial's notes."""
    (tmp_path / "logs").mkdir()
    lm = Logmetrics(tmp_path / "logs", tmp_path / "state.db", tmp_path / "lm.log")
    try:
        stacks = lm._stacks()
    finally:
        assert lm.stop() == 0
    assert "Thread 0x" in stacks and "in follow" in stacks


def test_the_trials_script_prints_its_help() -> None:
    """``scripts/fault-trials --help`` prints every option's help (the pending kinds' reasons, with
    their per cent signs, included)."""
    root = Path(__file__).resolve().parent.parent
    out = subprocess.run([sys.executable, str(root / "scripts/fault-trials"), "--help"],
                         capture_output=True, text=True, check=True).stdout
    assert "--max-kills" in out and "--enabled" in out
