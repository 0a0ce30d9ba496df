"""Tests for logmetrics.envelopes.unwrap: detection, unwrapping and cleaning of container envelopes."""

from __future__ import annotations

import json
import random
import tracemalloc
from datetime import UTC, datetime

import pytest

from logmetrics.envelopes.unwrap import MODES, Piece, Unwrapper, parse_rfc3339

# Plain application lines, written for these tests in the shapes the backends print.
VLLM = "INFO 01-02 03:04:05 [loggers.py:118] Engine 000: Avg prompt throughput: 41.2 tokens/s, Running: 2 reqs\n"
VLLM_PREFIXED = "\x1b[1;36m(APIServer pid=7)\x1b[0m INFO 01-02 03:04:06 [api_server.py:99] Starting server\n"
UVICORN = 'INFO:     10.1.2.3:40000 - "POST /v1/completions HTTP/1.1" 200 OK\n'
LLAMA = "slot print_timing: id  0 | task 12 | prompt eval time =  20.50 ms /  8 tokens\n"
LLAMA_SRV = "srv  update_slots: all slots are idle\n"

T0 = "2025-03-04T05:06:07.123456789Z"
T0_UNIX = datetime(2025, 3, 4, 5, 6, 7, tzinfo=UTC).timestamp() + 0.123456789


def docker_entry(log: str, stream: str = "stdout", time: str = T0) -> bytes:
    """One json-file line the way the Docker daemon writes it (compact, <>& escaped)."""
    enc = json.dumps({"log": log, "stream": stream, "time": time}, separators=(",", ":"), ensure_ascii=False)
    enc = enc.replace("<", "\\u003c").replace(">", "\\u003e").replace("&", "\\u0026")
    return enc.encode() + b"\n"


def wrap(lines: list[str], kind: str) -> bytes:
    """Store lines as a container runtime would: one entry per line, long lines cut every 16 KiB.

    The i-th line is stamped with second i % 60 and i nanoseconds; docker entries keep the
    newline only on a line's last part, CRI marks the earlier parts P and the last one F.
    """
    out: list[bytes] = []
    for i, line in enumerate(lines):
        stamp = f"2025-01-02T03:04:{i % 60:02d}.{i:09d}Z"
        chunks = [line[k : k + 16384] for k in range(0, len(line), 16384)] or [""]
        for k, chunk in enumerate(chunks):
            final = k == len(chunks) - 1
            if kind == "docker":
                out.append(docker_entry(chunk + ("\n" if final else ""), time=stamp))
            else:
                out.append(f"{stamp} stdout {'F' if final else 'P'} {chunk}\n".encode())
    return b"".join(out)


def text_of(pieces: list[Piece]) -> str:
    """All text of a list of pieces, checking that each piece's line count is right."""
    for piece in pieces:
        assert piece.lines == piece.text.count("\n")
        assert piece.text == "" or piece.text.endswith("\n")
    return "".join(p.text for p in pieces)


def run(data: bytes, mode: str = "auto", time: float = 100.0) -> tuple[Unwrapper, list[Piece]]:
    """Feed data in one go, flush, and return the unwrapper and every piece."""
    unwrapper = Unwrapper(mode)
    pieces = unwrapper.feed(data, time)
    pieces += unwrapper.flush()
    return unwrapper, pieces


# ---------------------------------------------------------------------------------------- detection


def test_detect_docker_json() -> None:
    """A json-file stream is detected as docker-json and its log values come out."""
    unwrapper, pieces = run(docker_entry("hello\n") + docker_entry("world\n", "stderr"))
    assert unwrapper.kind == "docker-json"
    assert text_of(pieces) == "hello\nworld\n"


def test_detect_cri() -> None:
    """A CRI stream (Z and offset timestamps, empty message) is detected as cri."""
    data = (
        b"2024-05-06T07:08:09.100000001Z stderr F starting\n"
        b"2024-05-06T09:08:09.200000002+02:00 stdout F \n"
        b"2024-05-06T07:08:09.3Z stdout F ready\n"
    )
    unwrapper, pieces = run(data)
    assert unwrapper.kind == "cri"
    assert text_of(pieces) == "starting\n\nready\n"


def test_detect_docker_timestamps() -> None:
    """`docker logs -t` output is detected and the stamp plus one space is removed."""
    data = f"{T0} {VLLM}{T0}  indented\n".encode()
    unwrapper, pieces = run(data)
    assert unwrapper.kind == "docker-timestamps"
    assert text_of(pieces) == VLLM + " indented\n"


def test_detect_compose_with_preamble() -> None:
    """`docker compose up` output is detected as compose even after its preamble lines."""
    data = b"Attaching to llama-server-1\nllama-server-1  | " + LLAMA_SRV.encode() + b"llama-server-1  | ok\n"
    unwrapper, pieces = run(data)
    assert unwrapper.kind == "compose"
    assert [(p.service, p.text) for p in pieces] == [
        (None, "Attaching to llama-server-1\n"),
        ("llama-server-1", LLAMA_SRV + "ok\n"),
    ]


@pytest.mark.parametrize("text", [VLLM, VLLM_PREFIXED, UVICORN, LLAMA, LLAMA_SRV])
def test_backend_lines_are_plain(text: str) -> None:
    """vLLM, uvicorn and llama.cpp lines are never taken for an envelope."""
    unwrapper, pieces = run((text * 3).encode())
    assert unwrapper.kind == "none"
    assert text_of(pieces) == (text * 3).replace("\x1b[1;36m", "").replace("\x1b[0m", "")


def test_app_iso_timestamps_are_not_docker_stamps() -> None:
    """An application's own millisecond ISO timestamps do not make a stream docker-timestamps."""
    data = b"2025-01-02T03:04:05.123Z info: listening on 8080\n2025-01-02T03:04:05.456Z info: ready\n"
    unwrapper, pieces = run(data)
    assert unwrapper.kind == "none"
    assert text_of(pieces) == data.decode()


def test_detection_waits_for_a_non_empty_line() -> None:
    """Blank lines pass through without fixing the kind; the first real line decides it."""
    unwrapper = Unwrapper()
    assert text_of(unwrapper.feed(b"\n\n", 1.0)) == "\n\n"
    assert unwrapper.kind is None
    assert text_of(unwrapper.feed(docker_entry("x\n"), 2.0)) == "x\n"
    assert unwrapper.kind == "docker-json"


def test_kind_is_fixed_once_detected() -> None:
    """After detection, later lines of another shape are kept raw, not re-detected."""
    unwrapper = Unwrapper()
    unwrapper.feed(docker_entry("a\n"), 1.0)
    pieces = unwrapper.feed(b"2024-05-06T07:08:09.1Z stdout F b\n", 2.0)
    assert unwrapper.kind == "docker-json"
    assert text_of(pieces) == "2024-05-06T07:08:09.1Z stdout F b\n"


# -------------------------------------------------------------------------------------- docker json


def test_docker_json_40k_line_split_at_16k() -> None:
    """A 40 KiB line cut into 16 KiB entries is joined back exactly, with the last entry's time."""
    rng = random.Random(7)
    long_line = "".join(rng.choice("abcdefghij <>&\"\\é日") for _ in range(40 * 1024))
    cuts = [long_line[k : k + 16384] for k in range(0, len(long_line), 16384)]
    assert len(cuts) == 3
    data = b"".join(
        docker_entry(c + ("\n" if i == 2 else ""), time=f"2025-03-04T05:06:0{7 + i}.000000001Z")
        for i, c in enumerate(cuts)
    )
    unwrapper, pieces = run(data + docker_entry("after\n"))
    assert text_of(pieces) == long_line + "\n" + "after\n"
    assert unwrapper.flush() == []


def test_docker_json_split_time_is_completing_entry() -> None:
    """The time of a joined line is that of the entry carrying its newline."""
    data = docker_entry("part", time="2025-03-04T05:06:07Z") + docker_entry("end\n", time="2025-03-04T05:06:09.5Z")
    _, pieces = run(data)
    assert len(pieces) == 1
    assert pieces[0].time == pytest.approx(T0_UNIX - 0.123456789 + 2.5)


def test_docker_json_escaping_and_unicode() -> None:
    """Escaped <>&, quotes, backslashes, tabs and non-ASCII text decode exactly."""
    line = '<|im_start|> a & b "q" \\path\ttab é 日本語 🙂 \u2028 end'
    data = docker_entry(line + "\n")
    assert b"\\u003c" in data and b"\\u0026" in data
    raw_escaped = b'{"log":"\\u00e9\\ud83d\\ude42\\n","stream":"stdout","time":"' + T0.encode() + b'"}\n'
    _, pieces = run(data + raw_escaped)
    assert text_of(pieces) == line + "\n" + "é🙂\n"


def test_docker_json_partials_per_stream() -> None:
    """Partial entries of stdout and stderr are joined separately."""
    data = (
        docker_entry("out-1 ", "stdout")
        + docker_entry("err whole\n", "stderr")
        + docker_entry("out-2\n", "stdout")
    )
    _, pieces = run(data)
    assert text_of(pieces) == "err whole\nout-1 out-2\n"


def test_docker_json_bad_lines_are_kept() -> None:
    """Lines that are not json-file entries are kept raw, never dropped and never raising."""
    data = (
        docker_entry("good\n")
        + b'{"log": broken\n'
        + b'{"stream":"stdout"}\n'
        + b'[1, 2]\n'
        + b'{"log": 5}\n'
        + docker_entry("also good\n")
    )
    _, pieces = run(data)
    assert text_of(pieces) == 'good\n{"log": broken\n{"stream":"stdout"}\n[1, 2]\n{"log": 5}\nalso good\n'


def test_docker_json_time() -> None:
    """A piece's time is the json time of its last line; a raw last line falls back to feed time."""
    _, pieces = run(docker_entry("a\n", time="2020-01-01T00:00:00Z") + docker_entry("b\n"), time=5.0)
    assert pieces[0].time == pytest.approx(T0_UNIX)
    _, pieces = run(docker_entry("a\n") + b"not json\n", time=5.0)
    assert pieces[0].time == 5.0


# ---------------------------------------------------------------------------------------------- CRI


def test_cri_partial_fragments_joined_per_stream() -> None:
    """CRI P fragments are joined up to their F, separately for stdout and stderr."""
    data = (
        b"2024-05-06T07:08:09.000000001+00:00 stdout F short A\n"
        b"2024-05-06T07:08:09.000000002+00:00 stdout P long B one \n"
        b"2024-05-06T07:08:09.000000003+00:00 stderr P err C one, \n"
        b"2024-05-06T07:08:09.000000004+00:00 stdout F B two\n"
        b"2024-05-06T07:08:09.000000005+00:00 stderr F C two\n"
    )
    unwrapper, pieces = run(data)
    assert unwrapper.kind == "cri"
    assert text_of(pieces) == "short A\nlong B one B two\nerr C one, C two\n"
    expected = datetime(2024, 5, 6, 7, 8, 9, tzinfo=UTC).timestamp() + 5e-9
    assert pieces[0].time == pytest.approx(expected, abs=1e-6)


def test_cri_unparsable_lines_kept() -> None:
    """Lines that do not follow the CRI layout are kept as they are."""
    data = b"2024-05-06T07:08:09.1Z stdout F fine\ngarbage here\n2024-05-06T07:08:09.2Z stdin X odd\n"
    _, pieces = run(data, time=9.0)
    assert text_of(pieces) == "fine\ngarbage here\n2024-05-06T07:08:09.2Z stdin X odd\n"
    assert pieces[0].time == 9.0


def test_cri_content_spaces_and_offset_time() -> None:
    """Content keeps its own spaces; a +02:00 stamp is converted to UTC seconds."""
    _, pieces = run(b"2024-05-06T09:08:09.5+02:00 stdout F   two  spaces \n")
    assert text_of(pieces) == "  two  spaces \n"
    assert pieces[0].time == datetime(2024, 5, 6, 7, 8, 9, 500000, tzinfo=UTC).timestamp()


# ----------------------------------------------------------------------------------- docker -t / time


def test_docker_timestamps_time_values() -> None:
    """`docker logs -t` stamps become the piece time; a line without a stamp is kept whole."""
    data = b"2025-03-04T05:06:07.123456789Z first\n2025-03-04T05:06:08.000000001Z second\n"
    unwrapper, pieces = run(data)
    assert unwrapper.kind == "docker-timestamps"
    assert text_of(pieces) == "first\nsecond\n"
    assert pieces[0].time == pytest.approx(T0_UNIX + 0.876543212, abs=1e-6)
    pieces = unwrapper.feed(b"2025-03-04T05:06:09.000000001Z third\nno stamp\n", 42.0)
    assert text_of(pieces) == "third\nno stamp\n"
    assert pieces[0].time == 42.0


@pytest.mark.parametrize(
    ("stamp", "expected"),
    [
        ("2025-03-04T05:06:07Z", 0.0),
        ("2025-03-04T05:06:07.5Z", 0.5),
        ("2025-03-04T05:06:07.123456789Z", 0.123456789),
        ("2025-03-04T07:06:07.25+02:00", 0.25),
        ("2025-03-04T07:06:07.25+0200", 0.25),
        ("2025-03-04T00:06:07.000001-05:00", 0.000001),
    ],
)
def test_parse_rfc3339(stamp: str, expected: float) -> None:
    """RFC 3339 stamps with nanoseconds, Z or offsets parse to Unix seconds."""
    base = datetime(2025, 3, 4, 5, 6, 7, tzinfo=UTC).timestamp()
    result = parse_rfc3339(stamp)
    assert result is not None
    assert result == pytest.approx(base + expected, abs=1e-6)


@pytest.mark.parametrize(
    "stamp", ["", "2025-03-04T05:06:07", "2025-13-04T05:06:07Z", "garbage-garbage-garbage", "2025-03-04T05:06:07Q"]
)
def test_parse_rfc3339_rejects(stamp: str) -> None:
    """Malformed or zone-less stamps give None instead of raising."""
    assert parse_rfc3339(stamp) is None


def test_parse_rfc3339_a_fraction_of_thousands_of_digits() -> None:
    """A fraction longer than int() takes (4,300 digits) is read to the nanosecond, not raised on."""
    base = datetime(2025, 3, 4, 5, 6, 7, tzinfo=UTC).timestamp()
    assert parse_rfc3339("2025-03-04T05:06:07." + "25" * 3000 + "Z") == pytest.approx(base + 0.2525252525, abs=1e-6)


@pytest.mark.parametrize("stamp", ["9999-12-31T23:59:59.5-23:59", "0001-01-01T00:00:00+01:00"])
def test_parse_rfc3339_out_of_range_in_utc(stamp: str) -> None:
    """A valid date whose UTC time falls outside years 1-9999 gives None instead of OverflowError."""
    assert parse_rfc3339(stamp) is None


# ------------------------------------------------------------------------------------------ compose


def test_compose_two_services_interleaved_with_colour() -> None:
    """Interleaved compose services give one piece each, in first-seen order, ANSI removed; a line
    without the prefix is compose's own (compose prefixes every line of a service, a traceback's too)."""
    data = (
        b"\x1b[36mvllm-1        |\x1b[0m " + VLLM.encode()
        + b"\x1b[33mllama-server  |\x1b[0m " + LLAMA_SRV.encode()
        + b"\x1b[36mvllm-1        | \x1b[0m" + UVICORN.encode()
        + b"Traceback (most recent call last):\n"
        + b"llama-server  | \n"
        + b"\x1b[33mllama-server  |\x1b[0m done\r\n"
    )
    unwrapper, pieces = run(data, mode="compose", time=7.0)
    assert unwrapper.kind == "compose"
    assert [(p.service, p.text, p.lines, p.time) for p in pieces] == [
        ("vllm-1", VLLM + UVICORN, 2, 7.0),
        ("llama-server", LLAMA_SRV + "\ndone\n", 3, 7.0),
        (None, "Traceback (most recent call last):\n", 1, 7.0),
    ]


def test_compose_detected_and_service_carried_across_feeds() -> None:
    """Compose is auto-detected; the service is carried across feeds, and compose's own lines (no
    prefix: "vllm-1 exited with code 137") are no service's, a blank one stays with the service."""
    unwrapper = Unwrapper()
    first = unwrapper.feed(b"web_1   | a\n[llama-cpp] | b\n", 1.0)
    assert unwrapper.kind == "compose"
    assert [(p.service, p.text) for p in first] == [("web_1", "a\n"), ("llama-cpp", "b\n")]
    second = unwrapper.feed(b"\n[llama-cpp] | c\nllama-cpp exited with code 137\n", 2.0)
    assert [(p.service, p.text) for p in second] == [("llama-cpp", "\nc\n"), (None, "llama-cpp exited with code 137\n")]


# ----------------------------------------------------------------------------------- plain cleaning


def test_plain_ansi_and_crlf_removed() -> None:
    """Plain text loses colour codes, other escapes and CR at line ends, keeping inner CRs."""
    data = (
        b"\x1b[32mINFO\x1b[0m:     ready\r\n"
        b"\x1b]0;title\x07\x1b[?25lhidden cursor\x1b[?25h\r\r\n"
        b"10%\r20%\r\n"
        b"bold \x1b[1mtext\x1b[22m\r\x1b[0m\n"
        b"lone \x1b\n"
    )
    unwrapper, pieces = run(data, time=3.0)
    assert unwrapper.kind == "none"
    assert text_of(pieces) == "INFO:     ready\nhidden cursor\n10%\r20%\nbold text\nlone \n"
    assert pieces[0].time == 3.0


def test_plain_text_untouched_when_clean() -> None:
    """Clean plain text comes back identical, as one piece with the right line count."""
    data = (VLLM + UVICORN + LLAMA).encode() * 50
    _, pieces = run(data, mode="none")
    assert len(pieces) == 1
    assert pieces[0].text == data.decode()
    assert pieces[0].lines == 150


# ------------------------------------------------------------------------------ partials and flush


def test_incomplete_line_held_across_feeds() -> None:
    """Bytes after the last newline wait for the next feed, even inside a UTF-8 character."""
    data = "naïve 日本\nsecond\n".encode()
    cut = data.index("日".encode()) + 1
    unwrapper = Unwrapper("none")
    first = unwrapper.feed(data[:cut], 1.0)
    assert first == []
    rest = unwrapper.feed(data[cut:], 2.0)
    assert text_of(rest) == "naïve 日本\nsecond\n"


def test_flush_emits_unterminated_line() -> None:
    """A last line without a newline is emitted (with one) by flush."""
    unwrapper = Unwrapper()
    assert text_of(unwrapper.feed(b"one\ntwo", 1.0)) == "one\n"
    assert text_of(unwrapper.flush()) == "two\n"
    assert unwrapper.flush() == []


def test_docker_partial_across_feeds_and_flush() -> None:
    """A docker partial waits across feeds for its end; one never ended is emitted by flush."""
    unwrapper = Unwrapper()
    assert unwrapper.feed(docker_entry("abc"), 1.0) == []
    assert text_of(unwrapper.feed(docker_entry("def\n"), 2.0)) == "abcdef\n"
    assert unwrapper.feed(docker_entry("tail", time="2025-03-04T05:06:07Z"), 3.0) == []
    flushed = unwrapper.flush()
    assert text_of(flushed) == "tail\n"
    assert flushed[0].time == pytest.approx(T0_UNIX - 0.123456789)


def test_cri_partial_across_feeds_and_flush() -> None:
    """A CRI P fragment joins an F in a later feed; a P that never gets its F is emitted by flush."""
    unwrapper = Unwrapper()
    assert unwrapper.feed(b"2024-05-06T07:08:09.1Z stdout P Hello, \n", 1.0) == []
    assert text_of(unwrapper.feed(b"2024-05-06T07:08:09.2Z stdout F world\n", 2.0)) == "Hello, world\n"
    assert unwrapper.feed(b"2024-05-06T07:08:09.3Z stdout P exiting without newline\n", 3.0) == []
    flushed = unwrapper.flush()
    assert text_of(flushed) == "exiting without newline\n"
    assert flushed[0].time == pytest.approx(datetime(2024, 5, 6, 7, 8, 9, 300000, tzinfo=UTC).timestamp())


@pytest.mark.parametrize("kind", ["docker", "cri"])
def test_many_tiny_parts_are_joined_whole(kind: str) -> None:
    """A line of 1,100 one-byte parts stays one line (the parts are compacted, not let out)."""
    if kind == "docker":
        data = b"".join(docker_entry(f"{i % 10}") for i in range(1100)) + docker_entry("!\n")
    else:
        data = b"".join(f"2024-05-06T07:08:09.1Z stdout P {i % 10}\n".encode() for i in range(1100))
        data += b"2024-05-06T07:08:09.2Z stdout F !\n"
    unwrapper, pieces = run(data)
    assert text_of(pieces) == "".join(str(i % 10) for i in range(1100)) + "!\n"
    assert unwrapper.truncated == 0


# ------------------------------------------------------------------------------- the line-length cap

CAP = 64 * 1024


@pytest.mark.parametrize("kind", ["docker", "cri"])
def test_joined_5mb_line_is_cut_at_the_cap(kind: str) -> None:
    """A 5 MB line split by the runtime comes out once, cut to the cap, counted; its neighbours intact."""
    data = wrap(["before", "x" * 5_000_000, "after"], kind)
    unwrapper = Unwrapper(max_line_bytes=CAP)
    pieces: list[Piece] = []
    for start in range(0, len(data), 128 * 1024):  # as the tailer hands them over
        pieces += unwrapper.feed(data[start : start + 128 * 1024], 1.0)
    pieces += unwrapper.flush()
    assert text_of(pieces).split("\n") == ["before", "x" * CAP, "after", ""]
    assert unwrapper.truncated == 1


@pytest.mark.parametrize("kind", ["docker", "cri"])
def test_joined_line_memory_stays_near_the_cap(kind: str) -> None:
    """Joining a 5 MB line holds about the cap, not the line: the peak allocation stays under 1 MB."""
    data = wrap(["y" * 5_000_000], kind)
    chunks = [data[start : start + 64 * 1024] for start in range(0, len(data), 64 * 1024)]
    unwrapper = Unwrapper(max_line_bytes=CAP)
    tracemalloc.start()
    try:
        for chunk in chunks:
            unwrapper.feed(chunk, 1.0)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert peak < 1_000_000
    assert unwrapper.truncated == 1


@pytest.mark.parametrize("kind", ["docker", "cri"])
def test_cap_is_checked_on_the_final_part_too(kind: str) -> None:
    """A line at the cap is kept whole; one byte more, arriving with its final part, is cut and counted."""
    unwrapper, pieces = run(wrap(["a" * 20000, "b" * 20001], kind))
    assert (unwrapper.truncated, len(text_of(pieces))) == (0, 40003)
    unwrapper = Unwrapper(max_line_bytes=20000)
    pieces = unwrapper.feed(wrap(["a" * 20000, "b" * 20001, "c"], kind), 1.0) + unwrapper.flush()
    assert text_of(pieces) == "a" * 20000 + "\n" + "b" * 20000 + "\nc\n"
    assert unwrapper.truncated == 1


@pytest.mark.parametrize("kind", ["docker", "cri"])
@pytest.mark.parametrize(("line", "cap"), [("日" * 20000, 20001), ("日" * 20000, 50000), ("é🙂" * 9000, 30001)])
def test_cut_never_splits_a_character(kind: str, line: str, cap: int) -> None:
    """A line of multi-byte characters is cut at a character boundary, within the cap."""
    unwrapper = Unwrapper(max_line_bytes=cap)
    pieces = unwrapper.feed(wrap([line], kind), 1.0) + unwrapper.flush()
    got = text_of(pieces)[:-1]
    assert "\ufffd" not in got and line.startswith(got)
    assert cap - 4 < len(got.encode()) <= cap
    assert unwrapper.truncated == 1


def test_cut_line_skips_to_its_final_entry_per_stream() -> None:
    """After a cut, stdout's remaining parts are skipped up to its final entry; stderr goes on."""
    data = (
        docker_entry("o" * 1500, "stdout")
        + docker_entry("e" * 10, "stderr")
        + docker_entry("o" * 1500, "stdout")
        + docker_entry("o\n", "stdout")
        + docker_entry("E\n", "stderr")
        + docker_entry("next\n", "stdout")
    )
    unwrapper = Unwrapper(max_line_bytes=2000)
    pieces = unwrapper.feed(data, 1.0) + unwrapper.flush()
    assert text_of(pieces) == "o" * 2000 + "\n" + "e" * 10 + "E\nnext\n"
    assert unwrapper.truncated == 1


# ------------------------------------------------------------------------- invalid input never raises


def test_invalid_utf8_and_nul_bytes() -> None:
    """Invalid UTF-8 becomes U+FFFD and NUL bytes vanish, in plain, docker and CRI streams."""
    _, plain = run(b"bad \xff\xfe byte\x00s\n", mode="none")
    assert text_of(plain) == "bad \ufffd\ufffd bytes\n"
    _, docker = run(b'{"log":"in \xc3 json\\u0000\\n","stream":"stdout","time":"' + T0.encode() + b'"}\n')
    assert text_of(docker) == "in \ufffd json\n"
    assert docker[0].time == pytest.approx(T0_UNIX)
    _, cri = run(b"2024-05-06T07:08:09.1Z stdout F x\x00\xe6\x97y\n")
    assert text_of(cri) == "x\ufffdy\n"


def test_cri_multibyte_character_split_between_fragments() -> None:
    """A UTF-8 character cut between a P and an F fragment is put back together."""
    raw = "日".encode()
    data = b"2024-05-06T07:08:09.1Z stdout P a" + raw[:1] + b"\n2024-05-06T07:08:09.2Z stdout F " + raw[1:] + b"b\n"
    _, pieces = run(data)
    assert text_of(pieces) == "a日b\n"


@pytest.mark.parametrize("mode", MODES)
def test_random_binary_never_raises(mode: str) -> None:
    """Random bytes (and random bytes behind valid-looking envelopes) never make feed or flush raise."""
    rng = random.Random(1234)
    prefixes = [b"", b'{"log":"', b"2024-05-06T07:08:09.1Z stdout P ", b"2025-03-04T05:06:07.123456789Z ", b"svc  | "]
    for _ in range(200):
        unwrapper = Unwrapper(mode)
        for _ in range(3):
            blob = rng.choice(prefixes) + bytes(rng.randrange(256) for _ in range(rng.randrange(60)))
            for piece in unwrapper.feed(blob, 1.0):
                assert "\x00" not in piece.text and "\x1b" not in piece.text
                assert piece.lines == piece.text.count("\n")
        unwrapper.flush()


# ------------------------------------------------------------------------------------ forced modes


def test_forced_mode_overrides_detection() -> None:
    """A forced mode is used from the first line, even when the lines look like another envelope."""
    entry = docker_entry("x\n")
    unwrapper, pieces = run(entry, mode="none")
    assert unwrapper.kind == "none"
    assert text_of(pieces) == entry.decode()
    unwrapper, pieces = run(b"2025-03-04T05:06:07Z plain stamp\n", mode="docker-timestamps")
    assert unwrapper.kind == "docker-timestamps"
    assert text_of(pieces) == "plain stamp\n"
    assert pieces[0].time == pytest.approx(T0_UNIX - 0.123456789)


def test_kind_is_none_until_detected() -> None:
    """In auto mode the kind is unknown until data comes; forced modes know it at once."""
    assert Unwrapper().kind is None
    assert Unwrapper("cri").kind == "cri"


@pytest.mark.parametrize("mode", ["docker", "json", "", "AUTO"])
def test_unknown_mode_raises(mode: str) -> None:
    """An unknown mode is a ValueError."""
    with pytest.raises(ValueError, match="unknown envelope mode"):
        Unwrapper(mode)


# -------------------------------------------------------------------------------------- round trip


ROUND_TRIP_LINES = [
    "INFO 01-02 03:04:05 [api_server.py:10] vLLM API server version 0.0.0",
    "",
    '<think> "quoted" & \\escaped\\ </think>\ttab',
    "ünïcödé 日本語 🙂 Ċ <｜end▁of▁sentence｜>",
    "x" * 16384,
    "y" * 16385,
    "z" * 40000 + "日本" * 3000,
    "   indented continuation",
    "last line",
]


@pytest.mark.parametrize("kind", ["docker", "cri"])
@pytest.mark.parametrize("chunk", [0, 1, 7, 4096])
def test_round_trip(kind: str, chunk: int) -> None:
    """Lines wrapped like a container runtime stores them unwrap to exactly the original lines."""
    data = wrap(ROUND_TRIP_LINES, kind)
    unwrapper = Unwrapper()
    pieces: list[Piece] = []
    if chunk == 0:
        pieces += unwrapper.feed(data, 1.0)
    else:  # arbitrary byte chunks, as a tailer reading a growing file might deliver
        for start in range(0, len(data), chunk * 997):
            pieces += unwrapper.feed(data[start : start + chunk * 997], 1.0)
    pieces += unwrapper.flush()
    assert unwrapper.kind == ("docker-json" if kind == "docker" else "cri")
    assert text_of(pieces) == "\n".join(ROUND_TRIP_LINES) + "\n"
    last = len(ROUND_TRIP_LINES) - 1
    expected = datetime(2025, 1, 2, 3, 4, last, tzinfo=UTC).timestamp() + last * 1e-9
    assert pieces[-1].time == pytest.approx(expected, abs=1e-6)


# ------------------------------------------------------------------------------------------ journald


def test_journald_short_format_groups_lines_by_unit() -> None:
    """journalctl output: the prefix is removed and each unit is its own piece (and source)."""
    data = (
        b"Jan 02 03:04:05 gpu-1 vllm[812]: INFO 01-02 03:04:05 [loggers.py:80] Engine 000: Avg prompt\n"
        b"Jan 02 03:04:06 gpu-1 gateway.service[90]: request done\n"
        b"Jan 02 03:04:07 gpu-1 vllm[812]: INFO:     127.0.0.1:1 - \"GET /health HTTP/1.1\" 200 OK\n"
    )
    unwrapper, pieces = run(data)
    assert unwrapper.kind == "journald"
    assert [(p.service, p.text, p.lines) for p in pieces] == [
        ("vllm", 'INFO 01-02 03:04:05 [loggers.py:80] Engine 000: Avg prompt\n'
                 'INFO:     127.0.0.1:1 - "GET /health HTTP/1.1" 200 OK\n', 2),
        ("gateway.service", "request done\n", 1),
    ]


def test_journald_short_iso_and_continuation_lines() -> None:
    """short-iso timestamps are recognised; a line without a prefix stays with the unit before it
    (the rest of a multi-line message), but journalctl's own ``-- Boot ... --`` lines are no unit's."""
    data = (
        b"2025-01-02T03:04:05+0000 gpu-1 vllm[812]: Traceback (most recent call last):\n"
        b"2025-01-02T03:04:05+0000 gpu-1 vllm[812]:   File \"x.py\", line 1\n"
        b"    raise ValueError\n"
        b"-- Boot 0123 --\n"
    )
    unwrapper, pieces = run(data)
    assert unwrapper.kind == "journald"
    assert [(p.service, p.text) for p in pieces] == [
        ("vllm", 'Traceback (most recent call last):\n  File "x.py", line 1\n    raise ValueError\n'),
        (None, "-- Boot 0123 --\n")]


@pytest.mark.parametrize("prefix", [
    "Jan 02 03:04:05.123456 gpu-1 vllm[812]: ",  # -o short-precise
    "Jan 02 03:04:05 vllm[812]: ",  # --no-hostname
    "2025-01-02T03:04:05.123456+0000 vllm[812]: ",  # -o short-iso-precise --no-hostname
    "Thu 2025-01-02 03:04:05 UTC gpu-1 vllm[812]: ",  # -o short-full
])
def test_journald_precise_full_and_hostless_formats(prefix: str) -> None:
    """journalctl's other short formats, and output without the host: the unit is vllm, never a word
    of the message (a uvicorn line's 'INFO:' taken for the unit, the host's place for the unit's)."""
    lines = ["INFO 01-02 03:04:05 [loggers.py:80] Engine 000: Avg prompt throughput: 1.0 tokens/s",
             'INFO:     127.0.0.1:1 - "GET /health HTTP/1.1" 200 OK']
    unwrapper, pieces = run("".join(prefix + line + "\n" for line in lines * 2).encode())
    assert unwrapper.kind == "journald"
    assert [(p.service, p.text) for p in pieces] == [("vllm", "".join(line + "\n" for line in lines * 2))]


def test_plain_logs_are_not_taken_for_journald() -> None:
    """vLLM, uvicorn and llama.cpp lines are plain text, not journalctl output."""
    data = (
        b"INFO 01-02 03:04:05 [loggers.py:80] Engine 000: Avg prompt throughput: 1.0 tokens/s\n"
        b'INFO:     127.0.0.1:1 - "GET /health HTTP/1.1" 200 OK\n'
        b"srv  update_slots: all slots are idle\n"
    )
    unwrapper, _ = run(data)
    assert unwrapper.kind == "none"


def test_kubectl_prefix_groups_lines_by_pod_and_container() -> None:
    """'kubectl logs --prefix' output: one piece per pod/container, the prefix removed."""
    data = (
        b"[pod/vllm-7d9f5c-abcde/vllm] INFO 01-02 03:04:05 [api_server.py:1] vLLM API server version 0.11.0\n"
        b"[pod/vllm-7d9f5c-fghij/vllm] INFO:     10.0.0.1:1 - \"GET /health HTTP/1.1\" 200 OK\n"
        b"[pod/vllm-7d9f5c-abcde/vllm] INFO:     10.0.0.2:2 - \"GET /health HTTP/1.1\" 200 OK\n"
    )
    unwrapper, pieces = run(data)
    assert unwrapper.kind == "kubectl"
    assert [(p.service, p.lines) for p in pieces] == [("vllm-7d9f5c-abcde/vllm", 2), ("vllm-7d9f5c-fghij/vllm", 1)]
    assert pieces[1].text == 'INFO:     10.0.0.1:1 - "GET /health HTTP/1.1" 200 OK\n'


# ------------------------------------------------------------------------------------ layered prefixes

HEALTH = 'INFO:     1.2.3.4:5 - "GET /health HTTP/1.1" 200 OK\n'
T1 = "2025-08-21T14:02:11.000000001Z"
T1_UNIX = datetime(2025, 8, 21, 14, 2, 11, tzinfo=UTC).timestamp() + 1e-9


def test_compose_logs_with_timestamps() -> None:
    """'docker compose logs -t': the service prefix and then the timestamp are peeled off."""
    unwrapper, pieces = run(f"vllm-1  | {T1} {HEALTH}".encode())
    assert unwrapper.kind == "compose+docker-timestamps"
    assert [(p.service, p.text, p.lines) for p in pieces] == [("vllm-1", HEALTH, 1)]
    assert pieces[0].time == pytest.approx(T1_UNIX)


def test_compose_timestamps_per_service_time_and_continuations() -> None:
    """Each service's piece takes the time of its own last line; an unprefixed line is compose's own,
    whole, in the piece of no name, with the time of the feed."""
    data = (
        f"\x1b[36mvllm-1   |\x1b[0m 2025-08-21T14:02:11.000000001Z {VLLM}"
        f"llama-1  | 2025-08-21T14:02:12.500000000Z {LLAMA_SRV}"
        f"vllm-1   | 2025-08-21T14:02:13.000000001Z {UVICORN}"
        "Traceback (most recent call last):\n"
    ).encode()
    unwrapper, pieces = run(data, time=5.0)
    assert unwrapper.kind == "compose+docker-timestamps"
    assert [(p.service, p.text) for p in pieces] == [
        ("vllm-1", VLLM + UVICORN),
        ("llama-1", LLAMA_SRV),
        (None, "Traceback (most recent call last):\n"),
    ]
    assert pieces[0].time == pytest.approx(T1_UNIX + 2.0, abs=1e-6)
    assert pieces[1].time == pytest.approx(T1_UNIX + 1.5, abs=1e-6)
    assert pieces[2].time == 5.0  # no timestamp on it


def test_kubectl_prefix_with_timestamps() -> None:
    """'kubectl logs --prefix --timestamps': pod/container prefix, then kubelet's timestamp."""
    data = (
        f"[pod/vllm-7d9f5c-abcde/vllm] 2025-08-21T14:02:11.123456789Z {VLLM}"
        f"[pod/vllm-7d9f5c-abcde/vllm] 2025-08-21T14:02:11.2Z {HEALTH}"
    ).encode()
    unwrapper, pieces = run(data)
    assert unwrapper.kind == "kubectl+docker-timestamps"
    assert [(p.service, p.text) for p in pieces] == [("vllm-7d9f5c-abcde/vllm", VLLM + HEALTH)]
    assert pieces[0].time == pytest.approx(T1_UNIX - 1e-9 + 0.2, abs=1e-6)


def test_timestamps_around_compose_prefix() -> None:
    """'docker logs -t' of a container running 'docker compose up': timestamp, then service."""
    data = f"{T1} vllm-1  | {HEALTH}{T1} api-1   | ready\n".encode()
    unwrapper, pieces = run(data)
    assert unwrapper.kind == "docker-timestamps+compose"
    assert [(p.service, p.text) for p in pieces] == [("vllm-1", HEALTH), ("api-1", "ready\n")]
    assert [p.time for p in pieces] == pytest.approx([T1_UNIX, T1_UNIX])


@pytest.mark.parametrize("stamped", [False, True])
def test_journald_around_compose(stamped: bool) -> None:
    """A systemd unit running 'docker compose up' (with or without -t): the compose service is the source."""
    stamp = f"{T1} " if stamped else ""
    data = (
        f"Aug 21 14:02:11 gpu-1 docker-compose[812]: vllm-1  | {stamp}{HEALTH}"
        f"Aug 21 14:02:11 gpu-1 docker-compose[812]: vllm-1  | {stamp}{VLLM}"
    ).encode()
    unwrapper, pieces = run(data, time=3.0)
    assert unwrapper.kind == "journald+compose" + ("+docker-timestamps" if stamped else "")
    assert [(p.service, p.text) for p in pieces] == [("vllm-1", HEALTH + VLLM)]
    assert pieces[0].time == (pytest.approx(T1_UNIX) if stamped else 3.0)


def test_compose_inside_journald_after_compose_up_s_own_lines() -> None:
    """'docker compose up' under systemd prints its progress lines first, and its own status lines as
    containers stop: they do not keep compose from being told inside journald, and they are no
    service's (the piece of no name), while each service's lines are its own."""
    j = "Aug 21 14:02:11 gpu-1 docker-compose[812]: "
    head = ["[+] Running 3/3", " ✔ Network demo_default  Created", " ✔ Container vllm-1     Created",
            " ✔ Container gateway-1  Created", "Attaching to gateway-1, vllm-1"]
    body = [f"vllm-1     | {VLLM}", f"gateway-1  | {UVICORN}"] * 3
    tail = ["vllm-1 exited with code 137", "Gracefully stopping... (press Ctrl+C again to force)"]
    data = "".join(j + line + ("" if line.endswith("\n") else "\n") for line in head + body + tail).encode()
    unwrapper, pieces = run(data, time=3.0)
    assert unwrapper.kind == "journald+compose"
    texts = {p.service: p.text for p in pieces}
    assert texts == {"vllm-1": VLLM * 3, "gateway-1": UVICORN * 3,
                     None: "".join(line + "\n" for line in head + tail)}


def test_journald_without_hosts_takes_units_without_pids_once_told() -> None:
    """--no-hostname output: once lines with a pid tell it is journald's, a unit without a pid is
    read as the unit (not its message's first word), and journalctl's own lines are no unit's."""
    data = (
        "-- Journal begins at Mon 2025-12-01 00:00:00 UTC. --\n"
        + f"Dec 05 07:00:01 vllm[4242]: {UVICORN}" * 3
        + f"Dec 05 07:00:02 gateway: {UVICORN}"
        + "-- Boot 3f2e9c1d --\n"
    ).encode()
    unwrapper, pieces = run(data)
    assert unwrapper.kind == "journald"
    assert [(p.service, p.text) for p in pieces] == [
        (None, "-- Journal begins at Mon 2025-12-01 00:00:00 UTC. --\n-- Boot 3f2e9c1d --\n"),
        ("vllm", UVICORN * 3), ("gateway", UVICORN)]


def test_app_timestamps_inside_compose_are_kept() -> None:
    """An application's own microsecond timestamps after a compose prefix are not peeled."""
    line = "2025-08-21T14:02:11.123456Z  INFO text_embeddings_router: Ready\n"
    unwrapper, pieces = run(f"tei-1  | {line}".encode() * 3)
    assert unwrapper.kind == "compose"
    assert text_of(pieces) == line * 3


def test_forced_layered_mode() -> None:
    """--envelope compose+docker-timestamps peels both layers from the first line, whatever it looks like."""
    unwrapper, pieces = run(b"svc | 2025-08-21T14:02:11Z one\n", mode="compose+docker-timestamps")
    assert unwrapper.kind == "compose+docker-timestamps"
    assert [(p.service, p.text) for p in pieces] == [("svc", "one\n")]
    assert pieces[0].time == pytest.approx(T1_UNIX - 1e-9)


def test_pm2_logs_give_a_piece_per_app() -> None:
    """``pm2 logs`` output (``ID|NAME  | line``, pm2's own ``PM2  | `` lines) is detected; each
    app's lines are a piece named by the app, the prefix peeled."""
    unwrapper = Unwrapper()
    pieces = unwrapper.feed(b"0|vllm     | " + VLLM.encode() + b"1|gateway  | " + UVICORN.encode()
                            + b"PM2        | App [vllm:0] online\n" + b"0|vllm     | " + UVICORN.encode(), 1.0)
    assert unwrapper.kind == "pm2"
    assert [(p.service, p.text) for p in pieces] == [("vllm", VLLM + UVICORN), ("gateway", UVICORN),
                                                     ("PM2", "App [vllm:0] online\n")]


@pytest.mark.parametrize("stamp", ["2026-12-05T07:00:00: ", "2026-12-05 07:00:00 +00:00: "])
def test_pm2_time_is_peeled_in_its_files_and_in_pm2_logs(stamp: str) -> None:
    """An app started with ``pm2 --time`` (or a ``log_date_format``): pm2 writes the time before each
    chunk the app wrote, in its log files and in ``pm2 logs``; it is peeled, and a line without it
    continues the one above."""
    unwrapper = Unwrapper()
    pieces = unwrapper.feed(f"{stamp}{VLLM}{stamp}{UVICORN}Traceback (most recent call last):\n".encode(), 1.0)
    assert unwrapper.kind == "pm2-time"
    assert [(p.service, p.text) for p in pieces] == [(None, VLLM + UVICORN + "Traceback (most recent call last):\n")]
    unwrapper = Unwrapper()
    pieces = unwrapper.feed(f"0|vllm     | {stamp}{VLLM}PM2        | App [vllm:0] online\n"
                            f"1|gateway  | {stamp}{UVICORN}0|vllm     | {stamp}{UVICORN}".encode(), 1.0)
    assert unwrapper.kind == "pm2+pm2-time"
    assert [(p.service, p.text) for p in pieces] == [("vllm", VLLM + UVICORN), ("PM2", "App [vllm:0] online\n"),
                                                     ("gateway", UVICORN)]


def test_app_lines_that_begin_with_a_time_are_no_pm2_time() -> None:
    """TEI's, Postgres' and docker -t's times are followed by no colon: those lines stay whole."""
    data = ("2025-08-09T19:36:02.798333Z  INFO text_embeddings_router: router/src/main.rs:175: Ready\n"
            "2025-01-02 03:04:05.123 UTC [12] LOG:  database system is ready to accept connections\n") * 2
    unwrapper, pieces = run(data.encode())
    assert unwrapper.kind == "none"
    assert text_of(pieces) == data


def test_a_pm2_app_name_may_hold_spaces() -> None:
    """``pm2 start app.py --name "my app"``: the app's name is whole, spaces and all."""
    unwrapper = Unwrapper()
    pieces = unwrapper.feed(b"0|my app     | " + UVICORN.encode() + b"1|vllm       | " + VLLM.encode(), 1.0)
    assert unwrapper.kind == "pm2"
    assert [(p.service, p.text) for p in pieces] == [("my app", UVICORN), ("vllm", VLLM)]


def test_a_pm2_log_that_begins_with_pm2s_own_lines_is_no_compose_log() -> None:
    """pm2's own ``PM2  | `` lines carry compose's prefix too: a pm2 log that begins with them is
    still pm2's (as compose, its apps' lines would have joined the stream "PM2")."""
    unwrapper = Unwrapper()
    pieces = unwrapper.feed(b"PM2        | App [vllm:0] starting in -fork mode-\nPM2        | App [vllm:0] online\n"
                            + b"0|vllm     | " + UVICORN.encode(), 1.0)
    assert unwrapper.kind == "pm2"
    assert [(p.service, p.text) for p in pieces] == [
        ("PM2", "App [vllm:0] starting in -fork mode-\nApp [vllm:0] online\n"), ("vllm", UVICORN)]

