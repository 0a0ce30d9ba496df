"""Wrapped streams end to end through --oneshot: layered envelopes."""

from __future__ import annotations

from pathlib import Path

from tests.helpers import access_line, parse, total
from tests.test_engine import oneshot, oneshot_metrics

HEALTH = 'INFO:     1.2.3.4:5 - "GET /health HTTP/1.1" 200 OK\n'


def test_compose_logs_with_timestamps_are_counted() -> None:
    """The issue's 'docker compose logs -t' line counts 1 request, as it does without the timestamp."""
    out = oneshot("-", "--parser", "vllm", stdin=f"vllm-1  | 2025-08-21T14:02:11.000000001Z {HEALTH}")
    got = parse(out.stdout)
    assert total(got, "http_requests_total", source="vllm-1", code="200") == 1
    assert total(got, "logmetrics_lines_unmatched_total", parser="vllm") == 0


def test_kubectl_prefix_and_timestamps_are_counted(tmp_path: Path) -> None:
    """'kubectl logs --prefix --timestamps' output counts per pod/container."""
    log = tmp_path / "pods.txt"
    log.write_text("".join(f"[pod/vllm-{i % 2}/vllm] 2025-08-21T14:02:{i:02d}.123456789Z {access_line(i)}"
                           for i in range(6)))
    got = oneshot_metrics("--parser", "vllm", str(log))
    assert total(got, "http_requests_total", source="vllm-0/vllm") == 3
    assert total(got, "http_requests_total", source="vllm-1/vllm") == 3


def test_forced_layered_envelope_flag(tmp_path: Path) -> None:
    """--envelope accepts a layered kind and peels every layer."""
    log = tmp_path / "compose.txt"
    log.write_text(f"api | 2025-08-21T14:02:11Z {HEALTH}" * 2)
    got = oneshot_metrics("--parser", "vllm", "--envelope", "compose+docker-timestamps", str(log))
    assert total(got, "http_requests_total", source="api") == 2
