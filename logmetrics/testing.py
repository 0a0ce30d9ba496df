"""Helpers for a parser's own tests: events checked where they are made.

``check_events(MyParser, events)`` runs the store's own checks on ``events`` (as the engine would
apply them for this parser) and fails with every problem listed: a family that is neither in the
catalog nor among the parser's ``metrics``, the wrong number of label values, a value the family
cannot take (a negative counter increment, NaN), a label value that is not a string, an object
that is no ``Event``. It returns the events, so that a test can wrap a call::

    events = check_events(MyParser, parser.parse(Record("...")))
"""

from __future__ import annotations

import logging
from collections.abc import Iterable

from logmetrics.events import Event
from logmetrics.plugins import Parser
from logmetrics.store.store import Store


class EventError(AssertionError):
    """Events the engine would refuse; the message lists each with its reason."""


def refused(parser_cls: type[Parser], events: Iterable[Event]) -> list[tuple[object, str]]:
    """The events of ``events`` the engine would refuse for this parser, each with the reason."""
    store = Store()
    store.register(parser_cls.metrics)
    quiet = logging.getLogger("logmetrics.store.store")
    level = quiet.level
    quiet.setLevel(logging.ERROR)  # the reasons come back here; no warnings on the test's output
    try:
        return store.apply(events, parser_cls.name or "test", "test")
    finally:
        quiet.setLevel(level)


def check_events(parser_cls: type[Parser], events: Iterable[Event]) -> list[Event]:
    """``events`` as a list, or ``EventError`` naming every event the engine would refuse and why."""
    out = list(events)
    bad = refused(parser_cls, out)
    if bad:
        lines = [f"  {ev!r}: {reason}" for ev, reason in bad]
        raise EventError(f"{len(bad)} event(s) of parser {parser_cls.name!r} would be refused:\n" + "\n".join(lines))
    return out
