"""The vLLM parser, called directly: every rule, the batch scan against the per-record path."""

from __future__ import annotations

import calendar
import json
import random
import re
from collections.abc import Callable
from pathlib import Path

import pytest
from logmetrics_parsers import vllm_patterns as P
from logmetrics_parsers.common import (
    MAX_KNOWN_ROUTES,
    MAX_UNKNOWN_ROUTES,
    NOT_FOUND,
    OTHER,
    RouteLabels,
    route_template,
    split_access_key,
)
from logmetrics_parsers.vllm import MAX_PENDING, VllmParser
from logmetrics_parsers.vllm_patterns import ERROR_TYPES, classify_error

from logmetrics.events import UNKNOWN_MODEL, Event, number
from logmetrics.plugins import record_rule, validate
from logmetrics.records import Batch, Record, RecordAssembler, split_records
from logmetrics.store.catalog import BY_NAME
from logmetrics.testing import assert_fast_path_matches, check_events, run_batches
from tests.helpers import Totals, engine_batch, store_view

ROOT = Path(__file__).resolve().parent.parent
SAMPLES = sorted((ROOT / "samples" / "vllm").glob("*.log"))
NOW = float(calendar.timegm((2025, 6, 20, 12, 0, 0)))
ANSI = re.compile(r"\x1b\[[0-9;]*[A-Za-z]")

ACCEPTANCE = (
    "INFO 04-10 03:35:27 [loggers.py:80] Engine 000: Avg prompt throughput: 12.5 tokens/s, Avg generation "
    "throughput: 40.1 tokens/s, Running: 3 reqs, Waiting: 1 reqs, GPU KV cache usage: 4.2%, Prefix cache hit rate: 0.0%"
)


def scan(text: str, parser: VllmParser | None = None, now: float = NOW) -> tuple[list[Event], int]:
    """``parse_batch`` on ``text`` (whole lines) with a fresh parser unless one is given; its events
    pass the engine's checks (``check_events``)."""
    events, matched = engine_batch(parser or VllmParser(), text, now)
    return check_events(VllmParser, events), matched


def totals(events: list[Event]) -> Totals:
    """Counters summed, gauges' last values, histogram observations sorted: the store's view."""
    return store_view(events, 9)


def nonzero(events: list[Event]) -> Totals:
    """``totals`` without the zero-valued counters that only make series exist."""
    return {k: v for k, v in totals(events).items() if v != 0.0 or BY_NAME[k[0]].kind != "counter"}


def stats_v1(ts: str, p: float, g: float, run: int = 1, wait: int = 0, engine: str = "000", tail: str = "") -> str:
    """A V1 stats line (0.8.5+ format) logged at ``ts`` (``MM-DD HH:MM:SS``)."""
    return (f"INFO {ts} [loggers.py:123] Engine {engine}: Avg prompt throughput: {p} tokens/s, Avg generation "
            f"throughput: {g} tokens/s, Running: {run} reqs, Waiting: {wait} reqs, GPU KV cache usage: 1.0%, "
            f"Prefix cache hit rate: 0.0%{tail}\n")


def stats_v0(ts: str, p: float, g: float) -> str:
    """A V0 stats line (0.4 - 0.7 format, with the trailing period)."""
    return (f"INFO {ts} metrics.py:341] Avg prompt throughput: {p} tokens/s, Avg generation throughput: {g} tokens/s, "
            "Running: 1 reqs, Swapped: 0 reqs, Pending: 0 reqs, GPU KV cache usage: 2.0%, CPU KV cache usage: 0.0%.\n")


def unwrap(path: Path) -> str:
    """A sample's text as the engine hands it over: Docker json-file peeled off, ANSI codes removed."""
    raw = path.read_text(encoding="utf-8")
    if raw.startswith("{"):
        parts = [json.loads(line)["log"] for line in raw.splitlines()]
        raw = "".join(parts)
    return ANSI.sub("", raw)


# -- the contract -----------------------------------------------------------------------------


def test_parser_passes_plugin_validation() -> None:
    """The class is a valid plugin named vllm, claiming vLLM streams and vLLM processes."""
    entry = validate(VllmParser, "test")
    assert entry.name == "vllm"
    assert VllmParser.claims == ("*vllm*",)
    assert VllmParser.process_names == ("vllm", "VLLM::")


def test_acceptance_example() -> None:
    """The reference V1 stats line gives running 3, waiting 1, KV 0.042 and its throughputs."""
    got = nonzero(scan(ACCEPTANCE + "\n")[0])
    m = (UNKNOWN_MODEL,)
    assert got[("llm_requests_running", m)] == 3
    assert got[("llm_requests_waiting", m)] == 1
    assert got[("llm_kv_cache_usage_ratio", m)] == pytest.approx(0.042)
    assert got[("llm_prompt_throughput_tokens_per_second", m)] == 12.5
    assert got[("llm_generation_throughput_tokens_per_second", m)] == 40.1
    assert got[("llm_prefix_cache_hit_ratio", m)] == 0.0


def test_every_event_names_a_catalog_family_with_its_labels_and_a_rule() -> None:
    """Events use catalog names, as many label values as the family has labels, and a rule name."""
    for path in SAMPLES:
        for e in check_events(VllmParser, scan(unwrap(path))[0]):
            assert len(e.labels) == len(BY_NAME[e.metric].labels), e
            assert e.rule, e
            assert e.backend is None


def test_parse_uses_the_record_time_and_accepts_none() -> None:
    """``parse`` works on one record, with or without a time."""
    assert nonzero(list(VllmParser().parse(Record(ACCEPTANCE, None))))[("llm_requests_running", ("unknown",))] == 3
    assert VllmParser().parse(Record("nothing to see here", NOW)) == []


# -- stats lines ------------------------------------------------------------------------------


@pytest.mark.parametrize("line", [
    "INFO 02-28 21:48:18 metrics.py:161] Avg prompt throughput: 0.0 tokens/s, Avg generation throughput: 44.9 "
    "tokens/s, Running: 2 reqs, Swapped: 0 reqs, Pending: 3 reqs, GPU KV cache usage: 82.1%, CPU KV cache usage: 0.0%",
    "INFO 07-22 07:54:32 metrics.py:341] Avg prompt throughput: 0.0 tokens/s, Avg generation throughput: 44.9 "
    "tokens/s, Running: 2 reqs, Swapped: 1 reqs, Pending: 3 reqs, GPU KV cache usage: 82.1%, CPU KV cache usage: 5.0%.",
    "INFO 05-14 17:50:01 [metrics.py:486] Avg prompt throughput: 0.0 tokens/s, Avg generation throughput: 44.9 "
    "tokens/s, Running: 2 reqs, Swapped: 0 reqs, Pending: 3 reqs, GPU KV cache usage: 82.1%, CPU KV cache usage: 0.0%.",
])
def test_v0_stats_lines_of_every_era(line: str) -> None:
    """V0 lines with and without the trailing period and brackets: Pending is the waiting gauge."""
    got = nonzero(scan(line + "\n")[0])
    m = (UNKNOWN_MODEL,)
    assert got[("llm_requests_running", m)] == 2
    assert got[("llm_requests_waiting", m)] == 3
    assert got[("llm_kv_cache_usage_ratio", m)] == pytest.approx(0.821)
    assert got[("llm_generation_throughput_tokens_per_second", m)] == 44.9
    assert ("llm_prefix_cache_hit_ratio", m) not in got


def test_v0_prefix_cache_line_sets_the_hit_ratio() -> None:
    """V0's separate ``Prefix cache hit rate: GPU: x%, CPU: y%`` line gives the GPU rate."""
    text = (stats_v0("06-14 10:00:05", 1.0, 2.0)
            + "INFO 06-14 10:00:05 metrics.py:357] Prefix cache hit rate: GPU: 12.50%, CPU: 3.00%\n")
    assert nonzero(scan(text)[0])[("llm_prefix_cache_hit_ratio", (UNKNOWN_MODEL,))] == pytest.approx(0.125)


def test_v1_optional_fields_and_device_name() -> None:
    """Deferred, Preemptions, another device's KV usage and MM cache do not get in the way."""
    line = ("(APIServer pid=7) INFO 01-05 10:00:00 [loggers.py:259] Engine 000: Avg prompt throughput: 10.0 tokens/s, "
            "Avg generation throughput: 0.1 tokens/s, Running: 5 reqs, Waiting: 2 reqs, Deferred: 1 reqs, "
            "Preemptions: 4, XPU KV cache usage: 55.5%, Prefix cache hit rate: 12.0%, External prefix cache hit "
            "rate: 90.0%, MM cache hit rate: 0.0%\n")
    got = nonzero(scan(line)[0])
    m = (UNKNOWN_MODEL,)
    assert got[("llm_requests_waiting", m)] == 2
    assert got[("llm_kv_cache_usage_ratio", m)] == pytest.approx(0.555)
    assert got[("llm_prefix_cache_hit_ratio", m)] == pytest.approx(0.12)
    assert got[("llm_preemptions_total", m)] == 4


def test_v1_line_without_engine_prefix_and_aggregated_line() -> None:
    """0.7 - 0.8.3 lines have no ``Engine 000:``; data-parallel aggregation says ``N Engines Aggregated``."""
    old = ("INFO 04-10 03:35:27 [loggers.py:80] Avg prompt throughput: 13.0 tokens/s, Avg generation throughput: "
           "52.1 tokens/s, Running: 7 reqs, Waiting: 0 reqs, GPU KV cache usage: 0.0%, Prefix cache hit rate: 80.0%\n")
    agg = ("INFO 04-10 03:35:27 [loggers.py:200] 2 Engines Aggregated: Avg prompt throughput: 1.0 tokens/s, Avg "
           "generation throughput: 2.0 tokens/s, Running: 9 reqs, Waiting: 4 reqs, GPU KV cache usage: 10.0%\n")
    assert nonzero(scan(old)[0])[("llm_requests_running", (UNKNOWN_MODEL,))] == 7
    assert nonzero(scan(agg)[0])[("llm_requests_waiting", (UNKNOWN_MODEL,))] == 4


def test_gauges_sum_counts_and_average_ratios_over_engines() -> None:
    """Two engines: running and throughput add up, KV usage is averaged, each from its last line."""
    text = (stats_v1("06-19 15:40:05", 100.0, 10.0, run=4, engine="000")
            .replace("1.0%", "20.0%")
            + stats_v1("06-19 15:40:06", 50.0, 5.0, run=2, engine="001").replace("1.0%", "40.0%")
            + stats_v1("06-19 15:40:15", 30.0, 3.0, run=1, engine="000").replace("1.0%", "10.0%"))
    got = nonzero(scan(text)[0])
    m = (UNKNOWN_MODEL,)
    assert got[("llm_requests_running", m)] == 3
    assert got[("llm_prompt_throughput_tokens_per_second", m)] == 80.0
    assert got[("llm_kv_cache_usage_ratio", m)] == pytest.approx(0.25)


def test_tokens_integrate_per_engine_from_the_line_stamps() -> None:
    """tokens += tps x dt per engine; a V1 engine's first line covers one window of the default interval."""
    text = (stats_v1("06-19 15:40:00", 100.0, 10.0, engine="000")
            + stats_v1("06-19 15:40:03", 999.0, 99.0, engine="001")
            + stats_v1("06-19 15:40:10", 50.0, 5.0, engine="000")
            + stats_v1("06-19 15:40:13", 20.0, 2.0, engine="001"))
    got = nonzero(scan(text)[0])
    assert got[("llm_prompt_tokens_total", (UNKNOWN_MODEL,))] == (100.0 + 999.0 + 50.0 + 20.0) * 10
    assert got[("llm_generation_tokens_total", (UNKNOWN_MODEL,))] == (10.0 + 99.0 + 5.0 + 2.0) * 10


def test_v1_first_window_opens_with_the_engine_client() -> None:
    """V1's first line covers the time since ``Supported tasks`` (the stats logger's creation)."""
    text = ("(APIServer pid=1) INFO 12-02 16:51:41 [entry.py:136] Supported tasks: ['generate']\n"
            + stats_v1("12-02 16:51:54", 100.0, 10.0) + stats_v1("12-02 16:52:04", 50.0, 5.0))
    got = nonzero(scan(text, now=float(calendar.timegm((2025, 12, 2, 17, 0, 0))))[0])
    assert got[("llm_prompt_tokens_total", (UNKNOWN_MODEL,))] == 100.0 * 13 + 50.0 * 10


def test_v1_first_line_after_idle_ticks_counts_one_interval() -> None:
    """A first line 35 s after ``Supported tasks`` is a later tick (the idle ones before it went to
    DEBUG): it covers one interval, not the 35 s since the engine client was built."""
    text = ("(APIServer pid=1) INFO 12-02 16:51:41 [entry.py:136] Supported tasks: ['generate']\n"
            + stats_v1("12-02 16:52:16", 100.0, 10.0))
    got = nonzero(scan(text, now=float(calendar.timegm((2025, 12, 2, 17, 0, 0))))[0])
    assert got[("llm_prompt_tokens_total", (UNKNOWN_MODEL,))] == 100.0 * 10


def test_v0_gap_is_capped_at_60_seconds() -> None:
    """A V0 line 70 s after the previous one counts 60 s, so a gap does not invent tokens."""
    text = stats_v0("06-14 10:00:08", 0.0, 0.0) + stats_v0("06-14 10:01:18", 230.0, 45.5)
    got = nonzero(scan(text)[0])
    assert got[("llm_prompt_tokens_total", (UNKNOWN_MODEL,))] == 230.0 * 60
    assert got[("llm_generation_tokens_total", (UNKNOWN_MODEL,))] == 45.5 * 60


def test_v1_line_after_an_idle_gap_counts_one_interval() -> None:
    """V1 drops idle intervals to DEBUG: after a gap a line covers the logging interval only."""
    text = (stats_v1("08-21 14:05:09", 0.0, 10.0) + stats_v1("08-21 14:05:19", 0.0, 10.0)
            + stats_v1("08-21 14:09:41", 200.0, 30.0))
    got = nonzero(scan(text)[0])
    assert got[("llm_prompt_tokens_total", (UNKNOWN_MODEL,))] == 200.0 * 10
    assert got[("llm_generation_tokens_total", (UNKNOWN_MODEL,))] == 10.0 * 10 * 2 + 30.0 * 10


def test_year_is_inferred_across_new_year() -> None:
    """December lines read in January are last year's: 23:59:55 -> 00:00:05 is 10 s."""
    text = stats_v1("12-31 23:59:55", 0.0, 0.0) + stats_v1("01-01 00:00:05", 7.0, 3.0)
    got = nonzero(scan(text, now=float(calendar.timegm((2026, 1, 1, 0, 0, 6))))[0])
    assert got[("llm_prompt_tokens_total", (UNKNOWN_MODEL,))] == 70.0
    got = nonzero(scan(text, now=float(calendar.timegm((2025, 12, 31, 23, 59, 59))))[0])
    assert got[("llm_prompt_tokens_total", (UNKNOWN_MODEL,))] == 70.0


def test_integration_state_carries_across_batches() -> None:
    """An engine's last line survives the end of a batch: the next V1 line covers one interval (10 s),
    not the 11 s between stamps cut to the second."""
    parser = VllmParser()
    scan(stats_v1("06-19 15:40:00", 1.0, 1.0), parser)
    got = nonzero(scan(stats_v1("06-19 15:40:11", 4.0, 2.0), parser)[0])
    assert got[("llm_prompt_tokens_total", (UNKNOWN_MODEL,))] == 40.0


def test_v1_lines_cover_one_interval_whatever_their_stamps() -> None:
    """Stamps 10 and 11 s apart (ticks 10 s apart, cut to the second) each count 10 s; an interval set
    shorter is learned from the shortest gap between two lines."""
    parser = VllmParser()
    text = "".join(stats_v1(f"06-19 15:40:{s:02d}", 1.0, 0.0) for s in (0, 10, 21, 31, 42))
    got = nonzero(scan(text, parser)[0])
    assert got[("llm_prompt_tokens_total", (UNKNOWN_MODEL,))] == 50.0
    parser = VllmParser()
    text = "".join(stats_v1(f"06-19 15:40:{s:02d}", 1.0, 0.0) for s in (0, 5, 11, 16))
    got = nonzero(scan(text, parser)[0])
    assert got[("llm_prompt_tokens_total", (UNKNOWN_MODEL,))] == 25.0


def test_stats_text_inside_another_line_is_ignored() -> None:
    """A prompt that quotes a stats line is not a stats line."""
    line = ("INFO 06-19 15:40:00 [logger.py:43] Received request chatcmpl-1: prompt: 'see: Avg prompt throughput: "
            "9.0 tokens/s, Avg generation throughput: 9.0 tokens/s, Running: 99 reqs, Waiting: 9 reqs, GPU KV cache "
            "usage: 9.0%', params: SamplingParams(n=1), lora_request: None.\n")
    assert nonzero(scan(line)[0]) == {}


# -- model and start-ups ----------------------------------------------------------------------


@pytest.mark.parametrize(("line", "model"), [
    ("INFO 03-02 23:59:21 api_server.py:241] args: Namespace(host=None, served_model_name='mistral-7b', "
     "model='mistralai/Mistral-7B')", "mistral-7b"),
    ("INFO 10-01 18:40:00 api_server.py:527] args: Namespace(model='facebook/opt-125m', tokenizer=None, "
     "served_model_name=None, seed=0)", "facebook/opt-125m"),
    ("INFO 06-02 10:00:00 [cli_args.py:309] args: Namespace(model_tag='x/y', model='x/y', "
     "served_model_name=['short', 'alias'])", "short"),
    ("(APIServer pid=1) INFO 08-21 14:02:11 [utils.py:326] non-default args: {'model_tag': 'Qwen/Q', "
     "'model': 'Qwen/Q', 'served_model_name': ['qwen']}", "qwen"),
    ("(APIServer pid=1) INFO 08-21 14:02:11 [utils.py:326] non-default args: {'model_tag': '/data/m', "
     "'model': '/data/m', 'port': 3456}", "/data/m"),
    ("INFO 04-04 16:30:36 [core.py:61] Initializing a V1 LLM engine (v0.8.3) with config: "
     "model='google/gemma-3-1b-it', speculative_config=None, served_model_name=google/gemma-3-1b-it, x=1",
     "google/gemma-3-1b-it"),
    ("INFO 05-14 17:44:22 [llm_engine.py:240] Initializing a V0 LLM engine (v0.8.5) with config: "
     "model='Qwen/Qwen3-14B', served_model_name=qwen3, seed=0", "qwen3"),
    ("(APIServer pid=1) INFO 06-19 15:35:00 [startup.py:40] vLLM server version 0.33.0, serving model org/model-7b",
     "org/model-7b"),
])
def test_model_is_learned_from_start_up_lines(line: str, model: str) -> None:
    """served_model_name first (None falls through), then model; every start-up line form."""
    parser = VllmParser()
    scan(line + "\n" + ACCEPTANCE + "\n", parser)
    assert parser.model == model


def test_logo_names_the_model_and_args_win() -> None:
    """The logo (a multi-line record) names a model; the args' served name that follows wins."""
    logo = "".join(f"(APIServer pid=1) INFO 06-19 15:35:00 [startup.py:88] {x}\n" for x in (
        "", "  \u2584\u2584 \u2588  \u2588 \u2580\u2584  version 0.33.0",
        "  \u2580\u2580 \u2580\u2580 \u2580 \u2580  model   org/path-model", ""))
    parser = VllmParser()
    events, _ = scan(logo, parser)
    assert parser.model == "org/path-model"
    assert totals(events) == {("backend_restarts_total", ()): 1.0}  # no zero series for a name that may change
    events, _ = scan("(APIServer pid=1) INFO 06-19 15:35:00 [startup.py:61] non-default args: "
                     "{'model': 'org/path-model', 'served_model_name': ['served']}\n", parser)
    assert parser.model == "served"
    assert ("llm_prompt_tokens_total", ("served",)) in totals(events)
    assert split_records(logo, record_rule(VllmParser)) == [logo.rstrip("\n")]


def test_one_start_counts_once() -> None:
    """Version, args, engine init (one per data-parallel engine) and Starting lines are one start."""
    start = ("(APIServer pid=1) INFO 09-30 11:31:04 [api_server.py:1839] vLLM API server version 0.11.0\n"
             "(APIServer pid=1) INFO 09-30 11:31:04 [utils.py:233] non-default args: {'model': 'm'}\n"
             "(EngineCore_DP0 pid=3) INFO 09-30 11:31:09 [core.py:77] Initializing a V1 LLM engine (v0.11.0) "
             "with config: model='m', served_model_name=m\n"
             "(EngineCore_DP1 pid=4) INFO 09-30 11:31:09 [core.py:77] Initializing a V1 LLM engine (v0.11.0) "
             "with config: model='m', served_model_name=m\n"
             "(APIServer pid=1) INFO 09-30 11:32:32 [api_server.py:1912] Starting vLLM API server 0 on http://0.0.0.0:8000\n"
             "(APIServer pid=1) INFO 09-30 11:32:32 [api_server.py:1912] Starting vLLM API server 1 on http://0.0.0.0:8000\n")
    events, matched = scan(start)
    assert totals(events)[("backend_restarts_total", ())] == 1.0
    assert matched == 2  # the version line (a start) and the args (the model's zero series)
    restarted = start + start.replace("11:31:", "11:52:").replace("11:32:", "11:53:")
    assert totals(scan(restarted)[0])[("backend_restarts_total", ())] == 2.0


def test_start_ups_without_a_version_line() -> None:
    """An offline engine logs only its init line; the logo and version line of one start count once."""
    v0 = "INFO 05-14 17:44:22 [llm_engine.py:240] Initializing an LLM engine (v0.5.0) with config: model='m'\n"
    assert totals(scan(v0 + ACCEPTANCE + "\n" + v0)[0])[("backend_restarts_total", ())] == 2.0
    both = ("(APIServer pid=1) INFO 06-19 15:35:00 [api_server.py:1] vLLM API server version 0.2.0\n"
            "(APIServer pid=1) INFO 06-19 15:35:00 [startup.py:88]   \u2580\u2588  model   m\n")
    assert totals(scan(both)[0])[("backend_restarts_total", ())] == 1.0


def test_zero_counters_once_per_model() -> None:
    """The model's counters appear at 0 when it is learned, once, and a restart resets no series."""
    parser = VllmParser()
    line = "INFO 06-02 10:00:00 [api_server.py:1] args: Namespace(model='m', served_model_name=None)\n"
    first = totals(scan(line, parser)[0])
    errors: Totals = {("backend_errors_total", ("m", kind)): 0.0 for kind in ERROR_TYPES}
    assert first == {
        ("backend_restarts_total", ()): 0.0, ("llm_prompt_tokens_total", ("m",)): 0.0,
        ("llm_generation_tokens_total", ("m",)): 0.0, **errors}
    assert len(ERROR_TYPES) == 10
    assert scan(line, parser)[0] == []


V1_ADDED = "(APIServer pid=1) INFO 09-30 11:41:40 [async_llm.py:323] Added request chatcmpl-a0-a1b2c3d4.\n"
V0_ADDED = "INFO 06-14 09:59:30 async_llm_engine.py:173] Added request chat-1.\n"


def zero_series(text: str) -> set[tuple[str, tuple[str, ...]]]:
    """The llm_* series a scan of ``text`` starts at 0."""
    return {(ev.metric, ev.labels) for ev in scan(text)[0] if ev.value == 0 and ev.metric.startswith("llm_")
            and ev.metric.endswith("_total")}


def test_zero_series_only_where_the_log_can_move_them() -> None:
    """V1 never shows outcome="ok" at 0; V0 AsyncLLMEngine's request lines do; V0 stats start preemptions."""
    m = UNKNOWN_MODEL
    v1 = zero_series(stats_v1("06-19 15:40:00", 1.0, 1.0) + V1_ADDED
                     + "INFO 09-30 11:41:41 [async_llm.py:512] Aborted request(s) chatcmpl-a0-a1b2c3d4.\n")
    assert ("llm_requests_total", (m, "ok")) not in v1 and ("llm_preemptions_total", (m,)) not in v1
    assert {("llm_requests_total", (m, "error")), ("llm_prompt_tokens_total", (m,))} <= v1
    v0 = zero_series(V0_ADDED + "INFO 06-14 10:00:01 metrics.py:341] Avg prompt throughput: 1.0 tokens/s, "
                     "Avg generation throughput: 2.0 tokens/s, Running: 1 reqs, Swapped: 0 reqs, Pending: 0 reqs, "
                     "GPU KV cache usage: 1.0%, CPU KV cache usage: 0.0%.\n")
    assert {("llm_requests_total", (m, "ok")), ("llm_requests_total", (m, "aborted")),
            ("llm_preemptions_total", (m,))} <= v0
    assert ("llm_requests_total", (m, "error")) not in v0
    assert zero_series(stats_v1("06-19 15:40:00", 1.0, 1.0)) == {
        ("llm_prompt_tokens_total", (m,)), ("llm_generation_tokens_total", (m,))}
    off = "INFO 06-02 10:00:00 [utils.py:1] non-default args: {'model': 'm', 'disable_log_stats': True}\n"
    assert zero_series(off) == set()


def test_zero_series_follow_what_is_learned_later() -> None:
    """A series the log shows later (request logging seen) is started at 0 then, once."""
    parser = VllmParser()
    scan(stats_v1("06-19 15:40:00", 1.0, 1.0), parser)
    events = scan(V1_ADDED, parser)[0]
    assert totals(events) == {("llm_requests_total", (UNKNOWN_MODEL, "aborted")): 0.0,
                              ("llm_requests_total", (UNKNOWN_MODEL, "error")): 0.0}
    assert scan(V1_ADDED, parser)[0] == []


def test_segments_label_lines_with_the_model_in_effect() -> None:
    """In one batch, stats before a start-up line keep the old model, those after get the new one."""
    text = (stats_v1("06-19 15:40:00", 1.0, 1.0)
            + "INFO 06-19 15:40:01 [api_server.py:1] args: Namespace(model='new', served_model_name=None)\n"
            + stats_v1("06-19 15:40:10", 2.0, 2.0, run=7))
    got = nonzero(scan(text)[0])
    assert got[("llm_requests_running", ("unknown",))] == 1
    assert got[("llm_requests_running", ("new",))] == 7
    assert got[("llm_prompt_tokens_total", ("new",))] == 20.0


# -- request lifecycle ------------------------------------------------------------------------


def test_lifecycle_outcomes() -> None:
    """Finished -> ok, Aborted request(s) counts its ids, Request X aborted/failed -> aborted/error."""
    text = ("INFO 06-14 10:00:01 async_llm_engine.py:140] Finished request chat-1.\n"
            "INFO 06-14 10:00:02 [async_llm.py:512] Aborted request(s) chatcmpl-a-1, chatcmpl-b-2.\n"
            "INFO 06-14 10:00:03 [async_llm.py:377] Aborted request chatcmpl-c.\n"
            "INFO 06-14 10:00:04 [async_llm.py:400] Request chatcmpl-d aborted.\n"
            "INFO 06-14 10:00:05 [async_llm.py:546] Request chatcmpl-e failed (engine dead).\n"
            "INFO 06-14 10:00:06 [async_llm.py:546] Request chatcmpl-f failed (bad request): too long.\n"
            "INFO 06-14 10:00:07 [async_llm.py:273] Added request chatcmpl-g-a1b2.\n")
    events, matched = scan(text)
    got = nonzero(events)
    m = UNKNOWN_MODEL
    assert got[("llm_requests_total", (m, "ok"))] == 1.0
    assert got[("llm_requests_total", (m, "aborted"))] == 4.0
    assert got[("llm_requests_total", (m, "error"))] == 2.0
    assert matched == 7  # the Added line too: it starts the series V1 can move at 0


@pytest.mark.parametrize(("tail", "ids"), [
    (" chatcmpl-c.", " chatcmpl-c"),
    (" chatcmpl-c", " chatcmpl-c"),
    (" cmpl-1.2.3.", " cmpl-1.2.3"),
    ("(s) a-1, b.2..", " a-1, b.2."),
    ("(s) a . b .", " a . b "),
    (" .", " "),
])
def test_aborted_ids_up_to_a_final_dot(tail: str, ids: str) -> None:
    """The rare-line scan reads an Aborted line's ids to its end, less one final dot (dots inside stay)."""
    found = P.RARE.findall(f"\nINFO 06-14 10:00:02 [async_llm.py:512] Aborted request{tail}\n")
    assert found == [("Aborted request", ids)]


def test_v0_request_durations_from_added_and_finished() -> None:
    """V0 AsyncLLMEngine's Added/Finished pairs give llm_request_duration_seconds, across batches."""
    parser = VllmParser()
    scan("INFO 06-14 09:59:30 async_llm_engine.py:173] Added request chat-1.\n"
         "INFO 06-14 09:59:31 [async_llm_engine.py:173] Added request cmpl-2-0.\n", parser)
    events, _ = scan("INFO 06-14 09:59:36 async_llm_engine.py:140] Finished request chat-1.\n"
                     "INFO 06-14 09:59:44 [async_llm_engine.py:140] Finished request cmpl-2-0.\n"
                     "INFO 06-14 09:59:45 async_llm_engine.py:140] Finished request never-added.\n", parser)
    got = totals(events)
    assert got[("llm_request_duration_seconds", (UNKNOWN_MODEL,))] == [6.0, 13.0]
    assert got[("llm_requests_total", (UNKNOWN_MODEL, "ok"))] == 3.0


def test_pending_requests_are_bounded() -> None:
    """The start times of unfinished requests are capped, the oldest evicted first."""
    parser = VllmParser()
    text = "".join(f"INFO 06-14 09:59:30 async_llm_engine.py:173] Added request r{i}.\n"
                   for i in range(MAX_PENDING + 5))
    scan(text, parser)
    events, _ = scan("INFO 06-14 09:59:40 async_llm_engine.py:140] Finished request r0.\n"
                     f"INFO 06-14 09:59:40 async_llm_engine.py:140] Finished request r{MAX_PENDING + 4}.\n", parser)
    assert totals(events)[("llm_request_duration_seconds", (UNKNOWN_MODEL,))] == [10.0]


def test_v0_preemptions_follow_the_cumulative_count() -> None:
    """Rate-limited warnings print totals 1, 51, 101: the counter follows them, not the line count."""
    def warning(total: str) -> str:
        return ("WARNING 08-20 10:18:39 scheduler.py:1141] Sequence group 147 is preempted by PreemptionMode.RECOMPUTE "
                "mode because there is not enough KV cache space. This can affect the end-to-end performance. "
                f"Increase gpu_memory_utilization or tensor_parallel_size to provide more KV cache memory.{total}\n")
    text = "".join(warning(f" total_num_cumulative_preemption={n}") for n in (1, 51, 101))
    assert nonzero(scan(text)[0])[("llm_preemptions_total", (UNKNOWN_MODEL,))] == 101.0
    assert nonzero(scan(warning(""))[0])[("llm_preemptions_total", (UNKNOWN_MODEL,))] == 1.0


# -- access lines -----------------------------------------------------------------------------


def test_access_lines_aggregate_per_label_set() -> None:
    """One event per (method, route, code), whatever the client, prefix, query string or id."""
    text = ('INFO:     127.0.0.1:51408 - "POST /v1/chat/completions HTTP/1.1" 200 OK\n'
            '(APIServer pid=1) INFO:     [::1]:40000 - "POST /v1/chat/completions HTTP/1.1" 200 OK\n'
            'INFO:     - - "POST /v1/chat/completions?x=1 HTTP/2" 200 OK\n'
            'INFO:     10.0.0.1:1 - "GET /v1/files/file-abc123?purpose=x HTTP/1.1" 404 Not Found\n'
            'INFO:     10.0.0.1:1 - "GET /v1/files/file-9f9f9f HTTP/1.1" 404 Not Found\n'
            'INFO:     10.0.0.1:2 - "BREW /pot HTTP/1.1" 599 \n'
            'INFO:     10.0.0.1:3 - "POST /v1/completions HTTP/1.1" 500 Internal Server Error\n')
    events, matched = scan(text)
    access = [e for e in events if e.metric == "http_requests_total"]
    assert sorted((e.labels, e.value) for e in access) == [
        (("GET", "__not_found__", "404"), 2),  # not a route vLLM serves
        (("OTHER", "/pot", "599"), 1),
        (("POST", "/v1/chat/completions", "200"), 3),
        (("POST", "/v1/completions", "500"), 1),
    ]
    assert matched == 7
    assert not [e for e in events if e.metric == "backend_errors_total" and e.value]  # a 5xx line is not an error


@pytest.mark.parametrize(("path", "route"), [
    ("/v1/chat/completions", "/v1/chat/completions"),
    ("/health?verbose=1", "/health"),
    ("/v1/completions/cmpl-123abc", "/v1/completions/{id}"),
    ("/v1/files/file-abc123?purpose=x", "/v1/files/{id}"),
    ("/v1/models/42", "/v1/models/{id}"),
    ("/v1/responses/5f0c1e9d-8a47-4c3b-b5e4-f3a2d1c0b9a8", "/v1/responses/{id}"),
    ("/v1/chat/completions/chatcmpl-2b6f0c1e9d8a47c3b5e4f3a2d1c0b9a8", "/v1/chat/completions/{id}"),
    ("/v1/batches/batch_0a1b2c3d4e", "/v1/batches/{id}"),
    ("/static/0123456789abcdef01234567.js", "/static/{id}"),
    ("/v1/embeddings", "/v1/embeddings"),
    ("/a/b/c/d/e/f/g/h/i/j", "/a/b/c/d/e/f/g/h/..."),
    ("*", "*"),
    ("http://example.com/v1/models?x", "/v1/models"),
])
def test_route_templates(path: str, route: str) -> None:
    """Query strings go, ids become {id}, versions and words stay, depth is bounded."""
    assert route_template(path) == route


def test_access_key_methods_outside_the_standard_set_are_other() -> None:
    """A made-up method is OTHER; the code is the last three characters."""
    assert split_access_key('PROPFIND / HTTP/1.1" 405') == ("OTHER", "/", "405")
    assert split_access_key('DELETE /v1/files/file-1a2b HTTP/1.1" 200') == ("DELETE", "/v1/files/{id}", "200")


# -- errors -----------------------------------------------------------------------------------


@pytest.mark.parametrize(("text", "kind"), [
    ("torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 786.00 MiB.", "oom"),
    ("RuntimeError: CUDA out of memory. Tried to allocate 20.00 MiB", "oom"),
    ("ValueError: No available memory for the cache blocks. Try increasing `gpu_memory_utilization`", "oom"),
    ("ValueError: To serve at least one request (4.00 GiB KV cache is needed, which is larger than the available "
     "KV cache memory (1.7 GiB).", "oom"),
    ("vllm.v1.engine.exceptions.EngineDeadError: EngineCore encountered an issue.", "engine_dead"),
    ("vllm.engine.multiprocessing.MQEngineDeadError: Engine loop is not running. original error: "
     "OutOfMemoryError('CUDA out of memory')", "engine_dead"),
    ("vllm.engine.async_llm_engine.AsyncEngineDeadError: Background loop has errored already.", "engine_dead"),
    ("Engine core proc EngineCore_DP0 died unexpectedly, shutting down client.", "engine_dead"),
    ("RuntimeError: Engine core initialization failed. See root cause above.", "startup"),
    ("EngineCore failed to start.", "startup"),
    ("asyncio.exceptions.TimeoutError", "timeout"),
    ("Error in chat completion: RuntimeError: CUDA error: an illegal memory access was encountered", "cuda"),
    ("ValueError: This model's maximum context length is 4096 tokens. However, you requested 5000 tokens",
     "bad_request"),
    ("Error in preprocessing prompt inputs", "bad_request"),
    ("Exception in ASGI application", "asgi"),
    ("Error in chat completion stream generator.", "stream_error"),
    ("vllm.v1.engine.exceptions.EngineDeadError: x\nError in chat completion stream generator.", "engine_dead"),
    ("KeyError: 'messages'", "exception"),
    ("Something went wrong", "error"),
])
def test_error_classification(text: str, kind: str) -> None:
    """The error_type table: causes before contexts, then exception / error."""
    assert classify_error(text) == kind


def test_value_errors_of_request_handlers_are_bad_requests() -> None:
    """A ValueError raised in a serving_* module is the client's fault; elsewhere it is an exception."""
    assert classify_error("Error in chat completion: ValueError: bad tool call", request_handler=True) == "bad_request"
    assert classify_error("Error in chat completion: ValueError: bad tool call") == "exception"
    assert classify_error("Traceback (most recent call last):", traceback=True) == "exception"


TRACEBACK = """\
ERROR 12-16 21:40:15 engine.py:135] Error in model execution.
ERROR 12-16 21:40:15 engine.py:135] Traceback (most recent call last):
ERROR 12-16 21:40:15 engine.py:135]   File "/usr/lib/vllm/worker.py", line 80, in execute
ERROR 12-16 21:40:15 engine.py:135]     return self.model(x)
ERROR 12-16 21:40:15 engine.py:135]            ^^^^^^^^^^^^^
ERROR 12-16 21:40:15 engine.py:135] torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB.
"""
RAW = """\
(EngineCore_DP0 pid=8884) Process EngineCore_DP0:
(EngineCore_DP0 pid=8884) Traceback (most recent call last):
(EngineCore_DP0 pid=8884)   File "/usr/lib/python3.12/multiprocessing/process.py", line 314, in _bootstrap
(EngineCore_DP0 pid=8884)     self.run()
(EngineCore_DP0 pid=8884) RuntimeError: CUDA error: an illegal memory access was encountered
"""
ASGI = """\
ERROR:    Exception in ASGI application
Traceback (most recent call last):
  File "/usr/lib/python3.12/site-packages/uvicorn/protocols/http/httptools_impl.py", line 409, in run_asgi
    result = await app(self.scope, self.receive, self.send)
ValueError: broken pipe

During handling of the above exception, another exception occurred:

Traceback (most recent call last):
  File "/usr/lib/python3.12/site-packages/starlette/middleware/errors.py", line 165, in __call__
KeyError: 'x'
"""


def routes_of(events: list[Event]) -> dict[tuple[str, str, str], float]:
    """http_requests_total by (method, route, code)."""
    got: dict[tuple[str, str, str], float] = {}
    for e in events:
        if e.metric == "http_requests_total":
            method, route, code = e.labels
            got[method, route, code] = got.get((method, route, code), 0.0) + number(e)
    return got


def hit(path: str, code: str, method: str = "GET") -> str:
    """One uvicorn access line."""
    return f'(APIServer pid=1) INFO:     10.9.8.7:4242 - "{method} {path} HTTP/1.1" {code} x\n'


def test_scanner_404s_fold_and_real_routes_keep_their_label() -> None:
    """250 random 404 paths become one __not_found__ value; the chat route, before or after, keeps its own."""
    rnd = random.Random(7)
    noise = "".join(hit(f"/{rnd.choice(['wp', 'cgi', 'x'])}{rnd.getrandbits(40):x}/.env", "404") for _ in range(250))
    chat = hit("/v1/chat/completions", "200", "POST")
    got = routes_of(scan(chat + noise + chat + hit("/v1/models", "404"))[0])
    assert got == {("POST", "/v1/chat/completions", "200"): 2.0, ("GET", NOT_FOUND, "404"): 250.0,
                   ("GET", "/v1/models", "404"): 1.0}


def test_routes_listed_at_start_up_keep_their_label() -> None:
    """Routes from vLLM's ``Route: ..., Methods: ...`` lines are known: even a 404 on them keeps its route."""
    text = ("(APIServer pid=1) INFO 09-30 02:56:46 [launcher.py:44] Route: /v1/custom/{item_id}, Methods: GET\n"
            + hit("/v1/custom/42", "404") + hit("/v1/other", "404") + hit("/v1/other", "405", "PUT"))
    got = routes_of(scan(text)[0])
    assert got == {("GET", "/v1/custom/{id}", "404"): 1.0, ("GET", NOT_FOUND, "404"): 1.0,
                   ("PUT", NOT_FOUND, "405"): 1.0}


def test_a_route_that_answered_is_known() -> None:
    """A route that once answered 2xx keeps its label on later 404s (across batches)."""
    parser = VllmParser()
    scan(hit("/custom", "200"), parser)
    assert routes_of(scan(hit("/custom", "404"), parser)[0]) == {("GET", "/custom", "404"): 1.0}


def test_unknown_routes_with_other_errors_are_bounded() -> None:
    """Unknown routes answered 401/500 keep their label up to a bound per stream, then __other__."""
    text = "".join(hit(f"/secret{i}", "401") for i in range(MAX_UNKNOWN_ROUTES + 10))
    got = routes_of(scan(text)[0])
    assert len(got) == MAX_UNKNOWN_ROUTES + 1 and got[("GET", OTHER, "401")] == 10.0


def test_route_labels_for_any_parser() -> None:
    """Declared fixed routes and prefixes keep their label on a 404; other 404s fold; learning is bounded."""
    routes = RouteLabels(fixed=("/health",), prefixes=("/api/",))
    assert routes.fold(("GET", "/health", "404")) == ("GET", "/health", "404")
    assert routes.fold(("GET", "/api/users/{id}", "404")) == ("GET", "/api/users/{id}", "404")
    assert routes.fold(("GET", "/admin.php", "404")) == ("GET", NOT_FOUND, "404")
    for i in range(MAX_KNOWN_ROUTES + 5):
        routes.fold(("GET", f"/page{i}", "200"))
    assert len(routes.known) == MAX_KNOWN_ROUTES


OOM_SAMPLE = ROOT / "samples" / "vllm" / "oom-crash.log"


def errors_of(events: list[Event]) -> dict[str, float]:
    """Non-zero backend_errors_total by error_type."""
    return {k[1][1]: float(str(v)) for k, v in totals(events).items() if k[0] == "backend_errors_total" and v}


def test_one_crash_counts_once() -> None:
    """The OOM crash sample: each crash counts once, with its first record's cause, in any batch size."""
    text = unwrap(OOM_SAMPLE)
    assert errors_of(scan(text)[0]) == {"oom": 2.0}  # the runtime OOM, then the start-up short of KV cache memory
    for size in (4096, 500):
        assert errors_of(by_batches_events(text, size)) == {"oom": 2.0}


def test_serving_again_ends_a_crash() -> None:
    """A stats line or a start-up between two fatal errors makes them two crashes."""
    dead = "(APIServer pid=1) ERROR 09-30 11:42:18 [core_client.py:564] Engine core proc died unexpectedly.\n"
    assert errors_of(scan(dead + dead)[0]) == {"engine_dead": 1.0}
    assert errors_of(scan(dead + stats_v1("09-30 11:43:00", 1.0, 1.0) + dead)[0]) == {"engine_dead": 2.0}
    parser = VllmParser()
    scan(dead, parser)
    assert errors_of(scan(dead, parser)[0]) == {}
    scan(stats_v1("09-30 11:43:00", 1.0, 1.0), parser)
    assert errors_of(scan(dead, parser)[0]) == {"engine_dead": 1.0}
    start = "INFO 09-30 11:44:00 [api_server.py:1839] vLLM API server version 0.11.0\n"
    assert errors_of(scan(dead + start + dead)[0]) == {"engine_dead": 2.0}


def test_ready_line_ends_a_crash() -> None:
    """uvicorn's "Application startup complete." between two fatal errors makes them two crashes."""
    dead = "(APIServer pid=1) ERROR 09-30 11:42:18 [core_client.py:564] Engine core proc died unexpectedly.\n"
    ready = "(APIServer pid=1) INFO:     Application startup complete.\n"
    assert errors_of(scan(dead + ready + dead)[0]) == {"engine_dead": 2.0}
    parser = VllmParser()
    scan(dead, parser)
    scan(ready, parser)
    assert errors_of(scan(dead, parser)[0]) == {"engine_dead": 1.0}


def test_routes_are_learned_from_before_the_read_position() -> None:
    """Route lines logged before the read position (``learn``) make their routes known."""
    parser = VllmParser()
    parser.learn("(APIServer pid=1) INFO 09-30 02:56:46 [launcher.py:44] Route: /custom, Methods: GET\n")
    assert routes_of(scan(hit("/custom", "404"), parser)[0]) == {("GET", "/custom", "404"): 1.0}


def test_a_crash_is_placed_by_its_own_line() -> None:
    """A fatal message also quoted in an earlier line is placed at its error line: after the stats, so it counts."""
    msg = "Engine core proc EngineCore_DP0 died unexpectedly, shutting down client."
    quoted = f"INFO 09-30 11:41:00 [logger.py:43] Received request chatcmpl-1: prompt: '{msg}\n"
    dead = f"ERROR 09-30 11:42:18 [core_client.py:564] {msg}\n"
    parser = VllmParser()
    scan(dead, parser)
    assert errors_of(scan(quoted + stats_v1("09-30 11:42:00", 1.0, 1.0) + dead, parser)[0]) == {"engine_dead": 1.0}


def test_request_errors_count_per_record_during_a_crash() -> None:
    """Request-level errors are not folded into the crash."""
    dead = "ERROR 09-30 11:42:18 [core_client.py:564] Engine core proc died unexpectedly.\n"
    bad = ("ERROR 09-30 11:42:19 [serving_chat.py:200] Error in chat completion: ValueError: This model's maximum "
           "context length is 4096 tokens.\n")
    assert errors_of(scan(dead + bad + bad)[0]) == {"engine_dead": 1.0, "bad_request": 2.0}


RANK = """\
[rank0]: Traceback (most recent call last):
[rank0]:   File "/data/offline.py", line 89, in <module>
[rank0]:     test()
[rank0]: AssertionError
"""


@pytest.mark.parametrize(("text", "kind"), [
    (TRACEBACK, "oom"), (RAW, "cuda"), (ASGI, "asgi"), (RANK, "exception"),
    (TRACEBACK.replace("\n", "\r\n"), "oom"),
])
def test_a_traceback_is_one_error(text: str, kind: str) -> None:
    """Re-prefixed, raw, chained and rank-prefixed tracebacks each count once, typed by their exception."""
    events, matched = scan(text)
    assert totals(events) == {("backend_errors_total", ("unknown", kind)): 1.0}
    assert matched == 1


def test_each_traceback_of_a_burst_counts() -> None:
    """Tracebacks back to back (no 'During handling' between them) are separate errors."""
    second = RAW.split("\n", 1)[1].replace("EngineCore_DP0 pid=8884", "APIServer pid=1")
    last = "ERROR 12-16 21:40:16 [serving_chat.py:200] Error in chat completion: KeyError: 'x'\n"
    events, matched = scan(TRACEBACK + RAW + second + last)
    # the two CUDA tracebacks are separate records, but of the crash the OOM began: counted once, as oom
    assert nonzero(events) == {("backend_errors_total", ("unknown", "oom")): 1.0,
                               ("backend_errors_total", ("unknown", "exception")): 1.0}
    assert ("backend_errors_total", ("unknown", "cuda")) in totals(events)  # recognised, folded into the crash
    assert matched == 3  # the API server's traceback is in the record of the engine core's
    cuda = scan(RAW + second)[0]
    assert totals(cuda) == {("backend_errors_total", ("unknown", "cuda")): 1.0}


def test_error_inside_a_record_that_already_counted() -> None:
    """A traceback glued to an access line's record does not count that record twice."""
    text = 'INFO:     127.0.0.1:1 - "GET /health HTTP/1.1" 200 OK\n' + RAW.split("\n", 1)[1]
    events, matched = scan(text)
    assert ("backend_errors_total", ("unknown", "cuda")) in totals(events)
    assert matched == 1


def test_single_error_lines_count_once_each() -> None:
    """Two ERROR lines in a row are two errors; WARNING lines are none."""
    text = ("ERROR 01-02 03:04:05 [serving_chat.py:200] Error in chat completion: ValueError: This model's maximum "
            "context length is 4096 tokens.\n"
            "(APIServer pid=1) ERROR 01-02 03:04:05 [serving_completion.py:201] Error in completion: TimeoutError: x\n"
            "CRITICAL 01-02 03:04:06 [core.py:1] EngineCore encountered a fatal error.\n"
            "WARNING 01-02 03:04:07 [protocol.py:58] The following fields were present in the request but ignored\n")
    events, matched = scan(text)
    assert totals(events) == {("backend_errors_total", ("unknown", "bad_request")): 1.0,
                              ("backend_errors_total", ("unknown", "timeout")): 1.0,
                              ("backend_errors_total", ("unknown", "engine_dead")): 1.0}
    assert matched == 3


@pytest.mark.parametrize("text", [TRACEBACK, RAW, ASGI, RANK])
def test_split_records_keeps_a_traceback_in_one_record(text: str) -> None:
    """The records stage, with this parser's record shape, never cuts a traceback."""
    records = split_records(text, record_rule(VllmParser))
    assert len(records) == 1
    assert RecordAssembler(record_rule(VllmParser)).feed(text + "INFO:     next line\n")[0] == text


@pytest.mark.parametrize("cont", [P.CONTINUATION.match, re.compile(P.SHAPE.lines).match], ids=["scan", "shape"])
def test_continuation_accepts_prefixes_and_headers(cont: Callable[[str], re.Match[str] | None]) -> None:
    """A vLLM header or a process prefix in front of a traceback-ish body continues the record
    (for the scan, and in the record shape)."""
    assert cont('(EngineCore_DP0 pid=8884)   File "x.py", line 1')
    assert cont("(RayWorkerWrapper pid=1, ip=10.0.0.1) Traceback (most recent call last):")
    assert cont("ERROR 10-20 03:20:50 [async_llm.py:485[]     outputs = await x()")
    assert cont("ERROR 12-16 21:40:15 engine.py:135] ValueError: x")
    assert cont("ERROR 12-16 21:40:15 engine.py:135] ")
    assert not cont("ERROR 12-16 21:40:15 engine.py:135] Error in model execution.")
    assert not cont("INFO 12-16 21:40:15 [loggers.py:1] Engine 000: Avg prompt throughput: 1.0 tokens/s")


# -- the batch scan against the per-record path ----------------------------------------------


def by_batches_events(text: str, size: int) -> list[Event]:
    """The events of ``parse_batch`` on batches cut the way the engine cuts them."""
    parser = VllmParser()
    assembler = RecordAssembler(record_rule(VllmParser))
    events: list[Event] = []
    buf = ""
    for line in [*text.splitlines(keepends=True), ""]:
        buf += line
        if len(buf) >= size or not line:
            piece = assembler.feed(buf)[0] + (assembler.flush()[0] if not line else "")
            buf = ""
            if piece:
                events += engine_batch(parser, piece, NOW)[0]
    return events


#: The scan counts a multi-line record's matched lines by its own rules, which may differ from
#: ``parse``'s (all the lines of a record that gave events) by a traceback's lines: only the totals,
#: the records matched and the state are held equal.
LINES = False


def by_records(text: str) -> tuple[Totals, int]:
    """Totals (zero counters left out) and records matched of the per-record path."""
    run = run_batches(VllmParser, text, None, fast=False, now=NOW)
    return run[0], run[1]


def by_batches(text: str, size: int) -> tuple[Totals, int]:
    """Totals (zero counters left out) and records matched of ``parse_batch`` on batches cut the
    way the engine cuts them."""
    run = run_batches(VllmParser, text, size, fast=True, now=NOW)
    return run[0], run[1]


@pytest.mark.parametrize("path", SAMPLES, ids=[p.name for p in SAMPLES])
def test_batch_scan_equals_per_record_path(path: Path) -> None:
    """On every sample, whole-chunk scans in any batch size give what record-by-record parsing gives."""
    want = assert_fast_path_matches(VllmParser, unwrap(path), (None, 4096, 500), now=NOW, lines=LINES)
    assert want[1] > 0


@pytest.mark.parametrize("seed", range(40))
def test_batch_scan_equals_per_record_path_on_shuffled_lines(seed: int) -> None:
    """The same holds on random mixtures of every kind of line the samples hold, and whole tracebacks."""
    lines = [line for path in SAMPLES for line in unwrap(path).splitlines(keepends=True)]
    blocks = [ACCEPTANCE + "\n", TRACEBACK, RAW, ASGI, RANK, TRACEBACK.replace("ERROR", "WARNING")]
    rnd = random.Random(seed)
    items = rnd.sample(lines, rnd.randint(5, 150)) + rnd.sample(blocks, rnd.randint(0, 4))
    rnd.shuffle(items)
    text = "".join(items)
    assert_fast_path_matches(VllmParser, text, (None, rnd.randint(100, 3000)), now=NOW, lines=LINES)


def test_garbage_does_not_raise() -> None:
    """Random text made of log fragments never makes the parser raise."""
    bits = ["ERROR ", "INFO ", "01-02 03:04:05 ", "[a.py:1] ", "Traceback (most recent call last):", "  File", "\n",
            "Avg prompt throughput: ", "1.5 tokens/s, ", "Running: ", "reqs", "Error:", "(APIServer pid=1) ", "]",
            "INFO:     ", '"GET / HTTP/1.1" 200', "Finished request ", "Aborted request(s) ", "\u2588", "\r", " "]
    rnd = random.Random(3)
    parser = VllmParser()
    for _ in range(300):
        text = "".join(rnd.choice(bits) for _ in range(rnd.randint(1, 60))) + "\n"
        parser.parse_batch(Batch("test", text, NOW, text.count("\n")))
        list(parser.parse(Record(text.rstrip("\n"), NOW)))


# -- routing ----------------------------------------------------------------------------------


def test_sniff_scores() -> None:
    """vLLM start-up, stats and prefixed lines score high, vLLM-style headers some, others nothing."""
    assert VllmParser.sniff([ACCEPTANCE]) >= 0.9
    assert VllmParser.sniff(["(APIServer pid=1) INFO:     Started server process [1]"]) >= 0.9
    assert 0.3 < VllmParser.sniff(["INFO 01-02 03:04:05 [model_runner.py:1] Loading model weights took 1 GB"]) < 0.9
    assert VllmParser.sniff(["slot print_timing: id  0 | task 5 |", "prompt eval time =  10.0 ms /  5 tokens"]) == 0.0


def test_logging_prefix_tag_before_the_header() -> None:
    """A VLLM_LOGGING_PREFIX tag like '[Stage-1] ', alone or before a process prefix, is skipped."""
    text = ("[Stage-1] INFO 04-10 03:35:27 [loggers.py:80] Engine 000: Avg prompt throughput: 12.5 tokens/s, "
            "Avg generation throughput: 40.1 tokens/s, Running: 3 reqs, Waiting: 1 reqs, GPU KV cache usage: "
            "4.2%, Prefix cache hit rate: 0.0%\n"
            "[Stage-1] (APIServer pid=1) ERROR 04-10 03:35:28 [serving_chat.py:200] Error in chat completion: "
            "ValueError: bad\n")
    events, matched, lines, _ = VllmParser().parse_batch(Batch("s", text, 1_712_720_000.0, 2))
    got = {(e.metric, e.labels): e.value for e in events if e.value}
    assert got[("llm_requests_running", ("unknown",))] == 3
    assert got[("backend_errors_total", ("unknown", "bad_request"))] == 1
    assert matched == lines == 2


ACCESS_LIKE = [
    'INFO:     10.0.3.7:51408 - "POST /v1/chat/completions HTTP/1.1" 200 OK\n',
    'INFO:     10.0.3.7:51408 - "GET /v1/models HTTP/1.1" 404 Not Found\n',
    'INFO:     127.0.0.1:40000 - "POST /v1/completions?stream=true HTTP/1.1" 500 Internal Server Error\n',
    'INFO:     [::1]:5000 - "GET /health HTTP/1.1" 200 OK\n',
    'INFO:     10.0.0.1:1 - "DELETE /v1/files/file-abc123 HTTP/2" 204 No Content\n',
    "INFO:     Application startup complete.\n",
    "INFO:     Shutting down\n",
    "INFO:     Started server process [7]\n",
    '(APIServer pid=7) INFO:     10.0.0.2:3 - "POST /v1/chat/completions HTTP/1.1" 200 OK\n',
    'INFO:     10.0.3.7:51408 - "POST /v1/chat/completions HTTP/1.1" 200 OK and more text\n',
    '  File "x.py", line 1, in <module>\n',
    "ValueError: boom\n",
]


@pytest.mark.parametrize("seed", range(30))
def test_a_chunk_of_access_lines_only_gives_what_the_full_scan_gives(seed: int) -> None:
    """The scan kept for chunks of nothing but access lines counts what the full scan counts: mostly
    access lines, with look-alikes (lifecycle lines, a process prefix, a traceback line) mixed in."""
    rnd = random.Random(seed)
    pool = ACCESS_LIKE[:5] if seed % 3 == 0 else ACCESS_LIKE  # a third of the texts: access lines only
    text = "".join(rnd.choice(pool) for _ in range(rnd.randint(1, 300)))
    fast = by_batches(text, len(text) + 1)
    full = by_batches(text + "DEBUG 01-05 09:00:00 [core.py:1] EngineCore loop\n", len(text) + 100)
    assert fast == full
    if seed % 3 == 0:
        assert fast[1] == text.count("\n")  # every line is a record that counts


def test_access_lines_count_finished_requests_and_client_errors() -> None:
    """2xx on inference routes are ok requests, 4xx of any method client errors by the shared types; a 404
    ErrorInfo line is no backend error."""
    text = ('INFO:     127.0.0.1:1 - "POST /v1/chat/completions HTTP/1.1" 200 OK\n'
            'INFO:     127.0.0.1:2 - "POST /v1/completions HTTP/1.1" 200 OK\n'
            'INFO:     127.0.0.1:3 - "GET /health HTTP/1.1" 200 OK\n'
            'INFO:     127.0.0.1:4 - "POST /v1/completions HTTP/1.1" 400 Bad Request\n'
            "(APIServer pid=1) ERROR 12-02 16:51:48 [serving.py:274] Error with model error=ErrorInfo(message='The "
            "model `x` does not exist.', type='NotFoundError', param='model', code=404)\n"
            'INFO:     127.0.0.1:5 - "POST /v1/chat/completions HTTP/1.1" 404 Not Found\n'
            'INFO:     127.0.0.1:6 - "POST /v1/nonexistent HTTP/1.1" 404 Not Found\n'
            'INFO:     127.0.0.1:7 - "GET /v1/nonexistent HTTP/1.1" 404 Not Found\n'
            'INFO:     127.0.0.1:8 - "GET /v1/chat/completions HTTP/1.1" 405 Method Not Allowed\n'
            'INFO:     127.0.0.1:9 - "POST /v1/completions HTTP/1.1" 401 Unauthorized\n')
    got = nonzero(scan(text)[0])
    m = UNKNOWN_MODEL
    assert got[("llm_requests_total", (m, "ok"))] == 2
    assert got[("llm_client_errors_total", (m, "invalid_request"))] == 1
    assert got[("llm_client_errors_total", (m, "model_not_found"))] == 1
    assert got[("llm_client_errors_total", (m, "not_found_route"))] == 2  # any method
    assert got[("llm_client_errors_total", (m, "method_not_allowed"))] == 1
    assert got[("llm_client_errors_total", (m, "unauthorized"))] == 1  # the same types as every parser
    assert not [k for k in got if k[0] == "backend_errors_total"]



def test_engine_dead_after_a_clean_shutdown_is_no_error() -> None:
    """EngineDeadError from the output handler after ``shutdown triggered`` is the shutdown; before it, a crash."""
    dead = ("(APIServer pid=1) ERROR 12-02 16:57:17 [async_llm.py:906] AsyncLLM output_handler failed.\n"
            "(APIServer pid=1) ERROR 12-02 16:57:17 [async_llm.py:906] Traceback (most recent call last):\n"
            "(APIServer pid=1) ERROR 12-02 16:57:17 [async_llm.py:906]   File \"x.py\", line 1, in f\n"
            "(APIServer pid=1) ERROR 12-02 16:57:17 [async_llm.py:906] vllm.v1.engine.exceptions.EngineDeadError: "
            "EngineCore encountered an issue.\n")
    stop = "(APIServer pid=1) INFO 12-02 16:57:17 [launcher.py:254] [shutdown] API server: shutdown triggered\n"
    for text in (stats_v1("12-02 16:57:10", 1.0, 1.0) + stop + dead, stop + stats_v1("12-02 16:57:10", 1.0, 1.0)):
        clean = nonzero(scan(text)[0])
        assert not [k for k in clean if k[0] == "backend_errors_total"]
    parser = VllmParser()  # the shutdown line in an earlier batch
    scan(stats_v1("12-02 16:57:10", 1.0, 1.0) + stop, parser)
    assert not [k for k in nonzero(scan(dead, parser)[0]) if k[0] == "backend_errors_total"]
    crash = nonzero(scan(stats_v1("12-02 16:57:10", 1.0, 1.0) + dead)[0])
    assert crash[("backend_errors_total", (UNKNOWN_MODEL, "engine_dead"))] == 1


_RAW_TRACEBACK = (
    "ERROR 06-19 15:40:29 [serving_chat.py:240] Error in chat completion stream generator.\n"
    "Traceback (most recent call last):\n"
    '  File "/app/serving_chat.py", line 240, in chat_completion_stream_generator\n'
    "    async for res in result_generator:\n"
    '  File "/app/async_llm.py", line 380, in generate\n'
    "    raise ValueError(\"prompt too long\")\n"
    "ValueError: prompt too long\n"
    'INFO:     127.0.0.1:40000 - "POST /v1/chat/completions HTTP/1.1" 200 OK\n')


@pytest.mark.parametrize(("text", "rest"), [
    ((ROOT / "samples" / "vllm" / "v1-0.33.log").read_text(), "    conversation, engine_prompts = await"),
    (_RAW_TRACEBACK, '  File "/app/async_llm.py"')], ids=["vllm-header", "raw-traceback"])
def test_the_rest_of_an_error_record_read_after_a_pause_counts_no_second_error(text: str, rest: str) -> None:
    """A writer that pauses inside an error record longer than the engine holds a record: the record's
    first lines are read and counted, and its rest, read later as a text of its own (lines with a
    vLLM header, or a raw traceback's), belongs to it: the errors are those of one read, and the
    state keeps it across a restart."""
    lines = text.splitlines(keepends=True)
    cut = next(i for i, line in enumerate(lines) if rest in line)
    before, after = "".join(lines[:cut]), "".join(lines[cut:])

    def errors(events: list[Event]) -> Totals:
        return {k: v for k, v in store_view(events).items() if k[0] == "backend_errors_total" and v}

    want = errors(engine_batch(VllmParser(), before + after)[0])
    assert sum(want.values()) >= 1  # type: ignore[arg-type]  # (counter totals: floats)
    parser = VllmParser()
    first = engine_batch(parser, before)[0]
    saved = json.loads(json.dumps(parser.state()))
    assert errors(first + engine_batch(parser, after)[0]) == want
    again = VllmParser()
    again.restore(saved)
    assert errors(first + engine_batch(again, after)[0]) == want


def test_series_a_later_batch_shows_can_move_start_at_zero_for_every_model_seen() -> None:
    """A log read in two texts starts the same zero series as when read at once: V1's request lines,
    first seen in the second text (another server), show that ``aborted`` and ``error`` can move
    for the model of the first as well."""
    first, second = ((ROOT / "samples" / "vllm" / name).read_text() for name in ("access-heavy.log", "v1-0.10.log"))

    def series(events: list[Event]) -> set[tuple[str, tuple[str, ...]]]:
        return {(e.metric, e.labels) for e in events if e.metric == "llm_requests_total"}

    whole = series(engine_batch(VllmParser(), first + second)[0])
    assert ("llm_requests_total", ("granite-3.3-8b", "aborted")) in whole
    parser = VllmParser()
    assert series(engine_batch(parser, first)[0] + engine_batch(parser, second)[0]) == whole
