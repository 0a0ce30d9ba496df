"""The vLLM parser's rare lines: where each is in a batch, and what it carries, for the segments.

The scan counts the rare lines' keys in C (``vllm_patterns.RARE``); only the kinds of line a
batch holds are then looked for, each with its pattern, and given as positioned ``Item``s (request
lines, preemptions, V0 prefix-cache and request lines) and ``Mark``s (start-up, logo and
lifecycle lines, which cut the batch into segments).
"""

from __future__ import annotations

from collections import Counter

from . import vllm_patterns as P
from .vllm_kinds import Control, Item, Kind, Mark
from .vllm_lines import Records, life_lines
from .vllm_requests import Requests
from .vllm_startup import startup_kind
from .vllm_stats import Stats
from .vllm_zeros import V0_REQUESTS, V1_REQUESTS, Capabilities


def aborted_ids(ids: str | None) -> int:
    """How many request ids an ``Aborted request(s) a, b.`` line names (one without a list)."""
    return 1 if not ids else len([i for i in ids.split(",") if i.strip()])


def tally(found: Counter[tuple[str, str]]) -> tuple[Counter[str], list[tuple[str, int]]]:
    """``RARE``'s matches, counted: how many of each key, and the ids of the ``Aborted request``
    lines with how many lines named each (the ids keep their leading space)."""
    rare: Counter[str] = Counter()
    aborted: list[tuple[str, int]] = []
    for (key, ids), n in found.items():
        rare[key] += n
        if ids:
            aborted.append((ids, n))
    return rare, aborted


class RareLines:
    """Finds a batch's rare lines, with what the parser has learned of its stream."""

    def __init__(self, records: Records, caps: Capabilities, requests: Requests, stats: Stats) -> None:
        self.records, self.caps, self.requests, self.stats = records, caps, requests, stats

    def find(self, t: str, rare: Counter[str], aborted: list[tuple[str, int]], controls: list[Mark],
             items: list[Item], life: list[Mark]) -> tuple[int, int, int]:
        """Positions and values of the rare lines that ``rare`` says are in ``t``.

        Aborted and failed requests need no position when the text has no start-up line (one
        segment, one model): they are then only counted, in C, and returned as (aborted ids,
        aborted lines, failed lines); the aborted ones come from the scan (``aborted``, see ``tally``).
        """
        if any(key in P.STARTUP_KEYS for key in rare):
            controls.extend(Mark(m.start(), startup_kind(m.group(1)), m.group(0)) for m in P.STARTUP.finditer(t))
        if any("\u2580" <= key[-1:] <= "\u259f" for key in rare):
            controls.extend(Mark(m.start(), Control.LOGO, m.group(1)) for m in P.LOGO_MODEL.finditer(t))
        if self.records.life:
            life.extend(life_lines(t, self.records.life))
        if any(key in P.DEAD_KEYS or key.endswith("EngineDeadError") for key in rare):
            life.extend(Mark(m.start(), Control.DEAD, "") for m in P.DEAD.finditer(t))
        if controls and life:  # start-up lines too: each in its place, for the model it concerns
            controls.extend(life)
            life.clear()
        controls.sort()
        ended = (0, 0, 0)
        if controls:
            if "Aborted request" in rare:
                items.extend(Item(m.start(), Kind.ABORTED, "", aborted_ids(m.group(1)))
                             for m in P.ABORTED_LIST.finditer(t))
            if "Request" in rare:
                items.extend(Item(m.start(), Kind.ABORTED if m.group(1) else Kind.FAILED, "", 1)
                             for m in P.REQUEST_ENDED.finditer(t))
        elif aborted or "Request" in rare:
            ended_by = Counter(P.REQUEST_ENDED.findall(t)) if "Request" in rare else Counter()
            ones, failed = ended_by["a"], ended_by[""]
            ids = sum(n if "," not in found else n * aborted_ids(found) for found, n in aborted)
            ended = (ids + ones, sum(n for _, n in aborted) + ones, failed)
        self._items(t, rare, items)
        return ended

    def _items(self, t: str, rare: Counter[str], items: list[Item]) -> None:
        """The request, preemption and V0 lines (positions: the model in effect)."""
        line_time = self.stats.clock.line_time
        # request lines that show a series can move, until it is known
        if (P.ADDED_V0 in rare or P.FINISHED_V0 in rare) and not self.caps.has(V0_REQUESTS):
            items.extend(Item(m.start(), Kind.CAN, "v0" if m.group(1) == "Added" else "v0 finished", 0)
                         for m in P.V0_REQUEST.finditer(t))
        if P.ADDED_V1 in rare and not self.caps.has(V1_REQUESTS):
            items.extend(Item(m.start(), Kind.CAN, "v1", 0) for m in P.ADDED_V1_AT.finditer(t))
        if P.REQUEST_KEYS.intersection(rare) or self.requests.outputs:
            items.extend(self.requests.items(t, rare, line_time))
        if P.SUPPORTED_KEY in rare:
            for m in P.SUPPORTED.finditer(t):
                at = line_time(t, m.start())
                if at is not None:
                    items.append(Item(m.start(), Kind.ORIGIN, "", at))
        if "Sequence group" in rare:
            for m in P.PREEMPTED.finditer(t):
                total = m.group(1)
                items.append(Item(m.start(), Kind.PREEMPTED, "", int(total) if total else -1))
        if "Prefix cache hit rate: GPU" in rare:
            items.extend(Item(m.start(), Kind.V0_PREFIX, m.group(1), 0) for m in P.V0_PREFIX.finditer(t))
        if P.ADDED_V0 in rare or P.FINISHED_V0 in rare:
            for m in P.V0_REQUEST.finditer(t):
                at = line_time(t, m.start())
                if at is not None:
                    items.append(Item(m.start(), Kind.ADDED if m.group(1) == "Added" else Kind.DONE, m.group(2), at))
