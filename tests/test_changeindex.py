"""The change index alone: a real inotify watcher on a directory, and the files a light pass reads."""

from __future__ import annotations

import os
import sys
import time
from pathlib import Path

import pytest

from logmetrics.sources.changeindex import ChangeIndex
from logmetrics.sources.tailfile import LineCutter, TailFile

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="inotify names changes on Linux only")


def full_pass(index: ChangeIndex, files: dict[tuple[int, int], TailFile]) -> None:
    """A full pass, as the tailer's: the changes asked for (a first pass is always full), each
    followed file listed, then what the pass found."""
    _, asked = index.changed(True, files)
    index.listing()
    for f in files.values():
        index.listed(f.path, f.ident)
    index.after_full(time.monotonic(), asked, files.values(), files.values())


def followed(path: Path) -> TailFile:
    """An open followed file at ``path``."""
    fd = os.open(path, os.O_RDONLY)
    st = os.fstat(fd)
    return TailFile(str(path), str(path), fd, (st.st_dev, st.st_ino), b"", LineCutter(1 << 20), 0)


def settled(index: ChangeIndex, full: bool, files: dict[tuple[int, int], TailFile]
            ) -> tuple[set[tuple[int, int]] | None, frozenset[str]]:
    """``changed`` once the kernel had a moment to queue the events."""
    time.sleep(0.05)
    return index.changed(full, files)


def test_a_write_to_a_listed_file_is_a_light_pass_on_it(tmp_path: Path) -> None:
    """After a full pass listed the file, a write to it names that file alone; a new file, or a
    tailer that needs a full pass, makes the next pass full."""
    log = tmp_path / "a.log"
    log.write_text("one\n")
    index = ChangeIndex(rescan_interval=3600.0)
    assert index.start(lambda: None, [(str(tmp_path), False)]) is not None
    f = followed(log)
    files = {f.ident: f}
    try:
        full_pass(index, files)
        assert index.event_driven() and not index.uncovered
        with open(log, "a") as out:
            out.write("two\n")
        assert settled(index, False, files) == ({f.ident}, frozenset({str(log)}))
        with open(log, "a") as out:
            out.write("three\n")
        assert settled(index, True, files)[0] is None  # the tailer asked for a full pass
        (tmp_path / "b.log").write_text("new\n")
        assert settled(index, False, files)[0] is None  # a file not listed yet: the listing decides
    finally:
        index.stop()
        os.close(f.fd)


def test_a_changed_path_found_not_ours_is_left_out_of_later_passes(tmp_path: Path) -> None:
    """A path a full pass did not list (a state file among the logs) does not make passes full."""
    log, state = tmp_path / "a.log", tmp_path / "state.db"
    log.write_text("one\n")
    state.write_text("x")
    index = ChangeIndex(rescan_interval=3600.0)
    index.start(lambda: None, [(str(tmp_path), False)])
    f = followed(log)
    files = {f.ident: f}
    try:
        state.write_text("y")
        _, asked = settled(index, True, files)
        index.listing()
        index.listed(str(log), f.ident)
        index.after_full(time.monotonic(), asked, files.values(), files.values())
        state.write_text("z")
        with open(log, "a") as out:
            out.write("two\n")
        assert settled(index, False, files)[0] == {f.ident}
    finally:
        index.stop()
        os.close(f.fd)


def test_the_rescan_interval_makes_a_pass_full(tmp_path: Path) -> None:
    """Once ``rescan_interval`` has passed since the last full pass, the next one is full again."""
    log = tmp_path / "a.log"
    log.write_text("one\n")
    index = ChangeIndex(rescan_interval=0.0)
    index.start(lambda: None, [(str(tmp_path), False)])
    f = followed(log)
    files = {f.ident: f}
    try:
        full_pass(index, files)
        with open(log, "a") as out:
            out.write("two\n")
        assert settled(index, False, files)[0] is None
    finally:
        index.stop()
        os.close(f.fd)


def test_without_a_watcher_every_pass_is_full() -> None:
    """No watcher started (or none could be): every pass lists everything."""
    index = ChangeIndex(rescan_interval=5.0)
    assert index.changed(False, {}) == (None, frozenset())
    assert not index.event_driven() and not index.urgent()
