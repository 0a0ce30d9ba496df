"""Events: the small vocabulary every parser speaks.

An event names a catalog family (``logmetrics.store.catalog``) and carries the values of that family's
own labels, in catalog order, and a number. What the number means follows from the family's type:
a counter adds it, a gauge is set to it, a histogram observes it. A histogram event may carry a
tuple of numbers instead, each of them observed: a batch parser's many observations of one series
cost one event (values are checked as if each came alone). The engine adds ``backend`` and
``source``; a parser may set ``backend`` to name a component (``kong`` inside a Supabase stream).
"""

from __future__ import annotations

from typing import NamedTuple

UNKNOWN_MODEL = "unknown"


class Event(NamedTuple):
    """One observation: ``metric`` is a family name, ``labels`` its own label values in order."""

    metric: str
    labels: tuple[str, ...]
    value: float | tuple[float, ...] = 1.0
    backend: str | None = None
    rule: str = ""


#: A record understood without a figure of its own (it named the model, or showed which series
#: the log can move): the record counts as matched, and the store changes nothing.
SEEN = Event("", (), 0)


def values_of(ev: Event) -> tuple[float, ...]:
    """The numbers an event carries: its one value, or a histogram event's observations."""
    value = ev.value
    return value if isinstance(value, tuple) else (value,)


def number(ev: Event) -> float:
    """The one number of an event (``TypeError`` for a histogram event with several observations)."""
    value = ev.value
    if isinstance(value, tuple):
        raise TypeError(f"{ev.metric}: several observations, not one number")
    return value
