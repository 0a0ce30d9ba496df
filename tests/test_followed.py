"""The file follower's parts alone, on real files: the registry of followed files, reading and
retiring, placement of a rotation and of a file the listing no longer shows."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from logmetrics.sources.changeindex import ChangeIndex
from logmetrics.sources.chunks import SourceStats
from logmetrics.sources.copies import Cut
from logmetrics.sources.followed import Followed
from logmetrics.sources.placement import Placement
from logmetrics.sources.reading import Reader
from logmetrics.sources.tailfile import Ident
from logmetrics.sources.waker import Waker


def registry(errors: list[str] | None = None) -> Followed:
    """A registry of followed files on its own, its unreadable files noted in ``errors``."""
    seen = errors if errors is not None else []
    return Followed(SourceStats(), from_beginning=True, max_line=1 << 20, copy_wait=1.0, max_open=None,
                    changes=ChangeIndex(5.0), report=lambda path, err: seen.append(path))


def follow(followed: Followed, path: Path, *, stream: str | None = None, offset: int = 0,
           active: bool = True) -> Ident:
    """Follow the file at ``path`` (under ``stream``, by default its path) from ``offset``."""
    opened = followed.open(str(path))
    assert opened is not None
    fd, size, head = opened
    st = os.fstat(fd)
    ident = (st.st_dev, st.st_ino)
    followed.follow(fd, ident, head, str(path), stream or str(path), offset, size, active=active)
    return ident


def test_a_followed_file_is_its_streams_and_vanishes_with_its_last_file(tmp_path: Path) -> None:
    """Following a file as its stream's makes it the stream's current file and starts its figures
    at 0; a drained file of the same stream is not its current one; the stream vanishes only when
    the last of its files is let go."""
    followed = registry()
    log, old = tmp_path / "a.log", tmp_path / "a.log.1"
    log.write_text("one\n")
    old.write_text("zero\n")
    new = follow(followed, log)
    rotated = follow(followed, old, stream=str(log), active=False)
    assert followed.current(str(log)) is followed.files[new]
    assert followed.files[rotated].draining and not followed.files[new].draining
    assert followed.stats.bytes_read == {str(log): 0} and followed.stats.truncations == {str(log): 0}
    for ident in (rotated, new):
        f = followed.files[ident]
        followed.fds.release(f)
        followed.let_go(f)
        followed.vanish_if_last(str(log))
    assert followed.vanished == [str(log)]
    assert followed.current(str(log)) is None


def test_the_reader_hands_out_whole_lines_and_retires_an_idle_drained_file(tmp_path: Path) -> None:
    """A read gives the whole lines written (a partial last line waits), counts the bytes and the
    lag; a drained file idle for the rotate wait is retired, its partial line handed out with a
    newline, and remembered where it was read to."""
    followed = registry()
    reader = Reader(followed, read_size=4096, budget=1 << 20, rotate_wait=0.0)
    log = tmp_path / "a.log"
    log.write_text("one\ntwo\nthr")
    ident = follow(followed, log, active=False)
    chunks = reader.read(None)
    assert b"".join(c.data for c in chunks) == b"one\ntwo\n"
    assert followed.stats.bytes_read[str(log)] == len("one\ntwo\nthr")  # read, the partial line held
    assert followed.stats.lag_bytes[str(log)] == 0
    chunks = reader.read(None)
    assert b"".join(c.data for c in chunks) == b"thr\n"
    assert ident not in followed.files
    assert followed.copies.known[ident].offset == len("one\ntwo\nthr")
    assert followed.vanished == [str(log)]


def test_a_pass_reads_its_budget_and_the_next_one_begins_with_the_files_left(tmp_path: Path) -> None:
    """A pass that has read its budget over all files leaves the rest for the next pass, which
    comes at once (the waker) and begins with them; the files left count as lag meanwhile, and
    every line is read once."""
    followed = registry()
    reader = Reader(followed, read_size=4096, budget=1 << 20, rotate_wait=60.0, pass_budget=1500)
    waker = reader.waker = Waker()
    body = "".join(f"line {i:04d}\n" for i in range(100))  # 1,000 bytes
    logs = [tmp_path / f"{name}.log" for name in "abc"]
    for log in logs:
        log.write_text(body)
        follow(followed, log)
    first = reader.read(None)
    assert [c.stream for c in first] == [str(logs[0]), str(logs[1])]
    assert followed.stats.lag_bytes[str(logs[2])] == 1000
    assert waker.wait(0.0, events=False)
    logs[0].write_text(body + "line 0100\n")
    followed.files[follow_ident(logs[0])].size += 10
    second = reader.read(None)
    assert [c.stream for c in second] == [str(logs[2]), str(logs[0])]
    assert not any(followed.stats.lag_bytes.values())
    assert not waker.wait(0.0, events=False)
    lines = b"".join(c.data for c in first + second).count(b"\n")
    assert lines == 301


def follow_ident(path: Path) -> Ident:
    """The identity of the file at ``path``."""
    st = os.stat(path)
    return st.st_dev, st.st_ino


def test_placement_reads_a_new_file_at_a_streams_path_as_its_rotation(tmp_path: Path) -> None:
    """A new file found at the path of a followed stream (rename rotation) is that stream's, read
    from its start, the old one drained first; the rotation is counted."""
    followed = registry()
    placement = Placement(followed)
    log = tmp_path / "a.log"
    log.write_text("old\n")
    old = follow(followed, log)
    followed.first = False
    log.rename(tmp_path / "a.log.1")
    log.write_text("new\n")
    st = os.stat(log)
    cuts: list[Cut] = []
    placement.place(str(log), (st.st_dev, st.st_ino), st, cuts)
    new = followed.files[(st.st_dev, st.st_ino)]
    assert followed.active[str(log)] == new.ident and new.offset == 0
    assert followed.files[old].draining
    assert followed.stats.rotations[str(log)] == 1


@pytest.mark.parametrize("dir_gone", [False, True])
def test_a_parked_file_missed_by_two_listings_is_lost_or_remembered(tmp_path: Path, dir_gone: bool) -> None:
    """A file closed for want of descriptors that two listings in a row do not show, with bytes it
    held unread: lost if its directory is still there (deleted), remembered with those bytes if
    the directory went away (it may come back)."""
    followed = registry()
    placement = Placement(followed)
    folder = tmp_path / "logs"
    folder.mkdir()
    log = folder / "a.log"
    log.write_text("one\ntwo\n")
    ident = follow(followed, log)
    f = followed.files[ident]
    f.size = log.stat().st_size + 10  # it grew while closed: 10 bytes it held were never read
    followed.fds.release(f)
    log.unlink()
    if dir_gone:
        folder.rmdir()
    placement.absent(set(), set())
    assert ident in followed.files and f.missed  # once: maybe renamed while the listing ran
    placement.absent(set(), set())
    assert ident not in followed.files
    if dir_gone:
        assert followed.copies.known[ident].unread == 10 + len("one\ntwo\n")
        assert str(log) not in followed.stats.bytes_lost
    else:
        assert followed.stats.bytes_lost[str(log)] == 10 + len("one\ntwo\n")


def test_a_claimed_copy_deleted_before_it_is_read_counts_its_bytes_lost(tmp_path: Path,
                                                                         monkeypatch: pytest.MonkeyPatch) -> None:
    """copytruncate with the copy found first (held), then the cut that claims it: the bytes the
    cut file held unread are the copy's to give. If the copy is deleted before it is read, they
    are counted lost when it is forgotten, not lost without a word."""
    from logmetrics.sources import identity

    monkeypatch.setattr(identity, "KEEP", 0.0)  # forgotten at the first listing that misses it
    followed = registry()
    followed.first = False
    placement = Placement(followed)
    log, copy = tmp_path / "a.log", tmp_path / "a.log.1"
    log.write_text("one\n")
    ident = follow(followed, log)
    f = followed.files[ident]
    f.read(4096, 1 << 20)  # "one\n" read
    with log.open("a") as fh:
        fh.write("two\nthree\n")  # not read yet
    f.size = log.stat().st_size
    copy.write_bytes(log.read_bytes())  # logrotate copies first ...
    st = os.stat(copy)
    cuts: list[Cut] = []
    placement.place(str(copy), (st.st_dev, st.st_ino), st, cuts)
    held = followed.copies.known[(st.st_dev, st.st_ino)]
    assert held.offset is None  # a presumed copy, held until its original's truncation shows
    log.write_text("")  # ... then truncates
    assert placement.check_cut(f, cuts) and not cuts  # the cut claimed the held copy
    assert held.offset == len("one\n") and held.unread == len("two\nthree\n")
    copy.unlink()  # gone before anything read it
    placement.absent({str(log)}, {ident})
    assert followed.stats.bytes_lost[str(log)] == len("two\nthree\n")
    assert (st.st_dev, st.st_ino) not in followed.copies.known
