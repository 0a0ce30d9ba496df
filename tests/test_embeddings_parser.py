"""The text-embeddings parser: LeapfrogAI's backend and Hugging Face text-embeddings-inference."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from logmetrics_parsers.embeddings import EmbeddingsParser
from logmetrics_parsers.embeddings_tei import PHRASES, duration, tei_line

from logmetrics.events import Event, values_of
from logmetrics.plugins import record_rule, validate
from logmetrics.records import Record, split_records
from logmetrics.testing import check_events
from tests.helpers import parse, total

ROOT = Path(__file__).resolve().parent.parent
SAMPLES = sorted((ROOT / "samples" / "embeddings").glob("*.log"))
VLLM_SAMPLE = ROOT / "samples" / "vllm" / "v1-0.10.log"

TEI_OK = ('2025-03-04T08:01:10.000100Z  INFO openai_embed{total_time="25.431ms" tokenization_time="1.204ms" '
          'queue_time="310.2µs" inference_time="23.801ms"}: text_embeddings_router::http::server: '
          'router/src/http/server.rs:1290: Success')
LFAI = "__main__: 2024-11-13 10:45:{:06.3f} | INFO | main.py:25 >>> {}"
START = "processing CreateEmbedding request: char-length: 86 word-count: 12"
DONE = "finished processing CreateEmbedding request, created {} embeddings"


def lfai(sec: float, msg: str) -> str:
    """A LeapfrogAI-format line of the text-embeddings backend at 10:45:<sec>."""
    return LFAI.format(sec, msg).replace(f"{sec:06.3f}", f"{sec:06.3f}".replace(".", ","))


def run(parser: EmbeddingsParser, text: str, time: float | None = None) -> list[Event]:
    """Events of ``text`` split into records the way the engine splits them."""
    events: list[Event] = []
    for rec in split_records(text, record_rule(type(parser))):
        events.extend(parser.parse(Record(rec, time)))
    return events


def counted(events: list[Event], metric: str, *labels: str) -> float:
    """Sum of the values of ``metric`` events whose labels start with ``labels``."""
    return sum(sum(values_of(e)) for e in events if e.metric == metric and e.labels[: len(labels)] == labels)


def test_parser_passes_plugin_validation_and_the_engine_takes_every_event() -> None:
    """The class is a valid plugin and every sample's events (and zero series) are ones the engine takes."""
    validate(EmbeddingsParser, "test")
    for path in SAMPLES:
        parser = EmbeddingsParser()
        events = check_events(EmbeddingsParser, run(parser, path.read_text(encoding="utf-8")))
        zeros = [Event(z[0], z[1], 0) for z in parser.zero_series(parser.model)]
        assert any(e.value for e in events) and check_events(EmbeddingsParser, zeros), path.name


def test_zero_series_hold_embeddings_only_where_the_backend_logs_them() -> None:
    """LeapfrogAI's backend starts llm_embeddings_total at 0; a TEI stream (no such count) does not."""
    lfai_parser, tei_parser = EmbeddingsParser(), EmbeddingsParser()
    run(lfai_parser, lfai(1.0, START))
    run(tei_parser, TEI_OK)
    assert ("llm_embeddings_total", ("unknown",)) in set(lfai_parser.zero_series("unknown"))
    tei = set(tei_parser.zero_series("unknown"))
    assert ("llm_requests_total", ("unknown", "error")) in tei
    assert not any(z[0] == "llm_embeddings_total" for z in tei)


def test_rust_error_and_its_causes_are_one_record() -> None:
    """TEI's fatal 'Error:' with its 'Caused by:' block is one record: one startup error, not ready."""
    text = ("Error: Could not create backend\n\nCaused by:\n    Could not start backend: no tensor\n"
            "    0: inner cause\n")
    assert split_records(text, record_rule(EmbeddingsParser)) == [
        "Error: Could not create backend\nCaused by:\n    Could not start backend: no tensor\n    0: inner cause"]
    events = run(EmbeddingsParser(), text)
    assert [e for e in events if e.metric == "backend_errors_total"] == [
        Event("backend_errors_total", ("unknown", "startup"), 1, rule="error")]


@pytest.mark.parametrize(("text", "seconds"), [
    ("1.5s", 1.5), ("12.3ms", 0.0123), ("686.203µs", 686.203e-6), ("686.203μs", 686.203e-6), ("100ns", 1e-7),
    ("2m", 120.0), ("1,5ms", 0.0015), ("nan", None), ("infs", None), ("12", None),
])
def test_rust_durations(text: str, seconds: float | None) -> None:
    """Rust Duration Debug text in every unit becomes seconds; NaN, inf and bare numbers do not."""
    got = duration(text)
    assert got == pytest.approx(seconds) if seconds is not None else got is None


def test_tei_text_line_with_nested_spans_and_grpc_token_counts() -> None:
    """Span chains split into names; integer fields (gRPC compute_tokens) count prompt tokens."""
    line = ('2025-03-04T08:01:10.000100Z  INFO embed:embed_pooled_inner{compute_chars=40 compute_tokens=12 '
            'total_time="3ms" tokenization_time="1ms" queue_time="1µs" inference_time="2ms"}: '
            'text_embeddings_router::grpc::server: router/src/grpc/server.rs:112: Success')
    tei = tei_line(line)
    assert tei is not None and tei.spans == ("embed", "embed_pooled_inner") and tei.fields["compute_tokens"] == "12"
    events = run(EmbeddingsParser(), line)
    assert counted(events, "llm_prompt_tokens_total") == 12
    assert counted(events, "llm_requests_total", "unknown", "ok") == 1


def test_tei_success_gives_latency_and_phases() -> None:
    """A Success line: one ok request, total_time as the request duration, each phase in its histogram."""
    events = run(EmbeddingsParser(), TEI_OK)
    assert counted(events, "llm_requests_total", "unknown", "ok") == 1
    assert counted(events, "llm_request_duration_seconds") == pytest.approx(0.025431)
    assert counted(events, "embeddings_queue_duration_seconds") == pytest.approx(310.2e-6)
    assert counted(events, "embeddings_tokenization_duration_seconds") == pytest.approx(0.001204)
    assert counted(events, "embeddings_inference_duration_seconds") == pytest.approx(0.023801)


def test_tei_error_types_from_its_own_phrases() -> None:
    """Overload, validation, OOM and start-up errors get TEI's types; a handler's error fails a request."""
    assert PHRASES.classify("no permits available") == "overloaded"
    assert PHRASES.classify("Input validation error: `inputs` must have less than 512 tokens") == "validation"
    assert PHRASES.classify("Backend error: DriverError(CUDA_ERROR_OUT_OF_MEMORY, \"\")") == "oom"
    assert PHRASES.classify("Error: Could not create backend") == "startup"
    line = ("2025-03-04T08:01:13.000500Z ERROR openai_embed:try_acquire_permit: text_embeddings_core::infer: "
            "core/src/infer.rs:102: no permits available")
    events = run(EmbeddingsParser(), line)
    assert counted(events, "backend_errors_total", "unknown", "overloaded") == 1
    assert counted(events, "llm_requests_total", "unknown", "error") == 1


def test_tei_validation_errors_are_the_clients_not_the_backends() -> None:
    """An input TEI refuses (422: too long, too large a batch, a tokenizer error; 400: empty) is the
    client's fault: ``llm_client_errors_total`` only, no backend error and no failed request."""
    lines = [
        "2025-03-04T08:01:12.000300Z ERROR embed:embed_pooled:tokenize: text_embeddings_core::infer: "
        "core/src/infer.rs:355: Input validation error: `inputs` must have less than 512 tokens. Given: 534",
        "2025-03-04T08:01:12.400400Z ERROR embed: text_embeddings_router::http::server: "
        "router/src/http/server.rs:655: batch size 40 > maximum allowed batch size 32",
        "2025-03-04T08:01:12.500400Z ERROR embed: text_embeddings_core::tokenization: "
        "core/src/tokenization.rs:80: tokenizer error: unexpected input",
    ]
    events = run(EmbeddingsParser(), "\n".join(lines))
    assert counted(events, "llm_client_errors_total", "unknown", "invalid_request") == 3
    assert not [e for e in events if e.metric in ("backend_errors_total", "llm_requests_total")], events


def test_tei_start_up_names_the_model_and_lifecycle_sets_ready() -> None:
    """Args names the model (served name first), Ready sets 1, the graceful shutdown 0, a new Args counts a start."""
    args = ('2025-03-04T08:00:00.1Z  INFO text_embeddings_router: router/src/main.rs:185: Args { model_id: '
            '"BAA*/***-****-**-v1.5", revision: None, served_model_name: Some("bge") }')
    ready = "2025-03-04T08:00:06.1Z  INFO text_embeddings_router::http::server: router/src/http/server.rs:1813: Ready"
    stop = ("2025-03-04T08:02:00Z  INFO text_embeddings_router::shutdown: router/src/shutdown.rs:27: "
            "signal received, starting graceful shutdown")
    parser = EmbeddingsParser()
    events = run(parser, "\n".join([args, ready, stop, args]))
    assert parser.model == "bge"
    ready_values = [e.value for e in events if e.metric == "backend_ready"]
    assert ready_values[:2] == [1, 0]
    assert counted(events, "backend_restarts_total") == 2


def test_leapfrog_requests_pair_in_order_with_running_and_duration() -> None:
    """Start and finish lines pair in order: running goes 1 then 0, durations come from the lines' times."""
    parser = EmbeddingsParser()
    events = run(parser, lfai(39.154, START))
    assert [e.value for e in events if e.metric == "llm_requests_running"] == [1]
    events = run(parser, lfai(39.654, DONE.format(3)))
    assert counted(events, "llm_embeddings_total") == 3
    assert counted(events, "llm_requests_total", "unknown", "ok") == 1
    assert counted(events, "llm_request_duration_seconds") == pytest.approx(0.5)
    assert [e.value for e in events if e.metric == "llm_requests_running"] == [0]


def test_a_start_without_its_finish_times_out_on_tick() -> None:
    """A request whose finish never comes is dropped by tick after the time-out and counted."""
    parser = EmbeddingsParser()
    run(parser, lfai(0.0, START), time=1000.0)
    assert list(parser.tick(1000.0 + 60)) == []
    events = list(parser.tick(1000.0 + 601))
    assert [e.value for e in events if e.metric == "llm_requests_running"] == [0]
    assert counted(events, "logmetrics_requests_timed_out_total") == 1


def test_traceback_counts_once_also_when_seen_only_by_its_last_line() -> None:
    """A whole traceback is one error; its final exception line alone is one error of the same type."""
    tb = ("grpc._cython.cygrpc: 2024-11-13 10:46:02,750 | ERROR | _server.py:467 >>> Unexpected error\n"
          "Traceback (most recent call last):\n"
          '  File "/app/main.py", line 3, in encode\n'
          "    run()\n"
          "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB.")
    events = run(EmbeddingsParser(), tb)
    assert counted(events, "backend_errors_total") == 1
    assert counted(events, "backend_errors_total", "unknown", "oom") == 1
    events = run(EmbeddingsParser(), tb.rsplit("\n", 1)[1])
    assert counted(events, "backend_errors_total", "unknown", "oom") == 1


def test_prompt_text_never_reaches_a_label() -> None:
    """Request lines carry lengths only; no label value holds request text or lengths."""
    parser = EmbeddingsParser()
    events = run(parser, "\n".join([lfai(1.0, START), lfai(2.0, DONE.format(2))]))
    assert {v for e in events for v in e.labels} <= {"unknown", "ok", "error", *PHRASES.types}


@pytest.mark.parametrize(("lines", "high"), [
    ([TEI_OK], True),
    ([lfai(1.0, START)], True),
    (['{"timestamp":"x","level":"INFO","message":"Ready","target":"text_embeddings_router::http::server"}'], True),
    (["INFO 06-20 12:00:00 metrics.py:341] Avg prompt throughput: 1.0 tokens/s"], False),
    (['INFO:     127.0.0.1:5 - "POST /v1/embeddings HTTP/1.1" 200 OK'], False),
    (["__main__: 2024-11-13 10:45:39,154 | INFO | main.py:29 >>> Task transcribe is starting"], False),
])
def test_sniff_is_high_only_for_this_backend(lines: list[str], high: bool) -> None:
    """TEI targets and CreateEmbedding lines score high; vLLM, uvicorn and whisper's LeapfrogAI lines do not."""
    score = EmbeddingsParser.sniff(lines)
    assert score >= 0.9 if high else score == 0.0


def test_learn_and_state_keep_model_and_readiness() -> None:
    """learn() reads the model and readiness from the head; state() and restore() carry them over."""
    parser = EmbeddingsParser()
    head = ('2025-03-04T08:00:00Z  INFO text_embeddings_router: router/src/main.rs:185: Args { model_id: '
            '"BAAI/bge-large-en-v1.5", revision: None }\n'
            "2025-03-04T08:00:06Z  INFO text_embeddings_router::http::server: router/src/http/server.rs:1813: Ready\n")
    parser.learn(head)
    state = parser.state()
    assert (state["model"], state["ready"]) == ("BAAI/bge-large-en-v1.5", True)
    assert parser.readiness() == "BAAI/bge-large-en-v1.5"
    other = EmbeddingsParser()
    other.restore(parser.state())
    assert other.readiness() == "BAAI/bge-large-en-v1.5"  # the engine says so with the next batch


def _oneshot(path: Path, *args: str) -> str:
    cmd = [sys.executable, "-m", "logmetrics", "watch", "--oneshot", *args, str(path)]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=120, cwd=ROOT)
    assert proc.returncode == 0, proc.stderr
    return proc.stdout


@pytest.mark.parametrize("sample", SAMPLES, ids=lambda p: p.name)
def test_samples_wrapped_as_docker_json_files_give_the_same_figures(sample: Path, tmp_path: Path) -> None:
    """Each sample in Docker's json-file envelope gives the requests, errors and embeddings of its golden file."""
    lines = sample.read_text(encoding="utf-8").splitlines()
    wrapped = tmp_path / "tei-json.log"
    wrapped.write_text("".join(json.dumps({"log": line + "\n", "stream": "stderr",
                                           "time": f"2025-01-02T03:04:{i % 60:02d}.{i:09d}Z"}) + "\n"
                               for i, line in enumerate(lines)), encoding="utf-8")
    got = parse(_oneshot(wrapped, "--parser", "embeddings"))
    want = parse(sample.with_suffix(".expected.prom").read_text(encoding="utf-8"))
    for name in ("llm_requests_total", "backend_errors_total", "llm_embeddings_total",
                 "llm_request_duration_seconds_count", "backend_restarts_total"):
        assert total(got, name) == total(want, name), name


def test_auto_routing_over_a_mixed_directory(tmp_path: Path) -> None:
    """Without --parser, embeddings logs go to this parser and a vLLM log to vLLM's, whatever their names."""
    for i, sample in enumerate(SAMPLES):
        shutil.copy(sample, tmp_path / f"stream{i}.log")
    shutil.copy(VLLM_SAMPLE, tmp_path / "other.log")
    got = parse(_oneshot(tmp_path))
    sources = {dict(labels)["source"]: dict(labels)["backend"] for (_n, labels) in got if "backend" in dict(labels)}
    assert {s.rsplit("/", 1)[1]: b for s, b in sources.items()} == {
        **{f"stream{i}.log": "embeddings" for i in range(len(SAMPLES))}, "other.log": "vllm"}


INFINITY_HEAD = ("INFO:     Started server process [9]\n"
                 "INFO     2025-03-04 08:00:01,120 infinity_emb INFO:        infinity_server.py:84\n"
                 "         Creating 2 engines: ['e5-base', 'bge-rerank']\n"
                 "INFO     2025-03-04 08:00:01,180                      SentenceTransformer.py:218\n"
                 "         sentence_transformers.SentenceTransformer\n"
                 "         INFO: Load pretrained SentenceTransformer:\n"
                 "         /models/intfloat--e5-base\n")


def test_infinity_access_lines_are_requests_and_client_errors() -> None:
    """An access line on an embeddings route is a request (2xx ok, 5xx error); a 4xx is the client's
    error by type, never a failed request; other routes are HTTP only."""
    parser = EmbeddingsParser()
    got = run(parser, INFINITY_HEAD + "".join(
        f'INFO:     127.0.0.1:4{i} - "{line}\n' for i, line in enumerate((
            'POST /embeddings HTTP/1.1" 200 OK', 'POST /embeddings HTTP/1.1" 200 OK',
            'POST /embeddings HTTP/1.1" 422 Unprocessable Entity',
            'POST /embeddings HTTP/1.1" 500 Internal Server Error',
            'GET /models HTTP/1.1" 200 OK'))))
    assert counted(got, "llm_requests_total", "e5-base", "ok") == 2
    assert counted(got, "llm_requests_total", "e5-base", "error") == 1
    assert counted(got, "llm_client_errors_total", "e5-base", "invalid_request") == 1
    assert counted(got, "http_requests_total") == 5


def test_infinity_names_its_served_model_and_its_lines_count_as_matched() -> None:
    """infinity's rich-wrapped 'Creating N engines' names the served model (the first) with a gauge, so
    the line counts as used; its start-up counts once; no embeddings series starts at 0 (not logged),
    requests do (its access lines count them)."""
    parser = EmbeddingsParser()
    records = split_records(INFINITY_HEAD, record_rule(EmbeddingsParser))
    per_record = [list(parser.parse(Record(r, 1.0))) for r in records]
    assert parser.model == "e5-base"
    assert Event("backend_ready", ("e5-base",), 0, rule="model") in per_record[1]
    assert sum(counted(evs, "backend_restarts_total") for evs in per_record) == 1
    assert all(any(e.value for e in evs) or any(e.metric == "backend_ready" for e in evs) for evs in per_record[:2])
    zeros = {z[0] for z in parser.zero_series("e5-base")}
    assert "llm_embeddings_total" not in zeros and "llm_requests_total" in zeros
    got = run(parser, "INFO:     Application startup complete.\n")
    assert Event("backend_ready", ("e5-base",), 1, rule="ready") in got


def test_learn_takes_the_model_from_infinitys_engines_line() -> None:
    """Read before reading began, infinity's wrapped 'Creating 1 engines' line names the model."""
    parser = EmbeddingsParser()
    parser.learn("INFO     2025-03-04 08:00:01,120 infinity_emb INFO:        infinity_server.py:84\n"
                 "         Creating 1 engines: ['bge-small']\n")
    assert parser.model == "bge-small"
    parser.learn("         Creating 2 engines: ['e5-large', 'bge-small']\n")
    assert parser.model == "e5-large"
