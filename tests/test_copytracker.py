"""Copy tracking's memory alone: cuts and rotations forgotten after their wait, the lost ones told."""

from __future__ import annotations

from logmetrics.sources.copies import CopyTracker, Cut, Known


def test_cuts_and_rotations_are_forgotten_after_their_wait() -> None:
    """A cut older than the wait is forgotten and, if it held unread bytes, returned as lost (in
    order); younger cuts and rotations stay; older rotations and truncations go."""
    tracker = CopyTracker()
    tracker.cuts = [Cut("a.log", b"", 10, b"", since=0.0, unread=7), Cut("b.log", b"", 5, b"", since=0.0),
                    Cut("c.log", b"", 5, b"", since=9.0, unread=3)]
    tracker.rotated_lately = {"a.log": 0.0, "c.log": 9.5}
    tracker.cut_lately = {"b.log": 1.0}
    lost = tracker.expire(now=10.0, wait=5.0)
    assert [(c.stream, c.unread) for c in lost] == [("a.log", 7)]
    assert [c.stream for c in tracker.cuts] == ["c.log"]
    assert tracker.rotated_lately == {"c.log": 9.5} and tracker.cut_lately == {}


def test_a_presumed_copy_holds_the_light_passes_and_a_dropped_stream_is_forgotten() -> None:
    """While a file presumed a copy (no offset yet) is remembered, passes stay full; forgetting the
    streams of dropped PATH arguments forgets their files."""
    tracker = CopyTracker()
    tracker.known = {(1, 1): Known("a.log", b"x", 5), (1, 2): Known("b.log", b"x", None)}
    tracker.note_held()
    assert tracker.held
    tracker.forget_streams(["b.log"])
    tracker.note_held()
    assert not tracker.held and list(tracker.known) == [(1, 1)]
