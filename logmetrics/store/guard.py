"""The cardinality guard: label values that come from log text, bounded per family and label.

Per family and label a bounded set of values is admitted; overflow folds into ``__other__`` and
is counted in ``logmetrics_label_overflow_total``. Routes first seen with an error code may fill
only part of the route places (``NOISE_SHARE``), so noise never takes the places of the routes
that answer. Each new value is made valid UTF-8 (``safe_label``: file names and plugins may hand
over surrogate escapes) and cut past ``MAX_LABEL_CHARS`` (but the source, a path).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field

from logmetrics.store.catalog import Family

OTHER = "__other__"
#: The route of 404/405 answers on paths a backend does not serve (folded by ``RouteLabels``).
NOT_FOUND = "__not_found__"
#: Values that are folds already: they pass the guard without taking a place.
RESERVED = frozenset({OTHER, NOT_FOUND})
# Distinct values allowed per (family, label) before folding into __other__.
LABEL_LIMITS = {"model": 50, "route": 200, "error_type": 50, "source": 500, "backend": 100}
DEFAULT_LIMIT = 100
#: A label value taken from log text (a model id, say) is cut to this many characters: no real one
#: is longer, and a line made of one long token must not make a series of its size.
MAX_LABEL_CHARS = 256
#: A route first seen with an error code (not 1xx-3xx) may take only this share of the places, so
#: that routes which answer (the real ones) always find room however much noise came first.
NOISE_SHARE = 0.5

Key = tuple[str, tuple[str, ...]]


def safe_label(value: object) -> str:
    """``value`` as a label value that always encodes as UTF-8.

    Surrogate escapes (a file name that is not UTF-8, as ``os.walk`` gives it) become the bytes'
    ``\\xNN`` form, stable and readable: ``vllm-\\xe9.log``. Meant for where a value is made or
    first seen, not for every line.
    """
    text = value if type(value) is str else str(value)
    if text.isascii():
        return text
    try:
        text.encode("utf-8")
        return text
    except UnicodeEncodeError:
        pass
    try:
        return text.encode("utf-8", "surrogateescape").decode("utf-8", "backslashreplace")
    except UnicodeEncodeError:  # a lone surrogate that is no escaped byte
        return text.encode("utf-8", "backslashreplace").decode("utf-8")


def label_at(fam: Family, i: int) -> str:
    """The name of a series' label at position ``i`` of its values (backend, source, the family's own)."""
    return fam.labels[i - 2] if i >= 2 else ("backend", "source")[i]


@dataclass
class LabelGuard:
    """The label values admitted so far, and the limits they are held to."""

    #: distinct values allowed per (family, label) before folding (``label_limits`` in the config file)
    limits: dict[str, int] = field(default_factory=lambda: dict(LABEL_LIMITS))
    #: the values admitted per (family, label position, backend): a parser's labels have their own
    #: places (one backend's errors never push another's into ``__other__``); backend and source, shared
    seen: dict[tuple[str, int, str], set[str]] = field(default_factory=dict)
    #: Series were forgotten since ``seen`` was last made from the live ones: a guard at its limit
    #: makes it again first, so that the places of values no live series holds are free.
    stale: bool = False

    def admit(self, name: str, labels: tuple[str, ...], fam: Family, counters: dict[Key, float],
              tables: Callable[[], Iterable[Mapping[Key, object]]]) -> tuple[str, ...]:
        """``labels`` (backend, source, the family's own) as the guard admits them: cleaned, cut,
        or folded into ``__other__`` past a limit (counted in ``counters``). ``tables`` gives the
        live series, counted again when the guard is full and series were forgotten."""
        out: list[str] | None = None
        for i, value in enumerate(labels):
            seen = self.seen.setdefault((name, i, labels[0] if i >= 2 else ""), set())
            if value in seen:
                continue
            if value in RESERVED:
                continue
            if type(value) is not str:  # None, bytes, numbers: a plugin's bug, not a label value
                raise TypeError(f"label values must be str, got {type(value).__name__}")
            clean = safe_label(value)  # a value met for the first time (or one that needed cleaning)
            if len(clean) > MAX_LABEL_CHARS and i != 1:  # position 1 is the source: a path, not log text
                clean = clean[:MAX_LABEL_CHARS]
            if clean is not value:
                if out is None:
                    out = list(labels)
                out[i] = clean
                if clean in seen:
                    continue
            label = label_at(fam, i)
            limit = self.limits.get(label, DEFAULT_LIMIT)
            if label == "route" and "code" in fam.labels and labels[fam.labels.index("code") + 2][:1] not in "123":
                limit = int(limit * NOISE_SHARE)
            if len(seen) >= limit and self.stale:  # some places may be free: count the live values
                self.rebuild(tables())
                seen = self.seen.setdefault((name, i, labels[0] if i >= 2 else ""), set())
            if len(seen) < limit:
                seen.add(clean)
                continue
            if out is None:
                out = list(labels)
            out[i] = OTHER
            key = ("logmetrics_label_overflow_total", (name, label))
            counters[key] = counters.get(key, 0.0) + 1
        return labels if out is None else tuple(out)

    def rebuild(self, tables: Iterable[Mapping[Key, object]]) -> None:
        """Hold only the label values that the live series of ``tables`` hold (the store's lock
        held): after series were forgotten, their values take no place (pods come and go for weeks)."""
        self.stale = False
        seen: dict[tuple[str, int, str], set[str]] = {}
        for table in tables:
            for name, labels in table:
                if name.startswith("logmetrics_"):
                    continue
                for i, value in enumerate(labels):
                    if value not in RESERVED:
                        seen.setdefault((name, i, labels[0] if i >= 2 else ""), set()).add(value)
        self.seen = seen
