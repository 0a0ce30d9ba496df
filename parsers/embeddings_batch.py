"""The text-embeddings parser's frequent lines, and what reads a run of them in C (``parse_run``).

The framework finds runs of the lines that make up nearly all of a busy log (``FREQUENT``), each
a record of one line:

- TEI's ``Success`` lines of an HTTP request span with their four durations (``total_time``,
  ``tokenization_time``, ``queue_time``, ``inference_time``);
- LeapfrogAI's ``processing CreateEmbedding request`` and ``finished processing ... created K
  embeddings`` lines: a run of pairs (with only tqdm ``Batches:`` bars between them) starts and
  ends each request at once when nothing runs before it; other runs go through the pairing;
- the tqdm ``Batches:`` bars themselves, which give nothing.

A ``findall`` over a run takes its fields. Everything between two runs (start-ups, errors,
tracebacks, model lines, other formats) goes through ``parse`` record by record, in its place.
A run's counters are added up per label set and given out as one event each (and the running gauge
once); its histogram observations go out as one event per series (a tuple of observations). The result
is what ``parse`` gives on each record (the tests check it on every sample and on shuffled lines and
records, in several batch sizes)."""

from __future__ import annotations

import calendar
import re
from typing import TYPE_CHECKING, ClassVar

from logmetrics.events import Event
from logmetrics.plugins import Parser
from logmetrics.plugins.fastpath import Run
from logmetrics.records.shapes import EXCEPTION_LINE

from .embeddings_tei import UNITS

if TYPE_CHECKING:
    from .pairs import Pairs

DURATION = "llm_request_duration_seconds"
QUEUE = "embeddings_queue_duration_seconds"
INFERENCE = "embeddings_inference_duration_seconds"
TOKENIZATION = "embeddings_tokenization_duration_seconds"
TEI_RULE = "tei_success"
_DUR = r'"\d+(?:\.\d+)?(?:ns|µs|μs|us|ms|s|m|h)"'  # as ``embeddings_tei.duration`` reads it (no exponent)
#: A LeapfrogAI line's head up to its message, for levels that do not make it an error record.
_HEAD = (rf"(?!{EXCEPTION_LINE})[\w.]+: \d{{4}}-\d{{2}}-\d{{2}} \d{{2}}:\d{{2}}:\d{{2}},\d{{3}} "
         r"\| (?:INFO|DEBUG|WARNING) \| [^:|\n>]+:\d+ >>> ")
_START = r"processing CreateEmbedding request: char-length: \d+[^\n]*"
_DONE = r"finished processing CreateEmbedding request, created \d+ embeddings(?![^\n])"
#: A tqdm progress bar of sentence-transformers' ``encode`` (``Batches: 100%|███| 1/1 [00:00<00:00, 20.78it/s]``).
_BAR = r"Batches: +\d+%\|[█▏▎▍▌▋▊▉# ]*\| *\d+/\d+ \[[\d:<?]+, *[\d.?]+(?:it/s|s/it)\](?![^\n])"
_TEI = (r'\d{4}-\d{2}-\d{2}T[^\s\x1b"{]+ +INFO +\w+\{'
        rf"total_time={_DUR} tokenization_time={_DUR} queue_time={_DUR} inference_time={_DUR}"
        r"\}: text_embeddings_\w+(?:::\w+)*: (?:[^\s:\x1b]+:\d+: )?Success(?![^\n])")
_PAIR = rf"{_HEAD}{_START}\n(?:{_BAR}\n)*{_HEAD}{_DONE}"
#: In a run of lines the pattern found: each TEI line's durations (number and unit), each
#: LeapfrogAI line's minute, second, millisecond and (finish lines) embeddings made.
_TEI_ROW = re.compile(r'\{total_time="([\d.]+)([^"]+)" tokenization_time="([\d.]+)([^"]+)" '
                      r'queue_time="([\d.]+)([^"]+)" inference_time="([\d.]+)([^"]+)"')
_LFAI_ROW = re.compile(r"^[\w.]+: (\d{4}-\d\d-\d\d \d\d:\d\d):(\d\d),(\d{3}) [^>]+>>> "
                       r"(?:p|f[^\n]+created (\d+))", re.MULTILINE)


#: The frequent lines (``Parser.frequent``), each a record of its own.
FREQUENT = rf"{_TEI}|{_HEAD}(?:{_START}|{_DONE})|{_BAR}"


class RunReader(Parser):
    """``parse_run`` for the text-embeddings parser; the subclass keeps the state it reads."""

    model: str
    _pairs: Pairs
    _seq: int
    _offset: float
    _is_tei: bool
    _starting: bool
    frequent: ClassVar[str] = FREQUENT

    def parse_run(self, run: Run) -> tuple[list[Event], int]:
        """A run's events, and how many of its lines gave events: the same as ``parse`` on each."""
        text, at, end = run.text, run.start, run.end
        tei = text.find("{total_time=", at, end) >= 0
        paired = text.find(" >>> ", at, end) >= 0  # never in a TEI line
        if tei and paired:  # a LeapfrogAI line that quotes a TEI span: line by line
            return super().parse_run(run)
        events: list[Event] = []
        ok: dict[str, int] = {}  # requests ended well, per model
        embedded: dict[str, int] = {}
        n = self._tei_run(text, at, end, ok, events) if tei else 0
        if paired:
            n += self._lfai_run(text, at, end, run.time, ok, embedded, events)
        self._flush(ok, embedded, paired, events)
        return events, n

    def _tei_run(self, text: str, at: int, end: int, ok: dict[str, int], events: list[Event]) -> int:
        """TEI ``Success`` lines: a request each, its duration and phases; how many lines."""
        rows = _TEI_ROW.findall(text, at, end)
        self._is_tei = True
        model = (self.model,)
        ok[self.model] = ok.get(self.model, 0) + len(rows)
        if rows:  # one event per histogram series, with all its observations
            unit = UNITS
            events += (Event(DURATION, model, tuple([float(r[0]) * unit[r[1]] for r in rows]), None, TEI_RULE),
                       Event(QUEUE, model, tuple([float(r[4]) * unit[r[5]] for r in rows]), None, TEI_RULE),
                       Event(INFERENCE, model, tuple([float(r[6]) * unit[r[7]] for r in rows]), None, TEI_RULE),
                       Event(TOKENIZATION, model, tuple([float(r[2]) * unit[r[3]] for r in rows]), None, TEI_RULE))
        return len(rows)

    def _lfai_run(self, text: str, at: int, end: int, now: float, ok: dict[str, int], embedded: dict[str, int],
                  events: list[Event]) -> int:
        """LeapfrogAI request lines (starts and finishes, in order); how many lines."""
        rows = _LFAI_ROW.findall(text, at, end)
        pairs = self._pairs
        minutes: dict[str, int] = {}
        if (len(rows) > 1 and not pairs.open and not pairs.timed_out and not len(rows) % 2
                and not any(row[3] for row in rows[::2]) and all(row[3] for row in rows[1::2])):
            # Pairs with nothing running before them: each starts and ends at once, as the pairing would.
            model = self.model
            pairs.models.add(model)
            self._seq += len(rows) // 2
            self._starting = False
            made = 0
            took: list[float] = []
            for i in range(0, len(rows), 2):
                began = self._time(rows[i], minutes)
                ended = self._time(rows[i + 1], minutes)
                made += int(rows[i + 1][3])
                if ended >= began > 0:
                    took.append(ended - began)
            if took:
                events.append(Event(DURATION, (model,), tuple(took), None, "lfai_done"))
            ok[model] = ok.get(model, 0) + len(rows) // 2
            embedded[model] = embedded.get(model, 0) + made
            self._offset = now - ended
            return len(rows)
        for row in rows:
            t = self._time(row, minutes)
            if row[3]:
                self._done(t, int(row[3]), ok, embedded, events)
            else:
                self._started(t)
            self._offset = now - t
        return len(rows)

    # -- the frequent lines ------------------------------------------------------------------

    @staticmethod
    def _time(row: tuple[str, ...], minutes: dict[str, int]) -> float:
        """A LeapfrogAI line's time (as ``leapfrog_line`` reads it), the minute's start computed once."""
        minute = row[0]
        base = minutes.get(minute)
        if base is None:
            base = minutes[minute] = calendar.timegm((int(minute[:4]), int(minute[5:7]), int(minute[8:10]),
                                                      int(minute[11:13]), int(minute[14:16]), 0, 0, 0, 0))
        return (base + int(row[1])) + int(row[2]) / 1000

    def _started(self, t: float) -> None:
        """A request began at ``t`` (the running gauge is given out with the next flush)."""
        self._seq += 1
        self._starting = False
        self._pairs.start(str(self._seq), self.model, t)
        self._pairs.expire(t)

    def _done(self, t: float, count: int, ok: dict[str, int], embedded: dict[str, int], events: list[Event]) -> None:
        """A request ended at ``t`` having made ``count`` embeddings: the oldest open one."""
        began = self._pairs.finish()
        model = self.model if began is None else began[0]
        embedded[model] = embedded.get(model, 0) + count
        ok[model] = ok.get(model, 0) + 1
        if began is not None and t >= began[1] > 0:
            events.append(Event(DURATION, (model,), t - began[1], None, "lfai_done"))

    def _flush(self, ok: dict[str, int], embedded: dict[str, int], paired: bool, events: list[Event]) -> None:
        """The counters added up since the last flush, and the running gauge if requests started or ended."""
        rule = "lfai_done" if embedded else "tei_success"
        for model, n in ok.items():
            events.append(Event("llm_requests_total", (model, "ok"), n, None, rule))
        for model, n in embedded.items():
            events.append(Event("llm_embeddings_total", (model,), n, None, "lfai_done"))
        ok.clear()
        embedded.clear()
        if paired:
            events.extend(self._pairs.events())
