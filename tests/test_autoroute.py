"""Auto-routing: neutrally named logs of each backend reach the right parser by sniffing, and
'logmetrics check' and 'watch -v' say which parser a stream got and why."""

from __future__ import annotations

import re
import subprocess
import sys
import time
from importlib.metadata import entry_points
from pathlib import Path
from typing import Any

import pytest

from tests.helpers import Samples, parse, total

INSTALLED = {ep.name for ep in entry_points(group="logmetrics.parsers")}

# One small log per backend, written from the formats each prints, under a name that no parser
# claims: only sniffing can route them.
LOGS: dict[str, tuple[str, str]] = {
    "vllm": ("a.log", """\
INFO 06-19 15:38:02 [api_server.py:1043] vLLM API server version 0.9.1
INFO 06-19 15:38:02 [cli_args.py:325] non-default args: {'model': 'Qwen/Qwen2.5-1.5B-Instruct'}
INFO 06-19 15:39:40 [launcher.py:37] Route: /v1/chat/completions, Methods: POST
INFO:     Application startup complete.
INFO 06-19 15:40:12 [loggers.py:118] Engine 000: Avg prompt throughput: 12.5 tokens/s, Avg generation \
throughput: 40.1 tokens/s, Running: 1 reqs, Waiting: 0 reqs, GPU KV cache usage: 4.2%, Prefix cache hit rate: 0.0%
INFO:     127.0.0.1:40312 - "POST /v1/chat/completions HTTP/1.1" 200 OK
"""),
    "llamacpp": ("b.log", """\
srv    load_model: loading model 'models/qwen2.5-0.5b-instruct-q4_k_m.gguf'
main: server is listening on http://127.0.0.1:8080 - starting the main loop
srv  update_slots: all slots are idle
slot launch_slot_: id  0 | task 0 | processing task
slot update_slots: id  0 | task 0 | new prompt, n_ctx_slot = 4096, n_keep = 0, n_prompt_tokens = 12
slot      release: id  0 | task 0 | stop processing: n_past = 52, truncated = 0
slot print_timing: id  0 | task 0 |
prompt eval time =      40.11 ms /    12 tokens (    3.34 ms per token,   299.17 tokens per second)
       eval time =     600.50 ms /    40 tokens (   15.01 ms per token,    66.61 tokens per second)
      total time =     640.61 ms /    52 tokens
srv  update_slots: all slots are idle
srv  log_server_r: request: POST /v1/chat/completions 127.0.0.1 200
"""),
    "whisper": ("c.log", """\
__main__: 2024-11-13 10:45:39,150 | INFO | main.py:29 >>> Task transcribe is starting
__main__: 2024-11-13 10:45:39,151 | INFO | main.py:41 >>> Temperature 0.0 is set
faster_whisper: 2024-11-13 10:45:39,154 | INFO | transcribe.py:281 >>> Processing audio with duration 00:10.680
__main__: 2024-11-13 10:45:41,002 | INFO | main.py:80 >>> Transcription complete!
"""),
    "embeddings": ("d.log", """\
2025-08-09T19:35:50.001000Z  INFO text_embeddings_router: router/src/main.rs:189: \
Maximum number of tokens per request: 512
2025-08-09T19:36:00.100000Z  INFO text_embeddings_router::http::server: router/src/http/server.rs:1812: \
Starting HTTP server: 0.0.0.0:80
2025-08-09T19:36:00.100100Z  INFO text_embeddings_router::http::server: router/src/http/server.rs:1813: Ready
2025-08-09T19:36:02.798333Z  INFO embed{total_time="12.5ms" tokenization_time="1.2ms" queue_time="300µs" \
inference_time="10.8ms"}: text_embeddings_router::http::server: router/src/http/server.rs:714: Success
"""),
}


def cli(*args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    """Run the logmetrics CLI in ``cwd`` (relative paths, so that no folder name can be claimed)."""
    return subprocess.run([sys.executable, "-m", "logmetrics", *args], cwd=cwd, capture_output=True, text=True,
                          timeout=60)


def needs(name: str) -> None:
    """Skip unless the parser ``name`` is installed (registered in the entry points)."""
    if name not in INSTALLED:
        pytest.skip(f"parser {name!r} is not installed (not in the logmetrics.parsers entry points)")


@pytest.fixture
def logs(tmp_path: Path) -> Path:
    """A directory holding one neutrally named log of each backend."""
    for name, text in LOGS.values():
        (tmp_path / name).write_text(text)
    return tmp_path


@pytest.mark.parametrize("backend", sorted(LOGS))
def test_check_sniffs_each_backend(logs: Path, backend: str) -> None:
    """'logmetrics check X.log' routes each backend's log to its parser by sniffing, and says so."""
    needs(backend)
    name = LOGS[backend][0]
    out = cli("check", name, cwd=logs)
    assert out.returncode == 0, out.stderr
    first, second = out.stdout.splitlines()[:2]
    assert first.startswith(f"parser {backend} (") and f" on {name}: " in first, first
    assert re.fullmatch(r"routed: sniffed: score (0\.\d\d|1\.00); runner-up: .+", second), second
    matched = int(re.search(r" (\d+) matched,", first).group(1))  # type: ignore[union-attr]  # the line is fixed
    assert matched > 0, out.stdout


def test_watch_routes_a_directory_of_backends(logs: Path) -> None:
    """'watch --oneshot -v DIR' gives each stream its backend's parser, logs why, and counts its lines there."""
    out = cli("-v", "watch", "--oneshot", ".", cwd=logs)
    assert out.returncode == 0, out.stderr
    got: Samples = parse(out.stdout)
    checked = 0
    for backend, (name, _text) in LOGS.items():
        if backend not in INSTALLED:
            continue
        checked += 1
        assert f"stream ./{name}: parser {backend} (sniffed: score " in out.stderr, out.stderr
        assert total(got, "logmetrics_lines_matched_total", parser=backend) > 0
        backends = {dict(labels)["backend"] for (_n, labels), _v in got.items()
                    if dict(labels).get("source") == f"./{name}" and "backend" in dict(labels)}
        assert backends == {backend}, (name, backends)
    assert checked >= 1  # vllm is built in


def test_check_says_a_name_claim_and_which_glob(tmp_path: Path) -> None:
    """A file named like a parser's claim: check names the glob and the name it matched."""
    (tmp_path / "vllm-0.log").write_text(LOGS["vllm"][1])
    out = cli("check", "vllm-0.log", cwd=tmp_path)
    assert out.returncode == 0, out.stderr
    assert out.stdout.splitlines()[1] == "routed: claimed by name: 'vllm-0.log' matches '*vllm*'"


def test_check_says_forced(tmp_path: Path) -> None:
    """With --parser, check says the parser was forced, whatever the file holds."""
    (tmp_path / "x.log").write_text("hello\n")
    out = cli("check", "--parser", "vllm", "x.log", cwd=tmp_path)
    assert out.returncode == 0, out.stderr
    assert out.stdout.splitlines()[1] == "routed: forced by --parser"


def test_check_says_why_no_parser_fits(tmp_path: Path) -> None:
    """A file nothing recognises: one error line with exit code 2 that says why and what to do."""
    (tmp_path / "x.log").write_text("hello\nworld\n")
    out = cli("check", "x.log", cwd=tmp_path)
    assert out.returncode == 2
    assert out.stderr.splitlines() == [
        "logmetrics: error: x.log: no parser claims 'x.log' and no sniff scored above 0.3 (none scored); "
        "name one with --parser NAME (see 'logmetrics parsers')"]


def test_check_reads_a_compose_file_per_service_as_watch_does(tmp_path: Path) -> None:
    """docker compose logs of two services: check routes and reports each service by itself, and says
    which lines no parser takes (compose's 'Attaching to') without failing."""
    (tmp_path / "stack.log").write_text(
        "Attaching to api-1, ui-1\n"
        'api-1  | INFO:     10.0.0.5:51234 - "POST /openai/v1/chat/completions HTTP/1.1" 200 OK\n'
        "ui-1   | Listening on http://0.0.0.0:3000\n"
        'api-1  | INFO:     10.0.0.5:51236 - "GET /openai/v1/models HTTP/1.1" 200 OK\n')
    out = cli("check", "stack.log", cwd=tmp_path)
    assert out.returncode == 0, out.stderr
    heads = [line.split(":", 1)[0] for line in out.stdout.splitlines() if line.startswith("parser ")]
    assert heads == ["parser api (entry point logmetrics_parsers.api",
                     "parser ui (entry point logmetrics_parsers.ui"], out.stdout
    assert "[service api-1] (compose envelope): 2 lines, 2 records, 2 matched" in out.stdout
    assert "[service ui-1] (compose envelope): 1 line, 1 record, 1 matched" in out.stdout
    assert out.stdout.startswith("the envelope's own lines on stack.log (compose envelope): 1 line, written by "
                                 "compose itself, not an app: read by no parser, counted unmatched\n"), out.stdout


def test_check_names_the_envelope_and_pm2s_own_lines(tmp_path: Path) -> None:
    """pm2 logs output: check names the envelope it peeled, reports the app's lines with their parser,
    and says that pm2's own lines are the process manager's, not that a parser should be named."""
    (tmp_path / "pm2.log").write_text(
        "PM2        | App [api:0] starting in -fork mode-\n"
        '0|api      | INFO:     10.0.0.5:51234 - "POST /openai/v1/chat/completions HTTP/1.1" 200 OK\n')
    out = cli("check", "pm2.log", cwd=tmp_path)
    assert out.returncode == 0, out.stderr
    assert "on pm2.log [service api] (pm2 envelope): 1 line, 1 record, 1 matched" in out.stdout, out.stdout
    assert ("the envelope's own lines on pm2.log [service PM2] (pm2 envelope): 1 line, written by pm2 itself, "
            "not an app: read by no parser, counted unmatched") in out.stdout
    assert "--parser" not in out.stdout
    assert "\nunmatched records: none\n" in out.stdout


def test_check_says_how_many_series_it_does_not_list(tmp_path: Path) -> None:
    """A rule with more series than --top shows: the rest are summed in one line, not dropped."""
    access = "".join(f'INFO:     10.0.0.5:5{i:04d} - "GET /openai/v1/models HTTP/1.1" {code} OK\n'
                     for i, code in enumerate((200, 201, 202, 203, 204)))
    (tmp_path / "api.log").write_text(access)
    out = cli("check", "--parser", "api", "--top", "2", "api.log", cwd=tmp_path)
    assert out.returncode == 0, out.stderr
    assert "     3 x 3 more series (--top shows more)" in out.stdout, out.stdout


def test_watch_logs_the_claim_and_the_failure(tmp_path: Path) -> None:
    """'watch -v' logs the claim that routed one stream, and warns why another got no parser."""
    (tmp_path / "vllm-0.log").write_text(LOGS["vllm"][1])
    (tmp_path / "x.log").write_text("hello\n")
    out = cli("-v", "watch", "--oneshot", ".", cwd=tmp_path)
    assert out.returncode == 0, out.stderr
    assert "INFO: stream ./vllm-0.log: parser vllm (claimed by name: 'vllm-0.log' matches '*vllm*')" in out.stderr
    assert ("WARNING: stream ./x.log: no parser claims 'x.log' or './x.log' and no sniff scored above 0.3 "
            "(none scored); name one with --parser NAME") in out.stderr


# -- a weak sniff waits for a telling line ---------------------------------------------------------

VLLM_STATS = ("INFO 04-10 03:35:27 [loggers.py:80] Engine 000: Avg prompt throughput: 12.5 tokens/s, Avg "
              "generation throughput: 40.1 tokens/s, Running: 3 reqs, Waiting: 1 reqs, GPU KV cache usage: "
              "4.2%, Prefix cache hit rate: 0.0%\n")
ACCESS = "".join(f'INFO:     10.0.0.1:{40000 + i} - "POST /v1/chat/completions HTTP/1.1" 200 OK\n' for i in range(300))


def engine_with_store() -> tuple[Any, Any]:
    """An engine over the installed parsers, routing by itself, and its store."""
    from logmetrics.engine.engine import Engine
    from logmetrics.plugins import discover
    from logmetrics.store.store import Store

    store = Store()
    return Engine(discover(), store), store


def test_access_lines_before_the_first_stats_line_do_not_decide(tmp_path: Path) -> None:
    """A busy vLLM log that starts with 300 access lines a gateway prints too is still vLLM's."""
    (tmp_path / "engine.log").write_text(ACCESS + VLLM_STATS + ACCESS)
    got = parse(cli("watch", "--oneshot", "engine.log", cwd=tmp_path).stdout)
    assert total(got, "http_requests_total", backend="vllm") == 600
    assert total(got, "http_requests_total", backend="api") == 0
    assert total(got, "llm_requests_running", backend="vllm") == 3


def test_a_leapfrogai_whisper_log_with_a_long_quiet_start_is_whisper_s(tmp_path: Path) -> None:
    """LeapfrogAI's whisper backend may log hundreds of task set-up lines (metadata, language,
    temperature) before its first task line: the stream is still routed to whisper."""
    head = "Initializing LeapfrogAI\nStarting server. Listening on 0.0.0.0:50051.\n"
    quiet = "".join(f"__main__: 2026-01-05 09:00:{i % 60:02d},631 | INFO | main.py:66 >>> Updated metadata: "
                    f"Temperature=0.0\n__main__: 2026-01-05 09:00:{i % 60:02d},687 | INFO | main.py:101 >>> "
                    "Language en is supported\n" for i in range(150))
    task = ("__main__: 2026-01-05 09:01:00,668 | INFO | main.py:92 >>> Task transcribe is starting\n"
            "__main__: 2026-01-05 09:01:04,640 | INFO | main.py:158 >>> Transcription complete!\n")
    (tmp_path / "backend.log").write_text(head + quiet + task)
    got = parse(cli("watch", "--oneshot", "backend.log", cwd=tmp_path).stdout)
    assert total(got, "llm_requests_total", backend="whisper") == 1


def test_a_weak_stream_waits_for_the_telling_line_then_counts_everything() -> None:
    """Live: access lines alone are held, not routed; the stats line that follows routes them all to vLLM."""
    from logmetrics.sources.chunks import Chunk

    engine, store = engine_with_store()
    engine.feed(Chunk("engine.log", ACCESS.encode(), time.time()))
    engine.idle()
    assert not engine.streams["engine.log"].routed
    engine.feed(Chunk("engine.log", VLLM_STATS.encode(), time.time()))
    engine.finish()
    stream = engine.streams["engine.log"]
    assert stream.parser is not None and stream.parser.name == "vllm"
    assert sum(v for k, v in store.counters.items() if k[0] == "http_requests_total") == 300


def test_a_weak_stream_is_routed_on_what_it_showed_after_the_wait(monkeypatch: pytest.MonkeyPatch) -> None:
    """Live: with no telling line, a quiet poll after the wait routes the stream on its weak sniff."""
    from logmetrics.engine import engine as engine_mod
    from logmetrics.sources.chunks import Chunk

    engine, store = engine_with_store()
    engine.feed(Chunk("gw.log", ACCESS.encode(), time.time()))
    engine.idle()
    assert not engine.streams["gw.log"].routed
    monkeypatch.setattr(engine_mod, "WEAK_HOLD_SECONDS", 0.0)
    engine.idle()
    stream = engine.streams["gw.log"]
    assert stream.routed and stream.parser is not None and stream.parser.name == "api"
    engine.finish()  # the last record, held back until the stream is quiet
    assert sum(v for k, v in store.counters.items() if k[0] == "http_requests_total") == 300


def test_check_of_a_directory_gives_a_line_per_file_and_totals_per_parser(tmp_path: Path) -> None:
    """check of a directory: one line per log with its parser and matched share, totals per parser,
    a file no parser takes said on its line, the golden file beside a sample left out, and a file
    name with a newline in it escaped on its one line."""
    logs = tmp_path / "logs"
    logs.mkdir()
    (logs / "vllm-0.log").write_text('INFO:     10.0.0.1:5 - "GET /health HTTP/1.1" 200 OK\nnoise\n')
    (logs / "vllm-1.log").write_text('INFO:     10.0.0.1:5 - "GET /health HTTP/1.1" 200 OK\n' * 3)
    (logs / "notes.txt").write_text("nothing any parser knows\n")
    (logs / "vllm-0.expected.prom").write_text("# HELP x y\n# TYPE x counter\nx 1\n")
    (logs / "odd\nname.log").write_text('INFO:     10.0.0.1:5 - "GET /health HTTP/1.1" 200 OK\n')
    out = cli("check", "logs", cwd=tmp_path)
    assert out.returncode == 0, out.stderr
    rows = [line.split() for line in out.stdout.splitlines()]
    assert ["vllm", "2", "1", "0", "50", "%", "logs/vllm-0.log"] in rows, out.stdout
    assert ["api", "1", "1", "0", "100", "%", "logs/odd\\nname.log"] in rows, out.stdout  # one row, escaped
    assert ["vllm", "3", "3", "0", "100", "%", "logs/vllm-1.log"] in rows, out.stdout
    assert ["vllm", "2", "5", "4", "0", "80", "%"] in rows, out.stdout
    assert any(line.startswith("-") and "logs/notes.txt: no parser claims" in line for line in out.stdout.splitlines())
    assert "expected.prom" not in out.stdout


def test_check_of_a_missing_file_is_an_error(tmp_path: Path) -> None:
    """check names a missing file and exits 2, alone or beside a file that exists, as watch does."""
    (tmp_path / "vllm-0.log").write_text('INFO:     10.0.0.1:5 - "GET /health HTTP/1.1" 200 OK\n')
    for args in (("nope.log",), ("nope.log", "vllm-0.log")):
        out = cli("check", *args, cwd=tmp_path)
        assert out.returncode == 2 and "nope.log: no such file or directory" in out.stderr, out.stderr


def test_check_on_a_file_of_a_tools_own_lines_only_says_so(tmp_path: Path) -> None:
    """A pm2 log of pm2's own lines only: check says whose they are and exits 0 (no parser is missing)."""
    (tmp_path / "pm2.log").write_text("[TAILING] Tailing last 15 lines for [all] processes (change the value with "
                                      "--lines option)\n" + "PM2        | App [api:0] online\n" * 3)
    out = cli("check", "pm2.log", cwd=tmp_path)
    assert out.returncode == 0, out.stderr
    assert "the envelope's own lines on pm2.log [service PM2] (pm2 envelope): 3 lines" in out.stdout, out.stdout
    assert "--parser" not in out.stdout + out.stderr
