"""The metric reference of docs/operating.md: every family of the catalog, how to read it in PromQL,
and the recording rules and alerts of ``rules/`` that read it.

``markdown(groups)`` writes the reference from the catalog, the table of hints below and the rule
groups (the parsed ``groups`` of ``rules/*.yml``); ``python scripts/reference.py`` puts it into the
guide between its markers, and a test fails while the two differ. Each family needs an entry in
``HINTS``: a sentence on how to read it, and the queries to use where the default of its type (a
rate per useful label for a counter, p95 and the share within a threshold for a histogram, the
value per backend and model for a gauge) is not the right one.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass

from logmetrics.store.catalog import COMMON_LABELS, FAMILIES, SELF_FAMILIES, Family

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
HINTS: dict[str, Hint] = {
    "llm_prompt_tokens_total": Hint(
        "Input tokens per second; compare with the usual to spot long prompts (slow prefill, a high time to "
        "first token)."),
    "llm_generation_tokens_total": Hint(
        "Output tokens per second: the backend's useful work. Zero while requests are running means a stalled "
        "engine.", (
            _q("output tokens/s per backend and model",
               f"sum by (backend, model) (rate(llm_generation_tokens_total{R}))"),
            _q("output tokens per request", f"sum by (backend, model) (rate(llm_generation_tokens_total{R})) / "
               f"sum by (backend, model) (rate(llm_requests_total{{outcome!=\"aborted\"}}{R}))"))),
    "llm_cached_prompt_tokens_total": Hint(
        "Read it against the prompt tokens: the share of prompt tokens the cache saved.", (
            _q("cached share of prompt tokens", f"sum by (backend, model) (rate(llm_cached_prompt_tokens_total{R})) / "
               f"sum by (backend, model) (rate(llm_prompt_tokens_total{R}))"),)),
    "llm_requests_total": Hint(
        "Requests per second by outcome, and the error ratio. Aborted requests are the client's doing (a closed "
        "stream): leave them out of the traffic an error ratio divides by.", (
            _q("requests/s by outcome", f"sum by (backend, model, outcome) (rate(llm_requests_total{R}))"),
            _q("error ratio", f"sum by (backend, model) (rate(llm_requests_total{{outcome=\"error\"}}{R})) / "
               f"sum by (backend, model) (rate(llm_requests_total{{outcome!=\"aborted\"}}{R}))"))),
    "llm_request_duration_seconds": Hint(
        "Quantiles from the buckets over a window, never the lifetime mean (_sum / _count of all time).", slo=20.48),
    "llm_time_to_first_token_seconds": Hint(
        "What interactive users feel first: queueing plus prefill. Rises with the queue and with long "
        "prompts.", slo=2.5),
    "llm_time_per_output_token_seconds": Hint(
        "Decoding speed per sequence: rises with the batch size (requests running) and with GPU contention.",
        slo=0.1),
    "llm_requests_running": Hint(
        "The value the backend last logged: read it as it is, summed over replicas. It holds until the backend "
        "logs again, and goes to 0 when the backend shuts down or starts again."),
    "llm_requests_waiting": Hint(
        "Requests queued: above zero for long, the backend is at capacity (compare with the running ones).", (
            _q("queued requests per backend and model", "sum by (backend, model) (llm_requests_waiting)"),
            _q("the worst queue over 10 minutes",
               "max by (backend, model) (max_over_time(llm_requests_waiting[10m]))"))),
    "llm_kv_cache_usage_ratio": Hint(
        "0 to 1: near 1 new requests wait and running ones are preempted. Take the fullest replica, not the sum.", (
            _q("the fullest replica per backend and model", "max by (backend, model) (llm_kv_cache_usage_ratio)"),)),
    "llm_prefix_cache_hit_ratio": Hint(
        "The backend's own hit rate (0 to 1) over its own window: read it per replica, or the mean.", (
            _q("mean over replicas", "avg by (backend, model) (llm_prefix_cache_hit_ratio)"),)),
    "llm_prompt_throughput_tokens_per_second": Hint(
        "The backend's own throughput figure, as last logged: a check against the rate of "
        "llm_prompt_tokens_total, not a replacement for it (it is sampled, the counter is not).", (
            _q("reported input tokens/s", "sum by (backend, model) (llm_prompt_throughput_tokens_per_second)"),)),
    "llm_generation_throughput_tokens_per_second": Hint(
        "The backend's own figure, as last logged: compare it with the rate of llm_generation_tokens_total "
        "(the dashboard's \"reported vs counted\" panel); a gap means lines were missed or not logged.", (
            _q("reported output tokens/s", "sum by (backend, model) (llm_generation_throughput_tokens_per_second)"),)),
    "llm_preemptions_total": Hint(
        "Any steady rate means the KV cache is too small for the load: preempted requests are computed again."),
    "llm_audio_seconds_total": Hint(
        "Seconds of audio per second of wall time: how many real-time streams the speech backend keeps up with."),
    "llm_embeddings_total": Hint("Embeddings created per second (a batch of inputs counts each input)."),
    "http_requests_total": Hint(
        "Requests per second by status class, and the 5xx ratio per backend or route.", (
            _q("5xx answers per second by backend",
               f"sum by (backend) (rate(http_requests_total{{code=~\"5..\"}}{R}))"),
            _q("the ten busiest routes", f"topk(10, sum by (backend, route) (rate(http_requests_total{R})))"),
            _q("5xx ratio per route", f"sum by (backend, route) (rate(http_requests_total{{code=~\"5..\"}}{R})) / "
               f"sum by (backend, route) (rate(http_requests_total{R}))"))),
    "http_request_duration_seconds": Hint(
        "Only where the access log carries a duration; per route, p95 over a window.", (
            _q("p95 per backend and route", "histogram_quantile(0.95, sum by (le, backend, route) "
               f"(rate(http_request_duration_seconds_bucket{R})))"),
            _q("share of requests within 0.5 s", "sum by (backend) (rate(http_request_duration_seconds_bucket"
               f"{{le=\"0.5\"}}{R})) / sum by (backend) (rate(http_request_duration_seconds_count{R}))"))),
    "backend_errors_total": Hint(
        "Errors by type. Rare events: read increase() over an hour as well as the rate; not_found is mostly "
        "scanners' 404s.", (
            _q("errors/s by backend and type", f"sum by (backend, error_type) (rate(backend_errors_total{R}))"),
            _q("errors in the last hour", "sum by (backend, model, error_type) (increase(backend_errors_total[1h]))"))),
    "llm_client_errors_total": Hint(
        "Requests refused for the client's fault (4xx), by type: a client or a gateway sending bad requests. "
        "Not a backend failure, so no error-rate alert reads it; compare it with the requests that succeeded.", (
            _q("client errors/s by backend and type",
               f"sum by (backend, error_type) (rate(llm_client_errors_total{R}))"),
            _q("share of requests refused for the client's fault",
               f"sum by (backend) (rate(llm_client_errors_total{R})) / (sum by (backend) "
               f"(rate(llm_client_errors_total{R})) + sum by (backend) (rate(llm_requests_total{R})))"))),
    "backend_restarts_total": Hint(
        "Start-ups: count them over a window; more than a few an hour is a crash loop.", (
            _q("start-ups in the last hour", "sum by (backend, source) (increase(backend_restarts_total[1h]))"),)),
    "backend_ready": Hint(
        "1 per replica that logged its ready line and no shutdown since: the sum is the ready replicas.", (
            _q("ready replicas", "sum by (backend, model) (backend_ready)"),)),
    "backend_process_cpu_seconds_total": Hint(
        "CPU seconds per second: the cores the backend's processes use.", (
            _q("cores used", f"sum by (backend, source) (rate(backend_process_cpu_seconds_total{R}))"),)),
    "backend_process_resident_memory_bytes": Hint(
        "Bytes of resident memory, as sampled at the last poll; a steady climb is a leak.", (
            _q("resident memory", "sum by (backend, source) (backend_process_resident_memory_bytes)"),)),
    "logmetrics_lines_read_total": Hint("Lines per second per source: the log volume logmetrics keeps up with."),
    "logmetrics_bytes_read_total": Hint("Bytes per second per source: with the lag, how close logmetrics is to "
                                        "its CPU limit."),
    "logmetrics_lines_matched_total": Hint("Read it with the unmatched lines: the share a parser recognises."),
    "logmetrics_lines_unmatched_total": Hint(
        "The share of unmatched lines per parser: a jump after a backend upgrade means its log format changed.", (
            _q("unmatched share per parser", f"sum by (parser) (rate(logmetrics_lines_unmatched_total{R})) / "
               f"(sum by (parser) (rate(logmetrics_lines_unmatched_total{R})) + "
               f"sum by (parser) (rate(logmetrics_lines_matched_total{R})))"),)),
    "logmetrics_lines_truncated_total": Hint("Should stay at 0; a rate means lines longer than max_line_bytes."),
    "logmetrics_parse_errors_total": Hint("Should stay at 0: a parser raised on a record (a bug worth reporting)."),
    "logmetrics_values_rejected_total": Hint("Should stay at 0: a parser produced values no metric can take."),
    "logmetrics_requests_timed_out_total": Hint(
        "Requests whose finish line never came: a few after a crash are normal, a steady rate means missed lines."),
    "logmetrics_bytes_lost_total": Hint(
        "Anything above 0 means counts miss lines (a lower bound): see the runbook.", (
            _q("bytes lost in the last 15 minutes", "sum by (instance, source) "
               "(increase(logmetrics_bytes_lost_total[15m]))"),)),
    "logmetrics_files_lost_total": Hint("Files gone while logmetrics was down; each is also warned on stderr.", (
        _q("files lost in the last day", "sum by (instance, source) (increase(logmetrics_files_lost_total[1d]))"),)),
    "logmetrics_read_errors_total": Hint("Files that could not be read: usually permissions (see stderr)."),
    "logmetrics_rotations_total": Hint("Rotations followed: a rate far above the rotation policy means a "
                                       "misbehaving rotator."),
    "logmetrics_truncations_total": Hint("copytruncate rotations followed."),
    "logmetrics_state_commits_total": Hint("About one per poll with new lines; 0 with --state-file set means no "
                                           "saves."),
    "logmetrics_state_save_failures_total": Hint("Should stay at 0: a full or read-only disk under the state file.", (
        _q("failed saves in the last hour",
           "sum by (instance) (increase(logmetrics_state_save_failures_total[1h]))"),)),
    "logmetrics_config_reloads_total": Hint(
        "A failure newer than the last success means the file on disk is not the one running.", (
            _q("refused reloads in the last hour",
               "sum by (instance) (increase(logmetrics_config_reloads_total{result=\"failure\"}[1h]))"),)),
    "logmetrics_config_last_reload_success_timestamp_seconds": Hint("When the file was last read with success.", (
        _q("seconds since the configuration was last read",
           "time() - logmetrics_config_last_reload_success_timestamp_seconds"),)),
    "logmetrics_web_config_reloads_total": Hint(
        "A failure means the web config or a certificate on disk is not the one served (a renewal that "
        "did not take).", (
            _q("refused web config reloads in the last hour",
               "sum by (instance) (increase(logmetrics_web_config_reloads_total{result=\"failure\"}[1h]))"),)),
    "logmetrics_label_overflow_total": Hint(
        "Should stay at 0: the metric and label that overflowed, folded into __other__.", (
            _q("values folded in the last 15 minutes", "sum by (instance, metric, label) "
               "(increase(logmetrics_label_overflow_total[15m]))"),)),
    "logmetrics_open_files": Hint("Files followed per instance; as the inputs name them."),
    "logmetrics_files_waiting": Hint("Should stay at 0: above it, logmetrics is out of file descriptors."),
    "logmetrics_streams_unrecognised": Hint(
        "0 once every stream found its parser; above 0 for more than a minute, a log no parser knows "
        "(logmetrics -v watch names it)."),
    "logmetrics_lag_bytes": Hint("Bytes behind per source: a few KiB while keeping up; a climb means too "
                                 "little CPU.", (
        _q("the most behind source per instance", "max by (instance, source) (logmetrics_lag_bytes)"),)),
    "logmetrics_last_line_timestamp_seconds": Hint("Read it as an age: a source silent for longer than usual.", (
        _q("seconds since the last line", "time() - max by (instance, source) "
           "(logmetrics_last_line_timestamp_seconds)"),)),
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
