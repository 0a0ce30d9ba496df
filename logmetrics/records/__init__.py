"""Records: physical lines joined into logical records (``assembly``), by the shapes of multi-line
records (``shapes``), with the time each line states (``logtime``).

The names a parser uses are importable from here: ``from logmetrics.records import Record, Batch``.
"""

from logmetrics.records.assembly import (
    DEFAULT_RULE,
    MAX_RECORD_CHARS,
    Batch,
    Record,
    RecordAssembler,
    Rule,
    last_record_start,
    split_records,
)

__all__ = [
    "DEFAULT_RULE",
    "MAX_RECORD_CHARS",
    "Batch",
    "Record",
    "RecordAssembler",
    "Rule",
    "last_record_start",
    "split_records",
]
