"""Fuzzing the engine with every registered parser and with auto routing.

Hostile input (random bytes, invalid UTF-8, NUL bytes, lines past the cap, each parser's sample
lines almost as they should be) goes through the real pipeline (``tests/fuzzing.py``). Whatever the
input: nothing raises, every line is read and reaches a parser or is counted as unmatched, no value
in the store is NaN, infinite or a negative counter, label values are valid UTF-8 and bounded, and
a hostile stream changes nothing in the series of another stream.
"""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from logmetrics.engine.engine import Engine
from logmetrics.engine.parsing import fast_records, parse_records
from logmetrics.plugins import record_rule
from logmetrics.records import Batch, split_records
from logmetrics.store.store import Store
from logmetrics.testing import has_frequent, has_own_batch
from tests.fuzzing import CAP, FUZZ, HOSTILE_LINE, PARSERS, SAMPLES, Run, check_store, chunked, lines_for, run

NAMES = sorted(PARSERS)


def stream(lines: list[bytes]) -> st.SearchStrategy[list[bytes]]:
    """The reads of one stream made of ``lines``."""
    return chunked(b"".join(lines))


def check_accounted(got: Run, parser: str | None) -> None:
    """Every line fed is read under its source, and reaches a parser or is counted unmatched."""
    for path, n in got.fed.items():
        assert got.counter("logmetrics_lines_read_total", path) == n, path
    read = got.total("logmetrics_lines_read_total")
    unrouted = got.counter("logmetrics_lines_unmatched_total", "none")
    assert sum(got.engine.parsed.values()) + unrouted == read
    for s in got.engine.streams.values():
        assert not s.held and not s.assembler.pending, s.source  # nothing left behind at the end
    if parser is not None:
        matched = got.counter("logmetrics_lines_matched_total", parser)
        unmatched = got.counter("logmetrics_lines_unmatched_total", parser)
        assert matched + unmatched <= read
        if matched == 0:
            assert unmatched == read  # nothing recognised: every line counted as such


@pytest.mark.parametrize("name", NAMES)
@FUZZ
@given(data=st.data())
def test_hostile_lines_through_each_parser(name: str, data: st.DataObject) -> None:
    """A parser's sample lines mutated, mixed with hostile ones: nothing raises, all accounted."""
    lines = data.draw(st.lists(lines_for(name), min_size=1, max_size=60))
    reads = data.draw(stream(lines))
    got = run([("/in/a.log", r) for r in reads], parser=name, idle_every=data.draw(st.sampled_from([0, 1, 3])))
    check_accounted(got, name)
    longer = sum(len(line) > CAP for line in b"".join(lines).split(b"\n"))
    assert got.cut.get("/in/a.log", 0) == longer  # each line past the cap counted once, as truncated
    check_store(got.store)


@pytest.mark.parametrize("name", NAMES)
@FUZZ
@given(data=st.data())
def test_only_garbage_is_all_unmatched(name: str, data: st.DataObject) -> None:
    """Lines that are nothing but hostile: each one counted unmatched, none silently dropped."""
    lines = data.draw(st.lists(HOSTILE_LINE, min_size=1, max_size=30))
    got = run([("/in/g.log", r) for r in data.draw(stream(lines))], parser=name)
    check_accounted(got, name)
    check_store(got.store)


@FUZZ
@given(data=st.data())
def test_auto_routing_of_interleaved_hostile_streams(data: st.DataObject) -> None:
    """Three streams, routed by sniffing, their reads interleaved: every line of each accounted."""
    reads: list[tuple[str, bytes]] = []
    for i in range(3):
        name = data.draw(st.sampled_from([*NAMES, None]))
        lines = data.draw(st.lists(lines_for(name), min_size=1, max_size=40))
        reads += [(f"/in/{i}.log", r) for r in data.draw(stream(lines))]
    order = data.draw(st.permutations(range(len(reads))))
    by_path: dict[str, list[bytes]] = {}
    for k in order:  # interleaved, but each stream's own reads stay in order
        by_path.setdefault(reads[k][0], [])
    queue = {p: [r for q, r in reads if q == p] for p in by_path}
    mixed = [(reads[k][0], queue[reads[k][0]].pop(0)) for k in order]
    got = run(mixed, idle_every=data.draw(st.sampled_from([0, 2])))
    check_accounted(got, None)
    check_store(got.store)


@FUZZ
@given(data=st.data())
def test_auto_envelope_never_loses_a_line_silently(data: st.DataObject) -> None:
    """Auto envelope and routing over hostile lines: lines are at most joined (a partial entry),
    and each line read reaches a parser or is counted unmatched."""
    lines = data.draw(st.lists(lines_for(None), min_size=1, max_size=60))
    got = run([("/in/e.log", r) for r in data.draw(stream(lines))], envelope="auto")
    read = got.total("logmetrics_lines_read_total")
    assert read <= sum(got.fed.values())
    assert sum(got.engine.parsed.values()) + got.counter("logmetrics_lines_unmatched_total", "none") == read
    check_store(got.store)


def series_of(got: Run, source: str) -> dict[tuple[str, tuple[str, ...]], object]:
    """Every value of the store that belongs to ``source`` (parser series and lines read)."""
    out: dict[tuple[str, tuple[str, ...]], object] = {}
    for table in (got.store.counters, got.store.gauges):
        out |= {k: v for k, v in table.items() if len(k[1]) >= 2 and k[1][1] == source}
    out |= {k: (h.buckets, h.sum, h.count) for k, h in got.store.histograms.items() if k[1][1] == source}
    out[("read", ())] = got.counter("logmetrics_lines_read_total", source)
    return out


HOSTILE_STREAMS = {
    "unending-traceback": [b"Traceback (most recent call last):\n"] + [b'  File "x.py", line 1\n'] * 400,
    "no-newline": [b"y" * 300] * 20,
    "nul-bytes": [b"\x00" * 700 + b"\n"] * 10,
    "unroutable": [bytes(range(256)) + b"\n"] * 30,
    "cri-fragments": [b"2024-05-01T10:00:00.1Z stdout P " + b"p" * 200 + b"\n"] * 30,
    "json-partials": [b'{"log":"' + b"d" * 200 + b'","stream":"stdout"}\n'] * 30,
    "bad-json": [b'{"log": "half\n'] + [b'{"log": 5}\n'] * 30,
}


@pytest.mark.parametrize("name", NAMES)
@pytest.mark.parametrize("hostile", sorted(HOSTILE_STREAMS))
def test_a_hostile_stream_does_not_disturb_another(name: str, hostile: str) -> None:
    """A parser's clean sample read next to a hostile stream gives exactly what it gives alone."""
    clean = [("/in/clean.log", line) for line in SAMPLES[name]]
    bad = [("/in/bad.log", line) for line in HOSTILE_STREAMS[hostile]]
    alone = run(clean, parser=None, envelope="auto")
    mixed: list[tuple[str, bytes]] = []
    for i in range(max(len(clean), len(bad))):
        mixed += clean[i:i + 1] + bad[i:i + 1]
    together = run(mixed, parser=None, envelope="auto")
    assert series_of(together, "/in/clean.log") == series_of(alone, "/in/clean.log")
    read = together.total("logmetrics_lines_read_total")  # fragments joined: at most the lines fed
    assert read <= sum(together.fed.values())
    assert sum(together.engine.parsed.values()) + together.counter("logmetrics_lines_unmatched_total", "none") == read
    check_store(together.store)


FAST_PARSERS = [n for n in NAMES if has_own_batch(PARSERS[n].cls) or has_frequent(PARSERS[n].cls)]


@pytest.mark.parametrize("name", FAST_PARSERS)
@FUZZ
@given(data=st.data())
def test_fast_path_never_claims_more_than_it_got(name: str, data: st.DataObject) -> None:
    """A fast path's counts of matched records and lines stay within its batch (its own
    ``parse_batch``, or the runs of its frequent lines), and the runs raise nothing."""
    lines = data.draw(st.lists(lines_for(name), min_size=1, max_size=60))
    text = b"".join(lines).decode("utf-8", "replace").replace("\x00", "")
    text = "\n".join(line for line in text.split("\n") if line) + "\n"
    parser = PARSERS[name].cls()
    n = text.count("\n")
    batch = Batch("/in/b.log", text, 0.0, n)
    if has_own_batch(type(parser)):
        _, matched, physical, _ = fast_records(parser, batch)
    else:
        _, matched, physical, errors, _ = parse_records(parser, batch)
        assert errors == 0
    assert 0 <= matched <= len(split_records(text, record_rule(type(parser))))
    assert 0 <= physical <= n


@pytest.mark.parametrize("name", [*NAMES, None])
@FUZZ
@given(data=st.data())
def test_learning_from_hostile_history_counts_nothing(name: str | None, data: st.DataObject) -> None:
    """What was logged before the read position (learned at start, not counted) may be hostile too:
    ``learn`` raises nothing and counts nothing."""
    parts = data.draw(st.lists(st.lists(lines_for(name), max_size=20).map(b"".join), min_size=1, max_size=3))
    store = Store()
    engine = Engine(PARSERS, store, parser=name, envelope=data.draw(st.sampled_from(["auto", "none", "cri"])),
                    max_line_bytes=CAP)
    engine.learn("/in/h.log", [p[:p.rfind(b"\n") + 1] for p in parts])
    assert not [k for k, v in store.counters.items() if v and k[0] != "logmetrics_label_overflow_total"]
    check_store(store)
