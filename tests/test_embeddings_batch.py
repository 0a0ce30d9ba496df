"""The text-embeddings parser's runs of frequent lines (``parse_run``) give what ``parse`` gives record by record."""

from __future__ import annotations

import random
from pathlib import Path

import pytest
from logmetrics_parsers.embeddings import EmbeddingsParser
from logmetrics_parsers.embeddings_tei import ANSI

from logmetrics.engine.parsing import parse_records
from logmetrics.records import Batch
from logmetrics.testing import assert_fast_path_matches

ROOT = Path(__file__).resolve().parent.parent
SAMPLES = sorted((ROOT / "samples" / "embeddings").glob("*.log"))
NOW = 1_731_500_000.0
HEAD = "__main__: 2024-11-13 10:{:02d}:{:02d},{:03d} | {} | main.py:25 >>> "
TEI = ('2025-03-04T08:01:{:02d}.000100Z  INFO {}{{total_time="{}" tokenization_time="1.204ms" queue_time="{}" '
       'inference_time="23.801ms"}}: text_embeddings_router::http::server: router/src/http/server.rs:1290: Success')

def lfai(minute: int, second: int, ms: int, msg: str, level: str = "INFO") -> str:
    """A LeapfrogAI-format line of the text-embeddings backend."""
    return HEAD.format(minute, second, ms, level) + msg


def blocks() -> list[str]:
    """Multi-line and tricky pieces to mix with the samples' lines (each ends with a newline)."""
    start = "processing CreateEmbedding request: char-length: 86 word-count: 12"
    bar = "Batches: 100%|██████████| 1/1 [00:00<00:00, 20.78it/s]"
    return [
        "\n".join([lfai(45, 1, 154, start), bar, lfai(45, 1, 354, "finished processing CreateEmbedding request, "
                                                                   "created 3 embeddings")]) + "\n",
        "\n".join([lfai(45, 2, 0, start), bar, bar, lfai(44, 59, 0, "finished processing CreateEmbedding request, "
                                                                    "created 2 embeddings")]) + "\n",
        lfai(45, 1, 500, start) + "\n" + lfai(45, 1, 500, "finished processing CreateEmbedding request, "
                                                            "created 1 embeddings") + "\n",  # in no time
        lfai(55, 0, 0, start) + "\n",  # ten minutes later: what was open times out
        lfai(45, 3, 0, "finished processing CreateEmbedding request, created 7 embeddings") + "\n",
        lfai(45, 3, 0, "finished processing CreateEmbedding request, created 7 embeddings\r") + "\n",
        lfai(45, 4, 0, start, "ERROR") + "\n",
        lfai(45, 5, 0, start) + "\n    an indented line that continues it\n",
        lfai(45, 6, 0, start) + "\n\nTraceback (most recent call last):\n  File \"x.py\", line 1, in f\n"
        "ValueError: bad\n",
        "grpc._server: 2024-11-13 10:45:07,000 | ERROR | _server.py:1 >>> Exception calling application: "
        "CUDA out of memory\nTraceback (most recent call last):\n  File \"a.py\", line 2, in g\n"
        "    y()\ntorch.OutOfMemoryError: CUDA out of memory.\n",
        "sentence_transformers.SentenceTransformer: 2024-11-13 10:45:08,000 | INFO | SentenceTransformer.py:66 >>> "
        "Load pretrained SentenceTransformer: /models/other-model/\n",
        "load INSTRUCTOR_Transformer\n", "Starting server. Listening on 0.0.0.0:50051.\n",
        "Shutdown signal received\n", bar + "\n", bar + "\n", "\n", "\n\n",
        "Batches:   0%|          | 0/1 [00:00<?, ?it/s]\n",
        "Batches: 100%|##########| 1/1 [00:00<00:00,  9.81it/s] Starting server. Listening on 0.0.0.0:1\n",
        TEI.format(10, "embed", "25.431ms", "310.2µs") + "\n",
        TEI.format(11, "openai_embed", "1.5s", "750ns") + "\n",
        TEI.format(12, "rerank", "1,5s", "1e3ms") + "\n",
        TEI.format(13, "embed", "80.5ms", "12us") + "\n" + "Caused by:\n    no backend\n",
        TEI.format(14, "embed", "2m", "1h") + "\n",
        TEI.format(15, "embed", "1s", "1ms").replace(".000100Z", '{total_time="3s"') + "\n",
        lfai(45, 9, 0, start).replace("main.py", "a>b.py") + "\n",
        '2025-03-04T08:00:00.101200Z  INFO text_embeddings_router: router/src/main.rs:185: Args { model_id: '
        '"BAAI/bge-small-en-v1.5", revision: None }\n',
        '2025-03-04T08:00:00.101200Z  INFO text_embeddings_router: router/src/main.rs:185: Args { model_id: '
        '"BAAI/bge-large-en-v1.5", served_model_name: Some("large") }\n',
        "2025-03-04T08:00:06.100100Z  INFO text_embeddings_router::http::server: router/src/http/server.rs:1813: "
        "Ready\n",
        "2025-03-04T08:01:13.000500Z ERROR openai_embed:try_acquire_permit: text_embeddings_core::infer: "
        "core/src/infer.rs:102: no permits available\n",
        "Error: Could not create backend\n\nCaused by:\n    Could not start backend: no tensor\n",
    ]


@pytest.mark.parametrize("path", SAMPLES, ids=[p.name for p in SAMPLES])
def test_batch_scan_equals_per_record_path(path: Path) -> None:
    """On every sample (as read, and with ANSI codes removed) any batch size gives what parse gives."""
    for text in {path.read_text(encoding="utf-8"), ANSI.sub("", path.read_text(encoding="utf-8"))}:
        want = assert_fast_path_matches(EmbeddingsParser, text, (None, 4096, 500), now=NOW)
        assert want[1] > 0


@pytest.mark.parametrize("seed", range(40))
def test_batch_scan_equals_per_record_path_on_shuffled_lines(seed: int) -> None:
    """The same holds on random mixtures of the samples' lines and of whole multi-line records."""
    lines = [line for path in SAMPLES for line in path.read_text(encoding="utf-8").splitlines(keepends=True)]
    rnd = random.Random(seed)
    pieces = blocks()
    items = rnd.sample(lines, rnd.randint(5, 60)) + [rnd.choice(pieces) for _ in range(rnd.randint(5, 120))]
    rnd.shuffle(items)
    text = "".join(items)
    assert_fast_path_matches(EmbeddingsParser, text, (None, rnd.randint(100, 3000)), now=NOW)


def test_frequent_lines_give_few_events() -> None:
    """A run of request pairs gives one counter event per series and one duration event with every request's."""
    start = "processing CreateEmbedding request: char-length: 86 word-count: 12"
    text = "".join(lfai(45, i, 0, start) + "\n" + lfai(45, i, 500, f"finished processing CreateEmbedding request, "
                                                                  f"created {i} embeddings") + "\n" for i in range(50))
    events, matched, lines, errors, _ = parse_records(EmbeddingsParser(), Batch("s", text, NOW, 100))
    assert errors == 0
    by_metric = {e.metric: e for e in events}
    assert (matched, lines) == (100, 100)
    assert by_metric["llm_embeddings_total"].value == sum(range(50))
    assert by_metric["llm_requests_total"].value == 50
    assert by_metric["llm_request_duration_seconds"].value == (0.5,) * 50
    assert len(events) == 1 + 3  # the durations, two counters and the running gauge
