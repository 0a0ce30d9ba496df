"""Tests for the whisper parser (faster-whisper, whisper.cpp, openai-whisper, LeapfrogAI's backend)."""

from __future__ import annotations

import json
import subprocess
import sys
import time
from collections import defaultdict
from pathlib import Path

import pytest
from logmetrics_parsers.whisper import WhisperParser, model_name
from logmetrics_parsers.whisper_patterns import clock_seconds

from logmetrics.engine.engine import Engine
from logmetrics.events import Event, values_of
from logmetrics.plugins import discover, record_rule, validate
from logmetrics.records import Record, split_records
from logmetrics.sources.chunks import Chunk
from logmetrics.store.catalog import BY_NAME
from logmetrics.store.exposition import make_registry, text
from logmetrics.store.store import Store
from logmetrics.testing import check_events
from tests.helpers import Samples, engine_batch, parse, total

ROOT = Path(__file__).resolve().parent.parent
SAMPLES = ROOT / "samples" / "whisper"
LFAI = "{logger}: 2024-11-13 10:{mm}:{ss},{ms} | {level} | main.py:29 >>> {msg}"


def run(text: str, parser: WhisperParser | None = None, now: float = 1000.0) -> list[Event]:
    """All events of ``text`` split into records the way the engine splits them."""
    parser = parser or WhisperParser()
    out: list[Event] = []
    for rec in split_records(text, record_rule(WhisperParser)):
        out.extend(parser.parse(Record(rec, now)))
    return out


def sums(events: list[Event]) -> dict[tuple[str, tuple[str, ...]], float]:
    """Counter totals by (metric, labels); gauges keep their last value."""
    out: dict[tuple[str, tuple[str, ...]], float] = defaultdict(float)
    for e in events:
        fam = BY_NAME.get(e.metric)
        if fam is not None and fam.kind == "gauge":
            out[(e.metric, e.labels)] = sum(values_of(e))
        elif fam is not None and fam.kind == "counter":
            out[(e.metric, e.labels)] += sum(values_of(e))
    return out


def lf(mm: int, ss: int, msg: str, level: str = "INFO", logger: str = "__main__", ms: int = 0) -> str:
    """A LeapfrogAI-format line at 10:mm:ss,ms."""
    return LFAI.format(logger=logger, mm=f"{mm:02d}", ss=f"{ss:02d}", ms=f"{ms:03d}", level=level, msg=msg)


def test_parser_passes_plugin_validation_and_the_engine_takes_every_event() -> None:
    """The class is a valid plugin and every sample's events are ones the engine takes (and it has some)."""
    validate(WhisperParser, "test")
    for log in sorted(SAMPLES.glob("*.log")):
        parser = WhisperParser()
        events = check_events(WhisperParser, run(log.read_text(), parser))
        events += check_events(WhisperParser, (Event(z[0], z[1], 0) for z in parser.zero_series(parser.model)))
        assert any(e.value for e in events), log.name


def test_zero_series_are_what_any_whisper_server_can_move() -> None:
    """Restarts, every error type and audio seconds of the model start at 0; no request outcome."""
    zeros = set(WhisperParser().zero_series("base.en"))
    assert ("backend_restarts_total", ()) in zeros
    assert ("backend_errors_total", ("base.en", "transcribe_failed")) in zeros
    assert ("llm_audio_seconds_total", ("base.en",)) in zeros
    assert not any(z[0] == "llm_requests_total" for z in zeros)


def test_info_lines_alone_show_a_working_server() -> None:
    """A faster-whisper excerpt with only its language lines matches (so its zero series start)."""
    events, matched = engine_batch(WhisperParser(), "INFO:faster_whisper:Detected language 'en' with probability 0.97\n"
                                   "INFO:faster_whisper:Processing segment at 00:00.000\n")
    assert matched == 2
    assert {e.metric for e in events if e.labels == ("unknown",)} == {"llm_audio_seconds_total"}
    assert {e.value for e in events} == {0}


@pytest.mark.parametrize("text,seconds", [
    ("00:10.680", 10.68), ("16:09.828", 969.828), ("01:33:59.990", 5639.99), ("00:01,500", 1.5),
])
def test_clock_durations(text: str, seconds: float) -> None:
    """faster-whisper's [H:]MM:SS.mmm durations, hours only when not 0, decimal comma accepted."""
    assert clock_seconds(text) == pytest.approx(seconds)


@pytest.mark.parametrize("line", [
    "INFO:faster_whisper:Processing audio with duration 01:35.000",
    "[2023-06-01 17:49:41,269] INFO in transcribe: Processing audio with duration 01:35.000",
    "faster_whisper: 2024-11-13 10:45:39,154 | INFO | transcribe.py:281 >>> Processing audio with duration 01:35.000",
    "2024-06-01 10:00:00,001 - faster_whisper - INFO - Processing audio with duration 01:35.000",
    "Processing audio with duration 01:35.000",
])
def test_duration_line_in_every_wrapping(line: str) -> None:
    """The duration counts 95 s whatever format the host app wraps the message in."""
    got = sums(run(line))
    assert got[("llm_audio_seconds_total", ("unknown",))] == 95.0


def test_sniff_recognises_whisper_and_not_other_backends() -> None:
    """High for each whisper variant; nothing for vLLM, uvicorn alone or another LeapfrogAI backend."""
    for log in SAMPLES.glob("*.log"):
        assert WhisperParser.sniff(log.read_text().splitlines()[:50]) >= 0.6, log.name
    others = [
        ["INFO 05-02 10:00:00 api_server.py:212] vLLM API server version 0.5.0",
         'INFO:     127.0.0.1:5000 - "POST /v1/chat/completions HTTP/1.1" 200 OK'],
        ['INFO:     127.0.0.1:5000 - "POST /v1/audio/transcriptions HTTP/1.1" 200 OK'],
        ["Initializing LeapfrogAI", lf(0, 1, "processing CreateEmbedding request: char-length: 12 word-count: 2"),
         "Starting server. Listening on 0.0.0.0:50051."],
        ["llama_print_timings:        load time =     512.33 ms",
         "llama_print_timings:       total time =    1024.00 ms"],
    ]
    for lines in others:
        assert WhisperParser.sniff(lines) == 0.0, lines


def test_timings_block_is_one_record_and_one_cli_run() -> None:
    """The block's lines join into one record; a CLI run counts one ok request with its total time."""
    block = ("whisper_print_timings:     load time =    89.95 ms\n"
             "whisper_print_timings:     fallbacks =   0 p /   0 h\n"
             "whisper_print_timings:   encode time =  1343.19 ms /     1 runs ( 1343.19 ms per run)\n"
             "whisper_print_timings:    total time =  2500.00 ms\n")
    assert len(split_records("main: done\n" + block + block, record_rule(WhisperParser))) == 3
    events = run(block + block)
    assert sums(events)[("llm_requests_total", ("unknown", "ok"))] == 2
    assert [e.value for e in events if e.metric == "llm_request_duration_seconds"] == [2.5, 2.5]


def test_server_timings_at_shutdown_is_not_a_request() -> None:
    """After 'whisper server listening', the timings block is the shutdown summary: ready 0, no request."""
    text = ("whisper_init_from_file_with_params_no_state: loading model from 'm/ggml-tiny.bin'\n"
            "whisper server listening at http://127.0.0.1:8080\n"
            "whisper_print_timings:     load time =    89.95 ms\n"
            "whisper_print_timings:    total time = 99999.00 ms\n")
    events = run(text)
    assert not [e for e in events if e.metric == "llm_request_duration_seconds"]
    assert [e.value for e in events if e.metric == "backend_ready"] == [1.0, 0.0]
    assert all(e.labels[0] == "tiny" for e in events if e.labels)


def test_model_name_from_model_files() -> None:
    """A ggml model file gives its bare name; other names stay as they are."""
    assert model_name("models/ggml-base.en.bin") == "base.en"
    assert model_name("C:\\models\\ggml-large-v3.bin") == "large-v3"
    assert model_name("/m/whisper-small-q5_1.gguf") == "whisper-small-q5_1.gguf"


def test_leapfrog_pairs_give_running_latency_and_outcome() -> None:
    """Start and complete lines pair in order; an 'Error transcribing audio' makes the next one an error."""
    p = WhisperParser()
    events = run("\n".join([
        lf(0, 0, "Task transcribe is starting"),
        lf(0, 1, "Task translate is starting"),
    ]), p)
    assert sums(events)[("llm_requests_running", ("unknown",))] == 2
    events = run("\n".join([
        lf(0, 4, "Error transcribing audio: boom", level="ERROR"),
        lf(0, 4, "Transcription complete!", ms=500),
        lf(0, 9, "Translation complete!"),
    ]), p)
    got = sums(events)
    assert got[("llm_requests_total", ("unknown", "error"))] == 1
    assert got[("llm_requests_total", ("unknown", "ok"))] == 1
    assert got[("llm_requests_running", ("unknown",))] == 0
    assert [e.value for e in events if e.metric == "llm_request_duration_seconds"] == [4.5, 8.0]


def test_leapfrog_request_times_out_through_tick() -> None:
    """A start whose completion never comes is dropped by tick after the time-out, and counted."""
    p = WhisperParser()
    run(lf(0, 0, "Task transcribe is starting"), p, now=1000.0)
    assert list(p.tick(1100.0)) == []
    events = list(p.tick(1000.0 + 601))
    assert Event("llm_requests_running", ("unknown",), 0, rule="pairs") in events
    assert any(e.metric == "logmetrics_requests_timed_out_total" and e.value == 1 for e in events)


def test_prompt_and_transcript_text_never_reach_a_label() -> None:
    """Prompts, transcripts and file names the backends log appear in no label of any sample's output."""
    secret = "Jane Roe"
    for log in SAMPLES.glob("*.log"):
        out = subprocess.run([sys.executable, "-m", "logmetrics", "watch", "--oneshot", "--parser", "whisper",
                              "--source", "s", str(log)], capture_output=True, text=True, check=True, cwd=ROOT).stdout
        labels = {v for _name, ls in parse(out) for _k, v in ls}
        for word in (secret, "call-0412", "standup", "Guten", "Hallo", "/tmp/tmpa1b2c3d4", "summarize", "xx"):
            assert not any(word in v for v in labels), (log.name, word)
    assert secret in (SAMPLES / "leapfrog.log").read_text()


def test_prompt_line_quoting_a_duration_or_error_counts_nothing() -> None:
    """A LeapfrogAI Prompt line is user text: no audio, no error, whatever it says."""
    line = lf(0, 0, "Prompt ERROR: Processing audio with duration 10:00.000 is set")
    assert not [e for e in run(line) if e.value]


def test_segment_lines_are_transcript_not_errors() -> None:
    """Segment lines with error words count no error; their ends count audio only without explicit durations."""
    text = "[00:00.000 --> 00:04.000]  ERROR: ValueError: Traceback\n[00:04.000 --> 00:06.000]  ok\n"
    got = sums(run(text))
    assert got[("llm_audio_seconds_total", ("unknown",))] == 6.0
    assert not any(v for (m, _), v in got.items() if m == "backend_errors_total")
    explicit = "INFO:faster_whisper:Processing audio with duration 00:06.000\n" + text
    assert sums(run(explicit))[("llm_audio_seconds_total", ("unknown",))] == 6.0


def test_a_traceback_seen_only_at_its_end_counts_once_with_its_type() -> None:
    """The final exception line alone, or frames and the final line, make one error with its type."""
    assert sums(run("torch.OutOfMemoryError: CUDA out of memory"))[("backend_errors_total", ("unknown", "oom"))] == 1
    tail = '  File "/a.py", line 3, in f\n    g()\nRuntimeError: bad thing\n'
    got = sums(run("INFO:app:working\n" + tail))
    assert got[("backend_errors_total", ("unknown", "exception"))] == 1
    assert sum(v for (m, _), v in got.items() if m == "backend_errors_total") == 1


def test_nan_values_make_no_events() -> None:
    """A nan probability or timing value gives no NaN event."""
    text = ("INFO:faster_whisper:Detected language 'en' with probability nan\n"
            "whisper_print_timings:     load time =      nan ms\n"
            "whisper_print_timings:    total time =      nan ms\n")
    assert all(e.value == e.value for e in run(text))


def test_learn_and_state_keep_model_and_readiness() -> None:
    """A file read from its end learns model and readiness from its head; state carries them over."""
    p = WhisperParser()
    p.learn("whisper_init_from_file_with_params_no_state: loading model from 'models/ggml-medium.bin'\n"
            "whisper server listening at http://0.0.0.0:8080\n")
    assert p.readiness() == "medium"  # the engine says so with the next batch
    events = run("operator(): processing 'a.wav' (16000 samples, 1.0 sec), 4 threads\n", p)
    assert sums(events)[("llm_audio_seconds_total", ("medium",))] == 1.0
    q = WhisperParser()
    q.restore(json.loads(json.dumps(p.state())))
    assert q.model == "medium" and q.readiness() == "medium"


def test_sample_through_docker_json_envelope_gives_the_same_metrics(tmp_path: Path) -> None:
    """A sample wrapped as Docker json-file gives the metrics of the raw sample."""
    def oneshot(path: Path) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
        out = subprocess.run([sys.executable, "-m", "logmetrics", "watch", "--oneshot", "--parser", "whisper",
                              "--source", "s", str(path)], capture_output=True, text=True, check=True, cwd=ROOT).stdout
        return {k: v for k, v in parse(out).items() if not k[0].startswith(("logmetrics_", "backend_process_"))}

    for name in ("leapfrog.log", "whisper-cpp-server.log"):
        raw = SAMPLES / name
        wrapped = tmp_path / name
        wrapped.write_text("".join(
            json.dumps({"log": line + "\n", "stream": "stderr", "time": f"2025-01-02T03:04:{i % 60:02d}.5Z"}) + "\n"
            for i, line in enumerate(raw.read_text().splitlines())))
        want, got = oneshot(raw), oneshot(wrapped)
        assert got == want, name
        assert total(got, "llm_audio_seconds_total") > 0


CLI_RUN = ("whisper_init_from_file_with_params_no_state: loading model from 'models/ggml-base.en.bin'\n"
           "main: processing 'a.wav' (176000 samples, 11.0 sec), 4 threads, 1 processors, lang = en ...\n"
           "[00:00:00.000 --> 00:00:11.000]   Hello.\n"
           "whisper_print_timings:     load time =   112.40 ms\n"
           "whisper_print_timings:     fallbacks =   0 p /   0 h\n"
           "whisper_print_timings:      mel time =     9.85 ms\n"
           "whisper_print_timings:   encode time =   402.77 ms /     1 runs (   402.77 ms per run)\n"
           "whisper_print_timings:    total time =   745.12 ms\n")


def engine_metrics(parts: list[str]) -> Samples:
    """What the engine exposes after reading ``parts`` of one file with a pause (idle) after each."""
    store = Store()
    engine = Engine(discover(), store, parser="whisper")
    for part in parts:
        engine.feed(Chunk("cli.log", part.encode(), time.time()))  # idle() times requests out by the clock
        engine.idle(force=True)  # a read pause long enough to count the held-back record
    engine.finish()
    return parse(text(make_registry(store)).decode())


@pytest.mark.parametrize("cut", range(1, CLI_RUN.count("\n")))
def test_cli_run_split_by_a_read_pause_counts_once(cut: int) -> None:
    """A pause anywhere in a CLI run (its timings block flushed in two records) counts one ok run."""
    lines = CLI_RUN.splitlines(keepends=True)
    got = engine_metrics(["".join(lines[:cut]), "".join(lines[cut:])])
    whole = engine_metrics([CLI_RUN])
    assert total(got, "llm_requests_total", outcome="ok") == 1
    assert total(got, "llm_request_duration_seconds_count") == 1
    assert total(got, "llm_request_duration_seconds_sum") == pytest.approx(0.74512)
    assert total(got, "llm_audio_seconds_total") == 11.0
    assert total(got, "logmetrics_lines_unmatched_total") == total(whole, "logmetrics_lines_unmatched_total")


TRACEBACKS = [
    ("INFO:faster_whisper:Processing audio with duration 00:10.000\n"
     "ERROR:app:transcription failed for upload 7f3a\n"
     "Traceback (most recent call last):\n"
     '  File "/srv/app/worker.py", line 41, in run\n'
     "    for segment in segments:\n"
     "RuntimeError: CUDA failed with error out of memory\n"
     "INFO:app:done\n"),
    (lf(0, 1, "Task transcribe is starting")
     + "\n" + lf(0, 4, "Unexpected [RuntimeError] raised by servicer method [/audio.Audio/Transcribe]",
                 level="ERROR", logger="grpc._cython.cygrpc") + "\n"
     "Traceback (most recent call last):\n"
     '  File "/home/leapfrogai/main.py", line 53, in make_whisper_request\n'
     "RuntimeError: Unable to open file\n"
     + lf(0, 9, "Task transcribe is starting") + "\n"),
]


@pytest.mark.parametrize("case,cut", [(c, n) for c, tb in enumerate(TRACEBACKS) for n in range(1, tb.count("\n"))])
def test_traceback_split_by_a_read_pause_counts_one_error(case: int, cut: int) -> None:
    """A pause anywhere in an error record with its traceback: one error (and request outcome), as whole."""
    lines = TRACEBACKS[case].splitlines(keepends=True)
    got = engine_metrics(["".join(lines[:cut]), "".join(lines[cut:])])
    whole = engine_metrics([TRACEBACKS[case]])
    assert total(got, "backend_errors_total") == total(whole, "backend_errors_total") == 1
    for name in ("llm_requests_total", "logmetrics_lines_unmatched_total"):
        assert total(got, name) == total(whole, name), name


def test_exception_line_after_a_whole_error_record_is_an_error_of_its_own() -> None:
    """Only a record the shapes would have joined is a split's rest: an exception line after an
    error line that ends without a frame is a second error, paused or not."""
    text = "ERROR:app:upload failed\nValueError: bad header\n"
    assert total(engine_metrics([text]), "backend_errors_total") == 2
    assert total(engine_metrics(text.splitlines(keepends=True)), "backend_errors_total") == 2


FWS_HEAD = ("INFO:     Started server process [7]\n"
            "INFO:     Application startup complete.\n"
            "INFO:faster-whisper-server:Loading model from local path: /srv/models/ct2-whisper-base\n"
            "INFO:faster-whisper-server:Model ready: /srv/models/ct2-whisper-base\n")


def test_access_lines_count_requests_by_code_and_4xx_as_client_errors() -> None:
    """Each uvicorn access line is an HTTP request; on a speech route 2xx is ok and 5xx an error; any
    4xx is the client's error by type, never a backend error or a failed request."""
    got = sums(run(FWS_HEAD
                   + 'INFO:     10.1.1.1:5000 - "POST /v1/audio/transcriptions HTTP/1.1" 200 OK\n'
                   + 'INFO:     10.1.1.1:5001 - "POST /v1/audio/translations HTTP/1.1" 200 OK\n'
                   + 'INFO:     10.1.1.1:5002 - "POST /v1/audio/transcriptions HTTP/1.1" 500 Internal Server Error\n'
                   + 'INFO:     10.1.1.1:5003 - "POST /v1/audio/transcriptions HTTP/1.1" 422 Unprocessable Entity\n'
                   + 'INFO:     10.1.1.1:5004 - "POST /v1/audio/transcriptions HTTP/1.1" 400 Bad Request\n'
                   + 'INFO:     10.1.1.1:5005 - "GET /admin/.env HTTP/1.1" 404 Not Found\n'
                   + 'INFO:     10.1.1.1:5006 - "GET /health HTTP/1.1" 200 OK\n'))
    m = "ct2-whisper-base"
    assert got[("llm_requests_total", (m, "ok"))] == 2
    assert got[("llm_requests_total", (m, "error"))] == 1
    assert got[("llm_client_errors_total", (m, "invalid_request"))] == 2
    assert got[("llm_client_errors_total", (m, "not_found_route"))] == 1
    assert got[("llm_client_errors_total", (m, "method_not_allowed"))] == 0
    assert got[("http_requests_total", ("POST", "/v1/audio/transcriptions", "422"))] == 1
    assert got[("http_requests_total", ("GET", "__not_found__", "404"))] == 1
    assert got[("http_requests_total", ("GET", "/health", "200"))] == 1
    assert not any(k[0] == "backend_errors_total" and v for k, v in got.items())
    assert sum(v for k, v in got.items() if k[0] == "llm_requests_total") == 3  # /health and 4xx are no requests


def test_faster_whisper_server_names_its_model_and_readiness() -> None:
    """The model loaded on first use names the label (a local path: its last part); loading it the
    server is not ready for it, 'Model ready' makes it ready, uvicorn's shutdown not; the start counts."""
    events = run(FWS_HEAD + "INFO:faster_whisper:Processing audio with duration 00:03.500\n")
    got = sums(events)
    assert got[("llm_audio_seconds_total", ("ct2-whisper-base",))] == 3.5
    assert got[("backend_ready", ("ct2-whisper-base",))] == 1
    assert got[("backend_ready", ("unknown",))] == 0
    assert got[("backend_restarts_total", ())] == 1
    p = WhisperParser()
    run(FWS_HEAD, p)
    assert sums(run("INFO:     Shutting down\n", p))[("backend_ready", ("ct2-whisper-base",))] == 0
    q = WhisperParser()
    q.learn(FWS_HEAD)
    assert q.model == "ct2-whisper-base" and q.readiness() == "ct2-whisper-base"


def test_a_500_traceback_under_uvicorn_is_one_error_not_a_second_request() -> None:
    """With access lines, the access line counts the request; the traceback of its 500 only the error."""
    got = sums(run(FWS_HEAD
                   + 'INFO:     10.1.1.1:5002 - "POST /v1/audio/transcriptions HTTP/1.1" 500 Internal Server Error\n'
                   + "ERROR:    Exception in ASGI application\nTraceback (most recent call last):\n"
                   + '  File "/app/x.py", line 1, in f\n    g()\nRuntimeError: failed to process audio\n'))
    m = "ct2-whisper-base"
    assert got[("llm_requests_total", (m, "error"))] == 1
    assert sum(v for k, v in got.items() if k[0] == "backend_errors_total") == 1
