"""The metric catalog: every family the engine exposes, with its type, labels, help and buckets.

The engine owns names, labels and buckets so that every backend lands in the same families and one
dashboard serves them all. Parsers name a family in their events; they never create metrics.
Every family also carries the labels ``backend`` and ``source``, added by the engine.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

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


def _f(name: str, kind: Kind, labels: tuple[str, ...], help: str, buckets: tuple[float, ...] = ()) -> Family:
    return Family(name, kind, labels, help, buckets)


M = ("model",)

FAMILIES: tuple[Family, ...] = (
    _f("llm_prompt_tokens_total", "counter", M,
       "Prompt tokens processed. Exact where the backend logs per-request counts, from the first such line of "
       "a stream on (logmetrics check shows each event's rule); otherwise an estimate "
       "integrated from the logged prompt throughput (tokens/s x interval), in which the first stats line "
       "only sets the baseline and an interval counts for at most 60 s (V1: one logging interval)."),
    _f("llm_generation_tokens_total", "counter", M,
       "Generated tokens. Exact where the backend logs per-request counts, from the first such line of "
       "a stream on (logmetrics check shows each event's rule); otherwise an estimate "
       "integrated from the logged generation throughput (tokens/s x interval), in which the first stats line "
       "only sets the baseline and an interval counts for at most 60 s (V1: one logging interval)."),
    _f("llm_cached_prompt_tokens_total", "counter", M,
       "Prompt tokens served from a prefix or prompt cache, where logged."),
    _f("llm_requests_total", "counter", (*M, "outcome"),
       "Inference requests finished, by outcome (ok, error, aborted)."),
    _f("llm_request_duration_seconds", "histogram", M, "End-to-end inference request duration.", DURATION_BUCKETS),
    _f("llm_time_to_first_token_seconds", "histogram", M, "Time to first token.", TTFT_BUCKETS),
    _f("llm_time_per_output_token_seconds", "histogram", M,
       "Time per output token after the first: (duration - TTFT) / (output tokens - 1).", TPOT_BUCKETS),
    _f("llm_requests_running", "gauge", M, "Requests running, as last logged by the backend."),
    _f("llm_requests_waiting", "gauge", M, "Requests waiting in the queue, as last logged by the backend."),
    _f("llm_kv_cache_usage_ratio", "gauge", M, "KV-cache usage, 0-1, as last logged."),
    _f("llm_prefix_cache_hit_ratio", "gauge", M, "Prefix-cache hit rate, 0-1, as last logged."),
    _f("llm_prompt_throughput_tokens_per_second", "gauge", M, "Prompt throughput as last reported by the backend."),
    _f("llm_generation_throughput_tokens_per_second", "gauge", M,
       "Generation throughput as last reported by the backend."),
    _f("llm_preemptions_total", "counter", M, "Requests preempted by the scheduler."),
    _f("llm_audio_seconds_total", "counter", M, "Seconds of input audio transcribed."),
    _f("llm_embeddings_total", "counter", M, "Embeddings created."),
    _f("http_requests_total", "counter", ("method", "route", "code"),
       "HTTP requests answered, by method, route template and status code."),
    _f("http_request_duration_seconds", "histogram", ("method", "route"),
       "HTTP request duration, where the access log carries one.", HTTP_BUCKETS),
    _f("backend_errors_total", "counter", (*M, "error_type"),
       "Error records logged by the backend (a multi-line traceback counts once), by model where the parser "
       "knows it (else unknown) and error type."),
    _f("llm_client_errors_total", "counter", (*M, "error_type"),
       "Requests the backend rejected for the client's fault (HTTP 4xx: a malformed body, an unknown model, "
       "a missing field, a prompt over the context), by type. Kept apart from backend_errors_total and "
       "llm_requests_total{outcome=\"error\"}, which error-rate alerts read, so that a bad client never "
       "pages for the backend."),
    _f("backend_restarts_total", "counter", (), "Backend start-ups seen in the log."),
    _f("backend_ready", "gauge", M,
       "1 from the backend's server-ready line until it logs a shutdown, a death or a new start-up, then 0 "
       "(and its other gauges are reset to 0). sum by (model) = ready replicas."),
    _f("backend_process_cpu_seconds_total", "counter", (), "CPU seconds used by the backend's processes."),
    _f("backend_process_resident_memory_bytes", "gauge", (), "Resident memory of the backend's processes."),
)

BY_NAME: dict[str, Family] = {f.name: f for f in FAMILIES}

# The engine's own health metrics. Their labels are listed explicitly (no backend/source pair).
SELF_FAMILIES: tuple[Family, ...] = (
    _f("logmetrics_lines_read_total", "counter", ("source",), "Lines read from each source."),
    _f("logmetrics_bytes_read_total", "counter", ("source",), "Bytes read from each source."),
    _f("logmetrics_lines_matched_total", "counter", ("parser",),
       "Records that produced at least one event, per parser (a multi-line record counts once)."),
    _f("logmetrics_lines_unmatched_total", "counter", ("parser",),
       "Lines no rule recognised, per parser: the physical lines of the records that produced no "
       "event (every line of a matched multi-line record is recognised)."),
    _f("logmetrics_lines_truncated_total", "counter", ("source",), "Lines cut at the line-length cap."),
    _f("logmetrics_parse_errors_total", "counter", ("parser",),
       "Records on which a parser raised an exception (for a parse_batch that raised: every record of "
       "that batch; for a parse_run: every line of the run; neither is parsed again)."),
    _f("logmetrics_values_rejected_total", "counter", ("parser", "metric"),
       "Events refused, per parser and metric: values NaN or infinite for any type, negative for a "
       "counter or histogram; malformed events (label values that are not strings, not an Event at "
       "all) under their metric or __malformed__. Warned once per parser and metric."),
    _f("logmetrics_requests_timed_out_total", "counter", ("parser",),
       "Requests a parser counted as running from their start line whose finish line never came within "
       "its time-out: dropped from llm_requests_running so that the gauge never leaks."),
    _f("logmetrics_bytes_lost_total", "counter", ("source",),
       "Bytes known to have been written to a file and never read, because the file was deleted (while "
       "closed for want of descriptors) or truncated with no copy of it found: a lower bound of the loss. "
       "Warned once per source."),
    _f("logmetrics_files_lost_total", "counter", ("source",),
       "Files of a source gone at a restart that the state showed as its current file: deleted or moved "
       "out of the followed paths while logmetrics was down (or after its last commit). What was written "
       "to them after that commit is lost, in an amount that cannot be known. Warned on stderr."),
    _f("logmetrics_read_errors_total", "counter", ("source",),
       "Files that could not be read (reported once each)."),
    _f("logmetrics_rotations_total", "counter", ("source",),
       "File rotations followed (rename or delete and recreate)."),
    _f("logmetrics_truncations_total", "counter", ("source",), "File truncations followed (copytruncate)."),
    _f("logmetrics_state_commits_total", "counter", (),
       "Transactions committed to the --state-file: one per poll that changed anything."),
    _f("logmetrics_state_save_failures_total", "counter", (),
       "Saves of the --state-file that failed (a full disk, say); each is retried at the next poll, and the "
       "exit code is 3 if the last one failed."),
    _f("logmetrics_config_reloads_total", "counter", ("result",),
       "Reloads of the --config file on SIGHUP, by result (success, failure: the file was refused and the "
       "running configuration kept). Only with --config."),
    _f("logmetrics_config_last_reload_success_timestamp_seconds", "gauge", (),
       "Unix time the --config file was last read with success (at start, or at a SIGHUP). Only with --config."),
    _f("logmetrics_web_config_reloads_total", "counter", ("result",),
       "Reloads of the --web-config file (and the certificates it names) after a change on disk, by result "
       "(success, failure: the new file was refused and the running one kept). Only with --web-config."),
    _f("logmetrics_label_overflow_total", "counter", ("metric", "label"),
       "Label values folded into __other__ by the cardinality guard."),
    _f("logmetrics_open_files", "gauge", (), "Files currently followed (open, or closed while idle)."),
    _f("logmetrics_files_waiting", "gauge", (),
       "Files waiting for a file descriptor (out of open files): read once one is free."),
    _f("logmetrics_streams_unrecognised", "gauge", (),
       "Streams whose first lines no parser recognises yet: held (up to 200 lines) for a line that "
       "tells whose they are, then counted in logmetrics_lines_unmatched_total{parser=\"none\"}. "
       "Above 0 for long: name the parser with --parser, or see 'logmetrics check FILE'."),
    _f("logmetrics_lag_bytes", "gauge", ("source",), "Bytes written to a file and not yet read."),
    _f("logmetrics_last_line_timestamp_seconds", "gauge", ("source",),
       "Unix time of the last line read from each source: its envelope timestamp where it has one, "
       "else when it was read."),
)
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
