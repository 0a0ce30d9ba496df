"""Error records that a writer's pause cuts in two count as one read of the whole log counts them."""

from __future__ import annotations

import json
import time
from collections.abc import Iterator

import pytest
from logmetrics_parsers.api import ApiParser
from logmetrics_parsers.embeddings import EmbeddingsParser
from logmetrics_parsers.vllm import VllmParser
from logmetrics_parsers.whisper import WhisperParser

import logmetrics.engine.engine as engine_module
from logmetrics.engine.engine import HOLD_SECONDS, UNFINISHED_HOLD_SECONDS, Engine
from logmetrics.events import Event, values_of
from logmetrics.plugins import Parser, discover
from logmetrics.records.shapes import ends_in_traceback
from logmetrics.sources.chunks import Chunk
from logmetrics.store.store import Store
from tests.helpers import engine_batch

TB = ('Traceback (most recent call last):\n  File "/app/x.py", line 1, in f\n    raise ValueError("bad")\n'
      '  File "/app/y.py", line 2, in g\n    g()\nValueError: bad\n')
#: Two tracebacks chained by Python (one error), and two in a row (two errors where a parser scans
#: errors on their own, as vLLM's does; one record where a parser reads records).
CHAINED = (TB + "\nDuring handling of the above exception, another exception occurred:\n\n"
           + TB.replace("ValueError: bad", "KeyError: 'k'"))
TWICE = TB + TB.replace("ValueError: bad", "KeyError: 'k'")
#: An exception group as Python 3.11 prints it, its last member an OOM.
GROUP = ("  + Exception Group Traceback (most recent call last):\n"
         '  |   File "/app/x.py", line 1, in f\n'
         '  |     raise ExceptionGroup("eg", [ValueError(1), OSError(2)])\n'
         "  | ExceptionGroup: eg (2 sub-exceptions)\n"
         "  +-+---------------- 1 ----------------\n"
         "    | ValueError: 1\n"
         "    +---------------- 2 ----------------\n"
         "    | torch.OutOfMemoryError: CUDA out of memory.\n"
         "    +------------------------------------\n")
ACCESS = 'INFO:     127.0.0.1:1 - "POST /v1/chat/completions HTTP/1.1" 200 OK\n'
VLLM_HEADER = "ERROR 06-19 15:40:29 [serving_chat.py:240] "
CASES = [
    ("vllm", "INFO 06-19 15:40:20 [api_server.py:1] vLLM API server version 0.9.0\n" + ACCESS + TB + ACCESS),
    ("vllm", ACCESS + VLLM_HEADER + "Error in chat completion stream generator.\n" + CHAINED + ACCESS),
    ("vllm", ACCESS + TWICE + ACCESS),
    ("vllm", ACCESS + "".join(VLLM_HEADER + line + "\n" for line in ["Error in x.", *TB.splitlines()]) + ACCESS),
    ("api", ACCESS + "ERROR:    Exception in ASGI application\n" + CHAINED + ACCESS),
    ("api", "INFO:     Application startup complete.\n" + TB + ACCESS),
    ("api", ACCESS + TB + ACCESS),
    ("embeddings", ACCESS + "ERROR:    Exception in ASGI application\n" + TB + ACCESS),
    ("embeddings", "INFO:     Application startup complete.\n" + TB + ACCESS),
    ("embeddings", ACCESS + TB + ACCESS),
    ("whisper", "INFO:app:start\nERROR:app:failed\n" + CHAINED + "INFO:app:done\n"),
    ("whisper", "INFO:app:start\n" + TB + "INFO:app:done\n"),
]
IDS = [f"{parser}-{i}" for i, (parser, _) in enumerate(CASES)]


class Clock:
    """The engine's monotonic clock, moved by hand."""

    def __init__(self) -> None:
        self.now = 1000.0

    def monotonic(self) -> float:
        return self.now

    def time(self) -> float:
        return time.time()


@pytest.fixture
def clock(monkeypatch: pytest.MonkeyPatch) -> Iterator[Clock]:
    """The engine module's ``time`` replaced by a clock the test moves."""
    fake = Clock()
    monkeypatch.setattr(engine_module, "time", fake)
    yield fake


def by_type(parser: str, parts: list[str], clock: Clock, pause: float) -> dict[str, float]:
    """The errors counted by type when ``parts`` of one log are written ``pause`` seconds apart, the
    engine idle between them, and the input then ends."""
    store = Store()
    engine = Engine(discover(), store, parser=parser)
    for part in parts:
        engine.feed(Chunk("x.log", part.encode(), time.time()))
        clock.now += pause
        engine.idle()
    engine.finish()
    return {k[1][-1]: v for k, v in store.counters.items() if k[0] == "backend_errors_total" and v}


def errors(parser: str, parts: list[str], clock: Clock, pause: float) -> float:
    """The errors counted in all (``by_type``)."""
    return sum(by_type(parser, parts, clock, pause).values())


@pytest.mark.parametrize(("parser", "text"), CASES, ids=IDS)
def test_a_pause_after_any_line_of_an_error_record_leaves_the_errors_of_one_read(
        clock: Clock, parser: str, text: str) -> None:
    """A pause longer than any hold after any one line counts the errors one read of the log counts."""
    whole = errors(parser, [text], clock, 1.0)
    assert whole >= 1
    lines = text.splitlines(keepends=True)
    for cut in range(1, len(lines)):
        assert errors(parser, ["".join(lines[:cut]), "".join(lines[cut:])], clock, 60.0) == whole, cut


@pytest.mark.parametrize("pause", [1.0, UNFINISHED_HOLD_SECONDS + 1])
@pytest.mark.parametrize(("parser", "text"), CASES, ids=IDS)
def test_a_log_written_line_by_line_with_pauses_counts_each_error_once(
        clock: Clock, parser: str, text: str, pause: float) -> None:
    """A writer that pauses after every line, for a second or longer than a traceback is held, counts
    the errors one read of the log counts."""
    assert errors(parser, text.splitlines(keepends=True), clock, pause) == errors(parser, [text], clock, 1.0)


def test_a_traceback_written_line_by_line_is_one_record_typed_by_its_exception_line(clock: Clock) -> None:
    """Its lines a second apart, a traceback is held whole: its error type is its exception line's."""
    text = ACCESS + TB.replace("ValueError: bad", "torch.OutOfMemoryError: CUDA out of memory.") + ACCESS
    whole = by_type("vllm", [text], clock, 1.0)
    assert whole == {"oom": 1}
    assert by_type("vllm", text.splitlines(keepends=True), clock, 1.0) == whole
    assert by_type("vllm", text.splitlines(keepends=True), clock, UNFINISHED_HOLD_SECONDS + 1) != whole  # (cut)


@pytest.mark.parametrize("parser", ["api", "whisper"])
def test_an_exception_group_written_line_by_line_is_one_record_typed_by_its_members(clock: Clock, parser: str) -> None:
    """Its lines a second apart (after the error line and the group's first, written at once), an
    exception group is held until its closing rule: typed as when read at once."""
    lines = ("ERROR:app:transcription failed\n" + GROUP + "INFO:app:done\n").splitlines(keepends=True)
    whole = by_type(parser, ["".join(lines)], clock, 1.0)
    assert whole == {"oom": 1}
    assert by_type(parser, ["".join(lines[:2]), *lines[2:]], clock, 1.0) == whole


def test_two_tracebacks_written_a_minute_apart_are_two_errors(clock: Clock) -> None:
    """The rest of an error record is only what continues it: a traceback after a whole one is another error."""
    assert errors("vllm", [TB, TB], clock, 60.0) == 2
    assert errors("vllm", [VLLM_HEADER + "Error in x.\n", ACCESS, TB], clock, 60.0) == 2


def test_a_record_cut_inside_a_traceback_is_held_until_its_rest_comes(clock: Clock) -> None:
    """A record that ends inside a traceback is held up to UNFINISHED_HOLD_SECONDS, a whole one HOLD_SECONDS."""
    store = Store()
    engine = Engine(discover(), store, parser="vllm")
    engine.feed(Chunk("x.log", (ACCESS + TB[:TB.index("    g()")]).encode(), time.time()))
    head = engine.due()
    clock.now += UNFINISHED_HOLD_SECONDS - 1
    engine.idle()
    assert not [k for k in store.counters if k[0] == "backend_errors_total" and store.counters[k]]
    assert head is not None and head >= clock.now  # the poll loop is not woken for it before then
    clock.now += 2
    engine.idle()
    assert sum(v for k, v in store.counters.items() if k[0] == "backend_errors_total") == 1
    engine.feed(Chunk("x.log", (ACCESS + TB).encode(), time.time()))  # (a whole one, after another line)
    clock.now += HOLD_SECONDS
    engine.idle()
    assert sum(v for k, v in store.counters.items() if k[0] == "backend_errors_total") == 2


@pytest.mark.parametrize(("text", "unfinished"), [
    ("Traceback (most recent call last):\n", True),
    ('Traceback (most recent call last):\n  File "a.py", line 1, in f\n', True),
    ('Traceback (most recent call last):\n  File "a.py", line 1, in f\n    raise X\n    ^^^^^^^\n', True),
    ('  File "a.py", line 1, in f\n    raise X\nValueError: x\n', False),
    ('  File "<string>", line 1, in <module>\nValueError: x\n', False),
    ('ERROR 06-19 15:40:29 [x.py:1]   File "a.py", line 1, in f\nERROR 06-19 15:40:30 [x.py:1]     raise X\n', True),
    ('ERROR 06-19 15:40:29 [x.py:1]   File "a.py", line 1, in f\nERROR 06-19 15:40:29 [x.py:1] ValueError: x\n', False),
    ("ValueError: x\n\nDuring handling of the above exception, another exception occurred:\n", True),
    ('INFO:     127.0.0.1:1 - "GET / HTTP/1.1" 200 OK\n', False),
    (GROUP[:GROUP.index("  +-+")], True),  # (after the group's own exception line: its members follow)
    (GROUP[:GROUP.index("    +--------------------")], True),
    (GROUP, False),
    ("", False),
])
def test_a_record_ends_inside_a_traceback_before_its_exception_line(text: str, unfinished: bool) -> None:
    """A record whose last line opens a traceback, is a frame or a frame's source has more to come."""
    assert ends_in_traceback(text) is unfinished


@pytest.mark.parametrize(("cls", "error"), [
    (VllmParser, VLLM_HEADER + "Error in chat completion stream generator.\n"),
    (ApiParser, "ERROR:    Exception in ASGI application\n"),
    (EmbeddingsParser, "ERROR:app:embedding failed\n"),
    (WhisperParser, "ERROR:app:transcription failed\n"),
])
def test_the_rest_of_an_error_record_after_a_restart_counts_with_it(cls: type[Parser], error: str) -> None:
    """What a parser keeps across a restart tells the rest of an error record read after it."""
    head, rest = ACCESS + error, TB + ACCESS

    def count(events: list[Event]) -> float:
        return sum(sum(values_of(e)) for e in events if e.metric == "backend_errors_total")

    first = engine_batch(cls(), head)[0]
    parser = cls()
    engine_batch(parser, head)
    again = cls()
    again.restore(json.loads(json.dumps(parser.state())))
    assert count(first) == 1
    assert count(engine_batch(again, rest)[0]) == 0
    assert count(engine_batch(cls(), rest)[0]) == 1  # (without the state, an error of its own)
