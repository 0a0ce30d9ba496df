"""vLLM start-ups: which lines mark one (counted once per start), and the served model's name."""

from __future__ import annotations

from logmetrics import lazyre
from logmetrics.events import Event

from . import vllm_patterns as P
from .common import UVICORN
from .vllm_kinds import Control, Mark

MAX_MODEL_LEN = 200

_LIFE_KIND = {UVICORN.ready[0].rstrip("."): Control.READY, **dict.fromkeys(UVICORN.stopping, Control.STOPPED)}
_KIND_BY_START = {"vL": Control.VERSION, "In": Control.ENGINE_INIT, "St": Control.SERVER_START,
                  "ar": Control.MODEL_ONLY, "no": Control.MODEL_ONLY}

SERVED_NAME = lazyre.compile(r"served_model_name(?:=|': )\[?(?:'([^']+)'|(?!None\b)([^\s,'\[\]{}()]+))")
MODEL_NAME = lazyre.compile(r"(?<![\w])(?:model=|'model': )'([^']+)'")
SERVING_MODEL = lazyre.compile(r"serving model (\S+)")
MODEL_TAG = lazyre.compile(r"'model_tag': '([^']+)'")


def startup_kind(marker: str) -> Control:
    """The kind of a start-up line from its marker (``vLLM API server version``, ``args: ...``)."""
    return _KIND_BY_START.get(marker[:2], Control.MODEL_ONLY)


def life_kind(line: str) -> Control:
    """The kind of a uvicorn lifecycle line from what ``LIFE`` captured."""
    return _LIFE_KIND.get(line, Control.STOPPED)


def model_from(line: str) -> str | None:
    """The served model name in a start-up line: served_model_name first, then model."""
    for rx in (SERVED_NAME, MODEL_NAME, SERVING_MODEL, MODEL_TAG):
        m = rx.search(line)
        if m:
            name = m.group(m.lastindex or 1)
            return name[:MAX_MODEL_LEN] if name else None
    return None


class Startup:
    """Counts each start once although a start prints several marker lines.

    The server's version line (or logo) counts, unless another one was seen less than
    ``SAME_START`` seconds before (one start printing both). An engine's init line counts only when
    no start is in progress (offline engines and excerpts have no version line); a "Starting vLLM
    ... server" line likewise, and not twice within ``SAME_START`` seconds (one per API server
    process). A start is in progress from its first marker to the "Starting" line or the first
    stats line.
    """

    SAME_START = 10

    __slots__ = ("last_start_line", "last_version", "starting")

    def __init__(self) -> None:
        self.starting = False
        self.last_version: int | None = None
        self.last_start_line: int | None = None

    @classmethod
    def _near(cls, secs: int | None, before: int | None) -> bool:
        return secs is not None and before is not None and 0 <= secs - before < cls.SAME_START

    def line(self, kind: int, secs: int | None) -> bool:
        """A start-up line of ``kind`` logged at ``secs`` (None: unknown); whether it is a new start."""
        if kind in (Control.VERSION, Control.LOGO):
            new = not self._near(secs, self.last_version)
            self.last_version = secs
            self.starting = True
        elif kind == Control.ENGINE_INIT:
            new = not self.starting
            self.starting = True
        elif kind == Control.SERVER_START:
            new = not self.starting and not self._near(secs, self.last_start_line)
            self.last_start_line = secs
            self.starting = False
        else:
            new = False
        return new

    def serving(self) -> None:
        """A stats line was seen: the start, if any, is over."""
        self.starting = False

    def dump(self) -> list[object]:
        """Whether a start is in progress and when its marker lines came (JSON), for a restart of
        logmetrics in the middle of a start: its other lines must not count it again."""
        return [self.starting, self.last_version, self.last_start_line]

    def load(self, data: object) -> None:
        """Take back what ``dump`` gave (anything else is ignored)."""
        if isinstance(data, list) and len(data) == 3 and all(x is None or type(x) is int for x in data[1:]):
            self.starting = data[0] is True
            self.last_version, self.last_start_line = data[1], data[2]


def life_marks(t: str, life: list[Mark], model: str, ready: bool, live: bool,
               dynamic: set[int]) -> tuple[int, bool, list[Event], list[Event]]:
    """Lifecycle lines of a text without start-up lines (one model), without cutting it in segments:
    the records matched (their line ends added to ``dynamic``), whether the server is ready after
    them, and the events to give before and after the text's stats gauges. ``live``: the server
    was known to serve (stats, a model) before the text.

    Only the order against the stats lines matters: if stats lines follow the last stop, the reset
    goes before their gauges, else after them; the last line says whether the server is ready.
    """
    life.sort()
    matched = 0
    last_stop = -1
    stats_at = t.find(P.STATS_MARK)
    for pos, kind, _ in life:
        if kind == Control.READY:
            ready = counted = True
        else:
            down = ready or live or 0 <= stats_at < pos  # as the parser's ``_down`` decides
            last_stop = pos if down else last_stop
            counted = down and kind == Control.STOPPED  # DEAD lines are errors, counted as such
            ready = False
        if counted:
            matched += 1
            dynamic.add(t.rfind("\n", 0, pos))
    before: list[Event] = []
    after: list[Event] = []
    if last_stop >= 0:  # the reset goes before the gauges if a stats line follows the last stop
        (before if t.rfind(P.STATS_MARK) > last_stop else after).append(
            Event("backend_ready", (model,), 0, rule="down"))
    if life[-1][1] == Control.READY:
        after.append(Event("backend_ready", (model,), 1, rule="ready"))
    return matched, ready, before, after
