"""Auto-routing: neutrally named logs of each backend reach the right parser by sniffing, and
'logmetrics check' and 'watch -v' say which parser a stream got and why."""

from __future__ import annotations

import re
import subprocess
import sys
from importlib.metadata import entry_points
from pathlib import Path

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


def test_watch_logs_the_claim_and_the_failure(tmp_path: Path) -> None:
    """'watch -v' logs the claim that routed one stream, and warns why another got no parser."""
    (tmp_path / "vllm-0.log").write_text(LOGS["vllm"][1])
    (tmp_path / "x.log").write_text("hello\n")
    out = cli("-v", "watch", "--oneshot", ".", cwd=tmp_path)
    assert out.returncode == 0, out.stderr
    assert "INFO: stream ./vllm-0.log: parser vllm (claimed by name: 'vllm-0.log' matches '*vllm*')" in out.stderr
    assert ("WARNING: stream ./x.log: no parser claims 'x.log' or './x.log' and no sniff scored above 0.3 "
            "(none scored); name one with --parser NAME") in out.stderr
