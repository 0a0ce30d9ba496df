"""Figures read from Prometheus text (logmetrics' own and a backend's), and the checks that hold
logmetrics' figures against the backend's and the client's.

A check has a name, the figure of each side (logmetrics live, logmetrics ``--oneshot``, the
backend's ``/metrics``, the client's record) and a tolerance; the harness prints them as one table
and fails on any check outside its tolerance.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass

from prometheus_client.parser import text_string_to_metric_families

Labels = Mapping[str, str]


@dataclass(frozen=True)
class Sample:
    """One sample of an exposition."""

    name: str
    labels: Labels
    value: float


def samples(text: str) -> list[Sample]:
    """Every sample of a Prometheus text exposition."""
    out = []
    for fam in text_string_to_metric_families(text):
        for s in fam.samples:
            out.append(Sample(s.name, dict(s.labels), float(s.value)))
    return out


def total(text: str, name: str, where: Callable[[Labels], bool] = lambda _: True) -> float:
    """The sum of ``name``'s samples whose labels pass ``where``."""
    return sum(s.value for s in samples(text) if s.name == name and where(s.labels))


def by_label(text: str, name: str, *labels: str) -> dict[tuple[str, ...], float]:
    """``name``'s samples summed by the given labels."""
    out: dict[tuple[str, ...], float] = {}
    for s in samples(text):
        if s.name == name:
            key = tuple(s.labels.get(lab, "") for lab in labels)
            out[key] = out.get(key, 0.0) + s.value
    return out


@dataclass
class Check:
    """One figure held against its truth: ``live`` and ``oneshot`` are logmetrics', ``truth`` the
    backend's or the client's (``truth_from`` says which). ``rel`` is the relative tolerance (0 means
    exact); ``None`` for ``truth`` makes the row information only, never a failure."""

    name: str
    live: float | None
    oneshot: float | None
    truth: float | None
    truth_from: str
    rel: float = 0.0
    note: str = ""

    def off(self, value: float | None) -> bool:
        """Whether ``value`` is outside the tolerance (``None``: this side has no such figure)."""
        if self.truth is None or value is None:
            return False
        allowed = self.rel * abs(self.truth) + 1e-9
        return abs(value - self.truth) > allowed

    @property
    def ok(self) -> bool:
        """Whether both of logmetrics' figures are within the tolerance."""
        return not (self.off(self.live) or self.off(self.oneshot))


def fmt(value: float | None) -> str:
    """A figure for the table."""
    if value is None:
        return "-"
    return f"{value:,.0f}" if float(value).is_integer() else f"{value:,.2f}"


def table(title: str, checks: list[Check]) -> str:
    """The checks of one run as a Markdown table."""
    rows = [f"### {title}", "",
            "| figure | logmetrics live | logmetrics --oneshot | truth | from | tolerance | result |",
            "|---|---:|---:|---:|---|---:|---|"]
    for c in checks:
        tol = "info" if c.truth is None else ("exact" if c.rel == 0 else f"{c.rel:.2%}")
        result = "info" if c.truth is None else ("ok" if c.ok else "**FAIL**")
        note = f" ({c.note})" if c.note else ""
        rows.append(f"| {c.name}{note} | {fmt(c.live)} | {fmt(c.oneshot)} | {fmt(c.truth)} | {c.truth_from} "
                    f"| {tol} | {result} |")
    return "\n".join(rows) + "\n"
