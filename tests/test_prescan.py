"""Parsers' prescans run ahead in a child process: the same output as without, whatever the child does."""

from __future__ import annotations

import math
import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import ClassVar

import pytest
from logmetrics_parsers.vllm_lines import Digest

import logmetrics.app.prescan as prescan_module
from logmetrics.app.prescan import Prescanner
from logmetrics.app.watch import LIVE_PRESCAN_CHARS
from logmetrics.engine.ahead import Ahead
from logmetrics.engine.engine import Engine
from logmetrics.engine.streams import Stream
from logmetrics.events import Event
from logmetrics.plugins import Parser, PluginError, discover
from logmetrics.plugins.finder import validate
from logmetrics.records import Batch, Record
from logmetrics.sources.chunks import Chunk
from logmetrics.store.render import StoreView, text
from logmetrics.store.store import Store
from tests.helpers import Samples, Server, total
from tests.test_shards import RUN_TIMES, oneshot

ROOT = Path(__file__).resolve().parent.parent


def corpus(path: Path, lines: int) -> Path:
    """The benchmark's mixed vLLM corpus, ``lines`` long."""
    subprocess.run([sys.executable, str(ROOT / "bench" / "gen_corpus.py"), "-n", str(lines), "--seed", "3",
                    "-o", str(path)], check=True, capture_output=True, timeout=300)
    return path


def exposition(engine_setup: Callable[[Engine], None], data: bytes, chunk: int = 1 << 20,
               during: Callable[[int], None] | None = None) -> str:
    """``data`` fed to a vLLM engine in chunks of about ``chunk`` bytes (whole lines), then
    finished: its exposition, without the times of the run. ``during(i)`` is called before chunk i."""
    store = Store()
    engine = Engine(discover(), store, parser="vllm")
    engine_setup(engine)
    pos = i = 0
    while pos < len(data):
        end = data.find(b"\n", pos + chunk)
        end = len(data) if end < 0 else end + 1
        if during is not None:
            during(i)
        engine.feed(Chunk("/logs/vllm.log", data[pos:end], 1.7e9 + i, None))
        pos, i = end, i + 1
    engine.finish()
    assert not engine.applier.ahead  # nothing left unparsed
    out = text(StoreView(store)).decode()
    return "".join(line for line in out.splitlines(keepends=True) if not line.startswith(RUN_TIMES))


def test_oneshot_with_prescans_prints_what_one_process_prints(tmp_path: Path) -> None:
    """Each vLLM sample and a 5 MB mixed corpus (several batches), with the prescans in a child
    (``--workers 2``, one file): byte for byte what one process alone prints."""
    logs = [*sorted((ROOT / "samples" / "vllm").glob("*.log")), corpus(tmp_path / "mixed.log", 50_000)]
    for log in logs:
        one, _ = oneshot(str(log), workers=1, cwd=tmp_path)
        two, said = oneshot(str(log), workers=2, cwd=tmp_path)
        assert "prescans in a second process" in said, log
        assert one == two, log
    assert "backend_errors_total" in one and one.count("\n") > 100


def test_a_prescan_child_killed_midway_changes_nothing(tmp_path: Path) -> None:
    """The child killed (kill -9) after the second batch: the batches after it are read by the
    parser alone, and the result is the same as without a child."""
    data = corpus(tmp_path / "mixed.log", 30_000).read_bytes()
    plain = exposition(lambda _e: None, data, chunk=1 << 18)
    scanners: list[Prescanner] = []
    taken: list[object] = []

    class Counted(Prescanner):
        def take(self) -> object:
            taken.append(got := super().take())
            return got

    def ahead(engine: Engine) -> None:
        scanners.append(Counted(discover()))
        engine.applier.ahead = Ahead(scanners[0])

    def kill(i: int) -> None:
        if i == 2:
            os.kill(scanners[0]._pid, signal.SIGKILL)
            os.waitpid(scanners[0]._pid, 0)  # (dead before the next batch is sent: no race with its result)

    try:
        assert exposition(ahead, data, chunk=1 << 18, during=kill) == plain
        assert not scanners[0].running()  # (it saw the child go, and sends nothing more)
    finally:
        scanners[0].close()
    assert "backend_errors_total" in plain
    # a result before the kill; then None for the batch sent before it, and nothing sent after it
    assert len(taken) == 2 and isinstance(taken[0], Digest) and taken[1] is None


class _Raising(Parser):
    """A parser whose prescan raises on texts that hold ``boom``."""

    name: ClassVar[str] = "raising"

    @staticmethod
    def prescan(t: str) -> object:
        """The number of lines, or an error."""
        if "boom" in t:
            raise ValueError("boom")
        return t.count("\n")

    def parse(self, record: Record) -> Iterable[Event]:
        """(Not used: parse_batch reads every batch.)"""
        return ()

    def parse_batch(self, batch: Batch) -> tuple[list[Event], int]:
        """Nothing counted: what the prescan gave is kept by the test."""
        SEEN.append(batch.pre)
        return [], 0


SEEN: list[object] = []


def test_a_prescan_that_raises_or_a_text_too_large_gives_none(monkeypatch: pytest.MonkeyPatch) -> None:
    """In order: a result, None for a prescan that raised, None for a text larger than a slot
    (not sent), and the child goes on after both."""
    monkeypatch.setattr(prescan_module, "SLOT_BYTES", 64)
    entry = validate(_Raising, "test")
    scanner = Prescanner({"raising": entry})
    stream = Stream("s", "/s.log", parser=_Raising())
    ahead = Ahead(scanner)
    SEEN.clear()
    parsed: list[Batch] = []
    try:
        for t in ("a\nb\n", "boom\n", "x" * 100 + "\n", "c\n"):
            kept = ahead.put(stream, Batch("s", t, 0.0, t.count("\n")), True)
            if kept is not None:
                parsed.append(kept[1])
        kept = ahead.settle()
        assert kept is not None and not ahead
        parsed.append(kept[1])
    finally:
        scanner.close()
    assert [b.pre for b in parsed] == [2, None, None, 1]
    assert [b.text[:1] for b in parsed] == ["a", "b", "x", "c"]


def test_a_parser_refused_for_a_prescan_it_cannot_use() -> None:
    """A prescan that is no function, or one on a parser with no parse_batch to read it: refused at load."""

    class NotCallable(Parser):
        name: ClassVar[str] = "notcallable"
        prescan = "LINES"  # type: ignore[assignment]  # (the mistake the test is about)

        def parse_batch(self, batch: Batch) -> tuple[list[Event], int]:
            return [], 0

    class NoBatch(Parser):
        name: ClassVar[str] = "nobatch"
        prescan = staticmethod(len)

        def parse(self, record: Record) -> Iterable[Event]:
            return ()

    for cls in (NotCallable, NoBatch):
        with pytest.raises(PluginError, match="prescan must be a function"):
            validate(cls, "test")


def test_without_a_spare_core_or_enough_bytes_no_child(tmp_path: Path) -> None:
    """``--workers 1`` and a small file with the default: no child, and the run says why it is one process."""
    log = ROOT / "samples" / "vllm" / "v1-0.10.log"
    _, said = oneshot(str(log), workers=1, cwd=tmp_path)
    _, said0 = oneshot(str(log), workers=0, cwd=tmp_path)
    assert "prescans" not in said and "prescans" not in said0
    assert "reading in one process" in said0


def test_no_process_to_spare_means_no_prescans(monkeypatch: pytest.MonkeyPatch) -> None:
    """A fork refused (a process limit): no child, nothing sent, and no descriptor left open."""

    def refused() -> int:
        raise BlockingIOError(11, "Resource temporarily unavailable")

    before = len(os.listdir("/proc/self/fd"))
    monkeypatch.setattr(os, "fork", refused)
    scanner = Prescanner(discover())
    assert not scanner.running() and not scanner.send("vllm", "INFO: x\n")
    scanner.close()
    assert len(os.listdir("/proc/self/fd")) == before


class _Odd(Parser):
    """A parser whose prescan hangs on ``hang``, prints on ``print`` and raises on ``boom``."""

    name: ClassVar[str] = "odd"

    @staticmethod
    def prescan(t: str) -> object:
        """The number of lines, after what the text asks for."""
        if "hang" in t:
            time.sleep(60)
        if "print" in t:
            print("PRINTED BY A PRESCAN", flush=True)
        if "boom" in t:
            raise ValueError("boom")
        return t.count("\n")

    def parse_batch(self, batch: Batch) -> tuple[list[Event], int]:
        """Nothing counted."""
        return [], 0


def test_a_prescan_that_prints_raises_or_hangs_neither_corrupts_nor_hangs_the_run(
        monkeypatch: pytest.MonkeyPatch, capfd: pytest.CaptureFixture[str], caplog: pytest.LogCaptureFixture) -> None:
    """What a prescan prints goes to stderr, not to the run's output; one that raises is said once
    (per parser); one that hangs is stopped after ``ANSWER_SECONDS``, said, and nothing more is sent."""
    monkeypatch.setattr(prescan_module, "ANSWER_SECONDS", 0.5)
    scanner = Prescanner({"odd": validate(_Odd, "test")})
    try:
        got = []
        for t in ("print\n", "boom\n", "boom\n", "a\nb\n", "hang\n", "c\n"):
            assert scanner.send("odd", t) == scanner.running()
            got.append(scanner.take())
        began = time.monotonic()
    finally:
        scanner.close()
    assert time.monotonic() - began < 5  # (close stops a child that hangs: it does not wait for it)
    assert got == [1, None, None, 2, None, None] and not scanner.running()
    out, err = capfd.readouterr()
    assert "PRINTED BY A PRESCAN" in err and "PRINTED" not in out
    said = [r.getMessage() for r in caplog.records]
    assert sum("its prescan failed (ValueError: boom)" in m for m in said) == 1
    assert any("did not answer in 0.5 s" in m for m in said)


def _served_after(logs: Path, data: bytes, cpus: set[int] | None) -> tuple[Samples, str, float]:
    """``data`` appended at once to a file followed by a serving ``watch`` (on ``cpus`` only, if
    given): its catalog series once every line is parsed, what it said on stderr, and the CPU
    seconds its child processes took."""
    log = logs / "vllm.log"
    log.write_bytes(b"")
    lines = data.count(b"\n")
    server = Server("--parser", "vllm", str(logs), global_args=["-v"],
                    preexec_fn=None if cpus is None else lambda: os.sched_setaffinity(0, cpus))
    try:
        with open(log, "ab") as f:
            f.write(data)

        def parsed(s: Samples) -> bool:
            return total(s, "logmetrics_lines_matched_total") + total(s, "logmetrics_lines_unmatched_total") == lines

        got = server.wait_for(parsed, timeout=120)
        pid = server.proc.pid
        children = Path(f"/proc/{pid}/task/{pid}/children").read_text().split()
        ticks = sum(sum(map(int, Path(f"/proc/{c}/stat").read_text().rsplit(")", 1)[1].split()[11:13]))
                    for c in children)
    finally:
        server.stop()
    assert server.proc.stderr is not None
    said = "".join(server.startup) + server.proc.stderr.read().decode(errors="replace")
    return ({k: v for k, v in got.items() if not k[0].startswith("logmetrics_")}, said,
            ticks / os.sysconf("SC_CLK_TCK"))


@pytest.mark.skipif(len(os.sched_getaffinity(0)) < 2, reason="the child runs only with a core to spare")
def test_a_burst_served_with_prescans_shows_what_one_core_shows(tmp_path: Path) -> None:
    """8 MB of the mixed vLLM corpus appended at once to a followed file: read in batches of
    megabytes, prescanned in a child while serving, every catalog series is what a run held to one
    core (no child) shows."""
    data = corpus(tmp_path / "mixed.log", 60_000).read_bytes()
    assert len(data) > 2 * LIVE_PRESCAN_CHARS
    logs = tmp_path / "logs"  # (the same source label in both runs)
    logs.mkdir()
    two, said, child_cpu = _served_after(logs, data, None)
    assert "prescans of large batches in a second process" in said and child_cpu > 0.0  # (it scanned)
    one, said, child_cpu = _served_after(logs, data, {min(os.sched_getaffinity(0))})
    assert "second process" not in said and child_cpu == 0.0
    assert two.keys() == one.keys() and len(two) > 30
    assert all(math.isclose(two[k], one[k], rel_tol=1e-9) for k in two)


@pytest.mark.skipif(len(os.sched_getaffinity(0)) < 2, reason="the child runs only with a core to spare")
def test_a_stop_sent_to_the_whole_group_during_a_burst_is_no_failure(tmp_path: Path) -> None:
    """SIGTERM to the process group (a Ctrl-C, systemd's stop) while the child scans a burst: the
    run stops cleanly, and the child, which leaves signals to its parent, is not said to have failed."""
    data = corpus(tmp_path / "mixed.log", 60_000).read_bytes()
    logs = tmp_path / "logs"
    logs.mkdir()
    (logs / "vllm.log").write_bytes(b"")
    server = Server("--parser", "vllm", str(logs), preexec_fn=os.setsid)
    try:
        with open(logs / "vllm.log", "ab") as f:
            f.write(data * 3)
        server.wait_for(lambda s: total(s, "logmetrics_lines_read_total") > 0, timeout=60)
        os.killpg(server.proc.pid, signal.SIGTERM)
        assert server.proc.wait(timeout=30) == 0
    finally:
        server.stop()
    assert server.proc.stderr is not None
    said = server.proc.stderr.read().decode(errors="replace")
    assert "Traceback" not in said and "prescans is stopped" not in said, said


def test_without_a_child_while_serving_v_says_why(tmp_path: Path) -> None:
    """A serving ``watch`` with ``--state-file`` parses every pass at once, without the prescans'
    child, and ``-v`` says so."""
    (tmp_path / "vllm.log").write_bytes(b"")
    server = Server("--parser", "vllm", str(tmp_path / "vllm.log"), "--state-file", str(tmp_path / "state.db"),
                    global_args=["-v"])
    try:
        said = "".join(server.startup)
    finally:
        server.stop()
    assert "the parsers' prescans in this process: with --state-file" in said, said
