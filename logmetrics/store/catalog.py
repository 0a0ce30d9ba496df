"""The metric catalog: every family the engine exposes, with its type, labels, help and buckets.

The engine owns names, labels and buckets so that every backend lands in the same families and one
dashboard serves them all. Parsers name a family in their events; they never create metrics.
Every family also carries the labels ``backend`` and ``source``, added by the engine. The families
are data, in ``catalog.toml`` beside this module.
"""

from __future__ import annotations

import tomllib
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal, get_args

Kind = Literal["counter", "gauge", "histogram"]

# OpenTelemetry GenAI semantic-convention buckets.
DURATION_BUCKETS = (0.01, 0.02, 0.04, 0.08, 0.16, 0.32, 0.64, 1.28, 2.56, 5.12, 10.24, 20.48, 40.96, 81.92)
TTFT_BUCKETS = (0.001, 0.005, 0.01, 0.02, 0.04, 0.06, 0.08, 0.1, 0.25, 0.5, 0.75, 1.0, 2.5, 5.0, 7.5, 10.0)
TPOT_BUCKETS = (0.01, 0.025, 0.05, 0.075, 0.1, 0.15, 0.2, 0.3, 0.4, 0.5, 0.75, 1.0, 2.5)
HTTP_BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.075, 0.1, 0.25, 0.5, 0.75, 1.0, 2.5, 5.0, 7.5, 10.0)

COMMON_LABELS = ("backend", "source")


@dataclass(frozen=True)
class Family:
    """One metric family: wire name (counters end in ``_total``), type, extra labels, help."""

    name: str
    kind: Kind
    labels: tuple[str, ...]
    help: str
    buckets: tuple[float, ...] = ()

    @property
    def base(self) -> str:
        """The name without ``_total``, as prometheus_client wants it for counters."""
        return self.name[:-6] if self.kind == "counter" and self.name.endswith("_total") else self.name


#: The bucket sets a family of ``catalog.toml`` may name.
BUCKETS = {"duration": DURATION_BUCKETS, "ttft": TTFT_BUCKETS, "tpot": TPOT_BUCKETS, "http": HTTP_BUCKETS}
#: What a family of ``catalog.toml`` may say: how it is exposed, and how to read it (``reference``).
_KEYS = frozenset({"type", "labels", "help", "buckets", "read", "queries", "slo"})

#: ``catalog.toml``: the backends' families (``backend``) and logmetrics' own (``self``), by name.
CATALOG: dict[str, dict[str, dict[str, Any]]] = tomllib.loads(
    Path(__file__).with_name("catalog.toml").read_text(encoding="utf-8"))


def _families(table: str) -> tuple[Family, ...]:
    out = []
    for name, e in CATALOG[table].items():
        if not _KEYS.issuperset(e) or e["type"] not in get_args(Kind):
            raise ValueError(f"catalog.toml: {table}.{name}: unknown keys or type in {sorted(e)}")
        buckets = BUCKETS[e["buckets"]] if "buckets" in e else ()
        out.append(Family(name, e["type"], tuple(e["labels"]), e["help"], buckets))
    return tuple(out)


FAMILIES = _families("backend")
BY_NAME: dict[str, Family] = {f.name: f for f in FAMILIES}
#: The engine's own health metrics. Their labels are listed explicitly (no backend/source pair).
SELF_FAMILIES = _families("self")
SELF_BY_NAME: dict[str, Family] = {f.name: f for f in SELF_FAMILIES}


def markdown() -> str:
    """The catalog as a Markdown table (``logmetrics metrics`` and the metric reference page, docs/metrics.md)."""
    rows = ["| metric | type | labels | help |", "|---|---|---|---|"]
    for fam in FAMILIES:
        labels = ", ".join(COMMON_LABELS + fam.labels)
        rows.append(f"| `{fam.name}` | {fam.kind} | {labels} | {fam.help} |")
    for fam in SELF_FAMILIES:
        rows.append(f"| `{fam.name}` | {fam.kind} | {', '.join(fam.labels)} | {fam.help} |")
    return "\n".join(rows) + "\n"
