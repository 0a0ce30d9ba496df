"""The store applies events per batch, guards label cardinality, and renders through a Collector."""

from __future__ import annotations

from logmetrics.events import Event
from logmetrics.exposition import make_registry, render, text
from logmetrics.store import OTHER, Store
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
    """Events naming no catalog family, or with the wrong labels, are dropped, not raised."""
    store = Store()
    store.apply([Event("nope_total", ("x",)), Event("llm_requests_running", ("a", "b"), 1)], "p", "s")
    assert store.counters == {} and store.gauges == {}


def test_cardinality_guard_folds_overflow_into_other() -> None:
    """Past the route limit new values become __other__ and the overflow is counted."""
    store = Store()
    store.apply([Event("http_requests_total", ("GET", f"/r{i}", "200")) for i in range(250)], "p", "s")
    routes = {k[1][3] for k in store.counters if k[0] == "http_requests_total"}
    assert len(routes) == 201 and OTHER in routes
    assert store.counters[("logmetrics_label_overflow_total", ("http_requests_total", "route"))] == 50


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
    """Counters and histograms come back from a dump; rows that no longer fit are left out."""
    store = Store()
    store.apply([Event("llm_prompt_tokens_total", ("m",), 7), Event("llm_request_duration_seconds", ("m",), 0.5),
                 Event("llm_requests_running", ("m",), 3)], "p", "s")
    store.add_self("logmetrics_lines_read_total", ("s",), 9)
    data = store.dump()
    data["counters"] += [["gone_total", ["p", "s"], 1], ["llm_prompt_tokens_total", ["p"], 1],
                         ["llm_prompt_tokens_total", ["p", "s", "m"], "x"]]
    data["histograms"].append(["llm_request_duration_seconds", ["p", "s", "m2"], [1, 2], 1.0, 3])
    again = Store()
    assert again.load(data) == 2
    assert again.counters == {("llm_prompt_tokens_total", ("p", "s", "m")): 7}
    hist = again.histograms[("llm_request_duration_seconds", ("p", "s", "m"))]
    assert (hist.count, hist.sum, sum(hist.buckets)) == (1, 0.5, 1)
    assert again.gauges == {}
