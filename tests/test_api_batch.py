"""The API parser's runs of access lines (``parse_run``) give what ``parse`` gives record by record."""

from __future__ import annotations

import random
from pathlib import Path

import pytest
from logmetrics_parsers.api import ApiParser

from logmetrics.engine.parsing import parse_records
from logmetrics.events import Event
from logmetrics.records import Batch, Record
from logmetrics.testing import assert_fast_path_matches

SAMPLES = sorted((Path(__file__).resolve().parent.parent / "samples" / "api").glob("*.log"))
#: Access lines in the forms the fast path takes, and near misses that must go through ``parse``.
LINES = [
    'INFO:     10.0.0.1:5 - "GET /openai/v1/models HTTP/1.1" 200 OK',
    '2026-09-09 12:20:52 +0200 INFO:     10.0.0.1:5 - "POST /openai/v1/chat/completions HTTP/1.1" 200 OK',
    '2026-09-09T12:20:52.123Z INFO:     [::1]:5 - "GET /openai/v1/threads/thread_abc123/runs HTTP/1.1" 404',
    '[2026-09-09 12:20:52,120] INFO:     10.0.0.1:5 - "DELETE /openai/v1/files/892f902bd23f0824 HTTP/1.1" 500',
    '(ApiWorker pid=12) INFO:     10.0.0.1:5 - "GET /healthz HTTP/1.1" 200 OK',
    '[api-7d9] INFO:     10.0.0.1:5 - "GET /wp-login.php HTTP/1.1" 404 Not Found',
    'INFO:     10.0.0.1:5 - "BREW /openai/v1/models HTTP/1.1" 418',
    'INFO:     10.0.0.1:5 - "GET /leapfrogai/v1/rag/indexing/42 HTTP/1.1" 503 Service Unavailable',
    'INFO: proxied: 10.0.0.1:5 - "GET / HTTP/1.1" 200',
    'ERROR:    Exception in ASGI application',
    'Traceback (most recent call last):',
    '  File "app.py", line 1, in f',
    'httpx.ConnectError: All connection attempts failed',
    '2026-09-09 12:20:41 +0200 INFO:     Application startup complete.',
    "",
]


@pytest.mark.parametrize("path", SAMPLES, ids=[p.name for p in SAMPLES])
def test_runs_equal_per_record_path(path: Path) -> None:
    """On every sample, runs of access lines in any batch size give what record-by-record parsing gives."""
    want = assert_fast_path_matches(ApiParser, path.read_text())
    assert want[1] > 0


@pytest.mark.parametrize("seed", range(30))
def test_runs_equal_per_record_path_on_shuffled_lines(seed: int) -> None:
    """The same holds on random mixtures of the samples' lines, access lines and near misses."""
    lines = [line for path in SAMPLES for line in path.read_text().splitlines()]
    rnd = random.Random(seed)
    items = rnd.sample(lines, rnd.randint(5, 60)) + rnd.choices(LINES, k=rnd.randint(0, 200))
    rnd.shuffle(items)
    assert_fast_path_matches(ApiParser, "\n".join(items) + "\n", (None, rnd.randint(100, 3000)))


def test_access_lines_never_reach_parse(monkeypatch: pytest.MonkeyPatch) -> None:
    """A batch of access lines is counted without one ``parse`` call, one event per label set."""
    calls: list[str] = []
    real = ApiParser.parse

    def spy(self: ApiParser, record: Record) -> list[Event]:
        calls.append(record.text)
        return list(real(self, record))

    monkeypatch.setattr(ApiParser, "parse", spy)
    text = ("\n".join(LINES[:8]) + "\n") * 50
    events, matched, lines, errors, _ = parse_records(ApiParser(), Batch("test", text, 0.0, text.count("\n")))
    assert calls == []
    assert (matched, lines, errors) == (400, 400, 0)
    assert len(events) <= 8
    assert sum(e.value for e in events if isinstance(e.value, int)) == 400
