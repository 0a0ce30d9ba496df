#!/usr/bin/env python3
"""Where a parser's time goes: ``parse()`` timed per kind of record, in-process.

Records are cut as the engine cuts them for that parser; a record's kind is its first line with
numbers replaced by ``N`` and the LeapfrogAI and TEI headers shortened, cut to its first words. Per
kind it prints the total time, the records, microseconds per record and events per record, the
costliest kinds first. It measures ``parse()`` alone: no reading, no store.

    .venv/bin/python bench/perkind.py llamacpp bench/out/mix-1000000-7/llama-server.log
"""

from __future__ import annotations

import argparse
import re
import sys
import time
from collections import defaultdict
from pathlib import Path

from logmetrics.plugins import discover, record_rule
from logmetrics.records import Record, split_records

_LFAI = re.compile(r"^\S+: \d{4}-\S+ \S+ \| (\w+) \| \S+ >>> ")
_TEI = re.compile(r"^\d{4}-\d\d-\d\dT\S+Z\s+")
_NUM = re.compile(r"\d+(?:\.\d+)?")


def kind(record: str, words: int = 9) -> str:
    """The kind of a record: its first line, numbers as ``N``, its first ``words`` words."""
    head = record.split("\n", 1)[0]
    head = _TEI.sub("TEI ", _LFAI.sub(r"LFAI \1 ", head))
    text = " ".join(_NUM.sub("N", head).split()[:words])[:80]
    return text + (" +more lines" if "\n" in record else "")


def main(argv: list[str] | None = None) -> int:
    """Command line entry point."""
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("parser", help="name of an installed parser")
    ap.add_argument("log", type=Path, help="the log file to read")
    ap.add_argument("--top", type=int, default=12, help="kinds to show (default 12)")
    args = ap.parse_args(argv)
    entries = discover()
    if args.parser not in entries:
        ap.error(f"no parser {args.parser!r}; installed: {', '.join(sorted(entries))}")
    cls = entries[args.parser].cls
    parser = cls()
    records = split_records(args.log.read_text(encoding="utf-8", errors="replace"), record_rule(cls))
    cost: dict[str, float] = defaultdict(float)
    count: dict[str, int] = defaultdict(int)
    events: dict[str, int] = defaultdict(int)
    clock = time.perf_counter
    for rec in records:
        k = kind(rec)
        start = clock()
        got = list(parser.parse(Record(rec, 1767600000.0)))
        cost[k] += clock() - start
        count[k] += 1
        events[k] += len(got)
    print(f"{args.log}: {len(records)} records, parse() {sum(cost.values()):.2f} s in all")
    print(f"{'s':>7} {'records':>8} {'us/rec':>7} {'ev/rec':>6}  kind")
    for k in sorted(cost, key=lambda x: cost[x], reverse=True)[: args.top]:
        print(f"{cost[k]:7.2f} {count[k]:8d} {cost[k] / count[k] * 1e6:7.1f} {events[k] / count[k]:6.1f}  {k}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
