"""--state-file: counters, read positions and the model survive a restart; nothing lost or doubled."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from logmetrics.sources.chunks import Position
from logmetrics.state import savefile as st
from tests.helpers import Server, access_line, append, total

START = ("INFO 04-10 03:30:00 [api_server.py:912] vLLM API server version 0.8.5\n"
         "INFO 04-10 03:30:00 [api_server.py:913] args: Namespace(model='org/base', "
         "served_model_name=['chat-model'], port=8000)\n")
STATS = ("INFO 04-10 03:35:27 [loggers.py:80] Engine 000: Avg prompt throughput: 12.5 tokens/s, Avg generation "
         "throughput: 40.1 tokens/s, Running: 3 reqs, Waiting: 1 reqs, GPU KV cache usage: 4.2%, Prefix cache "
         "hit rate: 0.0%\n")


def lines(n: int, first: int = 0) -> str:
    """``n`` access lines."""
    return "".join(access_line(first + i) for i in range(n))


def first_run(d: Path, state: Path, text: str, want: float) -> None:
    """Start on ``d`` (an empty vllm.log) with the state file, append ``text``, wait for ``want``
    requests, stop."""
    d.mkdir()
    (d / "vllm.log").write_text("")
    srv = Server(str(d), "--state-file", str(state), "--poll-interval", "0.05")
    try:
        append(d / "vllm.log", text)
        srv.wait_for(lambda s: total(s, "http_requests_total") == want)
    finally:
        assert srv.stop() == 0


def run_until(d: Path, state: Path, want: float) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    """Start on ``d`` with the state file, wait for ``want`` requests, stop; the last scrape."""
    srv = Server(str(d), "--state-file", str(state), "--poll-interval", "0.05")
    try:
        got = srv.wait_for(lambda s: total(s, "http_requests_total") >= want)
    finally:
        assert srv.stop() == 0
    return got


def test_counters_go_on_and_lines_written_while_down_count(tmp_path: Path) -> None:
    """A restart continues the counters and reads what was appended while it was down, once."""
    d, state = tmp_path / "logs", tmp_path / "state.json"
    first_run(d, state, lines(10), 10)
    assert st.read(str(state))["positions"][0]["offset"] == (d / "vllm.log").stat().st_size
    append(d / "vllm.log", lines(5))
    got = run_until(d, state, 15)
    assert total(got, "http_requests_total") == 15


def test_rename_rotation_while_down(tmp_path: Path) -> None:
    """Lines appended, then the file rotated by rename and a new one written, all while down."""
    d, state = tmp_path / "logs", tmp_path / "state.json"
    d.mkdir()
    (d / "vllm.log").write_text(lines(10))
    run_until(d, state, 0)  # starts at the end: nothing counted, position saved
    append(d / "vllm.log", lines(3))
    (d / "vllm.log").rename(d / "vllm.log.1")
    append(d / "vllm.log", lines(4))
    got = run_until(d, state, 7)
    assert total(got, "http_requests_total") == 7


def test_copytruncate_while_down(tmp_path: Path) -> None:
    """logrotate's copytruncate while down: the copy's unread tail and the new lines count once."""
    d, state = tmp_path / "logs", tmp_path / "state.json"
    first_run(d, state, lines(10), 10)
    append(d / "vllm.log", lines(3))
    shutil.copyfile(d / "vllm.log", d / "vllm.log.1")
    with open(d / "vllm.log", "r+") as f:
        f.truncate(0)
    append(d / "vllm.log", lines(2))
    got = run_until(d, state, 15)
    assert total(got, "http_requests_total") == 15


def test_copy_kept_beside_its_file_while_down_is_not_read_again(tmp_path: Path) -> None:
    """A copy made while down of a file that is not truncated (logrotate's copy, a cp) is not read:
    the file it copies is read on from its saved position, and that holds every line of it."""
    d, state = tmp_path / "logs", tmp_path / "state.json"
    first_run(d, state, lines(10), 10)
    append(d / "vllm.log", lines(3))
    shutil.copyfile(d / "vllm.log", d / "vllm.log.1")
    append(d / "vllm.log", lines(2))
    got = run_until(d, state, 15)
    assert total(got, "http_requests_total") == 15


def test_model_label_survives_a_restart(tmp_path: Path) -> None:
    """The model learned from start-up lines before a restart labels the stats read after it."""
    d, state = tmp_path / "logs", tmp_path / "state.json"
    first_run(d, state, START + lines(1), 1)
    append(d / "vllm.log", STATS + lines(1))
    got = run_until(d, state, 2)
    assert total(got, "llm_requests_running", model="chat-model") == 3
    assert total(got, "backend_restarts_total") == 1


def test_readiness_survives_a_restart(tmp_path: Path) -> None:
    """A server that said it was ready before a restart is shown ready again with the next lines read."""
    d, state = tmp_path / "logs", tmp_path / "state.json"
    first_run(d, state, START + "INFO:     Application startup complete.\n" + lines(1), 1)
    append(d / "vllm.log", lines(1))
    got = run_until(d, state, 2)
    assert total(got, "backend_ready", model="chat-model") == 1


def test_a_corrupt_state_file_is_set_aside(tmp_path: Path) -> None:
    """An unusable state file is reported, kept aside, and the run starts afresh."""
    d, state = tmp_path / "logs", tmp_path / "state.json"
    d.mkdir()
    (d / "vllm.log").write_text("")
    state.write_text("{not json")
    srv = Server(str(d), "--state-file", str(state), "--poll-interval", "0.05")
    try:
        append(d / "vllm.log", lines(2))
        srv.wait_for(lambda s: total(s, "http_requests_total") == 2)
    finally:
        assert srv.stop() == 0
    (aside,) = tmp_path.glob("state.json.bad-*")
    assert aside.read_text() == "{not json"
    assert st.read(str(state))["version"] == 1
    assert any("cannot be used whole (neither a state database nor JSON" in line for line in srv.startup)


def test_state_file_round_trip_and_errors(tmp_path: Path) -> None:
    """save/load keep positions (with binary heads) exactly; a wrong version or shape is a StateError."""
    path = str(tmp_path / "s.json")
    assert st.load(path) is None
    pos = Position("a.log", "a.log.1", 1, 2, b"\x00\xffhead", 42)
    st.save(path, st.State(5.0, {"counters": []}, [pos], [{"key": "a.log", "parser": "vllm", "state": {}}]))
    back = st.load(path)
    assert back is not None and back.positions == [pos] and back.saved_at == 5.0
    data = json.loads(Path(path).read_text())
    for broken in ({**data, "version": 99}, {k: v for k, v in data.items() if k != "positions"}, [1]):
        Path(path).write_text(json.dumps(broken))
        with pytest.raises(st.StateError):
            st.load(path)


def test_state_file_and_oneshot_do_not_mix(tmp_path: Path) -> None:
    """--state-file with --oneshot is refused with one line and exit code 2."""
    out = subprocess.run([sys.executable, "-m", "logmetrics", "watch", "--oneshot", "--state-file",
                          str(tmp_path / "s.json"), str(tmp_path)], capture_output=True, text=True, timeout=60)
    assert out.returncode == 2
    assert out.stderr.count("\n") == 1 and "--state-file" in out.stderr


def test_from_beginning_does_not_read_a_rotated_file_again_after_a_restart(tmp_path: Path) -> None:
    """--from-beginning with a state: a rotated file read to its end and let go before the save is
    not read again at the next start (it is for a first start only)."""
    d, state = tmp_path / "logs", tmp_path / "state.json"
    d.mkdir()
    (d / "vllm.log").write_text(lines(10))
    args = (str(d), "--state-file", str(state), "--poll-interval", "0.05", "--from-beginning")
    srv = Server(*args)
    try:
        srv.wait_for(lambda s: total(s, "http_requests_total") == 10)
        (d / "vllm.log").rename(d / "vllm.log.1")
        (d / "vllm.log").write_text(lines(5, 10))
        # the rotated file is let go once its writer is surely done with it (a few seconds)
        srv.wait_for(lambda s: total(s, "http_requests_total") == 15 and total(s, "logmetrics_open_files") == 1)
    finally:
        assert srv.stop() == 0
    append(d / "vllm.log", lines(2, 15))
    srv = Server(*args)
    try:
        got = srv.wait_for(lambda s: total(s, "http_requests_total") >= 17)
        assert total(got, "logmetrics_lines_read_total") == 2  # only the new lines: nothing again
    finally:
        assert srv.stop() == 0
    assert total(got, "http_requests_total") == 17
