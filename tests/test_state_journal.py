"""--state-file commits at every poll: what was read is kept across a SIGKILL, held-back text too,
and a commit writes only what changed. Real processes on real files, and the journal alone."""

from __future__ import annotations

import json
import os
import signal
import sqlite3
import threading
import time
from pathlib import Path

from logmetrics.app.runner import CATCH_UP_SECONDS
from logmetrics.engine.engine import WEAK_HOLD_SECONDS, Engine
from logmetrics.events import Event
from logmetrics.plugins import discover
from logmetrics.sources.chunks import Chunk, Position
from logmetrics.state import savefile as st
from logmetrics.state.journal import WAL_BYTES, WAL_PAGES, Delta, Journal
from logmetrics.store.store import Store
from logmetrics.store.values import Changes, Key
from tests.helpers import Samples, Server, access_line, append, total

START = "INFO 04-10 03:30:00 [api_server.py:912] vLLM API server version 0.8.5\n"
TRACEBACK_HEAD = ('ERROR:    Exception in ASGI application\nTraceback (most recent call last):\n'
                  '  File "/srv/app/server.py", line 409, in run_asgi\n')
TRACEBACK_TAIL = "    result = await app(scope, receive, send)\nValueError: broken pipe\n"


def lines(n: int, first: int = 0) -> str:
    """``n`` access lines."""
    return "".join(access_line(first + i) for i in range(n))


def write_and_commit(srv: Server, path: Path, text: str) -> Samples:
    """Append ``text`` to ``path`` and wait until its lines are read and a commit followed (nothing
    else changes meanwhile, so that commit holds them); the scrape then."""
    before = total(srv.samples(), "logmetrics_state_commits_total")
    read = total(srv.samples(), "logmetrics_lines_read_total")
    append(path, text)
    n = read + text.count("\n")
    return srv.wait_for(lambda s: total(s, "logmetrics_lines_read_total") >= n
                        and total(s, "logmetrics_state_commits_total") > before)


def vllm_dir(tmp_path: Path, name: str) -> tuple[Path, tuple[str, ...]]:
    """A log directory holding the empty file ``name``, and the arguments of a vllm watch on it with a state file."""
    d = tmp_path / "logs"
    d.mkdir()
    (d / name).write_text("")
    return d, (str(d), "--state-file", str(tmp_path / "state.db"), "--poll-interval", "0.05", "--parser", "vllm")


def kill(srv: Server) -> None:
    """SIGKILL, and wait for the process to be gone."""
    os.kill(srv.proc.pid, signal.SIGKILL)
    srv.proc.wait(timeout=10)


def test_lines_of_a_file_deleted_before_a_kill_are_counted(tmp_path: Path) -> None:
    """Defect 2: write to a file, delete it, SIGKILL at once, restart: its lines were committed as read."""
    d, state = tmp_path / "logs", tmp_path / "state.json"
    d.mkdir()
    (d / "vllm.log").write_text("")
    srv = Server(str(d), "--state-file", str(state), "--poll-interval", "0.05")
    try:
        write_and_commit(srv, d / "vllm.log", lines(50))
        (d / "vllm.log").unlink()
    finally:
        kill(srv)
    srv = Server(str(d), "--state-file", str(state), "--poll-interval", "0.05")
    try:
        got = srv.wait_for(lambda s: total(s, "http_requests_total") >= 50)
        assert total(got, "http_requests_total") == 50
    finally:
        assert srv.stop() == 0


def test_a_file_name_that_is_not_utf8_is_saved_and_resumed(tmp_path: Path) -> None:
    """A log named with a byte that is not UTF-8 does not stop the commits: it goes on after a SIGKILL."""
    d, state = tmp_path / "logs", tmp_path / "state.db"
    d.mkdir()
    bad = os.path.join(os.fsencode(d), b"api-\xff.log")
    with open(bad, "wb") as f:
        f.write(lines(30).encode())
    srv = Server(str(d), "--state-file", str(state), "--poll-interval", "0.05", "--from-beginning", "--parser", "vllm")
    try:
        srv.wait_for(lambda s: total(s, "http_requests_total") >= 30 and total(s, "logmetrics_state_commits_total") > 1)
    finally:
        kill(srv)
    with open(bad, "ab") as f:
        f.write(lines(20, 30).encode())
    srv = Server(str(d), "--state-file", str(state), "--poll-interval", "0.05", "--from-beginning", "--parser", "vllm")
    try:
        got = srv.wait_for(lambda s: total(s, "http_requests_total") >= 50)
        assert total(got, "http_requests_total") == 50
        assert total(got, "logmetrics_state_save_failures_total") == 0
    finally:
        assert srv.stop() == 0


def test_the_current_file_deleted_while_down_is_counted_as_a_file_lost(tmp_path: Path) -> None:
    """x.log read and committed, SIGKILL, x.log replaced by a new file: the restart counts the old one lost."""
    d, args = vllm_dir(tmp_path, "x.log")
    srv = Server(*args)
    try:
        write_and_commit(srv, d / "x.log", lines(20))
    finally:
        kill(srv)
    (d / "x.new").write_text(lines(3, 100))  # made first, so that it cannot get the old file's inode
    os.replace(d / "x.new", d / "x.log")
    srv = Server(*args)
    try:
        got = srv.wait_for(lambda s: total(s, "http_requests_total") >= 23)
        assert total(got, "logmetrics_files_lost_total", source=str(d / "x.log")) == 1
        assert total(got, "http_requests_total") == 23
    finally:
        assert srv.stop() == 0
    assert "x.log was deleted or moved away while logmetrics was down" in "".join(srv.startup)


def test_a_file_deleted_after_it_was_read_is_not_declared_lost_at_the_restart(tmp_path: Path) -> None:
    """Read whole, then deleted while logmetrics runs: the next start says nothing of it, and
    logmetrics_files_lost_total stays 0 (it was not lost)."""
    d, args = vllm_dir(tmp_path, "x.log")
    srv = Server(*args)
    try:
        write_and_commit(srv, d / "x.log", lines(20))
        (d / "x.log").unlink()
        time.sleep(1)  # seen gone, still open for a writer that may lag (stopped before that ends)
    finally:
        assert srv.stop() == 0
    srv = Server(*args)
    try:
        got = srv.samples()
    finally:
        assert srv.stop() == 0
        err = "".join(srv.startup) + (srv.proc.stderr.read().decode() if srv.proc.stderr else "")
    assert total(got, "http_requests_total") == 20
    assert total(got, "logmetrics_files_lost_total") == 0
    assert "deleted or moved away" not in err


def test_a_rotated_file_and_its_successor_both_keep_their_positions_across_a_kill(tmp_path: Path) -> None:
    """A kill while a rotated file is still drained beside its successor: both positions were
    committed (one per file, not per stream), so the successor is not read again from its start."""
    d, state = tmp_path / "logs", tmp_path / "state.db"
    d.mkdir()
    (d / "vllm.log").write_text("")
    args = (str(d), "--state-file", str(state), "--poll-interval", "0.05")
    srv = Server(*args)
    try:
        write_and_commit(srv, d / "vllm.log", lines(100))
    finally:
        kill(srv)
    (d / "vllm.log").rename(d / "vllm.log.1")  # rotated while down
    (d / "vllm.log").write_text(lines(50, 100))
    srv = Server(*args)
    try:  # both files are read on before serving (and committed then); the rotated one stays open
        # (drained) for 5 s more
        srv.wait_for(lambda s: total(s, "http_requests_total") == 150 and total(s, "logmetrics_open_files") == 2
                     and total(s, "logmetrics_state_commits_total") >= 1)
    finally:
        kill(srv)
    append(d / "vllm.log", lines(5, 150))
    srv = Server(*args)
    try:
        got = srv.wait_for(lambda s: total(s, "http_requests_total") >= 155)
        assert total(got, "logmetrics_lines_read_total") == 5  # the new lines only: nothing read again
        assert total(got, "http_requests_total") == 155
    finally:
        assert srv.stop() == 0


def test_a_record_held_back_across_a_kill_counts_once_whole(tmp_path: Path) -> None:
    """A traceback whose first lines were read (and held back, uncounted) when the kill came: after
    the restart its last lines join them and it counts as one error of the right kind."""
    d, state = tmp_path / "logs", tmp_path / "state.json"
    d.mkdir()
    (d / "vllm.log").write_text("")
    srv = Server(str(d), "--state-file", str(state), "--poll-interval", "20")  # holds a record 20 s
    try:
        seen = write_and_commit(srv, d / "vllm.log", lines(2) + TRACEBACK_HEAD)
        assert total(seen, "backend_errors_total") == 0  # held back, not counted yet
    finally:
        kill(srv)
    append(d / "vllm.log", TRACEBACK_TAIL)
    srv = Server(str(d), "--state-file", str(state), "--poll-interval", "0.05")
    try:
        got = srv.wait_for(lambda s: total(s, "backend_errors_total") >= 1 and total(s, "http_requests_total") >= 2)
        assert total(got, "logmetrics_lines_read_total") == 2  # only the tail was read again
        assert total(got, "backend_errors_total") == 1  # one record: counted whole, at once
        assert total(got, "backend_errors_total", error_type="asgi") == 1
        assert total(got, "http_requests_total") == 2
    finally:
        assert srv.stop() == 0


def test_lines_of_a_stream_still_sniffed_survive_a_kill(tmp_path: Path) -> None:
    """Access lines alone do not tell the backend, so a stream holds them; killed then, they are
    counted after the restart once a telling line comes."""
    d, state = tmp_path / "logs", tmp_path / "state.json"
    d.mkdir()
    (d / "app.log").write_text("")
    srv = Server(str(d), "--state-file", str(state), "--poll-interval", "0.05")
    try:
        seen = write_and_commit(srv, d / "app.log", lines(3))
        assert total(seen, "http_requests_total") == 0  # held while the backend is not known
    finally:
        kill(srv)
    append(d / "app.log", START)
    srv = Server(str(d), "--state-file", str(state), "--poll-interval", "0.05")
    try:
        got = srv.wait_for(lambda s: total(s, "http_requests_total") >= 3)
        assert total(got, "http_requests_total", backend="vllm") == 3
        assert total(got, "logmetrics_lines_read_total") == 1
    finally:
        assert srv.stop() == 0


def test_a_stream_still_sniffed_is_counted_after_a_kill_with_no_new_line(tmp_path: Path) -> None:
    """Held access lines restored after a SIGKILL are counted once the sniffing wait ends, though
    nothing more is written, and the wait goes on from where it was, not again from the restart."""
    d, state = tmp_path / "logs", tmp_path / "state.db"
    d.mkdir()
    (d / "app.log").write_text("")
    srv = Server(str(d), "--state-file", str(state), "--poll-interval", "0.05")
    try:
        written = time.monotonic()
        seen = write_and_commit(srv, d / "app.log", lines(3))
        assert total(seen, "http_requests_total") == 0  # held while the backend is not known
        time.sleep(8)  # half of the wait for a telling line
    finally:
        kill(srv)
    srv = Server(str(d), "--state-file", str(state), "--poll-interval", "0.05")
    try:
        got = srv.wait_for(lambda s: total(s, "http_requests_total") >= 3)
        assert total(got, "http_requests_total", backend="api") == 3
        assert time.monotonic() - written < WEAK_HOLD_SECONDS + 5  # not 15 s after the restart
    finally:
        assert srv.stop() == 0


def test_a_restart_under_a_live_writer_commits_and_serves_without_waiting_for_a_quiet_file(tmp_path: Path) -> None:
    """Restarted while a writer goes on, logmetrics reads to where the file stood, commits, and
    serves at once, instead of reading for its whole catch-up time with nothing committed (a crash
    loop then kept the state where it was while logrotate deleted the files it named)."""
    d, args = vllm_dir(tmp_path, "vllm.log")
    stop = threading.Event()

    def write() -> None:  # 500 lines/s, renamed to .1 (and .1 to .2) every 200 lines, as logrotate does
        n = 0
        while not stop.is_set():
            with open(d / "vllm.log", "a", buffering=1) as f:
                for _ in range(200):
                    f.write(access_line(n))
                    n += 1
                    time.sleep(0.002)
                    if stop.is_set():
                        return
            if (d / "vllm.log.1").exists():
                (d / "vllm.log.1").rename(d / "vllm.log.2")
            (d / "vllm.log").rename(d / "vllm.log.1")

    srv = Server(*args)
    writer = threading.Thread(target=write)
    writer.start()
    try:
        try:
            srv.wait_for(lambda s: total(s, "logmetrics_state_commits_total") > 1)
        finally:
            kill(srv)
        started = time.monotonic()
        srv = Server(*args)
        served = time.monotonic() - started
        commits = total(srv.samples(), "logmetrics_state_commits_total")
    finally:
        stop.set()
        writer.join()
        assert srv.stop() == 0
    assert served < CATCH_UP_SECONDS / 2, f"served after {served:.1f} s"
    assert commits >= 1


def delta(at: float, counters: list[tuple[Key, float]], positions: list[Position]) -> Delta:
    """A delta of counters and positions only."""
    return Delta(at, ["/logs"], Changes(counters), positions, {}, set())


def rows(path: Path, table: str) -> int:
    """How many rows ``table`` holds in the database at ``path``."""
    con = sqlite3.connect(path)
    try:
        return int(con.execute(f"SELECT count(*) FROM {table}").fetchone()[0])
    finally:
        con.close()


def test_a_commit_writes_what_changed_and_nothing_when_nothing_did(tmp_path: Path) -> None:
    """Counters given once stay; a position that did not move is not written again; a delta with no
    change writes nothing; what is read back passes the state check whole."""
    path = tmp_path / "state.db"
    j = Journal(str(path))
    a, b = Position("/logs/a", "/logs/a", 1, 2, b"h", 10), Position("/logs/b", "/logs/b", 1, 3, b"g", 5)
    ka, kb = ("llm_embeddings_total", ("x", "/logs/a", "m")), ("llm_embeddings_total", ("x", "/logs/b", "m"))
    assert j.commit(delta(1.0, [(ka, 1.0)], [a, b]))
    assert j.commit(delta(2.0, [(kb, 2.0)], [a, b]))
    assert j.commit(delta(3.0, [(ka, 5.0)], [a, b]))  # an update of a series committed before
    assert not j.commit(delta(4.0, [], [a, b]))
    assert j.commit(delta(5.0, [], [a]))  # b is no longer followed
    j.close()
    assert rows(path, "counters") == 2 and rows(path, "positions") == 1
    back = st.load(str(path), ["/logs"])
    assert back is not None and back.saved_at == 5.0 and back.positions == [a]
    assert back.store["counters"] == [["llm_embeddings_total", ["x", "/logs/a", "m"], 5.0],
                                      ["llm_embeddings_total", ["x", "/logs/b", "m"], 2.0]]


def test_gauges_are_committed_updated_and_dropped_with_their_source(tmp_path: Path) -> None:
    """A gauge set, changed, then forgotten with its source is committed each time; what is read back holds it."""
    path = tmp_path / "state.db"
    j = Journal(str(path))
    store = Store()
    store.apply([Event("backend_ready", ("m",), 1), Event("llm_requests_running", ("m",), 4)], "vllm", "/logs/a")
    store.apply([Event("backend_ready", ("m",), 1)], "vllm", "/logs/b")
    assert j.commit(Delta(1.0, ["/logs"], store.changes(), [], {}, set()))
    store.apply([Event("llm_requests_running", ("m",), 2)], "vllm", "/logs/a")
    assert store.drop_gauges("/logs/b") == 1
    assert j.commit(Delta(2.0, ["/logs"], store.changes(), [], {}, set()))
    assert not j.commit(Delta(3.0, ["/logs"], store.changes(), [], {}, set()))
    j.close()
    assert rows(path, "gauges") == 2
    back = st.load(str(path), ["/logs"])
    assert back is not None
    assert sorted(back.store["gauges"]) == [["backend_ready", ["vllm", "/logs/a", "m"], 1.0],
                                            ["llm_requests_running", ["vllm", "/logs/a", "m"], 2.0]]


def test_an_expired_source_leaves_the_state_file_whole(tmp_path: Path) -> None:
    """A source's counters, histograms and gauges forgotten at its expiry are deleted from the
    state too: a restart does not bring them back; the other source's series stay."""
    path = tmp_path / "state.db"
    j = Journal(str(path))
    store = Store()
    for source in ("/logs/a", "/logs/b"):
        store.apply([Event("llm_prompt_tokens_total", ("m",), 5), Event("backend_ready", ("m",), 1),
                     Event("llm_request_duration_seconds", ("m",), 0.5)], "vllm", source)
    assert j.commit(Delta(1.0, ["/logs"], store.changes(), [], {}, set()))
    assert store.expire(["/logs/b"]) == 3
    assert j.commit(Delta(2.0, ["/logs"], store.changes(), [], {}, set()))
    j.close()
    back = st.load(str(path), ["/logs"])
    assert back is not None
    labels = [row[1] for kind in ("counters", "gauges", "histograms") for row in back.store[kind]]
    assert labels == [["vllm", "/logs/a", "m"]] * 3
    assert rows(path, "counters") == rows(path, "gauges") == rows(path, "histograms") == 1


def test_readiness_survives_a_kill_before_any_new_line(tmp_path: Path) -> None:
    """backend_ready is back at once after a SIGKILL and restart, with no line written since."""
    d, args = vllm_dir(tmp_path, "vllm.log")
    srv = Server(*args)
    try:
        append(d / "vllm.log", START + "INFO:     Application startup complete.\n")
        srv.wait_for(lambda s: total(s, "backend_ready") == 1)  # (the last line is held a moment: it may go on)
        write_and_commit(srv, d / "vllm.log", lines(1))  # a commit after the one that holds it
    finally:
        kill(srv)
    srv = Server(*args)
    try:
        assert total(srv.samples(), "backend_ready") == 1
    finally:
        assert srv.stop() == 0


def test_a_json_state_file_is_taken_over_and_kept_beside(tmp_path: Path) -> None:
    """The first commit on a JSON state file replaces it with the database and keeps it as PATH.v1."""
    path = tmp_path / "state.json"
    pos = Position("/logs/a", "/logs/a", 1, 2, b"h", 10)
    st.save(str(path), st.State(5.0, {"counters": [["llm_embeddings_total", ["x", "/logs/a", "m"], 7.0]]},
                                [pos], [], ["/logs"]))
    old = path.read_bytes()
    loaded = st.load(str(path), ["/logs"])
    assert loaded is not None
    store = Store()
    store.load(loaded.store)
    j = Journal(str(path))
    assert j.needs_full
    j.commit(Delta(6.0, ["/logs"], store.changes(everything=True), loaded.positions, {}, set()))
    j.close()
    assert (tmp_path / "state.json.v1").read_bytes() == old and json.loads(old)["version"] == 1
    back = st.load(str(path), ["/logs"])
    assert back is not None and back.positions == [pos] and back.store["counters"][0][2] == 7.0


def test_a_database_set_aside_takes_its_log_along(tmp_path: Path) -> None:
    """An unusable state database is refused with a reason, and set aside with its -wal file, which
    would otherwise be read into the next database at that path."""
    path = tmp_path / "state.db"
    path.write_bytes(b"SQLite format 3\x00" + b"\x00" * 100)
    try:
        st.load(str(path))
    except st.StateError as exc:
        assert "not a readable state database" in str(exc) and exc.kept is not None
    else:
        raise AssertionError("a damaged database was loaded")
    (tmp_path / "state.db-wal").write_bytes(b"junk")
    aside = st.set_aside(str(path))
    assert aside is not None and not path.exists() and not (tmp_path / "state.db-wal").exists()
    assert Path(aside + "-wal").read_bytes() == b"junk"


def test_held_text_goes_into_the_stream_states_and_back() -> None:
    """A record held back and a sniffed stream's lines are in ``stream_states``; an engine given them
    counts the record once, whole, with its rest, and routes the held lines once a telling line comes."""
    first = Engine(discover(), Store(), hold=60.0)
    first.feed(Chunk("/logs/vllm.log", (lines(1) + TRACEBACK_HEAD).encode(), 1.0))
    first.feed(Chunk("/logs/app.log", lines(2).encode(), 1.0))
    states = {str(s["key"]): s for s in first.stream_states()}
    assert states["/logs/vllm.log"]["held"] == TRACEBACK_HEAD
    assert states["/logs/app.log"]["parser"] == "" and states["/logs/app.log"]["held"] == lines(2)
    store = Store()
    second = Engine(discover(), store, hold=60.0)
    second.restore_streams(list(states.values()))
    second.feed(Chunk("/logs/vllm.log", TRACEBACK_TAIL.encode(), 2.0))
    second.feed(Chunk("/logs/app.log", START.encode(), 2.0))
    second.idle(force=True)
    errors = {k: v for k, v in store.counters.items() if k[0] == "backend_errors_total"}
    assert list(errors.values()) == [1.0] and next(iter(errors))[1][3] == "asgi"
    requests = sum(v for k, v in store.counters.items() if k[0] == "http_requests_total" and k[1][1] == "/logs/app.log")
    assert requests == 2


def test_what_was_written_while_down_is_served_whole_at_the_first_scrape(tmp_path: Path) -> None:
    """Lines written to 40 files while logmetrics was down are all counted at the first scrape after the
    restart, none held back: a scrape lower than the last before the stop would read as a counter reset."""
    d, args = vllm_dir(tmp_path, "f0.log")
    paths = [d / f"f{i}.log" for i in range(40)]
    srv = Server(*args)
    try:
        for i, path in enumerate(paths):
            append(path, lines(5, 100 * i))
        srv.wait_for(lambda s: total(s, "http_requests_total") == 200)
    finally:
        assert srv.stop() == 0
    for i, path in enumerate(paths):
        append(path, lines(25, 100 * i + 5))
    srv = Server(*args)
    try:
        assert total(srv.samples(), "http_requests_total") == 200 + 40 * 25
    finally:
        assert srv.stop() == 0


def test_the_write_ahead_log_stays_small_over_many_commits(tmp_path: Path) -> None:
    """40,000 series committed whole, then changed round after round: the -wal file beside the
    database is cut back after each copy into it, not left at the size of its largest round."""
    path = tmp_path / "state.db"
    j = Journal(str(path))
    keys = [("llm_embeddings_total", ("x", f"/logs/{i}", "m")) for i in range(40_000)]
    after: list[int] = []
    for n in range(1, 41):
        changed = keys if n == 1 else keys[(n * 1000) % 40_000:][:1000]
        assert j.commit(delta(float(n), [(k, float(n)) for k in changed], []))
        after.append(os.path.getsize(f"{path}-wal"))
    j.close()
    assert os.path.getsize(path) > 2 * WAL_BYTES  # the first, full commit alone is larger than the limit
    assert max(after[1:]) <= WAL_BYTES + 2 * WAL_PAGES * 4096  # the limit, and a round past it at most
