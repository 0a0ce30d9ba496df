"""The HTTP side: the API gateway, the UI and the Supabase components, from their access logs.

``$model`` narrows only the panels of families that carry a model (errors and readiness); HTTP
families have none. As on the overview, panels that must follow ``$source`` and ``$job`` read raw
series with ``$__rate_interval``; the per-backend and per-route comparisons over 5 minutes read the
recording rules (``backend:http_requests_5xx:ratio_rate5m``, ``backend_route:...``), which sum
``source`` away, and say so in their description.
"""

from __future__ import annotations

from grafana_foundation_sdk.builders import dashboard as d
from grafana_foundation_sdk.models.dashboard import DashboardCursorSync, DashboardLinkType

from grafana.kit import (
    RATE,
    PanelBuilder,
    Scope,
    chained_variables,
    datasource_variable,
    graph,
    query_variable,
    steps,
    tile,
)

UID = "logmetrics-http"
S = Scope("job", "backend", "source", "route", "model")
REC = Scope("backend", "route", "source")
HTTP = "http_requests_total"
CLASSES = (("2xx", "2.."), ("3xx", "3.."), ("4xx", "4.."), ("5xx", "5.."))


def rate(metric: str, *extra: str, by: str = "") -> str:
    """``sum [by (...)] (rate(metric{S}[$__rate_interval]))``."""
    grouping = f" by ({by})" if by else ""
    return f"sum{grouping} (rate({S.sel(metric, *extra)}{RATE}))"


def class_ratio(pattern: str) -> str:
    """The share of requests whose code matches ``pattern``; 0, not nothing, when none does."""
    matching = rate(HTTP, f'code=~"{pattern}"')
    return f"({matching} or vector(0))\n/ ({rate(HTTP)} > 0)"


def tiles() -> list[PanelBuilder]:
    """Traffic, failure ratios and latency at a glance."""
    return [
        tile("HTTP requests / s", "reqps", rate(HTTP), "Requests answered per second (http_requests_total)."),
        tile("5xx ratio", "percentunit",
             class_ratio("5.."),
             "Requests answered 5xx over all requests (http_requests_total).",
             thresholds=steps((None, "green"), (0.01, "orange"), (0.05, "red")), no_value="No traffic"),
        tile("4xx ratio", "percentunit",
             class_ratio("4.."),
             "Requests answered 4xx over all requests (http_requests_total).", no_value="No traffic"),
        tile("p95 duration", "s",
             f"histogram_quantile(0.95, {rate('http_request_duration_seconds_bucket', by='le')})",
             "95th percentile of the request duration, where the access log carries one "
             "(http_request_duration_seconds).", no_value="No traffic"),
        tile("Error records / s", "suffix:/s", rate("backend_errors_total", 'error_type!="not_found"'),
             "Error records in the logs of these backends, not_found left out (backend_errors_total).",
             thresholds=steps((None, "green"), (0.1, "red"))),
        tile("Restarts in range", "none",
             f"sum(increase({S.sel('backend_restarts_total')}[$__range]))",
             "Start-ups seen over the dashboard's time range (backend_restarts_total).",
             thresholds=steps((None, "green"), (1, "red"))),
    ]


def traffic_panels() -> list[PanelBuilder]:
    """Requests by status class, top routes, p95 by route."""
    return [
        graph("Requests / s by status class", "reqps",
              [(rate(HTTP, f'code=~"{pattern}"'), name) for name, pattern in CLASSES],
              "Requests answered per second, by the first digit of the status code (http_requests_total).",
              stacked=True),
        graph("Top 10 routes", "reqps",
              [(f"topk(10, {rate(HTTP, by='backend, route')})", "{{backend}} {{route}}")],
              "The ten busiest route templates (http_requests_total)."),
        graph("p95 duration by route", "s",
              [(f"histogram_quantile(0.95, {rate('http_request_duration_seconds_bucket', by='backend, route, le')})",
                "{{backend}} {{route}}")],
              "95th percentile per route over the rate window (http_request_duration_seconds)."),
        graph("p95 duration by route (recorded, 5m)", "s",
              [(f"topk(10, {REC.sel('backend_route:http_request_duration_seconds:p95_5m')})",
                "{{backend}} {{route}}")],
              "The ten slowest routes, from the recording rule backend_route:http_request_duration_seconds:p95_5m "
              "(the one HTTPRouteSlow alerts on); $source does not narrow it."),
    ]


def error_panels() -> list[PanelBuilder]:
    """5xx ratios, errors by type, restarts and readiness."""
    return [
        graph("5xx ratio by backend (recorded, 5m)", "percentunit",
              [(REC.sel("backend:http_requests_5xx:ratio_rate5m"), "{{backend}}")],
              "From the recording rule backend:http_requests_5xx:ratio_rate5m (the one HTTP5xxRatioHigh alerts "
              "on); $source does not narrow it.", minmax=(0, 1)),
        graph("5xx ratio, worst 10 routes (recorded, 5m)", "percentunit",
              [(f"topk(10, {REC.sel('backend_route:http_requests_5xx:ratio_rate5m')})", "{{backend}} {{route}}")],
              "From the recording rule backend_route:http_requests_5xx:ratio_rate5m; $source does not narrow it.",
              minmax=(0, 1)),
        graph("Error records / s by type", "suffix:/s",
              [(rate("backend_errors_total", by="backend, error_type"), "{{backend}} {{error_type}}")],
              "Error records in the logs by type: Postgres, auth, upstream and more (backend_errors_total).",
              stacked=True),
        graph("Restarts in the last hour (recorded)", "none",
              [(REC.sel("backend_source:backend_restarts:increase1h"), "{{backend}} {{source}}")],
              "Start-ups seen in the last hour, from the recording rule backend_source:backend_restarts:increase1h "
              "(backend_restarts_total).", width=8, bars=True),
        graph("Ready", "none",
              [(f"sum by (backend, source) ({S.sel('backend_ready')})", "{{backend}} {{source}}")],
              "1 from the server-ready line until a shutdown (backend_ready).", width=8),
        graph("Requests / s by backend (recorded, 5m)", "reqps",
              [(REC.sel("backend:http_requests:rate5m"), "{{backend}}")],
              "From the recording rule backend:http_requests:rate5m; $source does not narrow it.", width=8),
    ]


def build() -> d.Dashboard:
    """The HTTP dashboard."""
    board = (d.Dashboard("HTTP: API, UI, Supabase (logmetrics)").uid(UID).tags(["logmetrics"])
             .description("Requests, status codes, routes and errors of the HTTP services logmetrics reads.")
             .editable().tooltip(DashboardCursorSync.CROSSHAIR).time("now-1h", "now").refresh("30s")
             .timezone("browser").version(1)
             .link(d.DashboardLink("logmetrics").type(DashboardLinkType.DASHBOARDS).tags(["logmetrics"])
                   .as_dropdown(True).include_vars(True).keep_time(True))
             .with_variable(datasource_variable()))
    for var in chained_variables((HTTP,), ("job", "backend", "source", "route")):
        board = board.with_variable(var)
    board = board.with_variable(query_variable(
        "model", "Model", 'backend_errors_total{job=~"$job", backend=~"$backend", source=~"$source"}'))
    for title, panels in (("Overview", tiles()), ("Traffic and latency", traffic_panels()),
                          ("Errors and restarts", error_panels())):
        board = board.with_row(d.Row(title))
        for panel in panels:
            board = board.with_panel(panel)
    return board
