"""Which parser a stream gets, and why: forced, claimed by name, sniffed, or none.

The parser of a stream is chosen once: ``--parser``, else the parser that claims one of the
stream's names (the most specific name first; parsers in name order), else the best ``sniff``
score of its first lines above ``SNIFF_MIN_SCORE`` (ties go to the parser found first). The
reason travels with the choice so that ``logmetrics check`` and ``watch -v`` can say it.
"""

from __future__ import annotations

import fnmatch
import logging
from dataclasses import dataclass

from logmetrics.plugins.contract import PLUGIN_ERRORS
from logmetrics.plugins.finder import ParserEntry

log = logging.getLogger(__name__)

SNIFF_MIN_SCORE = 0.3
#: How many first lines of a stream its sniff looks at.
SNIFF_LINES = 200
#: A sniff score from which a stream is routed at once. Below it (lines any of several backends
#: print, such as bare uvicorn access lines), the engine reads on for a telling line for a while.
CONFIDENT = 0.5
#: How many lines a weak sniff looks at again, for a line that tells whose the stream is.
WEAK_SNIFF_LINES = 5000
_SNIFF_FAILED: set[str] = set()  # parsers whose sniff raised, reported once each


@dataclass(frozen=True)
class Route:
    """A stream's parser (None: no parser recognises it) and why, in words for an operator."""

    entry: ParserEntry | None
    how: str  # "forced", "claimed", "sniffed" or "none"
    why: str
    score: float = 1.0  # the sniff score of a sniffed choice

    @property
    def weak(self) -> bool:
        """A sniff that more lines might overturn: a score below ``CONFIDENT``."""
        return self.how == "sniffed" and self.score < CONFIDENT


def _sniff(parsers: dict[str, ParserEntry], lines: list[str]) -> list[tuple[float, ParserEntry]]:
    """Every parser's sniff score, best first (ties in the order the parsers were found)."""
    scores: list[tuple[float, ParserEntry]] = []
    for entry in parsers.values():
        try:
            scores.append((float(entry.cls.sniff(lines)), entry))
        except PLUGIN_ERRORS as exc:  # a plugin's sniff bug must not stop routing for the others
            if entry.name not in _SNIFF_FAILED:  # once: sniff runs again while a stream is unrouted
                _SNIFF_FAILED.add(entry.name)
                log.warning("parser %s: sniff raised %s: %s (reported once)", entry.name, type(exc).__name__, exc)
    return sorted(scores, key=lambda s: -s[0])


def route(parsers: dict[str, ParserEntry], forced: str | None, names: tuple[str, ...], lines: list[str]) -> Route:
    """The parser for a stream and why: forced, else claimed by one of ``names`` (most specific
    first), else the best sniff of its first ``lines``."""
    if forced is not None:
        return Route(parsers[forced], "forced", "forced by --parser")
    ordered = sorted(parsers.values(), key=lambda e: e.name)
    for name in names:  # the most specific name first: a claim on the file name beats one on its folder
        for entry in ordered:
            for pat in entry.cls.claims:
                if fnmatch.fnmatch(name, pat):
                    return Route(entry, "claimed", f"claimed by name: {name!r} matches {pat!r}")
    ranked = [(s, e) for s, e in _sniff(parsers, lines) if s > 0]  # a 0 says nothing: left out
    if ranked and ranked[0][0] > SNIFF_MIN_SCORE:
        score, best = ranked[0]
        second = f"{ranked[1][1].name} {ranked[1][0]:.2f}" if len(ranked) > 1 else "none, no other parser scored"
        return Route(best, "sniffed", f"sniffed: score {score:.2f}; runner-up: {second}", score)
    tried = " or ".join(repr(n) for n in dict.fromkeys(names))
    best_seen = f"best: {ranked[0][1].name} {ranked[0][0]:.2f}" if ranked else "none scored"
    return Route(None, "none", score=0.0, why=f"no parser claims {tried} and no sniff scored above {SNIFF_MIN_SCORE} "
                               f"({best_seen}); name one with --parser NAME (see 'logmetrics parsers')")


def route_text(parsers: dict[str, ParserEntry], forced: str | None, names: tuple[str, ...], text: str,
               window: int) -> Route:
    """``route`` on the first ``window`` lines of ``text``; a weak sniff looks again at its first
    ``WEAK_SNIFF_LINES`` lines (what ``watch`` and ``check`` both do)."""
    found = route(parsers, forced, names, text.split("\n", window)[:window])
    if found.weak and WEAK_SNIFF_LINES > window:
        found = route(parsers, forced, names, text.split("\n", WEAK_SNIFF_LINES)[:WEAK_SNIFF_LINES])
    return found


def choose(parsers: dict[str, ParserEntry], forced: str | None, names: tuple[str, ...],
           lines: list[str]) -> ParserEntry | None:
    """The parser for a stream (``route`` without the reason)."""
    return route(parsers, forced, names, lines).entry
