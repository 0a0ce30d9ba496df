"""Out of file descriptors: files wait for one and nothing is read twice, lost, or taken for a rotation."""

from __future__ import annotations

import errno
import json
import resource
import subprocess
import sys
from pathlib import Path

import pytest

from logmetrics.sources.descriptors import Descriptors, budget_for, low_limit_warning
from logmetrics.sources.tailfile import LineCutter, TailFile
from tests.helpers import Server, access_line, total

# The tailer in a process of its own under a low open-file limit, driven line by line from stdin:
# "poll N" polls N times, "drain" polls until 5 polls in a row read nothing; each answers with what
# was read so far. Its budget is set above the limit, as when the limit is lowered while it runs.
CHILD = """
import json, resource, sys
from logmetrics.sources.chunks import SourceStats
from logmetrics.sources.tailer import FileTailer
limit, max_open, arg = int(sys.argv[1]), int(sys.argv[2]), sys.argv[3]
resource.setrlimit(resource.RLIMIT_NOFILE, (limit, limit))
stats = SourceStats()
t = FileTailer([arg], from_beginning=False, stats=stats, rotate_wait=0.0, max_open=max_open)
lines = 0
for command in sys.stdin:
    word, _, n = command.strip().partition(" ")
    quiet = 0
    for _ in range(int(n) if word == "poll" else 10_000):
        got = sum(c.data.count(b"\\n") for c in t.poll())
        lines += got
        quiet = 0 if got else quiet + 1
        if word == "drain" and quiet >= 5:
            break
    print(json.dumps({"lines": lines, "rotations": sum(stats.rotations.values()),
                      "truncations": sum(stats.truncations.values()), "waiting": stats.files_waiting,
                      "followed": stats.open_files}), flush=True)
"""


class Child:
    """The tailer process."""

    def __init__(self, limit: int, max_open: int, arg: str) -> None:
        self.proc = subprocess.Popen([sys.executable, "-c", CHILD, str(limit), str(max_open), arg],
                                     stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                     cwd=Path(__file__).parent.parent)

    def ask(self, command: str) -> dict[str, int]:
        assert self.proc.stdin is not None and self.proc.stdout is not None
        self.proc.stdin.write(command.encode() + b"\n")
        self.proc.stdin.flush()
        answer = self.proc.stdout.readline()
        if not answer:
            _, err = self.proc.communicate(timeout=30)
            raise AssertionError(f"the tailer died: {err.decode()[-2000:]}")
        got: dict[str, int] = json.loads(answer)
        return got

    def close(self) -> str:
        _, err = self.proc.communicate(timeout=60)
        return err.decode()


@pytest.mark.parametrize("glob", [False, True])
def test_two_thousand_files_with_a_budget_above_the_limit(tmp_path: Path, glob: bool) -> None:
    """2,000 files, 10 lines each, with 1,024 descriptors and a budget of 4,096: each line once, no rotation."""
    paths = [tmp_path / f"app-{i}.log" for i in range(2000)]
    for path in paths:
        path.write_bytes(b"")
    child = Child(1024, 4096, str(tmp_path / "*.log") if glob else str(tmp_path))
    try:
        assert child.ask("poll 1")["followed"] == 2000
        for r in range(10):
            for i, path in enumerate(paths):
                with open(path, "ab") as fh:
                    fh.write(b"round %d file %d\n" % (r, i))
            child.ask("poll 2")
        got = child.ask("drain")
    finally:
        errors = child.close()
    assert got == {"lines": 20_000, "rotations": 0, "truncations": 0, "waiting": 0, "followed": 2000}
    assert "Too many open files" not in errors



def test_a_newer_file_held_behind_its_waiting_older_one_gives_up_its_descriptor(tmp_path: Path) -> None:
    """Every descriptor held by files with bytes unread, one of them a stream's newer file that must
    wait for its older one (closed with bytes unread): that newer file is closed for room, and named
    to be placed again; without such a file, the open waits (EMFILE)."""
    files: list[TailFile] = []
    fds = Descriptors(lambda: files, max_open=2)

    def follow(name: str, stream: str, draining: bool = False) -> TailFile:
        path = tmp_path / name
        path.write_bytes(b"x\n")
        f = TailFile(stream, str(path), fds.open_path(str(path)), (0, len(files)), b"", LineCutter(100), len(files))
        f.size, f.draining = 2, draining
        files.append(f)
        return f

    old_a = follow("a.log.1", "a", draining=True)
    fds.release(old_a)  # closed with its bytes unread, as a file parked before it was rotated
    new_b, new_x = follow("b.log", "b"), follow("x.log", "x")
    with pytest.raises(OSError) as err:
        fds.open_path(old_a.path)  # both open files may be read now: neither gives way
    assert err.value.errno == errno.EMFILE and fds.evicted == []
    fds.release(new_x)
    new_a = follow("a.log", "a")  # a's newer file, read only after a.log.1
    fds.new_poll()  # (the next turn)
    old_a.fd = fds.open_path(old_a.path)
    assert new_a.fd < 0 and new_b.fd >= 0 and old_a.fd >= 0 and fds.evicted == [new_a.path]


@pytest.mark.parametrize("limit", [16, 20])
def test_a_serving_watch_under_a_very_low_limit_answers_and_says_why_it_may_not(tmp_path: Path, limit: int) -> None:
    """Under an open-file limit of 16 or 20 (soft and hard), a watch of 200 files leaves room for the
    endpoint: scrapes answer, the total is exact, and a warning at start names the limit. (With the
    old budget of 8 log files at least, the endpoint had no descriptor left for a connection.)"""
    for i in range(200):
        (tmp_path / f"f{i:03d}.log").write_text("".join(access_line(i * 10 + j) for j in range(10)))

    def low() -> None:
        resource.setrlimit(resource.RLIMIT_NOFILE, (limit, limit))

    srv = Server("--from-beginning", "--parser", "vllm", str(tmp_path), preexec_fn=low)
    try:
        assert any(f"the open-file limit is {limit}" in line for line in srv.startup), srv.startup
        got = srv.wait_for(lambda s: total(s, "http_requests_total") >= 2000, timeout=60)
        assert total(got, "http_requests_total") == 2000
        assert srv.get("/healthz")[0] == 200
    finally:
        assert srv.stop() == 0


def test_the_budget_leaves_the_endpoint_room_under_a_low_limit() -> None:
    """Most of a large limit goes to log files; a low one leaves SERVING_MIN for the rest first."""
    assert [budget_for(n) for n in (16, 20, 24, 28, 32, 64, 100, 1024)] == [1, 1, 1, 4, 8, 8, 36, 768]
    assert low_limit_warning(1024) is None and low_limit_warning(32) is None
    assert "ulimit -n" in (low_limit_warning(20) or "")
