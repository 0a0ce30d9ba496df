"""The supabase parser: Kong, PostgREST, GoTrue, Storage, Postgres, Realtime and Logflare lines,
each event under its component as ``backend``."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path
from typing import TYPE_CHECKING

import pytest

from logmetrics.events import Event
from logmetrics.plugins import discover, record_rule, validate
from logmetrics.records import Record, split_records
from logmetrics.routing import route
from logmetrics.testing import check_events
from tests.helpers import parse, total

if TYPE_CHECKING:  # the type checker reads the source tree; the package is installed under another name
    from parsers.supabase import SupabaseParser
else:
    from logmetrics_parsers.supabase import SupabaseParser

ROOT = Path(__file__).resolve().parent.parent
SAMPLES = sorted((ROOT / "samples" / "supabase").glob("*.log"))
OTHER_SAMPLES = sorted(p for p in (ROOT / "samples").glob("*/*.log") if p.parent.name != "supabase")
PG = "10.42.0.17 2025-03-02 10:01:12.345 UTC [41] authenticator@postgres "


def run(text: str, parser: SupabaseParser | None = None) -> list[Event]:
    """Every event of ``text`` cut into records as the engine cuts them, checked against the catalog."""
    parser = parser or SupabaseParser()
    events: list[Event] = []
    for rec in split_records(text, record_rule(SupabaseParser)):
        events += check_events(SupabaseParser, parser.parse(Record(rec, 1.0)))
    return events


def counted(events: list[Event], family: str) -> list[tuple[str | None, tuple[str, ...]]]:
    """(backend, labels) of the events of one family that count something (zeros left out)."""
    return [(e.backend, e.labels) for e in events if e.metric == family and e.value != 0]


def test_the_parser_is_valid() -> None:
    """The class passes the plugin contract's checks."""
    assert validate(SupabaseParser, "test").name == "supabase"


def test_postgres_error_with_detail_and_statement_is_one_error_through_the_engine(tmp_path: Path) -> None:
    """An ERROR with its DETAIL and STATEMENT lines counts exactly one error in 'watch --oneshot'."""
    log = tmp_path / "db.log"
    log.write_text(PG + 'ERROR:  duplicate key value violates unique constraint "notes_pkey"\n'
                   + PG + "DETAIL:  Key (id)=(7) already exists.\n"
                   + PG + "STATEMENT:  insert into notes (id, body) values (7, 'secret text')\n")
    proc = subprocess.run([sys.executable, "-m", "logmetrics", "watch", "--oneshot", "--parser", "supabase", str(log)],
                          capture_output=True, text=True, timeout=60, cwd=ROOT)
    assert proc.returncode == 0, proc.stderr
    samples = parse(proc.stdout)
    assert total(samples, "backend_errors_total", backend="supabase-db") == 1
    assert total(samples, "backend_errors_total", backend="supabase-db", error_type="constraint") == 1
    assert "secret text" not in proc.stdout and "notes_pkey" not in proc.stdout


@pytest.mark.parametrize("sample", SAMPLES, ids=lambda p: p.stem)
def test_every_sample_gives_valid_events(sample: Path) -> None:
    """Every sample's records give events the engine accepts, each under a Supabase component."""
    events = run(sample.read_text(encoding="utf-8"))
    assert events
    assert {e.backend for e in events} <= {"supabase-kong", "supabase-rest", "supabase-auth", "supabase-storage",
                                          "supabase-db", "supabase-realtime", "supabase-analytics"}


@pytest.mark.parametrize(("line", "backend"), [
    ('10.0.0.1 - - [02/Mar/2025:10:00:05 +0000] "GET /rest/v1/notes HTTP/1.1" 200 5 "-" "curl/8"', "supabase-kong"),
    ('10.0.0.1 - anon [02/Mar/2025:10:00:05 +0000] "GET /notes HTTP/1.1" 200 - "" "curl/8"', "supabase-rest"),
    ('{"component":"api","duration":1000,"level":"info","method":"GET","msg":"request completed","path":"/user",'
     '"status":200,"time":"2025-03-02T10:00:00Z"}', "supabase-auth"),
    ('{"level":30,"pid":1,"hostname":"h","type":"request","req":{"method":"GET","url":"/bucket"},'
     '"res":{"statusCode":200},"responseTime":1}', "supabase-storage"),
    (" 2025-03-02 10:00:00.120 UTC [1] LOG:  database system is ready to accept connections", "supabase-db"),
    ("10:00:01.000 [info] Running RealtimeWeb.Endpoint with cowboy 2.10.0 at :::4000 (http)", "supabase-realtime"),
    ("02/Mar/2025:10:00:00 +0000: Starting PostgREST 11.2.2...", "supabase-rest"),
    ("gotrue 10:00:00.01 INFO  ==> ** Starting gotrue setup **", "supabase-auth"),
])
def test_the_component_is_the_backend(line: str, backend: str) -> None:
    """Each component's line format puts its events under that component."""
    events = run(line)
    assert [e for e in events if e.value != 0]
    assert {e.backend for e in events} == {backend}


def test_gotrue_durations_are_nanoseconds() -> None:
    """GoTrue's duration (ns) becomes seconds; the id in an admin path becomes {id}."""
    events = run('{"component":"api","duration":1250000000,"level":"error","method":"GET","msg":"request completed",'
                 '"path":"/admin/users/3f6c1e2a-9b4d-4c1e-8f00-1a2b3c4d5e6f","status":500,"time":"2025-03-02T10:00:00Z",'
                 '"error":"dial tcp: connect: connection refused"}')
    assert [e.value for e in events if e.metric == "http_request_duration_seconds"] == [1.25]
    assert counted(events, "http_requests_total") == [("supabase-auth", ("GET", "/admin/users/{id}", "500"))]
    assert counted(events, "backend_errors_total") == [("supabase-auth", ("unknown", "connection_refused"))]


def test_storage_string_status_and_aborted_requests() -> None:
    """A statusCode given as a string is the code; an aborted request is 499; object paths stay out."""
    events = run('{"level":30,"pid":1,"hostname":"h","tenantId":"stub","type":"request","req":{"method":"POST",'
                 '"url":"/object/avatars/me/holiday.png"},"res":{"statusCode":"201"},"responseTime":12.5}\n'
                 '{"level":30,"pid":1,"hostname":"h","tenantId":"stub","type":"request","req":{"method":"GET",'
                 '"url":"/object/public/avatars/me/a.png"},"res":{"statusCode":"ABORTED REQ"},"responseTime":3}\n')
    assert counted(events, "http_requests_total") == [("supabase-storage", ("POST", "/object/{path}", "201")),
                                                      ("supabase-storage", ("GET", "/object/public/{path}", "499"))]
    assert [e.value for e in events if e.metric == "http_request_duration_seconds"] == [0.0125, 0.003]


def test_schema_cache_error_and_its_json_are_one_error() -> None:
    """PostgREST's schema-cache error and the JSON object after it count once; a JSON error alone counts."""
    events = run("02/Mar/2025:10:00:01 +0000: An error ocurred when loading the schema cache\n"
                 '02/Mar/2025:10:00:02 +0000: {"code":"58P01","details":null,"hint":null,"message":"no file"}\n'
                 '02/Mar/2025:10:00:03 +0000: {"code":"PGRST000","details":"Connection refused","message":"x"}\n')
    assert counted(events, "backend_errors_total") == [("supabase-rest", ("unknown", "schema_cache")),
                                                      ("supabase-rest", ("unknown", "connection_refused"))]


def test_erlang_crash_is_one_error_and_not_ready() -> None:
    """Kernel pid terminated and the crash dump line are one crash; the Logflare service goes down."""
    events = run("10:00:02.000 [info] Running LogflareWeb.Endpoint with cowboy 2.10.0 at :::4000 (http)\n"
                 "Kernel pid terminated (application_controller) ({application_start_failure,logflare,x})\n\n"
                 "Crash dump is being written to: erl_crash.dump...done\n")
    assert counted(events, "backend_errors_total") == [("supabase-analytics", ("unknown", "crash"))]
    assert [(e.backend, e.value) for e in events if e.metric == "backend_ready"] == [
        ("supabase-analytics", 1), ("supabase-analytics", 0)]


@pytest.mark.parametrize(("text", "kind"), [
    (PG.replace("authenticator", "supabase_admin") + 'FATAL:  password authentication failed for user "x"',
     "auth_failed"),
    (PG + "FATAL:  sorry, too many clients already", "too_many_connections"),
    (PG + "FATAL:  remaining connection slots are reserved for non-replication superuser connections",
     "too_many_connections"),
    (PG + "ERROR:  deadlock detected", "deadlock"),
    ("2025/03/02 10:00:11 [error] 1#0: *3 connect() failed (111: Connection refused) while connecting to upstream",
     "connection_refused"),
    ("10:00:03.861 [error] Postgrex.Protocol (#PID<0.1.0>) failed to connect: ** (Postgrex.Error) FATAL 28P01 "
     "(invalid_password) password authentication failed for user \"x\"", "auth_failed"),
    ('time="2025-03-02T10:01:01Z" level=fatal msg="running db migrations: Migrator: problem"', "migration"),
    ('{"level":"error","pid":1,"hostname":"h","error":{"name":"JsonWebTokenError","message":"invalid signature"},'
     '"msg":"unable to get owner"}', "jwt"),
    ("postgresql 10:00:00.01 ERROR ==> The POSTGRESQL_PASSWORD environment variable is empty", "error"),
    (PG + "ERROR:  permission denied for table notes (SQLSTATE 42501)", "sql"),
])
def test_error_types(text: str, kind: str) -> None:
    """Each error record counts once, with the type its phrase or SQLSTATE class gives."""
    assert [labels for _, labels in counted(run(text), "backend_errors_total")] == [("unknown", kind)]


def test_informational_lines_are_matched_without_errors() -> None:
    """Bitnami INFO, Postgres LOG, nginx notice and pop lines are log records, never errors."""
    events = run("postgresql 14:15:38.73 INFO  ==> Welcome to the Bitnami postgresql container\n"
                 " 2025-03-02 10:00:00.105 UTC [1] LOG:  listening on IPv4 address \"0.0.0.0\", port 5432\n"
                 "2025/03/02 10:00:00 [notice] 1#0: start worker processes\n"
                 "[POP] 2025/03/02 10:01:00 info - Migrations already up to date, nothing to apply\n")
    assert not counted(events, "backend_errors_total")
    assert len(counted(events, "supabase_log_records_total")) == 4


def test_no_user_text_in_labels() -> None:
    """No label of any sample holds a JWT, e-mail, IP, SQL, file or bucket name, or raw query."""
    events = [e for sample in SAMPLES for e in run(sample.read_text(encoding="utf-8"))]
    labels = {label for e in events for label in e.labels}
    for bad in ("eyJ", "@", "10.42.", "insert", "select", "photo", "report.pdf", "avatars", "?", "supabase_admin"):
        assert not any(bad in label for label in labels), (bad, labels)


def test_prefixes_left_on_a_line_are_read_through() -> None:
    """A compose prefix the envelope layer did not take off names the component; a viewer's time is skipped."""
    events = run("supabase-analytics  | 10:00:03.861 [error] Postgrex.Protocol failed to connect: econnrefused\n"
                 "2024-06-03 16:12:18 03/Jun/2024:09:12:18 +0000: Starting PostgREST 12.1...\n")
    assert counted(events, "backend_errors_total") == [("supabase-analytics", ("unknown", "connection_refused"))]
    assert counted(events, "backend_restarts_total") == [("supabase-rest", ())]


def test_sniff_routes_supabase_and_leaves_other_backends() -> None:
    """Every Supabase sample sniffs high; no other backend's sample is routed to supabase."""
    for sample in SAMPLES:
        assert SupabaseParser.sniff(sample.read_text(encoding="utf-8").splitlines()[:50]) >= 0.6, sample
    entries = discover()
    assert OTHER_SAMPLES
    for path in OTHER_SAMPLES:
        lines = path.read_text(encoding="utf-8").splitlines()[:50]
        got = route(entries, None, ("sample.log", "sample", "/logs/sample.log"), lines).entry
        assert got is None or got.name == path.parent.name, path  # (raw ANSI colours: none sniffs it here)


@pytest.mark.parametrize(("name", "claimed"), [
    ("supabase-db", True), ("supabase-kong", True), ("kong", True), ("kong-7d9f", True),
    ("leapfrogai/supabase-rest-0/postgrest", True), ("gotrue.log", True), ("realtime", True),
    ("storage-api-1", True), ("/var/log/pods/ns_supabase-storage-0_uid/supabase-storage/0.log", True),
    ("/mnt/storage/logs/app.log", False), ("kongress.log", False), ("vllm-0", False),
])
def test_claims(name: str, claimed: bool) -> None:
    """Supabase's container and file names are claimed; a path that only mentions storage is not."""
    entries = discover()
    got = route(entries, None, (name,), []).entry
    assert (got is not None and got.name == "supabase") is claimed


def test_state_keeps_readiness() -> None:
    """``state``/``restore`` keep which components were ready."""
    parser = SupabaseParser()
    run(" 2025-03-02 10:00:00.120 UTC [1] LOG:  database system is ready to accept connections", parser)
    other = SupabaseParser()
    other.restore(parser.state())
    assert other.state()["ready"] == ["supabase-db"]
    events = run(" 2025-03-02 10:05:01.000 UTC [1] LOG:  database system is shut down", other)
    assert [(e.backend, e.value) for e in events if e.metric == "backend_ready"] == [("supabase-db", 0)]


def test_learn_takes_readiness_without_events() -> None:
    """``learn`` notes the components that were ready before reading began; a later shutdown sets 0."""
    parser = SupabaseParser()
    parser.learn(" 2025-03-02 10:00:00.120 UTC [1] LOG:  database system is ready to accept connections\n"
                 '{"level":30,"pid":1,"hostname":"h","msg":"Server listening at http://0.0.0.0:5000"}\n'
                 "02/Mar/2025:10:00:00 +0000: Starting PostgREST 11.2.2...\n")
    assert parser.state()["ready"] == ["supabase-db", "supabase-storage"]
    events = run(" 2025-03-02 10:05:01.000 UTC [1] LOG:  database system is shut down", parser)
    assert [(e.backend, e.value) for e in events if e.metric == "backend_ready"] == [("supabase-db", 0)]


def test_the_stream_name_tells_logflare_from_realtime(tmp_path: Path) -> None:
    """Through the engine, compose services' names tell whose Elixir lines they are (the lines do not say)."""
    line = "10:00:03.861 [error] Postgrex.Protocol (#PID<0.1.0>) failed to connect: ** (Postgrex.Error) econnrefused"
    log = tmp_path / "stack.log"
    log.write_text(f"supabase-analytics  | {line}\nsupabase-realtime   | {line}\nsupabase-realtime   | {line}\n")
    proc = subprocess.run([sys.executable, "-m", "logmetrics", "watch", "--oneshot", "--parser", "supabase", str(log)],
                          capture_output=True, text=True, timeout=60, cwd=ROOT)
    assert proc.returncode == 0, proc.stderr
    samples = parse(proc.stdout)
    assert total(samples, "backend_errors_total", backend="supabase-analytics", source="supabase-analytics") == 1
    assert total(samples, "backend_errors_total", backend="supabase-realtime", source="supabase-realtime") == 2


def test_named_sets_the_elixir_service() -> None:
    """A stream named after Logflare's container puts its Elixir lines under supabase-analytics."""
    parser = SupabaseParser()
    parser.named(("0.log", "supabase/supabase-analytics-0/supabase-analytics", "/var/log/pods/x/0.log"))
    events = run("10:00:01.000 [error] something failed", parser)
    assert counted(events, "backend_errors_total") == [("supabase-analytics", ("unknown", "error"))]
