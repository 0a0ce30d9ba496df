"""Events: the small vocabulary every parser speaks.

An event names a catalog family (``logmetrics.catalog``) and carries the values of that family's
own labels, in catalog order, and a number. What the number means follows from the family's type:
a counter adds it, a gauge is set to it, a histogram observes it. The engine adds ``backend`` and
``source``; a parser may set ``backend`` to name a component (``kong`` inside a Supabase stream).
"""

from __future__ import annotations

from typing import NamedTuple

UNKNOWN_MODEL = "unknown"


class Event(NamedTuple):
    """One observation: ``metric`` is a family name, ``labels`` its own label values in order."""

    metric: str
    labels: tuple[str, ...]
    value: float = 1.0
    backend: str | None = None
    rule: str = ""
