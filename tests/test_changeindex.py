"""The change index alone: a real inotify watcher on a directory, and the files a light pass reads."""

from __future__ import annotations

import os
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest

from logmetrics.sources.changeindex import ChangeIndex
from logmetrics.sources.tailfile import LineCutter, TailFile
from tests.helpers import append

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="inotify names changes on Linux only")


Files = dict[tuple[int, int], TailFile]


def settled(index: ChangeIndex, full: bool, files: Files) -> tuple[set[tuple[int, int]] | None, frozenset[str]]:
    """``changed`` once the kernel had a moment to queue the events."""
    time.sleep(0.05)
    return index.changed(full, files)


def full_pass(index: ChangeIndex, files: Files) -> None:
    """A full pass, as the tailer's: the changes asked for (a first pass is always full), each
    followed file listed, then what the pass found."""
    _, asked = settled(index, True, files)
    index.listing()
    for f in files.values():
        index.listed(f.path, f.ident)
    index.after_full(time.monotonic(), asked, files.values(), files.values())


@contextmanager
def watching(folder: Path, rescan_interval: float) -> Iterator[tuple[ChangeIndex, TailFile, Files]]:
    """A change index watching ``folder``, and its followed file ``a.log`` (one line), open."""
    log = folder / "a.log"
    log.write_text("one\n")
    index = ChangeIndex(rescan_interval=rescan_interval)
    assert index.start(lambda: None, [(str(folder), False)]) is not None
    fd = os.open(log, os.O_RDONLY)
    st = os.fstat(fd)
    f = TailFile(str(log), str(log), fd, (st.st_dev, st.st_ino), b"", LineCutter(1 << 20), 0)
    try:
        yield index, f, {f.ident: f}
    finally:
        index.stop()
        os.close(fd)


def test_a_write_to_a_listed_file_is_a_light_pass_on_it(tmp_path: Path) -> None:
    """After a full pass listed the file, a write to it names that file alone; a new file, or a
    tailer that needs a full pass, makes the next pass full."""
    with watching(tmp_path, 3600.0) as (index, f, files):
        full_pass(index, files)
        assert index.event_driven() and not index.uncovered
        append(tmp_path / "a.log", "two\n")
        assert settled(index, False, files) == ({f.ident}, frozenset({f.path}))
        append(tmp_path / "a.log", "three\n")
        assert settled(index, True, files)[0] is None  # the tailer asked for a full pass
        (tmp_path / "b.log").write_text("new\n")
        assert settled(index, False, files)[0] is None  # a file not listed yet: the listing decides


def test_a_changed_path_found_not_ours_is_left_out_of_later_passes(tmp_path: Path) -> None:
    """A path a full pass did not list (a state file among the logs) does not make passes full."""
    state = tmp_path / "state.db"
    state.write_text("x")
    with watching(tmp_path, 3600.0) as (index, f, files):
        state.write_text("y")
        full_pass(index, files)  # it asks for state.db's change, and does not list it
        state.write_text("z")
        append(tmp_path / "a.log", "two\n")
        assert settled(index, False, files)[0] == {f.ident}


def test_the_rescan_interval_makes_a_pass_full(tmp_path: Path) -> None:
    """Once ``rescan_interval`` has passed since the last full pass, the next one is full again."""
    with watching(tmp_path, 0.0) as (index, _, files):
        full_pass(index, files)
        append(tmp_path / "a.log", "two\n")
        assert settled(index, False, files)[0] is None


def test_without_a_watcher_every_pass_is_full() -> None:
    """No watcher started (or none could be): every pass lists everything."""
    index = ChangeIndex(rescan_interval=5.0)
    assert index.changed(False, {}) == (None, frozenset())
    assert not index.event_driven() and not index.urgent()
