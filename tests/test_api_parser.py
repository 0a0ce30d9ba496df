"""The api parser: LeapfrogAI's API and other FastAPI gateways under uvicorn or gunicorn."""

from __future__ import annotations

import fnmatch

from logmetrics_parsers.api import ApiParser

from logmetrics.events import Event
from logmetrics.plugins import record_rule, validate
from logmetrics.records import Record, split_records
from logmetrics.testing import check_events

LFAI = "leapfrogai_api.{}: 2025-03-02 09:00:01,120 | {} | x.py:1 >>> {}"


def run(text: str) -> list[Event]:
    """Every event of ``text`` cut into records as the engine cuts them, checked against the catalog."""
    parser = ApiParser()
    events: list[Event] = []
    for rec in split_records(text, record_rule(ApiParser)):
        events += check_events(ApiParser, parser.parse(Record(rec, 1.0)))
    return events


def named(events: list[Event], family: str) -> list[tuple[str, ...]]:
    """The label values of the events of one family."""
    return [e.labels for e in events if e.metric == family]


def test_the_parser_is_valid() -> None:
    """The class passes the plugin contract's checks."""
    assert validate(ApiParser, "test").name == "api"


def test_access_lines_count_by_route_template() -> None:
    """Ids in /openai/v1 and /leapfrogai/v1 paths become {id}; the query string goes."""
    events = run('INFO:     10.0.0.1:5 - "GET /openai/v1/threads/thread_8c1f2a/runs?limit=20 HTTP/1.1" 200 OK\n'
                 'INFO:     10.0.0.1:5 - "DELETE /leapfrogai/v1/vector_stores/'
                 '3f6c1e2a-9b4d-4c1e-8f00-1a2b3c4d5e6f HTTP/1.1" 404 Not Found\n')
    assert named(events, "http_requests_total") == [
        ("GET", "/openai/v1/threads/{id}/runs", "200"), ("DELETE", "/leapfrogai/v1/vector_stores/{id}", "404")]


def test_old_tuple_gunicorn_and_apache_access_forms() -> None:
    """uvicorn <= 0.11's ('ip', port) client, gunicorn's bare worker line and Apache combined are counted."""
    events = run("INFO: ('192.0.2.1', 49914) - \"GET / HTTP/1.1\" 500\n"
                 '10.0.0.5:40100 - "POST /v1/chat/completions HTTP/1.1" 200\n'
                 '10.0.0.7 - - [02/Mar/2025:10:00:05 +0000] "GET /v1/models HTTP/1.1" 200 512 "-" "curl/8"\n')
    assert named(events, "http_requests_total") == [
        ("GET", "/", "500"), ("POST", "/v1/chat/completions", "200"), ("GET", "/v1/models", "200")]


def test_asgi_exception_counts_once_with_its_class() -> None:
    """An 'Exception in ASGI application' traceback is one error, typed by its exception class."""
    events = run("ERROR:    Exception in ASGI application\nTraceback (most recent call last):\n"
                 '  File "app.py", line 3, in f\n    x()\nTypeError: f() takes 0 positional arguments\n')
    assert named(events, "backend_errors_total") == [("unknown", "TypeError")]


def test_supabase_and_upstream_failures_have_their_own_types() -> None:
    """httpx connection failures (Supabase) and gRPC backend failures get their own error types."""
    events = run(LFAI.format("data.supabase_session", "ERROR", "\tAll connection attempts failed") + "\n"
                 "Traceback (most recent call last):\n  File \"x.py\", line 1, in f\n"
                 "httpx.ConnectError: All connection attempts failed\n"
                 "ERROR:    Exception in ASGI application\nTraceback (most recent call last):\n"
                 '  File "grpc_client.py", line 50, in chat\n'
                 "grpc.aio._call.AioRpcError: <AioRpcError of RPC that terminated with:\n"
                 "\tstatus = StatusCode.UNAVAILABLE\n")
    assert named(events, "backend_errors_total") == [("unknown", "supabase_connect"), ("unknown", "upstream")]


def test_gunicorn_error_log() -> None:
    """gunicorn's start-up, readiness, worker time-outs and killed workers."""
    events = run("[2025-03-02 10:00:00 +0000] [1] [INFO] Starting gunicorn 22.0.0\n"
                 "[2025-03-02 10:00:00 +0000] [1] [INFO] Listening at: http://0.0.0.0:8000 (1)\n"
                 "[2025-03-02 10:00:30 +0000] [1] [CRITICAL] WORKER TIMEOUT (pid:8)\n"
                 "[2025-03-02 10:00:31 +0000] [1] [WARNING] Worker with pid 8 was terminated due to signal 6\n"
                 "[2025-03-02 10:00:31 +0000] [9] [INFO] Booting worker with pid: 9\n")
    assert len(named(events, "backend_restarts_total")) == 1
    assert [e.value for e in events if e.metric == "backend_ready"] == [1]
    assert named(events, "backend_errors_total") == [("unknown", "worker_timeout"), ("unknown", "worker_killed")]


def test_frames_without_an_exception_line_are_no_error() -> None:
    """A cut-off run of frames (no exception line, no header) counts nothing; an info line neither."""
    events = run('  File "x.py", line 1, in f\n    g()\n' + LFAI.format("main", "INFO", "Loaded artifact at x") + "\n")
    assert events == []


def test_no_label_holds_user_text() -> None:
    """Prompts, e-mails, SQL and request bodies in paths or errors never reach a label value."""
    secret = ("alice@example.com", "SELECT", "password", "tell me a secret", "secret")
    events = run('INFO:     10.0.0.1:5 - "GET /openai/v1/files/alice%40example.com?q=tell%20me%20a%20secret '
                 'HTTP/1.1" 200 OK\n'
                 + LFAI.format("routers.openai.requests", "ERROR",
                               "The client sent invalid data!: {'prompt': 'tell me a secret', "
                               "'user': 'alice@example.com', 'sql': 'SELECT password FROM users'}") + "\n"
                 "ERROR:    Exception in ASGI application\nTraceback (most recent call last):\n"
                 '  File "x.py", line 1, in f\nValueError: bad prompt tell me a secret from alice@example.com\n')
    labels = [v for e in events for v in e.labels]
    assert len(named(events, "backend_errors_total")) == 2
    assert not [v for v in labels for s in secret if s in v]


def test_exception_classes_are_bounded() -> None:
    """Past the cap, new exception classes count as 'exception'."""
    parser = ApiParser()
    kinds = []
    for i in range(40):
        text = f"ERROR:    Exception in ASGI application\nTraceback (most recent call last):\nE{i}Error: x"
        kinds += [e.labels[1] for e in parser.parse(Record(text, 1.0)) if e.metric == "backend_errors_total"]
    assert len(set(kinds)) == 33 and kinds[-1] == "exception"


def test_sniff_and_claims_leave_other_backends_alone() -> None:
    """LeapfrogAI API lines sniff high, other backends' lines low; no claim on their file names."""
    assert ApiParser.sniff(['INFO:     1.2.3.4:5 - "POST /openai/v1/chat/completions HTTP/1.1" 200 OK']) >= 0.9
    assert ApiParser.sniff(["INFO 06-19 15:38:02 [api_server.py:1043] vLLM API server version 0.9.1"]) == 0.0
    assert ApiParser.sniff(["__main__: 2024-11-13 10:45:39,150 | INFO | main.py:29 >>> Task transcribe"]) == 0.0
    for name in ("vllm-api-server.log", "whisper-api.log", "text-embeddings.log", "llama-cpp-api.log"):
        assert not any(fnmatch.fnmatch(name, g) for g in ApiParser.claims), name
    assert any(fnmatch.fnmatch("leapfrogai-api-7f9c", g) for g in ApiParser.claims)


def test_process_names_and_readiness_state() -> None:
    """Process names are set; readiness survives a restart through state()."""
    assert ApiParser.process_names
    parser = ApiParser()
    list(parser.parse(Record("INFO:     Application startup complete.", 1.0)))
    assert parser.readiness() == "unknown"
    again = ApiParser()
    again.restore(parser.state())
    assert again.readiness() == "unknown"  # the engine says so with the next batch
