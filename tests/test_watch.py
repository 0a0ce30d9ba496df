"""'logmetrics watch DIR' end to end: appends, rotation, copytruncate and new files, each line once."""

from __future__ import annotations

import select
import shutil
import signal
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.helpers import Samples, Server, access_line, append, total


@pytest.fixture
def server(tmp_path: Path) -> Iterator[tuple[Server, Path]]:
    """A server watching an empty directory that holds an empty vllm.log."""
    (tmp_path / "vllm.log").write_text("")
    srv = Server(str(tmp_path), "--poll-interval", "0.1")
    try:
        yield srv, tmp_path
    finally:
        assert srv.stop() == 0


def requests(srv: Server) -> float:
    """http_requests_total summed over every series."""
    return total(srv.samples(), "http_requests_total")


def settle(srv: Server, d: Path, polls: int = 3) -> None:
    """Let the engine finish several more polls, each proven by a line of another file being read."""
    barrier = d / "barrier" / "vllm-barrier.log"
    barrier.parent.mkdir(exist_ok=True)
    for _ in range(polls):
        append(barrier, "barrier\n")
        wait_lines_read(srv, barrier, barrier.read_text().count("\n"))


def wait_lines_read(srv: Server, path: Path, n: int) -> None:
    """Block until the engine reports ``n`` lines read from ``path``."""
    srv.wait_for(lambda s: total(s, "logmetrics_lines_read_total", source=str(path)) == n)


def test_appended_lines_show_within_a_second(server: tuple[Server, Path]) -> None:
    """Lines appended to DIR/vllm.log are on /metrics within a second."""
    srv, d = server
    start = time.monotonic()
    append(d / "vllm.log", "".join(access_line(i) for i in range(5)))
    srv.wait_for(lambda s: total(s, "http_requests_total") == 5, timeout=5)
    assert time.monotonic() - start < 1.0
    got = srv.samples()
    assert total(got, "http_requests_total", backend="vllm", route="/v1/chat/completions", code="200") == 5


def test_rename_rotation_counts_every_line_once(server: tuple[Server, Path]) -> None:
    """mv vllm.log vllm.log.1 plus a new vllm.log: every line counted exactly once."""
    srv, d = server
    append(d / "vllm.log", "".join(access_line(i) for i in range(10)))
    srv.wait_for(lambda s: total(s, "http_requests_total") == 10)
    append(d / "vllm.log", "".join(access_line(i) for i in range(7)))  # not yet read, maybe
    (d / "vllm.log").rename(d / "vllm.log.1")
    append(d / "vllm.log", "".join(access_line(i) for i in range(4)))
    got = srv.wait_for(lambda s: total(s, "http_requests_total") >= 21)
    assert total(got, "logmetrics_rotations_total") >= 1
    settle(srv, d)
    assert requests(srv) == 21


def test_copytruncate_counts_every_line_once(server: tuple[Server, Path]) -> None:
    """cp vllm.log vllm.log.1 and truncating vllm.log: every line counted exactly once."""
    srv, d = server
    append(d / "vllm.log", "".join(access_line(i) for i in range(10)))
    srv.wait_for(lambda s: total(s, "http_requests_total") == 10)
    append(d / "vllm.log", "".join(access_line(i) for i in range(3)))
    shutil.copyfile(d / "vllm.log", d / "vllm.log.1")
    with open(d / "vllm.log", "r+") as f:
        f.truncate(0)
    append(d / "vllm.log", "".join(access_line(i) for i in range(6)))
    srv.wait_for(lambda s: total(s, "http_requests_total") >= 19)
    settle(srv, d)
    assert requests(srv) == 19


def test_file_created_later_in_a_subdirectory(server: tuple[Server, Path]) -> None:
    """A file that appears later in a new subdirectory is read from its beginning."""
    srv, d = server
    (d / "node-2").mkdir()
    append(d / "node-2" / "vllm-b.log", "".join(access_line(i) for i in range(3)))
    got = srv.wait_for(lambda s: total(s, "http_requests_total") == 3)
    assert total(got, "http_requests_total", source=str(d / "node-2" / "vllm-b.log")) == 3


def test_healthz_and_openmetrics(server: tuple[Server, Path]) -> None:
    """/healthz answers 200; OpenMetrics is served when asked for."""
    srv, _ = server
    assert srv.get("/healthz")[0] == 200
    status, ctype, body = srv.get("/metrics", accept="application/openmetrics-text; version=1.0.0")
    assert status == 200 and ctype.startswith("application/openmetrics-text") and body.endswith("# EOF\n")


def test_stdin_is_served_after_its_end() -> None:
    """'... | logmetrics watch - --parser vllm --source vllm-0': lines counted, values kept after EOF."""
    srv = Server("-", "--parser", "vllm", "--source", "vllm-0", stdin=subprocess.PIPE)
    try:
        assert srv.proc.stdin is not None
        srv.proc.stdin.write("".join(access_line(i) for i in range(3)).encode())
        srv.proc.stdin.flush()
        srv.wait_for(lambda s: total(s, "http_requests_total", source="vllm-0") == 3)
        srv.proc.stdin.write(access_line(3, code="500 Internal Server Error").rstrip("\n").encode())  # no newline
        srv.proc.stdin.close()
        got = srv.wait_for(lambda s: total(s, "http_requests_total", source="vllm-0") == 4)
        assert total(got, "http_requests_total", code="500") == 1
        assert srv.proc.poll() is None  # still serving the final values
        assert total(srv.samples(), "http_requests_total") == 4
    finally:
        assert srv.stop() == 0


@pytest.mark.parametrize("signum", ["SIGTERM", "SIGINT"])
def test_stop_while_stdin_is_still_open_exits_0(signum: str) -> None:
    """A signal to 'watch - --listen' whose pipe is still open stops it cleanly (exit 0), not
    with the interpreter's abort on the stdin reader's lock."""
    srv = Server("-", "--parser", "vllm", stdin=subprocess.PIPE)
    try:
        assert srv.proc.stdin is not None and srv.proc.stderr is not None
        srv.proc.stdin.write(access_line(1).encode())
        srv.proc.stdin.flush()
        srv.wait_for(lambda s: total(s, "http_requests_total") == 1)
        srv.proc.send_signal(getattr(signal, signum))
        assert srv.proc.wait(timeout=10) == 0
        assert b"Fatal Python error" not in srv.proc.stderr.read()
    finally:
        srv.stop()
        if srv.proc.stdin is not None:
            srv.proc.stdin.close()


def test_gauges_of_a_deleted_log_expire_and_counters_stay(tmp_path: Path) -> None:
    """A log deleted for good (a pod gone) drops its gauges; its counters stay."""
    stats = ("INFO 04-10 03:35:27 [loggers.py:80] Engine 000: Avg prompt throughput: 12.5 tokens/s, Avg generation "
             "throughput: 40.1 tokens/s, Running: 3 reqs, Waiting: 1 reqs, GPU KV cache usage: 4.2%, Prefix cache "
             "hit rate: 0.0%\n")
    (tmp_path / "vllm-a.log").write_text("")
    (tmp_path / "vllm-b.log").write_text("")
    srv = Server(str(tmp_path), "--poll-interval", "0.05")
    try:
        append(tmp_path / "vllm-a.log", stats + access_line(1))
        append(tmp_path / "vllm-b.log", stats)
        srv.wait_for(lambda s: total(s, "llm_requests_running") == 6)
        (tmp_path / "vllm-a.log").unlink()
        got = srv.wait_for(lambda s: total(s, "llm_requests_running") == 3, timeout=20)
        assert total(got, "llm_requests_running", source=str(tmp_path / "vllm-b.log")) == 3
        assert total(got, "http_requests_total", source=str(tmp_path / "vllm-a.log")) == 1
    finally:
        assert srv.stop() == 0


def test_copytruncate_with_the_writer_going_on_at_once(tmp_path: Path) -> None:
    """A line, cp, truncate and new lines within one poll, on 20 files: every line once, the copies never whole."""
    logs = [tmp_path / f"app{i}-vllm.log" for i in range(20)]
    for i, log in enumerate(logs):
        log.write_text(access_line(i, "/start"))  # there at start: read from its end, never counted
    srv = Server(str(tmp_path), "--poll-interval", "0.05")
    try:
        srv.wait_for(lambda s: total(s, "logmetrics_open_files") == 20)
        for i, log in enumerate(logs):
            append(log, access_line(i, "/before-cp"))
            shutil.copyfile(log, log.with_name(log.name + ".1"))
            with open(log, "r+") as f:
                f.truncate(0)
            append(log, "".join(access_line(i, "/after-cp") for _ in range(5)))
            time.sleep(0.02)  # a writer's pace: the next file's turn comes a poll or so later
        srv.wait_for(lambda s: total(s, "http_requests_total", route="/after-cp") >= 100)
        settle(srv, tmp_path)
        got = srv.samples()
        counts = {r: total(got, "http_requests_total", route=r) for r in ("/start", "/before-cp", "/after-cp")}
        assert counts == {"/start": 0, "/before-cp": 20, "/after-cp": 100}
        assert total(got, "logmetrics_truncations_total") == 20
    finally:
        assert srv.stop() == 0


def series(got: Samples, name: str, backend: str) -> list[float]:
    """The values of ``name``'s series for ``backend``."""
    return [v for (n, labels), v in got.items() if n == name and ("backend", backend) in labels]


def test_process_rule_serves_cpu_and_memory_until_the_process_exits(tmp_path: Path) -> None:
    """--process BACKEND=PATTERN: a matching process's CPU and memory are served under the first rule that
    matches (never logmetrics itself, whose own command line holds the pattern); once it exits its memory
    series goes and its CPU counter stays."""
    marker = f"logmetrics-test-sleeper-{uuid.uuid4().hex}"
    sleeper = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)", marker])
    try:
        srv = Server(str(tmp_path), "--process", f"sleeper={marker}$", "--process", f"second=sleeper-{marker[-32:]}")
        try:
            mem = "backend_process_resident_memory_bytes"
            cpu = "backend_process_cpu_seconds_total"
            got = srv.wait_for(lambda s: series(s, mem, "sleeper") != [], timeout=20)
            assert series(got, mem, "sleeper")[0] > 1_000_000
            assert len(series(got, cpu, "sleeper")) == 1
            assert series(got, mem, "second") == [] and series(got, cpu, "second") == []
            sleeper.kill()
            sleeper.wait(timeout=10)
            got = srv.wait_for(lambda s: series(s, mem, "sleeper") == [], timeout=20)
            assert len(series(got, cpu, "sleeper")) == 1  # a counter never goes away
        finally:
            assert srv.stop() == 0
    finally:
        if sleeper.poll() is None:
            sleeper.kill()
            sleeper.wait(timeout=10)


@pytest.mark.skipif(sys.platform != "linux", reason="inotify is Linux's")
def test_the_last_line_counts_soon_with_a_long_poll_interval(tmp_path: Path) -> None:
    """With inotify naming every change, a file's last line (held back in case more of its record
    comes) counts a moment after it was written, not a --poll-interval (20 s here) later."""
    log = tmp_path / "vllm.log"
    log.write_text("")
    srv = Server(str(tmp_path), "--poll-interval", "20", "--rescan-interval", "20", "--parser", "vllm")
    try:
        srv.wait_for(lambda s: total(s, "logmetrics_open_files") == 1)
        time.sleep(0.5)  # the first passes are over: what comes now wakes the loop by its event alone
        start = time.monotonic()
        append(log, access_line(1))
        srv.wait_for(lambda s: total(s, "http_requests_total") == 1, timeout=15.0)
        assert time.monotonic() - start < 10.0
    finally:
        assert srv.stop() == 0


def test_a_log_no_parser_knows_is_said_within_seconds(tmp_path: Path) -> None:
    """Seven lines no parser recognises: within seconds the gauge of unrecognised streams is 1 and
    -v says so once, naming the file; a telling line later routes it and the gauge goes back to 0."""
    log = tmp_path / "mystery.log"
    log.write_text("".join(f"step {i} of the batch job done\n" for i in range(7)))
    server = Server("--from-beginning", str(tmp_path), global_args=["-v"])
    err = server.proc.stderr
    assert err is not None
    said: list[str] = []
    try:
        started = time.monotonic()
        server.wait_for(lambda s: total(s, "logmetrics_streams_unrecognised") == 1, timeout=15)
        while not said and time.monotonic() - started < 10:
            if select.select([err], [], [], 0.2)[0]:
                said += [line for line in err.readline().decode().splitlines() if "no parser recognises" in line]
        assert said, "nothing said within 10 s"
        append(log, "INFO 04-10 03:35:27 [api_server.py:1] vLLM API server version 0.10.0\n" + access_line(1))
        server.wait_for(lambda s: total(s, "logmetrics_streams_unrecognised") == 0
                        and total(s, "http_requests_total", backend="vllm") == 1)
    finally:
        server.stop()
    said += [line for line in err.read().decode().splitlines() if "no parser recognises" in line]
    assert len(said) == 1 and "mystery.log" in said[0] and "first 7 lines" in said[0], said
