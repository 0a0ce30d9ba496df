"""The store applies events per batch, guards label cardinality, and renders through a Collector."""

from __future__ import annotations

import logging
import os

import pytest

from logmetrics.events import Event
from logmetrics.store.exposition import make_registry, render, text
from logmetrics.store.guard import MAX_LABEL_CHARS, OTHER, LabelGuard, safe_label
from logmetrics.store.store import Store
from tests.helpers import Samples, parse


def samples(store: Store) -> Samples:
    """Parse the store's exposition back into {(sample name, sorted labels): value}."""
    return parse(text(make_registry(store)).decode())


def test_counter_gauge_histogram() -> None:
    """Counters add, gauges keep the last value, histograms count into le-inclusive buckets."""
    store = Store()
    store.apply([
        Event("llm_prompt_tokens_total", ("m",), 10),
        Event("llm_prompt_tokens_total", ("m",), 5),
        Event("llm_requests_running", ("m",), 3),
        Event("llm_requests_running", ("m",), 2),
        Event("llm_request_duration_seconds", ("m",), 0.02),
        Event("llm_request_duration_seconds", ("m",), 100.0),
    ], "vllm", "s")
    got = samples(store)
    base = (("backend", "vllm"), ("model", "m"), ("source", "s"))
    assert got[("llm_prompt_tokens_total", base)] == 15
    assert got[("llm_requests_running", base)] == 2
    def le(bound: str) -> tuple[str, tuple[tuple[str, str], ...]]:
        return "llm_request_duration_seconds_bucket", tuple(sorted((*base, ("le", bound))))

    assert got[le("0.02")] == 1
    assert got[le("0.01")] == 0
    assert got[le("+Inf")] == 2
    assert got[("llm_request_duration_seconds_count", base)] == 2
    assert abs(got[("llm_request_duration_seconds_sum", base)] - 100.02) < 1e-9


def test_event_backend_overrides_the_parser_name() -> None:
    """A parser may name a component as the backend label."""
    store = Store()
    store.apply([Event("backend_restarts_total", (), 1, backend="kong")], "supabase", "s")
    assert samples(store)[("backend_restarts_total", (("backend", "kong"), ("source", "s")))] == 1


def test_unknown_metric_and_wrong_label_count_are_dropped() -> None:
    """Events naming no catalog family, or with the wrong labels, are dropped and counted, not raised."""
    store = Store()
    store.apply([Event("nope_total", ("x",)), Event("llm_requests_running", ("a", "b"), 1)], "p", "s")
    assert store.gauges == {}
    assert store.counters == {("logmetrics_values_rejected_total", ("p", "__malformed__")): 1.0,
                              ("logmetrics_values_rejected_total", ("p", "llm_requests_running")): 1.0}


def test_cardinality_guard_folds_overflow_into_other() -> None:
    """Past the route limit new values become __other__ and the overflow is counted."""
    store = Store()
    store.apply([Event("http_requests_total", ("GET", f"/r{i}", "200")) for i in range(250)], "p", "s")
    routes = {k[1][3] for k in store.counters if k[0] == "http_requests_total"}
    assert len(routes) == 201 and OTHER in routes
    assert store.counters[("logmetrics_label_overflow_total", ("http_requests_total", "route"))] == 50


def test_a_gauge_forgotten_and_set_again_is_held_to_the_limit() -> None:
    """A gauge dropped with its source, whose place another model took meanwhile, is folded when
    it comes back past the limit: it is admitted again, not set through the series met before."""
    store = Store(guard=LabelGuard(limits={"model": 2}))
    store.apply([Event("llm_requests_running", ("a",), 1)], "vllm", "s1")
    store.apply([Event("llm_requests_running", ("a",), 1)], "vllm", "s1")  # met before
    assert store.drop_gauges("s1") == 1
    store.apply([Event("llm_requests_running", (m,), 1) for m in ("b", "c")], "vllm", "s2")
    store.apply([Event("llm_requests_running", ("a",), 3)], "vllm", "s1")
    models = sorted(k[1][2] for k in store.gauges if k[0] == "llm_requests_running")
    assert models == [OTHER, "b", "c"]
    store.apply([Event("llm_requests_running", ("b",), 5)], "vllm", "s2")  # met before: set at once
    assert store.gauges[("llm_requests_running", ("vllm", "s2", "b"))] == 5.0


def test_each_backend_has_its_own_places() -> None:
    """One backend's 50 error types leave another backend's first error type its own label."""
    store = Store()
    store.apply([Event("backend_errors_total", ("m", f"kind_{i}")) for i in range(50)], "supabase-db", "s")
    store.apply([Event("backend_errors_total", ("m", "unsupported_language"))], "whisper", "w")
    store.apply([Event("backend_errors_total", ("m", "one_too_many"))], "supabase-db", "s")
    kinds = {(k[1][0], k[1][3]) for k in store.counters if k[0] == "backend_errors_total"}
    assert ("whisper", "unsupported_language") in kinds
    assert ("supabase-db", OTHER) in kinds
    assert store.counters[("logmetrics_label_overflow_total", ("backend_errors_total", "error_type"))] == 1


def test_noise_cannot_take_the_places_of_routes_that_answer() -> None:
    """Routes first seen with error codes fill at most half the places; answered routes keep theirs."""
    store = Store()
    store.apply([Event("http_requests_total", ("GET", f"/scan{i}", "401")) for i in range(300)], "p", "s")
    store.apply([Event("http_requests_total", ("POST", f"/real{i}", "200")) for i in range(100)], "p", "s")
    routes = {k[1][3] for k in store.counters if k[0] == "http_requests_total"}
    assert {f"/real{i}" for i in range(100)} <= routes
    assert len(routes - {OTHER}) == 200
    assert store.counters[("logmetrics_label_overflow_total", ("http_requests_total", "route"))] == 200


def test_folded_values_take_no_place() -> None:
    """``__not_found__`` and ``__other__`` from a parser pass the guard without using up the limit."""
    store = Store()
    store.apply([Event("http_requests_total", ("GET", v, "404")) for v in (OTHER, "__not_found__")], "p", "s")
    store.apply([Event("http_requests_total", ("GET", f"/r{i}", "200")) for i in range(200)], "p", "s")
    routes = {k[1][3] for k in store.counters if k[0] == "http_requests_total"}
    assert len(routes) == 202 and ("logmetrics_label_overflow_total", ("http_requests_total", "route")) \
        not in store.counters


def test_negative_counter_increments_are_ignored() -> None:
    """A counter never goes down, whatever a parser sends."""
    store = Store()
    store.apply([Event("llm_prompt_tokens_total", ("m",), 5), Event("llm_prompt_tokens_total", ("m",), -3)], "p", "s")
    assert store.counters[("llm_prompt_tokens_total", ("p", "s", "m"))] == 5


def test_openmetrics_by_accept_header() -> None:
    """The scraper's Accept header picks OpenMetrics; the default is text 0.0.4."""
    store = Store()
    store.apply([Event("llm_requests_running", ("m",), 1)], "p", "s")
    reg = make_registry(store)
    body, ctype = render(reg, "application/openmetrics-text; version=1.0.0")
    assert ctype.startswith("application/openmetrics-text") and body.endswith(b"# EOF\n")
    body, ctype = render(reg, "")
    assert ctype.startswith("text/plain") and b"llm_requests_running{" in body


def test_dump_and_load_round_trip_and_skip_malformed_rows() -> None:
    """Counters, gauges and histograms come back from a dump; rows that no longer fit are left out."""
    store = Store()
    store.apply([Event("llm_prompt_tokens_total", ("m",), 7), Event("llm_request_duration_seconds", ("m",), 0.5),
                 Event("llm_requests_running", ("m",), 3)], "p", "s")
    store.add_self("logmetrics_lines_read_total", ("s",), 9)
    data = store.dump()
    data["counters"] += [["gone_total", ["p", "s"], 1], ["llm_prompt_tokens_total", ["p"], 1],
                         ["llm_prompt_tokens_total", ["p", "s", "m"], "x"]]
    data["histograms"].append(["llm_request_duration_seconds", ["p", "s", "m2"], [1, 2], 1.0, 3])
    data["gauges"] += [["llm_requests_running", ["p", "s", "m2"], float("nan")], ["llm_requests_running", ["p"], 1]]
    again = Store()
    assert again.load(data) == 3
    assert again.counters == {("llm_prompt_tokens_total", ("p", "s", "m")): 7}
    hist = again.histograms[("llm_request_duration_seconds", ("p", "s", "m"))]
    assert (hist.count, hist.sum, sum(hist.buckets)) == (1, 0.5, 1)
    assert again.gauges == {("llm_requests_running", ("p", "s", "m")): 3}


def test_values_a_family_cannot_take_are_refused_and_counted(caplog: pytest.LogCaptureFixture) -> None:
    """NaN, infinities and negative counter/histogram values are refused, counted per parser and warned once."""
    store = Store()
    nan, inf = float("nan"), float("inf")
    good = [Event("llm_request_duration_seconds", ("m",), 0.5), Event("llm_prompt_tokens_total", ("m",), 4),
            Event("llm_requests_running", ("m",), 2)]
    bad = [Event("llm_request_duration_seconds", ("m",), nan), Event("llm_request_duration_seconds", ("m",), -1.0),
           Event("llm_request_duration_seconds", ("m",), inf), Event("llm_prompt_tokens_total", ("m",), inf),
           Event("llm_prompt_tokens_total", ("m",), -3), Event("llm_requests_running", ("m",), nan),
           Event("llm_requests_running", ("m",), -inf), Event("llm_requests_running", ("m",), "7")]  # type: ignore[arg-type]  # a plugin's mistake on purpose
    with caplog.at_level(logging.WARNING, logger="logmetrics.store.store"):
        store.apply([*good, *bad], "myplug", "s")
        store.apply(bad, "myplug", "s")
    hist = store.histograms[("llm_request_duration_seconds", ("myplug", "s", "m"))]
    assert (hist.count, hist.sum) == (1, 0.5)
    assert store.counters[("llm_prompt_tokens_total", ("myplug", "s", "m"))] == 4
    assert store.gauges[("llm_requests_running", ("myplug", "s", "m"))] == 2
    rejected = {k[1]: v for k, v in store.counters.items() if k[0] == "logmetrics_values_rejected_total"}
    assert rejected == {("myplug", "llm_request_duration_seconds"): 6, ("myplug", "llm_prompt_tokens_total"): 4,
                        ("myplug", "llm_requests_running"): 6}
    warnings = [r.getMessage() for r in caplog.records]
    assert len(warnings) == 3 and all("parser myplug" in w for w in warnings), warnings
    got = samples(store)
    assert got[("logmetrics_values_rejected_total", (("metric", "llm_prompt_tokens_total"), ("parser", "myplug")))] == 4


def test_label_values_that_are_not_utf8_are_made_valid_once() -> None:
    """A surrogate-escaped label value (a non-UTF-8 file name) is stored as its \\xNN form and renders."""
    store = Store()
    raw = os.fsdecode(b"vllm-\xe9.log")
    store.apply([Event("llm_requests_running", ("m\udce9",), 1), Event("llm_prompt_tokens_total", ("m\udce9",), 1),
                 Event("llm_prompt_tokens_total", ("m\udce9",), 2)], "p", raw)
    body = text(make_registry(store)).decode("utf-8")
    assert 'source="vllm-\\\\xe9.log"' in body and 'model="m\\\\xe9"' in body, body
    assert store.counters[("llm_prompt_tokens_total", ("p", "vllm-\\xe9.log", "m\\xe9"))] == 3
    assert safe_label("caf\u00e9") == "caf\u00e9" and safe_label("\ud800x") == "\\ud800x" and safe_label(7) == "7"


def test_a_label_value_from_a_long_token_is_cut() -> None:
    """A model id of 5,000 characters is stored cut to MAX_LABEL_CHARS, its events in one series;
    the source (a path) is kept whole."""
    store = Store()
    model, source = "org/" + "m" * 5000, "/var/log/" + "d/" * 200 + "a.log"
    store.apply([Event("llm_prompt_tokens_total", (model,), 2), Event("llm_prompt_tokens_total", (model,), 3),
                 Event("llm_requests_running", (model,), 1)], "p", source)
    cut = model[:MAX_LABEL_CHARS]
    assert store.counters == {("llm_prompt_tokens_total", ("p", source, cut)): 5}
    assert store.gauges == {("llm_requests_running", ("p", source, cut)): 1}


def test_load_leaves_out_values_no_series_can_hold() -> None:
    """A state file holding a NaN sum or an infinite counter (older versions saved them) does not restore those."""
    store = Store()
    data: dict[str, list[list[object]]] = {
        "counters": [["llm_prompt_tokens_total", ["p", "s", "m"], float("inf")],
                     ["llm_generation_tokens_total", ["p", "s\udce9", "m"], 3]],
        "histograms": [["llm_request_duration_seconds", ["p", "s", "m"], [1] + [0] * 14, float("nan"), 1]],
    }
    assert store.load(data) == 1
    assert store.counters == {("llm_generation_tokens_total", ("p", "s\\xe9", "m")): 3}


def test_known_series_take_the_fast_path_with_the_same_checks() -> None:
    """A series met before still refuses NaN, negative and huge values, and counts as the first event did."""
    store = Store()
    ok = Event("llm_prompt_tokens_total", ("m",), 2)
    assert store.apply([ok, ok, Event("llm_request_duration_seconds", ("m",), 0.5)] * 2, "p", "s") == []
    bad = [Event("llm_prompt_tokens_total", ("m",), v) for v in (float("nan"), -1, 10**400, float("inf"))]
    assert len(store.apply(bad, "p", "s")) == 4
    assert store.counters[("llm_prompt_tokens_total", ("p", "s", "m"))] == 8
    assert store.histograms[("llm_request_duration_seconds", ("p", "s", "m"))].count == 2
    assert store.counters[("logmetrics_values_rejected_total", ("p", "llm_prompt_tokens_total"))] == 4


def test_a_histogram_event_may_carry_many_observations() -> None:
    """A tuple value observes each number; bad numbers in it are refused one by one; a counter refuses a tuple."""
    store = Store()
    assert store.apply([Event("llm_request_duration_seconds", ("m",), (0.5, 2.0, 0.01))], "p", "s") == []
    hist = store.histograms[("llm_request_duration_seconds", ("p", "s", "m"))]
    assert (hist.count, hist.sum) == (3, 2.51)
    assert store.apply([Event("llm_request_duration_seconds", ("m",), (1.0, float("nan"), -1))], "p", "s") != []
    assert hist.count == 4
    assert store.counters[("logmetrics_values_rejected_total", ("p", "llm_request_duration_seconds"))] == 2
    assert len(store.apply([Event("llm_prompt_tokens_total", ("m",), (1.0, 2.0))], "p", "s")) == 1  # refused whole
    assert store.apply([Event("llm_request_duration_seconds", ("m",), ())], "p", "s") == []


def test_a_backend_that_stops_zeroes_its_own_gauges_only() -> None:
    """Ready at 0 zeroes the gauges of that backend and source, none of another source's, also
    after its gauges were forgotten and set again."""
    store = Store()
    for source in ("a.log", "b.log"):
        store.apply([Event("backend_ready", ("m",), 1), Event("llm_requests_running", ("m",), 3)], "vllm", source)
    store.apply([Event("backend_ready", ("m",), 0)], "vllm", "a.log")
    running = {k[1][1]: v for k, v in store.gauges.items() if k[0] == "llm_requests_running"}
    assert running == {"a.log": 0.0, "b.log": 3.0}
    assert store.drop_gauges("a.log") == 2
    store.apply([Event("llm_requests_running", ("m",), 5), Event("backend_ready", ("m",), 0)], "vllm", "a.log")
    running = {k[1][1]: v for k, v in store.gauges.items() if k[0] == "llm_requests_running"}
    assert running == {"a.log": 0.0, "b.log": 3.0}


def test_a_kept_order_takes_new_series_in_place_and_drops_gone_ones() -> None:
    """Scrape after scrape, with series added (a few, then more than are put in place one by one)
    and a source expired, the served text is prometheus_client's for the same samples."""
    from prometheus_client import generate_latest

    store = Store()
    reg = make_registry(store)
    steps = [[("m", "b")], [("a", "a"), ("z", "c")], [(f"m{i:03d}", f"s{i % 7}") for i in range(150, 0, -1)],
             [("b", "s3")], []]
    for i, step in enumerate(steps):
        for model, source in step:
            store.apply([Event("llm_prompt_tokens_total", (model,), 1),
                         Event("llm_request_duration_seconds", (model,), 0.5)], "vllm", source)
        if i == 4:
            assert store.expire(["s3"])
        body, _ = render(reg, "")
        assert body == generate_latest(reg)
        assert body.count(b"llm_prompt_tokens_total{") == len({k for k in store.snapshot().counters
                                                               if k[0] == "llm_prompt_tokens_total"})
