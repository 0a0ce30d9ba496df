"""Fuzzing the container envelopes (Docker json-file, CRI) through the real engine.

Streams are built from logical lines, each written as partial entries (``P`` fragments) and a
final one, mixed with lines that are no entry at all, malformed JSON, odd timestamps, and entries
that never get their final part. So the number of lines the engine must read is known by
construction: one per logical line (however it was split or cut at the cap), one per line that is
no entry, one per line still unfinished at the end of input.
"""

from __future__ import annotations

import json
from collections.abc import Callable

import pytest
from hypothesis import given
from hypothesis import strategies as st

from logmetrics.envelopes.unwrap import Unwrapper
from tests.fuzzing import CAP, FUZZ, SAMPLES, WEIRD_BYTES, WEIRD_CHARS, check_store, chunked, lines_for, run

STAMPS = ["2024-05-01T10:00:00.123456789Z", "2024-05-01T10:00:00Z", "2024-05-01T12:00:00.5+02:00",
          "2024-99-99T99:99:99.000000001Z", "0000-01-01T00:00:00.000000000Z", "9999-12-31T23:59:59.999999999-23:59",
          "2024-05-01T10:00:00." + "9" * 100 + "Z", "2024-05-01T10:00:00.1234567890123", "2024-05-01T10:00:00,5Z"]
CONTENT_CHARS = st.sampled_from([*WEIRD_CHARS, "a", "b", "1", " ", "{", "}", ":", "P", "F"])
#: What a fragment holds: text of any kind but a newline, sometimes past the cap.
CONTENT = st.one_of(
    st.lists(CONTENT_CHARS, max_size=30).map("".join),
    st.integers(CAP // 3, 2 * CAP).map(lambda n: "z" * n),
)
#: A line that is no entry of either envelope: it starts with ``#``.
NOT_AN_ENTRY = st.binary(max_size=80).map(lambda b: b"#" + b.replace(b"\n", b" ") + b"\n")


def utf8(text: str) -> bytes:
    """``text`` as bytes (a lone surrogate as its UTF-8 form, invalid as it is)."""
    return text.encode("utf-8", "surrogatepass")


@st.composite
def cri_stream(draw: st.DrawFn) -> tuple[list[bytes], int]:
    """CRI lines (stdout and stderr fragments interleaved, lines that are none) and how many lines
    the engine must read from them."""
    open_parts: dict[str, list[bytes]] = {"stdout": [], "stderr": []}
    out: list[bytes] = []
    expected = 0
    for _ in range(draw(st.integers(1, 40))):
        what = draw(st.sampled_from(["P", "F", "F", "junk"]))
        if what == "junk":
            out.append(draw(NOT_AN_ENTRY))
            expected += 1
            continue
        stream = draw(st.sampled_from(["stdout", "stderr"]))
        content = utf8(draw(CONTENT))
        if draw(st.booleans()):
            content += draw(st.sampled_from(WEIRD_BYTES))
        line = f"{draw(st.sampled_from(STAMPS))} {stream} {what}".encode() + (b" " + content if content else b"")
        out.append(line + b"\n")
        if what == "F":
            expected += 1
            open_parts[stream] = []
        else:
            open_parts[stream].append(content)
    expected += sum(1 for parts in open_parts.values() if parts)  # fragments never followed by F
    return out, expected


@st.composite
def docker_stream(draw: st.DrawFn) -> tuple[list[bytes], int]:
    """json-file lines (partial entries of two streams interleaved, malformed lines) and how many
    lines the engine must read from them."""
    open_parts: dict[str, int] = {}
    out: list[bytes] = []
    expected = 0
    for _ in range(draw(st.integers(1, 40))):
        what = draw(st.sampled_from(["partial", "final", "final", "junk", "malformed"]))
        if what == "junk":
            out.append(draw(NOT_AN_ENTRY))
            expected += 1
            continue
        if what == "malformed":  # no entry (no string "log"): kept whole, one line
            out.append(draw(st.sampled_from([b'{"log": 5, "stream": "stdout"}', b'{"log": null}', b"[1, 2]",
                                             b'{"stream": "stdout"}', b'{"log": "x', b'{"log": "\\ud800x\\n"}',
                                             b'{"log": ["a\\n"]}', b'{"log":'])) + b"\n")
            expected += 1
            continue
        stream = draw(st.sampled_from(["stdout", "stderr", 7]))  # a stream that is no string: one key
        key = stream if isinstance(stream, str) else ""
        text = draw(CONTENT) + ("\n" if what == "final" else "")
        entry = {"log": text, "stream": stream, "time": draw(st.sampled_from([*STAMPS, 5, None]))}
        line = json.dumps(entry, ensure_ascii=draw(st.booleans())).encode("utf-8", "surrogatepass")
        if draw(st.integers(0, 5)) == 0:  # an invalid byte inside the log string
            line = line.replace(b'"log": "', b'"log": "\xff', 1)
        out.append(line + b"\n")
        if len(line) > CAP:  # cut by the tailer at the cap: no JSON any more, a line kept whole
            expected += 1
        elif what == "final":
            expected += 1
            open_parts.pop(key, None)
        else:
            open_parts[key] = 1
    expected += len(open_parts)  # partial entries never followed by their final one
    return out, expected


@pytest.mark.parametrize("envelope", ["cri", "docker-json"])
@pytest.mark.parametrize("parser", ["vllm", None])
@FUZZ
@given(data=st.data())
def test_envelopes_read_every_line_once(envelope: str, parser: str | None, data: st.DataObject) -> None:
    """Partial entries joined, cut at the cap or never finished, malformed lines kept: each logical
    line read exactly once; the lines cut at the cap are counted."""
    lines, expected = data.draw(cri_stream() if envelope == "cri" else docker_stream())
    reads = data.draw(chunked(b"".join(lines)))
    got = run([("/in/c.log", r) for r in reads], parser=parser, envelope=envelope)
    assert got.counter("logmetrics_lines_read_total", "/in/c.log") == expected
    assert sum(got.engine.parsed.values()) + got.counter("logmetrics_lines_unmatched_total", "none") == expected
    check_store(got.store)


@FUZZ
@given(data=st.data())
def test_auto_envelope_decides_from_the_first_line(data: st.DataObject) -> None:
    """Auto-detected CRI and json-file streams, interleaved with a plain one: each read exactly."""
    cri, n_cri = data.draw(cri_stream())
    docker, n_docker = data.draw(docker_stream())
    first_cri = b"2024-05-01T10:00:00.123456789Z stdout F first\n"
    first_docker = b'{"log": "first\\n", "stream": "stdout", "time": "2024-05-01T10:00:00.1Z"}\n'
    plain = [b"plain line %d\n" % i for i in range(data.draw(st.integers(1, 30)))]
    streams = {"/in/cri.log": [first_cri, *cri], "/in/docker.log": [first_docker, *docker], "/in/plain.log": plain}
    reads = [(path, line) for path, lines in streams.items() for line in lines]
    order = data.draw(st.permutations(range(len(reads))))
    seen: dict[str, list[bytes]] = {p: [] for p in streams}
    for k in sorted(order):
        seen[reads[k][0]].append(reads[k][1])
    queues = {p: list(v) for p, v in seen.items()}
    mixed = [(reads[k][0], queues[reads[k][0]].pop(0)) for k in order]
    got = run(mixed, envelope="auto")
    assert got.counter("logmetrics_lines_read_total", "/in/cri.log") == n_cri + 1
    assert got.counter("logmetrics_lines_read_total", "/in/docker.log") == n_docker + 1
    assert got.counter("logmetrics_lines_read_total", "/in/plain.log") == len(plain)
    check_store(got.store)


def test_a_fragment_never_finished_is_let_out_at_the_end() -> None:
    """A CRI ``P`` fragment never followed by ``F``: read once at the end of input, not lost."""
    got = run([("/in/p.log", b"2024-05-01T10:00:00.1Z stdout P half a line\n")], envelope="cri")
    assert got.counter("logmetrics_lines_read_total", "/in/p.log") == 1


@pytest.mark.parametrize("envelope", ["cri", "docker-json"])
def test_a_timestamp_with_thousands_of_digits_is_no_crash(envelope: str) -> None:
    """An envelope timestamp with a fraction of 5,000 digits: the line is read, its time to the nanosecond."""
    stamp = "2024-05-01T10:00:00." + "1" * 5000 + "Z"
    line = (f"{stamp} stdout F hello\n".encode() if envelope == "cri"
            else json.dumps({"log": "hello\n", "stream": "stdout", "time": stamp}).encode() + b"\n")
    unwrapper = Unwrapper(envelope)
    pieces = unwrapper.feed(line, 1.0)
    assert [p.text for p in pieces] == ["hello\n"]
    assert 1714557600.0 <= pieces[0].time < 1714557601.0


NAME = st.one_of(st.sampled_from(["vllm", "db", "api-1", "x.y_z", "a" * 300, "é中", "-bad", "9"]),
                 st.text(st.sampled_from(list("abz09._-é ")), min_size=1, max_size=20))
PREFIXES: dict[str, Callable[[str], str]] = {
    "compose": lambda name: f"{name}  | ",
    "journald": lambda name: f"Mar 02 10:00:0{len(name) % 10} host {name}[12]: ",
    "kubectl": lambda name: f"[pod/{name}/c] ",
    "docker-timestamps": lambda name: "2024-05-01T10:00:00.123456789Z ",
    "compose+docker-timestamps": lambda name: f"{name}  | 2024-05-01T10:00:00.123456789Z ",
}


@pytest.mark.parametrize("envelope", sorted(PREFIXES))
@FUZZ
@given(data=st.data())
def test_prefixed_envelopes_read_every_line(envelope: str, data: st.DataObject) -> None:
    """Line prefixes with odd names, mixed with lines that have none and hostile ones: every line
    is read once, under whatever source its prefix names."""
    lines: list[bytes] = []
    for _ in range(data.draw(st.integers(1, 30))):
        content = data.draw(st.one_of(lines_for(None), st.just(b"plain\n")))
        if data.draw(st.integers(0, 3)):
            content = PREFIXES[envelope](data.draw(NAME)).encode() + content
        lines.append(content if content.endswith(b"\n") else content + b"\n")
    got = run([("/in/p.log", r) for r in data.draw(chunked(b"".join(lines)))], envelope=envelope)
    assert got.total("logmetrics_lines_read_total") == sum(got.fed.values())
    assert sum(got.engine.parsed.values()) + got.counter("logmetrics_lines_unmatched_total", "none") == sum(
        got.fed.values())
    check_store(got.store)


WILD_STAMPS = ["1970-01-01T00:00:00.000000001Z", "2024-05-01T10:00:00.5Z", "2024-05-01T09:59:00Z",
               "2038-01-19T03:14:08Z", "9999-12-31T23:59:59.999999999Z", "2024-05-01T10:00:00Z",
               "1969-12-31T23:59:59Z", "2024-05-01T10:00:00.000000001+14:00"]


@pytest.mark.parametrize("name", sorted(SAMPLES))
@FUZZ
@given(data=st.data())
def test_envelope_time_going_anywhere(name: str, data: st.DataObject) -> None:
    """A parser's sample lines in CRI envelopes whose stamps jump back and forth across centuries
    (durations from record times, time-outs): no negative, NaN or infinite value comes of it."""
    lines = data.draw(st.lists(st.one_of(st.sampled_from(SAMPLES[name]), lines_for(name)), min_size=1, max_size=60))
    wrapped = [f"{data.draw(st.sampled_from(WILD_STAMPS))} stdout F ".encode() + line + b"\n"
               for line in b"".join(lines).split(b"\n")[:-1]]
    got = run([("/in/t.log", line) for line in wrapped], parser=data.draw(st.sampled_from([name, None])),
              envelope="cri", idle_every=data.draw(st.sampled_from([0, 1, 5])))
    assert got.total("logmetrics_lines_read_total") == sum(got.fed.values())
    check_store(got.store)


@given(st.binary(max_size=2000))
def test_newlines_counts_what_count_counts(data: bytes) -> None:
    """``newlines`` (a length less the length without them) is ``bytes.count`` of a newline, on any bytes."""
    from logmetrics.envelopes.text import newlines

    assert newlines(data) == data.count(b"\n")
    assert newlines(data * 3 + b"\n") == 3 * data.count(b"\n") + 1
