"""'logmetrics watch' on files present at start (read from their end): the model and readiness
learned from what came before, and static labels (--label)."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

from tests.helpers import Server, append, total

ROOT = Path(__file__).resolve().parent.parent
SAMPLES = ROOT / "samples" / "vllm"
STATS = ("(APIServer pid=1) INFO 08-21 14:10:00 [loggers.py:123] Engine 000: Avg prompt throughput: 10.0 tokens/s, "
         "Avg generation throughput: 20.0 tokens/s, Running: 4 reqs, Waiting: 0 reqs, GPU KV cache usage: 5.0%, "
         "Prefix cache hit rate: 0.0%\n")


def running(srv: Server, **labels: str) -> float:
    """llm_requests_running over the series with these labels."""
    return total(srv.samples(), "llm_requests_running", **labels)


def test_a_file_read_from_its_end_still_gets_its_model_and_readiness(tmp_path: Path) -> None:
    """The start-up lines before the end name the model; the ready line makes backend_ready 1."""
    log = tmp_path / "vllm.log"
    shutil.copy(SAMPLES / "v1-0.10.log", log)
    srv = Server(str(log), "--poll-interval", "0.1")
    try:
        append(log, STATS)
        got = srv.wait_for(lambda s: total(s, "logmetrics_lines_matched_total") == 1)  # parsed, not only read
        assert total(got, "llm_requests_running", model="qwen2.5-7b") == 4
        assert total(got, "llm_requests_running", model="unknown") == 0
        assert total(got, "backend_ready", model="qwen2.5-7b") == 1
        assert total(got, "backend_restarts_total") == 0  # learned, not counted
        assert total(got, "logmetrics_lines_matched_total") == 1
    finally:
        assert srv.stop() == 0


def test_a_docker_json_file_is_unwrapped_before_it_is_learned(tmp_path: Path) -> None:
    """The head of a Docker json-file log is unwrapped like its lines: the model is found in it."""
    log = tmp_path / "container-json.log"
    shutil.copy(SAMPLES / "docker-json.log", log)
    srv = Server(str(log), "--poll-interval", "0.1")
    try:
        line = json.dumps({"log": STATS, "stream": "stdout", "time": "2025-04-06T08:00:00.000000000Z"})
        append(log, line + "\n")
        srv.wait_for(lambda s: total(s, "logmetrics_lines_matched_total") == 1)
        assert running(srv, model="gemma-3-12b") == 4
    finally:
        assert srv.stop() == 0


def test_static_model_labels_per_input(tmp_path: Path) -> None:
    """--label model=... for every input, and GLOB:model=... for some, winning over the learned name."""
    a, b = tmp_path / "vllm-a.log", tmp_path / "vllm-b.log"
    shutil.copy(SAMPLES / "v1-0.10.log", a)
    b.write_text("")
    srv = Server(str(a), str(b), "--poll-interval", "0.1", "--label", "model=fallback",
                 "--label", "*-a.log:model=llama-3-8b")
    try:
        append(a, STATS)
        append(b, STATS.replace("Running: 4", "Running: 2"))
        srv.wait_for(lambda s: total(s, "logmetrics_lines_matched_total") == 2)
        assert running(srv, model="llama-3-8b", source=str(a)) == 4
        assert running(srv, model="fallback", source=str(b)) == 2
        assert running(srv, model="qwen2.5-7b") == 0
    finally:
        assert srv.stop() == 0


def test_a_label_that_cannot_be_static_is_refused(tmp_path: Path) -> None:
    """--label route=... is one clear line on stderr and exit code 2."""
    log = tmp_path / "vllm.log"
    log.write_text("")
    for spec, words in (("route=/x", "only model can be set"), ("model", "expects [GLOB:]NAME=VALUE")):
        proc = subprocess.run([sys.executable, "-m", "logmetrics", "watch", "--oneshot", "--label", spec, str(log)],
                              capture_output=True, text=True, timeout=60)
        assert proc.returncode == 2
        assert words in proc.stderr and len(proc.stderr.strip().splitlines()) == 1
