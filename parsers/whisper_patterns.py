"""Line shapes of the whisper servers: faster-whisper (under any host app's log format),
whisper.cpp (CLI and server), openai-whisper (print based) and LeapfrogAI's whisper backend; and
their frequent lines, which the framework's fast path reads in runs.

Messages are found in two steps: ``message(line)`` takes off the host app's log wrapper (the
LeapfrogAI format, Python's default ``INFO:faster_whisper:msg``, Flask's ``[ts] INFO in module:
msg``, uvicorn-style ``INFO:     msg``) and gives the level and the message; the message patterns
below then match the message. A wrapper this module does not know leaves the whole line as the
message; the patterns that must work there are anchored at the message's end.
"""

from __future__ import annotations

import calendar
import re
from typing import NamedTuple

from logmetrics import lazyre
from logmetrics.records.shapes import EXCEPTION_LINE as EXCEPTION_NAME_LINE
from logmetrics.records.shapes import Shape

from .common import PY_DEFAULT_LINE, remember
from .errors import COMMON_CAUSES, Phrases
from .leapfrog import leapfrog_line

# --- wrappers -------------------------------------------------------------------------------

_FLASK = lazyre.compile(r"\[\d{4}-\d{2}-\d{2}[ T][\d:,.]+\] (DEBUG|INFO|WARNING|ERROR|CRITICAL) in [\w.]+: (.*)")
_LEVEL_PREFIX = lazyre.compile(r"(DEBUG|INFO|WARNING|ERROR|CRITICAL):\s+(.*)")
#: A level word near the start of a line in a format of its own that begins with a time or a
#: bracket (``2024-05-02 09:14:03,101 - app - ERROR - msg``, ``[ERROR] msg``): not in printed text.
_LEVEL_WORD = lazyre.compile(r"\b(ERROR|CRITICAL|FATAL)\b")


class Message(NamedTuple):
    """One line's level ("" when it shows none), its message without the host app's wrapper, and
    the line's own time if it is in the LeapfrogAI format (else ``None``)."""

    level: str
    text: str
    leapfrog_time: float | None = None


def message(line: str) -> Message:
    """The level and message of one line, whatever wrapper the host app put around it."""
    lf = leapfrog_line(line)
    if lf is not None:
        return Message(lf.level, lf.msg, lf.time)
    for rx in (PY_DEFAULT_LINE, _FLASK, _LEVEL_PREFIX):
        m = rx.match(line)
        if m is not None:
            return Message(m.group(1), m.group(m.lastindex or 1))
    stamped = line[:1].isdigit() or (line[:1] == "[" and not SEGMENT_ANY.match(line))
    w = _LEVEL_WORD.search(line, 0, 80) if stamped else None
    return Message(w.group(1) if w else "", line)


# --- faster-whisper -------------------------------------------------------------------------

#: ``Processing audio with duration 16:09.828`` (hours only when not 0: ``01:33:59.990``).
FW_DURATION = lazyre.compile(r"Processing audio with duration ((?:\d+:)?\d{1,2}:\d{2}[.,]\d+)\s*$")


def clock_seconds(text: str) -> float:
    """Seconds of a ``[H:]MM:SS.mmm`` duration (a decimal comma is accepted)."""
    total = 0.0
    for part in text.replace(",", ".").split(":"):
        total = total * 60 + float(part)
    return total


#: Lines of a whisper server that carry no metric: they show the stream is alive (zero series).
INFO = lazyre.compile(
    r"Detected language '[\w-]+' with probability |VAD filter (?:removed|kept) |Processing segment at "
    r"|Detecting language using up to the first 30 seconds|^Detected language: |^Received request: "
    r"|^Waiting for application (?:startup|shutdown)\.|^Application shutdown complete\."
    r"|^Running whisper\.cpp inference on |^\w+: auto-detected language: "
)

# --- HTTP servers under uvicorn (faster-whisper-server and the like) ---------------------------

#: faster-whisper-server (logger ``faster-whisper-server``) loads its model on first use and names it:
#: ``Loading model from local path: /models/ct2-tiny`` then ``Model ready: /models/ct2-tiny`` (a
#: local path or a hub id). Groups: ``ready`` for the second, the model.
FWS_MODEL = lazyre.compile(r"(?:Loading model from local path|Model (ready)): (\S[^\n]*?)\s*$")
#: The routes of a speech-to-text request (OpenAI's API; whisper-asr-webservice's ``/asr``): their
#: answers are ``llm_requests_total`` (2xx/3xx ``ok``, 5xx ``error``).
SPEECH_ROUTES = ("/audio/transcriptions", "/audio/translations", "/asr")
#: Routes a whisper HTTP server serves (a 404 on another one is a scanner's).
HTTP_ROUTES = ("/v1/audio/transcriptions", "/v1/audio/translations", "/v1/models", "/health", "/asr",
               "/detect-language", "/docs", "/openapi.json")
#: The client errors a FastAPI speech server answers: 400/422 (a bad body or option), 404 on a route it
#: does not serve, 405: their series start at 0 with its first access line.
CLIENT_ERROR_TYPES = ("invalid_request", "not_found_route", "method_not_allowed")

# --- whisper.cpp ----------------------------------------------------------------------------

#: ``main: processing 'a.wav' (176000 samples, 11.0 sec), 4 threads, ...`` (CLI and server).
WCPP_PROCESSING = lazyre.compile(r"^\S+: processing '.*' \((\d+) samples, (\d+(?:[.,]\d+)?) sec\)")
#: ``whisper_init_from_file_with_params_no_state: loading model from 'models/ggml-base.en.bin'``
WCPP_MODEL = lazyre.compile(r"^\w+: loading model from '([^'\n]+)'")
WCPP_LISTENING = "whisper server listening at "
WCPP_SHUTDOWN = "shutting down gracefully"
WCPP_FAILED = "failed to process audio"
WCPP_ABORTED = "client disconnected, aborted processing"
#: whisper.cpp's error lines: ``error: ...``, ``<func>: failed to ...``, ``WHISPER_ASSERT: ...``.
WCPP_ERROR = lazyre.compile(r"^(?:[\w./-]+: )?(?:error: |failed to |ERROR |WHISPER_ASSERT)")
#: The timings block, one record: its first line (``load time``) starts the record, the others
#: continue it (see ``TIMINGS_BLOCK``).
TIMINGS = "whisper_print_timings:"
TIMING = lazyre.compile(r"^whisper_print_timings:\s+(load|total) time =\s+(\d+(?:[.,]\d+)?) (ms|s)\b", re.M)

# --- openai-whisper -------------------------------------------------------------------------

#: A segment line ``[00:00.000 --> 00:05.000]  text`` (whisper.cpp CLI: ``[00:00:00.000 --> ...]``).
SEGMENT = lazyre.compile(r"\[((?:\d+:)?\d{2}:\d{2}\.\d{3}) --> ((?:\d+:)?\d{2}:\d{2}\.\d{3})\]")
#: Any transcript segment line a tool or host app prints (``[0.00s -> 4.20s] text`` too): never an error.
SEGMENT_ANY = lazyre.compile(r"\[[\d:.,]+s? --?> [\d:.,]+s?\]")

# --- LeapfrogAI whisper backend (messages of logger __main__) ---------------------------------

#: A request's steps, by group name: it starts, it is done, its task or language is refused.
LFAI_STEP = lazyre.compile(r"(?:(?P<start>Task (?:transcribe|translate) is starting)"
                           r"|(?P<done>(?:Transcription|Translation) complete!)"
                           r"|(?P<task>Task \S* is not supported)|(?P<language>Language \S* is not supported))$")
LFAI_FAILED = "Error transcribing audio"
LFAI_INIT = "Initializing LeapfrogAI"
LFAI_SERVING = "Starting server. Listening on "
LFAI_STOPPING = ("Shutdown signal received", "Server has been shut down")
#: An exception that escaped the RPC handler, as gRPC logs it (sync server / asyncio server).
RPC_FAILED = ("Exception calling application", "raised by servicer method")

# --- errors ---------------------------------------------------------------------------------

PHRASES = Phrases(
    (*COMMON_CAUSES,
     ("audio_decode", ("failed to read audio", "failed to read WAV", "Invalid data found when processing input",
                       "InvalidDataError")),
     ("model_load", ("failed to initialize whisper context", "failed to load model", "invalid model",
                     "model init  failed", "not all tensors loaded"))),
    (("transcribe_failed", (LFAI_FAILED, WCPP_FAILED)),
     ("rpc_exception", RPC_FAILED)),
)
#: LeapfrogAI's request checks have types of their own, set by the parser.
UNSUPPORTED_TASK, UNSUPPORTED_LANGUAGE = "unsupported_task", "unsupported_language"
ERROR_TYPES: tuple[str, ...] = (*PHRASES.types, UNSUPPORTED_TASK, UNSUPPORTED_LANGUAGE)
#: An exception line on its own (the end of a traceback whose start was not read).
EXCEPTION_LINE = lazyre.compile(rf"^(?:{EXCEPTION_NAME_LINE})", re.M)

# --- the frequent lines -----------------------------------------------------------------------
# One-line records whose events do not depend on the order of the lines among themselves
# (LeapfrogAI's chatter, language and VAD lines, audio durations; its request start and completion
# lines are taken in order by the parser): the framework finds runs of them and
# ``WhisperParser.parse_run`` reads a run in C; the other records go through ``parse`` one by one.
# Which lines are frequent is decided once per batch (``WhisperParser.frequent_lines``): in a
# stream in the LeapfrogAI format, its lines of a fixed shape; otherwise faster-whisper's lines
# under Python's default format. The patterns pin a frequent line's logger, its level (never an
# error level) and every free part of its message to characters that cannot hold any phrase the
# per-record rules look for, so that ``parse`` gives the same events for it. Digits are ASCII ``[0-9]``,
# cheaper to match than ``\d``: a line with others goes to ``parse``.

#: The messages of frequent lines that give an "alive" event (the server works): faster-whisper's.
_ALIVE = (r"Detected language '[\w-]++' with probability [0-9.]++|Processing segment at [0-9:.]++"
          r"|VAD filter removed [0-9:.]++ of audio|VAD filter kept the following audio segments: [\[\]0-9:.,> -]*+")
#: What each alive message holds once (``str.count`` over a run counts them).
ALIVE_MARKS = ("Detected language '", "Processing segment at ", "VAD filter ")
_DURATION = r"Processing audio with duration (?:[0-9]++:)?[0-9]{1,2}:[0-9]{2}[.,][0-9]++"
#: LeapfrogAI messages that give nothing.
_QUIET = r"Updated metadata: \S++|Temperature \S++ is set|Language \S++ is supported|Completed \S++"
_PAIR = r"Task (?:transcribe|translate) is starting|(?:Transcription|Translation) complete!"
_LFAI_TAIL = (r": [0-9]{4}-[0-9][0-9]-[0-9][0-9] [0-9][0-9]:[0-9][0-9]:[0-9][0-9](?>(?:,[0-9]{3})?) "
              r"\| (?:INFO|DEBUG|WARNING) \| [\w.-]++:[0-9]++ >>> ")
_PY_HEAD = r"(?:INFO|DEBUG|WARNING):faster_whisper:"

#: The frequent lines of a LeapfrogAI stream, and of others (faster-whisper under Python's format).
FREQUENT_LFAI = (rf"__main__{_LFAI_TAIL}(?:{_QUIET}|{_ALIVE}|{_DURATION}|{_PAIR})"
                 rf"|faster_whisper{_LFAI_TAIL}(?:{_QUIET}|{_ALIVE}|{_DURATION})")
FREQUENT_PY = rf"{_PY_HEAD}(?:{_ALIVE}|{_DURATION})"
#: In a run: an audio duration; a request's start or completion line, with its time.
DURATIONS = lazyre.compile(r"Processing audio with duration ((?:\d+:)?\d{1,2}:\d{2}[.,]\d+)(?![^\n])")
#: (Found by their message; the time is at a fixed place of the line, whose shape was checked.)
PAIR_LINES = lazyre.compile(r" >>> (?:Task \w+ is starting|(T)ra\w+ complete!)(?![^\n])")
#: The mark of a LeapfrogAI line (``parsers.leapfrog.MARK``).
LFAI_MARK = " >>> "


def alive_lines(text: str, a: int, b: int) -> int:
    """The alive lines of a run ``text[a:b]``."""
    return sum(text.count(mark, a, b) for mark in ALIVE_MARKS)


_hours: dict[str, int] = {}
#: ``MM:SS`` -> seconds, ``mmm`` -> its fraction of a second (as ``leapfrog_line`` computes them).
_MIN_SEC = {f"{m:02d}:{s:02d}": m * 60 + s for m in range(100) for s in range(100)}
_MILLIS = {f"{ms:03d}": ms / 1000 for ms in range(1000)}


def line_time(text: str, at: int) -> float:
    """The time of the frequent LeapfrogAI line at ``at`` (``__main__: 2024-11-13 10:45:38,004 | ...``),
    as ``parsers.leapfrog.leapfrog_line`` gives it."""
    hour = text[at + 10:at + 23]
    base = _hours.get(hour)
    if base is None:
        base = remember(_hours, hour, calendar.timegm((int(hour[:4]), int(hour[5:7]), int(hour[8:10]),
                                                       int(hour[11:13]), 0, 0, 0, 0, 0)))
    secs = base + _MIN_SEC[text[at + 24:at + 29]]
    return secs + _MILLIS[text[at + 30:at + 33]] if text[at + 29] == "," else secs + 0.0


# --- record shapes and sniffing --------------------------------------------------------------

#: whisper.cpp's timings block is one record: its lines after the first (``load time``) continue it.
TIMINGS_BLOCK = Shape("whisper_timings", lines=r"whisper_print_timings:(?!\s+load time)")
SNIFF_STRONG = (
    r"Processing audio with duration \d|^whisper_print_timings: |^whisper_(?:init_from_file\w*|model_load): "
    r"|^whisper server listening at |^\S+: processing '.*' \(\d+ samples, [\d.]+ sec\)"
    r"|Detected language '[\w-]+' with probability |Detecting language using up to the first 30 seconds"
    r"|>>> Task (?:transcribe|translate) is starting$|>>> (?:Transcription|Translation) complete!$"
    r"|^[A-Z]+:faster-whisper-server:"
)
#: (LeapfrogAI's whisper backend also says what it set up for each task before the task starts,
#: which no other backend prints: a log of many such lines before its first task is its.)
SNIFF_WEAK = (r"\bfaster_whisper\b|^Detected language: [A-Z]|^\[(?:\d+:)?\d{2}:\d{2}\.\d{3} --> "
              r"|>>> (?:Updated metadata: |Temperature [\d.]+ is set$|Language [\w-]+ is supported$)")
