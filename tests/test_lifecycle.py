"""Backend lifecycle: readiness, the reset of a dead backend's gauges, and what a parser learns
from the lines logged before it started reading."""

from __future__ import annotations

import calendar
import json
import time
from pathlib import Path

from logmetrics_parsers.vllm import VllmParser

from logmetrics.events import Event, number
from logmetrics.store.store import Store
from tests.helpers import access_line, total
from tests.test_engine import oneshot_metrics
from tests.test_vllm_parser import scan, totals

P = "(APIServer pid=1) "
START = (P + "INFO 09-30 11:31:04 [api_server.py:1839] vLLM API server version 0.11.0\n"
         + P + "INFO 09-30 11:31:04 [utils.py:233] non-default args: {'model': 'org/big', "
         "'served_model_name': ['big']}\n")
READY = P + "INFO:     Application startup complete.\n"
STATS = (P + "INFO 09-30 11:41:50 [loggers.py:127] Engine 000: Avg prompt throughput: 2893.4 tokens/s, Avg "
         "generation throughput: 21.7 tokens/s, Running: 3 reqs, Waiting: 2 reqs, GPU KV cache usage: 61.5%, "
         "Prefix cache hit rate: 3.2%\n")
FATAL = "(EngineCore_DP0 pid=312) ERROR 09-30 11:42:17 [core.py:710] EngineCore encountered a fatal error.\n"
DIED = P + ("ERROR 09-30 11:42:18 [core_client.py:564] Engine core proc EngineCore_DP0 died unexpectedly, "
            "shutting down client.\n")
V0_DEAD = ("ERROR 06-14 10:00:05 [async_llm_engine.py:60] vllm.engine.async_llm_engine.AsyncEngineDeadError: "
           "Background loop has errored already.\n")
FAILED_START = "(EngineCore_DP0 pid=88) ERROR 09-30 11:43:30 [core.py:708] EngineCore failed to start.\n"
SHUTDOWN = P + "INFO:     Shutting down\n"
FINISHED = P + "INFO:     Finished server process [1]\n"
GAUGES = ("llm_requests_running", "llm_requests_waiting", "llm_kv_cache_usage_ratio",
          "llm_prefix_cache_hit_ratio", "llm_prompt_throughput_tokens_per_second",
          "llm_generation_throughput_tokens_per_second")


def ready_events(events: list[Event]) -> list[tuple[str, float]]:
    """The backend_ready events in order, as (model, value)."""
    return [(e.labels[0], number(e)) for e in events if e.metric == "backend_ready"]


def store_after(*texts: str) -> Store:
    """A store fed, batch by batch, with the events of one vLLM parser on ``texts``."""
    store, parser = Store(), VllmParser()
    for text in texts:
        store.apply(scan(text, parser)[0], "vllm", "s")
    return store


def test_application_startup_complete_makes_the_model_ready() -> None:
    """uvicorn's ready line sets backend_ready 1 for the model the start-up named, and counts as matched."""
    events, matched = scan(START + READY)
    assert ready_events(events) == [("big", 1.0)]
    assert matched == 3


def test_death_shutdown_and_failed_start_each_set_ready_to_zero() -> None:
    """Every kind of stop line takes a ready server down."""
    for stop in (FATAL, DIED, V0_DEAD, FAILED_START, SHUTDOWN, FINISHED):
        events = scan(START + READY + stop)[0]
        assert ready_events(events) == [("big", 1.0), ("big", 0.0)], stop


def test_stop_lines_are_matched_once() -> None:
    """Shutdown lines count as matched; an engine's death line is an error record, counted once."""
    parser = VllmParser()
    scan(START + READY, parser)
    assert scan(SHUTDOWN + FINISHED, parser)[1] == 2
    scan(START + READY, parser)
    events, matched = scan(FATAL, parser)
    assert matched == 1
    assert totals(events)[("backend_errors_total", ("big", "engine_dead"))] == 1.0


def test_death_after_stats_in_one_batch_resets_the_gauges() -> None:
    """Stats then a death in the same batch: the store ends with every load gauge at 0."""
    store = store_after(START + READY + STATS + FATAL + DIED)
    for name in GAUGES:
        assert store.gauges[(name, ("vllm", "s", "big"))] == 0.0, name
    assert store.gauges[("backend_ready", ("vllm", "s", "big"))] == 0.0


def test_a_restart_takes_the_old_server_down_and_the_new_one_up() -> None:
    """A new start-up after a ready server: ready 0 for the old model, then 1 once the new one is ready."""
    parser = VllmParser()
    scan(START + READY + STATS, parser)
    other = START.replace("'big'", "'small'").replace("11:31", "12:31")  # a start of its own, an hour later
    events = scan(other + READY + STATS, parser)[0]
    assert ready_events(events) == [("big", 0.0), ("small", 1.0)]
    assert totals(events)[("llm_requests_running", ("small",))] == 3


def test_stats_after_a_restart_set_the_gauges_again() -> None:
    """A reset is not sticky: the next stats line after a restart sets the gauges."""
    store = store_after(START + READY + STATS + SHUTDOWN, START + READY + STATS.replace("Running: 3", "Running: 1"))
    assert store.gauges[("llm_requests_running", ("vllm", "s", "big"))] == 1.0
    assert store.gauges[("backend_ready", ("vllm", "s", "big"))] == 1.0


def test_an_excerpt_that_starts_with_a_death_makes_no_unknown_series() -> None:
    """A death line with no model known and nothing up before it says nothing about readiness."""
    assert ready_events(scan(FATAL + SHUTDOWN)[0]) == []


def test_the_reset_is_per_backend_and_source() -> None:
    """backend_ready 0 resets that backend and source's gauges only; itself stays 0."""
    store = Store()
    store.apply([Event("llm_requests_running", ("m",), 5), Event("backend_ready", ("m",), 1)], "a", "s1")
    store.apply([Event("llm_requests_running", ("m",), 7)], "a", "s2")
    store.apply([Event("llm_requests_running", ("m",), 9)], "b", "s1")
    store.apply([Event("backend_ready", ("m",), 0)], "a", "s1")
    assert store.gauges[("llm_requests_running", ("a", "s1", "m"))] == 0.0
    assert store.gauges[("llm_requests_running", ("a", "s2", "m"))] == 7.0
    assert store.gauges[("llm_requests_running", ("b", "s1", "m"))] == 9.0
    assert store.gauges[("backend_ready", ("a", "s1", "m"))] == 0.0


def test_learn_takes_the_model_and_readiness_without_events() -> None:
    """learn() on the lines before the read position: the model name and readiness (which the
    engine says with the next batch), and no event."""
    parser = VllmParser()
    parser.learn(START + READY + STATS)
    assert parser.model == "big" and parser.readiness() == "big"
    events = scan(STATS, parser)[0]
    assert ready_events(events) == []
    assert totals(events)[("llm_requests_running", ("big",))] == 3


def test_learn_of_a_stopped_server_does_not_announce_it_ready() -> None:
    """A shutdown after the last ready line: not ready; the last start-up block's model wins."""
    parser = VllmParser()
    parser.learn(START + READY + SHUTDOWN + START.replace("'big'", "'small'"))
    assert parser.model == "small"
    assert ready_events(scan(STATS, parser)[0]) == []


def test_last_line_timestamp_is_the_envelope_time_else_the_read_time(tmp_path: Path) -> None:
    """logmetrics_last_line_timestamp_seconds: a Docker line's own time; a plain file's read time."""
    docker = tmp_path / "vllm-docker.log"
    docker.write_text("".join(json.dumps({"log": access_line(i), "stream": "stderr",
                                          "time": f"2025-04-06T07:56:4{i}.500000000Z"}) + "\n" for i in range(3)))
    plain = tmp_path / "vllm-plain.log"
    plain.write_text(access_line(0))
    before = time.time()
    got = oneshot_metrics(str(docker), str(plain))
    name = "logmetrics_last_line_timestamp_seconds"
    assert total(got, name, source=str(docker)) == calendar.timegm((2025, 4, 6, 7, 56, 42)) + 0.5
    assert before <= total(got, name, source=str(plain)) <= time.time()


PLUGIN = '''
from logmetrics.events import Event
from logmetrics.plugins import Parser


class Toy(Parser):
    name = "toy"
    claims = ("*toy*",)

    def parse(self, record):
        word, _, value = record.text.partition(" ")
        if word == "load":
            return [Event("llm_requests_running", ("m",), float(value)),
                    Event("llm_kv_cache_usage_ratio", ("m",), 0.5)]
        if word == "ready":
            return [Event("backend_ready", ("m",), 1)]
        if word == "dead":
            return [Event("backend_ready", ("m",), 0)]
        return []
'''


def test_any_parser_gets_the_reset_by_emitting_backend_ready_zero(tmp_path: Path) -> None:
    """A plugin that only sets backend_ready 0 makes the engine reset its backend's other gauges."""
    plugin = tmp_path / "toy.py"
    plugin.write_text(PLUGIN)
    dead, alive = tmp_path / "toy-dead.log", tmp_path / "toy-alive.log"
    dead.write_text("ready\nload 7\ndead\n")
    alive.write_text("ready\nload 3\n")
    got = oneshot_metrics("--plugin", str(plugin), str(dead), str(alive))
    assert total(got, "llm_requests_running", source=str(dead)) == 0
    assert total(got, "llm_kv_cache_usage_ratio", source=str(dead)) == 0
    assert total(got, "backend_ready", source=str(dead)) == 0
    assert total(got, "llm_requests_running", source=str(alive)) == 3
    assert total(got, "backend_ready", source=str(alive)) == 1


def test_batches_without_start_up_lines_keep_the_order_of_stops_and_stats() -> None:
    """Without start-up lines in a batch, a stop after stats resets them, stats after a stop set them."""
    key = ("llm_requests_running", ("vllm", "s", "big"))
    ready = ("backend_ready", ("vllm", "s", "big"))
    store = store_after(START + READY, STATS + SHUTDOWN)
    assert (store.gauges[key], store.gauges[ready]) == (0.0, 0.0)
    store = store_after(START + READY, STATS + SHUTDOWN + READY)
    assert (store.gauges[key], store.gauges[ready]) == (0.0, 1.0)
    store = store_after(START + READY, STATS + FATAL + READY + STATS.replace("Running: 3", "Running: 1"))
    assert (store.gauges[key], store.gauges[ready]) == (1.0, 1.0)
