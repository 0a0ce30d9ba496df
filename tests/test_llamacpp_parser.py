"""The llama.cpp parser: timing blocks tied to their task, slots, errors, routing, envelopes."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from logmetrics_parsers.llamacpp import LlamaCppParser, number
from logmetrics_parsers.vllm import VllmParser

from logmetrics.events import UNKNOWN_MODEL, Event, values_of
from logmetrics.plugins import discover, record_rule
from logmetrics.plugins.routing import choose
from logmetrics.records import Record, split_records
from tests.helpers import parse, total

ROOT = Path(__file__).resolve().parent.parent
SAMPLES = ROOT / "samples" / "llamacpp"


def run(text: str, parser: LlamaCppParser | None = None) -> list[Event]:
    """Events of ``text`` split into records with the parser's own record shape."""
    p = parser or LlamaCppParser()
    out: list[Event] = []
    for rec in split_records(text, record_rule(LlamaCppParser)):
        out.extend(p.parse(Record(rec, 100.0)))
    return out


def summed(events: list[Event], metric: str) -> float:
    """Sum of the values of one metric's events."""
    return sum(sum(values_of(e)) for e in events if e.metric == metric)


def observations(events: list[Event], metric: str) -> list[float]:
    """The values of one histogram's events, in order."""
    return [v for e in events if e.metric == metric for v in values_of(e)]


PE = "prompt eval time = {:10.2f} ms / {:5d} tokens ({:8.2f} ms per token, {:8.2f} tokens per second)"
EV = "       eval time = {:10.2f} ms / {:5d} tokens ({:8.2f} ms per token, {:8.2f} tokens per second)"
TT = "      total time = {:10.2f} ms / {:5d} tokens"


def slot_line(slot: int, task: int, msg: str) -> str:
    """A 2026 llama-server slot line with its time-since-start prefix."""
    return f"0.10.000.000 I slot print_timing: id {slot:2d} | task {task} | {msg}"


INTERLEAVED = "\n".join([
    slot_line(0, 0, PE.format(420.0, 120, 3.5, 285.71)),
    slot_line(1, 1, PE.format(180.5, 40, 4.51, 221.61)),
    slot_line(0, 0, EV.format(2000.0, 80, 25.0, 40.0)),
    slot_line(1, 1, EV.format(1500.0, 50, 30.0, 33.33)),
    slot_line(1, 1, TT.format(1680.5, 90)),
    slot_line(1, 2, PE.format(90.0, 10, 9.0, 111.11)),
    slot_line(0, 0, TT.format(2420.0, 200)),
    slot_line(1, 2, EV.format(600.0, 20, 30.0, 33.33)),
    slot_line(1, 2, TT.format(690.0, 30)),
]) + "\n"


def test_three_requests_on_two_interleaved_slots() -> None:
    """Interleaved timing lines of 3 requests on 2 slots are paired by task: exact sums, 3 observations each."""
    ev = run(INTERLEAVED)
    assert summed(ev, "llm_prompt_tokens_total") == 170
    assert summed(ev, "llm_generation_tokens_total") == 150
    assert observations(ev, "llm_request_duration_seconds") == [1.6805, 2.42, 0.69]
    assert observations(ev, "llm_time_to_first_token_seconds") == [0.1805, 0.42, 0.09]
    assert observations(ev, "llm_time_per_output_token_seconds") == [0.03, 0.025, 0.03]
    assert summed(ev, "llm_requests_total") == 3


def test_era_d_block_is_one_record_and_keeps_its_slot() -> None:
    """The three timing lines under a 'slot print_timing' line join it as one record, \\r or not."""
    block = ("slot print_timing: id  0 | task 7 | \n"
             "\r" + PE.format(100.0, 10, 10.0, 100.0) + "\n"
             "\r" + EV.format(200.0, 4, 50.0, 20.0) + "\n"
             "\r" + TT.format(300.0, 14) + "\n")
    assert len(split_records(block, record_rule(LlamaCppParser))) == 1
    ev = run(block)
    assert observations(ev, "llm_request_duration_seconds") == [0.3]
    assert observations(ev, "llm_time_per_output_token_seconds") == [0.05]


def test_nan_and_decimal_commas() -> None:
    """nan/inf per-token values give no observation; a decimal comma reads as a point."""
    assert number("1,5") == 1.5
    assert number("-nan(ind)") is None
    assert number("inf") is None
    ev = run("llama_print_timings: prompt eval time =       0,00 ms /     0 tokens"
             " (     -nan ms per token,      inf tokens per second)\n"
             "llama_print_timings:        eval time =       0,00 ms /     0 runs"
             "   (     -nan ms per token,     -nan tokens per second)\n"
             "llama_print_timings:       total time =      12,50 ms /     0 tokens\n")
    assert observations(ev, "llm_request_duration_seconds") == [0.0125]
    assert observations(ev, "llm_time_per_output_token_seconds") == []
    assert all(e.value == e.value for e in ev)  # no NaN anywhere


def test_running_from_slot_launch_and_release() -> None:
    """Launch lines raise the running gauge per slot, release lines lower it, idle clears it."""
    p = LlamaCppParser()
    ev = run("slot launch_slot_: id  0 | task 1 | processing task\n"
             "slot launch_slot_: id  1 | task 2 | processing task\n", p)
    assert [e.value for e in ev if e.metric == "llm_requests_running"] == [1, 2]
    ev = run("slot      release: id  0 | task 1 | stop processing: n_past = 9, truncated = 0\n", p)
    assert [e.value for e in ev if e.metric == "llm_requests_running"] == [1]
    ev = run("srv  update_slots: all slots are idle\n", p)
    assert [e.value for e in ev if e.metric == "llm_requests_running"] == [0]


def test_model_from_path_wins_over_general_name_and_learn() -> None:
    """The model label is the model file's name; general.name only when no path was logged."""
    p = LlamaCppParser()
    p.learn("llama_model_loader: loaded meta data with 19 key-value pairs and 291 tensors from "
            "/m/llama-2-7b.Q5_K_M.gguf (version GGUF V2)\n"
            "llama_model_loader: - kv   1:                               general.name str              = LLaMA v2\n")
    assert p.model == "llama-2-7b.Q5_K_M"
    q = LlamaCppParser()
    q.learn("print_info: general.name     = Qwen2.5 Coder 14B Instruct\n")
    assert q.model == "Qwen2.5 Coder 14B Instruct"
    r = LlamaCppParser()
    r.restore(p.state())
    assert r.model == "llama-2-7b.Q5_K_M"
    assert LlamaCppParser().model == UNKNOWN_MODEL


def test_one_failure_counts_once() -> None:
    """A failed model load's several lines count once; a decode failure is not counted again by send_error."""
    ev = run("gguf_init_from_file: invalid magic characters 'xyz'\n"
             "llama_model_load: error loading model: llama_model_loader: failed to load model from /m/x.gguf\n"
             "main: exiting due to model loading error\n")
    assert [e.labels[1] for e in ev if e.metric == "backend_errors_total" and e.value] == ["model_load"]
    ev = run("llama_decode: failed to decode, ret = -1\n"
             "srv  update_slots: failed to decode the batch: KV cache is full - try increasing it via the "
             "context size, i = 0, n_batch = 2048, ret = -1\n"
             "srv    send_error: task id = 3, error: Input prompt is too big compared to KV size.\n")
    assert [e.labels[1] for e in ev if e.metric == "backend_errors_total" and e.value] == ["kv_cache_full"]
    assert [e.labels[1] for e in ev if e.metric == "llm_requests_total" and e.value] == ["error"]


def test_context_overflow_and_python_traceback() -> None:
    """send_error on a too-long prompt is a client error (a 400); a llama-cpp-python traceback (a 500) counts once."""
    for line in ("srv    send_error: task id = 5, error: the request exceeds the available context size. "
                 "try increasing the context size or enable context shift\n",
                 "0.05.601.502 E srv    send_error: task id = 6, error: request (2400 tokens) exceeds the available "
                 "context size (2048 tokens), try increasing it\n",
                 'ERR [              send_error] task error | tid="1" timestamp=1 id_multi=-1 id_task=0 '
                 'error="the request exceeds the available context size"\n'):
        ev = run(line)
        assert summed(ev, "backend_errors_total") == 0
        assert [e.labels for e in ev if e.metric == "llm_requests_total" and e.value] == []
        assert [e.labels[1] for e in ev if e.metric == "llm_client_errors_total" and e.value] == ["context_length"]
    ev = run("Exception: Requested tokens (4100) exceed context window of 2048\n"
             "Traceback (most recent call last):\n"
             '  File "/x/llama_cpp/server/errors.py", line 171, in custom_route_handler\n'
             "ValueError: Requested tokens (4100) exceed context window of 2048\n")
    assert summed(ev, "backend_errors_total") == 1


def test_http_lines_of_every_era() -> None:
    """Request lines of eras B-E, llama-box and uvicorn each count one HTTP request."""
    ev = run('{"timestamp":1,"level":"INFO","function":"log_server_request","line":1,"message":"request",'
             '"remote_addr":"127.0.0.1","remote_port":1,"status":200,"method":"GET","path":"/health","params":{}}\n'
             'INFO [      log_server_request] request | tid="1" timestamp=1 remote_addr="127.0.0.1" '
             'remote_port=2 status=200 method="GET" path="/health" params={}\n'
             "request: POST /completion 127.0.0.1 200\n"
             "srv  log_server_r: done request: POST /v1/chat/completions 10.0.0.1 200\n"
             'INFO:     127.0.0.1:5000 - "POST /v1/embeddings HTTP/1.1" 200 OK\n')
    assert summed(ev, "http_requests_total") == 5


def test_sniff_claims_llama_lines_and_not_vllm() -> None:
    """Sniffing: llama.cpp and llama-cpp-python lines score high; vLLM and bare uvicorn lines do not."""
    assert LlamaCppParser.sniff(["llama_print_timings:        load time =   100.00 ms"]) >= 0.9
    assert LlamaCppParser.sniff(["srv  update_slots: all slots are idle"]) >= 0.9
    assert LlamaCppParser.sniff(["0.08.526.747 I srv  llama_server: model loaded"]) >= 0.9
    vllm = ["INFO 04-06 00:55:21 [api_server.py:1043] vLLM API server version 0.8.3",
            'INFO:     127.0.0.1:5000 - "POST /v1/chat/completions HTTP/1.1" 200 OK']
    assert LlamaCppParser.sniff(vllm) == 0.0
    assert LlamaCppParser.sniff(vllm[1:]) == 0.0
    parsers = discover()
    text = (SAMPLES / "server-era-d.log").read_text().splitlines()
    entry = choose(parsers, None, ("x.log",), text)
    assert entry is not None and entry.name == "llamacpp"
    assert VllmParser.sniff(text) < LlamaCppParser.sniff(text)


def test_sample_through_docker_json_file(tmp_path: Path) -> None:
    """The interleaved-slots sample wrapped as Docker json-file gives the same token sums and counts."""
    lines = (SAMPLES / "server-interleaved-slots.log").read_text().splitlines()
    wrapped = "".join(json.dumps({"log": line + "\n", "stream": "stderr", "time": f"2025-01-02T03:04:{i % 60:02d}Z"},
                                 separators=(",", ":")) + "\n" for i, line in enumerate(lines))
    tmp = tmp_path / "llama-docker.log"
    tmp.write_text(wrapped)
    out = subprocess.run([sys.executable, "-m", "logmetrics", "watch", "--oneshot", "--parser", "llamacpp",
                          str(tmp)], capture_output=True, text=True, timeout=120, check=True, cwd=ROOT).stdout
    s = parse(out)
    assert total(s, "llm_prompt_tokens_total") == 170
    assert total(s, "llm_generation_tokens_total") == 150
    assert total(s, "llm_time_to_first_token_seconds_count") == 3
    assert total(s, "llm_time_per_output_token_seconds_count") == 3
    assert total(s, "llm_request_duration_seconds_count") == 3


READY_HEAD = ("llama_model_loader: loaded meta data with 30 key-value pairs and 291 tensors from "
              "/models/qwen2.5-7b-instruct-q4_k_m.gguf (version GGUF V3 (latest))\nmain: model loaded\n"
              "main: server is listening on http://127.0.0.1:8080 - starting the main loop\n")
HEALTH = "srv  log_server_r: request: GET /health 127.0.0.1 200"


def test_readiness_survives_reading_from_the_end_and_a_restart() -> None:
    """A server ready before reading began (learn) or before logmetrics restarted (state) is ready again."""
    learned = LlamaCppParser()
    learned.learn(READY_HEAD)
    assert learned.readiness() == "qwen2.5-7b-instruct-q4_k_m"  # the engine says so with the next batch
    restored = LlamaCppParser()
    restored.restore(learned.state())
    assert restored.readiness() == "qwen2.5-7b-instruct-q4_k_m"
    stopped = LlamaCppParser()
    stopped.learn(READY_HEAD + "srv    operator(): operator(): cleaning up before exit...\n")
    assert stopped.readiness() is None


def test_client_errors_by_type_and_server_errors_apart() -> None:
    """A 4xx error body counts in llm_client_errors_total by its type; a 5xx stays a backend error."""
    ev = run('0.05.433.001 W srv    operator(): got exception: {"error":{"code":400,"message":"[json.exception.'
             'parse_error.101] parse error at line 1","type":"invalid_request_error"}}\n'
             '0.05.433.002 W srv    operator(): got exception: {"error":{"code":400,"message":"\\"prompt\\" must be '
             'provided","type":"invalid_request_error"}}\n'
             '0.05.433.003 W srv    operator(): got exception: {"error":{"code":404,"message":"model not found",'
             '"type":"not_found_error"}}\n'
             '0.05.433.004 W srv    operator(): got exception: {"error":{"code":401,"message":"cut sh\n')
    client = [e.labels[1] for e in ev if e.metric == "llm_client_errors_total" and e.value]
    assert client == ["bad_json", "invalid_request", "not_found"]
    assert summed(ev, "backend_errors_total") == 1  # the cut line: no code to read, an error of the backend's
    ev = run('got exception: {"code":500,"message":"boom","type":"server_error"}\n'
             '0.05.433.005 W srv    operator(): got exception: {"error":{"code":500,"message":"x",'
             '"type":"server_error"}}\n')
    assert [e.labels[1] for e in ev if e.metric == "backend_errors_total" and e.value] == ["exception", "exception"]
    assert summed(ev, "llm_client_errors_total") == 0


def test_startup_without_build_line_counts_once_and_clears_running() -> None:
    """'llama_server: initializing' is a start-up (with -lv 4's build line before it, still one);
    a restart after a crash sets the running requests back to 0."""
    start = "0.00.000.900 I srv  llama_server: initializing ...\n"
    ready = "0.00.401.020 I srv  llama_server: model loaded\n"
    ev = run("0.00.000.100 I common_params_print_info: build 11434 (0000000) with cc for x86_64-linux-gnu\n"
             + start + ready
             + "0.01.004.512 I slot launch_slot_: id  1 | task 2 | processing task, is_child = 0\n"
             + start + ready + start + start)
    assert summed(ev, "backend_restarts_total") == 4
    running = [e.value for e in ev if e.metric == "llm_requests_running"]
    assert running[0] == 1
    assert running[-1] == 0
