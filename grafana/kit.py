"""The pieces both dashboards are made of: the datasource, the template variables, label selectors
taken from the metric catalog, and panel builders that always set a unit and the datasource.

Conventions kept here, so that no panel can miss them: every panel and every query reads the
datasource ``${datasource}`` (a variable of type datasource, never a uid); a panel has a unit;
rates use ``$__rate_interval``; ratios divide by ``(denominator > 0)`` so that no traffic shows
"No traffic" rather than NaN.
"""

from __future__ import annotations

import json
from collections.abc import Iterator, Sequence
from typing import Any

from grafana_foundation_sdk.builders import dashboard as d
from grafana_foundation_sdk.builders import heatmap, prometheus, stat, table, timeseries
from grafana_foundation_sdk.builders.common import ReduceDataOptions, StackingConfig, VizLegendOptions
from grafana_foundation_sdk.builders.common import VizTooltipOptions as Tooltip
from grafana_foundation_sdk.cog.builder import Builder
from grafana_foundation_sdk.cog.encoder import JSONEncoder
from grafana_foundation_sdk.models.common import (
    BigValueGraphMode,
    GraphDrawStyle,
    LegendDisplayMode,
    LegendPlacement,
    SortOrder,
    StackingMode,
    TooltipDisplayMode,
)
from grafana_foundation_sdk.models.dashboard import (
    DataSourceRef,
    DataTransformerConfig,
    DynamicConfigValue,
    Threshold,
    ThresholdsMode,
    VariableOption,
    VariableRefresh,
    VariableSort,
)
from grafana_foundation_sdk.models.prometheus import PromQueryFormat
from prometheus_client.utils import floatToGoString

from logmetrics.store.catalog import BY_NAME, COMMON_LABELS, SELF_BY_NAME

DATASOURCE = DataSourceRef(type_val="prometheus", uid="${datasource}")
RATE = "[$__rate_interval]"
#: Labels of recorded series, by the level of their name (``level:metric:operations``).
RECORDED_LABELS = {"backend_model": ("backend", "model"), "backend_model_outcome": ("backend", "model", "outcome"),
                   "backend_model_le": ("backend", "model", "le"), "backend": ("backend",),
                   "backend_route": ("backend", "route"), "backend_route_code": ("backend", "route", "code"),
                   "backend_errortype": ("backend", "error_type"), "backend_source": ("backend", "source"),
                   "parser": ("parser",)}
PanelBuilder = Builder[Any]


def labels_of(metric: str) -> tuple[str, ...]:
    """The labels a series carries: from the catalog (``job`` added by the scrape), or, for a recorded
    series, from the level of its name (recording rules sum ``job`` away)."""
    if ":" in metric:
        return RECORDED_LABELS[metric.split(":", 1)[0]]
    base = metric
    for suffix in ("_bucket", "_sum", "_count"):
        if metric.endswith(suffix) and metric[: -len(suffix)] in BY_NAME:
            base = metric[: -len(suffix)]
    if base in SELF_BY_NAME:
        return ("job", *SELF_BY_NAME[base].labels)
    le = ("le",) if metric.endswith("_bucket") and base != metric else ()
    return ("job", *COMMON_LABELS, *BY_NAME[base].labels, *le)


class Scope:
    """The filter variables of one dashboard: ``sel`` turns them into the matchers a metric can take."""

    def __init__(self, *variables: str) -> None:
        self.variables = variables

    def sel(self, metric: str, *extra: str) -> str:
        """``metric{...}`` with ``label=~"$label"`` for each filter variable the metric has a label for."""
        have = labels_of(metric)
        matchers = [f'{v}=~"${v}"' for v in self.variables if v in have] + list(extra)
        return f"{metric}{{{', '.join(matchers)}}}"


def go_float(value: float) -> str:
    """A bucket boundary as prometheus_client writes it in ``le`` (``1.0``, ``0.25``)."""
    text: str = floatToGoString(value)  # type: ignore[no-untyped-call]  # untyped upstream
    return text


def le_values(boundaries: Sequence[float]) -> list[tuple[str, str]]:
    """(text, value) options for an SLO variable: each boundary as prometheus_client writes ``le``
    (``1.0``), or'ed with the short form (``1``) that a Prometheus normalising ``le`` may store."""
    out = []
    for b in boundaries:
        go = go_float(b)
        short = format(b, "g")
        out.append((go, go if go == short else f"{go}|{short}"))
    return out


def slo_variable(name: str, label: str, boundaries: Sequence[float], default: float) -> d.CustomVariable:
    """A custom variable whose options are exactly the histogram's bucket boundaries."""
    options = le_values(boundaries)
    current = dict(options)[go_float(default)]
    return (d.CustomVariable(name).label(label)
            .values(",".join(f"{text} : {value}" for text, value in options))
            .current(VariableOption(selected=True, text=go_float(default), value=current))
            .options([VariableOption(selected=v == current, text=t, value=v) for t, v in options]))


def query_variable(name: str, label: str, metric_selector: str) -> d.QueryVariable:
    """A multi-value variable listing one label's values on a logmetrics metric; All means any value."""
    return (d.QueryVariable(name).label(label).datasource(DATASOURCE)
            .query(f"label_values({metric_selector}, {name})")
            .multi(True).include_all(True).all_value(".*")
            .refresh(VariableRefresh.ON_TIME_RANGE_CHANGED).sort(VariableSort.ALPHABETICAL_ASC))


def chained_variables(metrics: Sequence[str], names: Sequence[str]) -> list[d.QueryVariable]:
    """job -> backend -> source -> model: each lists only values under the ones before it, from
    any of ``metrics`` (several, so that a stream that lacks one family is still listed: vLLM with
    default logging names no failed request, a UI logs no token)."""
    out = []
    for i, name in enumerate(names):
        matchers = [f'__name__=~"{"|".join(metrics)}"'] if len(metrics) > 1 else []
        matchers += [f'{n}=~"${n}"' for n in names[:i]]
        head = "" if len(metrics) > 1 else metrics[0]
        selector = f"{head}{{{', '.join(matchers)}}}" if matchers else head
        out.append(query_variable(name, name.capitalize(), selector))
    return out


def datasource_variable() -> d.DatasourceVariable:
    """``datasource``: any Prometheus datasource, none saved."""
    return d.DatasourceVariable("datasource").label("Datasource").type("prometheus")


def target(expr: str, legend: str = "", *, instant: bool = False, table_format: bool = False) -> prometheus.Dataquery:
    """One query on ``${datasource}``."""
    q = prometheus.Dataquery().expr(expr).datasource(DATASOURCE).legend_format(legend or "__auto")
    if instant:
        q = q.instant()
    if table_format:
        q = q.format(PromQueryFormat.TABLE)
    return q


def steps(*pairs: tuple[float | None, str]) -> d.ThresholdsConfig:
    """Absolute thresholds, from the base colour up."""
    return d.ThresholdsConfig().mode(ThresholdsMode.ABSOLUTE).steps([Threshold(v, c) for v, c in pairs])


NEUTRAL = steps((None, "blue"))


def tile(title: str, unit: str, expr: str, description: str, *, thresholds: d.ThresholdsConfig = NEUTRAL,
         no_value: str = "0", width: int = 4, minmax: tuple[float, float] | None = None) -> stat.Panel:
    """A stat tile: last value, a sparkline, colours only where the value is a judgement."""
    p = (stat.Panel().title(title).description(description).unit(unit).datasource(DATASOURCE)
         .with_target(target(expr)).height(4).span(width).thresholds(thresholds).no_value(no_value)
         .graph_mode(BigValueGraphMode.AREA).reduce_options(ReduceDataOptions().calcs(["lastNotNull"])))
    if minmax is not None:
        p = p.min(minmax[0]).max(minmax[1])
    return p


def graph(title: str, unit: str, targets: Sequence[tuple[str, str]], description: str, *, width: int = 12,
          stacked: bool = False, bars: bool = False, minmax: tuple[float, float] | None = None) -> timeseries.Panel:
    """A time series panel: multi tooltip sorted descending, a table legend with mean, max and last."""
    p = (timeseries.Panel().title(title).description(description).unit(unit).datasource(DATASOURCE)
         .height(8).span(width).fill_opacity(10)
         .tooltip(Tooltip().mode(TooltipDisplayMode.MULTI).sort(SortOrder.DESCENDING))
         .legend(VizLegendOptions().display_mode(LegendDisplayMode.TABLE).placement(LegendPlacement.BOTTOM)
                 .show_legend(True).calcs(["mean", "max", "lastNotNull"])))
    for expr, legend in targets:
        p = p.with_target(target(expr, legend))
    if stacked:
        p = p.stacking(StackingConfig().mode(StackingMode.NORMAL))
    if bars:
        p = p.draw_style(GraphDrawStyle.BARS).fill_opacity(80)
    if minmax is not None:
        p = p.min(minmax[0]).max(minmax[1])
    return p


def bucket_heatmap(title: str, expr: str, description: str, *, width: int = 12) -> heatmap.Panel:
    """A heatmap of histogram buckets as Prometheus has them (no recalculation): rows are ``le``."""
    q = target(expr, "{{le}}").format(PromQueryFormat.HEATMAP)
    return (heatmap.Panel().title(title).description(description).unit("reqps").datasource(DATASOURCE)
            .height(8).span(width).with_target(q).calculate(False)
            .y_axis(heatmap.YAxisConfig().unit("s"))
            .filter_values(heatmap.FilterValueRange().le(1e-9))
            .cell_values(heatmap.CellValues().unit("reqps")).show_legend().show_tooltip())


def summary_table(title: str, columns: Sequence[tuple[str, str, str]], description: str) -> table.Panel:
    """One row per series of the first column's labels; columns (header, unit, instant expression) merged."""
    p = (table.Panel().title(title).description(description).unit("none").datasource(DATASOURCE)
         .height(8).span(24).show_header(True)
         .with_transformation(DataTransformerConfig(id_val="merge", options={}))
         .with_transformation(DataTransformerConfig(id_val="organize", options={
             "excludeByName": {"Time": True},
             "renameByName": {f"Value #{chr(65 + i)}": header for i, (header, _, _) in enumerate(columns)}})))
    for i, (header, unit, expr) in enumerate(columns):
        p = p.with_target(target(expr, header, instant=True, table_format=True).ref_id(chr(65 + i)))
        p = p.override_by_name(header, [DynamicConfigValue(id_val="unit", value=unit)])
    return p


def render(board: d.Dashboard) -> dict[str, Any]:
    """The dashboard as Grafana's JSON model, with stable panel ids and query refIds."""
    model: dict[str, Any] = json.loads(json.dumps(board.build(), cls=JSONEncoder))
    for i, panel in enumerate(walk_panels(model), start=1):
        panel["id"] = i
        for j, q in enumerate(panel.get("targets", [])):
            q["refId"] = q.get("refId") or chr(65 + j)
    return model


def walk_panels(model: dict[str, Any]) -> Iterator[dict[str, Any]]:
    """Every panel, rows and the panels inside collapsed rows included, top to bottom."""
    for panel in model.get("panels", []):
        yield panel
        yield from panel.get("panels", [])
