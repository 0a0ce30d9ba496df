"""The llama.cpp parser's whole-chunk scan gives what record-by-record parsing gives."""

from __future__ import annotations

import random
from pathlib import Path

import pytest
from logmetrics_parsers import llamacpp_patterns as P
from logmetrics_parsers.llamacpp import LlamaCppParser

from logmetrics.engine.parsing import parse_records
from logmetrics.events import Event, number
from logmetrics.plugins import Parser
from logmetrics.records import Batch, Record
from logmetrics.store.catalog import BY_NAME
from logmetrics.testing import Run, assert_fast_path_matches, run_batches
from logmetrics.testing import totals as totals_of
from tests.helpers import Totals, store_view

ROOT = Path(__file__).resolve().parent.parent
SAMPLES = sorted((ROOT / "samples" / "llamacpp").glob("*.log"))
NOW = 1_750_000_000.0

PE = "prompt eval time = {:10.2f} ms / {:5d} tokens ({:8.2f} ms per token, {:8.2f} tokens per second)\n"
EV = "       eval time = {:10.2f} ms / {:5d} tokens ({:8.2f} ms per token, {:8.2f} tokens per second)\n"
TT = "      total time = {:10.2f} ms / {:5d} tokens\n"


def request(slot: int, task: int, path: str = "/v1/chat/completions", code: int = 200) -> str:
    """The lines of one served request, 2025 format: start, prompt, release, timing block, access line."""
    return (f"slot launch_slot_: id  {slot} | task {task} | processing task\n"
            f"slot update_slots: id  {slot} | task {task} | new prompt, n_ctx_slot = 8192, n_keep = 0, "
            f"n_prompt_tokens = {task + 10}\n"
            f"slot update_slots: id  {slot} | task {task} | kv cache rm [{task % 3}, end)\n"
            f"slot update_slots: id  {slot} | task {task} | prompt processing progress, n_past = 10, "
            f"n_tokens = 10, progress = 1.000000\n"
            f"slot update_slots: id  {slot} | task {task} | prompt done, n_past = 10, n_tokens = 10\n"
            f"slot      release: id  {slot} | task {task} | stop processing: n_past = 30, truncated = 0\n"
            f"slot print_timing: id  {slot} | task {task} | \n"
            + PE.format(100.0 + task, task + 10, 1.25, 800.0)
            + EV.format(400.5, 20, 20.03, 49.93)
            + TT.format(500.5 + task, task + 30)
            + f"srv  log_server_r: request: POST {path} 127.0.0.1 {code}\n")


def current(slot: int, task: int, t: str = "0.10.000.000") -> str:
    """One served request in the current format (time and level before every line, a record per
    timing line): slot choice, start, four timing lines, release."""
    head = f"{t} I slot %s: id  {slot} | task {task} | "
    return (f"{t} I slot get_availabl: id  {slot} | task -1 | selected slot by LRU, t_last = -1\n"
            + head % "launch_slot_" + "processing task, is_child = 0\n"
            + head % "print_timing" + PE.format(100.0 + task, task + 10, 1.25, 800.0)
            + head % "print_timing" + EV.format(400.5, 20, 20.03, 49.93)
            + head % "print_timing" + TT.format(500.5 + task, task + 30)
            + head % "print_timing" + "   graphs reused =         19\n"
            + head % "     release" + f"stop processing: n_tokens = {task + 29}, truncated = 0\n")


#: Records the scan must leave to ``parse`` or read exactly: odd numbers, odd paths, a cut block,
#: a block whose task is open, errors, a model line, a traceback, empty lines, continuations.
BLOCKS = [
    request(0, 1) + request(1, 2, "/health") + "srv  update_slots: all slots are idle\n",
    request(2, 7, "/v1/models/x", 404) + request(2, 8, "/v1/models/x", 200) + request(2, 9, "/v1/models/x", 404),
    request(0, 3, '/a/model_path="/m/evil.gguf"') + request(0, 4, "/GGML_ASSERT/x") + request(0, 5, "/x?a=b", 503),
    "slot print_timing: id  0 | task 11 | \n" + PE.format(10.0, 5, 2.0, 500.0) + EV.replace("{:8.2f} ms", "nan ms")
    .format(0.0, 0, 0.0) + TT.format(10.0, 5),
    "slot print_timing: id  1 | task 12 | \n" + PE.format(10.0, 5, 2.0, 500.0),
    "slot print_timing: id  1 | task 12 | prompt eval time =  10.00 ms /  5 tokens (  2.00 ms per token, 500.0 t/s)\n"
    + request(1, 12),
    "srv    send_error: task id = 5, error: the request exceeds the available context size. try increasing it\n"
    "srv  update_slots: failed to decode the batch: KV cache is full - try increasing it, i = 0, n_batch = 2048\n"
    "srv    send_error: task id = 6, error: Input prompt is too big compared to KV size.\n",
    "srv    load_model: loading model '/models/other-model-q4_k_m.gguf'\n"
    "main: server is listening on http://127.0.0.1:8080 - starting the main loop\n" + request(3, 20),
    "build: 4743 (d04e7163) with cc for x86_64-linux-gnu\n",
    "got exception: {\"code\":500,\"message\":\"parse error\",\"type\":\"server_error\"}\n",
    "Traceback (most recent call last):\n  File \"/app/x.py\", line 3, in f\n    g()\nValueError: bad\n",
    "slot launch_slot_: id  0 | task 30 | processing task\n    an indented line\n\n"
    "slot launch_slot_: id  1 | task 31 | processing task\n\n\n  indented after empty lines\n",
    "\n\nslot      release: id  0 | task 30 | stop processing: n_past = 1, truncated = 0\n\n",
    "slot update_slots: id  0 | task 30 | kv cache rm [p0, end)\n"
    "slot launch_slot_: id  0 | task -1 | processing task\n",
    "srv  params_from_: Chat format: Hermes 2 Pro\nsrv  params_from_: Chat format: Content-only\n"
    "srv  params_from_: Chat format: model loaded\nsrv  params_from_: Chat format: x (Shutting down)\n"
    "srv  params_from_: Chat format: CUDA error\nsrv  params_from_: Chat format: slot 3 released (x)\n",
    "0.10.000.000 I slot launch_slot_: id  0 | task 40 | processing task\n"
    "0.10.000.000 E srv  log_server_r: request: GET /health 127.0.0.1 500\n",
    current(0, 50) + current(1, 51, "12.59.999.999"),
    # the timing lines of two tasks interleaved, a block cut short, a warning among them
    "".join(a + b for a, b in zip(current(0, 52).splitlines(keepends=True), current(1, 53).splitlines(keepends=True),
                                  strict=True)),
    "".join(current(0, 54).splitlines(keepends=True)[:3]) + current(1, 55),
    '0.05.433.001 W srv    operator(): got exception: {"error":{"code":400,"message":"[json.exception.parse_error'
    '.101] x \\"y\\"","type":"invalid_request_error"}}\n' + current(0, 58)
    + '0.05.433.002 W srv    operator(): got exception: {"error":{"code":404,"message":"no",'
    '"type":"not_found_error"}}\n'
    '0.05.433.003 W srv    operator(): got exception: {"error":{"code":503,"message":"busy",'
    '"type":"unavailable_error"}}\n'
    '0.05.433.004 W srv    operator(): got exception: {"error":{"code":400,"message":"cut\n',
    current(0, 56).replace("I slot      release", "W slot      release")
    + current(1, 57).replace("       eval time", "       eval time = nan ms /     0 tokens #"),
]


def unwrap(path: Path) -> str:
    """A sample's text, ending in a newline."""
    text = path.read_text(encoding="utf-8")
    return text if text.endswith("\n") else text + "\n"


def totals(events: list[Event]) -> Totals:
    """Counters summed, gauges' last values, histogram observations (sorted): the store's view."""
    return store_view(events)


def state(parser: LlamaCppParser) -> tuple[object, ...]:
    """What the parser keeps between records: the scan must leave it as ``parse`` does."""
    return (parser.model, parser._errors.after_decode, parser._block_key, list(parser._pairs.open),
            sorted(parser._pairs.models), list(parser._timings), parser._ready, sorted(parser._counted.models),
            sorted(parser._routes.known), sorted(parser._routes.unknown), parser._server)


def base(parser: LlamaCppParser, batch: Batch) -> tuple[list[Event], int, int]:
    """The engine's record-by-record path: one ``parse`` call per record, as for a parser without a scan."""
    events, matched, lines, errors, _ = parse_records(parser, batch)
    assert not errors
    return events, matched, lines


def internals(parser: Parser) -> tuple[object, ...]:
    """``state`` of a llama.cpp parser (the kit's ``state`` hook)."""
    assert isinstance(parser, LlamaCppParser)
    return state(parser)


def by_batches(text: str, size: int, scan: bool = True) -> Run:
    """Totals, matched records and their lines, and the final state, of the parser on batches cut
    the way the engine cuts them: through its scan, or (``scan=False``) record by record through
    ``parse``, as the engine runs a parser without a scan of its own."""
    return run_batches(LlamaCppParser, text, size, fast=scan, now=NOW, state=internals)


def by_records(text: str, size: int) -> Run:
    """``by_batches`` record by record."""
    return by_batches(text, size, scan=False)


@pytest.mark.parametrize("path", SAMPLES, ids=[p.name for p in SAMPLES])
def test_batch_scan_equals_per_record_path(path: Path) -> None:
    """On every sample, whole-chunk scans in any batch size give what record-by-record parsing gives."""
    text = unwrap(path)
    want = assert_fast_path_matches(LlamaCppParser, text, (None, 4096, 500), now=NOW, state=internals)
    assert want[1] > 0


def test_batch_scan_equals_per_record_path_on_blocks() -> None:
    """The records the scan reads itself and the odd ones it must leave to parse give the same."""
    text = "".join(BLOCKS)
    want = assert_fast_path_matches(LlamaCppParser, text, (None, 4096, 500, 1), now=NOW, state=internals)
    assert want[1] > 40


@pytest.mark.parametrize("seed", range(40))
def test_batch_scan_equals_per_record_path_on_shuffled_lines(seed: int) -> None:
    """The same holds on random mixtures of the samples' lines and whole blocks of records."""
    lines = [line for path in SAMPLES for line in unwrap(path).splitlines(keepends=True)]
    lines += [line for block in BLOCKS for line in block.splitlines(keepends=True)]
    rnd = random.Random(seed)
    items = rnd.sample(lines, rnd.randint(5, 150)) + rnd.sample(BLOCKS, rnd.randint(0, 6))
    rnd.shuffle(items)
    text = "".join(items)
    assert_fast_path_matches(LlamaCppParser, text, (None, rnd.randint(100, 3000)), now=NOW, state=internals)


def test_current_format_is_read_by_the_scan() -> None:
    """The current format's requests (time and level on every line) never reach ``parse``."""
    calls: list[str] = []

    class Counting(LlamaCppParser):
        def parse(self, record: Record) -> list[Event]:
            calls.append(record.text)
            return super().parse(record)

    parser = Counting()
    text = "".join(current(i % 2, i) for i in range(50))
    events, matched, lines, _ = parser.parse_batch(Batch("test", text, NOW, text.count("\n")))
    assert calls == []
    assert sum(number(e) for e in events if e.metric == "llm_requests_total") == 50
    assert (matched, lines) == (250, 250)  # start, three timing lines and release of each request
    assert totals_of(events, LlamaCppParser) == by_records(text, len(text) + 1)[0]


def test_slot_and_srv_lines_start_records() -> None:
    """The scan takes a slot or srv line below a record as the start of the next one: so does the parser."""
    for line in ("slot launch_slot_: id  0 | task 1 | processing task", "srv  update_slots: all slots are idle",
                 "slot      release: x", "srv  log_server_r: request: GET / 127.0.0.1 200"):
        assert not P.CONTINUATION_LLAMA.match(line)


def test_time_outs_at_the_start_of_a_batch() -> None:
    """Requests timed out by a later batch's time count with its first record, as record by record."""
    first = request(0, 1).split("slot      release")[0]  # started, never released
    later = "slot update_slots: id  0 | task 2 | prompt done, n_past = 1, n_tokens = 1\n" + request(1, 3)
    results = []
    for scan in (True, False):
        parser = LlamaCppParser()
        got = []
        for text, t in ((first, NOW), (later, NOW + 3600)):
            batch = Batch("test", text, t, text.count("\n"))
            got.append(parser.parse_batch(batch) if scan else base(parser, batch))
        events, matched, lines = got[1][:3]
        timed_out = sum(number(e) for e in events if e.metric == "logmetrics_requests_timed_out_total")
        kept = totals([e for e in events if e.metric in BY_NAME])
        results.append((timed_out, kept, matched, lines, state(parser)))
    assert results[0] == results[1]
    assert results[0][0] == 1
    assert results[0][2:4] == (6, 9)  # the silent first record counts: it carries the time-out
