"""A restart of logmetrics between any two records counts what one run counts: each built-in
parser keeps in its saved state what it holds across records (requests in flight, a crash or a
start-up under way, the engines' last stats lines, the source of exact counts, routes learned)."""

from __future__ import annotations

import json
import re
from collections.abc import Iterable
from pathlib import Path
from typing import ClassVar

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from logmetrics.engine import restartcheck
from logmetrics.events import Event
from logmetrics.plugins import Parser
from logmetrics.plugins.finder import discover
from logmetrics.records import Record
from logmetrics.testing import assert_restarts_match, oneshot
from tests.helpers import Samples, Server, append, parse, total

ROOT = Path(__file__).resolve().parent.parent
SAMPLES = sorted((ROOT / "samples").glob("*/*.log"))
ENTRIES = discover()


@pytest.mark.parametrize("log", SAMPLES, ids=[f"{p.parent.name}/{p.name}" for p in SAMPLES])
def test_a_restart_at_any_record_counts_what_one_run_counts(log: Path) -> None:
    """Each sample, restarted at every record boundary, gives the counters and histograms of one run."""
    assert_restarts_match(ENTRIES[log.parent.name].cls, log.read_text(encoding="utf-8"))


@pytest.mark.parametrize("order", ["forward", "backward"])
@pytest.mark.parametrize("name", sorted({p.parent.name for p in SAMPLES}))
def test_a_restart_in_a_log_of_several_servers_counts_what_one_run_counts(name: str, order: str) -> None:
    """A parser's samples one after the other in one log (a server restarted with another model,
    another version, other logging), restarted at records all along it: what the state keeps of one
    server must not change what the next one counts."""
    logs = sorted((ROOT / "samples" / name).glob("*.log"), reverse=order == "backward")
    text = "".join(p.read_text(encoding="utf-8") for p in logs if "docker" not in p.name)
    assert_restarts_match(ENTRIES[name].cls, text)


class _Episodes(Parser):
    """A parser that counts a crash once per episode and keeps the episode out of its state."""

    name: ClassVar[str] = "episodes"
    claims: ClassVar[tuple[str, ...]] = ()

    def __init__(self) -> None:
        self.crashed = False

    def parse(self, record: Record) -> Iterable[Event]:
        """``crash`` starts an episode (counted once), ``ready`` ends it."""
        if record.text.startswith("ready"):
            self.crashed = False
        elif record.text.startswith("crash") and not self.crashed:
            self.crashed = True
            return [Event("backend_errors_total", ("m", "crash"), 1)]
        return []


class _KeptEpisodes(_Episodes):
    """The same parser, with the episode in its state."""

    def state(self) -> dict[str, object]:
        """The base state and whether an episode is under way."""
        return {**super().state(), "crashed": self.crashed}

    def restore(self, state: dict[str, object]) -> None:
        """Take it back."""
        super().restore(state)
        self.crashed = state.get("crashed") is True


def test_the_check_fails_on_a_state_that_leaves_an_episode_out() -> None:
    """A restart inside an episode counts it again when the state leaves it out: the check says
    where; with the episode in the state it passes."""
    text = "ready\ncrash one\ncrash two\nready\ncrash three\n"
    with pytest.raises(AssertionError, match=re.escape("restarted after record 2 of 5: backend_errors_total{m,crash} "
                                                       "is 3.0, one run gives 2.0")):
        assert_restarts_match(_Episodes, text)
    assert_restarts_match(_KeptEpisodes, text)


def _series(samples: Samples) -> dict[str, float]:
    """The backend series of a scrape, without the source label."""
    return {f"{name}{{{','.join(f'{k}={v}' for k, v in labels if k != 'source')}}}": value
            for (name, labels), value in samples.items()
            if not name.startswith(("logmetrics_", "backend_process_")) and not name.endswith("_created")}


def test_a_watch_restarted_inside_a_crash_counts_it_once(tmp_path: Path) -> None:
    """A serving watch with --state-file, stopped after the first record of an OOM crash and started
    again when the rest of the log is there, serves what --oneshot gives on the whole log: the
    engine_dead records that follow belong to the same crash."""
    lines = (ROOT / "samples/vllm/oom-crash.log").read_text(encoding="utf-8").splitlines(keepends=True)
    cut = next(i for i, line in enumerate(lines) if "AsyncLLM output_handler failed" in line)
    log, state = tmp_path / "vllm.log", tmp_path / "state.db"
    log.write_text("".join(lines[:cut]), encoding="utf-8")
    args = ("--parser", "vllm", "--from-beginning", "--state-file", str(state), "--poll-interval", "0.05", str(log))
    srv = Server(*args)
    try:
        srv.wait_for(lambda s: total(s, "backend_errors_total", error_type="oom") == 1)
    finally:
        assert srv.stop() == 0
    append(log, "".join(lines[cut:]))
    want = _series(parse(oneshot(log, "vllm")))
    assert want['backend_errors_total{backend=vllm,error_type=oom,model=meta-llama/Llama-3.1-70B-Instruct}'] == 2
    srv = Server(*args)
    try:
        srv.wait_for(lambda s: _series(s) == want)
    finally:
        assert srv.stop() == 0


#: Any JSON value, small.
_JSON = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(max_size=8),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=8), inner, max_size=4),
    max_leaves=12)


def _paths(value: object, at: tuple[object, ...] = ()) -> list[tuple[object, ...]]:
    """Every place inside a JSON value: the keys and indexes that lead to it."""
    out = [at]
    if isinstance(value, dict):
        for key, inner in value.items():
            out += _paths(inner, (*at, key))
    elif isinstance(value, list):
        for i, inner in enumerate(value):
            out += _paths(inner, (*at, i))
    return out


def _replaced(value: object, at: tuple[object, ...], new: object) -> object:
    """``value`` with what is at ``at`` replaced by ``new``."""
    if not at:
        return new
    if isinstance(value, dict):
        return {**value, at[0]: _replaced(value[at[0]], at[1:], new)}
    assert isinstance(value, list) and isinstance(at[0], int)
    return [_replaced(v, at[1:], new) if i == at[0] else v for i, v in enumerate(value)]


@pytest.mark.parametrize("name", sorted(ENTRIES))
@settings(max_examples=300, deadline=None)
@given(data=st.data())
def test_a_damaged_state_is_taken_back_in_part_and_the_parser_reads_on(name: str, data: st.DataObject) -> None:
    """A saved state (of a parser that read a sample) with values anywhere inside it replaced by
    anything JSON can hold, as in a damaged or foreign file: ``restore`` keeps what is well formed
    and the parser reads the sample again without failing."""
    cls = ENTRIES[name].cls
    text = sorted((ROOT / "samples" / name).glob("*.log"))[0].read_text(encoding="utf-8")
    first = cls()
    _reads(first, text)
    state = json.loads(json.dumps(first.state()))
    for _ in range(data.draw(st.integers(1, 3), label="damages")):
        at = data.draw(st.sampled_from(_paths(state)[1:] or [("model",)]), label="where")
        state = _replaced(state, at, data.draw(_JSON, label="what"))
    parser = cls()
    parser.restore(state)
    _reads(parser, text)
    json.dumps(parser.state())  # and its state can be saved again


def _reads(parser: Parser, text: str) -> None:
    """The parser reads ``text`` batch by batch without failing."""
    failures: list[str] = []
    restartcheck._events(parser, text, 0.0, failures)
    assert not failures, failures
