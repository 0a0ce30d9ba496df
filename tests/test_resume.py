"""The resume state alone: which saved files are still whole, and which paths the save named."""

from __future__ import annotations

import dataclasses
import os
from pathlib import Path

import pytest

from logmetrics.sources import identity
from logmetrics.sources.chunks import Position
from logmetrics.sources.resume import ResumeState


def saved(path: Path, offset: int) -> Position:
    """A position saved for ``path`` at ``offset``, its head the file's first bytes then."""
    st = os.stat(path)
    head = path.read_bytes()[:16]
    return Position(str(path), str(path), st.st_dev, st.st_ino, head, offset)


def test_a_saved_file_is_whole_until_cut_or_rewritten(tmp_path: Path) -> None:
    """A file as long as its position and starting with its saved head is whole, renamed or not;
    one cut below its position, one whose start changed, and one never saved are not."""
    grown, renamed, cut, rewritten, other = (tmp_path / n for n in ("a.log", "b.log", "c.log", "d.log", "e.log"))
    for f in (grown, renamed, cut, rewritten, other):
        f.write_text("line one of a long log\nline two\n")
    state = ResumeState()
    state.restore([saved(f, 20) for f in (grown, renamed, cut, rewritten)], 1.0, [str(tmp_path)])
    with open(grown, "a") as out:
        out.write("line three\n")
    moved = tmp_path / "b.log.1"
    renamed.rename(moved)
    cut.write_text("short\n")  # the same inode, shorter than the position
    with open(rewritten, "r+") as out:
        out.write("LINE")
    whole = state.still_whole([str(grown), str(moved), str(cut), str(rewritten), str(other)])
    ident = {f: (os.stat(f).st_dev, os.stat(f).st_ino) for f in (grown, moved)}
    assert whole == {ident[grown], ident[moved]}


def test_a_saved_file_whose_inode_a_new_file_got_is_not_whole(tmp_path: Path) -> None:
    """A saved file deleted and its inode given to a new file that starts with the same bytes and is
    longer: where the system tells when files were created, the new one is born later, and the
    saved one is not found whole (a copy of it may be new); without a saved birth time it is."""
    log, spare = tmp_path / "x.log", tmp_path / "spare"
    spare.mkdir()
    log.write_text("line one of a long log\nline two\n")
    position = dataclasses.replace(saved(log, 20), birth=identity.birth_at(str(log)))
    log.unlink()
    for i in range(200):  # a new file that gets the freed inode, moved to the saved file's path
        new = spare / f"{i}.log"
        new.write_text("line one of a long log\nline two\nline three\n")
        if new.stat().st_ino == position.ino:
            new.rename(log)
            break
    if not log.exists() or position.birth is None:
        pytest.skip("this file system gave no new file the freed inode, or keeps no birth times")
    state = ResumeState()
    state.restore([position], 1.0, [str(tmp_path)])
    assert state.still_whole([str(log)]) == set()
    state.restore([dataclasses.replace(position, birth=None)], 1.0, [str(tmp_path)])
    assert state.still_whole([str(log)]) == {(position.dev, position.ino)}


def test_a_path_under_a_new_argument_is_not_named_by_the_save(tmp_path: Path) -> None:
    """Files under the PATH arguments the state was saved for are named by it; others are placed as
    at a first start; a state that did not keep its arguments names every path."""
    state = ResumeState()
    state.restore([], 1.0, [str(tmp_path / "old")])
    assert state.named(str(tmp_path / "old" / "x.log"))
    assert not state.named(str(tmp_path / "new" / "x.log"))
    state.restore([], 1.0, None)
    assert state.named(str(tmp_path / "new" / "x.log"))
    assert state.at == 1.0 and state.inputs is None
