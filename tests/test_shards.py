"""``watch --oneshot`` in several worker processes prints what one process prints, byte for byte."""

from __future__ import annotations

import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
#: The families whose values are times of the run (of reading lines without stamps, of reading the
#: --config file): they differ between any two runs.
RUN_TIMES = ("logmetrics_last_line_timestamp_seconds", "logmetrics_config_last_reload_success_timestamp_seconds")


def oneshot(*args: str, workers: int, cwd: Path) -> tuple[str, str]:
    """``logmetrics -v watch --oneshot --workers N ARGS``: its output without the time of reading,
    and its messages."""
    proc = subprocess.run([sys.executable, "-m", "logmetrics", "-v", "watch", "--oneshot", "--workers", str(workers),
                           *args], capture_output=True, text=True, timeout=600, cwd=cwd)
    assert proc.returncode == 0, proc.stderr
    kept = [line for line in proc.stdout.splitlines(keepends=True) if not line.startswith(RUN_TIMES)]
    return "".join(kept), proc.stderr


def test_the_samples_in_two_processes_give_one_process_output(tmp_path: Path) -> None:
    """Every sample log, read in two worker processes, gives the single process's exposition."""
    one, said = oneshot(str(ROOT / "samples"), workers=1, cwd=tmp_path)
    two, said2 = oneshot(str(ROOT / "samples"), workers=2, cwd=tmp_path)
    assert "in 2 processes" in said2 and "reading in one process: --workers 1" in said
    assert "backend_errors_total" in one and one == two


def test_the_mixed_corpus_in_two_processes_gives_one_process_output(tmp_path: Path) -> None:
    """The benchmark's mixed corpus (a log per backend, routed by content), in two processes: the same bytes."""
    corpus = tmp_path / "mix"
    subprocess.run([sys.executable, str(ROOT / "bench" / "gen_mix.py"), str(corpus), "-n", "30000"],
                   check=True, capture_output=True, timeout=300)
    one, _ = oneshot(str(corpus), workers=1, cwd=tmp_path)
    two, said = oneshot(str(corpus), workers=2, cwd=tmp_path)
    assert "in 2 processes" in said and "again" not in said
    assert one.count("\n") > 100 and one == two


@pytest.mark.parametrize("why", ["folded", "source", "link"])
def test_where_shares_could_differ_one_process_reads_it_all(tmp_path: Path, why: str) -> None:
    """A label value the guard folds (one model place, two models), one source for every file
    (--source), or one file under two names (a link, read once): the run is one process's, so the
    output is still the same."""
    logs = [str(ROOT / "samples" / "vllm" / name) for name in ("v1-0.10.log", "v0-0.5.log", "v1-0.33.log")]
    args = list(logs)
    if why == "folded":
        (tmp_path / "lm.toml").write_text("[label_limits]\nmodel = 1\n")
        args = ["--config", "lm.toml", *logs]
    elif why == "source":
        args = ["--source", "all", *logs]
    else:
        (tmp_path / "again.log").symlink_to(logs[0])
        args = [*logs, str(tmp_path / "again.log")]
    one, _ = oneshot(*args, workers=1, cwd=tmp_path)
    two, said = oneshot(*args, workers=2, cwd=tmp_path)
    assert one == two
    if why == "folded":
        # (folded in a share that read two of the files, or more models in all than one share held)
        assert "__other__" in one and re.search("reading them again in one process: (?:a label value was folded"
                                                "|more model values than the cardinality guard keeps)", said)
    elif why == "source":
        assert "reading in one process: a source label named" in said
    else:
        assert "is a file named twice (a link)" in said


def test_an_interrupted_oneshot_says_so_and_does_not_succeed(tmp_path: Path) -> None:
    """SIGTERM before the end of the inputs (stdin still open): nothing printed, a message, exit 130.
    (Not SIGINT: a test run in the background inherits SIGINT ignored, which Python then keeps.)"""
    proc = subprocess.Popen([sys.executable, "-m", "logmetrics", "watch", "--oneshot", "--parser", "vllm", "-"],
                            stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            cwd=tmp_path)
    assert proc.stdin is not None
    proc.stdin.write("INFO 06-02 10:00:00 [api_server.py:1] args: Namespace(model='m')\n")
    proc.stdin.flush()
    time.sleep(1.5)  # started and reading
    proc.send_signal(signal.SIGTERM)
    out, err = proc.communicate(timeout=30)
    assert proc.returncode == 130 and out == "" and "logmetrics: interrupted" in err, err


def test_the_progress_line_counts_what_the_workers_read() -> None:
    """Each worker posts its bytes read and left on the board; the first process' progress line
    adds them to its own."""
    import io

    from logmetrics.app.progress import Progress
    from logmetrics.app.workers import Board
    from logmetrics.sources.chunks import SourceStats

    board = Board(2)
    for slot, (read, left) in enumerate([(3_000_000, 1_000_000), (2_000_000, 0)]):
        board.slot = slot
        board.done(SourceStats(bytes_read={"a": read}, lag_bytes={"a": left}))
    assert board.totals() == (5_000_000, 1_000_000)
    shown = io.StringIO()
    progress = Progress(shown, after=0.0)
    progress.others = board.totals
    progress.update(SourceStats(bytes_read={"b": 4_000_000}, lag_bytes={"b": 0}))
    assert "read 9.0 MB of 10.0 MB (90 %)" in shown.getvalue(), shown.getvalue()


BOOM = '''
from logmetrics.events import Event
from logmetrics.plugins import Parser


class Boom(Parser):
    """Raises on 'boom' lines, counts 'ok' lines."""
    name = "boom"

    def parse(self, record):
        if record.text == "boom":
            raise RuntimeError("boom")
        return [Event("backend_restarts_total", ())] if record.text == "ok" else []
'''


def test_a_warning_of_several_workers_is_said_once(tmp_path: Path) -> None:
    """The same warning in two workers (a parser that raises, reported once per parser) is printed
    once, as one process prints it; the counts are one process's."""
    (tmp_path / "boom.py").write_text(BOOM)
    for name in ("a.log", "b.log"):
        (tmp_path / name).write_text("ok\nboom\nok\n")
    args = ["--plugin", "boom.py", "--parser", "boom", "a.log", "b.log"]
    one, said1 = oneshot(*args, workers=1, cwd=tmp_path)
    two, said2 = oneshot(*args, workers=2, cwd=tmp_path)
    assert "in 2 processes" in said2 and one == two
    assert said1.count("parser boom raised RuntimeError") == 1 == said2.count("parser boom raised RuntimeError")


def test_gather_goes_on_ticking_while_workers_run_and_a_failed_one_gives_none() -> None:
    """The first process' progress line goes on while it waits for its workers; a worker that
    raises gives no result (its share is read again in one process)."""
    from logmetrics.app import workers

    def slow() -> int:
        time.sleep(0.7)
        return 42

    def broken() -> int:
        raise RuntimeError("boom")

    ticks: list[float] = []
    children = [workers.fork(slow), workers.fork(broken)]
    assert workers.gather(children, lambda: ticks.append(time.monotonic())) == [42, None]
    assert len(ticks) >= 3, ticks


def test_more_shares_than_processes_go_to_the_first_process_free() -> None:
    """Five shares over two processes: at most two read at once, in order, the largest first; the
    first process reads the last share once a worker has ended; the results come in share order."""
    import os

    from logmetrics.app import workers
    from logmetrics.sources.chunks import SourceStats

    assert workers.jobs({"a": 5, "b": 4, "c": 3}, 2) == [("a",), ("b",), ("c",)]
    assert workers.jobs({"a": 5, "b": 4, "c": 3}, 3) == [("a",), ("b",), ("c",)]
    many = {f"{i}.log": 100 - i for i in range(20)}
    assert len(workers.jobs(many, 2)) == 2 * workers.JOBS_PER_PROCESS
    seconds = {"a": 0.6, "b": 0.2, "c": 0.2, "d": 0.2, "e": 0.1}

    def read(share: tuple[str, ...], board: object = None) -> tuple[str, int, float, float]:
        start = time.monotonic()
        time.sleep(seconds[share[0]])
        return share[0], os.getpid(), start, time.monotonic()

    def mine(share: tuple[str, ...]) -> tuple[tuple[str, int, float, float], SourceStats]:
        return read(share), SourceStats()

    made, results, _ = workers.spread([(s,) for s in seconds], read, mine, None, 2)
    runs = [r for r in results if isinstance(r, tuple)]
    assert [r[0] for r in runs] == ["a", "b", "c", "d"] and made[0] == "e" and made[1] == os.getpid()
    assert len({r[1] for r in runs}) == 4  # a worker each
    spans = [(r[2], r[3]) for r in [*runs, made]]
    for at, _ in spans:  # (a worker starts when one before has ended: a little later)
        assert sum(1 for start, end in spans if start <= at + 0.05 < end) <= 2, spans
    assert runs[3][2] < runs[0][3] and made[2] >= runs[0][3] - 0.05  # d went to b's freed process, e waited


def test_the_progress_line_ends_once_every_process_has_read() -> None:
    """The first process' own share may end first: while workers read, its ``done`` leaves the line
    open, and ``end`` closes it, once, with everyone's bytes."""
    import io

    from logmetrics.app.progress import Progress
    from logmetrics.sources.chunks import SourceStats

    shown = io.StringIO()
    progress = Progress(shown, after=0.0)
    progress.others = lambda: (6_000_000, 0)
    mine = SourceStats(bytes_read={"b": 4_000_000}, lag_bytes={"b": 0})
    progress.update(mine)
    progress.done(mine)
    assert not shown.getvalue().endswith("\n")
    progress.end(mine)
    progress.end(mine)
    assert shown.getvalue().count("\n") == 1 and "read 10.0 MB in" in shown.getvalue().splitlines()[-1]


def test_two_logs_whose_lines_name_their_sources_are_read_in_one_process(tmp_path: Path) -> None:
    """Two ``docker compose logs`` files may name one service: the run stays in one process from the
    start (where it read everything twice, in workers and then alone), with the same output."""
    compose = (ROOT / "samples" / "supabase" / "compose.log").read_text()
    (tmp_path / "a-compose.log").write_text(compose)
    (tmp_path / "b-compose.log").write_text(compose)
    (tmp_path / "vllm.log").write_text((ROOT / "samples" / "vllm" / "v1-0.10.log").read_text())
    one, _ = oneshot(str(tmp_path), workers=1, cwd=tmp_path)
    two, said = oneshot(str(tmp_path), workers=2, cwd=tmp_path)
    assert "reading in one process: files whose lines name their sources" in said, said
    assert "again" not in said and one == two


def test_workers_end_with_their_process_even_killed() -> None:
    """A ``kill -9`` of the first process ends its workers at once (Linux): none reads on alone."""
    import os

    code = ("import sys, time\n"
            "from logmetrics.app import workers\n"
            "child = workers.fork(lambda: time.sleep(60))\n"
            "print(child.pid, flush=True)\n"
            "time.sleep(60)\n")
    proc = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, text=True, cwd=ROOT)
    assert proc.stdout is not None
    child = int(proc.stdout.readline())
    proc.send_signal(signal.SIGKILL)
    proc.wait(timeout=10)
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        try:  # (gone, or a zombie that its new parent has not reaped yet)
            if Path(f"/proc/{child}/stat").read_text().rsplit(")", 1)[1].split()[0] in "ZX":
                break
        except (FileNotFoundError, ProcessLookupError):
            break
        time.sleep(0.05)
    else:
        os.kill(child, signal.SIGKILL)
        raise AssertionError("the worker outlived its killed parent")
