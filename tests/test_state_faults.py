"""--state-file under faults: a kill before the first periodic save, a malformed or foreign state,
a second process, a failed save. Each runs real processes on real files."""

from __future__ import annotations

import json
import os
import resource
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from logmetrics.state import savefile as st
from tests.helpers import Server, access_line, append, total

ARGS = ("--poll-interval", "0.05")


def lines(n: int, first: int = 0) -> str:
    """``n`` access lines."""
    return "".join(access_line(first + i) for i in range(n))


def requests(srv: Server, want: float) -> float:
    """Wait until at least ``want`` requests are counted; the count then."""
    return total(srv.wait_for(lambda s: total(s, "http_requests_total") >= want), "http_requests_total")


def stderr_of(srv: Server) -> str:
    """Everything the (stopped) server printed on stderr."""
    assert srv.proc.stderr is not None
    return "".join(srv.startup) + srv.proc.stderr.read().decode()


def counted_run(d: Path, state: Path, text: str, want: float, *extra: str) -> Server:
    """Start on ``d`` with the state file, append ``text`` to vllm.log, wait for ``want`` requests, stop
    with SIGTERM (exit code 0 asserted)."""
    srv = Server(str(d), "--state-file", str(state), *ARGS, *extra)
    try:
        append(d / "vllm.log", text)
        assert requests(srv, want) == want
    finally:
        assert srv.stop() == 0
    return srv


def test_a_kill_before_the_first_periodic_save_loses_nothing(tmp_path: Path) -> None:
    """The first commit happens at start: 1,000 lines, SIGKILL, 100 more, restart: 1,100 counted."""
    d, state = tmp_path / "logs", tmp_path / "state.json"
    d.mkdir()
    (d / "vllm.log").write_text("")
    srv = Server(str(d), "--state-file", str(state), *ARGS)
    try:
        append(d / "vllm.log", lines(1000))
        assert requests(srv, 1000) == 1000
    finally:
        os.kill(srv.proc.pid, signal.SIGKILL)
        srv.proc.wait(timeout=10)
    append(d / "vllm.log", lines(100, 1000))
    srv = Server(str(d), "--state-file", str(state), *ARGS)
    try:
        got = srv.wait_for(lambda s: total(s, "http_requests_total") >= 1100)
        assert total(got, "http_requests_total") == 1100
        assert total(got, "logmetrics_lines_read_total") == 100  # the 1,000 were committed as they were read
    finally:
        assert srv.stop() == 0


def test_the_malformed_state_of_the_issue_starts_with_one_line_and_no_traceback(tmp_path: Path) -> None:
    """A store whose counter row is a bare number: set aside with a one-line reason, no traceback."""
    d, state = tmp_path / "logs", tmp_path / "state.json"
    d.mkdir()
    (d / "vllm.log").write_text("")
    bad = '{"version":1,"saved_at":0,"store":{"counters":[5]},"positions":[],"streams":[]}'
    state.write_text(bad)
    srv = counted_run(d, state, lines(3), 3)
    err = stderr_of(srv)
    assert "Traceback" not in err
    reasons = [line for line in err.splitlines() if "cannot be used whole" in line]
    assert len(reasons) == 1 and "counter 0" in reasons[0] and "set aside as" in reasons[0]
    (aside,) = tmp_path.glob("state.json.bad-*")
    assert aside.read_text() == bad
    assert st.read(str(state))["inputs"] == [str(d)]


def test_a_damaged_store_keeps_the_valid_positions(tmp_path: Path) -> None:
    """Positions that are still valid are resumed: the lines written while down count, no more."""
    d, state = tmp_path / "logs", tmp_path / "state.json"
    d.mkdir()
    (d / "vllm.log").write_text("")
    counted_run(d, state, lines(10), 10)
    append(d / "vllm.log", lines(5, 10))  # written while down
    data = st.read(str(state))
    data["store"]["counters"] = [5]
    state.write_text(json.dumps(data))  # (the older JSON form, which is still read)
    srv = Server(str(d), "--state-file", str(state), *ARGS)
    try:
        got = srv.wait_for(lambda s: total(s, "http_requests_total") >= 5)
        assert total(got, "http_requests_total") == 5  # counters start again from 0 (a reset), none skipped
        assert total(got, "logmetrics_lines_read_total") == 5
    finally:
        assert srv.stop() == 0
    assert "1 read position kept" in stderr_of(srv)


def test_series_a_state_holds_that_fit_no_family_are_left_out_with_a_warning(tmp_path: Path) -> None:
    """A state row of a family no parser serves, or with labels that do not fit its family, is left
    out, and stderr says how many; the other series go on."""
    d, state = tmp_path / "logs", tmp_path / "state.json"
    d.mkdir()
    (d / "vllm.log").write_text("")
    counted_run(d, state, lines(10), 10)
    data = st.read(str(state))
    data["store"]["counters"] += [["no_such_family_total", ["vllm", str(d / "vllm.log")], 3.0],
                                  ["http_requests_total", ["too", "few"], 4.0]]
    state.write_text(json.dumps(data))  # (the older JSON form, which is still read)
    srv = Server(str(d), "--state-file", str(state), *ARGS)
    try:
        append(d / "vllm.log", lines(1, 10))
        assert requests(srv, 11) == 11
    finally:
        assert srv.stop() == 0
    err = stderr_of(srv)
    assert "2 of its" in err and "series left out" in err


def test_an_unreadable_state_reads_the_files_changed_since_it_was_written(tmp_path: Path) -> None:
    """With nothing of the state usable, a file written while down is read from its start, not its end."""
    d, state = tmp_path / "logs", tmp_path / "state.json"
    d.mkdir()
    (d / "vllm.log").write_text("")
    counted_run(d, state, lines(10), 10)
    saved = state.stat().st_mtime
    append(d / "vllm.log", lines(5, 10))  # written while down
    later = time.time() + 1
    os.utime(d / "vllm.log", (later, later))  # after the save, whatever the file system's time grain
    state.write_text("{not json")
    os.utime(state, (saved, saved))  # as if damaged when it was last written
    srv = Server(str(d), "--state-file", str(state), *ARGS)
    try:
        got = srv.wait_for(lambda s: total(s, "http_requests_total") >= 15)
        assert total(got, "http_requests_total") == 15  # the 5 written while down are not skipped
        assert total(got, "logmetrics_lines_read_total") == 15
    finally:
        assert srv.stop() == 0
    assert "are read from their start" in stderr_of(srv)


def test_a_state_damaged_long_after_its_last_commit_still_reads_what_was_written_while_down(tmp_path: Path) -> None:
    """Overwritten seconds after the last commit (its mtime then later than the lines written while
    down), an unusable state still reads those lines: files changed since the last start are read whole."""
    d, state = tmp_path / "logs", tmp_path / "state.db"
    d.mkdir()
    (d / "vllm.log").write_text("")
    counted_run(d, state, lines(10), 10)
    append(d / "vllm.log", lines(5, 10))  # written while down
    time.sleep(2.5)  # past the margin within which a file written just before a start is read whole anyway
    state.write_bytes(b"garbage" * 2000)  # damaged later than the lines were written
    srv = Server(str(d), "--state-file", str(state), *ARGS)
    try:
        got = srv.wait_for(lambda s: total(s, "http_requests_total") >= 15)
        assert total(got, "http_requests_total") == 15  # the 5 written while down are not skipped
    finally:
        assert srv.stop() == 0


def test_a_state_of_relative_paths_is_refused_from_another_directory(tmp_path: Path) -> None:
    """Saved by a logmetrics started in logs' parent with relative paths, then started from
    elsewhere on the same files: refused (exit 2, one line), not read again under new names."""
    (tmp_path / "app" / "logs").mkdir(parents=True)
    (tmp_path / "app" / "logs" / "vllm.log").write_text(lines(4))
    srv = Server("logs", "--state-file", "state.db", "--from-beginning", *ARGS, cwd=tmp_path / "app")
    try:
        assert requests(srv, 4) == 4
    finally:
        assert srv.stop() == 0
    out = subprocess.run([sys.executable, "-m", "logmetrics", "watch", "--listen", "127.0.0.1:0", "--state-file",
                          "app/state.db", "app/logs", *ARGS], capture_output=True, text=True, timeout=60,
                         cwd=tmp_path)
    assert out.returncode == 2
    assert out.stderr.count("\n") == 1 and "relative to the directory" in out.stderr and "--state-adopt" in out.stderr


def test_a_state_of_other_inputs_is_refused_unless_adopted(tmp_path: Path) -> None:
    """One more PATH on the command line: exit 2 with a one-line message naming --state-adopt; with
    the flag the counters go on."""
    d, other, state = tmp_path / "logs", tmp_path / "more", tmp_path / "state.json"
    d.mkdir()
    other.mkdir()
    (d / "vllm.log").write_text("")
    counted_run(d, state, lines(4), 4)
    before = state.read_bytes()
    out = subprocess.run([sys.executable, "-m", "logmetrics", "watch", "--listen", "127.0.0.1:0", "--state-file",
                          str(state), str(d), str(other)], capture_output=True, text=True, timeout=60)
    assert out.returncode == 2
    assert out.stderr.count("\n") == 1 and "--state-adopt" in out.stderr and f"new: {other}" in out.stderr
    assert state.read_bytes() == before
    srv = Server(str(d), str(other), "--state-file", str(state), "--state-adopt", *ARGS)
    try:
        append(d / "vllm.log", lines(1, 4))
        assert requests(srv, 5) == 5
    finally:
        assert srv.stop() == 0
    assert st.read(str(state))["inputs"] == sorted([str(d), str(other)])


def test_a_second_process_cannot_use_the_same_state_file(tmp_path: Path) -> None:
    """The state file is locked: a second logmetrics on it exits 2 with a one-line message."""
    d, state = tmp_path / "logs", tmp_path / "state.json"
    d.mkdir()
    srv = Server(str(d), "--state-file", str(state), *ARGS)
    try:
        out = subprocess.run([sys.executable, "-m", "logmetrics", "watch", "--listen", "127.0.0.1:0",
                              "--state-file", str(state), str(d)], capture_output=True, text=True, timeout=60)
        assert out.returncode == 2
        assert out.stderr.count("\n") == 1 and f"pid {srv.proc.pid}" in out.stderr
    finally:
        assert srv.stop() == 0


@pytest.mark.parametrize("link", ["symlink", "hardlink"])
def test_a_second_process_cannot_use_the_state_file_through_a_link(tmp_path: Path, link: str) -> None:
    """A second logmetrics given a symbolic or hard link to a state file in use exits 2, and the
    state file and its link are left alone (not set aside as damaged)."""
    d, state, alias = tmp_path / "logs", tmp_path / "state.db", tmp_path / "alias.db"
    d.mkdir()
    srv = Server(str(d), "--state-file", str(state), *ARGS)
    try:
        (alias.symlink_to if link == "symlink" else alias.hardlink_to)(state)
        out = subprocess.run([sys.executable, "-m", "logmetrics", "watch", "--listen", "127.0.0.1:0",
                              "--state-file", str(alias), str(d)], capture_output=True, text=True, timeout=60)
        assert out.returncode == 2, out.stderr
        assert "in use by another logmetrics" in out.stderr and out.stderr.count("\n") == 1
        assert sorted(p.name for p in tmp_path.glob("*.bad-*")) == []
    finally:
        assert srv.stop() == 0


def no_room() -> None:
    """In the child: files can grow to 64 bytes at most (a full disk, which stops root too)."""
    resource.setrlimit(resource.RLIMIT_FSIZE, (64, 64))


def test_a_failed_save_is_retried_reported_once_counted_and_fails_the_exit(tmp_path: Path) -> None:
    """A state that cannot be written (no room for the database's log): counted in
    logmetrics_state_save_failures_total, retried, one warning, exit code 3; a restart on the older
    state reads again from its positions, so no counter goes down."""
    d, state = tmp_path / "logs", tmp_path / "state.json"
    d.mkdir()
    (d / "vllm.log").write_text("")
    counted_run(d, state, lines(10), 10)
    srv = Server(str(d), "--state-file", str(state), *ARGS, preexec_fn=no_room)
    try:
        append(d / "vllm.log", lines(5, 10))
        got = srv.wait_for(lambda s: total(s, "logmetrics_state_save_failures_total") >= 3
                           and total(s, "http_requests_total") >= 15)
        assert total(got, "http_requests_total") == 15
    finally:
        assert srv.stop() == 3
    err = stderr_of(srv)
    assert sum("cannot save state file" in line for line in err.splitlines()) == 1
    assert "the last save of --state-file" in err.splitlines()[-1]
    srv = Server(str(d), "--state-file", str(state), *ARGS)
    try:
        got = srv.wait_for(lambda s: total(s, "http_requests_total") >= 15)
        assert total(got, "http_requests_total") == 15  # not below what was served before the restart
        assert total(got, "logmetrics_lines_read_total") == 5  # read again from the last good commit
        assert total(got, "logmetrics_state_save_failures_total") == 0
    finally:
        assert srv.stop() == 0
