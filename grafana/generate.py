"""Write the dashboards under grafana/dashboards/ from the code, or check that they are current.

    python -m grafana.generate            # write grafana/dashboards/*.json
    python -m grafana.generate --check    # exit 1 if a committed file differs

``panel_queries()`` lists every PromQL expression of every panel and annotation, and ``fill()``
puts values in for the template variables: what a test against a real Prometheus evaluates.
"""

from __future__ import annotations

import json
import re
import sys
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from grafana_foundation_sdk.builders.dashboard import Dashboard

from grafana import http_dashboard, overview
from grafana.kit import render, walk_panels

OUT = Path(__file__).resolve().parent / "dashboards"
BUILDERS: dict[str, Callable[[], Dashboard]] = {"llm-overview.json": overview.build, "http.json": http_dashboard.build}
REGENERATE = "python -m grafana.generate"
#: What ``fill`` puts in for each variable, unless told otherwise: All (``.*``) for the filters,
#: each SLO variable's default, a one-minute rate window and a one-hour range.
DEFAULTS = {"__rate_interval": "1m", "__interval": "1m", "__range": "1h"}
_VARIABLE = re.compile(r"\$\{(\w+)(?::\w+)?\}|\$(\w+)")


def dashboards() -> dict[str, dict[str, Any]]:
    """File name -> the dashboard's JSON model."""
    return {name: render(build()) for name, build in BUILDERS.items()}


def text(model: dict[str, Any]) -> str:
    """The file's content: stable key order, two-space indents, a final newline."""
    return json.dumps(model, indent=2, sort_keys=True, ensure_ascii=False) + "\n"


@dataclass(frozen=True)
class PanelQuery:
    """One expression of a panel (or of an annotation, whose panel is ``annotation: <name>``)."""

    dashboard: str
    panel: str
    expr: str


def panel_queries() -> list[PanelQuery]:
    """Every expression of every panel and annotation of every dashboard, variables unfilled."""
    out = []
    for model in dashboards().values():
        for panel in walk_panels(model):
            out += [PanelQuery(model["uid"], panel["title"], t["expr"]) for t in panel.get("targets", [])]
        for note in model.get("annotations", {}).get("list", []):
            out.append(PanelQuery(model["uid"], f"annotation: {note['name']}", note["expr"]))
    return out


def variable_defaults(model: Mapping[str, Any]) -> dict[str, str]:
    """Values for a dashboard's variables: ``.*`` for the query variables, the current option of the others."""
    values = dict(DEFAULTS)
    for var in model["templating"]["list"]:
        if var["type"] == "query":
            values[var["name"]] = ".*"
        elif var["type"] == "custom":
            values[var["name"]] = var["current"]["value"]
    return values


def used_variables(expr: str) -> set[str]:
    """The names of the variables an expression refers to (``$x``, ``${x}``, ``${x:text}``)."""
    return {a or b for a, b in _VARIABLE.findall(expr)}


def fill(expr: str, values: Mapping[str, str]) -> str:
    """``expr`` with each variable replaced by its value; an unknown variable raises KeyError."""
    return _VARIABLE.sub(lambda m: values[m.group(1) or m.group(2)], expr)


def main(argv: list[str]) -> int:
    """Write the dashboards, or with ``--check`` report the stale ones."""
    stale = []
    for name, model in dashboards().items():
        path = OUT / name
        content = text(model)
        if "--check" in argv:
            if not path.exists() or path.read_text() != content:
                stale.append(name)
        else:
            OUT.mkdir(exist_ok=True)
            path.write_text(content)
    if stale:
        print(f"stale: {', '.join(stale)}; run: {REGENERATE}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
