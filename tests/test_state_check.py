"""The state file's loader against hostile content, and the save's failure path, in-process."""

from __future__ import annotations

import errno
import json
import logging
import math
from collections.abc import Iterator
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as hs

from logmetrics.app.options import Options
from logmetrics.app.runner import Runner
from logmetrics.plugins import discover
from logmetrics.sources.chunks import Position
from logmetrics.sources.tailfile import HEAD_BYTES
from logmetrics.state import journal
from logmetrics.state import savefile as st
from logmetrics.state.check import normalised_inputs, within
from logmetrics.store.store import Store

INPUTS = normalised_inputs(["/var/log/llm"])
GOOD = {"version": 1, "saved_at": 1000.0, "inputs": INPUTS,
        "store": {"counters": [["http_requests_total", ["vllm", "/var/log/llm/a.log", "POST", "/v1", "200"], 3]],
                  "histograms": []},
        "positions": [{"stream": "/var/log/llm/a.log", "path": "/var/log/llm/a.log", "dev": 1, "ino": 2,
                       "head": "aGVhZA==", "offset": 42}],
        "streams": [{"key": "/var/log/llm/a.log", "parser": "vllm", "state": {"model": "m"}}]}

SCALARS = (hs.none() | hs.booleans() | hs.integers(min_value=-(1 << 70), max_value=1 << 70)
           | hs.floats(allow_nan=True, allow_infinity=True)
           | hs.sampled_from(["", "/etc/shadow", "../../../x", "a\x00b", "aGVhZA==", "!!", "vllm", "1e999"])
           | hs.text(max_size=20))
JSON = hs.recursive(SCALARS, lambda inner: hs.lists(inner, max_size=4)
                    | hs.dictionaries(hs.text(max_size=8) | hs.sampled_from(list(GOOD)), inner, max_size=4),
                    max_leaves=30)


def written(tmp_path: Path, text: str | bytes) -> str:
    """``text`` written as a state file; its path."""
    path = tmp_path / "s.json"
    path.write_bytes(text if isinstance(text, bytes) else text.encode())
    return str(path)


def loaded(tmp_path: Path, text: str | bytes) -> st.State | None:
    """Write ``text`` as a state file and load it; StateError is the only error allowed through."""
    try:
        return st.load(written(tmp_path, text), INPUTS)
    except st.StateError as exc:
        return exc.kept


def assert_usable(got: st.State | None) -> None:
    """Whatever the loader hands on has the types and ranges the engine relies on."""
    if got is None:
        return
    assert isinstance(got.saved_at, float) and math.isfinite(got.saved_at) and got.saved_at >= 0
    for p in got.positions:
        assert isinstance(p.dev, int) and isinstance(p.ino, int) and 0 <= p.offset < 1 << 63
        assert len(p.head) <= HEAD_BYTES and within(p.stream, INPUTS)
    for s in got.streams:
        assert isinstance(s["key"], str) and isinstance(s["parser"], str) and isinstance(s["state"], dict)
    Store().load(got.store)  # must not raise


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(data=JSON)
def test_any_json_is_loaded_or_refused_never_raised(tmp_path: Path, data: object) -> None:
    """Random JSON values (NaN, huge numbers, wrong types) load as usable parts or a StateError."""
    assert_usable(loaded(tmp_path, json.dumps(data)))


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(field=hs.sampled_from(["version", "saved_at", "inputs", "store", "positions", "streams"]),
       where=hs.integers(min_value=0, max_value=5), value=JSON)
def test_one_field_of_a_good_state_made_hostile(tmp_path: Path, field: str, where: int, value: object) -> None:
    """A good state with one field, or one field of a position, row or stream, replaced."""
    data = json.loads(json.dumps(GOOD))
    part = data[field]
    if isinstance(part, list) and part and isinstance(part[0], dict):
        key = sorted(part[0])[where % len(part[0])]
        part[0][key] = value
    elif isinstance(part, dict):
        part["counters"][0][where % 3] = value
    else:
        data[field] = value
    assert_usable(loaded(tmp_path, json.dumps(data)))


@given(raw=hs.binary(max_size=200))
@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
def test_random_bytes_are_refused(tmp_path: Path, raw: bytes) -> None:
    """Bytes that are not a state (invalid UTF-8, NUL bytes) are a StateError, never another error."""
    assert_usable(loaded(tmp_path, raw))


@pytest.mark.parametrize("text", ["[" * 100_000, '{"a":' * 100_000, "1" * 10_000, "NaN", '{"version": 1e999}'])
def test_deep_nesting_and_huge_numbers_are_refused(tmp_path: Path, text: str) -> None:
    """Nesting too deep for the parser and numbers too large are refused like any other damage."""
    with pytest.raises(st.StateError):
        st.load(written(tmp_path, text))


def test_a_good_state_loads_whole_and_positions_outside_the_inputs_are_left_out(tmp_path: Path) -> None:
    """The valid state loads without error; a position of a file outside the inputs never resumes."""
    data = json.loads(json.dumps(GOOD))
    data["positions"].append({**data["positions"][0], "stream": "/etc/passwd", "ino": 3})
    got = loaded(tmp_path, json.dumps(data))
    assert got is not None and [p.stream for p in got.positions] == ["/var/log/llm/a.log"]
    assert got.store["counters"] and got.inputs == INPUTS


def test_a_bad_part_keeps_the_valid_positions_but_not_the_counters(tmp_path: Path) -> None:
    """A malformed stream entry: the state is refused whole, its positions kept, its counters not."""
    data = json.loads(json.dumps(GOOD))
    data["streams"].append({"key": 5})
    with pytest.raises(st.StateError) as err:
        st.load(written(tmp_path, json.dumps(data)), INPUTS)
    kept = err.value.kept
    assert kept is not None and len(kept.positions) == 1 and kept.store == {} and kept.saved_at == 1000.0


def test_within_directories_files_and_globs() -> None:
    """A stream lies within a directory, the file itself, or a glob's literal directory; no more."""
    inputs = normalised_inputs(["/var/log/llm", "/srv/x.log", "/data/**/*.log", "-"])
    assert within("/var/log/llm/sub/a.log", inputs) and within("/srv/x.log", inputs)
    assert within("/data/a/b/c.log", inputs)
    assert not within("/var/log/llmother/a.log", inputs) and not within("/srv/x.log.1", inputs)
    assert not within("/etc/passwd", inputs) and not within("-", inputs)


def test_a_failed_save_leaves_no_tmp_and_the_old_state(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A disk that fills up while the state is written: the .tmp is removed, the saved state stays."""
    path = tmp_path / "s.json"
    st.save(str(path), st.State(5.0, {"counters": []}, [Position("a", "a", 1, 2, b"h", 3)], [], INPUTS))
    before = path.read_bytes()

    def full(fd: int) -> None:
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr("os.fsync", full)
    with pytest.raises(OSError):
        st.save(str(path), st.State(6.0, {"counters": []}, [], [], INPUTS))
    assert path.read_bytes() == before and not (tmp_path / "s.json.tmp").exists()


@pytest.fixture
def runner(tmp_path: Path) -> Iterator[Runner]:
    """A runner on an empty directory with a state file, not serving."""
    (tmp_path / "logs").mkdir()
    opts = Options(paths=[str(tmp_path / "logs")], listen=("127.0.0.1", 0), parser=None, source=None,
                   envelope="auto", from_beginning=False, poll_interval=0.05, max_line_bytes=1 << 20,
                   state_file=str(tmp_path / "state.json"))
    r = Runner(opts, discover((), {}))
    yield r
    r.close()


def test_a_failed_save_is_retried_at_the_next_poll_and_reported_once(
        runner: Runner, tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    """Failures are counted each time, warned once per episode, retried at once; a save that works
    again ends the episode and the failure that made the exit status non-zero."""
    blocker = tmp_path / "state.json-wal"  # the database's log cannot be opened (which stops root too)
    blocker.mkdir()
    caplog.set_level(logging.WARNING)
    runner.poll()
    runner.save_state()
    runner.save_state()  # at the next poll: a retry
    runner.save_state()
    failures = [s for s in runner._extra() if s[0] == "logmetrics_state_save_failures_total"]
    assert failures == [("logmetrics_state_save_failures_total", (), 3.0)]
    assert runner.save_failure() is not None and blocker.is_dir()
    blocker.rmdir()
    runner.save_state()
    assert runner.save_failure() is None
    runner.close()  # (the database stays locked while it is open)
    assert st.read(str(tmp_path / "state.json"))["version"] == 1
    warned = [r.getMessage() for r in caplog.records]
    assert sum("cannot save state file" in m for m in warned) == 1
    assert any("saved again, after 3 failed attempts" in m for m in warned)


def test_saves_that_fail_and_work_by_turns_are_warned_once_a_minute(
        runner: Runner, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture) -> None:
    """Ten failures, each followed by a save that works (a disk all but full): each is counted, but
    one warning and one 'saved again' are said, not ten of each."""
    assert runner.journal is not None
    commit = runner.journal.commit
    turns = iter([False, True] * 10)

    def flaky(delta: journal.Delta) -> bool:
        if next(turns):
            return commit(delta)
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(runner.journal, "commit", flaky)
    caplog.set_level(logging.WARNING)
    for _ in range(20):
        runner.poll()
        runner.save_state()
    failures = [s for s in runner._extra() if s[0] == "logmetrics_state_save_failures_total"]
    assert failures == [("logmetrics_state_save_failures_total", (), 10.0)]
    assert runner.save_failure() is None
    warned = [r.getMessage() for r in caplog.records]
    assert sum("cannot save state file" in m for m in warned) == 1
    assert sum("saved again" in m for m in warned) == 1
