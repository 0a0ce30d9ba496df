"""The metric reference of docs/operating.md: every family of the catalog, how to read it in PromQL,
and the recording rules and alerts of ``rules/`` that read it.

``markdown(groups)`` writes the reference from the catalog and the rule groups (the parsed ``groups``
of ``rules/*.yml``); ``python scripts/reference.py`` puts it into the guide between its markers, and
a test fails while the two differ. Each family of ``catalog.toml`` says how to read it (``read``),
and the queries to use where the default of its type (a rate per useful label for a counter, p95
and the share within a threshold for a histogram, the value per backend and model for a gauge) is
not the right one.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass

from logmetrics.store.catalog import CATALOG, COMMON_LABELS, FAMILIES, SELF_FAMILIES, Family

#: (what it shows, the PromQL expression)
Query = tuple[str, str]


@dataclass(frozen=True)
class Hint:
    """How to read one family: a note, and the queries if the default of its type does not fit."""

    note: str
    queries: tuple[Query, ...] = ()
    slo: float | None = None  # for a histogram: the bucket boundary of the "share within" query


def _q(what: str, expr: str) -> Query:
    return (what, expr)


R = "[5m]"
#: How to read each family, from ``catalog.toml``.
HINTS: dict[str, Hint] = {
    name: Hint(e["read"], tuple((what, expr) for what, expr in e.get("queries", ())), e.get("slo"))
    for table in CATALOG.values() for name, e in table.items()
}


def labels(fam: Family) -> tuple[str, ...]:
    """Every label of the family's series (before the scrape adds ``job`` and ``instance``)."""
    return fam.labels if fam in SELF_FAMILIES else COMMON_LABELS + fam.labels


def _by(fam: Family) -> str:
    """The labels worth keeping in an aggregation: backend and the family's own (source summed away),
    or for logmetrics' own families, the instance and theirs."""
    keep = ("instance", *fam.labels) if fam in SELF_FAMILIES else ("backend", *fam.labels)
    return ", ".join(keep)


def default_queries(fam: Family, slo: float | None = None) -> tuple[Query, ...]:
    """The usual way to read a family of this type."""
    by = _by(fam)
    if fam.kind == "counter":
        return (_q("per second", f"sum by ({by}) (rate({fam.name}{R}))"),)
    if fam.kind == "histogram":
        within = slo if slo is not None else fam.buckets[len(fam.buckets) // 2]
        return (_q("p95 over 5 minutes",
                   f"histogram_quantile(0.95, sum by (le, {by}) (rate({fam.name}_bucket{R})))"),
                _q(f"share of requests within {within:g} s (a bucket boundary)",
                   f"sum by ({by}) (rate({fam.name}_bucket{{le=\"{within!r}\"}}{R})) / "
                   f"sum by ({by}) (rate({fam.name}_count{R}))"))
    return (_q("as it is, summed over replicas", f"sum by ({by}) ({fam.name})"),)


def _reads(expr: str, names: Iterable[str]) -> bool:
    return any(re.search(rf"(?<![\w:]){re.escape(n)}(?![\w:])", expr) for n in names)


def rules_reading(fam: Family, groups: Sequence[Mapping[str, object]]) -> tuple[list[str], list[str]]:
    """The recording rules (directly or through another recorded series) and alerts that read ``fam``."""
    rules = [r for g in groups for r in g["rules"]]  # type: ignore[attr-defined]  # rules/*.yml's shape
    names = {fam.name, *(f"{fam.name}_{s}" for s in ("bucket", "sum", "count") if fam.kind == "histogram")}
    records: list[str] = []
    for rule in rules:  # a recorded series comes after the ones it reads, in the same or an earlier group
        if "record" in rule and _reads(rule["expr"], names | set(records)):
            records.append(rule["record"])
    alerts = [r["alert"] for r in rules if "alert" in r and _reads(r["expr"], names | set(records))]
    return records, alerts


def entry(fam: Family, groups: Sequence[Mapping[str, object]]) -> str:
    """One family's section."""
    hint = HINTS[fam.name]
    out = [f"#### `{fam.name}`", "",
           f"{fam.kind}; labels: {', '.join(labels(fam)) or 'none'}"
           + (f"; buckets (`le`): {', '.join(repr(b) for b in fam.buckets)}" if fam.buckets else "") + ".", "",
           fam.help, "", f"How to read it: {hint.note}", "", "```promql"]
    for i, (what, expr) in enumerate(hint.queries or default_queries(fam, hint.slo)):
        out += ([""] if i else []) + [f"# {what}", expr.replace(") / ", ")\n  / ")]
    out += ["```", ""]
    records, alerts = rules_reading(fam, groups)
    if records:
        out += ["Recorded: " + ", ".join(f"`{r}`" for r in records) + ".", ""]
    if alerts:
        out += ["Alerts: " + ", ".join(f"[{a}](#{a.lower()})" for a in alerts) + ".", ""]
    return "\n".join(out)


def markdown(groups: Sequence[Mapping[str, object]]) -> str:
    """The whole reference: the backends' families, then logmetrics' own."""
    out = ["### The backends' metrics", "",
           "Every family here carries `backend` and `source` (and `job` and `instance` from the scrape).", ""]
    out += [entry(f, groups) for f in FAMILIES]
    out += ["### logmetrics' own metrics", "",
            "These carry only the labels listed (and `job` and `instance`); they describe the log pipeline.", ""]
    out += [entry(f, groups) for f in SELF_FAMILIES]
    return "\n".join(out)


BEGIN, END = "<!-- reference:begin -->\n", "<!-- reference:end -->"


def block(doc: str) -> str:
    """The text between the markers of ``doc``; ValueError if they are missing."""
    if doc.count(BEGIN) != 1 or doc.count(END) != 1:
        raise ValueError(f"the guide needs exactly one {BEGIN.strip()} and one {END}")
    return doc.split(BEGIN, 1)[1].split(END, 1)[0]


def splice(doc: str, reference: str) -> str:
    """``doc`` with the text between its markers replaced by ``reference``."""
    head, rest = doc.split(BEGIN, 1)
    return head + BEGIN + reference + END + rest.split(END, 1)[1]
