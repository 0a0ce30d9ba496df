"""The supabase parser: Kong, PostgREST, GoTrue, Storage, Postgres, Realtime and Logflare lines,
each event under its component as ``backend``."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
from logmetrics_parsers.supabase import SupabaseParser

from logmetrics.events import Event
from logmetrics.plugins import discover, record_rule, validate
from logmetrics.plugins.routing import route
from logmetrics.records import Record, split_records
from logmetrics.testing import check_events
from tests.helpers import parse, total

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
    allowed: set[str | None] = {"supabase-kong", "supabase-rest", "supabase-auth", "supabase-storage", "supabase-db",
                                "supabase-realtime", "supabase-analytics", "supabase-pooler"}
    if sample.stem == "pretty-json":
        allowed.add(None)  # another Node logger's objects, in a file named after no component: the parser's name
    assert {e.backend for e in events} <= allowed


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
    assert counted(events, "http_requests_total") == [
        ("supabase-storage", ("POST", "/object/{bucket}/{path}", "201")),
        ("supabase-storage", ("GET", "/object/public/{bucket}/{path}", "499"))]
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
    ("supavisor", True), ("supavisor-7d9f", True),
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


CRASH = ("10:00:07.300 request_id=F8x2 project=x external_id=x [error] GenServer #PID<0.999.0> terminating\n"
         "** (RuntimeError) boom\n"
         "    (realtime 2.25.0) lib/realtime/tenants/connect.ex:100: Realtime.Tenants.Connect.handle_info/2\n"
         "    (stdlib 4.3) gen_server.erl:1123: :gen_server.try_dispatch/4\n"
         'Last message: {:check_connection, "connection refused by tenant"}\n'
         'State: %{tenant: "no such host"}\n')
TASK = ("10:00:08.000 [error] Task #PID<0.1200.0> started from Realtime.Tenants.Connect terminating\n"
        "** (stop) exited in: GenServer.call(Realtime.Tenants.Cache, {:get, 1}, 5000)\n"
        "    ** (EXIT) time out\n"
        "    (elixir 1.14.5) lib/gen_server.ex:1038: GenServer.call/3\n"
        "Function: #Function<1.2/0 in Realtime.Tenants.Connect.start/1>\n"
        "    Args: []\n")


def test_elixir_crash_report_is_one_record_and_one_error() -> None:
    """An Elixir [error] line with its ** (X) line, frames, Last message and State is one error record."""
    records = split_records(CRASH + TASK, record_rule(SupabaseParser))
    assert [r.split("\n", 1)[0][:12] for r in records] == ["10:00:07.300", "10:00:08.000"]
    events = run(CRASH + TASK)
    assert counted(events, "backend_errors_total") == [("supabase-realtime", ("unknown", "runtime_error")),
                                                      ("supabase-realtime", ("unknown", "timeout"))]
    assert len(counted(events, "supabase_log_records_total")) == 2  # no record left unmatched


@pytest.mark.parametrize(("text", "kind"), [
    ("10:00:09.100 [error] GenServer #PID<0.1.0> terminating\n** (DBConnection.ConnectionError) tcp recv: closed\n",
     "connection_refused"),
    ("10:00:09.100 [error] GenServer #PID<0.1.0> terminating\n** (Postgrex.Error) FATAL 28P01 (invalid_password) x\n",
     "auth_failed"),
    ("10:00:09.100 [error] Task #PID<0.1.0> terminating\n** (stop) :timeout\n", "timeout"),
])
def test_elixir_crash_error_type_from_its_exception(text: str, kind: str) -> None:
    """A crash report's error type comes from its exception line through the phrase table."""
    assert [labels for _, labels in counted(run(text), "backend_errors_total")] == [("unknown", kind)]


def test_lone_elixir_exception_line_is_one_error() -> None:
    """A ** (X) line after an [info] line (or alone) is an error record of its own; an [info] line takes no body."""
    events = run("10:00:01.000 [info] Connected\n** (RuntimeError) boom\nState: %{}\n** (ArgumentError) bad\n")
    assert len(counted(events, "backend_errors_total")) == 2


@pytest.mark.parametrize("line", [
    "[10:00:11.000] ERROR (1): unable to get owner",
    "[2025-03-02 10:00:11.000 +0000] ERROR (1 on storage-0): unable to get owner",
    "[1740909611000] ERROR (1 on storage-0): unable to get owner",
    "[2025-03-02T10:00:11.000Z] FATAL (storage/1 on storage-0): unable to get owner",
    "[10:00:11.000] ERROR: unable to get owner",
])
def test_pino_pretty_time_forms_are_storage_errors(line: str) -> None:
    """pino-pretty's time forms and (pid) / (pid on host) / (name/pid on host) are Storage lines; ERROR/FATAL errors."""
    assert counted(run(line), "backend_errors_total") == [("supabase-storage", ("unknown", "error"))]


def test_pino_pretty_info_is_no_error() -> None:
    """A pino-pretty INFO line is a Storage log record, not an error; Server listening sets ready."""
    events = run("[10:00:00.100] INFO (1): Server listening at http://0.0.0.0:5000")
    assert not counted(events, "backend_errors_total")
    assert [(e.backend, e.value) for e in events if e.metric == "backend_ready"] == [("supabase-storage", 1)]


def _kong(path: str, code: str = "200") -> str:
    return f'10.0.0.1 - - [02/Mar/2025:10:00:05 +0000] "GET {path} HTTP/1.1" {code} 5 "-" "curl/8"'


@pytest.mark.parametrize(("path", "route"), [
    ("/storage/v1/render/image/public/avatars/alice@example.com/me.png",
     "/storage/v1/render/image/public/{bucket}/{path}"),
    ("/storage/v1/render/image/sign/avatars/me.png?token=eyJx", "/storage/v1/render/image/sign/{bucket}/{path}"),
    ("/storage/v1/s3/avatars/team/me.png", "/storage/v1/s3/{bucket}/{path}"),
    ("/storage/v1/upload/resumable/sign/avatars/me.png", "/storage/v1/upload/resumable/sign/{path}"),
    ("/storage/v1/object/info/avatars/me.png", "/storage/v1/object/info/{bucket}/{path}"),
    ("/storage/v1/object/list/avatars", "/storage/v1/object/list/{bucket}"),
    ("/storage/v1/object/move", "/storage/v1/object/move"),
    ("/storage/v1/bucket/avatars", "/storage/v1/bucket/{bucket}"),
    ("/rest/v1/notes?select=*", "/rest/v1/notes"),
    ("/rest/v1/bob@example.com", "/rest/v1/{id}"),
    ("/rest/v1/rpc/archive_old_notes", "/rest/v1/rpc/archive_old_notes"),
    ("/functions/v1/hello-world/users/bob@example.com", "/functions/v1/hello-world/{path}"),
    ("/realtime/v1/api/broadcast/secret-topic", "/realtime/v1/api/broadcast/{path}"),
    ("/auth/v1/admin/users/3f6c1e2a-9b4d-4c1e-8f00-1a2b3c4d5e6f", "/auth/v1/admin/users/{id}"),
    ("/auth/v1/user/bob@example.com", "/auth/v1/user/{path}"),
    ("/storage/v1/no-such-route/me.png", "/storage/v1/{path}"),
    ("/x\u202eyz/a", "/{id}/a"),
    ("/x/bob@example.com", "/x/{id}"),
])
def test_kong_routes_keep_only_fixed_words(path: str, route: str) -> None:
    """Through Kong, each service's routes keep their fixed words; buckets, keys, e-mails and ids do not pass."""
    assert counted(run(_kong(path, "400")), "http_requests_total") == [("supabase-kong", ("GET", route, "400"))]


def test_storage_and_gotrue_own_paths_use_their_route_tables() -> None:
    """Storage's and GoTrue's own paths (no Kong mount) go through their services' route tables."""
    events = run('{"level":30,"pid":1,"hostname":"h","type":"request","req":{"method":"GET",'
                 '"url":"/render/image/authenticated/avatars/alice@example.com/me.png"},"res":{"statusCode":200}}\n'
                 '{"component":"api","duration":1,"level":"info","method":"GET","msg":"request completed",'
                 '"path":"/user/identities/authorize","status":200}\n')
    assert counted(events, "http_requests_total") == [
        ("supabase-storage", ("GET", "/render/image/authenticated/{bucket}/{path}", "200")),
        ("supabase-auth", ("GET", "/user/identities/authorize", "200"))]


@pytest.mark.parametrize(("text", "kind"), [
    (PG + "ERROR:  canceling statement due to statement timeout", "timeout"),
    ('{"component":"mailer","level":"error","msg":"error sending email: dial tcp: lookup smtp on 127.0.0.11:53: '
     'no such host","time":"2025-03-02T10:00:00Z"}', "dns"),
])
def test_minor_error_types(text: str, kind: str) -> None:
    """A Postgres statement timeout is timeout; GoTrue's failed DNS lookup is dns."""
    assert [labels for _, labels in counted(run(text), "backend_errors_total")] == [("unknown", kind)]


def test_postgrest_readiness() -> None:
    """PostgREST: Starting is a restart; Connection successful / Listening / Schema cache loaded set ready."""
    events = run("02/Mar/2025:10:00:00 +0000: Starting PostgREST 12.1...\n"
                 "02/Mar/2025:10:00:01 +0000: Connection successful\n"
                 "02/Mar/2025:10:00:01 +0000: Listening on port 3000\n"
                 "02/Mar/2025:10:00:02 +0000: Starting PostgREST 12.1...\n")
    assert [(e.backend, e.value) for e in events if e.metric == "backend_ready"] == [
        ("supabase-rest", 1), ("supabase-rest", 1), ("supabase-rest", 0)]
    assert len(counted(events, "backend_restarts_total")) == 2


@pytest.mark.parametrize("duration", ["1e400", "-5", "true", '"x"'])
def test_gotrue_bad_duration_counts_the_request_without_one(duration: str) -> None:
    """An infinite, negative or non-number duration: the request counts, with no duration."""
    events = run(f'{{"component":"api","duration":{duration},"level":"info","method":"GET","msg":"request completed",'
                 '"path":"/user","status":200}')
    assert counted(events, "http_requests_total") == [("supabase-auth", ("GET", "/user", "200"))]
    assert not [e for e in events if e.metric == "http_request_duration_seconds"]


@pytest.mark.parametrize(("status", "code"), [("099", "invalid"), ("600", "invalid"), ("404", "404")])
def test_status_outside_http_range_is_invalid(status: str, code: str) -> None:
    """An access line's status outside 100..599 is the code 'invalid', in both line formats."""
    events = run(_kong("/rest/v1/notes", status) + "\n"
                 f'{{"component":"api","duration":1,"level":"info","method":"GET","msg":"request completed",'
                 f'"path":"/user","status":{int(status)}}}\n')
    assert [labels[2] for _, labels in counted(events, "http_requests_total")] == [code, code]


def test_non_ascii_digits_are_no_status() -> None:
    """Unicode digits are not a status: the access line is no request; a JSON one is 499."""
    events = run(_kong("/rest/v1/notes", "\u0662\u0660\u0660") + "\n"
                 '{"level":30,"pid":1,"hostname":"h","type":"request","req":{"method":"GET","url":"/bucket"},'
                 '"res":{"statusCode":"\u0662\u0660\u0660"}}\n')
    assert counted(events, "http_requests_total") == [("supabase-storage", ("GET", "/bucket", "499"))]


POSTGREX = ("2026-09-09 12:20:52.123 [error] GenServer #PID<0.1234.0> terminating\n"
            "** (Postgrex.Error) ssl not available\n"
            "\n"
            "    (db_connection 2.6.0) lib/db_connection/connection.ex:95: DBConnection.Connection.connect/2\n"
            "    (stdlib 5.2.3) gen_server.erl:1095: :gen_server.try_handle_info/3\n"
            "Last message (from #PID<0.900.0>): :connect\n"
            'State: %{note: "connection refused yesterday"}\n'
            "Client #PID<0.900.0> is alive\n"
            "\n"
            "    (stdlib 5.2.3) gen.erl:240: :gen.do_call/4\n"
            "12:20:53.000 [info] Tenant reconnected\n")


def test_elixir_error_with_frames_is_one_error_of_its_class_and_component() -> None:
    """A dated [error] report with its ** (Postgrex.Error) line, frames and fields is one error, typed by its class."""
    parser = SupabaseParser()
    parser.named(("realtime-0.log",))
    assert len(split_records(POSTGREX, record_rule(SupabaseParser))) == 2
    events = run(POSTGREX, parser)
    assert counted(events, "backend_errors_total") == [("supabase-realtime", ("unknown", "postgrex_error"))]
    assert len(counted(events, "supabase_log_records_total")) == 2


@pytest.mark.parametrize("prefix", ["2026-09-09 12:20:52.123 ", "12:20:52.123 project=abc external_id=abc ",
                                    "request_id=F8x2kQ ", "2026-09-09 12:20:52.123 region=local ", ""])
def test_every_elixir_prefix_reads_the_level(prefix: str) -> None:
    """Date, time and metadata before [level], each optional: [error] is an error; info, debug, warning, warn not."""
    events = run("".join(f"{prefix}[{level}] something happened\n" for level in
                         ("info", "debug", "warning", "warn", "error")))
    assert counted(events, "backend_errors_total") == [("supabase-realtime", ("unknown", "error"))]
    assert sorted(labels[0] for _, labels in counted(events, "supabase_log_records_total")) == [
        "debug", "error", "info", "warning", "warning"]


def test_an_application_that_failed_to_start_is_an_error_and_a_stopped_one_is_not() -> None:
    """[notice] Application x exited: ... returned an error is one error (with its ** (EXIT) line); :stopped is none."""
    events = run("12:21:00.100 [notice] Application realtime exited: Realtime.Application.start(:normal, []) "
                 "returned an error: shutdown: failed to start child: Realtime.Repo\n"
                 "    ** (EXIT) shutdown\n"
                 "12:21:00.200 [notice] Application runtime_tools exited: :stopped\n"
                 "12:21:00.300 [info] Application logger exited: :stopped\n")
    assert counted(events, "backend_errors_total") == [("supabase-realtime", ("unknown", "app_exited"))]
    assert [labels[0] for _, labels in counted(events, "supabase_log_records_total")] == ["notice", "notice", "info"]


def test_an_exited_application_is_typed_by_the_exception_that_stopped_it() -> None:
    """An application's exit with a nested exception counts under that exception's class (not ** (EXIT))."""
    events = run("12:21:00.100 [notice] Application supavisor exited: Supavisor.Application.start(:normal, []) "
                 "returned an error: shutdown: failed to start child: Supavisor.Repo\n"
                 "    ** (EXIT) an exception was raised:\n"
                 "        ** (ArgumentError) missing the :database key\n")
    assert counted(events, "backend_errors_total") == [("supabase-pooler", ("unknown", "argument_error"))]


@pytest.mark.parametrize(("names", "text", "backend"), [
    ((), "10:00:00.000 [error] GenServer Supavisor.ClientHandler terminating\n** (RuntimeError) x\n",
     "supabase-pooler"),
    ((), "10:00:00.000 [error] boom\n** (RuntimeError) x\n    (logflare 1.4.0) lib/logflare/x.ex:1: Logflare.X.y/0\n",
     "supabase-analytics"),
    (("supavisor-7d9f.log",), "10:00:00.000 [error] Logflare.Source failed\n", "supabase-pooler"),
    (("default/supabase-pooler-0/supavisor",), "10:00:00.000 [error] x\n", "supabase-pooler"),
])
def test_elixir_services_from_the_stream_name_or_the_text(names: tuple[str, ...], text: str, backend: str) -> None:
    """Supavisor and Logflare records go to their component: by the stream's name first, else by the text."""
    parser = SupabaseParser()
    parser.named(names)
    assert [b for b, _ in counted(run(text, parser), "backend_errors_total")] == [backend]


def test_exception_classes_are_bounded_per_stream() -> None:
    """Past the first classes of a stream, a new exception class counts as 'exception': the label set stays bounded."""
    parser = SupabaseParser()
    text = "".join(f"10:00:00.000 [error] GenServer x terminating\n** (Custom{i}Error) boom\n" for i in range(20))
    kinds = [labels[1] for _, labels in counted(run(text, parser), "backend_errors_total")]
    assert kinds[:16] == [f"custom{i}_error" for i in range(16)]
    assert kinds[16:] == ["exception"] * 4
    again = run("10:00:00.000 [error] y\n** (Custom3Error) boom\n", parser)
    assert [labels[1] for _, labels in counted(again, "backend_errors_total")] == ["custom3_error"]


GOTRUE_PRETTY = ('{\n  "component": "api",\n  "error": {\n    "code": "unexpected_failure",\n    "hints": [\n'
                 '      "retry"\n    ]\n  },\n  "level": "error",\n  "msg": "Unable to parse: \\"}\\" {",\n'
                 '  "time": "2026-09-09T10:00:03Z"\n}\n')


def test_a_pretty_printed_gotrue_error_is_one_error() -> None:
    """A GoTrue object over lines (nested, braces in a string) is one record: one error, read like a one-line one."""
    events = run(GOTRUE_PRETTY)
    assert counted(events, "backend_errors_total") == [("supabase-auth", ("unknown", "error"))]
    assert counted(events, "supabase_log_records_total") == [("supabase-auth", ("error",))]
    one_line = run('{"component":"api","level":"error","msg":"Unable to parse","time":"2026-09-09T10:00:03Z"}')
    assert counted(one_line, "backend_errors_total") == counted(events, "backend_errors_total")


@pytest.mark.parametrize("level", ["50", '"error"'])
def test_a_pretty_printed_pino_error_is_a_storage_error(level: str) -> None:
    """Storage's pino object over lines, level 50 or "error", is one Storage error typed by its contents."""
    events = run(f'{{\n  "level": {level},\n  "pid": 1,\n  "hostname": "storage-0",\n  "error": {{\n'
                 '    "name": "JsonWebTokenError"\n  },\n  "msg": "unable to get owner"\n}\n')
    assert counted(events, "backend_errors_total") == [("supabase-storage", ("unknown", "jwt"))]
    assert counted(events, "supabase_log_records_total") == [("supabase-storage", ("error",))]


def test_another_loggers_object_takes_the_streams_component() -> None:
    """An object with a level and "message" (no "msg") is the component the stream is named after."""
    parser = SupabaseParser()
    parser.named(("supabase-storage-0",))
    events = run('{\n  "level": "error",\n  "message": "Unhandled rejection"\n}\n', parser)
    assert counted(events, "backend_errors_total") == [("supabase-storage", ("unknown", "error"))]


def test_an_unterminated_object_does_not_swallow_the_lines_after_it() -> None:
    """An object cut off counts from the fields that arrived; the lines after it are records of their own."""
    events = run('{\n  "level": "error",\n  "msg": "database connection lost",\n  "detail": {\n'
                 + PG + "FATAL:  password authentication failed for user \"x\"\n"
                 "10:00:01.000 [error] Postgrex.Protocol failed to connect: econnrefused\n"
                 '{"level":"info","msg":"reconnected"}\n')
    assert counted(events, "backend_errors_total") == [
        ("supabase-auth", ("unknown", "error")), ("supabase-db", ("unknown", "auth_failed")),
        ("supabase-realtime", ("unknown", "connection_refused"))]
    assert len(counted(events, "supabase_log_records_total")) == 4


def test_a_gotrue_request_line_cut_before_its_status_is_no_request() -> None:
    """GoTrue always logs a request's status: a record cut short before it counts no made-up 499."""
    events = run('{"level":"info","msg":"request completed","method":"GET","path":"/health","duration":1000}\n'
                 '{"level":"info","msg":"request completed","method":"GET","path":"/health","status":200}\n')
    assert [e.labels[-1] for e in events if e.metric == "http_requests_total"] == ["200"]
