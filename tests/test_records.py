"""The records stage: multi-line records and batches that never end inside a record."""

from __future__ import annotations

import random

import pytest

from logmetrics.records import RecordAssembler, last_record_start, split_records
from logmetrics.records.shapes import INDENTED, NODE_STACK, POSTGRES, PRETTY_JSON, PYTHON_TRACEBACK, compiled

TRACE = (
    "ERROR: Exception in ASGI application\n"
    "Traceback (most recent call last):\n"
    '  File "app.py", line 3, in run\n'
    "    raise ValueError('x')\n"
    "ValueError: x\n"
)


def test_traceback_is_one_record() -> None:
    """A traceback with its introducing line, frames and final exception line is one record."""
    records = split_records("INFO: before\n" + TRACE + "INFO: after\n")
    assert records == ["INFO: before", TRACE.rstrip("\n"), "INFO: after"]


def test_chained_exception_stays_in_the_record() -> None:
    """The 'During handling' chaining line and the second traceback continue the same record."""
    text = TRACE + "\nDuring handling of the above exception, another exception occurred:\n\n" + TRACE
    assert len(split_records(text)) == 2  # the second 'ERROR: Exception in ASGI' line starts a record


def test_last_record_start_skips_back_over_continuations() -> None:
    """The last record of a text starts at its last non-continuation line."""
    text = "a\n" + TRACE
    assert text[last_record_start(text):] == TRACE


def test_assembler_holds_back_the_last_record_until_flush() -> None:
    """A traceback cut across two reads reaches the parser whole, exactly once."""
    asm = RecordAssembler()
    first = asm.feed("x\n" + TRACE[:60].rsplit("\n", 1)[0] + "\n")
    rest = TRACE[len(TRACE[:60].rsplit("\n", 1)[0]) + 1:]
    second = asm.feed(rest + "y\n", rest.count("\n") + 1)
    third = asm.flush()
    assert first == ("x\n", 1)
    assert second == (TRACE, 5)
    assert third == ("y\n", 1)
    assert asm.flush() == ("", 0)


def test_assembler_lets_out_a_record_that_never_ends() -> None:
    """Indented lines without end: held up to ``max_chars``, then let out, every line once."""
    asm = RecordAssembler(max_chars=1000)
    out = [asm.feed("head\n")]
    out += [asm.feed("  frame line of forty characters......\n" * 10) for _ in range(100)]
    out.append(asm.flush())
    assert asm.pending == ""
    assert sum(n for _, n in out) == 1 + 1000
    assert "".join(text for text, _ in out).count("\n") == 1001
    assert all(len(text) <= 1000 + 400 for text, _ in out)  # never more than the cap and one read


def test_empty_lines_are_not_records() -> None:
    """Blank lines produce no records."""
    assert split_records("\n\n") == []


NODE = "TypeError: bad input\n    at parse (/app/a.js:1:2)\n    at main (/app/b.js:3:4)\n"


def test_a_node_error_starts_its_own_record_with_its_frames() -> None:
    """A Node ``TypeError:`` line is not glued to the line above; its ``at`` frames continue it."""
    records = split_records("INFO: before\n" + NODE + NODE)
    assert records == ["INFO: before", NODE.rstrip("\n"), NODE.rstrip("\n")]


def test_a_python_exception_line_ends_its_traceback_even_after_node_records() -> None:
    """The final ``ValueError: x`` joins the traceback above it, and only a traceback."""
    records = split_records(NODE + TRACE + "KeyError: 'alone'\n")
    assert records == [NODE.rstrip("\n"), TRACE.rstrip("\n"), "KeyError: 'alone'"]


def test_a_traceback_cut_at_its_start_keeps_its_exception_line() -> None:
    """Reading that began inside a traceback: its last frame and exception line stay one record."""
    assert split_records('    raise ValueError("x")\nValueError: x\nnext\n') == [
        '    raise ValueError("x")\nValueError: x', "next"]


PG = (" 2024-09-30 18:14:40.810 UTC [10] LOG:  checkpoint\n"
      "172.27.0.5 2024-11-01 01:14:28.859 UTC [87] u@d FATAL:  password authentication failed for user \"u\"\n"
      "172.27.0.5 2024-11-01 01:14:28.859 UTC [87] u@d DETAIL:  Connection matched pg_hba.conf line 89\n"
      "172.27.0.5 2024-11-01 01:14:28.859 UTC [87] u@d HINT:  check it\n"
      "172.27.0.5 2024-11-01 01:14:28.900 UTC [88] u@d DETAIL:  another process\n")


def test_postgres_detail_lines_continue_the_line_with_the_same_prefix() -> None:
    """DETAIL/HINT lines join the record whose prefix they repeat; another prefix starts a record."""
    rule = compiled((POSTGRES,))
    records = split_records(PG, rule)
    assert [r.count("\n") + 1 for r in records] == [1, 3, 1]
    assert PG[last_record_start(PG, rule):].startswith("172.27.0.5 2024-11-01 01:14:28.900 UTC [88]")


def test_shapes_and_line_rule_agree_on_where_the_last_record_starts() -> None:
    """The assembler with shapes holds back exactly the last record, blank lines left out."""
    asm = RecordAssembler(compiled((PYTHON_TRACEBACK, NODE_STACK)))
    assert asm.feed("a\n" + NODE + "\n") == ("a\n", 1)
    assert asm.flush() == (NODE + "\n", 4)
    chained = split_records("\n" + TRACE + "\n\nDuring handling of the above exception:\n\n" + TRACE)
    assert chained == [TRACE.rstrip("\n") + "\nDuring handling of the above exception:", TRACE.rstrip("\n")]


def test_the_object_node_prints_after_a_stack_belongs_to_it() -> None:
    """``{ code: ..., }`` after the last ``at`` frame is part of the error; a later ``}`` is not."""
    text = ("Error: Cannot find module 'x'\n    at f (node:internal/a:1:2)\n    at node:internal/b:3:4 {\n"
            "  code: 'MODULE_NOT_FOUND',\n  requireStack: []\n}\n}\nnext\n")
    assert [r.count("\n") + 1 for r in split_records(text, compiled((NODE_STACK, INDENTED)))] == [6, 1, 1]


LINES = ["INFO: plain", "", "Traceback (most recent call last):", '  File "a.py", line 1, in f', "    raise X",
         "ValueError: x", "TypeError: y", "    at f (a.js:1:2)", "    at g (a.js:3:4) {", "  code: 'E'", "}",
         "KeyboardInterrupt",
         " 2024-09-30 18:14:40.810 UTC [10] LOG:  x", " 2024-09-30 18:14:40.810 UTC [10] DETAIL:  y"]


@pytest.mark.parametrize("seed", range(30))
def test_split_and_last_start_agree_and_lose_no_line(seed: int) -> None:
    """On random mixes of shapes: every non-blank line is kept once, in order, and the last
    record found walking back is the last record the split gives."""
    rng = random.Random(seed)
    rule = compiled((PYTHON_TRACEBACK, NODE_STACK, POSTGRES, INDENTED))
    text = "".join(rng.choice(LINES) + "\n" for _ in range(rng.randint(1, 40)))
    records = split_records(text, rule)
    assert "\n".join(records).split("\n") == [line for line in text.split("\n") if line]
    if records:
        assert split_records(text[last_record_start(text, rule):], rule) == [records[-1]]


PRETTY = ('{\n  "level": "error",\n  "msg": "unexpected \\"}\\" near {",\n  "error": {\n    "details": [\n'
          '      "a",\n      {\n        "b": 1\n      }\n    ]\n  }\n}\n')


def test_a_pretty_printed_object_is_one_record_up_to_its_closing_brace() -> None:
    """From ``{`` to the ``}`` at the start of a line: nested objects, arrays and braces in strings stay inside."""
    rule = compiled((PRETTY_JSON,))
    assert split_records("before\n" + PRETTY + "after\n" + PRETTY, rule) == [
        "before", PRETTY.rstrip("\n"), "after", PRETTY.rstrip("\n")]


def test_the_closing_brace_ends_the_object_record() -> None:
    """After its ``}``, no line continues the object: an indented line is a record of its own."""
    rule = compiled((PRETTY_JSON,))
    assert split_records(PRETTY + "  indented after\n}\n", rule) == [PRETTY.rstrip("\n"), "  indented after", "}"]


def test_an_object_that_never_closes_does_not_swallow_the_log_after_it() -> None:
    """An unterminated object ends at the next line that is not indented; a later ``}`` stays alone."""
    rule = compiled((PRETTY_JSON, INDENTED))
    text = '{\n  "level": "error",\n  "detail": {\n10:00:01.000 [info] next\nplain line\n}\n{\n  "a": 1\n}\n'
    assert split_records(text, rule) == ['{\n  "level": "error",\n  "detail": {', "10:00:01.000 [info] next",
                                         "plain line", "}", '{\n  "a": 1\n}']


def test_assembler_holds_an_object_until_its_closing_brace_and_caps_one_that_never_ends() -> None:
    """An object cut across reads reaches the parser whole; one that never ends is let out at ``max_chars``."""
    asm = RecordAssembler(compiled((PRETTY_JSON,)))
    head, tail = PRETTY[:30].rsplit("\n", 1)[0] + "\n", PRETTY[len(PRETTY[:30].rsplit("\n", 1)[0]) + 1:]
    assert asm.feed("x\n" + head) == ("x\n", 1)
    assert asm.feed(tail + "y\n") == (PRETTY, PRETTY.count("\n"))
    assert asm.flush() == ("y\n", 1)
    capped = RecordAssembler(compiled((PRETTY_JSON,)), max_chars=1000)
    out = [capped.feed("{\n")] + [capped.feed('  "k": "forty characters of value......",\n' * 10) for _ in range(50)]
    out.append(capped.flush())
    assert sum(n for _, n in out) == 501
    assert all(len(text) <= 1000 + 500 for text, _ in out)


PRETTY_LINES = ["{", "}", '  "a": 1,', '  "b": {', "  },", "INFO: plain", "    at f (a.js:1:2)", ""]


@pytest.mark.parametrize("seed", range(30))
def test_split_and_last_start_agree_with_pretty_objects(seed: int) -> None:
    """On random mixes of object lines and others: every non-blank line is kept once, in order, and the
    last record found walking back is the last record the split gives."""
    rng = random.Random(seed)
    rule = compiled((PRETTY_JSON, NODE_STACK, INDENTED))
    text = "".join(rng.choice(PRETTY_LINES) + "\n" for _ in range(rng.randint(1, 40)))
    records = split_records(text, rule)
    assert "\n".join(records).split("\n") == [line for line in text.split("\n") if line]
    if records:
        assert split_records(text[last_record_start(text, rule):], rule) == [records[-1]]
