"""Access lines behind the prefixes deployments add, counted by every parser that reads access lines."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from logmetrics_parsers.common import access_line
from logmetrics_parsers.vllm import VllmParser

from logmetrics.events import values_of
from tests.helpers import engine_batch, parse, total

#: Access lines as process managers and logging configs print them, each counted once.
PREFIXED = [
    ('2026-09-09 12:20:52 +0200 INFO:     10.0.0.1:16051 - "GET /api/config/yaml HTTP/1.1" 200 OK',
     ("GET", "/api/config/yaml", "200")),
    ('0|worker  | INFO:     10.0.0.2:40112 - "POST /v1/chat/completions HTTP/1.1" 200 OK',
     ("POST", "/v1/chat/completions", "200")),
    ('Sep 09 12:21:03 gw-1 uvicorn[812]: INFO:     10.0.0.3:51000 - "GET /v1/models HTTP/1.1" 200 OK',
     ("GET", "/v1/models", "200")),
    ('INFO   10.42.0.1:43976 - "GET /v1/api/health HTTP/1.1" 200', ("GET", "/v1/api/health", "200")),
    ('INFO\t10.42.0.1:43978 - "GET /v1/api/health HTTP/1.1" 200', ("GET", "/v1/api/health", "200")),
    ('2026-09-09 12:21:05,120 - uvicorn.access - INFO - 10.0.0.4:33000 - "DELETE /v1/files/f1 HTTP/1.1" 204',
     ("DELETE", "/v1/files/f1", "204")),
    ('[2026-09-09 12:21:06 +0000] [12] [INFO] 10.0.0.5:33002 - "GET /v1/models HTTP/1.1" 200',
     ("GET", "/v1/models", "200")),
    ('12:21:07 web.1  | 10.0.0.6 - - [09/Sep/2026:12:21:07 +0000] "GET /health HTTP/1.1" 200 2 "-" "kube-probe/1.30"',
     ("GET", "/health", "200")),
    ('2026-09-09T12:21:08.123Z 10.0.0.7:5 - "POST /v1/embeddings HTTP/1.1" 400 Bad Request',
     ("POST", "/v1/embeddings", "400")),
    ('2026-09-09 12:20:52 UTC INFO:     10.0.0.9:1 - "GET /health HTTP/1.1" 200 OK', ("GET", "/health", "200")),
    ('2026-09-09 12:20:52.123456 CEST INFO:     10.0.0.9:2 - "GET /health HTTP/1.1" 200 OK',
     ("GET", "/health", "200")),
    # vLLM 0.10+'s process prefix behind another
    ('0|vllm  | (APIServer pid=1) INFO:     10.0.0.9:3 - "POST /v1/completions HTTP/1.1" 200 OK',
     ("POST", "/v1/completions", "200")),
    ('gpu-1 vllm[123]: (APIServer pid=1) INFO:     10.0.0.9:4 - "POST /v1/completions HTTP/1.1" 200 OK',
     ("POST", "/v1/completions", "200")),
    ('2026-09-09T12:21:08.123Z (APIServer pid=1) INFO:     10.0.0.9:5 - "GET /health HTTP/1.1" 200 OK',
     ("GET", "/health", "200")),
    ('INFO:uvicorn.access:10.0.0.8:5 - "GET /v1/models HTTP/1.1" 200', ("GET", "/v1/models", "200")),
]
#: Lines that mention or quote an access line inside a message, and uvicorn's TRACE lines: none counts.
QUOTED = [
    '2026-09-09 12:21:08 +0200 INFO:     upstream said: 10.0.0.9:1 - "GET /v1/models HTTP/1.1" 200 OK',
    '2026-09-09 12:21:09 +0200 WARNING:  replaying "10.0.0.9:1 - "GET /v1/models HTTP/1.1" 200 OK"',
    "WARNING: request failed 10.0.0.9:1 - \"GET /v1/models HTTP/1.1\" 500",
    '2026-09-09 12:21:10 +0200 INFO:     HTTP Request: POST http://vllm:8000/v1/chat/completions "HTTP/1.1 200 OK"',
    "TRACE:    10.0.0.1:16051 - HTTP connection made",
    'TRACE:    10.0.0.1:1 - "GET /v1/models HTTP/1.1" 200 OK',
    'INFO:app.chat:user prompt: INFO:     1.2.3.4:1 - "GET /v1/models HTTP/1.1" 200 OK',
    'INFO:     user prompt: INFO:     1.2.3.4:1 - "GET /v1/models HTTP/1.1" 200 OK',
    'ERROR:    Exception while handling: INFO:     1.2.3.4:1 - "GET /v1/models HTTP/1.1" 500 Internal Server Error',
    '2026-09-09 12:20:52,123 INFO user prompt: INFO 1.2.3.4:1 - "GET /v1/models HTTP/1.1" 200',
    'some text: [INFO] 1.2.3.4:1 - "GET /v1/models HTTP/1.1" 200',
    'Sep 09 12:21:03 host uvicorn[812]: the user typed INFO: 1.2.3.4:1 - "GET /v1/models HTTP/1.1" 200',
    '0|worker  | user wrote INFO: 1.2.3.4:1 - "GET /v1/models HTTP/1.1" 200',
    'message 2026-09-09 12:20:52 INFO: 1.2.3.4:1 - "GET /v1/models HTTP/1.1" 200',
    'a: b: c: INFO: 1.2.3.4:1 - "GET /v1/models HTTP/1.1" 200',
    'prompt - INFO: 1.2.3.4:1 - "GET /v1/models HTTP/1.1" 200',
    "TRACE:    10.0.0.1:16051 - ASGI [1] Started scope={'type': 'http', 'method': 'GET', 'path': '/v1/models'}",
    'the user typed (APIServer pid=1) INFO:     1.2.3.4:1 - "GET /v1/models HTTP/1.1" 200 OK',
]


@pytest.mark.parametrize(("line", "want"), PREFIXED, ids=[w[0] + " " + w[1] for _, w in PREFIXED])
def test_access_line_after_a_prefix(line: str, want: tuple[str, str, str]) -> None:
    """An access line is read after a time, pm2, journald, gunicorn or logging-config prefix, or a padded level."""
    assert access_line(line) == want


@pytest.mark.parametrize("line", QUOTED)
def test_a_quoted_access_line_is_none(line: str) -> None:
    """An access line quoted inside a message, an httpx request line or a TRACE line is no access line."""
    assert access_line(line) is None


@pytest.mark.parametrize("parser", ["api", "vllm", "whisper", "embeddings", "llamacpp"])
def test_every_parser_that_reads_access_lines_counts_prefixed_ones(parser: str, tmp_path: Path) -> None:
    """Each parser that reads uvicorn access lines counts every prefixed one once and no quoted one."""
    log = tmp_path / "access.log"
    lines = [line for pair in zip(QUOTED, [p for p, _ in PREFIXED], strict=False) for line in pair]
    lines += [p for p, _ in PREFIXED[len(QUOTED):]]
    log.write_text("\n".join(lines) + "\n")
    cmd = [sys.executable, "-m", "logmetrics", "watch", "--oneshot", "--parser", parser, str(log)]
    out = subprocess.run(cmd, capture_output=True, text=True, timeout=120, check=True).stdout
    samples = parse(out)
    assert total(samples, "http_requests_total") == len(PREFIXED)
    assert total(samples, "http_requests_total", method="GET", code="200") == 10


def test_vllm_counts_a_prefixed_line_among_scanned_ones(tmp_path: Path) -> None:
    """Among uvicorn's own access lines, a vLLM stream still counts each prefixed one, led by
    ``INFO:`` or not, and no access line quoted in a prompt."""
    scanned = 'INFO:     10.0.0.1:1 - "GET /health HTTP/1.1" 200 OK'
    prompt = ("DEBUG 01-05 09:00:00 [logger.py:47] Request x details: prompt: 'why "
              "\"POST /v1/completions HTTP/1.1\" 500?', prompt_token_ids: None.")
    lines = [scanned, prompt, PREFIXED[-1][0], scanned, prompt, PREFIXED[1][0], scanned, QUOTED[7]]
    log = tmp_path / "vllm.log"
    log.write_text("\n".join(lines * 3) + "\n")
    cmd = [sys.executable, "-m", "logmetrics", "watch", "--oneshot", "--parser", "vllm", str(log)]
    samples = parse(subprocess.run(cmd, capture_output=True, text=True, timeout=120, check=True).stdout)
    assert total(samples, "http_requests_total", route="/health") == 9
    assert total(samples, "http_requests_total", route="/v1/models") == 3
    assert total(samples, "http_requests_total", route="/v1/chat/completions") == 3
    assert total(samples, "http_requests_total") == 15


#: Lines of uvicorn's own form, which the vLLM scan counts (one behind a process prefix too), and
#: lines around them that hold `` HTTP/`` and count nothing: a prompt quoting one, chatter.
SCANNED = ['INFO:     10.0.0.1:1 - "GET /health HTTP/1.1" 200 OK',
           '(APIServer pid=7) INFO:     10.0.0.2:2 - "POST /v1/completions HTTP/1.1" 200 OK']
NOISE = ["DEBUG 01-05 09:00:00 [logger.py:47] Request x details: prompt: 'a \"GET / HTTP/1.1\" 200 b'",
         "INFO 01-05 09:00:01 [loggers.py:118] Engine 000: Avg prompt throughput: 1.0 tokens/s",
         "DEBUG 01-05 09:00:02 [core.py:9] EngineCore loop: nothing to do"]


@settings(max_examples=200, deadline=None)
@given(st.lists(st.tuples(st.sampled_from(["scanned", "prefixed", "quoted", "noise"]), st.integers(0, 16)),
                max_size=40), st.booleans())
def test_vllm_counts_each_access_line_once_among_any_others(picks: list[tuple[str, int]], crlf: bool) -> None:
    """Whatever surrounds them, the vLLM scan counts every access line of uvicorn's form and every
    prefixed one once, and none that a message quotes."""
    pools = {"scanned": SCANNED, "prefixed": [p for p, _ in PREFIXED], "quoted": QUOTED, "noise": NOISE}
    lines = [pools[kind][i % len(pools[kind])] for kind, i in picks]
    text = ("\r\n" if crlf else "\n").join(lines) + "\n"
    events, _ = engine_batch(VllmParser(), text)
    counted = sum(sum(values_of(e)) for e in events if e.metric == "http_requests_total")
    assert counted == sum(kind in ("scanned", "prefixed") for kind, _ in picks)


def test_a_long_time_before_a_line_that_is_no_access_line_is_turned_away_at_once() -> None:
    """A date and time with many digits before an access line that is not one (a word after the
    time) is refused within seconds: the prefix's tokens are not tried split in every way."""
    code = ("from logmetrics_parsers.common import access_line\n"
            "line = '2026-09-09 12:20:52.123456789 12:20:52.123456 XYZW 10.0.0.1:1 - \"GET /h HTTP/1.1\" 200'\n"
            "assert access_line(line) is None\n")
    subprocess.run([sys.executable, "-c", code], timeout=20, check=True)
