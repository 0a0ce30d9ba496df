"""The records stage: multi-line records and batches that never end inside a record."""

from __future__ import annotations

from logmetrics.records import RecordAssembler, last_record_start, split_records

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


def test_empty_lines_are_not_records() -> None:
    """Blank lines produce no records."""
    assert split_records("\n\n") == []
