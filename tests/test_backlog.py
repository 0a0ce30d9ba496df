"""The backlog of a serving ``watch``: chunks read and kept per stream, parsed as one batch per stream
when they are due, when the files go quiet, or when a scrape comes (which then shows them)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from logmetrics.app.backlog import DEFER_SECONDS, Backlog
from logmetrics.app.options import Options
from logmetrics.app.runner import Runner
from logmetrics.plugins.finder import discover
from logmetrics.serve.server import MetricsServer
from logmetrics.sources.chunks import Chunk
from tests.helpers import access_line, parse
from tests.test_exposition import request


def served(path: Path, state_file: Path | None = None) -> Runner:
    """A runner as a serving ``watch`` of ``path`` makes it (from the file's start, api parser)."""
    opts = Options(paths=[str(path)], listen=("127.0.0.1", 0), parser="api", source=None, envelope="auto",
                   from_beginning=True, poll_interval=0.25, max_line_bytes=1 << 20,
                   state_file=str(state_file) if state_file is not None else None)
    return Runner(opts, discover((), {}))


@pytest.fixture
def runner(tmp_path: Path) -> Iterator[Runner]:
    """A serving runner of tmp_path/api.log, deferring as its poll loop does."""
    log = tmp_path / "api.log"
    log.write_text("")
    r = served(log)
    r.deferring = True
    yield r
    r.close()


def lines_read(r: Runner) -> float:
    """The lines the engine has taken so far (parsed, not kept)."""
    return sum(v for (name, _), v in r.store.counters.items() if name == "logmetrics_lines_read_total")


def scraped_lines(runner: Runner, srv: MetricsServer | None = None) -> float:
    """The lines a scrape of ``runner`` shows as read (through ``srv``, else a server of its own)."""
    if srv is None:
        srv = MetricsServer("127.0.0.1", 0, runner.registry, unparsed=runner.backlog)
        srv.start()
        try:
            return scraped_lines(runner, srv)
        finally:
            srv.stop()
    status, _, body = request("127.0.0.1", srv.address[1], "/metrics")
    assert status == 200
    got = parse(body.decode())
    return sum(v for (name, _), v in got.items() if name == "logmetrics_lines_read_total")


def test_the_chunks_of_a_stream_are_fed_as_one_in_read_order() -> None:
    """Two streams' chunks, interleaved: each stream fed once, its data joined in read order, with
    its last read's time and last write; a stream read once is fed its chunk as it is."""
    fed: list[Chunk] = []
    b = Backlog(fed.append)
    b.put([Chunk("a", b"1\n", 10.0, 9.0), Chunk("b", b"x\n", 10.5, None)])
    b.put([Chunk("a", b"2\n3\n", 11.0, 10.8)])
    assert b and b.reads == 3 and fed == []
    b.flush()
    assert fed == [Chunk("a", b"1\n2\n3\n", 11.0, 10.8), Chunk("b", b"x\n", 10.5, None)]
    assert not b and b.due() is None


def test_kept_chunks_are_due_after_the_defer_time_or_at_once_when_large(monkeypatch: pytest.MonkeyPatch) -> None:
    """Due DEFER_SECONDS after the first chunk kept (not the last), and at once past DEFER_BYTES
    in all or STREAM_BYTES in one stream."""
    clock = iter([100.0, 100.6])
    b = Backlog(lambda chunk: None, clock=lambda: next(clock))
    b.put([Chunk("a", b"1\n", 1.0)])
    b.put([Chunk("a", b"2\n", 1.6)])
    assert b.due() == 100.0 + DEFER_SECONDS
    monkeypatch.setattr("logmetrics.app.backlog.DEFER_BYTES", 4)
    assert b.due() == 0.0
    monkeypatch.setattr("logmetrics.app.backlog.DEFER_BYTES", 1 << 20)
    monkeypatch.setattr("logmetrics.app.backlog.STREAM_BYTES", 4)
    b.put([Chunk("b", b"1\n", 2.0)])
    assert b.due() == 100.0 + DEFER_SECONDS  # (stream a was put under the larger cap)
    b.put([Chunk("b", b"2\n", 2.1)])
    assert b.due() == 0.0  # one stream holds STREAM_BYTES: a file read behind its writer
    b.flush()
    assert b.due() is None


def test_a_busy_file_is_parsed_once_its_writes_pause(runner: Runner, tmp_path: Path) -> None:
    """Three passes that each read lines keep them; the pass that reads nothing parses them all
    at once (and a pass with the deferring off feeds at once)."""
    log = tmp_path / "api.log"
    for i in range(3):
        with log.open("a") as f:
            f.write(access_line(i))
        assert runner.poll() == 1
        assert lines_read(runner) == 0
    assert runner.poll() == 0
    assert lines_read(runner) == 3
    runner.deferring = False
    with log.open("a") as f:
        f.write(access_line(3))
    runner.poll()
    assert lines_read(runner) == 4


def test_a_scrape_shows_the_lines_read_before_it(runner: Runner, tmp_path: Path) -> None:
    """Lines read and kept are in the next scrape: it parses the backlog before it renders."""
    with (tmp_path / "api.log").open("a") as f:
        f.write(access_line(1) + access_line(2, code="404 Not Found"))
    runner.poll()
    assert runner.backlog and lines_read(runner) == 0
    assert scraped_lines(runner) == 2
    assert not runner.backlog


def test_a_scrape_reads_what_was_written_before_it(runner: Runner, tmp_path: Path,
                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    """Lines written and not read by any pass yet are in the next scrape, even one right after
    another (a finished render is not shared): it reads the files, then parses. Not before the
    first pass, nor while the files are read behind their writers, and a read that finds more
    than SCRAPE_BYTES is left to the poll loop: the scrape shows what is parsed."""
    log = tmp_path / "api.log"
    log.write_text(access_line(0))
    srv = MetricsServer("127.0.0.1", 0, runner.registry, unparsed=runner.backlog)
    srv.start()
    try:
        assert scraped_lines(runner, srv) == 0  # no pass yet: what the files hold is not known
        runner.poll()
        for n in (2, 3):
            with log.open("a") as f:
                f.write(access_line(n))
            assert scraped_lines(runner, srv) == n
        with log.open("a") as f:
            f.write(access_line(4))
        runner.backlog.reading = False  # as a pass far behind its writer leaves it
        assert scraped_lines(runner, srv) == 3
        runner.poll()  # (it read the line and the files went on: kept)
        runner.backlog.reading = False  # behind: what the pass kept is the poll loop's to parse when due
        assert scraped_lines(runner, srv) == 3 and runner.backlog
        runner.backlog.reading = True
        assert scraped_lines(runner, srv) == 4  # the scrape parsed what the pass kept
        monkeypatch.setattr("logmetrics.app.backlog.SCRAPE_BYTES", 10)
        with log.open("a") as f:
            f.write(access_line(5))
        assert scraped_lines(runner, srv) == 4  # its own read found "a backlog": kept for the poll loop
        assert runner.backlog.scraped()  # which reads (and parses) at once
        runner.poll()
        assert scraped_lines(runner, srv) == 5
    finally:
        srv.stop()
