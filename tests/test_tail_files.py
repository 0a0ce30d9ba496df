"""The tailer at scale and at the edges: look-alike files, the open-file limit, paths that come later."""

from __future__ import annotations

import json
import os
import resource
import shutil
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

import pytest

from logmetrics.sources import identity
from logmetrics.sources.chunks import Chunk, Position
from logmetrics.sources.copies import Cut, copy_name, same_tail
from logmetrics.sources.tailer import FileTailer
from logmetrics.sources.tailfile import LineCutter, TailFile
from tests.helpers import Server, access_line, parse, total
from tests.test_sources import Tail, data, drain, line, lines, streams
from tests.test_sources import shared_dir as shared_dir  # the same fixtures as there: a directory anyone
from tests.test_sources import tail as tail  # may enter; tailers over real paths, closed after the test

BANNER = b"INFO 04-10 03:35:27 [api_server.py:1] vLLM API server version 0.10.0\n"


@pytest.mark.parametrize(("name", "original", "want"), [
    ("vllm-10.log", "vllm-1.log", False),
    ("vllm-1.log.1", "vllm-1.log", True),
    ("x.log-20240101", "x.log", True),
    ("x.log.2024-01-01", "x.log", True),
    ("x-20240101.log", "x.log", True),
    ("xy.log", "x.log", False),
    ("x.log", "x.log", False),
])
def test_copy_name(name: str, original: str, want: bool) -> None:
    """A rotated copy's name is the original's plus a separated suffix (or a date before the extension)."""
    assert copy_name(f"/d/{name}", f"/d/{original}") is want


def test_thousand_look_alike_files_and_a_copytruncate(tmp_path: Path, tail: Tail) -> None:
    """1,000 new files with identical first lines are all counted exactly; a copytruncate among them once."""
    t = tail(tmp_path)
    t.poll()
    paths = [tmp_path / f"vllm-{i}.log" for i in range(1, 1001)]
    for path in paths:
        path.write_bytes(BANNER)
    got = drain(t)
    assert all(data(got, p) == BANNER for p in paths)  # each a new file, none taken for a copy
    for i, path in enumerate(paths, 1):
        append(path, line(i))
    got += drain(t)
    assert all(data(got, p) == BANNER + line(i) for i, p in enumerate(paths, 1))
    log = paths[6]  # vllm-7.log: copytruncate it, with lines not read yet
    append(log, lines(2000, 2003))
    shutil.copyfile(log, tmp_path / "vllm-7.log.1")
    with open(log, "r+b") as fh:
        fh.truncate(0)
    append(log, lines(3000, 3002))
    got += drain(t)
    assert data(got, log) == BANNER + line(7) + lines(2000, 2003) + lines(3000, 3002)
    assert data(got, tmp_path / "vllm-7.log.1") == b""
    assert t.stats.truncations[str(log)] == 1
    assert sum(t.stats.rotations.values()) == 0


def test_copy_kept_with_no_truncation_is_not_read_again(tmp_path: Path, tail: Tail) -> None:
    """A copy that stays beside its original, never truncated (logrotate's ``copy``, a ``cp``), is
    not read: its lines were read from the original; only lines written to it later are read (in
    the original's stream, as a rotated file's are)."""
    t = tail(tmp_path, copy_wait=0.0)
    t.poll()
    log, bak = tmp_path / "x.log", tmp_path / "x.log.1"
    log.write_bytes(lines(0, 40))
    got = drain(t)
    bak.write_bytes(lines(0, 40))
    got += drain(t)
    append(bak, b"")  # nothing new: still not read, after copy_wait
    got += drain(t)
    append(log, lines(40, 50))
    got += drain(t)
    assert data(got, bak) == b""
    assert data(got, log) == lines(0, 50)
    append(bak, lines(100, 105))  # written to later: that much is new
    got += drain(t)
    assert data(got) == lines(0, 50) + lines(100, 105)


def test_look_alike_with_other_content_is_read(tmp_path: Path, tail: Tail) -> None:
    """A copy-named file with the original's first bytes but other content after them is read at once."""
    t = tail(tmp_path)
    t.poll()
    log, other = tmp_path / "x.log", tmp_path / "x.log.1"
    log.write_bytes(BANNER + lines(0, 40))
    drain(t)
    other.write_bytes(BANNER + lines(100, 140))
    got = drain(t)
    assert data(got, other) == BANNER + lines(100, 140)


def test_a_look_alike_of_a_closed_file_is_read_after_the_wait(tmp_path: Path, tail: Tail) -> None:
    """A copy-named file that starts like a file closed for want of descriptors (nothing to compare
    its end with then) but ends otherwise is read once the wait is over, not kept as a copy."""
    t = tail(tmp_path, copy_wait=0.0, max_open=2)
    t.poll()
    log = tmp_path / "x.log"
    log.write_bytes(lines(0, 40))
    got = drain(t)
    for name in ("a.log", "b.log"):  # the two descriptors go to them: x.log is closed
        (tmp_path / name).write_bytes(line(900))
    got += drain(t)
    other = tmp_path / "x.log.1"
    other.write_bytes(lines(0, 20) + lines(200, 220))
    got += drain(t)
    append(other, b"")
    got += drain(t)
    assert data(got, other) == lines(0, 20) + lines(200, 220)
    assert data(got, log) == lines(0, 40)


def test_parked_files_are_reopened_exactly(tmp_path: Path, tail: Tail) -> None:
    """With room for 5 open files, 60 files are all followed; appends, a rotation and a cut lose and repeat nothing."""
    t = tail(tmp_path, max_open=5)
    paths = [tmp_path / f"f{i:02}.log" for i in range(60)]
    for path in paths:
        path.write_bytes(b"old\n")
    t.poll()
    for i, path in enumerate(paths):
        append(path, line(i))
    got = drain(t)
    assert t.stats.open_files == 60
    for i, path in enumerate(paths):
        append(path, line(100 + i))
    got += drain(t)
    with open(paths[3], "r+b") as fh:  # a cut while parked
        fh.truncate(0)
    append(paths[3], line(500))
    paths[4].rename(tmp_path / "f04.log.1")  # a rotation while parked
    append(tmp_path / "f04.log.1", line(600))
    paths[4].write_bytes(line(700))
    got += drain(t)
    for i, path in enumerate(paths):
        want = line(i) + line(100 + i) + {3: line(500), 4: line(600) + line(700)}.get(i, b"")
        assert data(got, path) == want, path
    assert t.stats.files_waiting == 0
    assert t.stats.truncations[str(paths[3])] == 1
    assert sum(t.stats.rotations.values()) == 1


def test_a_read_to_the_end_says_when_the_file_was_last_written(tmp_path: Path, tail: Tail) -> None:
    """A chunk that reaches the end of its file carries the file's modification time; one cut short
    by the poll's budget does not (more of the file is there: it is not quiet)."""
    t = tail(tmp_path, from_beginning=True, read_size=1024, poll_budget=1024)
    log = tmp_path / "a.log"
    log.write_bytes(lines(0, 100))
    os.utime(log, (1_000_000.0, 1_000_000.0))
    got = drain(t)
    assert data(got) == lines(0, 100) and len(got) > 1
    assert [c.written for c in got] == [None] * (len(got) - 1) + [1_000_000.0]


def test_drained_rotated_files_make_room(tmp_path: Path, tail: Tail) -> None:
    """Rotated files read to their end give their descriptors to the new files at once, not after
    the wait for late writes to them: with room for 3, 3 renames and 3 new files are all read."""
    t = tail(tmp_path, max_open=3, rotate_wait=60.0)
    paths = [tmp_path / f"{name}.log" for name in "abc"]
    for i, path in enumerate(paths):
        path.write_bytes(line(i))
    t.poll()
    got = drain(t)
    for i, path in enumerate(paths):
        path.rename(f"{path}.1")
        append(Path(f"{path}.1"), line(10 + i))  # written before the writer reopens
        path.write_bytes(line(20 + i))
    got += drain(t)
    for i, path in enumerate(paths):
        assert data(got, path) == line(10 + i) + line(20 + i), path
    assert t.stats.files_waiting == 0


def _empty_files(tmp_path: Path, tail: Tail, n: int) -> tuple[FileTailer, list[Path]]:
    """A tailer with room for 4 files over ``n`` empty ones, polled once."""
    t = tail(tmp_path, max_open=4)
    paths = [tmp_path / f"f{i:02}.log" for i in range(n)]
    for path in paths:
        path.write_bytes(b"")
    t.poll()
    return t, paths


@pytest.mark.parametrize("files", [8, 40])
def test_files_written_at_every_poll_take_turns(tmp_path: Path, tail: Tail, files: int) -> None:
    """8 and 40 files written before every poll, with room for 4: the files that wait take turns
    within the poll, reopened in the room the files just read leave, so that each poll reads every
    file (none left behind for a later poll)."""
    t, paths = _empty_files(tmp_path, tail, files)
    for r in range(10):
        for i, path in enumerate(paths):
            append(path, line(100 * r + i))
        got = t.poll()
        assert {p: data(got, p) for p in paths} == {p: line(100 * r + i) for i, p in enumerate(paths)}, r
    assert t.stats.files_waiting == 0


def test_a_copytruncate_into_the_rotated_file_reads_nothing_twice(tmp_path: Path, tail: Tail) -> None:
    """x.log renamed to x.log.1 and still read, then `cp x.log x.log.1` (written into that file) and
    x.log truncated: what x.log.1 holds now is a copy of lines read already, not read again."""
    log, old = tmp_path / "x.log", tmp_path / "x.log.1"
    t = tail(tmp_path, rotate_wait=60.0)
    t.poll()
    log.write_bytes(lines(0, 50))
    got = drain(t)
    log.rename(old)
    log.write_bytes(lines(50, 80))
    got += drain(t)
    append(log, lines(80, 90))
    got += drain(t)
    with open(old, "r+b") as dst, open(log, "rb") as src:  # cp: the same file, truncated and written
        dst.truncate(0)
        dst.write(src.read())
    with open(log, "r+b") as fh:
        fh.truncate(0)
    append(log, lines(90, 100))
    got += drain(t)
    _all_under(got, log, list(range(100)))


def test_rename_rotation_of_more_files_than_descriptors_reads_each_round(tmp_path: Path, tail: Tail) -> None:
    """40 files, room for 4, each written and rotated by rename before every poll (the next round's
    rename deletes its rotated file): every poll reads every rotated file and every new one, none
    left waiting behind its stream's rotated file for a descriptor."""
    t, paths = _empty_files(tmp_path, tail, 40)
    for r in range(6):
        for i, path in enumerate(paths):
            append(path, line(1000 * r + i))
            path.rename(f"{path}.1")
            path.write_bytes(line(1000 * r + 500 + i))
        got = t.poll()
        want = {p: line(1000 * r + i) + line(1000 * r + 500 + i) for i, p in enumerate(paths)}
        assert {p: data(got, p) for p in paths} == want, r
    assert t.stats.files_waiting == 0


def _reused_inode(spare: Path, ino: int, data: bytes) -> Path | None:
    """A new file with ``data`` that got the freed inode ``ino`` (made in ``spare``), None if none did."""
    for i in range(200):
        new = spare / f"{i}.log"
        new.write_bytes(data)
        if new.stat().st_ino == ino:
            return new
    return None


def test_a_file_deleted_while_down_and_its_inode_reused_is_declared_lost(tmp_path: Path, tail: Tail) -> None:
    """x.log deleted while logmetrics was down and a new x.log that got its inode: the new one is read
    whole, and the old one is declared lost (what was written to it after the save is unknown)."""
    logs, spare = tmp_path / "logs", tmp_path / "spare"
    logs.mkdir()
    spare.mkdir()
    log = logs / "x.log"
    got, positions, saved_at = _read_then_down(logs, tail, log)
    ino = log.stat().st_ino
    log.unlink()
    new = _reused_inode(spare, ino, lines(10, 12))
    if new is None or identity.birth_at(str(new)) is None:
        pytest.skip("this file system gave no new file the freed inode, or keeps no birth times")
    new.rename(log)
    second = tail(logs)
    second.resume(positions, saved_at)
    got = drain(second)
    assert data(got, log) == lines(10, 12)
    assert second.stats.files_lost == {str(log): 1}
    assert not second.stats.truncations.get(str(log))


@pytest.mark.parametrize("successor", ["other lines", "starting like the saved x.log"])
def test_a_rotated_file_given_the_inode_of_an_empty_saved_stream_counts_under_its_stream(
        tmp_path: Path, tail: Tail, successor: str) -> None:
    """x.log.1, empty at start, is followed and saved as a stream of its own. While logmetrics is down
    x.log is rotated over it twice (``mv x.log x.log.1``, a new x.log), and each new x.log gets the
    inode the rename before freed: x.log.1's, then the saved x.log's. The file now at x.log.1 holds
    the saved x.log.1's inode but was born later: it is no file of that stream, but x.log's rotated
    file, and the new x.log is no longer the saved one, even where it starts like it. Every line is
    read once, all under x.log, and both saved files, deleted while down, are declared lost."""
    logs, spare = tmp_path / "logs", tmp_path / "spare"
    logs.mkdir()
    spare.mkdir()
    log, old = logs / "x.log", logs / "x.log.1"
    old.write_bytes(b"")
    log.write_bytes(b"")
    first = tail(logs)
    got = drain(first)
    append(log, lines(0, 5))
    got += drain(first)
    newest = lines(10, 15) if successor == "other lines" else lines(0, 5) + lines(10, 15)
    reused: list[Path | None] = []

    def rotate(content: bytes) -> None:
        """``mv x.log x.log.1``, then a new x.log with ``content`` in the inode that rename freed."""
        ino = old.stat().st_ino
        log.rename(old)
        new = _reused_inode(spare, ino, content)
        reused.append(new)
        if new is not None:
            new.rename(log)

    second = _while_down(logs, tail, first, lambda: rotate(lines(5, 10)), lambda: rotate(newest))
    if None in reused or identity.birth_at(str(log)) is None:
        pytest.skip("this file system gave no new file the freed inode, or keeps no birth times")
    got += drain(second)
    assert data(got, log) == lines(0, 5) + lines(5, 10) + newest
    assert streams(got) == {str(log)}
    assert second.stats.rotations.get(str(log)) == 2
    assert not second.stats.rotations.get(str(old)) and not second.stats.truncations.get(str(log))
    assert second.stats.files_lost == {str(log): 1, str(old): 1}


def test_closed_file_deleted_and_its_inode_reused(tmp_path: Path, tail: Tail) -> None:
    """A closed (parked) file read to its end, deleted, and its inode given to a new file: the new
    file is read whole under its own name, and nothing of the old one is declared lost."""
    logs, spare = tmp_path / "logs", tmp_path / "spare"
    logs.mkdir()
    spare.mkdir()
    t = tail(logs, max_open=2)
    a, b, c, d = (logs / f"{name}.log" for name in "abcd")
    for i, path in enumerate((a, b, d)):
        path.write_bytes(line(i))
    t.poll()
    got = drain(t)
    append(b, line(3))
    append(d, line(4))
    got += drain(t)  # a.log is the one closed now
    ino = a.stat().st_ino
    a.unlink()
    for i in range(200):  # a new file that gets the freed inode (made outside the tree, then moved in)
        new = spare / f"{i}.log"
        new.write_bytes(lines(10, 20))
        if new.stat().st_ino == ino:
            new.rename(c)
            break
    if not c.exists() or identity.birth_at(str(c)) is None:
        pytest.skip("this file system gave no new file the freed inode, or keeps no birth times")
    got += drain(t)
    assert data(got, a) == b""  # (there at start: read from its end)
    assert data(got, c) == lines(10, 20)
    assert not t.stats.bytes_lost


@pytest.mark.parametrize("rotate_wait", [0.0, 60.0])
def test_parked_files_moved_out_and_back_are_read_on(tmp_path: Path, tail: Tail, rotate_wait: float) -> None:
    """Closed idle files whose directory leaves the tree and comes back, or that one listing missed
    while they were renamed, are read on from where they were, not again from their start."""
    logs = tmp_path / "logs"
    sub = logs / "sub"
    sub.mkdir(parents=True)
    t = tail(logs, max_open=2, rotate_wait=rotate_wait)
    t.poll()
    paths = [sub / f"f{i}.log" for i in range(6)]
    for i, path in enumerate(paths):
        path.write_bytes(line(i))
    got = drain(t)
    sub.rename(tmp_path / "away")  # the directory moved out of the tree, and back
    got += drain(t)
    (tmp_path / "away").rename(sub)
    got += drain(t)
    (sub / "f0.log").rename(tmp_path / "f0.log")  # renamed where a listing did not see it (out of the
    got += drain(t)  # tree for one listing), then found under its rotated name
    (tmp_path / "f0.log").rename(sub / "f0.log.1")
    got += drain(t)
    append(sub / "f0.log.1", line(10))
    for i, path in enumerate(paths[1:], 1):
        append(path, line(10 + i))
    got += drain(t)
    for i, path in enumerate(paths):
        assert data(got, path) == line(i) + line(10 + i), path
    assert streams(got) == {str(p) for p in paths}  # nothing under another name
    assert not t.stats.bytes_lost


@pytest.mark.parametrize(("start", "max_open"), [(b"", None), (b"#" * 1500 + b"\n", 2)])
def test_rewritten_at_once_to_as_many_bytes(tmp_path: Path, tail: Tail, start: bytes, max_open: int | None) -> None:
    """Files truncated and written again at once with other lines of the same total size are read
    anew, each cut counted: small open files by their head, larger parked ones by the fingerprint
    of what was read."""
    t = tail(tmp_path, max_open=max_open)
    t.poll()
    paths = [tmp_path / f"f{i}.log" for i in range(4)]
    for path in paths:
        path.write_bytes(start + lines(100, 110))
    got = drain(t)
    time.sleep(0.02)  # a later modification time than the first write's
    for path in paths:
        path.write_bytes(start + lines(120, 130))  # as many bytes: 120 * 7 has as many digits as 100 * 7
    got += drain(t)
    for path in paths:
        assert data(got, path) == start + lines(100, 110) + start + lines(120, 130), path
        assert t.stats.truncations[str(path)] == 1


def test_symlinked_subdirectories_are_followed_once(tmp_path: Path, tail: Tail) -> None:
    """Symlinked subdirectories are followed; a loop ends; a file reachable by two paths is read once."""
    real = tmp_path / "real"
    real.mkdir()
    outside = tmp_path / "outside"
    (outside / "deep").mkdir(parents=True)
    watched = tmp_path / "watched"
    watched.mkdir()
    (watched / "real").symlink_to(real)
    (watched / "again").symlink_to(real)
    (watched / "loop").symlink_to(watched)
    (watched / "ext").symlink_to(outside)
    t = tail(watched)
    t.poll()
    (real / "a.log").write_bytes(lines(0, 3))
    (outside / "deep" / "b.log").write_bytes(lines(3, 5))
    got = drain(t)
    assert data(got).count(line(0)) == 1
    assert sorted(c.data for c in got) == sorted([lines(0, 3), lines(3, 5)])
    assert {c.stream for c in got} == {str(watched / "again" / "a.log"), str(watched / "ext" / "deep" / "b.log")}


def test_file_there_at_start_but_seen_later_is_read_from_its_end(tmp_path: Path, tail: Tail) -> None:
    """A file first seen after start is read from its end if last written before start, else whole."""
    (tmp_path / "d").mkdir()
    t = tail(tmp_path / "d")
    old, new = tmp_path / "old.log", tmp_path / "d" / "new.log"
    old.write_bytes(lines(0, 5))
    os.utime(old, (time.time() - 3600, time.time() - 3600))
    t.poll()
    old.rename(tmp_path / "d" / "old.log")  # appears now, written an hour ago
    new.write_bytes(lines(10, 12))
    got = drain(t)
    append(tmp_path / "d" / "old.log", line(5))
    got += drain(t)
    assert data(got, tmp_path / "d" / "old.log") == line(5)
    assert data(got, new) == lines(10, 12)


def append(path: Path, text: bytes) -> None:
    """Append bytes as a logging process would."""
    with open(path, "ab") as fh:
        fh.write(text)


def _limit_files(n: int) -> None:
    resource.setrlimit(resource.RLIMIT_NOFILE, (n, n))


def test_two_thousand_files_at_a_256_descriptor_limit(tmp_path: Path) -> None:
    """Under ulimit -n 256, 2,000 files are all followed and one line appended to each is counted exactly once."""
    paths = [tmp_path / f"app-{i}.log" for i in range(2000)]
    for path in paths:
        path.write_bytes(b"before start\n")
    server = Server(str(tmp_path), preexec_fn=lambda: _limit_files(256))
    try:
        server.wait_for(lambda s: total(s, "logmetrics_open_files") == 2000, timeout=30)
        for i, path in enumerate(paths):
            append(path, line(i))
        got = server.wait_for(lambda s: total(s, "logmetrics_lines_read_total") >= 2000, timeout=30)
        got = server.wait_for(lambda s: total(s, "logmetrics_files_waiting") == 0, timeout=30)
        assert total(got, "logmetrics_lines_read_total") == 2000
        assert total(got, "logmetrics_rotations_total") == 0
        assert total(got, "logmetrics_truncations_total") == 0
        assert total(got, "logmetrics_read_errors_total") == 0
    finally:
        assert server.stop() == 0
    errors = server.proc.stderr.read().decode() if server.proc.stderr else ""
    assert "Too many open files" not in errors


def test_watch_waits_for_a_missing_directory(tmp_path: Path) -> None:
    """watch on a directory that does not exist yet warns once, starts, and reads its files once created."""
    later = tmp_path / "later"
    server = Server(str(later))
    try:
        warnings = [x for x in server.startup if "does not exist yet" in x]
        assert warnings == [f"logmetrics: WARNING: {later} does not exist yet; waiting for it\n"]
        later.mkdir()
        (later / "a.log").write_bytes(lines(0, 3))
        got = server.wait_for(lambda s: total(s, "logmetrics_lines_read_total") >= 3)
        assert total(got, "logmetrics_lines_read_total") == 3
    finally:
        assert server.stop() == 0


def test_a_glob_that_matches_nothing_yet(tmp_path: Path) -> None:
    """watch on a glob that matches no file warns once and reads a matching file created later; --oneshot refuses it."""
    pattern = str(tmp_path / "logs" / "*.log")
    server = Server(pattern)
    try:
        assert [x for x in server.startup if "matches no file" in x] == [
            f"logmetrics: WARNING: {pattern} matches no file yet; waiting for one\n"]
        (tmp_path / "logs").mkdir()
        (tmp_path / "logs" / "a.log").write_bytes(lines(0, 2))
        got = server.wait_for(lambda s: total(s, "logmetrics_lines_read_total") >= 2)
        assert total(got, "logmetrics_lines_read_total") == 2
    finally:
        assert server.stop() == 0
    once = subprocess.run([sys.executable, "-m", "logmetrics", "watch", "--oneshot", pattern.replace("logs", "none")],
                          capture_output=True, text=True, timeout=60)
    assert once.returncode == 2 and once.stderr.startswith("logmetrics: error: no file matches "), once.stderr


_AS_NOBODY = """
import os, sys
from logmetrics.cli.main import main
import logmetrics.app.runner, logmetrics.store.exposition, logmetrics.plugins, logmetrics_parsers.vllm
if os.geteuid() == 0:  # root reads any file: become nobody
    os.setgroups([])
    os.setgid(65534)
    os.setuid(65534)
main(sys.argv[1:])
"""


def test_oneshot_unreadable_named_file_exits_2(shared_dir: Path) -> None:
    """--oneshot prints what it could read and exits 2 with one error line naming the unreadable input."""
    ok, secret = shared_dir / "vllm.log", shared_dir / "secret.log"
    ok.write_text(access_line(1))
    secret.write_bytes(b"hidden\n")
    ok.chmod(0o644)
    secret.chmod(0)
    proc = subprocess.run([sys.executable, "-c", _AS_NOBODY, "watch", "--oneshot", str(ok), str(secret)],
                          capture_output=True, text=True, timeout=60)
    assert proc.returncode == 2, proc.stderr
    assert proc.stderr == f"logmetrics: error: cannot read {secret}: Permission denied\n"
    assert total(parse(proc.stdout), "logmetrics_lines_read_total") == 1


_NO_DESCRIPTOR = """
import errno, os, sys
from logmetrics.cli.main import main
real = os.open
def refused(path, flags, *args, **kwargs):  # every descriptor in use, as under a tiny ulimit -n
    if str(path).endswith("starved.log"):
        raise OSError(errno.EMFILE, "Too many open files")
    return real(path, flags, *args, **kwargs)
os.open = refused
main(sys.argv[1:])
"""


def test_oneshot_file_that_never_gets_a_descriptor_exits_2(tmp_path: Path) -> None:
    """A file that no descriptor was ever free for is not read: --oneshot says so and exits 2,
    with what the other files held printed (it printed nothing and exited 0)."""
    ok, starved = tmp_path / "vllm.log", tmp_path / "starved.log"
    ok.write_text(access_line(1))
    starved.write_text(access_line(2))
    proc = subprocess.run([sys.executable, "-c", _NO_DESCRIPTOR, "watch", "--oneshot", "--workers", "1", str(tmp_path)],
                          capture_output=True, text=True, timeout=60)
    assert proc.returncode == 2, proc.stderr
    assert proc.stderr.startswith(f"logmetrics: error: cannot read {starved}: no file descriptor is left for it "
                                  "(the open-file limit, ulimit -n, is "), proc.stderr
    assert total(parse(proc.stdout), "logmetrics_lines_read_total") == 1


_LATER_READABLE = """
import json, os, sys
from logmetrics.sources.chunks import SourceStats
from logmetrics.sources.tailer import FileTailer
from logmetrics.sources.tailfile import LineCutter, TailFile
if os.geteuid() == 0:
    os.setgroups([])
    os.setgid(65534)
    os.setuid(65534)
tailer = FileTailer([sys.argv[1]], from_beginning=False, stats=SourceStats())
for turn in range(2):
    if turn:
        sys.stdin.readline()
    print(json.dumps([c.data.decode() for c in tailer.poll()]), flush=True)
sys.stdin.readline()
print(json.dumps([c.data.decode() for c in tailer.poll()]), flush=True)
"""


def test_file_in_a_directory_unreadable_at_start_is_read_from_its_end(shared_dir: Path) -> None:
    """Once a directory unreadable at start can be read, its old files are read from their end, not whole."""
    sub = shared_dir / "sub"
    sub.mkdir()
    log = sub / "a.log"
    log.write_bytes(b"old 1\nold 2\n")
    log.chmod(0o644)
    os.utime(log, (time.time() - 3600, time.time() - 3600))
    sub.chmod(0o700)
    proc = subprocess.Popen([sys.executable, "-c", _LATER_READABLE, str(shared_dir)], stdin=subprocess.PIPE,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    assert proc.stdin is not None and proc.stdout is not None
    first = json.loads(proc.stdout.readline())
    sub.chmod(0o755)
    proc.stdin.write("go\n")
    proc.stdin.flush()
    second = json.loads(proc.stdout.readline())
    append(log, b"new\n")
    proc.stdin.write("go\n")
    proc.stdin.flush()
    third = json.loads(proc.stdout.readline())
    _, stderr = proc.communicate(timeout=30)
    assert proc.returncode == 0, stderr
    assert (first, second, third) == ([], [], ["new\n"])


def test_resume_with_few_descriptors_goes_on_from_saved_positions(tmp_path: Path, tail: Tail) -> None:
    """A restart with room for 2 open files reads every saved file from its saved position, none twice."""
    paths = [tmp_path / f"f{i}.log" for i in range(6)]
    first = tail(tmp_path)
    first.poll()
    for i, path in enumerate(paths):
        path.write_bytes(line(i))
    drain(first)
    positions, saved_at = first.positions(), time.time()
    first.close()
    for i, path in enumerate(paths):
        append(path, line(10 + i))
    second = tail(tmp_path, max_open=2)
    second.resume(positions, saved_at)
    got = drain(second)
    assert [data(got, p) for p in paths] == [line(10 + i) for i in range(6)]


def test_a_copy_compared_while_its_original_is_cut_is_held_back(tmp_path: Path) -> None:
    """A copy whose original is truncated between its size check and the comparison is not called new."""
    text = "".join(access_line(i) for i in range(13)).encode()
    (tmp_path / "x.log").write_bytes(text)
    (tmp_path / "x.log.1").write_bytes(text)
    ofd = os.open(tmp_path / "x.log", os.O_RDONLY)
    cfd = os.open(tmp_path / "x.log.1", os.O_RDONLY)
    try:
        st = os.fstat(ofd)
        original = TailFile("x.log", str(tmp_path / "x.log"), ofd, (st.st_dev, st.st_ino), text[:1024],
                            LineCutter(1 << 20), 1)
        assert same_tail(cfd, original, len(text))
        with open(tmp_path / "x.log", "r+b") as f:  # copytruncate: cut, then the writer goes on
            f.truncate(0)
            f.write(text[:200])
        assert same_tail(cfd, original, len(text))  # the coming truncation decides, not this look
    finally:
        os.close(ofd)
        os.close(cfd)


def test_a_copy_that_waits_for_a_descriptor_is_still_a_copy(tmp_path: Path, tail: Tail) -> None:
    """A copy that cannot be opened in the poll that finds its original cut is still read as a copy later."""
    a, b = tmp_path / "a.log", tmp_path / "b.log"
    a.write_bytes(line(0))
    b.write_bytes(line(1))
    t = tail(tmp_path, max_open=2, from_beginning=True)
    got = drain(t)
    append(a, line(2))  # neither file is read to its end now: neither can be closed for room
    append(b, line(3))
    shutil.copyfile(a, tmp_path / "a.log.1")
    with open(a, "r+b") as fh:
        fh.truncate(0)
    append(a, line(4) + line(5))
    got += drain(t)
    assert sorted(data(got, a).splitlines(keepends=True)) == [line(0), line(2), line(4), line(5)]  # the copy's, later
    assert data(got, b) == line(1) + line(3)
    assert streams(got) == {str(a), str(b)}
    assert t.stats.truncations[str(a)] == 1


def test_copytruncate_round_after_round_over_the_same_copy(tmp_path: Path, tail: Tail) -> None:
    """cp x.log x.log.1 over the last round's copy (still drained) and truncate, three rounds: every line once."""
    log, copy = tmp_path / "x.log", tmp_path / "x.log.1"
    log.write_bytes(b"")
    t = tail(tmp_path, from_beginning=True)
    got = drain(t)
    n = 0
    for _ in range(3):
        append(log, lines(n, n + 3))
        got += drain(t)
        append(log, line(n + 3))  # written after the last read: only the copy holds it
        with open(copy, "wb") as out:  # cp writes over the old copy, the same file
            out.write(log.read_bytes())
        with open(log, "r+b") as fh:
            fh.truncate(0)
        append(log, line(n + 4))
        got += drain(t)
        n += 5
    assert sorted(data(got).splitlines(keepends=True)) == [line(i) for i in range(15)]
    assert streams(got) == {str(log)}
    assert t.stats.truncations[str(log)] == 3


def test_a_copy_seen_empty_is_the_copy_of_the_file_beside_it(tmp_path: Path, tail: Tail) -> None:
    """cp creates the copy empty: seen so, it matches any x.log; the x.log in its own directory is its original."""
    a, b = tmp_path / "a" / "x.log", tmp_path / "b" / "x.log"
    for path in (a, b):
        path.parent.mkdir()
        path.write_bytes(b"")
    t = tail(tmp_path, from_beginning=True)
    got = drain(t)
    append(a, lines(0, 5))
    append(b, lines(100, 105))
    got += drain(t)
    copy = b.parent / "x.log-1"
    copy.write_bytes(b"")  # cp has created the copy, not written it yet
    got += drain(t)
    append(b, line(105))  # not read yet: only the copy will hold it
    copy.write_bytes(b.read_bytes())
    with open(b, "r+b") as fh:
        fh.truncate(0)
    append(b, line(106))
    got += drain(t)
    assert data(got, a) == lines(0, 5)
    assert sorted(data(got, b).splitlines(keepends=True)) == [line(i) for i in range(100, 107)]
    assert streams(got) == {str(a), str(b)}
    assert t.stats.truncations[str(b)] == 1


def _shift_twice(log: Path, first: int) -> None:
    """logrotate's numbered shift twice before the next look: the file made between is never seen at ``log``."""
    for n in range(2):
        if log.with_name("x.log.1").exists():
            os.rename(log.with_name("x.log.1"), log.with_name("x.log.2"))
        os.rename(log, log.with_name("x.log.1"))
        log.write_bytes(lines(first + 10 * n, first + 10 * n + 3))


def _x_log_read(tmp_path: Path, tail: Tail) -> tuple[Path, FileTailer, list[Chunk]]:
    """x.log followed from its start, lines 0-2 written and read: the file, its tailer, what it read."""
    log = tmp_path / "x.log"
    log.write_bytes(b"")
    t = tail(tmp_path, from_beginning=True)
    got = drain(t)
    append(log, lines(0, 3))
    return log, t, got + drain(t)


def _all_under(got: list[Chunk], log: Path, numbers: list[int]) -> None:
    """The lines numbered ``numbers`` were read once each (in any order), all under the stream ``log``."""
    assert sorted(data(got, log).splitlines(keepends=True)) == sorted(line(i) for i in numbers)
    assert streams(got) == {str(log)}


def test_a_file_rotated_out_unseen_counts_under_its_stream(tmp_path: Path, tail: Tail) -> None:
    """x.log shifted twice between two polls: the file that was at x.log meanwhile is read under x.log."""
    log, t, got = _x_log_read(tmp_path, tail)
    append(log, lines(3, 5))  # not read yet: read from x.log.2
    _shift_twice(log, 100)
    got += drain(t)
    _all_under(got, log, [*range(5), 100, 101, 102, 110, 111, 112])
    assert t.stats.rotations[str(log)] == 2  # the file never seen at x.log counts as a rotation too


def _read_then_down(tmp_path: Path, tail: Tail, log: Path) -> tuple[list[Chunk], list[Position], float]:
    """``log`` with lines 0-2, read whole by a tailer that then stops, and lines 3-4 written while it
    is down: what it read, its positions, and a save time before any write since, by the clock."""
    log.write_bytes(lines(0, 3))
    first = tail(tmp_path, from_beginning=True)
    got = drain(first)
    positions, saved_at = first.positions(), time.time() - 1.0
    first.close()
    append(log, lines(3, 5))
    return got, positions, saved_at


def test_a_saved_file_the_first_listing_misses_is_resumed_when_found(tmp_path: Path, tail: Tail) -> None:
    """A saved file missing from the first listing after a restart (a rename in flight hides a file
    from a listing) and found at the next one, renamed: read on from its saved position under its
    stream, and not declared lost."""
    logs, away = tmp_path / "logs", tmp_path / "away"
    logs.mkdir()
    log = logs / "x.log"
    got, positions, saved_at = _read_then_down(logs, tail, log)
    log.rename(away)  # out of the listing's sight for the first poll
    second = tail(logs)
    second.resume(positions, saved_at)
    got += second.poll()
    assert not second.stats.files_lost
    assert [p.offset for p in second.positions() if p.stream == str(log)] == [len(lines(0, 3))]  # still saved
    away.rename(logs / "x.log.1")
    append(logs / "x.log.1", lines(5, 6))
    got += drain(second)
    _all_under(got, log, list(range(6)))
    assert not second.stats.files_lost


def test_a_rotated_file_still_read_and_deleted_while_down_is_declared_lost(tmp_path: Path, tail: Tail) -> None:
    """x.log renamed to x.log.1 (still read: its writer may go on a moment), then deleted while
    logmetrics was down: what was written to it after the last commit cannot be known, and the
    stream is counted in logmetrics_files_lost_total, as for its current file."""
    log, old = tmp_path / "x.log", tmp_path / "x.log.1"
    log.write_bytes(lines(0, 3))
    first = tail(tmp_path, from_beginning=True, rotate_wait=60.0)
    drain(first)
    log.rename(old)
    log.write_bytes(lines(3, 5))
    drain(first)
    positions, saved_at = first.positions(), time.time() - 1.0
    first.close()
    assert len(positions) == 2  # the new x.log, and x.log.1 still read
    old.unlink()
    second = tail(tmp_path)
    second.resume(positions, saved_at)
    for _ in range(3):  # (missing from the first listing: looked for at the next one, then declared)
        assert not second.poll()
    assert second.stats.files_lost == {str(log): 1}


def test_a_file_rotated_out_while_down_counts_under_its_stream(tmp_path: Path, tail: Tail) -> None:
    """x.log shifted twice while logmetrics was down: every line is read once, all under x.log."""
    log = tmp_path / "x.log"
    got, positions, saved_at = _read_then_down(tmp_path, tail, log)
    _shift_twice(log, 100)
    second = tail(tmp_path)
    second.resume(positions, saved_at)
    got += drain(second)
    _all_under(got, log, [*range(5), 100, 101, 102, 110, 111, 112])
    assert second.stats.rotations[str(log)] == 2


def test_two_copytruncates_while_down_count_under_the_stream(tmp_path: Path, tail: Tail) -> None:
    """x.log copytruncated twice while logmetrics was down (x.log.1 shifted to x.log.2 between): the
    older copy is read from the saved offset, the copy of the lines between the cuts whole, all under x.log."""
    log, one, two = tmp_path / "x.log", tmp_path / "x.log.1", tmp_path / "x.log.2"
    got, positions, saved_at = _read_then_down(tmp_path, tail, log)
    for start in (100, 200):  # logrotate's copytruncate with a shift, twice
        if one.exists():
            one.rename(two)
        shutil.copyfile(log, one)
        with open(log, "r+b") as fh:
            fh.truncate(0)
        append(log, lines(start, start + 3))
    second = tail(tmp_path)
    second.resume(positions, saved_at)
    got += drain(second)
    _all_under(got, log, [*range(5), 100, 101, 102, 200, 201, 202])
    assert second.stats.truncations[str(log)] == 2  # one cut seen, and the copy made between the cuts


def test_bytes_cut_away_unread_with_no_copy_are_counted_lost(tmp_path: Path, tail: Tail) -> None:
    """A file truncated with a backlog it was known to hold and no copy found: the backlog is counted lost."""
    log = tmp_path / "x.log"
    log.write_bytes(b"")
    t = tail(tmp_path, from_beginning=True, read_size=1024, poll_budget=1024, copy_wait=0.0)
    t.poll()
    backlog = lines(0, 400)
    append(log, backlog)
    first = data(t.poll())  # one budget's worth: the rest is known to be there, not read
    assert 0 < len(first) < len(backlog)
    with open(log, "r+b") as fh:
        fh.truncate(0)
    append(log, line(1000))
    got = drain(t)
    assert data(got, log) == line(1000)
    assert t.stats.bytes_lost == {str(log): len(backlog) - len(first)}


def test_bytes_cut_away_unread_are_counted_lost_at_the_end_of_input(tmp_path: Path, tail: Tail) -> None:
    """--oneshot: a file truncated with a backlog it was known to hold, whose copy has not shown up
    when the input ends (before the copy wait), has its backlog counted lost, not dropped unsaid."""
    log = tmp_path / "x.log"
    log.write_bytes(b"")
    t = tail(tmp_path, from_beginning=True, read_size=1024, poll_budget=1024)
    t.poll()
    backlog = lines(0, 400)
    append(log, backlog)
    first = data(t.poll())
    assert 0 < len(first) < len(backlog)
    with open(log, "r+b") as fh:
        fh.truncate(0)
    drain(t)
    assert not t.stats.bytes_lost  # still waiting for a copy
    t.flush()
    assert t.stats.bytes_lost == {str(log): len(backlog) - len(first)}


def _waiting_for_a_descriptor(tail: Tail, root: Path, a: Path, beside: Path) -> tuple[FileTailer, list[Chunk]]:
    """A tailer of ``root`` with room for 2 open files: b.log and c.log in ``beside`` keep theirs
    with a backlog of 2,000 lines each, while ``a``, written to (lines 5000-5002), waits for one."""
    b, c = beside / "b.log", beside / "c.log"
    for path in (a, b, c):
        path.write_bytes(b"")
    t = tail(root, from_beginning=True, max_open=2, read_size=1024, poll_budget=1024)
    drain(t)
    append(b, lines(0, 2000))
    append(c, lines(0, 2000))
    got = t.poll()
    append(a, lines(5000, 5003))
    got += t.poll()  # a changed, but waits for a descriptor
    assert t.stats.files_waiting >= 1
    return t, got


def test_a_file_deleted_while_closed_for_descriptors_is_let_go_and_counted(tmp_path: Path, tail: Tail) -> None:
    """A parked file that grew and was deleted before it got a descriptor: its unread bytes lost, its stream goes on."""
    a = tmp_path / "a.log"
    t, _ = _waiting_for_a_descriptor(tail, tmp_path, a, tmp_path)
    a.unlink()
    got = drain(t, rounds=1000)
    assert data(got, a) == b""
    assert t.stats.bytes_lost == {str(a): len(lines(5000, 5003))}
    a.write_bytes(line(6000))  # the stream goes on with a new file
    got = drain(t)
    assert data(got, a) == line(6000)


@pytest.mark.parametrize("back", [True, False])
def test_a_waiting_file_whose_directory_moves_away(tmp_path: Path, tail: Tail, back: bool,
                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    """A file closed for want of descriptors, with lines unread, whose directory leaves the tree:
    read on from where it was if the directory comes back; if not, once it is forgotten, its
    unread bytes are counted lost (not at once: a directory moved out may come back)."""
    logs = tmp_path / "logs"
    sub = logs / "sub"
    sub.mkdir(parents=True)
    a, b, c = sub / "a.log", logs / "b.log", logs / "c.log"
    t, got = _waiting_for_a_descriptor(tail, logs, a, logs)
    sub.rename(tmp_path / "away")
    for _ in range(3):  # missing from three listings
        got += t.poll()
    assert not t.stats.bytes_lost
    if back:
        (tmp_path / "away").rename(sub)
        got += drain(t, rounds=1000)
        assert data(got, a) == lines(5000, 5003)
        assert not t.stats.bytes_lost
    else:
        monkeypatch.setattr(identity, "KEEP", 0.0)
        t.rescan_interval = 0.0  # the safety rescan, where files long gone are forgotten
        got += drain(t, rounds=1000)
        got += t.poll()
        assert data(got, a) == b""
        assert t.stats.bytes_lost == {str(a): len(lines(5000, 5003))}
    assert data(got, b) == lines(0, 2000) and data(got, c) == lines(0, 2000)


def test_a_copytruncate_seen_only_after_a_rename_reads_the_copy_from_the_cut(tmp_path: Path, tail: Tail) -> None:
    """The stream's file renamed, then found cut (its copy made) only at a later look: the copy is read from the cut."""
    log, rotated, copy = tmp_path / "x.log", tmp_path / "x.log.1", tmp_path / "x.log-1"
    log.write_bytes(lines(0, 5))
    t = tail(tmp_path, from_beginning=True)
    got = drain(t)
    os.rename(log, rotated)
    log.write_bytes(b"")
    got += drain(t)  # x.log.1 drained, read to its end
    append(rotated, lines(5, 8))  # written after that look: only the copy will hold them
    shutil.copyfile(rotated, copy)
    with open(rotated, "r+b") as fh:
        fh.truncate(0)
    append(rotated, line(100))
    got += drain(t)
    assert sorted(data(got, log).splitlines(keepends=True)) == [*(line(i) for i in range(8)), line(100)]
    assert streams(got) == {str(log)}


@pytest.mark.parametrize("then", ["delete", "rename"])
def test_a_copytruncate_and_a_rotation_between_the_cut_check_and_the_listing(
        tmp_path: Path, tail: Tail, then: str) -> None:
    """cp + truncate + rm (or mv) just after a poll checked for cuts: the copy waits for the cut, read once from it."""
    log, copy = tmp_path / "x.log", tmp_path / "x.log-1"
    log.write_bytes(b"")
    t = tail(tmp_path, from_beginning=True)
    got = drain(t)
    append(log, lines(0, 5))
    got += drain(t)
    append(log, lines(5, 8))  # not read yet: only the copy will hold them
    t.rescan_interval = 0.0  # the race is inside a pass that lists the directory: with inotify too, make each one
    scan = t._scan

    def faults_then_scan(cuts: list[Cut]) -> None:  # the faults land between the two steps of one poll
        shutil.copyfile(log, copy)
        with open(log, "r+b") as fh:
            fh.truncate(0)
        if then == "delete":
            log.unlink()
        else:
            os.rename(log, tmp_path / "x.log.1")
        log.write_bytes(line(100))
        t._scan = scan  # type: ignore[method-assign]  # once
        scan(cuts)

    t._scan = faults_then_scan  # type: ignore[method-assign]  # a race made to happen, not a mock
    got += drain(t)
    assert sorted(data(got, log).splitlines(keepends=True)) == [*(line(i) for i in range(8)), line(100)]
    assert streams(got) == {str(log)}


def test_a_parked_symlinked_file_is_drained_from_its_real_path_after_the_link_moves(
        tmp_path: Path, tail: Tail) -> None:
    """x.log -> a.log, closed for want of descriptors, grows; the link moves to b.log: a.log's lines are read."""
    logs, targets = tmp_path / "logs", tmp_path / "targets"
    logs.mkdir()
    targets.mkdir()
    link, a, b = logs / "x.log", targets / "a.log", targets / "b.log"
    a.write_bytes(b"")
    link.symlink_to(a)
    busy = [logs / "busy1.log", logs / "busy2.log"]
    for path in busy:
        path.write_bytes(b"")
    t = tail(logs, from_beginning=True, max_open=2, read_size=1024, poll_budget=1024)
    got = drain(t)
    for path in busy:  # they keep both descriptors while they have a backlog
        append(path, lines(0, 2000))
    got += t.poll()
    append(a, lines(5000, 5003))
    got += t.poll()  # a.log grew, but waits for a descriptor
    assert t.stats.files_waiting >= 1
    b.write_bytes(line(6000))
    tmp = logs / "x.tmp"
    tmp.symlink_to(b)
    os.replace(tmp, link)  # the link moves on: no listed path leads to a.log now
    got += drain(t, rounds=1000)
    assert data(got, link) == lines(5000, 5003) + line(6000)
    assert t.stats.bytes_lost == {}


def test_a_symlinked_file_left_behind_while_down_is_resumed_from_its_real_path(tmp_path: Path, tail: Tail) -> None:
    """x.log -> a.log read, saved; a.log grows and the link moves to b.log while down: a.log's rest is read once."""
    logs, targets = tmp_path / "logs", tmp_path / "targets"
    logs.mkdir()
    targets.mkdir()
    link, a, b = logs / "x.log", targets / "a.log", targets / "b.log"
    a.write_bytes(lines(0, 3))
    link.symlink_to(a)
    first = tail(logs, from_beginning=True)
    got = drain(first)
    positions, saved_at = first.positions(), time.time() - 1.0  # before any write below, by the clock
    assert positions[0].real == str(a)
    first.close()
    append(a, lines(3, 5))
    b.write_bytes(line(100))
    tmp = logs / "x.tmp"
    tmp.symlink_to(b)
    os.replace(tmp, link)
    second = tail(logs)
    second.resume(positions, saved_at)
    got += drain(second)
    assert data(got, link) == lines(0, 5) + line(100)


def test_a_file_made_and_rotated_after_a_look_that_found_no_file_counts_under_its_stream(
        tmp_path: Path, tail: Tail) -> None:
    """mv x.log x.log.1, a look finds no x.log, then x.log is made, shifted and made again: all under x.log."""
    log, t, got = _x_log_read(tmp_path, tail)
    os.rename(log, tmp_path / "x.log.1")
    got += drain(t)  # a look with no x.log: the stream is drained
    log.write_bytes(lines(100, 103))
    os.rename(tmp_path / "x.log.1", tmp_path / "x.log.2")
    os.rename(log, tmp_path / "x.log.1")
    log.write_bytes(lines(200, 202))
    got += drain(t)
    assert sorted(data(got, log).splitlines(keepends=True)) == sorted(
        [*(line(i) for i in range(3)), *(line(i) for i in range(100, 103)), line(200), line(201)])
    assert streams(got) == {str(log)}


@pytest.mark.parametrize("name", ["x.log.1", "x-20240101.log"])
def test_logs_of_identical_lines_rotated_unseen_are_read_not_held_as_copies(
        tmp_path: Path, tail: Tail, name: str) -> None:
    """Logs of byte-identical lines (health probes): one made and rotated between two looks is read, not held."""
    same = b'INFO:     127.0.0.1:5000 - "GET /health HTTP/1.1" 200 OK\n'
    log, rotated = tmp_path / "x.log", tmp_path / name
    log.write_bytes(b"")
    t = tail(tmp_path, from_beginning=True)
    got = drain(t)
    append(log, same * 5)
    got += drain(t)
    os.rename(log, tmp_path / "x.log.old")  # rotated (kept under a name of its own)
    log.write_bytes(same * 7)  # never seen at x.log:
    os.rename(log, rotated)  # rotated too before the next look
    log.write_bytes(same * 9)  # as long as the one rotated, or longer: alike to the end
    got += drain(t)
    assert data(got).count(b"\n") == 5 + 7 + 9
    assert streams(got) == {str(log)}


def test_files_under_a_path_the_state_did_not_have_are_placed_as_at_a_first_start(tmp_path: Path, tail: Tail) -> None:
    """--state-adopt with a new directory and --from-beginning: its files, older than the state, are read whole."""
    old, new = tmp_path / "old", tmp_path / "new"
    old.mkdir()
    new.mkdir()
    (old / "a.log").write_bytes(lines(0, 3))
    (new / "y.log").write_bytes(lines(100, 120))
    first = tail(old, from_beginning=True)
    got = drain(first)
    positions, saved_at = first.positions(), time.time() + 1.0  # saved after every write above
    first.close()
    second = tail(old, new, from_beginning=True)
    second.resume(positions, saved_at, [str(old)])
    got += drain(second)
    assert data(got, old / "a.log") == lines(0, 3)
    assert data(got, new / "y.log") == lines(100, 120)


def test_a_copy_taken_before_anything_of_its_file_was_read_counts_under_the_stream(
        tmp_path: Path, tail: Tail) -> None:
    """x.log followed while empty, written, copied and truncated before the next look: the copy is x.log's."""
    log = tmp_path / "x.log"
    log.write_bytes(b"")
    t = tail(tmp_path, from_beginning=True)
    got = drain(t)
    append(log, lines(0, 4))
    shutil.copyfile(log, tmp_path / "x.log-1")
    with open(log, "r+b") as fh:
        fh.truncate(0)
    append(log, line(100))
    got += drain(t)
    _all_under(got, log, [0, 1, 2, 3, 100])


def test_a_copy_taken_before_anything_of_its_file_was_read_is_not_read_twice(tmp_path: Path, tail: Tail) -> None:
    """x.log followed while empty, written and copied (``cp``, no truncation) before the next look:
    the lines are read once, from x.log; the copy that stays is not read (it was read twice before)."""
    log = tmp_path / "x.log"
    log.write_bytes(b"")
    t = tail(tmp_path, from_beginning=True, copy_wait=0.0)
    got = drain(t)
    append(log, lines(0, 4))
    shutil.copyfile(log, tmp_path / "x.log.1")
    got += drain(t)
    got += drain(t)  # after the wait: kept, not read
    assert data(got, log) == lines(0, 4)
    assert data(got, tmp_path / "x.log.1") == b""


def test_a_kept_copy_written_over_by_the_next_cp_is_not_read_again(tmp_path: Path, tail: Tail) -> None:
    """x.log.1, a copy kept beside x.log, is written over by the next ``cp x.log x.log.1`` (the same
    inode, longer now): it is a copy again, and what it gained are x.log's lines, read there once."""
    log, bak = tmp_path / "x.log", tmp_path / "x.log.1"
    t = tail(tmp_path, copy_wait=0.0)
    t.poll()
    log.write_bytes(lines(0, 40))
    got = drain(t)
    shutil.copyfile(log, bak)
    got += drain(t)
    got += drain(t)  # kept
    ino = bak.stat().st_ino
    append(log, lines(40, 50))
    got += drain(t)
    shutil.copyfile(log, bak)
    assert bak.stat().st_ino == ino
    got += drain(t)
    got += drain(t)
    assert data(got, log) == lines(0, 50)
    assert data(got, bak) == b""
    append(bak, lines(100, 105))  # written to later: that much is new
    got += drain(t)
    got += drain(t)
    assert data(got) == lines(0, 50) + lines(100, 105)


def test_a_copytruncate_whose_file_starts_again_with_the_same_lines_is_seen(tmp_path: Path, tail: Tail) -> None:
    """x.log read a little, then written, copied and cut, and written again from the same lines it
    began with (a banner) past where it had been read: the cut cannot show in x.log itself, but its
    copy, longer than x.log is now, proves it: the copy is read from the cut, x.log from its start."""
    log, t, got = _x_log_read(tmp_path, tail)
    append(log, lines(3, 500))
    shutil.copyfile(log, tmp_path / "x.log.1")
    with open(log, "r+b") as fh:
        fh.truncate(0)
    append(log, lines(0, 3) + lines(1000, 1010))
    got += drain(t)
    got += drain(t)
    _all_under(got, log, [*range(3), *range(500), *range(1000, 1010)])
    assert t.stats.truncations[str(log)] == 1


@pytest.mark.parametrize("emptied", [False, True])
def test_a_copy_there_at_start_written_over_by_the_next_cp_is_not_read(tmp_path: Path, tail: Tail,
                                                                       emptied: bool) -> None:
    """x.log.1, an old copy there at start (followed as a file of its own, from its end), is written
    over by the next ``cp x.log x.log.1``: it grew into x.log's copy, and what it gained are x.log's
    lines, read there once; lines written to it later still count. ``emptied``: a look comes after
    the cp emptied it (cp empties its target first) and before the copy's bytes: no cut either."""
    log, bak = tmp_path / "x.log", tmp_path / "x.log.1"
    log.write_bytes(lines(0, 40))
    shutil.copyfile(log, bak)
    t = tail(tmp_path, copy_wait=0.0)
    got = drain(t)
    append(log, lines(40, 50))
    got += drain(t)
    if emptied:
        with open(bak, "r+b") as fh:
            fh.truncate(0)
        got += drain(t)
    shutil.copyfile(log, bak)
    got += drain(t)
    got += drain(t)
    assert data(got) == lines(40, 50)
    assert t.stats.truncations.get(str(bak), 0) == 0
    append(bak, lines(100, 105))
    got += drain(t)
    assert data(got) == lines(40, 50) + lines(100, 105)


def _while_down(tmp_path: Path, tail: Tail, before: FileTailer, *writes: Callable[[], object]) -> FileTailer:
    """Save ``before``'s positions and stop it, make ``writes`` while it is down (after the save, by
    the clock), and start a tailer over ``tmp_path`` that goes on from those positions."""
    positions, saved_at = before.positions(), time.time()
    before.close()
    time.sleep(0.01)
    for write in writes:
        write()
    after = tail(tmp_path, copy_wait=0.0)
    after.resume(positions, saved_at)
    return after


def _copytruncate(log: Path, copy: Path) -> None:
    """``cp log copy`` (over the copy there: the same file, written over) and a truncation of ``log``."""
    shutil.copyfile(log, copy)
    with open(log, "r+b") as fh:
        fh.truncate(0)


def test_a_copy_saved_as_a_stream_and_written_over_while_down_is_not_read(tmp_path: Path, tail: Tail) -> None:
    """x.log.1, a copy there at start, is saved as a stream of its own; while logmetrics is down,
    x.log is written to and copied over x.log.1 again: after the restart what x.log.1 gained is not
    read (it is x.log's, read there), and lines written to it later are."""
    log, bak = tmp_path / "x.log", tmp_path / "x.log.1"
    log.write_bytes(lines(0, 40))
    shutil.copyfile(log, bak)
    first = tail(tmp_path, copy_wait=0.0)
    drain(first)
    second = _while_down(tmp_path, tail, first, lambda: append(log, lines(40, 50)), lambda: shutil.copyfile(log, bak))
    got = drain(second)
    got += drain(second)
    assert data(got) == lines(40, 50)
    append(bak, lines(100, 105))
    got += drain(second)
    assert data(got) == lines(40, 50) + lines(100, 105)


def test_a_copy_made_while_down_of_a_file_saved_empty_is_not_read(tmp_path: Path, tail: Tail) -> None:
    """x.log is empty when its position is saved (its saved head is empty, and any file starts with
    that); while logmetrics is down it is written to and copied to x.log.1: the copy is x.log's
    (it starts and ends as x.log does there), so its lines count once, under x.log."""
    log, bak = tmp_path / "x.log", tmp_path / "x.log.1"
    log.write_bytes(b"")
    first = tail(tmp_path, copy_wait=0.0)
    drain(first)
    second = _while_down(tmp_path, tail, first, lambda: append(log, lines(0, 16)), lambda: shutil.copyfile(log, bak))
    got = drain(second)
    got += drain(second)
    assert data(got, log) == lines(0, 16)
    assert data(got, bak) == b""


def test_an_empty_copy_saved_as_a_stream_and_written_over_after_the_restart_is_not_read(
        tmp_path: Path, tail: Tail) -> None:
    """x.log and its empty copy x.log.1 are saved empty; after the restart, before the first poll,
    x.log is written to and copied over x.log.1: x.log.1 grew into x.log's copy, not read."""
    log, bak = tmp_path / "x.log", tmp_path / "x.log.1"
    log.write_bytes(b"")
    bak.write_bytes(b"")
    first = tail(tmp_path, copy_wait=0.0)
    drain(first)
    positions, saved_at = first.positions(), time.time()
    first.close()
    second = tail(tmp_path, copy_wait=0.0)
    second.resume(positions, saved_at)
    time.sleep(0.01)
    append(log, lines(0, 20))
    shutil.copyfile(log, bak)
    got = drain(second)
    got += drain(second)
    assert data(got, log) == lines(0, 20)
    assert data(got, bak) == b""


def test_a_copy_kept_at_a_restart_written_over_by_the_next_cp_is_not_read(tmp_path: Path, tail: Tail) -> None:
    """x.log.1, saved as a stream of its own, is written over by ``cp x.log x.log.1`` while logmetrics
    is down, and kept after the restart as x.log's copy; the next ``cp`` writes over it again: what it
    gained are x.log's lines, read there once."""
    log, bak = tmp_path / "x.log", tmp_path / "x.log.1"
    log.write_bytes(b"")
    bak.write_bytes(b"")
    first = tail(tmp_path, copy_wait=0.0)
    drain(first)
    append(log, lines(0, 11))
    got = drain(first)
    second = _while_down(tmp_path, tail, first, lambda: shutil.copyfile(log, bak))
    got += drain(second)
    append(log, lines(11, 17))
    got += drain(second)
    shutil.copyfile(log, bak)
    got += drain(second)
    got += drain(second)
    assert data(got, log) == lines(0, 17)
    assert data(got, bak) == b""


def test_an_empty_copy_that_stayed_written_over_by_a_copytruncate_is_its_copy(tmp_path: Path, tail: Tail) -> None:
    """x.log, empty, is copied and cut (x.log.1 is empty too, a copy that stays); then x.log is
    written to, read, and copied over x.log.1 and cut: x.log.1 is the copy of that cut, holding
    nothing unread, not the empty copy written to."""
    log, bak = tmp_path / "x.log", tmp_path / "x.log.1"
    log.write_bytes(b"")
    t = tail(tmp_path, copy_wait=0.0)
    t.poll()
    _copytruncate(log, bak)
    got = drain(t)
    got += drain(t)
    append(log, lines(0, 14))
    got += drain(t)
    _copytruncate(log, bak)
    got += drain(t)
    got += drain(t)
    assert data(got, log) == lines(0, 14)
    assert data(got, bak) == b""
    assert t.stats.truncations[str(log)] == 1


def test_a_copy_read_as_a_file_of_its_own_after_a_restart_written_over_by_a_copytruncate(
        tmp_path: Path, tail: Tail) -> None:
    """x.log, saved empty, is written to and copytruncated while logmetrics is down (x.log.1, which
    no saved figure tells from a file of its own, is read whole); after the restart the next
    copytruncate writes over x.log.1: it is that cut's copy, and no line counts twice."""
    log, bak = tmp_path / "x.log", tmp_path / "x.log.1"
    log.write_bytes(b"")
    first = tail(tmp_path, copy_wait=0.0)
    drain(first)
    second = _while_down(tmp_path, tail, first,
                        lambda: append(log, lines(0, 13)),
                        lambda: _copytruncate(log, bak),
                        lambda: append(log, lines(13, 28)))
    got = drain(second)
    _copytruncate(log, bak)
    got += drain(second)
    got += drain(second)
    assert sorted(data(got).splitlines(keepends=True)) == [line(i) for i in range(28)]


def test_an_empty_copy_drained_after_a_restart_written_over_by_a_copytruncate(tmp_path: Path, tail: Tail) -> None:
    """x.log is copytruncated twice while logmetrics is down, the second time while empty (x.log.1,
    written over, is empty: the copy of lines written between two cuts, drained under x.log); after
    the restart the next copytruncate writes over it: it is that cut's copy, and no line counts twice."""
    log, bak = tmp_path / "x.log", tmp_path / "x.log.1"
    log.write_bytes(b"")
    first = tail(tmp_path, copy_wait=0.0)
    drain(first)
    append(log, lines(0, 9))
    got = drain(first)
    second = _while_down(tmp_path, tail, first,
                        lambda: _copytruncate(log, bak),
                        lambda: _copytruncate(log, bak),
                        lambda: append(log, lines(9, 14)))
    got += drain(second)
    _copytruncate(log, bak)
    got += drain(second)
    got += drain(second)
    _all_under(got, log, list(range(14)))


def test_an_empty_copy_saved_and_written_over_by_a_copytruncate_while_down(tmp_path: Path, tail: Tail) -> None:
    """x.log.1, the empty copy of an empty x.log made while logmetrics is down, is followed as a file
    of its own and saved with nothing read of it; x.log is read and saved, then copytruncated over
    x.log.1 while logmetrics is down again: x.log.1 is that cut's copy, and no line counts twice."""
    log, bak = tmp_path / "x.log", tmp_path / "x.log.1"
    log.write_bytes(b"")
    first = tail(tmp_path, copy_wait=0.0)
    got = drain(first)
    second = _while_down(tmp_path, tail, first, lambda: _copytruncate(log, bak), lambda: append(log, lines(0, 3)))
    got += drain(second)
    third = _while_down(tmp_path, tail, second, lambda: _copytruncate(log, bak))
    got += drain(third)
    got += drain(third)
    _all_under(got, log, list(range(3)))


def test_a_copy_saved_as_a_file_of_its_own_written_over_by_a_copytruncate_while_down(
        tmp_path: Path, tail: Tail) -> None:
    """x.log.1, a copytruncate's copy made while logmetrics is down and read as a file of its own, is
    saved; the next copytruncate writes over it while logmetrics is down again: it is not cut, but
    that cut's copy, and no line counts twice."""
    log, bak = tmp_path / "x.log", tmp_path / "x.log.1"
    log.write_bytes(b"")
    first = tail(tmp_path, copy_wait=0.0)
    got = drain(first)
    second = _while_down(tmp_path, tail, first, lambda: append(log, lines(0, 17)), lambda: _copytruncate(log, bak),
                         lambda: append(log, lines(17, 33)))
    got += drain(second)
    third = _while_down(tmp_path, tail, second, lambda: _copytruncate(log, bak))
    got += drain(third)
    got += drain(third)
    assert sorted(data(got).splitlines(keepends=True)) == [line(i) for i in range(33)]


@pytest.mark.parametrize("from_beginning", [True, False])
def test_files_waiting_for_a_descriptor_at_a_crash_are_read_after_it(
        tmp_path: Path, tail: Tail, from_beginning: bool) -> None:
    """Room for 2 files: the others, found but not opened yet at the save, are read from where they would have been."""
    paths = [tmp_path / f"f{i}.log" for i in range(6)]
    for i, path in enumerate(paths):
        path.write_bytes(line(i))
    first = tail(tmp_path, from_beginning=from_beginning, max_open=2, read_size=1024, poll_budget=1024)
    for path in paths[:2]:  # the first two keep their descriptors with a backlog (read from the start)
        append(path, lines(1000, 1400))
    got = first.poll()
    for path in paths[:2]:  # (and one written after start, when read from the end)
        append(path, lines(2000, 2400))
    got += first.poll()
    new = tmp_path / "g.log"  # a file made after start, waiting too
    new.write_bytes(line(77))
    got += first.poll()
    assert first.stats.files_waiting >= (5 if from_beginning else 1)
    positions, saved_at = first.positions(), time.time() + 1.0  # after every write above
    assert len(positions) == 7
    first.close()
    for i, path in enumerate(paths):
        append(path, line(100 + i))
    second = tail(tmp_path, max_open=2, read_size=1024, poll_budget=1024)
    second.resume(positions, saved_at)
    got += drain(second, rounds=1000)
    for i, path in enumerate(paths[2:], 2):
        assert data(got, path) == (line(i) if from_beginning else b"") + line(100 + i), path
    assert data(got, new) == line(77)


@pytest.mark.parametrize("order", ["oldest first", "newest first"])
def test_two_copytruncates_between_two_looks_count_under_the_stream(tmp_path: Path, tail: Tail, order: str) -> None:
    """cp + truncate twice before the next look: the first copy is read from the cut, the second (lines never
    seen at x.log) whole, both under x.log, however the names sort."""
    log = tmp_path / "x.log"
    first, second = ("x.log-1", "x.log-2") if order == "oldest first" else ("x.log-2", "x.log-1")
    log.write_bytes(b"")
    t = tail(tmp_path, from_beginning=True)
    got = drain(t)
    append(log, lines(0, 5))
    got += drain(t)
    append(log, lines(5, 8))  # not read yet: only the first copy will hold them
    for name, more in ((first, lines(8, 11)), (second, line(100))):
        shutil.copyfile(log, tmp_path / name)
        with open(log, "r+b") as fh:
            fh.truncate(0)
        append(log, more)
    got += drain(t)
    _all_under(got, log, [*range(11), 100])
    assert t.stats.truncations[str(log)] == 2  # the cut never seen counts too


def test_a_copy_of_a_new_file_found_a_look_after_its_rotation_counts_under_the_stream(
        tmp_path: Path, tail: Tail) -> None:
    """x.log renamed, the new x.log copytruncated before it was seen, its copy found only at a later look (it
    waited for a descriptor, say): the copy's lines, never seen at x.log, are read once, under x.log."""
    log = tmp_path / "x.log"
    log.write_bytes(b"")
    t = tail(tmp_path, from_beginning=True)
    got = drain(t)
    append(log, lines(0, 5))
    got += drain(t)
    os.rename(log, tmp_path / "x.log-1")
    log.write_bytes(lines(5, 9))
    shutil.copyfile(log, tmp_path / "x.log-2.tmp")  # (.tmp: not looked at)
    with open(log, "r+b") as fh:
        fh.truncate(0)
    append(log, line(100))
    got += t.poll()
    os.rename(tmp_path / "x.log-2.tmp", tmp_path / "x.log-2")
    got += drain(t)
    _all_under(got, log, [*range(9), 100])


def test_identical_lines_shifted_twice_while_down_are_all_read(tmp_path: Path, tail: Tail) -> None:
    """A log of byte-identical lines shifted twice while logmetrics was down: the file made between, which
    starts and is named like a copy of the saved one, is no copy (that one was renamed whole): read once."""
    probe = b'INFO:     10.0.0.1:5000 - "GET /x HTTP/1.1" 200 OK\n'
    log = tmp_path / "x.log"
    log.write_bytes(probe * 120)
    first = tail(tmp_path, from_beginning=True)
    got = drain(first)
    positions, saved_at = first.positions(), time.time() - 1.0  # before any write below, by the clock
    first.close()
    append(log, probe * 5)
    for count in (30, 40):  # shifted, and a new x.log written, twice
        if log.with_name("x.log.1").exists():
            os.rename(log.with_name("x.log.1"), log.with_name("x.log.2"))
        os.rename(log, log.with_name("x.log.1"))
        log.write_bytes(probe * count)
    second = tail(tmp_path)
    second.resume(positions, saved_at)
    got += drain(second)
    assert data(got, log) == probe * (120 + 5 + 30 + 40)
    assert streams(got) == {str(log)}


def test_two_copytruncates_in_a_row_then_a_third(tmp_path: Path, tail: Tail) -> None:
    """cp + truncate twice between two looks (the second copy empty), then once more: each line once.

    The empty copy waited as "a copy taken before a cut" and took the third cut, so the third copy,
    matching no cut, was read whole: 200 lines counted twice (fault-trials seed 36422)."""
    log = tmp_path / "f2.log"
    log.write_bytes(b"")
    t = tail(tmp_path)
    got = drain(t)
    append(log, lines(0, 70))
    got += drain(t)
    append(log, lines(70, 75))
    for n in (1, 2):
        shutil.copyfile(log, f"{log}-{n}")
        os.truncate(log, 0)
    append(log, lines(75, 275))
    got += drain(t)
    shutil.copyfile(log, f"{log}-3")
    os.truncate(log, 0)
    append(log, lines(275, 300))
    got += drain(t)
    assert streams(got) == {str(log)}
    assert sorted(data(got).splitlines()) == sorted(lines(0, 300).splitlines())


def test_a_file_replaced_between_its_look_and_its_open_is_placed_by_the_next_look(
        tmp_path: Path, tail: Tail, monkeypatch: pytest.MonkeyPatch) -> None:
    """x.log found by a listing, then renamed to x.log.1 and a new x.log made before it is opened
    (a writer rotating every few milliseconds): each file's lines are read once. Followed under
    the identity the listing saw, the new file's lines were read twice (again when found as
    itself) and the renamed one's never."""
    log = tmp_path / "x.log"
    t = tail(tmp_path)
    assert drain(t) == []
    append(log, lines(0, 3))
    followed = t._followed  # (the registry the placement opens files through)
    real = followed.open_fd
    raced: list[str] = []

    def racing(path: str) -> int | None:
        if path == str(log) and not raced:
            raced.append(path)
            os.rename(log, tmp_path / "x.log.1")
            append(log, lines(3, 5))
        return real(path)

    monkeypatch.setattr(followed, "open_fd", racing)
    got = drain(t)
    time.sleep(0.05)
    got += drain(t)
    assert raced
    assert sorted(data(got).splitlines(keepends=True)) == sorted(lines(0, 5).splitlines(keepends=True))
