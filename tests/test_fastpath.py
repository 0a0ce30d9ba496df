"""The framework's fast path: runs of a parser's frequent lines, whole records only, and what the
engine does with a ``parse_run`` or ``parse_batch`` that claims counts its input cannot hold."""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Iterable
from pathlib import Path

import pytest

from logmetrics.engine.parsing import fast_records, parse_records
from logmetrics.events import Event
from logmetrics.plugins import BatchResult, Parser
from logmetrics.plugins.fastpath import Run, runs
from logmetrics.records import Batch, Record
from logmetrics.records.shapes import DEFAULT_SHAPES
from logmetrics.testing import assert_fast_path_matches

DONE = "GET /x 200"


class Gateway(Parser):
    """One request per ``GET /x 200`` line, record by record or a run at a time."""

    name = "gateway"
    frequent = r"GET /x 200"

    def parse(self, record: Record) -> Iterable[Event]:
        return [Event("http_requests_total", ("GET", "/x", "200"), 1)] if record.text == DONE else []

    def parse_run(self, run: Run) -> tuple[list[Event], int]:
        n = len(run.lines())
        return [Event("http_requests_total", ("GET", "/x", "200"), n)], n


def batch(text: str) -> Batch:
    """``text`` as one batch of whole lines."""
    return Batch("test", text, 0.0, text.count("\n"))


def test_a_run_is_whole_records_only() -> None:
    """A run holds frequent lines only, and stops before a line that a traceback's frame would
    continue: the frame joins the line above it, which is then no frequent record."""
    text = f"{DONE}\n{DONE}\n\n{DONE}\n  File 'x.py', line 1\nother\n{DONE}\n"
    found = [text[a:b] for a, b in runs(Gateway.frequent, DEFAULT_SHAPES).spans(text)]
    assert found == [f"{DONE}\n{DONE}", DONE]
    events, matched, lines, errors, _ = parse_records(Gateway(), batch(text))
    assert (matched, lines, errors) == (3, 3, 0)  # the line with a frame below it went to parse: no request
    assert sum(e.value for e in events if isinstance(e.value, int)) == 3


@pytest.mark.parametrize("claim", [-3, 10**9, 2.5, True, "2"])
def test_a_run_whose_count_is_no_count_is_lost_and_counted(claim: object) -> None:
    """A ``parse_run`` that says a negative number, more lines than its run has, or no integer of
    lines gave events: the run is lost and counted as parse errors, one per line, never matched."""

    class Liar(Gateway):
        def parse_run(self, run: Run) -> tuple[list[Event], int]:
            return [Event("http_requests_total", ("GET", "/x", "200"), 1)], claim  # type: ignore[return-value]  # the lie under test

    said: list[BaseException] = []
    events, matched, lines, errors, _ = parse_records(Liar(), batch(f"{DONE}\n{DONE}\nother\n"),
                                                      lambda parser, exc: said.append(exc))
    assert (events, matched, lines, errors) == ([], 0, 0, 2)
    assert "parse_run said" in str(said[0])


@pytest.mark.parametrize("result", [([], -1), ([], 5, 10**6), ([], 1.5), ([], 1, -1)])
def test_a_batch_whose_counts_are_no_counts_raises(result: tuple[object, ...]) -> None:
    """A ``parse_batch`` that says more records or lines matched than its batch holds, fewer than
    none, or no integer: refused (the engine then loses and counts the batch, as for a raise)."""

    class Liar(Gateway):
        def parse_batch(self, batch: Batch) -> BatchResult:
            return result  # type: ignore[return-value]  # the lie under test

    with pytest.raises(ValueError, match="parse_batch said"):
        fast_records(Liar(), batch(f"{DONE}\n{DONE}\n"))


def test_a_frequent_pattern_that_fails_leaves_the_batch_to_parse() -> None:
    """``frequent_lines`` that raises, or gives a pattern that does not compile: the batch goes
    through ``parse`` record by record, and the failure is reported."""

    class Broken(Gateway):
        def frequent_lines(self, text: str) -> str:
            return "(unclosed"

    said: list[BaseException] = []
    events, matched, _, errors, _ = parse_records(Broken(), batch(f"{DONE}\n{DONE}\n"),
                                                  lambda parser, exc: said.append(exc))
    assert (matched, errors, len(events)) == (2, 0, 2)
    assert len(said) == 1 and "missing )" in str(said[0])


def test_the_kit_names_the_series_a_wrong_fast_path_gets_wrong() -> None:
    """``assert_fast_path_matches`` on a ``parse_run`` that counts one request too many per run
    fails naming that series with both values, and not the series that agree."""

    class OffByOne(Gateway):
        def parse_run(self, run: Run) -> tuple[list[Event], int]:
            n = len(run.lines())
            return [Event("http_requests_total", ("GET", "/x", "200"), n + 1),
                    Event("backend_restarts_total", (), 0)], n

    text = f"{DONE}\n{DONE}\nother\n{DONE}\n"
    with pytest.raises(AssertionError) as failed:
        assert_fast_path_matches(OffByOne, text, (None,))
    message = str(failed.value)
    assert "http_requests_total{GET,/x,200}: parse gives 3.0, the fast path 5.0" in message
    assert "backend_restarts_total" not in message and len(message) < 400


RAISING = """
from logmetrics.events import Event
from logmetrics.plugins import Parser


class Raising(Parser):
    name = "raising"
    frequent = "GET /x 200"

    def parse(self, record):
        return [Event("http_requests_total", ("GET", "/x", "200"), 1)] if record.text == "GET /x 200" else []

    def parse_run(self, run):
        raise RuntimeError("broken on purpose")
"""


def test_a_failing_fast_path_is_said_to_fail_not_to_match_nothing(tmp_path: Path) -> None:
    """watch on a stream whose every run fails: the parser's failure is warned about and counted
    in logmetrics_parse_errors_total, and no hint about envelopes (a stream matching nothing) follows."""
    (tmp_path / "raising.py").write_text(RAISING)
    log = tmp_path / "x.log"
    log.write_text(f"{DONE}\n" * 3000)
    out = subprocess.run([sys.executable, "-m", "logmetrics", "watch", "--oneshot", "--plugin", "raising.py",
                          "--parser", "raising", str(log)], cwd=tmp_path, capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    assert "parser raising raised RuntimeError: broken on purpose" in out.stderr
    assert "did not match" not in out.stderr
    assert 'logmetrics_parse_errors_total{parser="raising"} 3000.0' in out.stdout


def test_check_strict_takes_large_sums_in_another_order_for_the_same(tmp_path: Path) -> None:
    """300 timing blocks of 1e32 prompt tokens: parse sums floats one by one, the fast path at once;
    they differ in the last digits only, and ``check --strict`` holds the fast path to parse, not to
    those digits (it failed on them, a gate that no parser could pass)."""
    block = ("slot print_timing: id  0 | task 1 | \nprompt eval time =      44.86 ms / "
             "100000000000000000000000000000000 tokens (    0.05 ms per token, 19861.79 tokens per second)\n"
             "       eval time =     494.08 ms /    21 tokens (   23.53 ms per token,    42.50 tokens per second)\n"
             "      total time =     539.00 ms /   912 tokens\n")
    (tmp_path / "huge.log").write_text(block * 300)
    out = subprocess.run([sys.executable, "-m", "logmetrics", "check", "--strict", "--parser", "llamacpp",
                          str(tmp_path / "huge.log")], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stdout + out.stderr
    assert "llm_prompt_tokens_total" in out.stdout
