"""The mixed benchmark's own parts: its corpus is deterministic, its checker catches a wrong figure,
and the mtail program it is compared with agrees with the generator (when mtail is installed)."""

from __future__ import annotations

import json
import shutil
import subprocess
from pathlib import Path

import pytest

from bench.gen_backends import mmss, rust_duration
from bench.gen_mix import expected_path, write_mix
from bench.mixcheck import check_mix

BENCH = Path(__file__).resolve().parent.parent / "bench"


@pytest.fixture(scope="module")
def corpus(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, dict[str, object]]:
    """A small mixed corpus and its expected figures."""
    out = tmp_path_factory.mktemp("mix") / "mix"
    return out, write_mix(out, 3000, 11)


def test_same_seed_same_bytes(corpus: tuple[Path, dict[str, object]], tmp_path: Path) -> None:
    """The same seed writes the same files and the same figures."""
    out, doc = corpus
    again = tmp_path / "mix"
    assert write_mix(again, 3000, 11) == doc
    for f in sorted(out.iterdir()):
        assert (again / f.name).read_bytes() == f.read_bytes(), f.name
    assert json.loads(expected_path(again).read_text()) == doc


def test_figures_add_up(corpus: tuple[Path, dict[str, object]]) -> None:
    """Every file is there with the lines it says, and each backend has the figures it feeds."""
    out, doc = corpus
    files = doc["files"]
    assert isinstance(files, dict)
    for name, fig in files.items():
        assert sum(1 for _ in (out / name).open(encoding="utf-8")) == fig["lines"], name
    assert doc["lines"] == sum(f["lines"] for f in files.values())
    assert files["llama-server.log"]["llm_prompt_tokens_total"] > 0
    assert files["whisper.log"]["llm_audio_seconds_total"] > 0
    assert files["faster-whisper.log"]["llm_audio_seconds_total"] > 0
    assert files["text-embeddings.log"]["llm_embeddings_total"] > 0
    assert files["text-embeddings-inference.log"]["histograms"]["llm_request_duration_seconds"]["count"] > 0


def test_duration_notations() -> None:
    """Durations are printed as faster-whisper and Rust print them."""
    assert mmss(969_828) == "16:09.828"
    assert mmss(5_639_990) == "01:33:59.990"
    assert rust_duration(1_207_716_998) == "1.207716998s"
    assert rust_duration(11_232_786) == "11.232786ms"
    assert rust_duration(686_203) == "686.203µs"
    assert rust_duration(2_000_000) == "2ms"
    assert rust_duration(999) == "999ns"


def test_checker_catches_a_wrong_figure(corpus: tuple[Path, dict[str, object]]) -> None:
    """An exposition that differs from the figures in one value is reported, one that agrees is not."""
    _, doc = corpus
    files = doc["files"]
    assert isinstance(files, dict)
    emb = files["text-embeddings.log"]["llm_embeddings_total"]
    src = "/x/text-embeddings.log"
    good = f'llm_embeddings_total{{backend="embeddings",source="{src}",model="m"}} {emb}\n'
    problems, _ = check_mix(good, doc, self_metrics=False, per_record=True)
    assert not [p for p in problems if "llm_embeddings_total" in p]
    bad = good.replace(f"}} {emb}", f"}} {emb + 1}")
    problems, _ = check_mix(bad, doc, self_metrics=False, per_record=True)
    assert [p for p in problems if p.startswith("text-embeddings.log: llm_embeddings_total")]


@pytest.mark.skipif(shutil.which("mtail") is None, reason="mtail is not installed (Debian package mtail)")
def test_mtail_program_agrees(corpus: tuple[Path, dict[str, object]]) -> None:
    """The mtail program of the benchmark yields every figure the generator computed."""
    out, doc = corpus
    res = subprocess.run(
        ["mtail", "--one_shot", "--one_shot_format", "prometheus", "--progs", str(BENCH / "llm-mix.mtail"),
         "--logs", str(out / "*"), "--address", "127.0.0.1", "--port", "0", "--logtostderr"],
        capture_output=True, text=True, timeout=120, check=True)
    problems, notes = check_mix(res.stdout, doc, self_metrics=False, per_record=True)
    assert problems == []
    assert notes == []
