"""The command line as users meet it: mistakes end in one clear line on stderr and exit code 2, and
bad input (binary data, invalid UTF-8, NUL bytes, empty files, a 10 MB line) never crashes a run
nor costs the good lines around it.
"""

from __future__ import annotations

import os
import random
import signal
import socket
import stat
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.helpers import parse

TIMEOUT = 60.0
ACCESS = 'INFO:     127.0.0.1:{port} - "POST /v1/chat/completions HTTP/1.1" 200 OK'
STATS = (
    "INFO 04-10 03:35:27 [loggers.py:80] Engine 000: Avg prompt throughput: 12.5 tokens/s, "
    "Avg generation throughput: 40.1 tokens/s, Running: 3 reqs, Waiting: 1 reqs, "
    "GPU KV cache usage: 4.2%, Prefix cache hit rate: 0.0%"
)
# Modes in which a start-up error must be reported: serving, and one-shot.
MODES = {"serve": ["--listen", "127.0.0.1:0"], "oneshot": ["--oneshot"]}


def run(*args: str, timeout: float = TIMEOUT) -> subprocess.CompletedProcess[str]:
    """Run ``logmetrics ARGS`` to completion (a server that does not exit in time fails the test)."""
    cmd = [sys.executable, "-m", "logmetrics", *args]
    try:
        return subprocess.run(cmd, stdin=subprocess.DEVNULL, capture_output=True, text=True,
                              errors="replace", timeout=timeout)
    except subprocess.TimeoutExpired as exc:
        pytest.fail(f"{' '.join(args)} did not exit within {timeout}s (stderr: {exc.stderr!r})")


def one_error_line(proc: subprocess.CompletedProcess[str]) -> str:
    """Assert exit code 2 and exactly one line on stderr; return that line."""
    lines = proc.stderr.strip("\n").splitlines()
    assert proc.returncode == 2, f"exit code {proc.returncode}, want 2; stderr:\n{proc.stderr}"
    assert len(lines) == 1, f"want exactly one line on stderr, got {len(lines)}:\n{proc.stderr}"
    assert "Traceback" not in lines[0], lines[0]
    return lines[0]


@pytest.fixture
def vllm_log(tmp_path: Path) -> Path:
    """A small, valid vLLM log."""
    log = tmp_path / "vllm.log"
    log.write_text("\n".join([STATS, ACCESS.format(port=50000)]) + "\n")
    return log


def test_missing_path(tmp_path: Path) -> None:
    """--oneshot refuses a path that does not exist with exit code 2 and one line naming it."""
    missing = tmp_path / "no-such-dir" / "vllm.log"
    line = one_error_line(run("watch", str(missing), *MODES["oneshot"]))
    assert "no-such-dir" in line, line


def test_port_in_use(vllm_log: Path) -> None:
    """A listen address whose port is taken is refused with exit code 2 and one line naming the port."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        s.listen(1)
        port = s.getsockname()[1]
        line = one_error_line(run("watch", str(vllm_log), "--listen", f"127.0.0.1:{port}"))
    assert str(port) in line, line
    assert any(w in line.lower() for w in ("in use", "address already", "bind", "listen")), line


@pytest.mark.parametrize("mode", MODES)
def test_unknown_parser(vllm_log: Path, mode: str) -> None:
    """An unknown --parser name is refused with exit code 2 and one line naming it."""
    line = one_error_line(run("watch", str(vllm_log), "--parser", "nosuchparser", *MODES[mode]))
    assert "nosuchparser" in line, line


@pytest.mark.parametrize(("spec", "says"), [
    ("vllm", "expected BACKEND=PATTERN"),
    ("=vllm", "expected BACKEND=PATTERN"),
    ("vllm=", "expected BACKEND=PATTERN"),
    ("vllm=serve(", "not a valid regular expression"),
])
def test_bad_process_rule(vllm_log: Path, spec: str, says: str) -> None:
    """A --process without '=' or with a bad regular expression is a usage error: exit code 2, one line."""
    line = one_error_line(run("watch", str(vllm_log), "--process", spec, *MODES["serve"]))
    assert "'--process'" in line and says in line and repr(spec) in line, line


@pytest.mark.parametrize("flag", ["--poll-interval", "--rescan-interval"])
def test_an_interval_that_is_not_a_number(vllm_log: Path, flag: str) -> None:
    """nan passes click's range check (no comparison holds): it is refused, not a busy loop or no rescan."""
    line = one_error_line(run("watch", str(vllm_log), flag, "nan", *MODES["serve"]))
    assert f"'{flag}'" in line and "not a number of seconds" in line, line


def test_process_rule_with_oneshot(vllm_log: Path) -> None:
    """--process with --oneshot is refused: a one-shot run reports no process metrics."""
    line = one_error_line(run("watch", str(vllm_log), "--process", "vllm=serve", "--oneshot"))
    assert "--process" in line and "--oneshot" in line, line


def test_plugin_syntax_error(vllm_log: Path, tmp_path: Path) -> None:
    """A --plugin file with a syntax error is refused with exit code 2 and one line naming the file."""
    plugin = tmp_path / "broken_syntax.py"
    plugin.write_text("from logmetrics.plugins import Parser\n\nclass Broken(Parser:\n    name = 'broken'\n")
    line = one_error_line(run("watch", str(vllm_log), "--plugin", str(plugin), "--oneshot"))
    assert "broken_syntax.py" in line, line
    assert "syntax" in line.lower(), line


@pytest.mark.parametrize(("mode", "code"), [("oneshot", 130), ("serve", 0)])
def test_a_signal_while_starting_fails_a_oneshot_and_stops_a_server(
        vllm_log: Path, tmp_path: Path, mode: str, code: int) -> None:
    """SIGTERM while the plugins load (before any handler of the command's own): a --oneshot run
    did not do its job (exit 130, and a message); a server was asked to stop (exit 0). (Not
    SIGINT: a test run in the background inherits SIGINT ignored, which Python then keeps.)"""
    started = tmp_path / "started"
    plugin = tmp_path / "slow_plugin.py"
    plugin.write_text(f"import pathlib, time\npathlib.Path({str(started)!r}).touch()\ntime.sleep(30)\n")
    proc = subprocess.Popen([sys.executable, "-m", "logmetrics", "watch", *MODES[mode], "--plugin", str(plugin),
                             str(vllm_log)], stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)
    for _ in range(3000):
        if started.exists() or proc.poll() is not None:
            break
        time.sleep(0.01)
    assert started.exists(), proc.communicate()
    proc.send_signal(signal.SIGTERM)
    out, err = proc.communicate(timeout=TIMEOUT)
    assert proc.returncode == code and out == "", (proc.returncode, err)
    assert ("logmetrics: interrupted" in err) == (code != 0), err


def test_plugin_bad_class_name(vllm_log: Path, tmp_path: Path) -> None:
    """A --plugin whose parser class has an invalid name is refused with exit code 2, naming that name."""
    plugin = tmp_path / "bad_name.py"
    plugin.write_text(
        "from logmetrics.plugins import Parser\n\n\n"
        "class BadName(Parser):\n"
        "    name = 'Not A-Valid Name'\n\n"
        "    def parse(self, record):\n"
        "        return []\n"
    )
    line = one_error_line(run("watch", str(vllm_log), "--plugin", str(plugin), "--oneshot"))
    assert "Not A-Valid Name" in line, line


def test_state_file_in_a_missing_directory(vllm_log: Path, tmp_path: Path) -> None:
    """A --state-file whose directory does not exist is refused at start, not at the first save."""
    line = one_error_line(run("watch", str(vllm_log), "--listen", "127.0.0.1:0",
                              "--state-file", str(tmp_path / "no-such-dir" / "state.json")))
    assert "no-such-dir" in line and "does not exist" in line, line


@pytest.mark.parametrize("args", [["watch", "-", "--oneshot", "--source", ""], ["check", "--top", "-1", "x.log"]])
def test_empty_source_and_negative_top_are_refused(args: list[str]) -> None:
    """An empty --source (silently ignored before) and a negative --top are refused with one line."""
    line = one_error_line(run(*args))
    assert "--source" in line or "--top" in line, line


def test_plugin_missing_file(vllm_log: Path, tmp_path: Path) -> None:
    """A --plugin path that does not exist is refused with exit code 2 and one line naming it."""
    line = one_error_line(run("watch", str(vllm_log), "--plugin", str(tmp_path / "nope_plugin.py"), "--oneshot"))
    assert "nope_plugin.py" in line, line


def samples(text: str, name: str) -> list[tuple[dict[str, str], float]]:
    """(labels, value) of every sample called ``name`` in a text exposition."""
    return [(dict(labels), value) for (sample, labels), value in parse(text).items() if sample == name]


def test_bad_input_never_crashes(tmp_path: Path) -> None:
    """Binary, invalid UTF-8, NUL bytes, an empty file and a 10 MB line beside a vllm.log: exit 0, all lines counted."""
    logs = tmp_path / "logs"
    logs.mkdir()
    n_good = 250
    good = [ACCESS.format(port=1024 + i) for i in range(n_good)]
    (logs / "vllm.log").write_text("\n".join([STATS, *good[:125], STATS, *good[125:]]) + "\n")

    rng = random.Random(1234)
    # Random bytes with the newlines and carriage returns taken out, so no access line can appear by chance.
    noise = bytes(b for b in rng.randbytes(256 * 1024) if b not in (0x0A, 0x0D))
    (logs / "random.bin").write_bytes(noise[:100_000] + b"\n" + noise[100_000:] + b"\n")
    # Each of the next files ends in one good access line after the bad part: it must still be counted.
    after = (ACCESS.format(port=65000) + "\n").encode()
    (logs / "invalid-utf8.log").write_bytes(b"INFO \xff\xfe\xc3\x28 broken \xe2\x82\n\xf0\x28\x8c\xbc\n" + after)
    (logs / "nul.log").write_bytes(b"\x00" * 4096 + b"\nINFO:\x00 half\x00line\n" + b"\x00" * 100 + b"\n" + after)
    (logs / "empty.log").write_bytes(b"")
    (logs / "huge.log").write_bytes(b"INFO " + b"x" * (10 * 1024 * 1024) + b"\n" + after)
    want = n_good + 3

    proc = run("watch", str(logs), "--oneshot", "--from-beginning", "--parser", "vllm", timeout=120)
    assert proc.returncode == 0, f"exit code {proc.returncode}; stderr:\n{proc.stderr[-3000:]}"
    assert "Traceback" not in proc.stderr, proc.stderr[-3000:]

    by_source: dict[str, float] = {}
    for labels, value in samples(proc.stdout, "http_requests_total"):
        by_source[labels.get("source", "")] = by_source.get(labels.get("source", ""), 0.0) + value
    total = sum(by_source.values())
    assert total == want, f"http_requests_total: want {want} ({n_good} in vllm.log + 3 after bad data), " \
                          f"got {total} by source {by_source}"
    vllm = {src: v for src, v in by_source.items() if src.endswith("vllm.log")}
    assert list(vllm.values()) == [n_good], f"vllm.log requests by source: {vllm}"

    read = {labels.get("source", ""): value for labels, value in samples(proc.stdout, "logmetrics_lines_read_total")}
    vllm_read = [v for src, v in read.items() if src.endswith("vllm.log")]
    assert vllm_read == [n_good + 2], f"logmetrics_lines_read_total for vllm.log: {read}"
    running = [v for labels, v in samples(proc.stdout, "llm_requests_running")
               if labels.get("source", "").endswith("vllm.log")]
    assert running == [3], f"llm_requests_running of vllm.log: {running}"


def test_stdin_oneshot() -> None:
    """``-`` reads stdin: lines piped in with --oneshot are all counted and the run exits 0."""
    n = 40
    text = "\n".join([STATS, *(ACCESS.format(port=2000 + i) for i in range(n))]) + "\n"
    cmd = [sys.executable, "-m", "logmetrics", "watch", "-", "--oneshot", "--parser", "vllm", "--source", "piped"]
    proc = subprocess.run(cmd, input=text, capture_output=True, text=True, timeout=TIMEOUT)
    assert proc.returncode == 0, proc.stderr
    got = samples(proc.stdout, "http_requests_total")
    assert sum(v for _, v in got) == n, got
    assert {labels.get("source") for labels, v in got if v} == {"piped"}, got


def test_stdin_closed_fails_the_oneshot_run_with_a_message() -> None:
    """``-`` with stdin closed (``<&-``): a one-line error and exit 2 after what could be read, no traceback."""
    cmd = [sys.executable, "-m", "logmetrics", "watch", "-", "--oneshot", "--parser", "vllm"]
    proc = subprocess.run(cmd, stdin=subprocess.DEVNULL, capture_output=True, text=True, timeout=TIMEOUT,
                          preexec_fn=lambda: os.close(0))
    assert proc.returncode == 2, proc.stderr
    assert proc.stderr.strip() == "logmetrics: error: cannot read stdin: stdin is closed"
    assert "logmetrics_read_errors_total" in proc.stdout


def test_a_cut_line_is_reported_once_per_source(tmp_path: Path) -> None:
    """A line longer than --max-line-bytes is counted and reported once on stderr; the lines around it still count."""
    log = tmp_path / "vllm.log"
    access = 'INFO:     127.0.0.1:1 - "GET /health HTTP/1.1" 200 OK\n'
    log.write_text(access + "INFO x " + "y" * 5000 + "\n" + "INFO x " + "z" * 5000 + "\n" + access)
    proc = run("watch", "--oneshot", "--max-line-bytes", "1024", str(log))
    assert proc.returncode == 0, proc.stderr
    assert proc.stderr.count("was cut") == 1, proc.stderr
    got = parse(proc.stdout)
    assert sum(v for (name, _), v in got.items() if name == "logmetrics_lines_truncated_total") == 2
    assert sum(v for (name, _), v in got.items() if name == "http_requests_total") == 2


def test_oneshot_reads_past_a_line_longer_than_one_poll(tmp_path: Path) -> None:
    """--oneshot reads on past a 3 MB line (more than one poll reads of a file) to the lines after it."""
    log = tmp_path / "vllm.log"
    access = 'INFO:     127.0.0.1:1 - "GET /health HTTP/1.1" 200 OK\n'
    log.write_text("INFO x " + "y" * (3 << 20) + "\n" + access)
    proc = run("watch", "--oneshot", str(log))
    assert proc.returncode == 0, proc.stderr
    got = parse(proc.stdout)
    assert sum(v for (name, _), v in got.items() if name == "http_requests_total") == 1
    assert sum(v for (name, _), v in got.items() if name == "logmetrics_lines_truncated_total") == 0


@pytest.mark.parametrize("kind", ["fifo", "device", "a followed log", "beside the followed logs",
                                  "a symlink to a followed log"])
def test_a_state_file_that_is_no_file_of_its_own_is_refused_untouched(tmp_path: Path, kind: str) -> None:
    """A FIFO (which would block the start), a device or a followed log as --state-file is refused
    at once, and is not set aside (renamed) as a damaged state."""
    logs = tmp_path / "logs"
    logs.mkdir()
    (logs / "api.log").write_text(ACCESS.format(port=1) + "\n")
    target = {"fifo": tmp_path / "fifo", "device": tmp_path / "null", "a followed log": logs / "api.log",
              "beside the followed logs": logs / "state.db", "a symlink to a followed log": tmp_path / "link.db"}[kind]
    if kind == "a symlink to a followed log":
        target.symlink_to(logs / "api.log")
    if kind == "fifo":
        os.mkfifo(target)
    elif kind == "device":
        try:
            os.mknod(target, stat.S_IFCHR | 0o666, os.makedev(1, 3))
        except PermissionError:
            pytest.skip("making a device node needs CAP_MKNOD")
    before = sorted(p.name for p in tmp_path.rglob("*"))
    line = one_error_line(run("watch", "--listen", "127.0.0.1:0", str(logs), "--state-file", str(target),
                              timeout=20))
    assert f"--state-file {target}: " in line
    assert ("not a regular file" if kind in ("fifo", "device") else "lies among the followed files") in line
    assert (logs / "api.log").read_text() == ACCESS.format(port=1) + "\n"
    assert sorted(p.name for p in tmp_path.rglob("*")) == before


@pytest.mark.parametrize("command", ["report", "check", "backfill"])
def test_a_fifo_among_the_logs_is_left_out_unopened(tmp_path: Path, command: str) -> None:
    """A FIFO in a directory of logs is no log: report, check and backfill read the logs beside it
    and never open it (opening it would block until a writer came)."""
    logs = tmp_path / "logs"
    logs.mkdir()
    (logs / "vllm.log").write_text("\n".join([STATS, ACCESS.format(port=50000)]) + "\n")
    os.mkfifo(logs / "pipe.log")
    extra = ["--out", str(tmp_path / "blocks")] if command == "backfill" else []
    proc = run(command, str(logs), *extra, timeout=30)
    assert proc.returncode == 0, proc.stderr
    assert "pipe.log" not in proc.stdout + proc.stderr


@pytest.mark.parametrize("command", ["report", "check", "backfill"])
def test_a_device_named_is_refused_without_reading_it(tmp_path: Path, command: str) -> None:
    """/dev/zero named on the command line is refused at once (reading it would never end): the
    reason, then one error line, exit code 2."""
    extra = ["--out", str(tmp_path / "blocks")] if command == "backfill" else []
    proc = run(command, "/dev/zero", *extra, timeout=30)
    assert proc.returncode == 2, proc.stderr
    assert "/dev/zero: not a regular file (a FIFO, a device or a socket)" in proc.stderr
    assert proc.stderr.strip().splitlines()[-1].startswith("logmetrics: error: ")
    assert "Traceback" not in proc.stderr


def test_backfill_out_below_a_file_is_one_error_line(vllm_log: Path, tmp_path: Path) -> None:
    """--out naming a directory that cannot be made (below a regular file) is one error line."""
    (tmp_path / "afile").write_text("")
    line = one_error_line(run("backfill", str(vllm_log), "--out", str(tmp_path / "afile" / "sub")))
    assert line == f"logmetrics: error: --out {tmp_path / 'afile' / 'sub'}: cannot make the directory: Not a directory"


def test_oneshot_with_globs_that_leave_out_every_file_says_so(vllm_log: Path) -> None:
    """watch --oneshot whose --include leaves out every file is an error, as in report and backfill,
    not an empty exposition with exit code 0."""
    line = one_error_line(run("watch", "--oneshot", str(vllm_log.parent), "--include", "nomatch*"))
    assert line == (f"logmetrics: error: no log file found in {vllm_log.parent} "
                    "(the include and exclude globs leave out every one)")


def test_a_file_name_holding_a_newline_keeps_each_log_record_on_one_line(tmp_path: Path) -> None:
    """``-v`` names each stream in a log record; a file name with a newline or a control character
    in it is written escaped, so that every stderr line is a whole record."""
    (tmp_path / "new\nline\x1b[31m.log").write_text(ACCESS.format(port=1) + "\n")
    run = subprocess.run([sys.executable, "-m", "logmetrics", "-v", "watch", "--oneshot", str(tmp_path)],
                         capture_output=True, text=True, timeout=TIMEOUT)
    assert run.returncode == 0, run.stderr
    assert "new\\nline\\x1b[31m.log" in run.stderr
    assert all(line.startswith("logmetrics: ") for line in run.stderr.splitlines()), run.stderr
