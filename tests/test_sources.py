"""Tests of the tailer and the stdin source, on real files and pipes."""

from __future__ import annotations

import json
import os
import random
import shutil
import subprocess
import sys
import tempfile
import time
import tracemalloc
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from logmetrics.sources.chunks import Chunk, SourceError, SourceStats
from logmetrics.sources.discovery import unreadable
from logmetrics.sources.stdin import StdinSource
from logmetrics.sources.tailer import FileTailer
from logmetrics.sources.waker import Waker

MiB = 1 << 20
Tail = Callable[..., FileTailer]


def line(i: int) -> bytes:
    return b"%06d INFO POST /v1/chat/completions 200 prompt_tokens=%d\n" % (i, i * 7)


def lines(start: int, stop: int) -> bytes:
    return b"".join(line(i) for i in range(start, stop))


def append(path: Path, data: bytes) -> None:
    with open(path, "ab") as fh:
        fh.write(data)


def drain(tailer: FileTailer, rounds: int = 50) -> list[Chunk]:
    """Poll until a poll returns nothing (bounded)."""
    chunks: list[Chunk] = []
    for _ in range(rounds):
        got = tailer.poll()
        if not got:
            return chunks
        chunks += got
    raise AssertionError("the tailer never went quiet")


def data(chunks: list[Chunk], stream: Path | str | None = None) -> bytes:
    return b"".join(c.data for c in chunks if stream is None or c.stream == str(stream))


def streams(chunks: list[Chunk]) -> set[str]:
    return {c.stream for c in chunks}


@pytest.fixture(params=["poll", "inotify"])
def tail(request: pytest.FixtureRequest) -> Iterator[Tail]:
    """Tailers over real paths, closed after the test. Each test runs twice: polling alone (every
    pass lists everything), and with inotify naming what changed and no safety rescan, so that
    every case must be seen through its events alone."""
    made: list[FileTailer] = []
    wakers: list[Waker] = []

    def make(*paths: Path | str, from_beginning: bool = False, **kwargs: Any) -> FileTailer:
        if request.param == "inotify":
            kwargs.setdefault("rescan_interval", 3600.0)
        tailer = FileTailer([str(p) for p in paths], from_beginning=from_beginning, stats=SourceStats(), **kwargs)
        made.append(tailer)
        if request.param == "inotify":
            wakers.append(Waker())
            tailer.watch(wakers[-1])
        return tailer

    yield make
    for tailer in made:
        tailer.close()
    for waker in wakers:
        waker.close()


def test_append_then_poll(tmp_path: Path, tail: Tail) -> None:
    """Lines appended to a followed file come out once, whole, under the file's path."""
    log = tmp_path / "a.log"
    log.write_bytes(lines(0, 3))
    t = tail(log)
    assert t.poll() == []
    append(log, lines(3, 5))
    chunks = t.poll()
    assert [(c.stream, c.data) for c in chunks] == [(str(log), lines(3, 5))]
    assert t.poll() == []
    assert t.stats.bytes_read[str(log)] == len(lines(3, 5))
    assert t.stats.open_files == 1
    assert t.stats.lag_bytes[str(log)] == 0


def test_start_at_end_vs_from_beginning(tmp_path: Path, tail: Tail) -> None:
    """Files present at the first poll start at their end unless from_beginning; later files at 0."""
    (tmp_path / "old.log").write_bytes(lines(0, 4))
    at_end, from_start = tail(tmp_path), tail(tmp_path, from_beginning=True)
    assert at_end.poll() == []
    assert data(from_start.poll()) == lines(0, 4)
    (tmp_path / "new.log").write_bytes(lines(10, 12))
    for t in (at_end, from_start):
        assert data(drain(t), tmp_path / "new.log") == lines(10, 12)


def test_start_at_end_mid_line_skips_the_partial_line(tmp_path: Path, tail: Tail) -> None:
    """Starting at the end of a file inside a line never emits the rest of that line."""
    log = tmp_path / "a.log"
    log.write_bytes(b"first\nhalf of a li")
    t = tail(log)
    assert t.poll() == []
    append(log, b"ne\nnext\n")
    assert data(t.poll()) == b"next\n"


def test_new_file_in_new_subdirectory(tmp_path: Path, tail: Tail) -> None:
    """A directory is followed recursively, including subdirectories created later."""
    t = tail(tmp_path)
    assert t.poll() == []
    sub = tmp_path / "pods" / "vllm-0"
    sub.mkdir(parents=True)
    (sub / "0.log").write_bytes(lines(0, 3))
    chunks = drain(t)
    assert streams(chunks) == {str(sub / "0.log")}
    assert data(chunks) == lines(0, 3)


def test_rename_rotation_exactly_once(tmp_path: Path, tail: Tail) -> None:
    """mv x.log x.log.1 + new x.log: old inode drained first, every line once, in order, one stream."""
    log = tmp_path / "x.log"
    t = tail(tmp_path)
    t.poll()
    with open(log, "ab", buffering=0) as writer:
        writer.write(lines(0, 5))
        got = drain(t)
        writer.write(lines(5, 10))  # not polled before the rotation
        log.rename(tmp_path / "x.log.1")
        writer.write(lines(10, 12))  # the writer has not reopened yet
        log.write_bytes(lines(12, 15))
        got += drain(t)
    assert streams(got) == {str(log)}
    assert data(got) == lines(0, 15)
    assert t.stats.rotations[str(log)] == 1
    assert t.stats.bytes_read[str(log)] == len(lines(0, 15))


def test_rotated_file_is_not_read_again_after_it_is_closed(tmp_path: Path, tail: Tail) -> None:
    """A drained, closed rotated file stays known: not re-read as new; late writes to it still count once."""
    log = tmp_path / "x.log"
    t = tail(tmp_path, rotate_wait=0.0)
    t.poll()
    with open(log, "ab", buffering=0) as writer:
        writer.write(lines(0, 3))
        got = drain(t)
        log.rename(tmp_path / "x.log.1")
        log.write_bytes(lines(3, 5))
        got += drain(t)
        assert t.stats.open_files == 1  # the old one is closed
        got += drain(t)
        assert data(got) == lines(0, 5)
        writer.write(lines(5, 6))  # a late write to the rotated file
        got += drain(t)
    assert streams(got) == {str(log)}
    assert data(got) == lines(0, 5) + lines(5, 6)


@pytest.mark.parametrize("before", [5, 40], ids=["small", "large"])
@pytest.mark.parametrize("after", ["shorter", "longer"])
def test_copytruncate_exactly_once(tmp_path: Path, tail: Tail, before: int, after: str) -> None:
    """copytruncate: lines written after the last poll are read from the copy, once; the copy not again."""
    log = tmp_path / "x.log"
    t = tail(tmp_path)
    t.poll()
    log.write_bytes(lines(0, before))
    got = drain(t)
    append(log, lines(before, before + 3))  # not polled before the copy
    shutil.copyfile(log, tmp_path / "x.log.1")
    with open(log, "r+b") as fh:
        fh.truncate(0)
    fresh = lines(1000, 1002) if after == "shorter" else lines(1000, 1000 + 2 * before + 10)
    append(log, fresh)
    got += drain(t)
    assert streams(got) == {str(log)}
    assert data(got) == lines(0, before + 3) + fresh
    assert t.stats.truncations[str(log)] == 1
    assert t.stats.rotations[str(log)] == 0


def test_copy_seen_before_the_truncation(tmp_path: Path, tail: Tail) -> None:
    """A copy found before its original is truncated is not read; the truncation then loses no line."""
    log = tmp_path / "x.log"
    t = tail(tmp_path)
    t.poll()
    log.write_bytes(lines(0, 40))
    got = drain(t)
    append(log, lines(40, 45))
    shutil.copyfile(log, tmp_path / "x.log.1")
    got += drain(t)
    with open(log, "r+b") as fh:
        fh.truncate(0)
    append(log, lines(100, 103))
    got += drain(t)
    assert streams(got) == {str(log)}
    assert data(got) == lines(0, 45) + lines(100, 103)


def test_copy_found_while_the_original_has_a_backlog(tmp_path: Path, tail: Tail) -> None:
    """A copy found while its original is still being read is later read from where the original stopped."""
    log = tmp_path / "x.log"
    t = tail(tmp_path, poll_budget=16 * 1024, read_size=4 * 1024)
    t.poll()
    log.write_bytes(lines(0, 2000))
    got = t.poll()
    shutil.copyfile(log, tmp_path / "x.log.1")
    got += t.poll()
    assert len(data(got)) < log.stat().st_size  # the original is not read to its end yet
    with open(log, "r+b") as fh:
        fh.truncate(0)
    append(log, lines(5000, 7500))  # longer than the copy
    got += drain(t)
    assert streams(got) == {str(log)}
    assert data(got) == lines(0, 2000) + lines(5000, 7500)


def test_deleted_file_is_read_while_its_writer_goes_on(tmp_path: Path, tail: Tail) -> None:
    """A deleted file stays open for rotate_wait: lines its writer still writes to it are read."""
    log = tmp_path / "x.log"
    t = tail(tmp_path)
    t.poll()
    with open(log, "ab", buffering=0) as writer:
        writer.write(lines(0, 2))
        got = drain(t)
        log.unlink()
        got += drain(t)
        writer.write(lines(2, 4))
        got += drain(t)
    assert data(got, log) == lines(0, 4)
    assert t.stats.open_files == 1


def test_look_alike_files_are_read(tmp_path: Path, tail: Tail) -> None:
    """Files starting like a followed one but not its copy (another name, or grown past it) are read whole."""
    log = tmp_path / "x.log"
    t = tail(tmp_path)
    t.poll()
    log.write_bytes(lines(0, 40))
    drain(t)
    (tmp_path / "replica.log").write_bytes(lines(0, 41))
    (tmp_path / "x.log.2").write_bytes(lines(0, 40))  # a true copy: not read
    (tmp_path / "x.log.bak").write_bytes(lines(0, 40))
    got = drain(t)
    assert data(got, tmp_path / "replica.log") == lines(0, 41)
    assert data(got, tmp_path / "x.log.bak") == b""
    append(tmp_path / "x.log.bak", lines(40, 42))  # grows past x.log: not a copy after all
    got = drain(t)
    assert data(got, tmp_path / "x.log.bak") == lines(0, 42)
    assert streams(got) == {str(tmp_path / "x.log.bak")}


def test_delete_and_recreate(tmp_path: Path, tail: Tail) -> None:
    """rm x.log + new x.log: what was left in the deleted file is read, then the new file from its start."""
    log = tmp_path / "x.log"
    t = tail(tmp_path)
    t.poll()
    log.write_bytes(lines(0, 5))
    got = drain(t)
    append(log, lines(5, 8))
    log.unlink()
    log.write_bytes(lines(100, 103))
    got += drain(t)
    assert streams(got) == {str(log)}
    assert data(got) == lines(0, 8) + lines(100, 103)
    assert t.stats.rotations[str(log)] == 1


def test_symlink_flip(tmp_path: Path, tail: Tail) -> None:
    """A symlink flipped to a new target is a rotation of the link's stream: old target drained first."""
    pods, containers = tmp_path / "pods", tmp_path / "containers"
    pods.mkdir()
    containers.mkdir()
    (pods / "a.log").write_bytes(b"")
    link = containers / "app.log"
    link.symlink_to(pods / "a.log")
    t = tail(containers)
    t.poll()
    append(pods / "a.log", lines(0, 3))
    got = drain(t)
    append(pods / "a.log", lines(3, 5))
    (pods / "b.log").write_bytes(lines(100, 102))
    (containers / "app.log.tmp").symlink_to(pods / "b.log")
    os.replace(containers / "app.log.tmp", link)
    got += drain(t)
    assert streams(got) == {str(link)}
    assert data(got) == lines(0, 5) + lines(100, 102)
    assert t.stats.rotations[str(link)] == 1


def test_partial_line_held_until_newline_then_flush(tmp_path: Path, tail: Tail) -> None:
    """A partial last line waits for its newline; flush() emits it at end of input."""
    log = tmp_path / "a.log"
    log.write_bytes(b"")
    t = tail(log)
    t.poll()
    append(log, b"one\ntw")
    assert data(t.poll()) == b"one\n"
    append(log, b"o\nthr")
    assert data(t.poll()) == b"two\n"
    assert t.poll() == []
    assert [(c.stream, c.data) for c in t.flush()] == [(str(log), b"thr\n")]
    assert t.flush() == []


def test_line_cap_with_a_10mb_line(tmp_path: Path, tail: Tail) -> None:
    """A 10 MB line is cut at the cap with bounded memory, counted, and the following lines are intact."""
    t = tail(tmp_path)
    t.poll()
    log = tmp_path / "big.log"
    log.write_bytes(b"before\n" + b"x" * 10_000_000 + b"\nafter 1\nafter 2\n")
    tracemalloc.start()
    try:
        got = drain(t)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert data(got) == b"before\n" + b"x" * MiB + b"\nafter 1\nafter 2\n"
    assert t.stats.lines_truncated[str(log)] == 1
    assert t.stats.bytes_read[str(log)] == log.stat().st_size
    assert peak < 8 * MiB


@pytest.mark.parametrize("seed", range(6))
def test_lines_and_cap_match_a_reference(tmp_path: Path, tail: Tail, seed: int) -> None:
    """Random bytes (NUL, CR, long lines) written in random pieces come out as the reference cut says."""
    rng = random.Random(seed)
    cap, read_size = rng.choice([(1, 1), (8, 3), (16, 64), (50, 7)])
    body = b"\n".join(
        bytes(rng.choice(b"ab\x00\r\xff ") for _ in range(rng.choice([0, 1, 5, cap, cap + 1, 3 * cap])))
        for _ in range(60)
    )
    t = tail(tmp_path, max_line_bytes=cap, read_size=read_size)
    t.poll()
    log = tmp_path / "f.log"
    got: list[Chunk] = []
    pos = 0
    while pos < len(body):
        step = rng.randint(1, 3 * cap + 5)
        append(log, body[pos : pos + step])
        pos += step
        got += t.poll()
    got += drain(t) + t.flush()
    *whole, last = body.split(b"\n")
    expected = b"".join(x[:cap] + b"\n" for x in whole) + (last[:cap] + b"\n" if last else b"")
    assert data(got) == expected
    assert all(c.data.endswith(b"\n") for c in got)
    assert t.stats.lines_truncated[str(log)] == sum(len(x) > cap for x in [*whole, last])


def test_binary_garbage_nul_crlf_and_empty_files(tmp_path: Path, tail: Tail) -> None:
    """NUL bytes, invalid UTF-8 and CRLF pass through untouched; an empty file is no trouble."""
    t = tail(tmp_path)
    t.poll()
    body = b"a\x00b\r\n\xff\xfe\xc3(\r\n\x00\x00\x00\n" + bytes(range(256)).replace(b"\n", b"") + b"\n"
    (tmp_path / "bin.log").write_bytes(body)
    (tmp_path / "empty.log").write_bytes(b"")
    got = drain(t)
    assert data(got) == body
    assert streams(got) == {str(tmp_path / "bin.log")}


def test_glob_with_double_star(tmp_path: Path, tail: Tail) -> None:
    """A ** glob finds files at any depth, later ones too, and skips compressed rotations."""
    (tmp_path / "a" / "b").mkdir(parents=True)
    (tmp_path / "top.log").write_bytes(lines(0, 1))
    (tmp_path / "a" / "b" / "deep.log").write_bytes(lines(1, 2))
    (tmp_path / "a" / "deep.log.1.gz").write_bytes(b"\x1f\x8b not text\n")
    (tmp_path / "a" / "notes.txt").write_bytes(b"not matched\n")
    t = tail(tmp_path / "**" / "*.log*", from_beginning=True)
    got = drain(t)
    assert data(got, tmp_path / "top.log") == lines(0, 1)
    assert data(got, tmp_path / "a" / "b" / "deep.log") == lines(1, 2)
    assert len(streams(got)) == 2
    (tmp_path / "a" / "b" / "c").mkdir()
    (tmp_path / "a" / "b" / "c" / "later.log").write_bytes(lines(2, 4))
    assert data(drain(t)) == lines(2, 4)


def test_double_star_glob_over_symlink_loops_ends(tmp_path: Path) -> None:
    """A ** glob over a tree with two symlink loops and a link to a sibling directory lists each
    file once (the tree walked as a directory is), where glob's own walk does not end."""
    (tmp_path / "d" / "a").mkdir(parents=True)
    (tmp_path / "d" / "b").mkdir()
    (tmp_path / "d" / "a" / "up").symlink_to("..")
    (tmp_path / "d" / "a" / "self").symlink_to("../a")
    (tmp_path / "d" / "a" / "other").symlink_to("../b")
    (tmp_path / "d" / "a" / "x.log").write_bytes(lines(0, 1))
    (tmp_path / "d" / "b" / "y.log").write_bytes(lines(1, 2))
    (tmp_path / "d" / "b" / "y.txt").write_bytes(lines(2, 3))
    code = ("import json, sys\nfrom logmetrics.sources.discovery import discover\n"
            "print(json.dumps(discover([sys.argv[1]], lambda err: None)))")
    try:  # in a process of its own: a walk that does not end fails the test instead of hanging it
        run = subprocess.run([sys.executable, "-c", code, str(tmp_path / "d" / "**" / "*.log")],
                             capture_output=True, text=True, timeout=30, check=True)
    except subprocess.TimeoutExpired:
        pytest.fail("the ** glob did not end")
    assert json.loads(run.stdout) == [str(tmp_path / "d" / "a" / "x.log"), str(tmp_path / "d" / "b" / "y.log")]


def test_ignored_suffixes_in_a_directory(tmp_path: Path, tail: Tail) -> None:
    """Compressed and temporary rotations in a followed directory are not read."""
    t = tail(tmp_path)
    t.poll()
    for suffix in (".gz", ".bz2", ".xz", ".zst", ".zip", ".tmp"):
        (tmp_path / f"x.log.1{suffix}").write_bytes(b"compressed\n")
    (tmp_path / "x.log").write_bytes(b"plain\n")
    got = drain(t)
    assert [(c.stream, c.data) for c in got] == [(str(tmp_path / "x.log"), b"plain\n")]


def test_a_listing_error_reads_as_watch_words_it() -> None:
    """What discovery reports of a path it cannot list is one line, ``cannot read PATH: reason``, as
    ``watch`` says it (not Python's ``[Errno 13] ...: 'PATH'``); other reports stay as they are."""
    assert unreadable(PermissionError(13, "Permission denied", "logs/sub")) == "cannot read logs/sub: Permission denied"
    assert unreadable(OSError("x.fifo: not a regular file")) == "x.fifo: not a regular file"


def test_bad_paths_raise_source_error(tmp_path: Path) -> None:
    """A PATH that is neither a file, a directory nor a matching glob is refused with a one-line message."""
    missing = tmp_path / "nope.log"
    with pytest.raises(SourceError) as err:
        FileTailer([str(missing)], from_beginning=False, stats=SourceStats())
    assert str(err.value) == f"logmetrics: no such file or directory: {missing}"
    os.mkfifo(tmp_path / "fifo")
    with pytest.raises(SourceError, match="not a regular file or directory"):
        FileTailer([str(tmp_path / "fifo")], from_beginning=False, stats=SourceStats())
    pattern = str(tmp_path / "later" / "*.log")  # a glob that matches nothing yet: refused, or waited for
    with pytest.raises(SourceError, match="no file matches"):
        FileTailer([pattern], from_beginning=False, stats=SourceStats())
    FileTailer([pattern], from_beginning=False, stats=SourceStats(), wait_for_missing=True).close()


def test_one_busy_file_does_not_starve_others(tmp_path: Path, tail: Tail) -> None:
    """A poll reads a bounded amount per file; the rest comes in later polls, lag shows what is left."""
    t = tail(tmp_path, poll_budget=256 * 1024, read_size=64 * 1024)
    t.poll()
    big, small = tmp_path / "big.log", tmp_path / "small.log"
    big.write_bytes(lines(0, 40_000))
    small.write_bytes(lines(0, 2))
    first = t.poll()
    assert data(first, small) == lines(0, 2)
    assert 0 < len(data(first, big)) <= 256 * 1024 + 64 * 1024
    assert t.stats.lag_bytes[str(big)] == big.stat().st_size - t.stats.bytes_read[str(big)] > 0
    assert data(first + drain(t), big) == lines(0, 40_000)
    assert t.stats.lag_bytes[str(big)] == 0


def test_rotation_drains_a_long_backlog_before_the_new_file(tmp_path: Path, tail: Tail) -> None:
    """Even when the old file needs several polls to drain, the new file's lines come after all of it."""
    log = tmp_path / "x.log"
    t = tail(tmp_path, poll_budget=64 * 1024, read_size=16 * 1024)
    t.poll()
    log.write_bytes(lines(0, 3))
    got = drain(t)
    append(log, lines(3, 10_000))
    log.rename(tmp_path / "x.log.1")
    log.write_bytes(lines(20_000, 20_003))
    got += drain(t, rounds=200)
    assert data(got) == lines(0, 10_000) + lines(20_000, 20_003)


def test_watch_wakes_the_poller(tmp_path: Path, tail: Tail) -> None:
    """watch() wakes the waker when a file in a followed directory changes."""
    log = tmp_path / "a.log"
    log.write_bytes(b"")
    t = tail(tmp_path)
    waker = Waker()
    t.watch(waker)
    t.poll()
    append(log, lines(0, 1))
    assert waker.wait(10.0)
    assert data(t.poll()) == lines(0, 1)


def test_budget_limited_poll_wakes_the_waker(tmp_path: Path, tail: Tail) -> None:
    """A poll that leaves data unread (per-file budget) wakes the waker so that the next poll comes at once."""
    t = tail(tmp_path, poll_budget=64 * 1024, read_size=16 * 1024)
    t.poll()
    (tmp_path / "big.log").write_bytes(lines(0, 5000))
    waker = Waker()
    t.watch(waker)  # after the write: no file system event is due
    assert not waker.wait(0.0)
    t.poll()
    assert waker.wait(0.0)
    drain(t)
    waker.wait(0.0)
    assert t.poll() == []
    assert not waker.wait(0.0)


def test_waker() -> None:
    """Waker.wait returns True once per wake-up and False on time-out."""
    waker = Waker()
    waker.wake()
    assert waker.wait(1.0)
    assert not waker.wait(0.0)


_UNREADABLE_SCRIPT = """
import json, os, sys
from logmetrics.sources.chunks import SourceStats
from logmetrics.sources.tailer import FileTailer
if os.geteuid() == 0:  # root reads any file: become nobody
    os.setgroups([])
    os.setgid(65534)
    os.setuid(65534)
stats = SourceStats()
tailer = FileTailer([sys.argv[1]], from_beginning=True, stats=stats)
for turn in range(3):
    if turn == 2:
        sys.stdin.readline()
    chunks = [[c.stream, c.data.decode()] for c in tailer.poll()]
    print(json.dumps({"chunks": chunks, "errors": stats.read_errors}), flush=True)
"""


@pytest.fixture
def shared_dir() -> Iterator[Path]:
    """A directory anyone may enter (pytest's own tmp dirs are private to their owner)."""
    path = Path(tempfile.mkdtemp(prefix="logmetrics-test-"))
    path.chmod(0o755)
    yield path
    shutil.rmtree(path)


def test_unreadable_file(shared_dir: Path) -> None:
    """An unreadable file is reported once and counted once; others are read; it is read once it can be."""
    ok, secret = shared_dir / "ok.log", shared_dir / "secret.log"
    ok.write_bytes(b"fine\n")
    secret.write_bytes(b"hidden\n")
    ok.chmod(0o644)
    secret.chmod(0)
    proc = subprocess.Popen(
        [sys.executable, "-c", _UNREADABLE_SCRIPT, str(shared_dir)],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    assert proc.stdin is not None and proc.stdout is not None
    first, second = json.loads(proc.stdout.readline()), json.loads(proc.stdout.readline())
    secret.chmod(0o644)
    proc.stdin.write("go\n")
    proc.stdin.flush()
    third = json.loads(proc.stdout.readline())
    _, stderr = proc.communicate(timeout=30)
    assert proc.returncode == 0, stderr
    assert first == {"chunks": [[str(ok), "fine\n"]], "errors": {str(secret): 1}}
    assert second == {"chunks": [], "errors": {str(secret): 1}}
    assert third == {"chunks": [[str(secret), "hidden\n"]], "errors": {str(secret): 1}}
    warnings = [x for x in stderr.splitlines() if "cannot read" in x]
    assert warnings == [f"cannot read {secret}: Permission denied"]


def poll_stdin(source: StdinSource, waker: Waker, until: Callable[[bytes], bool]) -> bytes:
    """Poll the stdin source on its waker until ``until`` holds for what was read (bounded)."""
    got = b""
    deadline = time.monotonic() + 20.0
    while time.monotonic() < deadline:
        got += data(source.poll())
        if until(got):
            return got
        waker.wait(1.0)
    raise AssertionError(f"stdin source stalled at {got!r}")


def test_stdin_source_from_a_pipe() -> None:
    """StdinSource reads a pipe on its thread, wakes the waker, holds a partial line until EOF completes it."""
    read_fd, write_fd = os.pipe()
    stats = SourceStats()
    with open(read_fd, "rb") as reader:
        source = StdinSource(stats, fileobj=reader)
        waker = Waker()
        source.watch(waker)
        os.write(write_fd, b"one\ntwo\nthr")
        assert poll_stdin(source, waker, lambda got: got == b"one\ntwo\n") == b"one\ntwo\n"
        assert not source.eof
        os.write(write_fd, b"ee\nfour")
        os.close(write_fd)
        assert poll_stdin(source, waker, lambda _: source.eof) == b"three\nfour\n"
        assert source.flush() == []
        assert source.poll() == []
        source.close()
    assert stats.bytes_read["-"] == len(b"one\ntwo\nthree\nfour")


def test_stdin_flush_hands_out_the_held_partial_line() -> None:
    """StdinSource.flush() returns the partial line held so far, with a newline."""
    read_fd, write_fd = os.pipe()
    with open(read_fd, "rb") as reader:
        source = StdinSource(SourceStats(), fileobj=reader, stream="vllm-0")
        waker = Waker()
        source.watch(waker)
        os.write(write_fd, b"a\nhalf")
        assert poll_stdin(source, waker, lambda got: got == b"a\n") == b"a\n"
        assert [(c.stream, c.data) for c in source.flush()] == [("vllm-0", b"half\n")]
        os.close(write_fd)
        assert poll_stdin(source, waker, lambda _: source.eof) == b""
        source.close()


def test_stdin_source_line_cap() -> None:
    """StdinSource cuts long lines at the cap and counts them."""
    read_fd, write_fd = os.pipe()
    stats = SourceStats()
    with open(read_fd, "rb", buffering=0) as reader:
        source = StdinSource(stats, fileobj=reader, max_line_bytes=4, stream="vllm-0")
        waker = Waker()
        source.watch(waker)
        os.write(write_fd, b"abcdefgh\nxy\n")
        os.close(write_fd)
        assert poll_stdin(source, waker, lambda got: got.endswith(b"xy\n")) == b"abcd\nxy\n"
        poll_stdin(source, waker, lambda _: source.eof)
        source.close()
    assert stats.lines_truncated["vllm-0"] == 1


def test_fifo_in_a_directory_is_skipped(tmp_path: Path, tail: Tail) -> None:
    """A FIFO inside a followed directory is skipped, not opened (opening it would block)."""
    os.mkfifo(tmp_path / "pipe.log")
    (tmp_path / "a.log").write_bytes(b"")
    t = tail(tmp_path)
    t.poll()
    append(tmp_path / "a.log", b"x\n")
    assert data(t.poll()) == b"x\n"
    assert t.stats.open_files == 1


def test_copy_caught_while_being_written_is_not_read_twice(tmp_path: Path, tail: Tail) -> None:
    """A copy seen while still empty, then half written, is recognised once complete: no line twice."""
    log = tmp_path / "x.log"
    t = tail(tmp_path)
    t.poll()
    log.write_bytes(lines(0, 40))
    got = drain(t)
    copy = tmp_path / "x.log.1"
    copy.write_bytes(b"")  # cp has created the file
    got += drain(t)
    whole = log.read_bytes()
    copy.write_bytes(whole[:100])  # ... and written its first bytes
    got += drain(t)
    copy.write_bytes(whole)
    with open(log, "r+b") as fh:
        fh.truncate(0)
    append(log, lines(1000, 1003))
    got += drain(t)
    assert data(got) == lines(0, 40) + lines(1000, 1003)


def test_vanished_reports_a_stream_once_all_its_files_are_gone(tmp_path: Path, tail: Tail) -> None:
    """A deleted, drained file's stream is reported vanished once; a rotated one is not."""
    gone, rotated = tmp_path / "gone.log", tmp_path / "rot.log"
    t = tail(tmp_path, rotate_wait=0.0)
    t.poll()
    gone.write_bytes(lines(0, 2))
    rotated.write_bytes(lines(0, 2))
    drain(t)
    gone.unlink()
    rotated.rename(tmp_path / "rot.log.1")
    rotated.write_bytes(lines(2, 3))
    drain(t)
    drain(t)
    assert t.vanished() == [str(gone)]
    assert t.vanished() == []


def test_a_glob_argument_that_names_a_file_too_is_the_pattern_and_said_once(
        tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    """``x[1].log`` is a pattern (it matches ``x1.log``), as in other log shippers, even where a file
    has that very name; that is said once, with the escaped name that reads the file itself."""
    import glob

    from logmetrics.sources.discovery import discover

    for name in ("x[1].log", "x1.log"):
        (tmp_path / name).write_text("INFO 04-10 03:30:00 [x.py:1] up\n")
    arg = str(tmp_path / "x[1].log")
    assert discover([arg], lambda exc: None) == [str(tmp_path / "x1.log")]
    assert discover([arg], lambda exc: None) == [str(tmp_path / "x1.log")]
    said = [r.getMessage() for r in caplog.records if "names a file and is a glob pattern" in r.getMessage()]
    assert len(said) == 1 and glob.escape(arg) in said[0]
    assert discover([glob.escape(arg)], lambda exc: None) == [arg]
