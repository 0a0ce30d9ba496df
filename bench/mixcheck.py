"""Checks of one output of the mixed benchmark (``bench/run.py --mix``) against the figures the
generator computed for each file (``DIR.expected.json``, written by ``bench/gen_mix.py``).

Every figure is compared per file, by the base name of the ``source`` label (logmetrics labels a
stream with its path, the mtail program with ``getfilename()``), summed over every other label.
Counters, gauges and HTTP requests must agree; a histogram the generator can compute is checked
(count exactly, sum to a relative 1e-6) when the output has it for that file, and reported as a
note when it has not: which latencies a parser can derive is the parser's business, but the ones
it reports must be right. An ``error`` outcome of ``llm_requests_total`` is treated the same way.
"""

from __future__ import annotations

import math
import os
from collections import defaultdict
from typing import Any

from prometheus_client.parser import text_string_to_metric_families

COUNTERS = ("llm_prompt_tokens_total", "llm_generation_tokens_total", "llm_audio_seconds_total",
            "llm_embeddings_total")
#: outcomes a parser may leave out (a failed request can only be known where the log says so)
OPTIONAL_OUTCOMES = ("error",)
REL = 1e-9
HIST_REL = 1e-6

Key = tuple[str, str]  # (metric sample name, file name)


class Output:
    """The samples of one exposition, summed per file and per the labels asked for."""

    def __init__(self, text: str) -> None:
        self.by_file: dict[Key, float] = defaultdict(float)
        self.by_label: dict[tuple[str, str, tuple[str, ...]], float] = defaultdict(float)
        self.total: dict[str, float] = defaultdict(float)
        for fam in text_string_to_metric_families(text):
            for s in fam.samples:
                self.total[s.name] += s.value
                src = s.labels.get("source")
                if src is None:
                    continue
                name = os.path.basename(src)
                self.by_file[(s.name, name)] += s.value
                if s.name == "http_requests_total":
                    key = (s.labels.get("method", ""), s.labels.get("route", ""), s.labels.get("code", ""))
                    self.by_label[(s.name, name, key)] += s.value
                elif s.name == "llm_requests_total":
                    self.by_label[(s.name, name, (s.labels.get("outcome", ""),))] += s.value

    def labelled(self, metric: str, name: str) -> dict[tuple[str, ...], float]:
        """Non-zero values of ``metric`` for file ``name``, by the labels kept for it."""
        return {k: v for (m, f, k), v in self.by_label.items() if m == metric and f == name and v}


def close(got: float, want: float, rel: float) -> bool:
    """Equal within ``rel`` (exactly for small integers)."""
    return math.isclose(got, want, rel_tol=rel, abs_tol=1e-9)


def check_file(out: Output, name: str, exp: dict[str, Any], per_record: bool) -> tuple[list[str], list[str]]:
    """(problems, notes) for one file."""
    problems: list[str] = []
    notes: list[str] = []
    unchecked = set(exp["unchecked"])

    want_http: dict[tuple[str, ...], float] = {(r["method"], r["route"], r["code"]): float(r["value"])
                                               for r in exp["http_requests_total"]}
    got_http = out.labelled("http_requests_total", name)
    for key in sorted(set(want_http) | set(got_http)):
        if want_http.get(key, 0.0) != got_http.get(key, 0.0):
            problems.append(f"{name}: http_requests_total{key}: want {want_http.get(key, 0.0):g}, "
                            f"got {got_http.get(key, 0.0):g}")

    want_out = {k: float(v) for k, v in exp["llm_requests_total"].items() if v}
    got_out = {k[0]: v for k, v in out.labelled("llm_requests_total", name).items()}
    for outcome in sorted(set(want_out) | set(got_out)):
        want, got = want_out.get(outcome, 0.0), got_out.get(outcome)
        if got is None and outcome in OPTIONAL_OUTCOMES:
            notes.append(f"{name}: llm_requests_total{{outcome={outcome!r}}} not reported (want {want:g})")
        elif got != want:
            problems.append(f"{name}: llm_requests_total{{outcome={outcome!r}}}: want {want:g}, got {got or 0.0:g}")

    for metric in COUNTERS:
        if metric in unchecked:
            continue
        want, got = float(exp[metric]), out.by_file.get((metric, name), 0.0)
        if not close(got, want, REL):
            problems.append(f"{name}: {metric}: want {want:g}, got {got:g}")

    want_err = float(exp["backend_errors_per_record" if per_record else "backend_errors_total"])
    got_err = out.by_file.get(("backend_errors_total", name), 0.0)
    if got_err != want_err:
        problems.append(f"{name}: backend_errors_total (all types): want {want_err:g}, got {got_err:g}")

    for metric, want in exp["gauges"].items():
        got = out.by_file.get((metric, name))
        if got is None or not close(got, float(want), REL):
            problems.append(f"{name}: {metric}: want {want}, got {got}")

    for metric, h in exp["histograms"].items():
        count = out.by_file.get((metric + "_count", name))
        if count is None:
            notes.append(f"{name}: {metric} not reported (want count {h['count']})")
            continue
        total = out.by_file.get((metric + "_sum", name), 0.0)
        if count != h["count"] or not close(total, h["sum"], HIST_REL):
            problems.append(f"{name}: {metric}: want count {h['count']} sum {h['sum']:.6f}, "
                            f"got count {count:g} sum {total:.6f}")
    return problems, notes


def check_mix(text: str, expected: dict[str, Any], self_metrics: bool,
              per_record: bool) -> tuple[list[str], list[str]]:
    """(problems, notes) of one exposition of the whole mixed corpus.

    ``self_metrics``: also check ``logmetrics_lines_read_total`` (logmetrics only);
    ``per_record``: the tool counts every error line of vLLM, not each crash once (mtail).
    """
    out = Output(text)
    problems: list[str] = []
    notes: list[str] = []
    for name, exp in sorted(expected["files"].items()):
        p, n = check_file(out, name, exp, per_record)
        problems += p
        notes += n
    for metric, name in sorted(out.by_file):
        if name not in expected["files"] and out.by_file[(metric, name)]:
            problems.append(f"{metric}: a series for {name!r}, which is not in the corpus")
    if self_metrics:
        lines = out.total.get("logmetrics_lines_read_total", 0.0)
        if lines != expected["lines"]:
            problems.append(f"logmetrics_lines_read_total: want {expected['lines']}, got {lines:g}")
    return problems, notes
