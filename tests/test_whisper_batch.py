"""The whisper parser's runs of frequent lines (``parse_run``) give what record-by-record parsing gives."""

from __future__ import annotations

import random
from collections import defaultdict
from pathlib import Path

import pytest
from logmetrics_parsers.whisper import WhisperParser

from logmetrics.engine.parsing import parse_records
from logmetrics.events import Event, values_of
from logmetrics.plugins import record_rule
from logmetrics.records import Batch, Record
from logmetrics.store.catalog import BY_NAME
from logmetrics.testing import assert_fast_path_matches

SAMPLES = sorted((Path(__file__).resolve().parent.parent / "samples" / "whisper").glob("*.log"))
NOW = 1_731_500_000.0
RULE = record_rule(WhisperParser)
Totals = dict[tuple[str, tuple[str, ...]], float]


def lf(sec: int, msg: str, logger: str = "__main__", level: str = "INFO", ms: str = ",250") -> str:
    """A LeapfrogAI-format line at 10:mm:ss (``sec`` seconds after 10:00:00)."""
    return f"{logger}: 2024-11-13 10:{sec // 60 % 60:02d}:{sec % 60:02d}{ms} | {level} | main.py:92 >>> {msg}\n"


#: Lines of the frequent shapes (and near misses), to mix with the samples' lines.
FREQUENT = [
    lf(1, "Updated metadata: Temperature=0.0"), lf(2, "Temperature 0.2 is set"), lf(3, "Language uk is supported"),
    lf(4, "Completed /tmp/tmp55c81dfcb0"), lf(5, "Task transcribe is starting"), lf(6, "Task translate is starting"),
    lf(7, "Transcription complete!"), lf(8, "Translation complete!", ms=""), lf(9, "Transcription complete!"),
    lf(10, "Processing audio with duration 01:48:35.298", logger="faster_whisper"),
    lf(11, "Processing audio with duration 09:29,986", logger="faster_whisper"),
    lf(12, "Detected language 'ja' with probability 0.53", logger="faster_whisper"),
    lf(13, "Error transcribing audio: [Errno 2] Invalid data found when processing input", level="ERROR"),
    lf(14, "Task summarize is not supported", level="ERROR"), lf(15, "Task transcribe is starting", level="ERROR"),
    lf(16, "Completed /tmp/x Exception calling application"), lf(17, "Language xx is not supported"),
    lf(18, "Transcription complete!", logger="faster_whisper"), lf(19, "Updated metadata: Prompt='a b'"),
    "INFO:faster_whisper:Processing audio with duration 04:22.330\n",
    "INFO:faster_whisper:VAD filter removed 00:11.671 of audio\n",
    "DEBUG:faster_whisper:VAD filter kept the following audio segments: [00:00.000 -> 03:09.401]\n",
    "DEBUG:faster_whisper:Processing segment at 00:30.000\n",
    "INFO:faster_whisper:Detected language 'fr' with probability 0.63\n",
    "ERROR:faster_whisper:Processing segment at 00:30.000\n",
    "INFO:httpx:HTTP Request: GET https://huggingface.co/api/models/Systran/faster-whisper-small \"HTTP/1.1 200 OK\"\n",
    "\n",
]
#: Multi-line records and start-ups, whole.
BLOCKS = [
    lf(20, "Task transcribe is starting") + "Traceback (most recent call last):\n  File \"m.py\", line 3, in f\n"
    "ValueError: bad\n",
    lf(21, "Completed /tmp/a") + "RuntimeError: CUDA failed with error out of memory\n",
    lf(22, "Detected language 'en' with probability 0.9", logger="faster_whisper") + "    indented\n",
    "whisper_print_timings:     load time =   112.40 ms\nwhisper_print_timings:    total time =   745.12 ms\n",
    "whisper_init_from_file_with_params_no_state: loading model from 'models/ggml-small.bin'\n",
    "Initializing LeapfrogAI\nStarting server. Listening on 0.0.0.0:50051.\n",
    "Shutdown signal received\n",
    lf(23, "Processing audio with duration 00:05.000", logger="faster_whisper").replace("\n", "\r\n"),
]


def totals(events: list[Event]) -> Totals:
    """Counter and histogram sums (and histogram counts) by series; gauges keep their last value.
    Sums are rounded: a batch adds audio seconds before the store does."""
    out: dict[tuple[str, tuple[str, ...]], float] = defaultdict(float)
    for e in events:
        if e.rule == "zero":  # the zero series of a model left within a batch: the engine's job record by record
            continue
        fam = BY_NAME.get(e.metric)
        if fam is not None and fam.kind == "gauge":
            out[(e.metric, e.labels)] = sum(values_of(e))
        else:
            out[(e.metric, e.labels)] += sum(values_of(e))
            if fam is not None and fam.kind == "histogram":
                out[(e.metric + "_count", e.labels)] += len(values_of(e))
    return {k: round(v, 6) for k, v in out.items()}


@pytest.mark.parametrize("path", SAMPLES, ids=[p.name for p in SAMPLES])
def test_batch_scan_equals_per_record_path(path: Path) -> None:
    """On every sample, whole-chunk scans in any batch size give what record-by-record parsing gives."""
    text = path.read_text()
    want = assert_fast_path_matches(WhisperParser, text, (None, 4096, 500), now=NOW, digits=6)
    assert want[1] > 0


@pytest.mark.parametrize("seed", range(40))
def test_batch_scan_equals_per_record_path_on_shuffled_lines(seed: int) -> None:
    """The same holds on random mixtures of the samples' lines, frequent lines and whole blocks."""
    lines = [line for path in SAMPLES for line in path.read_text().splitlines(keepends=True)]
    rnd = random.Random(seed)
    items = rnd.sample(lines, rnd.randint(5, 120)) + rnd.choices(FREQUENT, k=rnd.randint(0, 200))
    items += rnd.sample(BLOCKS, rnd.randint(0, 5))
    rnd.shuffle(items)
    text = "".join(items)
    assert_fast_path_matches(WhisperParser, text, (None, rnd.randint(100, 3000)), now=NOW, digits=6)


def test_frequent_lines_never_reach_parse(monkeypatch: pytest.MonkeyPatch) -> None:
    """A batch of frequent LeapfrogAI lines is counted without one ``parse`` call, and gives its figures."""
    calls: list[str] = []
    real = WhisperParser.parse

    def spy(self: WhisperParser, record: Record) -> list[Event]:
        calls.append(record.text)
        return real(self, record)

    monkeypatch.setattr(WhisperParser, "parse", spy)
    text = "".join(FREQUENT[:12]) * 50
    events, matched, lines, errors, _ = parse_records(WhisperParser(), Batch("test", text, NOW, text.count("\n")))
    assert calls == []
    assert errors == 0
    got = totals(events)
    assert got[("llm_requests_total", ("unknown", "ok"))] == 150
    assert got[("llm_request_duration_seconds_count", ("unknown",))] == 100
    assert got[("llm_audio_seconds_total", ("unknown",))] == pytest.approx(50 * (6515.298 + 569.986))
    assert matched == lines == 50 * 8
    assert (events, matched, lines) != ([], 0, 0)


def test_lines_in_other_digits_are_read_as_parse_reads_them() -> None:
    """LeapfrogAI lines whose times and durations are in Arabic-Indic digits (``\\d`` takes them, a run
    did and failed on them, losing its batch): they go to ``parse``, with no parse error, and the fast
    path gives what it gives."""
    other = str.maketrans("0123456789", "٠١٢٣٤٥٦٧٨٩")
    text = "".join(line.translate(other) if i % 3 == 0 else line for i, line in enumerate(FREQUENT[:12] * 20))
    events, matched, _, errors, _ = parse_records(WhisperParser(), Batch("test", text, NOW, text.count("\n")))
    assert errors == 0
    assert totals(events)[("llm_requests_total", ("unknown", "ok"))] == 60
    assert matched > 0
    assert_fast_path_matches(WhisperParser, text, (None, 700), now=NOW, digits=6)


def test_a_model_left_within_a_batch_is_named_for_its_zero_series() -> None:
    """whisper.cpp CLI runs of two models in one batch: both models are named, for the engine's zero series."""
    text = ("whisper_init_from_file_with_params_no_state: loading model from 'models/ggml-base.en.bin'\n"
            "whisper_print_timings:    total time =   745.12 ms\n"
            "whisper_init_from_file_with_params_no_state: loading model from 'models/ggml-small.bin'\n")
    models = parse_records(WhisperParser(), Batch("test", text, NOW, 3))[4]
    assert models == ["base.en", "small"]


def test_garbage_does_not_raise() -> None:
    """Random text made of log fragments never makes the runs of frequent lines or ``parse`` raise."""
    bits = ["__main__: ", "2024-11-13 10:00:00", ",250", " | INFO | ", "main.py:1", " >>> ",
            "Task transcribe is starting", "Transcription complete!", "Processing audio with duration ", "01:02.5",
            "\n", "  ", "Traceback",
            "INFO:faster_whisper:", "whisper_print_timings:    total time = 1 ms", "\r", "'"]
    rnd = random.Random(5)
    parser = WhisperParser()
    for _ in range(300):
        text = "".join(rnd.choice(bits) for _ in range(rnd.randint(1, 60))) + "\n"
        assert parse_records(parser, Batch("test", text, NOW, text.count("\n")))[3] == 0
    assert parse_records(parser, Batch("test", FREQUENT[4], NOW, 1))[1] == 1
