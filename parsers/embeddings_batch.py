"""The text-embeddings parser's frequent lines, what reads a run of them in C (``read_run``, for
``parse_run``), and LeapfrogAI's requests, which both paths start and finish (``Requests``).

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

from logmetrics import lazyre
from logmetrics.events import Event
from logmetrics.plugins.fastpath import Run
from logmetrics.records.shapes import EXCEPTION_LINE

from .embeddings_tei import UNITS
from .pairs import Pairs

DURATION = "llm_request_duration_seconds"
QUEUE = "embeddings_queue_duration_seconds"
INFERENCE = "embeddings_inference_duration_seconds"
TOKENIZATION = "embeddings_tokenization_duration_seconds"
TEI_RULE = "tei_success"
#: A duration as ``embeddings_tei.duration`` reads it, in ASCII digits and with no exponent (others go
#: to ``parse``). Possessive, and the commonest units first: a third of the time of the run scan.
_DUR = r'"[0-9]++(?>(?:\.[0-9]++)?)(?:ms|s|µs|ns|us|μs|m|h)"'
#: A LeapfrogAI line's head up to its message, for levels that do not make it an error record.
_HEAD = (rf"(?!{EXCEPTION_LINE})[\w.]++: [0-9]{{4}}-[0-9][0-9]-[0-9][0-9] "
         r"[0-9][0-9]:[0-9][0-9]:[0-9][0-9],[0-9]{3} \| (?:INFO|DEBUG|WARNING) \| [^:|\n>]++:[0-9]++ >>> ")
_START = r"processing CreateEmbedding request: char-length: [0-9]++[^\n]*+"
_DONE = r"finished processing CreateEmbedding request, created [0-9]++ embeddings(?![^\n])"
#: A tqdm progress bar of sentence-transformers' ``encode`` (``Batches: 100%|███| 1/1 [00:00<00:00, 20.78it/s]``).
_BAR = r"Batches: ++[0-9]++%\|[█▏▎▍▌▋▊▉# ]*+\| *+[0-9]++/[0-9]++ \[[0-9:<?]++, *+[0-9.?]++(?:it/s|s/it)\](?![^\n])"
#: (Names, digits and the time in ASCII character sets, not ``\w``, ``\d`` and ``[^\s]``: half the time on
#: lines this long. A line outside them goes to ``parse``, which takes any.)
_NAME = "[A-Za-z0-9_]++"
_TEI = (rf'[0-9]{{4}}-[0-9][0-9]-[0-9][0-9]T[0-9:.,+Z-]++ ++INFO ++{_NAME}\{{'
        rf"total_time={_DUR} tokenization_time={_DUR} queue_time={_DUR} inference_time={_DUR}"
        rf"\}}: text_embeddings_{_NAME}(?>(?:::{_NAME})*): (?>(?:[A-Za-z0-9_./-]++:[0-9]++: )?)Success(?![^\n])")
_PAIR = rf"{_HEAD}{_START}\n(?:{_BAR}\n)*{_HEAD}{_DONE}"
#: In a run of lines the pattern found: each TEI line's durations (number and unit), each
#: LeapfrogAI line's minute, second, millisecond and (finish lines) embeddings made.
_TEI_ROW = lazyre.compile(r'\{total_time="([0-9.]++)([^"]++)" tokenization_time="([0-9.]++)([^"]++)" '
                          r'queue_time="([0-9.]++)([^"]++)" inference_time="([0-9.]++)([^"]++)"')
_LFAI_ROW_AT = (r"[\w.]++: ([0-9]{4}-[0-9][0-9]-[0-9][0-9] [0-9][0-9]:[0-9][0-9]):([0-9][0-9]),([0-9]{3}) [^>]++>>> "
                r"(?:p|f[^\n]+created ([0-9]+))")
#: (The first line of a text, then every line after a newline: a pattern that begins with the
#: newline is searched for it in a tight loop, where ``^`` of ``MULTILINE`` is tried at every position.)
_LFAI_FIRST = lazyre.compile(_LFAI_ROW_AT)
_LFAI_ROW = lazyre.compile("\n" + _LFAI_ROW_AT)


#: The frequent lines (``Parser.frequent``), each a record of its own.
FREQUENT = rf"{_TEI}|{_HEAD}(?:{_START}|{_DONE})|{_BAR}"


class Requests:
    """LeapfrogAI's requests, paired in the order of their lines (the backend logs no request id
    and encodes one request at a time): what ``parse`` and ``read_run`` both start and finish."""

    __slots__ = ("offset", "pairs", "seq")

    def __init__(self) -> None:
        self.pairs = Pairs()
        self.seq = 0
        self.offset = 0.0  # record time minus the LeapfrogAI line's own time (for ``tick``)

    def start(self, model: str, at: float, now: float | None) -> None:
        """A request of ``model`` began at ``at`` (0: unknown); those older than the time-out at
        ``now`` are dropped. The running gauge is given out by the caller (``pairs.events``)."""
        self.seq += 1
        self.pairs.start(str(self.seq), model, at)
        if now is not None:
            self.pairs.expire(now)

    def finish(self, model: str, at: float | None) -> tuple[str, float | None]:
        """The oldest open request ended at ``at`` (None: unknown): its model (``model`` if none
        was open) and how long it took, if known."""
        began = self.pairs.finish()
        if began is None:
            return model, None
        return began[0], (at - began[1] if at is not None and at >= began[1] > 0 else None)


def read_run(run: Run, model: str, requests: Requests) -> tuple[list[Event], int, bool, bool] | None:
    """A run's events, how many of its lines gave events (the same as ``parse`` on each), and
    whether it held TEI lines and LeapfrogAI request starts; ``None`` for a run to read line by
    line (a LeapfrogAI line that quotes a TEI span)."""
    text, at, end = run.text, run.start, run.end
    tei = text.find("{total_time=", at, end) >= 0
    paired = text.find(" >>> ", at, end) >= 0  # never in a TEI line
    if tei and paired:
        return None
    events: list[Event] = []
    ok: dict[str, int] = {}  # requests ended well, per model
    embedded: dict[str, int] = {}
    n = _tei_run(text, at, end, model, ok, events) if tei else 0
    started = False
    if paired:
        got, started = _lfai_run(text, at, end, run.time, model, requests, ok, embedded, events)
        n += got
    rule = "lfai_done" if embedded else TEI_RULE
    events += [Event("llm_requests_total", (m, "ok"), k, None, rule) for m, k in ok.items()]
    events += [Event("llm_embeddings_total", (m,), k, None, "lfai_done") for m, k in embedded.items()]
    if paired:
        events.extend(requests.pairs.events())
    return events, n, tei, started


def _tei_run(text: str, at: int, end: int, model: str, ok: dict[str, int], events: list[Event]) -> int:
    """TEI ``Success`` lines: a request each, its duration and phases; how many lines."""
    rows = _TEI_ROW.findall(text, at, end)
    ok[model] = ok.get(model, 0) + len(rows)
    if rows:  # one event per histogram series, with all its observations
        unit, labels = UNITS, (model,)
        events += (Event(DURATION, labels, tuple([float(r[0]) * unit[r[1]] for r in rows]), None, TEI_RULE),
                   Event(QUEUE, labels, tuple([float(r[4]) * unit[r[5]] for r in rows]), None, TEI_RULE),
                   Event(INFERENCE, labels, tuple([float(r[6]) * unit[r[7]] for r in rows]), None, TEI_RULE),
                   Event(TOKENIZATION, labels, tuple([float(r[2]) * unit[r[3]] for r in rows]), None, TEI_RULE))
    return len(rows)


def _lfai_run(text: str, at: int, end: int, now: float, model: str, requests: Requests, ok: dict[str, int],
              embedded: dict[str, int], events: list[Event]) -> tuple[int, bool]:
    """LeapfrogAI request lines (starts and finishes, in order): how many lines, and whether a
    request started."""
    if at:  # (a run begins at the start of a line: after a newline)
        rows = _LFAI_ROW.findall(text, at - 1, end)
    else:
        first = _LFAI_FIRST.match(text, 0, end)
        rows = ([first.groups()] if first is not None else []) + _LFAI_ROW.findall(text, 0, end)
    pairs = requests.pairs
    minutes: dict[str, int] = {}
    started = False
    i = 0
    while i < len(rows) and (pairs.open or pairs.timed_out):  # what was running before the run ends first
        started = _lfai_row(rows[i], now, model, requests, ok, embedded, events, minutes) or started
        i += 1
    k = i + (len(rows) - i) // 2 * 2
    if k - i > 1 and not any(row[3] for row in rows[i:k:2]) and all(row[3] for row in rows[i + 1:k:2]):
        # Pairs with nothing running before them: each starts and ends at once, as the pairing would.
        pairs.models.add(model)
        requests.seq += (k - i) // 2
        took = [ended - began for j in range(i, k, 2)
                if (ended := _time(rows[j + 1], minutes)) >= (began := _time(rows[j], minutes)) > 0]
        if took:
            events.append(Event(DURATION, (model,), tuple(took), None, "lfai_done"))
        ok[model] = ok.get(model, 0) + (k - i) // 2
        embedded[model] = embedded.get(model, 0) + sum(int(row[3]) for row in rows[i + 1:k:2])
        requests.offset = now - _time(rows[k - 1], minutes)
        started, i = True, k
    for row in rows[i:]:  # a request left running at the run's end, or pairs out of order
        started = _lfai_row(row, now, model, requests, ok, embedded, events, minutes) or started
    return len(rows), started


def _lfai_row(row: tuple[str, ...], now: float, model: str, requests: Requests, ok: dict[str, int],
              embedded: dict[str, int], events: list[Event], minutes: dict[str, int]) -> bool:
    """One LeapfrogAI request line through the pairing; whether it started a request."""
    t = _time(row, minutes)
    requests.offset = now - t
    if row[3]:
        owner, took_s = requests.finish(model, t)
        embedded[owner] = embedded.get(owner, 0) + int(row[3])
        ok[owner] = ok.get(owner, 0) + 1
        if took_s is not None:
            events.append(Event(DURATION, (owner,), took_s, None, "lfai_done"))
        return False
    requests.start(model, t, t)
    return True


def _time(row: tuple[str, ...], minutes: dict[str, int]) -> float:
    """A LeapfrogAI line's time (as ``leapfrog_line`` reads it), the minute's start computed once."""
    minute = row[0]
    base = minutes.get(minute)
    if base is None:
        base = minutes[minute] = calendar.timegm((int(minute[:4]), int(minute[5:7]), int(minute[8:10]),
                                                  int(minute[11:13]), int(minute[14:16]), 0, 0, 0, 0))
    return (base + int(row[1])) + int(row[2]) / 1000
