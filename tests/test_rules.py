"""rules/: the recording and alerting rules load in promtool, pass their unit tests, test every alert
both ways, and name only metrics that logmetrics serves."""

from __future__ import annotations

import re
import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml

from logmetrics.store.catalog import BY_NAME, SELF_BY_NAME
from tests.test_prometheus import binary

ROOT = Path(__file__).resolve().parent.parent
RULES = sorted((ROOT / "rules").glob("*.yml"))
RULE_TESTS = sorted((ROOT / "rules" / "tests").glob("*.yml"))
#: Series Prometheus itself makes: ``up`` of every target.
PROMETHEUS_SERIES = {"up"}
HISTOGRAM_SUFFIXES = ("_bucket", "_sum", "_count")
#: A metric name in PromQL: not a label name (before ``=``, inside ``by (...)``), a function or a keyword.
_NAME = re.compile(r"(?<![\w:\"'.])([a-zA-Z_][a-zA-Z0-9_:]*)(?=\s*(?:\{|\[|\)|$|\s|>|<|=|\+|-|/|\*|,))")
PROMQL_WORDS = {"sum", "by", "rate", "increase", "and", "on", "or", "unless", "max", "min", "avg", "count",
                "max_over_time", "histogram_quantile", "time", "ignoring", "without", "deriv", "bool", "offset",
                "topk", "vector", "changes", "predict_linear", "absent", "group_left", "group_right", "le"}


def rule_groups() -> list[dict[str, Any]]:
    """Every rule group of every rule file."""
    groups: list[dict[str, Any]] = []
    for path in RULES:
        groups += yaml.safe_load(path.read_text())["groups"]
    return groups


def metric_names(expr: str) -> set[str]:
    """The metric names an expression reads (recorded names, with a colon, included)."""
    no_strings = re.sub(r'"[^"]*"', '""', expr)
    no_labels = re.sub(r"\{[^}]*\}", "{}", no_strings)
    no_groupings = re.sub(r"\b(?:by|on|ignoring|without|group_left|group_right)\s*\([^)]*\)", "", no_labels)
    return {m for m in _NAME.findall(no_groupings) if m not in PROMQL_WORDS and not m.isdigit()}


def unknown_metrics(expr: str, recorded: set[str]) -> set[str]:
    """The names in ``expr`` that are neither in the catalog (a histogram's series included), nor
    recorded by a rule, nor made by Prometheus."""
    out = set()
    for name in metric_names(expr):
        base = name
        for suffix in HISTOGRAM_SUFFIXES:
            if name.endswith(suffix) and name[: -len(suffix)] in {**BY_NAME, **SELF_BY_NAME}:
                base = name[: -len(suffix)]
        if base not in BY_NAME and base not in SELF_BY_NAME and name not in recorded and name not in PROMETHEUS_SERIES:
            out.add(name)
    return out


def test_promtool_checks_the_rule_files() -> None:
    """promtool check rules accepts every rule file."""
    out = subprocess.run([binary("promtool"), "check", "rules", *map(str, RULES)], capture_output=True, text=True)
    assert out.returncode == 0, out.stdout + out.stderr
    assert "SUCCESS" in out.stdout + out.stderr


def test_promtool_unit_tests_pass() -> None:
    """promtool test rules passes every unit test under rules/tests/."""
    assert RULE_TESTS
    out = subprocess.run([binary("promtool"), "test", "rules", *map(str, RULE_TESTS)], capture_output=True,
                         text=True, cwd=ROOT)
    assert out.returncode == 0, out.stdout + out.stderr


def test_every_alert_has_a_firing_and_a_quiet_case() -> None:
    """Each alert is tested at least once with alerts expected and once with none (``exp_alerts: []``)."""
    alerts = {r["alert"] for g in rule_groups() for r in g["rules"] if "alert" in r}
    firing: set[str] = set()
    quiet: set[str] = set()
    for path in RULE_TESTS:
        for case in yaml.safe_load(path.read_text())["tests"]:
            for check in case.get("alert_rule_test", []):
                (firing if check.get("exp_alerts") else quiet).add(check["alertname"])
    assert alerts, "no alerts found"
    assert alerts - firing == set(), "alerts never tested firing"
    assert alerts - quiet == set(), "alerts never tested quiet"
    assert (firing | quiet) - alerts == set(), "tests of alerts that do not exist"


def test_every_alert_has_a_severity_a_summary_and_a_runbook_hint() -> None:
    """Alerts carry a severity label and a summary and description, the description with a runbook hint."""
    for group in rule_groups():
        for rule in group["rules"]:
            if "alert" not in rule:
                continue
            assert rule["labels"]["severity"] in ("critical", "warning", "info"), rule["alert"]
            assert rule["annotations"]["summary"] and "$value" in rule["annotations"]["description"] + \
                rule["annotations"]["summary"], rule["alert"]
            assert "Runbook" in rule["annotations"]["description"], rule["alert"]


def anchors(markdown: str) -> set[str]:
    """The anchors a Markdown file's headings get: lower case, spaces to dashes, punctuation dropped."""
    return {re.sub(r"[^\w\- ]", "", h.strip().lower()).replace(" ", "-")
            for h in re.findall(r"^#+ (.+)$", markdown, re.MULTILINE)}


def test_every_runbook_url_is_a_section_of_the_operating_guide() -> None:
    """Each alert's runbook_url is docs/operating.md#<its name>, a heading of that guide."""
    doc = anchors((ROOT / "docs" / "operating.md").read_text())
    alerts = [r for g in rule_groups() for r in g["rules"] if "alert" in r]
    assert alerts
    for rule in alerts:
        url = rule["annotations"].get("runbook_url", "")
        assert url == f"docs/operating.md#{rule['alert'].lower()}", rule["alert"]
        assert url.split("#")[1] in doc, f"{rule['alert']}: no section {url} in docs/operating.md"


def test_the_anchor_check_sees_a_missing_section() -> None:
    """A heading gives its anchor; a name without a heading gives none."""
    assert anchors("## Runbook\n### LLMHighErrorRatio\n") == {"runbook", "llmhigherrorratio"}
    assert "llmenginestalled" not in anchors("### LLMHighErrorRatio\n")


def test_recorded_names_follow_the_convention() -> None:
    """Recorded names are level:metric:operations."""
    for group in rule_groups():
        for rule in group["rules"]:
            if "record" in rule:
                assert re.fullmatch(r"[a-z_]+:[a-z0-9_]+:[a-z0-9_]+", rule["record"]), rule["record"]


def test_rules_name_only_metrics_that_exist() -> None:
    """Every metric a rule reads is in the catalog, recorded by a rule, or made by Prometheus."""
    groups = rule_groups()
    recorded = {r["record"] for g in groups for r in g["rules"] if "record" in r}
    exprs = [r["expr"] for g in groups for r in g["rules"]]
    assert sum(len(metric_names(e)) for e in exprs) > 50  # the names were found at all
    assert {e: unknown_metrics(e, recorded) for e in exprs if unknown_metrics(e, recorded)} == {}


@pytest.mark.parametrize(("expr", "bad"), [
    ("sum by (backend) (rate(llm_request_total[5m]))", {"llm_request_total"}),  # a typo of llm_requests_total
    ('rate(http_requests_total{code=~"5.."}[5m]) / rate(http_request_duration_secs_count[5m])',
     {"http_request_duration_secs_count"}),
    ("backend_model:llm_request:rate5m > 0", {"backend_model:llm_request:rate5m"}),  # not recorded
])
def test_the_name_check_catches_a_typo(expr: str, bad: set[str]) -> None:
    """A misspelt or unrecorded name is reported; label names, functions and keywords are not."""
    assert unknown_metrics(expr, {"backend_model:llm_requests:rate5m"}) == bad
