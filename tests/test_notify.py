"""The tailer driven by inotify: passes that read only what changed, and what still makes it list."""

from __future__ import annotations

import os
import shutil
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from logmetrics.sources import discovery, notify
from logmetrics.sources import tailer as sources
from logmetrics.sources.chunks import SourceStats
from logmetrics.sources.tailer import FileTailer
from logmetrics.sources.waker import Waker
from logmetrics.sources.watching import Changes
from tests.test_sources import append, data, drain, line, lines

pytestmark = pytest.mark.skipif(not os.uname().sysname == "Linux", reason="inotify is Linux's")

Make = Callable[..., FileTailer]


@pytest.fixture
def watched(monkeypatch: pytest.MonkeyPatch) -> Iterator[tuple[Make, list[int]]]:
    """Tailers watched through inotify with no safety rescan, and how often the directories were listed."""
    listings = [0]
    real = discovery.discover

    def counting(paths: list[str], onerror: Callable[[OSError], None],
                 wanted: Callable[[str], bool] | None = None) -> list[str]:
        listings[0] += 1
        return real(paths, onerror, wanted)

    monkeypatch.setattr(sources, "discover", counting)
    made: list[tuple[FileTailer, Waker]] = []

    def make(*paths: Path, watch: bool = True, **kwargs: object) -> FileTailer:
        t = FileTailer([str(p) for p in paths], from_beginning=False, stats=SourceStats(),
                       rescan_interval=3600.0, **kwargs)  # type: ignore[arg-type]  # (the tailer's keywords)
        waker = Waker()
        if watch:
            t.watch(waker)
        made.append((t, waker))
        return t

    yield make, listings
    for t, waker in made:
        t.close()
        waker.close()


def started(make: Make, directory: Path, name: str = "a.log") -> tuple[Path, FileTailer]:
    """An empty log ``name`` in ``directory``, and a watched tailer over the directory, past its first pass."""
    log = directory / name
    log.write_bytes(b"")
    t = make(directory)
    t.poll()
    return log, t


def copytruncate(log: Path, copy: Path) -> None:
    """logrotate's copytruncate: copy the file, then cut it to nothing."""
    shutil.copyfile(log, copy)
    os.truncate(log, 0)


def test_appends_are_read_without_listing_the_directory(tmp_path: Path, watched: tuple[Make, list[int]]) -> None:
    """200 appends to one file among 100 are read by passes that list nothing; polling alone lists at each."""
    make, listings = watched
    logs = [tmp_path / f"f{i:03d}.log" for i in range(100)]
    for log in logs:
        log.write_bytes(b"")
    t = make(tmp_path)
    t.poll()
    assert listings[0] == 1
    got = []
    for i in range(200):
        append(logs[i % 7], line(i))
        got += t.poll()
    assert sorted(c.data for c in got) == [line(i) for i in range(200)]
    assert listings[0] == 1  # not one listing more
    assert t.stats.lag_bytes == {str(log): 0 for log in logs}
    plain = make(tmp_path, watch=False)  # the same without notifications: every pass lists
    plain.poll()
    for i in range(5):
        append(logs[0], line(i))
        plain.poll()
    assert listings[0] == 1 + 6


def test_a_changed_file_that_is_not_followed_costs_one_listing(tmp_path: Path, watched: tuple[Make, list[int]]) -> None:
    """A file written beside the logs but not followed (a compressed rotation) is listed once, then let be."""
    make, listings = watched
    log, gz = tmp_path / "a.log", tmp_path / "a.log.1.gz"
    log.write_bytes(b"")
    gz.write_bytes(b"")
    t = make(tmp_path)
    t.poll()
    for _ in range(50):
        append(gz, b"\x1f\x8b" * 100)
        t.poll()
    assert listings[0] == 2  # the first change of the .gz made a pass list, to learn it is not ours
    append(log, line(1))
    assert data(t.poll()) == line(1)
    assert listings[0] == 2


def test_every_rotation_kind_is_seen_through_events_alone(tmp_path: Path, watched: tuple[Make, list[int]]) -> None:
    """Rename, copytruncate, delete and recreate and a new subdirectory, with no safety rescan: exact."""
    make, _ = watched
    log, t = started(make, tmp_path, "x.log")
    append(log, lines(0, 10))
    got = drain(t)
    append(log, lines(10, 12))
    os.rename(log, tmp_path / "x.log.1")
    log.write_bytes(lines(12, 15))
    got += drain(t)
    append(log, lines(15, 17))
    copytruncate(log, tmp_path / "x.log.2")
    append(log, lines(17, 20))
    got += drain(t)
    log.unlink()
    log.write_bytes(lines(20, 22))
    got += drain(t)
    sub = tmp_path / "later" / "deeper"
    sub.mkdir(parents=True)
    (sub / "y.log").write_bytes(lines(100, 102))
    got += drain(t)
    append(sub / "y.log", lines(102, 104))  # the new directory is watched: this change is seen
    got += drain(t)
    assert data(got, log) == lines(0, 22)
    assert data(got, sub / "y.log") == lines(100, 104)


def test_a_directory_moved_within_the_tree_is_followed_under_its_new_name(
        tmp_path: Path, watched: tuple[Make, list[int]]) -> None:
    """A subdirectory renamed: its file's appends are still seen (read once, as the file it was)."""
    make, _ = watched
    (tmp_path / "a").mkdir()
    (tmp_path / "a" / "x.log").write_bytes(b"")
    t = make(tmp_path)
    t.poll()
    os.rename(tmp_path / "a", tmp_path / "b")
    moved = tmp_path / "b" / "x.log"
    got = drain(t)
    append(moved, lines(0, 3))
    got += drain(t)
    append(moved, lines(3, 5))
    got += drain(t)
    assert data(got) == lines(0, 5)


def test_a_directory_beyond_the_watch_limit_is_polled(tmp_path: Path, watched: tuple[Make, list[int]],
                                                       monkeypatch: pytest.MonkeyPatch) -> None:
    """Out of watches, the files of a directory left unwatched are still read: every pass lists then."""
    make, listings = watched
    monkeypatch.setattr(notify, "MAX_TREE_WATCHES", 1)
    monkeypatch.setattr(notify, "MAX_INOTIFY_TARGETS", 0)
    (tmp_path / "sub").mkdir()
    log = tmp_path / "sub" / "x.log"
    log.write_bytes(b"")
    t = make(tmp_path)
    t.poll()
    got = []
    for i in range(3):
        append(log, line(i))
        got += t.poll()
    assert data(got, log) == lines(0, 3)
    assert listings[0] == 4


def test_the_waker_ends_its_wait_on_an_event(tmp_path: Path, watched: tuple[Make, list[int]]) -> None:
    """A write to a watched file ends Waker.wait at once; with events=False the wait ignores it."""
    make, _ = watched
    log, t = started(make, tmp_path)
    waker = Waker()
    t.watch(waker)
    assert not waker.wait(0.0)
    append(log, line(1))
    assert not waker.wait(0.05, events=False)
    assert waker.wait(5.0)
    assert data(t.poll()) == line(1)
    assert not waker.wait(0.0)  # the events were read by the pass


def test_urgent_tells_a_rotation_from_a_write_and_keeps_the_events(
        tmp_path: Path, watched: tuple[Make, list[int]]) -> None:
    """urgent() is False after writes, True after a rename; the events it read still reach the pass."""
    make, _ = watched
    log, t = started(make, tmp_path)
    append(log, line(1))
    assert not t.urgent()
    assert data(t.poll()) == line(1)  # the write that urgent() read is still read by this pass
    append(log, line(2))
    os.rename(log, tmp_path / "a.log.1")
    log.write_bytes(line(3))
    assert t.urgent()
    got = drain(t)
    assert data(got, log) == line(2) + line(3)


def test_writes_to_files_in_turn_name_each_file_once(tmp_path: Path) -> None:
    """Thousands of writes to three files in turn (no event merged by the kernel) name each file
    once, a name that is not UTF-8 included, and a rename after them still asks for a listing."""
    names = [b"a.log", b"b.log", b"\xff-odd.log"]
    paths = [os.path.join(os.fsencode(tmp_path), n) for n in names]
    for p in paths:
        Path(os.fsdecode(p)).write_bytes(b"")
    w = notify.InotifyWatcher([(str(tmp_path), False)])
    try:
        assert w.changes().rescan  # the root, watched anew, was never listed
        for i in range(3000):
            with open(paths[i % 3], "ab") as f:
                f.write(b"x\n")
        assert not w.urgent()
        got = w.changes()
        assert got.paths == frozenset(os.fsdecode(p) for p in paths) and not got.rescan
        os.rename(os.fsdecode(paths[0]), str(tmp_path / "c.log"))
        assert w.urgent()
        assert w.changes().rescan
        assert w.changes() == Changes(frozenset(), False)
    finally:
        w.stop()


def _event(wd: int, mask: int, cookie: int, name: bytes, size: int) -> bytes:
    """One ``struct inotify_event`` as the kernel writes it: the name NUL-padded to ``size`` bytes."""
    return notify.EVENT_HEAD.pack(wd, mask, cookie, size) + name.ljust(size, b"\0")


def _events_one_by_one(data: bytes) -> tuple[set[tuple[int, bytes]], list[notify.Event]]:
    """The events of ``data`` read one after the other, as the man page describes them."""
    writes: set[tuple[int, bytes]] = set()
    other: list[notify.Event] = []
    pos = 0
    while pos < len(data):
        wd, mask, cookie, size = notify.EVENT_HEAD.unpack_from(data, pos)
        name = data[pos + 16:pos + 16 + size].split(b"\0", 1)[0]
        pos += 16 + size
        if mask == notify.IN_MODIFY:
            writes.add((wd, name))
        else:
            other.append((wd, mask, cookie, os.fsdecode(name)))
    return writes, other


NAME = st.binary(min_size=1, max_size=40).map(lambda b: b.replace(b"\0", b"\x02").replace(b"/", b"\x10"))


@st.composite
def event_reads(draw: st.DrawFn) -> bytes:
    """What one read(2) of an inotify descriptor may give: often only writes with names of one
    padded size (the case cut apart by slicing), names holding the bytes of an event's head."""
    uniform = draw(st.booleans())
    size = draw(st.sampled_from([16, 32, 48]))
    events = []
    for _ in range(draw(st.integers(1, 30))):
        name = draw(NAME)[:size - 1]
        if uniform:
            events.append(_event(draw(st.integers(1, 3)), notify.IN_MODIFY, 0, name, size))
        else:
            mask = draw(st.sampled_from([notify.IN_MODIFY, notify.IN_CREATE, notify.IN_MOVED_TO,
                                         notify.IN_Q_OVERFLOW]))
            cookie = draw(st.sampled_from([0, 0, 7])) if mask != notify.IN_MODIFY else 0
            own = draw(st.sampled_from([16, 32, 48, 64]))
            events.append(_event(draw(st.integers(-1, 3)), mask, cookie, name[:own - 1], own))
    return b"".join(events)


@given(event_reads())
@settings(max_examples=300, deadline=None)
def test_events_cut_apart_at_once_are_those_read_one_by_one(data: bytes) -> None:
    """Whether a read is cut apart by slicing (only writes, of one size) or read event by event,
    the files written and the other events are those of the events read one after the other."""
    modified: set[bytes] = set()
    other: list[notify.Event] = []
    notify.take_events(data, modified, other)
    writes = {(notify.EVENT_HEAD.unpack_from(e)[0], e[16:].split(b"\0", 1)[0]) for e in modified}
    assert (writes, other) == _events_one_by_one(data)


def test_a_name_that_holds_an_event_head_does_not_cut_events_apart_wrongly() -> None:
    """Writes of two sizes whose bytes add up to a whole number of the first one's, with names
    ending in a write's mask (then padding) just where cuts by the first size would look for an
    event's mask and cookie: each event is still read whole (the sizes are checked too)."""
    fake = b"y" * 20 + b"\x02"  # 36 bytes into its event: 4 into the slot a cut every 32 bytes makes
    other = b"abcd\x02"  # 20 bytes into its event: 4 into the next such slot
    data = (_event(1, notify.IN_MODIFY, 0, b"a.log", 16) + _event(1, notify.IN_MODIFY, 0, fake, 32)
            + _event(2, notify.IN_MODIFY, 0, other, 32) + _event(3, notify.IN_MODIFY, 0, b"c.log", 16))
    assert len(data) % 32 == 0
    modified: set[bytes] = set()
    notify.take_events(data, modified, [])
    assert {(notify.EVENT_HEAD.unpack_from(e)[0], e[16:].split(b"\0", 1)[0]) for e in modified} == \
        _events_one_by_one(data)[0] == {(1, b"a.log"), (1, fake), (2, other), (3, b"c.log")}
