"""The whole stack on one Kubernetes node: every backend's log under /var/log/pods, no --parser."""

from __future__ import annotations

from pathlib import Path

from tests.helpers import Samples
from tests.test_engine import oneshot_metrics
from tests.test_layouts import UID, cri

ROOT = Path(__file__).resolve().parent.parent
#: container -> (backend, sample): the containers LeapfrogAI's charts run, each with one of our samples
STACK = {
    "vllm": ("vllm", "samples/vllm/v1-0.10.log"),
    "llama-cpp-python": ("llamacpp", "samples/llamacpp/python-server.log"),
    "whisper": ("whisper", "samples/whisper/leapfrog.log"),
    "text-embeddings": ("embeddings", "samples/embeddings/leapfrog.log"),
    "api": ("api", "samples/api/leapfrog-uvicorn.log"),
    "ui": ("ui", "samples/ui/leapfrogai-ui.log"),
    # Supabase: one container per component, each its own backend
    **{f"supabase-{c}": (f"supabase-{c}", f"samples/supabase/{s}.log") for c, s in (
        ("kong", "kong"), ("rest", "rest"), ("auth", "auth"), ("storage", "storage"), ("db", "postgres"),
        ("realtime", "realtime"))},
}
#: what each backend's requests or work are counted in
WORK = ("http_requests_total", "llm_requests_total", "llm_prompt_tokens_total", "llm_generation_tokens_total",
        "llm_audio_seconds_total", "backend_restarts_total")


def build(root: Path) -> dict[str, str]:
    """The stack laid out as kubelet writes it, in CRI; the source label each container gets."""
    sources = {}
    for container, (_backend, sample) in STACK.items():
        pod = f"{container}-7d9f8c-x2x4q"
        log = root / "pods" / f"leapfrogai_{pod}_{UID}" / container / "0.log"
        log.parent.mkdir(parents=True)
        log.write_text(cri((ROOT / sample).read_text()))
        sources[container] = f"leapfrogai/{pod}/{container}"
    return sources


def series(samples: Samples, backend: str) -> dict[str, dict[str, float]]:
    """A backend's series by metric name: source -> summed value."""
    out: dict[str, dict[str, float]] = {}
    for (name, labels), value in samples.items():
        got = dict(labels)
        if got.get("backend") == backend:
            per = out.setdefault(name, {})
            per[got["source"]] = per.get(got["source"], 0.0) + value
    return out


def test_every_backend_of_the_stack_is_routed_and_labelled_by_its_pod(tmp_path: Path) -> None:
    """Each backend gets its work counted and its error series, under namespace/pod/container only."""
    sources = build(tmp_path / "pods-root")
    got = oneshot_metrics(str(tmp_path / "pods-root"))
    for container, (backend, _sample) in STACK.items():
        mine = series(got, backend)
        assert mine, f"{backend}: no series"
        assert {s for per in mine.values() for s in per} == {sources[container]}, backend
        assert sum(sum(mine.get(n, {}).values()) for n in WORK) > 0, f"{backend}: no requests or tokens"
        assert "backend_errors_total" in mine, backend
