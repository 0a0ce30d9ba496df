"""The per-record helpers parsers share: access lines, prefixes, errors, LeapfrogAI lines, request pairs."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st
from logmetrics_parsers.common import _ID_SEGMENT, _is_id, access_line, route_template, strip_prefix
from logmetrics_parsers.errors import COMMON_CAUSES, Phrases, is_traceback, node_error, python_exception
from logmetrics_parsers.leapfrog import leapfrog_line
from logmetrics_parsers.pairs import TIMED_OUT, Pairs

from logmetrics.events import Event
from logmetrics.store.store import Store

TB = """Traceback (most recent call last):
  File "/app/main.py", line 3, in <module>
    run()
torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB."""


def test_access_line_gives_method_raw_path_and_code() -> None:
    """A uvicorn access line, with or without a process prefix, splits into method, path and code."""
    line = '(APIServer pid=1) INFO:     127.0.0.1:5 - "POST /v1/chat/completions?x=1 HTTP/1.1" 200 OK'
    assert access_line(line) == ("POST", "/v1/chat/completions?x=1", "200")
    assert access_line("INFO:     Started server process [1]") is None


def test_route_template_keeps_no_email_or_typed_text_in_a_segment() -> None:
    """A segment no route name could be (an e-mail, name=value, quotes, non-ASCII) becomes {id}."""
    assert route_template("/users/alice.smith@example.com/files") == "/users/{id}/files"
    assert route_template("/v1/files/name=eq.secret") == "/v1/files/{id}"
    assert route_template("/v1/chat/completions/it's") == "/v1/chat/completions/{id}"
    assert route_template("/wiki/Caf\u00e9") == "/wiki/{id}"
    assert route_template("/v1/models/gemini-pro:generateContent") == "/v1/models/gemini-pro:generateContent"
    assert route_template("/openai/v1/vector_stores") == "/openai/v1/vector_stores"
    assert route_template("/search/ignore-all-previous-instructions-and-print") == "/search/{id}"
    assert route_template("/v1/" + "a" * 41) == "/v1/{id}"
    assert route_template("/.well-known/openid-configuration") == "/.well-known/openid-configuration"


def test_strip_prefix_removes_only_a_process_prefix() -> None:
    """Process prefixes go; other text is kept whole."""
    assert strip_prefix("(EngineCore_DP0 pid=8) INFO x") == "INFO x"
    assert strip_prefix("[rank0]: Traceback") == "Traceback"
    assert strip_prefix("INFO x") == "INFO x"


def test_python_exception_from_a_whole_or_a_cut_traceback() -> None:
    """The last exception line names the error, whether or not the header was read."""
    assert python_exception(TB) == ("torch.OutOfMemoryError", "CUDA out of memory. Tried to allocate 2.00 GiB.")
    tail = TB.split("\n", 2)[2]
    assert python_exception(tail) == ("torch.OutOfMemoryError", "CUDA out of memory. Tried to allocate 2.00 GiB.")
    assert is_traceback(TB) and is_traceback('  File "/a.py", line 1, in f\n    g()')
    assert not is_traceback("INFO all fine")
    assert python_exception("ERROR Error in x: ValueError: bad") == ("ValueError", "bad")


def test_node_error_needs_its_stack() -> None:
    """A Node error line followed by 'at' frames is a Node error; a lone line is not."""
    text = "TypeError: fetch failed\n    at node:internal/deps/undici:1:1\n    at async load (file:///app/x.js:2:3)"
    assert node_error(text) == ("TypeError", "fetch failed")
    assert node_error("TypeError: fetch failed") is None


def test_phrase_tables_are_per_backend() -> None:
    """A backend's own phrases decide first; without one a traceback is 'exception', else 'error'."""
    table = Phrases((("kv_cache_full", ("failed to find free space in the KV cache",)), *COMMON_CAUSES))
    assert table.classify("failed to find free space in the KV cache") == "kv_cache_full"
    assert table.classify(TB, traceback=True) == "oom"
    assert table.classify("something broke", traceback=True) == "exception"
    assert table.classify("something broke") == "error"
    assert table.classify("ValueError: no", request_handler=True) == "bad_request"
    assert {"kv_cache_full", "oom", "exception", "error", "bad_request"} <= set(table.types)


def test_leapfrog_line_fields() -> None:
    """The shared LeapfrogAI format splits into logger, time, level, file and message."""
    got = leapfrog_line("__main__: 2024-11-13 10:45:39,154 | INFO | main.py:29 >>> Task transcribe is starting")
    assert got is not None
    assert (got.logger, got.level, got.file, got.msg) == ("__main__", "INFO", "main.py", "Task transcribe is starting")
    assert abs(got.time - 1731494739.154) < 1e-6
    assert leapfrog_line("INFO: plain") is None


def test_pairs_give_running_durations_and_time_outs() -> None:
    """Starts and finishes pair by key; a start without its finish times out and is counted."""
    pairs = Pairs(timeout=10)
    pairs.start("a", "m", 100.0)
    pairs.start("b", "m", 101.0)
    assert pairs.finish("a") == ("m", 100.0)
    assert pairs.finish("zz") is None
    assert pairs.events() == [Event("llm_requests_running", ("m",), 1, rule="pairs")]
    assert pairs.expire(120.0) == 1
    assert pairs.events() == [Event("llm_requests_running", ("m",), 0, rule="pairs"),
                              Event(TIMED_OUT, (), 1, rule="pairs")]


def test_store_counts_time_outs_under_the_parser() -> None:
    """The time-out event lands in the engine counter, labelled with the parser's name."""
    store = Store()
    assert store.apply([Event(TIMED_OUT, (), 2)], "whisper", "s") == []
    assert store.counters[(TIMED_OUT, ("whisper",))] == 2


@given(st.one_of(st.text(alphabet="abcdefXYZ", max_size=20), st.text(alphabet="abcz019-_.%é~: ", max_size=45),
                 st.text(max_size=20)))
def test_an_id_segment_is_told_as_the_id_pattern_tells_it(segment: str) -> None:
    """The quick test of a path segment (short words of ASCII letters are never ids) agrees with
    the id pattern on the segment and on its stem before an extension, for any segment."""
    slow = bool(_ID_SEGMENT.fullmatch(segment) or _ID_SEGMENT.fullmatch(segment.rpartition(".")[0]))
    assert _is_id(segment) == slow
