"""File identity beyond (device, inode): retired files stay known, reused inodes are new files."""

from __future__ import annotations

import dataclasses
import os
import time
from pathlib import Path

import pytest

from logmetrics.sources.chunks import Chunk, Position
from logmetrics.sources.identity import FP_BYTES, birth, fingerprint, is_fingerprint
from logmetrics.sources.tailer import FileTailer
from logmetrics.state import savefile as st
from logmetrics.state.check import check
from logmetrics.state.journal import Delta, Journal
from logmetrics.store.store import Store
from tests.test_sources import Tail, append, data, drain, line, lines, streams
from tests.test_sources import tail as tail  # tailers over real paths, closed after the test

PROBE = b'INFO:     127.0.0.1:5000 - "GET /health HTTP/1.1" 200 OK\n'  # the same bytes every time


def births_told(path: Path) -> None:
    """Skip unless the file system of ``path`` tells when a file was created."""
    path.write_bytes(b"")
    fd = os.open(path, os.O_RDONLY)
    try:
        if birth(fd) is None:
            pytest.skip("this system or file system does not tell when a file was created")
    finally:
        os.close(fd)
        path.unlink()


COMMON = b"".join(b"INFO banner line %02d: the same first bytes in every file of this service\n" % i
                  for i in range(20))  # longer than the head a file is known by


def moved_to(position: Position, path: Path) -> Position:
    """``position`` as if the file now at ``path`` had got its inode (after the saved file was deleted)."""
    s = os.stat(path)
    return dataclasses.replace(position, dev=s.st_dev, ino=s.st_ino)


def reuse_inode(ino: int, path: Path, content: bytes, tries: int = 200) -> None:
    """Write ``content`` to ``path`` in a file that gets inode ``ino`` (freed just before), or skip."""
    made = []
    try:
        for i in range(tries):
            candidate = path.parent / f".reuse-{i}.tmp"  # .tmp: no tailer looks at it
            candidate.write_bytes(content)
            if os.stat(candidate).st_ino == ino:
                candidate.rename(path)
                return
            made.append(candidate)
    finally:
        for candidate in made:
            candidate.unlink()
    pytest.skip("this file system gave no freed inode to a new file")


def test_fingerprint_covers_the_bytes_just_before_an_offset(tmp_path: Path) -> None:
    """The fingerprint changes with the bytes just before the offset, not with those after or long before."""
    a, b = tmp_path / "a", tmp_path / "b"
    a.write_bytes(b"x" * 1000 + b"y" * FP_BYTES + b"tail a")
    b.write_bytes(b"z" * 1000 + b"y" * FP_BYTES + b"tail b, longer")
    with open(a, "rb") as fa, open(b, "rb") as fb:
        assert fingerprint(fa.fileno(), 1000 + FP_BYTES) == fingerprint(fb.fileno(), 1000 + FP_BYTES)
        assert fingerprint(fa.fileno(), 999 + FP_BYTES) != fingerprint(fb.fileno(), 999 + FP_BYTES)
        assert is_fingerprint(fingerprint(fa.fileno(), 0))
    assert not is_fingerprint("0" * 31) and not is_fingerprint("G" * 32) and not is_fingerprint(5)


def rotated(tmp_path: Path, tail: Tail, name: str, before: bytes,
            after: bytes) -> tuple[FileTailer, Path, list[Chunk]]:
    """A tailer (retiring drained files at once) that read ``before`` from ``name``, then saw it renamed
    to ``name.1`` and a new ``name`` holding ``after``: the tailer, the path and the chunks read."""
    log = tmp_path / name
    log.write_bytes(b"")
    t = tail(tmp_path, rotate_wait=0.0)
    t.poll()
    append(log, before)
    got = drain(t)
    log.rename(tmp_path / f"{name}.1")  # rotation; the old file is retired once drained
    log.write_bytes(after)
    got += drain(t)
    return t, log, got


def test_a_retired_file_missed_by_one_listing_is_not_read_again(tmp_path: Path, tail: Tail) -> None:
    """A rotated file read to its end, missing from one listing (a rename racing it), is not read again."""
    t, log, got = rotated(tmp_path, tail, "b.log", lines(0, 10), lines(10, 12))
    got += drain(t)
    (tmp_path / "b.log.1").rename(tmp_path.parent / f"{tmp_path.name}-aside")  # gone from this listing
    got += drain(t)
    (tmp_path.parent / f"{tmp_path.name}-aside").rename(tmp_path / "b.log.2")  # back, by its next name
    got += drain(t)
    assert data(got, log) == lines(0, 12)
    assert streams(got) == {str(log)}
    assert t.stats.rotations[str(log)] == 1


def test_a_retired_files_inode_reused_by_a_new_file_is_read_as_new(tmp_path: Path, tail: Tail) -> None:
    """A new file that gets a retired file's inode, with as many bytes as were read of it, is read whole."""
    t, log, got = rotated(tmp_path, tail, "a.log", lines(200, 210), b"")
    old = tmp_path / "a.log.1"
    ino = os.stat(old).st_ino
    old.unlink()
    reuse_inode(ino, tmp_path / "c.log", lines(300, 310))  # between two polls, as many bytes: only the content tells
    got += drain(t)
    assert data(got, log) == lines(200, 210)
    assert data(got, tmp_path / "c.log") == lines(300, 310)


def test_a_retired_files_inode_reused_with_the_same_lines_is_read_as_new(tmp_path: Path, tail: Tail) -> None:
    """A log of identical lines (a health probe's): a new file on a retired file's inode, byte for byte
    the same, is read whole, told apart by when it was created."""
    births_told(tmp_path / "probe.tmp")
    t, log, got = rotated(tmp_path, tail, "a.log", PROBE * 10, b"")
    old = tmp_path / "a.log.1"
    ino = os.stat(old).st_ino
    old.unlink()
    reuse_inode(ino, tmp_path / "c.log", PROBE * 10)
    got += drain(t)
    assert data(got, log) == PROBE * 10
    assert data(got, tmp_path / "c.log") == PROBE * 10


def test_a_retired_file_touched_is_not_read_again(tmp_path: Path, tail: Tail) -> None:
    """A retired file whose modification time changes but whose content does not gives no line."""
    t, log, got = rotated(tmp_path, tail, "a.log", lines(0, 5), b"")
    os.utime(tmp_path / "a.log.1", (time.time() + 5, time.time() + 5))
    got += drain(t)
    append(tmp_path / "a.log.1", line(5))  # a writer that still had it open
    got += drain(t)
    assert data(got, log) == lines(0, 6)


def _saved(tmp_path: Path, tail: Tail, first: Path) -> tuple[list[Position], float]:
    t = tail(tmp_path)
    t.poll()
    first.write_bytes(COMMON + lines(0, 5))
    drain(t)
    positions, saved_at = t.positions(), time.time()
    t.close()
    return positions, saved_at


def test_restart_a_reused_inode_with_the_same_head_is_a_new_file(tmp_path: Path, tail: Tail) -> None:
    """After a kill, a.log deleted and b.log given its inode (same first bytes, longer): b.log is read whole."""
    a, b = tmp_path / "a.log", tmp_path / "b.log"
    positions, saved_at = _saved(tmp_path, tail, a)
    assert all(p.fp is not None for p in positions)
    a.unlink()
    b.write_bytes(COMMON + lines(100, 120))
    second = tail(tmp_path)
    second.resume([moved_to(p, b) for p in positions], saved_at)
    got = drain(second)
    assert data(got, b) == COMMON + lines(100, 120)
    assert streams(got) == {str(b)}


def test_restart_a_reused_inode_with_another_head_keeps_its_own_name(tmp_path: Path, tail: Tail) -> None:
    """After a kill, a.log deleted and b.log given its inode: b.log's lines count under b.log, none under a.log."""
    a, b = tmp_path / "a.log", tmp_path / "b.log"
    positions, saved_at = _saved(tmp_path, tail, a)
    a.unlink()
    b.write_bytes(lines(200, 230))
    second = tail(tmp_path)
    second.resume([moved_to(p, b) for p in positions], saved_at)
    got = drain(second)
    assert data(got, b) == lines(200, 230)
    assert streams(got) == {str(b)}
    assert second.stats.truncations.get(str(a), 0) == 0


def test_restart_a_really_reused_inode_through_the_state_file(tmp_path: Path, tail: Tail) -> None:
    """The same through a saved and loaded state file, with an inode the file system really reused."""
    logs = tmp_path / "logs"
    logs.mkdir()
    a, b = logs / "a.log", logs / "b.log"
    positions, saved_at = _saved(logs, tail, a)
    path = tmp_path / "state.json"
    st.save(str(path), st.State(saved_at, {"counters": []}, positions, [], [str(logs)]))
    ino = os.stat(a).st_ino
    a.unlink()
    reuse_inode(ino, b, COMMON + lines(100, 120))
    loaded = st.load(str(path))
    assert loaded is not None and loaded.positions == positions
    second = tail(logs)
    second.resume(loaded.positions, loaded.saved_at)
    got = drain(second)
    assert data(got, b) == COMMON + lines(100, 120)
    assert streams(got) == {str(b)}


def test_restart_a_reused_inode_with_the_same_lines_through_the_journal(tmp_path: Path, tail: Tail) -> None:
    """After a kill, a.log of identical lines deleted and b.log given its inode with the same bytes: b.log
    is read whole, because the journal kept when a.log was created."""
    births_told(tmp_path / "probe.tmp")
    logs = tmp_path / "logs"
    logs.mkdir()
    a, b = logs / "a.log", logs / "b.log"
    first = tail(logs)
    first.poll()
    a.write_bytes(PROBE * 20)
    drain(first)
    positions = first.positions()
    assert all(p.birth is not None for p in positions)
    journal = Journal(str(tmp_path / "state.db"))
    assert journal.commit(Delta(time.time(), [str(logs)], Store().changes(), positions, {}))
    first.close()
    journal.close()
    ino = os.stat(a).st_ino
    a.unlink()
    reuse_inode(ino, b, PROBE * 20)
    loaded = st.load(str(tmp_path / "state.db"), [str(logs)])
    assert loaded is not None and loaded.positions == positions
    second = tail(logs)
    second.resume(loaded.positions, loaded.saved_at)
    got = drain(second)
    assert data(got, b) == PROBE * 20
    assert streams(got) == {str(b)}


def test_restart_without_fingerprints_falls_back_to_the_head(tmp_path: Path, tail: Tail) -> None:
    """Positions from a state file saved before fingerprints were kept still resume the same files."""
    a = tmp_path / "a.log"
    positions, saved_at = _saved(tmp_path, tail, a)
    append(a, lines(5, 8))
    second = tail(tmp_path)
    second.resume([dataclasses.replace(p, fp=None) for p in positions], saved_at)
    assert data(drain(second), a) == lines(5, 8)


def test_restart_same_file_grown_is_read_on_from_its_position(tmp_path: Path, tail: Tail) -> None:
    """The saved file itself, grown while we were down (and renamed), is read on from its position."""
    a = tmp_path / "a.log"
    positions, saved_at = _saved(tmp_path, tail, a)
    append(a, lines(5, 8))
    a.rename(tmp_path / "a.log.1")
    a.write_bytes(lines(8, 9))
    second = tail(tmp_path)
    second.resume(positions, saved_at)
    got = drain(second)
    assert data(got, a) == lines(5, 9)
    assert streams(got) == {str(a)}


def test_kubelet_rotation_gzip_and_a_reused_inode_after_a_kill(tmp_path: Path, tail: Tail) -> None:
    """kubelet's 0.log -> 0.log.<ts>, gzip of it and deletion after a kill: each line counted once, by its pod."""
    pod_a, pod_b = tmp_path / "pod-a", tmp_path / "pod-b"
    pod_a.mkdir()
    pod_b.mkdir()
    log_a, log_b = pod_a / "0.log", pod_b / "0.log"
    log_a.write_bytes(b"")
    first = tail(tmp_path)
    first.poll()
    append(log_a, lines(0, 10))
    got = drain(first)
    log_a.rename(pod_a / "0.log.20240101-000000")  # rotated; the new 0.log is written at once
    log_a.write_bytes(lines(10, 12))
    got += drain(first)
    append(pod_a / "0.log.20240101-000000", line(12))  # the container runtime's last write, not read
    positions, saved_at = first.positions(), time.time()
    first.close()  # killed: both files of pod-a are in the saved positions
    rotated = pod_a / "0.log.20240101-000000"
    gz = pod_a / "0.log.20240101-000000.gz"
    (pod_a / "0.log.20240101-000000.gz.tmp").write_bytes(b"\x1f\x8b compressed")
    (pod_a / "0.log.20240101-000000.gz.tmp").rename(gz)
    rotated.unlink()  # its last line is lost with it: nothing can read it any more
    log_b.write_bytes(lines(300, 340))  # another pod's new log, given the rotated file's inode:
    positions = [moved_to(p, log_b) if p.path == str(rotated) else p for p in positions]
    append(log_a, lines(13, 15))
    second = tail(tmp_path)
    second.resume(positions, saved_at)
    got += drain(second)
    assert data(got, log_a) == lines(0, 12) + lines(13, 15)
    assert data(got, log_b) == lines(300, 340)
    assert streams(got) == {str(log_a), str(log_b)}


@pytest.mark.parametrize(("field", "value", "kept"), [
    ("fp", None, True),  # a state file from before fingerprints were kept: the head alone decides
    ("fp", "0123456789abcdef0123456789abcdef", True),
    ("fp", "0123456789abcdef", False),
    ("fp", "0123456789ABCDEF0123456789abcdeZ", False),
    ("fp", 12345, False),
    ("fp", [], False),
    ("birth", None, True),  # a system that does not tell, or a state file from before births were kept
    ("birth", 1_796_000_000_123_456_789, True),
    ("birth", -1, False),
    ("birth", 1 << 63, False),
    ("birth", "1796000000", False),
    ("birth", 1.5, False),
])
def test_a_saved_fingerprint_and_birth_are_checked(field: str, value: object, kept: bool) -> None:
    """A position keeps a well-formed fingerprint or birth time; a malformed one makes the position malformed."""
    position: dict[str, object] = {"stream": "/l/a.log", "path": "/l/a.log", "dev": 1, "ino": 2, "head": "aGVhZA==",
                                   "offset": 42}
    if value is not None:
        position[field] = value
    data = {"version": 1, "saved_at": 1000.0, "inputs": ["/l"], "store": {"counters": [], "histograms": []},
            "positions": [position], "streams": []}
    checked = check(data, 2000.0)
    assert [getattr(p, field) for p in checked.state.positions] == ([value] if kept else [])
    assert bool(checked.problems) != kept
