"""grafana/: the committed dashboards are what the code generates, every panel has a unit and reads
``${datasource}``, rates use ``$__rate_interval``, every metric exists, every variable is defined,
and every expression parses in promtool."""

from __future__ import annotations

import re
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from grafana import generate
from grafana.generate import dashboards, fill, panel_queries, used_variables, variable_defaults
from grafana.kit import labels_of, walk_panels
from logmetrics.store.catalog import DURATION_BUCKETS, TPOT_BUCKETS, TTFT_BUCKETS
from tests.test_prometheus import binary
from tests.test_rules import PROMETHEUS_SERIES, metric_names, rule_groups, unknown_metrics

ROOT = Path(__file__).resolve().parent.parent
GRAFANA = ROOT / "grafana"
DATASOURCE = {"type": "prometheus", "uid": "${datasource}"}
BUILTIN_VARIABLES = {"__rate_interval", "__interval", "__range"}
MODELS = dashboards()


def panels(model: dict[str, Any]) -> list[dict[str, Any]]:
    """The panels of a dashboard that show data (rows left out)."""
    return [p for p in walk_panels(model) if p["type"] != "row"]


def all_panels() -> Iterator[tuple[str, dict[str, Any]]]:
    """(dashboard file, panel) for every data panel of every dashboard."""
    for name, model in MODELS.items():
        for panel in panels(model):
            yield name, panel


def recorded() -> set[str]:
    """The names the recording rules of rules/ record."""
    return {r["record"] for g in rule_groups() for r in g["rules"] if "record" in r}


def test_committed_dashboards_are_what_the_code_generates() -> None:
    """grafana/dashboards/*.json equals the generator's output (else: python -m grafana.generate)."""
    assert set(MODELS) == {"llm-overview.json", "http.json"}
    for name, model in MODELS.items():
        path = GRAFANA / "dashboards" / name
        assert path.exists(), f"{name} missing; run: {generate.REGENERATE}"
        assert path.read_text() == generate.text(model), f"{name} is stale; run: {generate.REGENERATE}"
    assert generate.main(["--check"]) == 0


def test_every_panel_has_a_unit_and_reads_the_datasource_variable() -> None:
    """Each data panel sets a unit and uses ${datasource}, on the panel and on each query."""
    count = 0
    for name, panel in all_panels():
        where = f"{name}: {panel['title']}"
        assert panel["fieldConfig"]["defaults"].get("unit"), where
        assert panel["datasource"] == DATASOURCE, where
        assert panel["targets"], where
        for target in panel["targets"]:
            assert target["datasource"] == DATASOURCE, where
        count += 1
    assert count > 40


def _datasources(node: Any) -> Iterator[Any]:
    if isinstance(node, dict):
        for key, value in node.items():
            if key == "datasource":
                yield value
            yield from _datasources(value)
    elif isinstance(node, list):
        for item in node:
            yield from _datasources(item)


def test_no_datasource_uid_is_hard_coded() -> None:
    """Every datasource reference anywhere is ${datasource}; no import placeholders; a datasource variable."""
    for name, model in MODELS.items():
        refs = list(_datasources(model))
        assert refs and all(ref == DATASOURCE for ref in refs), name
        assert "__inputs" not in model and "${DS_" not in generate.text(model), name
        variables = {v["name"]: v for v in model["templating"]["list"]}
        assert variables["datasource"]["type"] == "datasource"
        assert variables["datasource"]["query"] == "prometheus"
        assert "current" not in variables["datasource"], "a saved current datasource is a hard-coded uid"


def _call_bodies(expr: str, function: str) -> Iterator[str]:
    """The argument text of each call of ``function`` in ``expr``."""
    for match in re.finditer(rf"(?<![\w:]){function}\(", expr):
        depth, i = 1, match.end()
        while depth:
            depth += {"(": 1, ")": -1}.get(expr[i], 0)
            i += 1
        yield expr[match.end(): i - 1]


@pytest.mark.parametrize("query", panel_queries(), ids=lambda q: f"{q.dashboard}:{q.panel}")
def test_rates_use_the_rate_interval_and_no_fixed_window(query: generate.PanelQuery) -> None:
    """Every rate() reads [$__rate_interval]; no panel has a fixed window like [5m]."""
    for body in _call_bodies(query.expr, "rate"):
        assert re.findall(r"\[[^\]]*\]", body) == ["[$__rate_interval]"], body
    assert set(re.findall(r"\[[^\]]*\]", query.expr)) <= {"[$__rate_interval]", "[$__range]"}, query.expr


def test_the_rate_check_sees_a_fixed_window() -> None:
    """A rate over [5m] is found by the check above."""
    assert [re.findall(r"\[[^\]]*\]", b) for b in _call_bodies("sum(rate(x{a=~\"(b)\"}[5m])) / 2", "rate")] == \
        [["[5m]"]]


def test_every_metric_in_a_panel_or_variable_exists() -> None:
    """Every name a panel, annotation or variable query reads is in the catalog or recorded by rules/."""
    names = recorded()
    exprs = [q.expr for q in panel_queries()]
    for model in MODELS.values():
        for var in model["templating"]["list"]:
            if var["type"] == "query":
                selector = re.fullmatch(r"label_values\((.*), (\w+)\)", var["query"])
                assert selector, var["query"]
                exprs.append(selector.group(1))
                names_in = re.search(r'__name__=~"([^"]+)"', selector.group(1))
                exprs += names_in.group(1).split("|") if names_in else []
    assert sum(len(metric_names(e)) for e in exprs) > 100  # the names were found at all
    assert {e: unknown_metrics(e, names) for e in exprs if unknown_metrics(e, names)} == {}


def test_the_name_check_catches_a_typo_in_a_panel() -> None:
    """A panel expression with a misspelt family is reported."""
    expr = next(q.expr for q in panel_queries() if "llm_requests_total" in q.expr)
    assert unknown_metrics(expr.replace("llm_requests_total", "llm_request_total"), recorded()) == \
        {"llm_request_total"}


def test_every_variable_used_is_defined_and_every_filter_is_used() -> None:
    """Panels refer only to variables of their dashboard, and each filter variable narrows some panel."""
    for name, model in MODELS.items():
        defined = {v["name"] for v in model["templating"]["list"]}
        used: set[str] = set()
        for panel in panels(model):
            for text in [panel["title"], *(t["expr"] for t in panel["targets"])]:
                used |= used_variables(text)
        for var in model["templating"]["list"]:
            used |= used_variables(var.get("query", "") if var["type"] == "query" else "")
        assert used - defined - BUILTIN_VARIABLES == set(), name
        assert defined - used == {"datasource"}, name
        assert {"datasource", "job", "backend", "source", "model"} <= defined, name


def test_filter_variables_are_chained_multi_valued_and_all_means_any() -> None:
    """job -> backend -> source: each lists values under the ones before; All matches any value."""
    for name, model in MODELS.items():
        variables = {v["name"]: v for v in model["templating"]["list"]}
        assert 'job=~"$job"' in variables["backend"]["query"], name
        assert 'backend=~"$backend"' in variables["source"]["query"], name
        assert 'source=~"$source"' in variables["model"]["query"], name
        for var in variables.values():
            if var["type"] == "query":
                assert var["multi"] and var["includeAll"] and var["allValue"] == ".*", (name, var["name"])
                assert var["datasource"] == DATASOURCE


@pytest.mark.parametrize(("variable", "buckets"), [
    ("ttft_slo", TTFT_BUCKETS), ("tpot_slo", TPOT_BUCKETS), ("e2e_slo", DURATION_BUCKETS)])
def test_slo_choices_are_the_engines_bucket_boundaries(variable: str, buckets: tuple[float, ...]) -> None:
    """The SLO variable offers exactly the histogram's boundaries, each matching the exposed le."""
    var = next(v for v in MODELS["llm-overview.json"]["templating"]["list"] if v["name"] == variable)
    texts = [o["text"] for o in var["options"]]
    assert [float(t) for t in texts] == list(buckets)
    for option in var["options"]:
        # prometheus_client writes 1.0 as le="1.0"; the value also matches a normalised "1"
        assert re.fullmatch(option["value"], option["text"])
        assert re.fullmatch(option["value"], format(float(option["text"]), "g"))
    assert var["current"]["value"] in [o["value"] for o in var["options"]]


def test_panel_queries_cover_every_panel_and_fill_every_variable() -> None:
    """panel_queries() lists each query of each panel; fill() leaves no variable behind."""
    queries = panel_queries()
    assert len(queries) == sum(len(p["targets"]) for _, p in all_panels()) + 1  # + the restarts annotation
    by_uid = {m["uid"]: variable_defaults(m) for m in MODELS.values()}
    for q in queries:
        assert "$" not in fill(q.expr, by_uid[q.dashboard]), q


def test_every_expression_parses_in_promtool(tmp_path: Path) -> None:
    """With variables filled in, every panel expression is valid PromQL (as rules for promtool)."""
    by_uid = {m["uid"]: variable_defaults(m) for m in MODELS.values()}
    rules = [{"record": f"panel:query:n{i}", "expr": fill(q.expr, by_uid[q.dashboard])}
             for i, q in enumerate(panel_queries())]
    path = tmp_path / "panels.yml"
    path.write_text(yaml.safe_dump({"groups": [{"name": "panels", "rules": rules}]}))
    out = subprocess.run([binary("promtool"), "check", "rules", str(path)], capture_output=True, text=True)
    assert out.returncode == 0, out.stdout + out.stderr
    assert f"{len(rules)} rules found" in out.stdout + out.stderr


def test_provisioning_points_grafana_at_the_dashboards() -> None:
    """The datasource provider reads the URL from the environment; the file provider reads grafana/dashboards."""
    source = yaml.safe_load((GRAFANA / "provisioning" / "datasources" / "logmetrics.yml").read_text())
    (ds,) = source["datasources"]
    assert ds["type"] == "prometheus" and "uid" not in ds and ds["url"].startswith("$")
    provider = yaml.safe_load((GRAFANA / "provisioning" / "dashboards" / "logmetrics.yml").read_text())
    (files,) = provider["providers"]
    assert files["type"] == "file" and files["options"]["path"].startswith("$")


def test_selectors_name_only_labels_the_series_has() -> None:
    """A matcher on a label the series lacks would empty the panel: every matcher's label exists there."""
    checked = 0
    for q in panel_queries():
        no_strings = re.sub(r'"[^"]*"', '""', q.expr)
        for metric, matchers in re.findall(r"([a-zA-Z_][\w:]*)\{([^}]*)\}", no_strings):
            if metric in PROMETHEUS_SERIES:
                continue
            labels = set(re.findall(r"(\w+)\s*[=!]~?", matchers))
            assert labels <= set(labels_of(metric)), (q.panel, metric, labels - set(labels_of(metric)))
            checked += 1
    assert checked > 100
