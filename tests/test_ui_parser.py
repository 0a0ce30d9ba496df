"""The ui parser: leapfrogai-ui and SvelteKit on Node (start-ups, errors, 404s, warnings)."""

from __future__ import annotations

from pathlib import Path

import pytest
from logmetrics_parsers.ui import UiParser

from logmetrics.events import Event, values_of
from logmetrics.plugins import record_rule, validate
from logmetrics.records import Record, split_records
from logmetrics.testing import check_events

ROOT = Path(__file__).resolve().parent.parent
OTHER_SAMPLES = sorted(p for p in (ROOT / "samples").glob("*/*.log") if p.parent.name != "ui")


def run(text: str) -> list[Event]:
    """The checked events of ``text`` cut into records by the parser's own shapes."""
    parser = UiParser()
    events: list[Event] = []
    for rec in split_records(text + "\n", record_rule(UiParser)):
        events += check_events(UiParser, parser.parse(Record(rec)))
    return events


def count(events: list[Event], family: str, *labels: str) -> float:
    """The sum of the values of ``events`` of ``family`` with these labels."""
    return sum(sum(values_of(e)) for e in events if e.metric == family and e.labels == labels)


def test_the_parser_is_valid() -> None:
    """The class passes the plugin checks and is registered as ``ui``."""
    assert validate(UiParser, "test").name == "ui"


def test_listening_is_a_restart_and_ready() -> None:
    """Each ``Listening on`` line (new and old adapter, socket form) counts one start-up."""
    events = run("Listening on http://0.0.0.0:3000\nListening on 0.0.0.0:3000\nListening on file descriptor 3")
    assert count(events, "backend_restarts_total") == 3
    assert count(events, "backend_ready", "unknown") == 3


def test_a_stack_of_twelve_frames_is_one_error() -> None:
    """A Node error with 12 ``at`` lines counts exactly one error, with its class."""
    frames = "\n".join(f"    at load (file:///app/build/server/chunks/1.js:{i}:20)" for i in range(12))
    events = run(f"TypeError: Cannot read properties of undefined (reading 'id')\n{frames}")
    assert [(e.metric, e.labels, e.value) for e in events] == [("backend_errors_total", ("unknown", "type_error"), 1)]


def test_not_found_is_apart_from_errors_and_keeps_no_path() -> None:
    """404s (kit 2 line, kit 1 line with stack) count in ui_not_found_total, not as errors, and keep no path."""
    events = run("SvelteKitError: Not found: /admin/secret-token-123\n"
                 "Error: Not found: /favicon.ico\n    at resolve (file:///srv/index.js:1:2)")
    assert count(events, "ui_not_found_total") == 2
    assert not [e for e in events if e.metric == "backend_errors_total"]
    assert not any("/" in label for e in events for label in e.labels)


def test_v8_out_of_memory_with_its_native_frames_is_one_error() -> None:
    """V8's fatal heap error and its numbered native frames are one ``oom`` error."""
    events = run("FATAL ERROR: Reached heap limit Allocation failed - JavaScript heap out of memory\n"
                 " 1: 0xb7b3e0 node::Abort() [node]\n 2: 0xa8c8aa  [node]\n"
                 " 3: 0xd5a0c0 v8::Utils::ReportOOMFailure(v8::internal::Isolate*, char const*, bool) [node]\n")
    assert count(events, "backend_errors_total", "unknown", "oom") == 1
    assert sum(sum(values_of(e)) for e in events if e.metric == "backend_errors_total") == 1


def test_warnings_are_their_own_metric() -> None:
    """Node warnings go to ``ui_warnings_total`` by class, an unknown class to ``other``; none is an error."""
    events = run("(node:1) [DEP0040] DeprecationWarning: The `punycode` module is deprecated.\n"
                 "(node:1) Warning: Setting NODE_TLS_REJECT_UNAUTHORIZED to '0' is insecure\n"
                 "(node:12) MyOwnWarning: something")
    assert count(events, "ui_warnings_total", "DeprecationWarning") == 1
    assert count(events, "ui_warnings_total", "Warning") == 1
    assert count(events, "ui_warnings_total", "other") == 1
    assert not any(e.metric == "backend_errors_total" for e in events)


@pytest.mark.parametrize(("text", "kind"), [
    ("Caught Error: TypeError: fetch failed\n    at node:internal/deps/undici:1:1", "connection"),
    ("Error: connect ECONNREFUSED 127.0.0.1:54321\n    at TCPConnectWrap.afterConnect (node:net:1:1) {", "connection"),
    ("Error fetching assistants {\"message\":\"JWT expired\"}", "error"),
    ("Failed to logout from Keycloak 500 Internal Server Error", "error"),
    ("ReferenceError: x is not defined\n    at f (file:///a.js:1:1)", "reference_error"),
    ("AuthApiError: Invalid login credentials", "auth_api_error"),
    ("FATAL ERROR: Reached heap limit Allocation failed - JavaScript heap out of memory", "oom"),
])
def test_error_types(text: str, kind: str) -> None:
    """Console errors and stacks get their cause or their class in snake case."""
    assert count(run(text), "backend_errors_total", "unknown", kind) == 1


def test_no_user_text_in_labels() -> None:
    """Prompts, e-mails, SQL and request bodies in error messages never reach a label."""
    secret = ("user alice@example.com typed: tell me a secret; SELECT * FROM users WHERE pw='x'; "
              "{\"prompt\":\"MySecretPromptError\"}")
    events = run(f"Caught Error: {secret}\n"
                 f"Error creating thread in supabase: {secret}\n"
                 f"Validation error: {secret}\n"
                 f"Error: {secret}\n    at f (file:///a.js:1:1)\n"
                 f"SvelteKitError: Not found: /{secret.replace(' ', '')}")
    assert len(events) == 5
    labels = {label for e in events for label in e.labels}
    assert labels <= {"unknown", "error"}, labels


def test_other_lines_give_nothing() -> None:
    """Plain output, object dumps and a closing brace are no events."""
    assert run("Using adapter-node\n  code: 'MODULE_NOT_FOUND',\n}\nconnected to supabase") == []


def test_sniff_knows_sveltekit_and_leaves_other_backends() -> None:
    """SvelteKit's 404s score high; every other backend's sample scores 0."""
    assert UiParser.sniff(["SvelteKitError: Not found: /x"]) >= 0.9
    assert UiParser.sniff(["Listening on http://0.0.0.0:3000"]) > 0.3
    assert OTHER_SAMPLES
    for path in OTHER_SAMPLES:
        lines = path.read_text(encoding="utf-8").splitlines()[:50]
        assert UiParser.sniff(lines) == 0.0, path


def test_claims_and_process_names() -> None:
    """The UI's container names are claimed; its Node process is named."""
    assert "*leapfrogai-ui*" in UiParser.claims
    assert any("leapfrogai-ui" in n for n in UiParser.process_names)


def test_state_keeps_readiness() -> None:
    """``state``/``restore`` and ``learn`` keep whether the server was listening (and the model,
    which the UI's log never names)."""
    parser = UiParser()
    parser.learn("Listening on http://0.0.0.0:3000\n")
    other = UiParser()
    other.restore(parser.state())
    assert other.state() == {"ready": True, "model": "unknown"}
    assert UiParser().state() == {"ready": False, "model": "unknown"}


def test_zero_series_cover_the_types() -> None:
    """Restarts, 404s, the causes and the warning kinds start from 0."""
    zeros = set(UiParser().zero_series("unknown"))
    assert ("backend_restarts_total", ()) in zeros
    assert ("ui_not_found_total", ()) in zeros
    assert ("backend_errors_total", ("unknown", "connection")) in zeros
    assert ("ui_warnings_total", ("DeprecationWarning",)) in zeros


def errors_of(events: list[Event]) -> dict[str, float]:
    """``{error_type: count}`` of the ``backend_errors_total`` events."""
    out: dict[str, float] = {}
    for e in events:
        if e.metric == "backend_errors_total":
            out[e.labels[1]] = out.get(e.labels[1], 0) + sum(values_of(e))
    return out


def test_bracketed_levels_count_from_error_up() -> None:
    """``[ERROR]``/``[error]``/``[FATAL]`` lines (after a timestamp too) are one error each; ``[WARN]`` is none."""
    events = run("[ERROR] (HTTP) SvelteKit 7f3c2a TypeError: fetch failed\n"
                 "2026-09-09T12:20:52.123Z [ERROR] load failed: TypeError: Cannot read properties of null\n"
                 "    at load (file:///app/build/server/chunks/2.js:4:9)\n"
                 "    at async render (file:///app/build/server/index.js:90:3)\n"
                 "[2026-09-09 12:20:52] [FATAL] ReferenceError: session is not defined\n"
                 "[error] could not save the thread\n"
                 "[WARN] retrying after an error\n"
                 "[2026-09-09 12:20:53] [ERROR] (HTTP) SvelteKitError: Not found: /wp-admin")
    assert errors_of(events) == {"connection": 1, "type_error": 1, "reference_error": 1, "error": 1}
    assert count(events, "ui_not_found_total") == 1


def test_pino_json_levels_count_from_50_up() -> None:
    """pino lines of level 50, 60 or ``"error"`` are one error each, by ``err.type``; 30, 40 are none."""
    stack = "\\n".join(["TypeError: Cannot read properties of undefined (reading 'id')",
                        *(f"    at load (file:///app/build/server/chunks/1.js:{i}:20)" for i in range(5))])
    events = run(
        '{"level":50,"time":1726000000000,"pid":1,"hostname":"ui-1","msg":"fetch failed",'
        '"err":{"type":"TypeError","message":"fetch failed","stack":"TypeError: fetch failed\\n    at f (node:a:1)"}}\n'
        f'{{"level":50,"time":1726000000001,"msg":"load failed","err":{{"type":"TypeError","stack":"{stack}"}}}}\n'
        '{"level":60,"time":1726000000002,"msg":"cannot start","err":{"type":"alice@example.com typed this"}}\n'
        '{"level":"error","time":"2026-09-09T12:20:52.123Z","msg":"no session"}\n'
        '{"level":40,"time":1726000000003,"msg":"an error, retrying","err":{"type":"TypeError"}}\n'
        '{"level":30,"time":1726000000004,"msg":"error page rendered"}\n'
        '{"level":50,"time":1726000000005,"msg":"Not found: /.env","err":{"type":"SvelteKitError",'
        '"message":"Not found: /.env","stack":"SvelteKitError: Not found: /.env\\n    at resolve (file:///i.js:1:2)"}}')
    assert errors_of(events) == {"connection": 1, "type_error": 1, "error": 2}
    assert count(events, "ui_not_found_total") == 1


def test_winston_formats_count_from_error_up() -> None:
    """winston's ``error: ...`` (after a timestamp too) and JSON ``"level":"error"`` count; ``warn``, ``info`` not."""
    events = run('error: Something failed {"service":"ui"}\n'
                 '2026-09-09T12:20:52.123Z error: RangeError: Invalid time value {"service":"ui"}\n'
                 '{"level":"error","message":"Thread not saved","timestamp":"2026-09-09T12:20:52.124Z"}\n'
                 'warn: an error may follow {"service":"ui"}\n'
                 'info: error page shown {"service":"ui"}\n'
                 '{"level":"warn","message":"Error budget low","timestamp":"2026-09-09T12:20:52.125Z"}\n'
                 'error: SvelteKitError: Not found: /robots.txt {"service":"ui"}')
    assert errors_of(events) == {"error": 2, "range_error": 1}
    assert count(events, "ui_not_found_total") == 1


def test_console_error_lines_count_once_with_their_frames() -> None:
    """Bare error lines, a stack with its frames, ``Uncaught ...``, ``Unhandled rejection ...``: one error each."""
    events = run("Error: connect ECONNREFUSED 127.0.0.1:5432\n"
                 "TypeError: Cannot read properties of undefined (reading 'x')\n"
                 "    at GET (file:///app/build/server/entries/endpoints/api/_server.ts.js:8:30)\n"
                 "    at async render_endpoint (file:///app/build/server/index.js:1200:20)\n"
                 "Uncaught Error boom\n"
                 "Unhandled rejection RangeError: Maximum call stack size exceeded\n"
                 "Unhandled Rejection at: Promise { <rejected> 1 } reason: nope\n"
                 "Error: Not found: /favicon.ico")
    assert errors_of(events) == {"connection": 1, "type_error": 1, "error": 2, "range_error": 1}
    assert count(events, "ui_not_found_total") == 1


def test_readiness_is_known_after_learn_and_restore() -> None:
    """A server found listening by ``learn`` (or ``restore``) is ready (the engine says so once, with
    the next batch); one that only booted is not."""
    parser = UiParser()
    parser.learn("2026-09-09T12:00:00Z info: booting\nListening on http://0.0.0.0:3000\n")
    assert parser.readiness() == "unknown"
    assert list(parser.parse(Record("connected to supabase"))) == []
    restored = UiParser()
    restored.restore({"ready": True})
    assert restored.readiness() == "unknown"
    assert [e.metric for e in restored.parse(Record("Error: boom"))] == ["backend_errors_total"]
    idle = UiParser()
    idle.learn("Using adapter-node\n")
    assert idle.readiness() is None
