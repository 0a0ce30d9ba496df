"""Files under a watched directory that are not logs: Prometheus text, compressed, binary."""

from __future__ import annotations

import gzip
import subprocess
import sys
from pathlib import Path

import pytest

from logmetrics.sources.filekinds import what_it_is
from tests.helpers import access_line, parse, total

PROM = (b"# a golden file: what the sample must give. Checked by hand:\n# - three requests\n"
        b"# HELP http_requests_total HTTP requests answered.\n# TYPE http_requests_total counter\n"
        b'http_requests_total{route="/v1/{id}",code="200"} 3.0\nllm_ready 1 1726000000000\n')


@pytest.mark.parametrize(("head", "kind"), [
    (PROM, "Prometheus text"),
    (gzip.compress(b"INFO: x\n"), "gzip"),
    (b"\x28\xb5\x2f\xfd" + b"\x00" * 20, "zstd"),
    (b"PK\x03\x04rest", "zip"),
    (b"\x7fELF\x02\x01\x01", "an executable"),
    (b"\x01" + b"".join(i.to_bytes(4, "little") for i in range(1000)), "binary"),
])
def test_what_is_no_log(head: bytes, kind: str) -> None:
    """Prometheus text with free comments, compressed and archive formats and binary data are told apart."""
    assert what_it_is(head) == kind


@pytest.mark.parametrize("head", [
    b"INFO:     Started server process [7]\nINFO:     Application startup complete.\n",
    b"\x00" * 300 + b"INFO 04-10 03:35:27 [api_server.py:1] vLLM API server version 0.10.0\n",
    b"# started by cron\nLoading model 42\nmodel 1\n",
    b"\x1b[32mINFO\x1b[0m  ready\r\n",
    b"",
    b"a\x00b\rab \xff\x00\nab\x00 b\n" * 20,
])
def test_logs_are_logs(head: bytes) -> None:
    """Text logs are logs: after NULs a copytruncate left, with a comment, ANSI colours, stray NULs, or empty."""
    assert what_it_is(head) is None


def test_a_watched_directory_skips_what_is_not_a_log(tmp_path: Path) -> None:
    """Only the log of a directory is read; the same non-log file named explicitly is read all the same."""
    (tmp_path / "vllm.log").write_text("".join(access_line(i) for i in range(3)))
    (tmp_path / "vllm.expected.prom").write_bytes(PROM)
    (tmp_path / "vllm.log.1").write_bytes(gzip.compress(access_line(9).encode() * 50))
    (tmp_path / "core").write_bytes(b"\x7fELF\x02\x01\x01" + b"\x00" * 64)

    def oneshot(*paths: Path) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
        cmd = [sys.executable, "-m", "logmetrics", "watch", "--oneshot", "--parser", "vllm", *map(str, paths)]
        proc = subprocess.run(cmd, capture_output=True, text=True, timeout=120, check=True)
        return parse(proc.stdout)

    out = oneshot(tmp_path)
    assert total(out, "http_requests_total") == 3
    assert total(out, "logmetrics_lines_read_total") == 3
    assert total(oneshot(tmp_path / "vllm.expected.prom"), "logmetrics_lines_read_total") == PROM.count(b"\n")


def test_a_log_that_began_like_prometheus_text_is_looked_at_again(tmp_path: Path) -> None:
    """A short first write of '# HELP'/'# TYPE' lines is skipped; once log lines follow, the file is read."""
    from logmetrics.sources.filekinds import not_a_log

    log = tmp_path / "vllm-starts.log"
    log.write_text("# HELP x y\n# TYPE x counter\n")
    assert not_a_log(str(log)) == "Prometheus text"
    with log.open("a") as f:
        f.write(access_line(1))
    assert not_a_log(str(log)) is None
