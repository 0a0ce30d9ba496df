"""Readiness is the engine's: after ``learn`` or ``restore``, ``backend_ready`` 1 for the model a
parser says it is ready with goes out once, with the stream's next batch."""

from __future__ import annotations

import time
from collections.abc import Iterable
from pathlib import Path

import pytest

from logmetrics.engine.engine import Engine
from logmetrics.events import Event
from logmetrics.plugins import Parser, ParserEntry, discover
from logmetrics.records import Record
from logmetrics.sources.chunks import Chunk
from logmetrics.store.store import Store
from tests.helpers import parse

ROOT = Path(__file__).resolve().parent.parent
PROBE = b"logmetrics readiness probe\n"


class Toy(Parser):
    """Ready once a line said ``up``; ``down`` says it is not."""

    name = "toy"
    up = False

    def learn(self, text: str) -> None:
        """Readiness from the lines before the read position."""
        self.up = text.rstrip("\n").rpartition("\n")[2] == "up"

    def readiness(self) -> str | None:
        """The toy model while up."""
        return "toy-model" if self.up else None

    def state(self) -> dict[str, object]:
        """Whether it was up."""
        return {"up": self.up}

    def restore(self, state: dict[str, object]) -> None:
        """Take back whether it was up."""
        self.up = state.get("up") is True

    def parse(self, record: Record) -> Iterable[Event]:
        """Nothing: only the engine's announce can set the gauge."""
        return ()


class Broken(Toy):
    """A plugin whose readiness raises."""

    name = "broken"

    def readiness(self) -> str | None:
        """Always fails."""
        raise RuntimeError("no idea")


def engine(entries: dict[str, ParserEntry], parser: str) -> tuple[Engine, Store]:
    """An engine that sends every stream to ``parser``."""
    store = Store()
    return Engine(entries, store, parser=parser, source="s"), store


def ready(store: Store) -> dict[str, float]:
    """backend_ready by model."""
    return {labels[2]: v for (name, labels), v in store.gauges.items() if name == "backend_ready"}


def probe(eng: Engine, path: str = "/x.log") -> None:
    """One batch of a line no parser matches, counted at once: the stream's next batch."""
    eng.feed(Chunk(path, PROBE, time.time()))
    eng.finish()


def toys() -> dict[str, ParserEntry]:
    """The two toy plugins."""
    return {"toy": ParserEntry("toy", Toy, "test"), "broken": ParserEntry("broken", Broken, "test")}


def test_learned_readiness_goes_out_once_with_the_next_batch() -> None:
    """learn() found it up: the next batch sets the gauge; a later batch does not set it again."""
    eng, store = engine(toys(), "toy")
    eng.learn("/x.log", [b"start\nup\n"])
    assert ready(store) == {}
    probe(eng)
    assert ready(store) == {"toy-model": 1.0}
    store.gauges[("backend_ready", ("toy", "s", "toy-model"))] = 0.0
    probe(eng)
    assert ready(store) == {"toy-model": 0.0}


def test_a_parser_that_learned_nothing_says_nothing() -> None:
    """learn() on lines that do not say it is up: no gauge at all."""
    eng, store = engine(toys(), "toy")
    eng.learn("/x.log", [b"start\ndown\n"])
    probe(eng)
    assert ready(store) == {}


def test_restored_readiness_goes_out_with_the_next_batch() -> None:
    """A stream's saved state says it was up: after a restart, the next batch sets the gauge."""
    first, _ = engine(toys(), "toy")
    first.learn("/x.log", [b"up\n"])
    saved = first.stream_states()
    again, store = engine(toys(), "toy")
    again.restore_streams(saved)
    probe(again)
    assert ready(store) == {"toy-model": 1.0}


def test_a_readiness_that_raises_is_counted_and_the_stream_goes_on() -> None:
    """A plugin's bug in readiness() is reported, not the end of the stream: its lines are still read."""
    eng, store = engine(toys(), "broken")
    eng.learn("/x.log", [b"up\n"])
    probe(eng)
    assert ready(store) == {}
    assert store.counters[("logmetrics_lines_read_total", ("s",))] == 1


READY_SAMPLES = sorted(p for p in (ROOT / "samples").glob("*/*.log")
                       if 'backend_ready{' in p.with_suffix(".expected.prom").read_text()
                       and p.parent.name != "supabase")


@pytest.mark.parametrize("log", READY_SAMPLES, ids=[f"{p.parent.name}/{p.name}" for p in READY_SAMPLES])
def test_a_file_read_from_its_end_is_as_ready_as_read_whole(log: Path) -> None:
    """Every built-in parser: learn() on a whole sample, then one batch, says ready for the models
    the sample ends ready with (its golden file's backend_ready series at 1), and for no other."""
    golden = parse(log.with_suffix(".expected.prom").read_text())
    want = {dict(labels)["model"] for (name, labels), v in golden.items() if name == "backend_ready" and v == 1}
    eng, store = engine(discover(), log.parent.name)
    eng.learn(str(log), [log.read_bytes()])
    probe(eng, str(log))
    assert {model for model, v in ready(store).items() if v == 1} == want
