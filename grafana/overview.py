"""The LLM overview: every model backend in one dashboard, whatever its engine.

Recording rules or raw series: the recording rules of rules/ sum ``source`` and ``job`` away (they
are ``by (backend, model)``). A panel that must follow ``$source`` and ``$job`` therefore reads the
raw series with ``rate(...[$__rate_interval])``: the tiles and the trends of every row. Panels that
compare backends and models over a fixed 5-minute window read the recorded series, and say in
their description that ``$source`` does not narrow them: the summary table, the recorded p95 and
error-ratio trends, the restart and CPU panels (those rules keep ``source``), and the unmatched
share of each parser.
"""

from __future__ import annotations

from grafana_foundation_sdk.builders import dashboard as d
from grafana_foundation_sdk.models.dashboard import DashboardCursorSync, DashboardLinkType

from grafana.kit import (
    DATASOURCE,
    RATE,
    PanelBuilder,
    Scope,
    bucket_heatmap,
    chained_variables,
    datasource_variable,
    graph,
    slo_variable,
    steps,
    summary_table,
    tile,
)
from logmetrics.store.catalog import DURATION_BUCKETS, TPOT_BUCKETS, TTFT_BUCKETS

UID = "logmetrics-overview"
S = Scope("job", "backend", "source", "model")
#: Recorded series are narrowed by backend and model only.
REC = Scope("backend", "model", "source")
ERRORS = steps((None, "green"), (0.001, "orange"), (0.01, "red"))
SATURATION = steps((None, "green"), (0.9, "orange"), (0.98, "red"))
SLO_COLOURS = steps((None, "red"), (0.9, "orange"), (0.99, "green"))
COUNT_ALARM = steps((None, "green"), (1, "red"))
#: (title, family, SLO variable) of the three latency histograms.
LATENCIES = (("Time to first token", "llm_time_to_first_token_seconds", "ttft_slo"),
             ("Time per output token", "llm_time_per_output_token_seconds", "tpot_slo"),
             ("Request duration", "llm_request_duration_seconds", "e2e_slo"))


def rate(metric: str, *extra: str, by: str = "") -> str:
    """``sum [by (...)] (rate(metric{S}[$__rate_interval]))``."""
    grouping = f" by ({by})" if by else ""
    return f"sum{grouping} (rate({S.sel(metric, *extra)}{RATE}))"


#: A counter of logmetrics' own that has a series for every value of a label: a count that only
#: appears with its first event is shown as 0 beside it, not as no data.
EVERY = {"parser": "logmetrics_lines_matched_total", "source": "logmetrics_bytes_read_total"}


def _or_zero(metric: str, by: str) -> str:
    """``rate(metric)`` per ``by``, and 0 for each value of ``by`` that it has not counted yet."""
    return f"{rate(metric, by=by)}\nor {rate(EVERY[by], by=by)} * 0"


def ratio(numerator: str, denominator: str) -> str:
    """A ratio that shows nothing, not NaN, without traffic."""
    return f"{numerator}\n/ ({denominator} > 0)"


def quantile(q: float, family: str, by: str = "") -> str:
    """A quantile of a histogram, ``le`` kept in the sum."""
    return f"histogram_quantile({q}, {rate(f'{family}_bucket', by=', '.join(filter(None, (by, 'le'))))})"


def mean(family: str, by: str = "") -> str:
    """The mean over the rate window (never since the start)."""
    return ratio(rate(f"{family}_sum", by=by), rate(f"{family}_count", by=by))


def health_tiles() -> list[PanelBuilder]:
    """Service health: traffic, tokens, errors, readiness, queue and restarts at a glance."""
    return [
        tile("Requests / s", "reqps", rate("llm_requests_total"),
             "Inference requests finished per second, every outcome (llm_requests_total)."),
        tile("Input tokens / s", "count:tok/s", rate("llm_prompt_tokens_total"),
             "Prompt tokens processed per second (llm_prompt_tokens_total)."),
        tile("Output tokens / s", "count:tok/s", rate("llm_generation_tokens_total"),
             "Tokens generated per second (llm_generation_tokens_total)."),
        tile("Error ratio", "percentunit",
             ratio(rate("llm_requests_total", 'outcome="error"'), rate("llm_requests_total", 'outcome!="aborted"')),
             "Requests that ended in an error over those not aborted by the client (llm_requests_total).",
             thresholds=ERRORS, no_value="No traffic"),
        tile("Ready replicas", "none", f"sum({S.sel('backend_ready')})",
             "Backends that logged their server-ready line and no shutdown since (backend_ready).",
             thresholds=steps((None, "red"), (1, "green"))),
        tile("Restarts in range", "none", f"sum(increase({S.sel('backend_restarts_total')}[$__range]))",
             "Start-ups seen in the logs over the dashboard's time range (backend_restarts_total).",
             thresholds=COUNT_ALARM),
        tile("Running", "none", f"sum({S.sel('llm_requests_running')})",
             "Requests running, as last logged (llm_requests_running)."),
        tile("Waiting", "none", f"sum({S.sel('llm_requests_waiting')})",
             "Requests queued, as last logged (llm_requests_waiting).",
             thresholds=steps((None, "green"), (1, "orange"), (20, "red"))),
        tile("KV cache (max)", "percentunit", f"max({S.sel('llm_kv_cache_usage_ratio')})",
             "The fullest KV cache among the selected backends (llm_kv_cache_usage_ratio).",
             thresholds=SATURATION, minmax=(0, 1)),
        tile("Preemptions / s", "suffix:/s", rate("llm_preemptions_total"),
             "Requests preempted by the scheduler per second: the KV cache is too small (llm_preemptions_total).",
             thresholds=steps((None, "green"), (0.01, "orange"))),
        tile("Error records / s", "suffix:/s", rate("backend_errors_total", 'error_type!="not_found"'),
             "Error records in the logs per second, any type but not_found (backend_errors_total).",
             thresholds=steps((None, "green"), (0.1, "red"))),
        tile("Targets down", "none", 'count(up{job=~"$job"} == 0) or vector(0)',
             "logmetrics scrape targets Prometheus cannot reach: every panel goes blank when this is not 0 (up).",
             thresholds=COUNT_ALARM),
    ]


def slo_panels() -> list[PanelBuilder]:
    """Latency SLOs: p95 and the share of requests within the chosen bucket boundary."""
    out: list[PanelBuilder] = []
    for title, family, _ in LATENCIES:
        out.append(tile(f"{title} p95", "s", quantile(0.95, family),
                        f"95th percentile over the rate window, from the histogram buckets ({family}).",
                        no_value="No traffic"))
    for title, family, var in LATENCIES:
        out.append(tile(f"{title} within ${{{var}:text}} s", "percentunit",
                        ratio(rate(f"{family}_bucket", f'le=~"${var}"'), rate(f"{family}_count")),
                        f"Share of requests at or under the SLO boundary chosen above, read from the bucket "
                        f"with that le ({family}).", thresholds=SLO_COLOURS, no_value="No traffic", minmax=(0, 1)))
    for title, family, _ in LATENCIES:
        out.append(graph(f"{title}: p50, p95, p99, mean", "s",
                         [*((quantile(q, family), f"p{round(q * 100)}") for q in (0.5, 0.95, 0.99)),
                          (mean(family), "mean")],
                         f"Quantiles and mean over the rate window ({family}).", width=8))
    for title, family in (("Time to first token", "llm_time_to_first_token_seconds"),
                          ("Request duration", "llm_request_duration_seconds")):
        out.append(bucket_heatmap(f"{title}: distribution", rate(f"{family}_bucket", by="le"),
                                  f"Requests per second in each bucket; a row is a bucket boundary (le) of {family}."))
    out.append(graph("p95 time to first token by backend and model (recorded, 5m)", "s",
                     [(REC.sel("backend_model:llm_time_to_first_token_seconds:p95_5m"), "{{backend}} {{model}}")],
                     "From the recording rule backend_model:llm_time_to_first_token_seconds:p95_5m: cheap over long "
                     "ranges; per backend and model, so $source does not narrow it."))
    out.append(graph("p95 request duration by backend and model (recorded, 5m)", "s",
                     [(REC.sel("backend_model:llm_request_duration_seconds:p95_5m"), "{{backend}} {{model}}")],
                     "From the recording rule backend_model:llm_request_duration_seconds:p95_5m; $source does not "
                     "narrow it."))
    return out


def throughput_panels() -> list[PanelBuilder]:
    """Token throughput, requests by outcome, the queue."""
    bm = "backend, model"
    return [
        graph("Tokens / s by backend and model", "count:tok/s",
              [(rate("llm_prompt_tokens_total", by=bm), "input {{backend}} {{model}}"),
               (rate("llm_generation_tokens_total", by=bm), "output {{backend}} {{model}}"),
               (rate("llm_cached_prompt_tokens_total", by=bm), "cached {{backend}} {{model}}")],
              "Prompt, generated and cached prompt tokens per second (llm_*_tokens_total)."),
        graph("Output tokens / s: reported vs counted", "count:tok/s",
              [(f"sum by ({bm}) ({S.sel('llm_generation_throughput_tokens_per_second')})",
                "reported {{backend}} {{model}}"),
               (rate("llm_generation_tokens_total", by=bm), "counted {{backend}} {{model}}")],
              "The backend's own throughput line (llm_generation_throughput_tokens_per_second) against the rate "
              "of llm_generation_tokens_total: where the counter is integrated from throughput lines, the gap "
              "is the integration error."),
        graph("Requests / s by outcome", "reqps",
              [(rate("llm_requests_total", by="outcome"), "{{outcome}}")],
              "Finished requests by outcome: ok, error, aborted (llm_requests_total).", stacked=True),
        graph("Running and waiting by backend and model", "none",
              [(f"sum by ({bm}) ({S.sel('llm_requests_running')})", "running {{backend}} {{model}}"),
               (f"sum by ({bm}) ({S.sel('llm_requests_waiting')})", "waiting {{backend}} {{model}}")],
              "Requests running and queued, as last logged (llm_requests_running, llm_requests_waiting)."),
    ]


def cache_panels() -> list[PanelBuilder]:
    """KV cache, prefix cache and preemptions."""
    kv = S.sel("llm_kv_cache_usage_ratio")
    return [
        graph("KV cache usage: max, mean, min", "percentunit",
              [(f"max({kv})", "max"), (f"avg({kv})", "mean"), (f"min({kv})", "min")],
              "KV-cache usage across the selected backends, 0-1 (llm_kv_cache_usage_ratio).",
              width=8, minmax=(0, 1)),
        graph("Prefix cache hit ratio (reported)", "percentunit",
              [(f"avg by (backend, model) ({S.sel('llm_prefix_cache_hit_ratio')})", "{{backend}} {{model}}")],
              "Prefix-cache hit rate as the backend logs it (llm_prefix_cache_hit_ratio).", width=8, minmax=(0, 1)),
        graph("Cached share of prompt tokens (counted)", "percentunit",
              [(ratio(rate("llm_cached_prompt_tokens_total", by="backend, model"),
                      rate("llm_prompt_tokens_total", by="backend, model")), "{{backend}} {{model}}")],
              "Prompt tokens served from cache over all prompt tokens (llm_cached_prompt_tokens_total, "
              "llm_prompt_tokens_total).", width=8, minmax=(0, 1)),
        graph("Preemptions / s by backend and model", "suffix:/s",
              [(rate("llm_preemptions_total", by="backend, model"), "{{backend}} {{model}}")],
              "Requests preempted per second (llm_preemptions_total).", width=24),
    ]


def error_panels() -> list[PanelBuilder]:
    """Errors by type, error and abort ratios."""
    return [
        graph("Error records / s by type", "suffix:/s",
              [(rate("backend_errors_total", by="backend, error_type"), "{{backend}} {{error_type}}")],
              "Error records in the logs by type; a traceback counts once (backend_errors_total).", stacked=True),
        graph("Client errors (4xx) / s by type", "suffix:/s",
              [(rate("llm_client_errors_total", by="backend, error_type"), "{{backend}} {{error_type}}")],
              "Requests the backends refused for the client's fault: malformed bodies, unknown models, prompts "
              "over the context (llm_client_errors_total). Not backend failures: no error ratio or alert "
              "counts them.", stacked=True),
        graph("Error and abort ratio by backend and model (recorded, 5m)", "percentunit",
              [(REC.sel("backend_model:llm_requests_error:ratio_rate5m"), "error {{backend}} {{model}}"),
               (REC.sel("backend_model:llm_requests_aborted:ratio_rate5m"), "aborted {{backend}} {{model}}")],
              "From the recording rules backend_model:llm_requests_error:ratio_rate5m and "
              "backend_model:llm_requests_aborted:ratio_rate5m; $source does not narrow them.", minmax=(0, 1)),
    ]


def speech_panels() -> list[PanelBuilder]:
    """Transcription and embeddings backends."""
    return [
        graph("Audio seconds transcribed per second", "count:s/s",
              [(rate("llm_audio_seconds_total", by="backend, model"), "{{backend}} {{model}}")],
              "Seconds of input audio per second of wall time: the real-time factor of the speech backend "
              "(llm_audio_seconds_total)."),
        graph("Embeddings / s", "count:emb/s",
              [(rate("llm_embeddings_total", by="backend, model"), "{{backend}} {{model}}")],
              "Embeddings created per second (llm_embeddings_total)."),
    ]


def process_panels() -> list[PanelBuilder]:
    """The backends' processes, as psutil sees them, and their restarts."""
    return [
        graph("CPU (cores, recorded 5m)", "suffix: cores",
              [(REC.sel("backend_source:backend_process_cpu:rate5m"), "{{backend}} {{source}}")],
              "CPU seconds per second of the backend's processes, from the recording rule "
              "backend_source:backend_process_cpu:rate5m (backend_process_cpu_seconds_total).", width=8),
        graph("Resident memory", "bytes",
              [(f"sum by (backend, source) ({S.sel('backend_process_resident_memory_bytes')})",
                "{{backend}} {{source}}")],
              "Resident memory of the backend's processes (backend_process_resident_memory_bytes).", width=8),
        graph("Restarts in the last hour (recorded)", "none",
              [(REC.sel("backend_source:backend_restarts:increase1h"), "{{backend}} {{source}}")],
              "Start-ups seen in the last hour, from the recording rule backend_source:backend_restarts:increase1h "
              "(backend_restarts_total).", width=8, bars=True),
    ]


def table_panel() -> PanelBuilder:
    """Per backend and model, from the recording rules (the last 5 minutes)."""
    cols = [("Req/s", "reqps", "backend_model:llm_requests:rate5m"),
            ("Output tok/s", "count:tok/s", "backend_model:llm_generation_tokens:rate5m"),
            ("TTFT p95", "s", "backend_model:llm_time_to_first_token_seconds:p95_5m"),
            ("E2E p95", "s", "backend_model:llm_request_duration_seconds:p95_5m"),
            ("Error ratio", "percentunit", "backend_model:llm_requests_error:ratio_rate5m")]
    return summary_table("Backends and models (recorded, last 5m)",
                         [(h, u, f"sum by (backend, model) ({REC.sel(m)})") for h, u, m in cols],
                         "One row per backend and model, from the recording rules (5-minute windows); $source "
                         "does not narrow it.")


def logmetrics_panels() -> list[PanelBuilder]:
    """The log pipeline itself: is every line read, matched and counted?"""
    return [
        graph("Lines / s read per source", "count:lines/s",
              [(f"sum by (source) (rate({S.sel('logmetrics_lines_read_total')}{RATE}))", "{{source}}")],
              "Lines read per second (logmetrics_lines_read_total)."),
        graph("Records matched and lines unmatched / s per parser", "suffix:/s",
              [(f"sum by (parser) (rate({S.sel('logmetrics_lines_matched_total')}{RATE}))", "matched {{parser}}"),
               (f"sum by (parser) (rate({S.sel('logmetrics_lines_unmatched_total')}{RATE}))",
                "unmatched {{parser}}")],
              "logmetrics_lines_matched_total and logmetrics_lines_unmatched_total."),
        graph("Unmatched share per parser (recorded, 15m)", "percentunit",
              [("parser:logmetrics_lines_unmatched:ratio_rate15m", "{{parser}}")],
              "From the recording rule parser:logmetrics_lines_unmatched:ratio_rate15m: a high share means the "
              "backend's log format changed.", width=8, minmax=(0, 1)),
        graph("Lag per source", "bytes",
              [(f"max by (source) ({S.sel('logmetrics_lag_bytes')})", "{{source}}")],
              "Bytes written and not yet read (logmetrics_lag_bytes).", width=8),
        graph("Seconds since the last line per source", "s",
              [(f"time() - max by (source) ({S.sel('logmetrics_last_line_timestamp_seconds')})", "{{source}}")],
              "A source gone silent (logmetrics_last_line_timestamp_seconds).", width=8),
        graph("Parse errors, rejected values, folded labels / s", "suffix:/s",
              [(f"sum by (parser) (rate({S.sel('logmetrics_parse_errors_total')}{RATE}))", "parse errors {{parser}}"),
               (_or_zero("logmetrics_values_rejected_total", "parser"), "rejected {{parser}}"),
               (f"sum by (metric) (rate({S.sel('logmetrics_label_overflow_total')}{RATE})) or on() vector(0)",
                "folded into __other__ {{metric}}"),
               (_or_zero("logmetrics_requests_timed_out_total", "parser"), "timed out {{parser}}")],
              "logmetrics_parse_errors_total, logmetrics_values_rejected_total, logmetrics_label_overflow_total, "
              "logmetrics_requests_timed_out_total."),
        graph("Rotations, truncations, read errors / s", "suffix:/s",
              [(_or_zero(m, "source"), f"{label} {{{{source}}}}")
               for m, label in (("logmetrics_rotations_total", "rotation"),
                                ("logmetrics_truncations_total", "truncation"),
                                ("logmetrics_read_errors_total", "read error"),
                                ("logmetrics_lines_truncated_total", "line cut"))],
              "logmetrics_rotations_total, logmetrics_truncations_total, logmetrics_read_errors_total, "
              "logmetrics_lines_truncated_total."),
        graph("Bytes lost / s", "Bps",
              [(_or_zero("logmetrics_bytes_lost_total", "source"), "{{source}}")],
              "Bytes written and never read: the file was deleted or cut before logmetrics read them "
              "(logmetrics_bytes_lost_total, a lower bound).", width=8),
        graph("Files followed", "none",
              [(f"sum({S.sel('logmetrics_open_files')})", "open"),
               (f"sum({S.sel('logmetrics_files_waiting')})", "waiting for a descriptor")],
              "logmetrics_open_files and logmetrics_files_waiting."),
    ]


#: Families with a model label that every backend's stream has at least one of: errors (zero-started
#: per model), readiness, requests, tokens, audio, embeddings. The filter variables list their values.
STREAM_FAMILIES = ("backend_errors_total", "backend_ready", "llm_requests_total", "llm_prompt_tokens_total",
                   "llm_audio_seconds_total", "llm_embeddings_total")


def build() -> d.Dashboard:
    """The overview dashboard."""
    board = (d.Dashboard("LLM backends overview (logmetrics)").uid(UID).tags(["logmetrics"])
             .description("Every model backend logmetrics reads, whatever its engine.")
             .editable().tooltip(DashboardCursorSync.CROSSHAIR).time("now-1h", "now").refresh("30s")
             .timezone("browser").version(1)
             .link(d.DashboardLink("logmetrics").type(DashboardLinkType.DASHBOARDS).tags(["logmetrics"])
                   .as_dropdown(True).include_vars(True).keep_time(True))
             .with_variable(datasource_variable()))
    for var in chained_variables(STREAM_FAMILIES, ("job", "backend", "source", "model")):
        board = board.with_variable(var)
    board = (board
             .with_variable(slo_variable("ttft_slo", "TTFT SLO (s)", TTFT_BUCKETS, 2.5))
             .with_variable(slo_variable("tpot_slo", "TPOT SLO (s)", TPOT_BUCKETS, 0.1))
             .with_variable(slo_variable("e2e_slo", "Request SLO (s)", DURATION_BUCKETS, 20.48))
             .annotation(d.AnnotationQuery().name("Backend restarts").datasource(DATASOURCE).enable(True)
                         .icon_color("red")
                         .expr(f"changes({S.sel('backend_restarts_total')}{RATE}) > 0")))
    sections: list[tuple[str, list[PanelBuilder]]] = [
        ("Service health", [*health_tiles(), table_panel()]),
        ("Latency SLOs", slo_panels()),
        ("Token throughput", throughput_panels()),
        ("Cache", cache_panels()),
        ("Errors", error_panels()),
        ("Speech & embeddings", speech_panels()),
        ("Process CPU and memory", process_panels()),
    ]
    for title, panels in sections:
        board = board.with_row(d.Row(title))
        for panel in panels:
            board = board.with_panel(panel)
    health = d.Row("logmetrics health (the log pipeline itself)")
    for panel in logmetrics_panels():
        health = health.with_panel(panel)
    return board.with_row(health)
