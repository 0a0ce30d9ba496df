"""The regular expressions of the vLLM parser (``parsers/vllm.py``), one place for all formats, and
its error phrase table.

Every pattern is a stdlib ``re`` pattern meant for a whole-chunk scan of text that starts with
``\\n``: either anchored on ``\\n`` (plus an optional process prefix) or led by a literal, so that
``re`` finds candidates with its fast prefix search. None of them can cross a newline.
In the hot scans an optional group that captures, or spans more than a character, is written
``(?:X|)``, not ``X?``: ``re`` runs such a ``?`` through its general repeat, which costs a tenth
or more of a scan's time; an alternative with an empty last branch means the same.
"""

from __future__ import annotations

import re

from logmetrics import lazyre
from logmetrics.records.shapes import EOL, EXCEPTION_LINE, INDENTED, TRACEBACK_LINES, Shape

from .common import EXCEPTION_NAME, PROC_PREFIX, PROC_PREFIX_OPT, TRACEBACK_BODY, UVICORN, UVICORN_ACCESS
from .errors import COMMON_CAUSES, Phrases

PFX = PROC_PREFIX
PFXO = PROC_PREFIX_OPT  # an optional process prefix (see there)
NUM = r"(\d+(?:\.\d+)?)"
#: The vLLM logger header, all versions: ``INFO 06-14 10:00:05 metrics.py:341]`` (<= 0.7),
#: ``INFO 04-10 03:35:27 [loggers.py:80]`` (0.8+), a shrunk relative path under DEBUG, and the
#: ``[async_llm.py:485[]`` mangling seen in pasted logs. No year, no time zone.
HDR = r"(?:DEBUG|INFO|WARNING|ERROR|CRITICAL) \d\d-\d\d \d\d:\d\d:\d\d \[?[\w./-]+:\d+[\]\[]+"

#: Lines that continue the record above: an optional process prefix and vLLM header (vLLM's
#: formatter repeats the header on every line of a multi-line message), then a traceback-ish body.
#: The header is atomic: a body never starts with its level word, so once a header is read the
#: line is not tried again without it (an error line's next line is nearly always a header line).
CONTINUATION = lazyre.compile(rf"{PFXO}(?:(?>{HDR}(?: |(?=\r?\n|\r?\Z)))|){TRACEBACK_BODY}", re.ASCII)
#: The same lines as a record shape: a line that is blank (``\n``) is left out of records by the
#: records stage, so the shape names only lines with something on them (a prefix, a header, ``\r``).
SHAPE = Shape("vllm", lines=rf"(?a:{PFXO}(?:{HDR}(?: |(?=\r?\n|\r?\Z)))?"
                            rf"(?:{INDENTED.lines}|{TRACEBACK_LINES}|{EXCEPTION_LINE})"
                            rf"|{PFXO}{HDR} ?{EOL}|{PFX}{EOL}|\r{EOL})")

ACCESS = lazyre.compile(rf"\n{PFXO}{UVICORN_ACCESS}", re.ASCII)
#: An access line of a finished request (2xx, POST on an inference route): where the access log
#: takes over counting ``outcome="ok"``.
ACCESS_OK = lazyre.compile(rf"\n{PFXO}INFO: +\S+ - \"POST /(?:v1/(?:chat/completions|completions|embeddings|responses"
                           r"|audio/\w+|score|rerank)|v2/rerank|pooling|classify|score|rerank|invocations)[/?\w=&.-]* "
                           r"HTTP/[\d.]+\" 2\d\d", re.ASCII)

#: Periodic stats, V0 (``Swapped``/``Pending``) and V1 (``Waiting`` + optional fields in the
#: tail), a whole line. Groups: the date and minute (``MM-DD HH:MM``) and seconds of the vLLM
#: header, the engine index, the number of engines aggregated (all four in the head), prompt and
#: generation throughput, running, pending (V0), waiting (V1), the rest of the line (the tail).
_STATS_HEAD = (rf"{PFXO}(?:(?:DEBUG|INFO|WARNING) (\d\d-\d\d \d\d:\d\d):(\d\d) \[?[\w./-]+:\d+[\]\[]+ |)"
               r"(?:Engine (\d+): |(\d+) Engines Aggregated: |)")
_STATS_TAIL = (rf"Avg prompt throughput: {NUM} tokens/s, Avg generation throughput: {NUM} tokens/s, "
               r"(?:Max iteration time: [^,\n]*, Avg time/tok:[^,\n]*, )?"
               r"Running: (\d+) reqs, (?:Swapped: \d+ reqs, Pending: (\d+)|Waiting: (\d+)) reqs([^\n]*)")
STATS = lazyre.compile(_STATS_HEAD + _STATS_TAIL, re.ASCII)
#: A stats line's literal, to place stats lines against rare ones without a scan of its own.
STATS_MARK = "Avg prompt throughput: "
#: The same split at its literal, for the batch scan: the tail, found by a fast literal-led scan
#: of the whole text, and the head, which must fill its line from the start up to the tail.
STATS_HEAD = lazyre.compile(_STATS_HEAD, re.ASCII)
STATS_TAIL = lazyre.compile(_STATS_TAIL, re.ASCII)
#: The timestamp of a header line, matched at its start.
LINE_TIME = lazyre.compile(rf"{PFXO}(?:DEBUG|INFO|WARNING|ERROR|CRITICAL) (\d\d-\d\d \d\d:\d\d):(\d\d) ")
KV_USAGE = lazyre.compile(rf"\w+ KV cache usage: {NUM}%")
PREFIX_HIT = lazyre.compile(rf", Prefix cache hit rate: {NUM}%")
PREEMPTIONS = lazyre.compile(r", Preemptions: (\d+)")


def _after(file: str, words: str) -> str:
    """Lookbehinds (fixed width, so one per line-number width) for ``words`` logged by ``file``."""
    return "|".join(rf"(?<={file}\.py:{d}[\]\[] {words})" for d in (r"\d\d", r"\d\d\d", r"\d\d\d\d"))


def _v0(words: str) -> str:
    """Lookbehinds for V0 AsyncLLMEngine's file."""
    return _after("async_llm_engine", words)


def _rare(v1_added: bool) -> str:
    """``RARE``'s pattern, with V1's ``Added request`` or not. The alternatives are grouped by
    their first letter (``re`` tries them one by one, each turned away on that letter) and keep
    their order within a letter; a group's text is the same as with one alternative per line."""
    added = rf"(?:{_v0('Added request')}) (?=\S+\n)"
    if v1_added:
        added += f"|{_after('async_llm', 'Added request')}"
    return (
        rf"\] (A(?:dded request(?:{added})|borted request(?=(?:\(s\))?( (?>(?:[^\n.]++|\.(?!\n))*))\.?\n)"
        r"|syncEngineDeadError)"
        # the engine's death: factored on their common starts
        r"|Engine(?:Core (?:encountered a fatal error|failed to start)| core proc(?= \S+ died unexpectedly)"
        r"| background task failed|DeadError)"
        rf"|Finished request(?:(?:{_v0('Finished request')}) (?=\S+\n)|(?= \S+\n))"
        r"|Generated response(?= )|Initializing an?(?= (?:V\d )?LLM engine)|MQEngineDeadError"
        r"|Prefix cache hit rate: GPU"
        r"|R(?:oute(?=: /[^\s,]*, Methods: )|equest(?: (?=\S+ details: [^\n]*prompt_token_ids: \[)"
        r"|(?= \S+ (?:aborted|failed)))|eceived request(?= [^\n]*prompt[_ ]token[_ ]ids: \[))"
        r"|S(?:upported(?=[_ ]tasks: )|equence group(?= \S+ is preempted)|tarting vLLM"
        r"|hutting down FastAPI HTTP server)"
        r"|Worker(?:Proc failed to start| proc(?= \S+ died unexpectedly))"
        r"|\[shutdown\] API server: shutdown triggered|args: Namespace|non-default args|response_body=(?=\{\{)"
        r"|v(?:LLM(?= (?:API )?server version)|llm\.[\w.]*EngineDeadError)"
        r"|[ \t]*[\u2580-\u259f])"
    )


#: Candidates for the rare lines, all at the start of a vLLM message (after ``] ``); one scan,
#: counted in C, then only the kinds present are looked at in detail. V0 AsyncLLMEngine's
#: request lines (the only ones with a finish line, 0.2 - 0.10 non-MQ) are told apart by a
#: trailing space in the capture; V1 AsyncLLM's ``Added request`` (``ADDED_V1``, no space) only
#: shows that request logging is on; other "Added request" lines are not matched. ``Route`` is
#: the start-up listing of the API server's routes (``ROUTE``). A second group holds the ids of an
#: ``Aborted request`` line (``ABORTED_LIST``'s, after a space), so that they are counted without a
#: scan of their own (``vllm_rare.tally``); it is empty for the other lines. A token id list is
#: looked for by a greedy run to the end of the line and back (``re`` steps back over every
#: character but the list's first letter in a tight loop): in a lookahead, the same answer as a
#: lazy search along the line, at half its cost.
RARE = lazyre.compile(_rare(True), re.ASCII)
#: ``RARE`` without V1's ``Added request``, for a stream where it has told what it had to.
RARE_KNOWN = lazyre.compile(_rare(False), re.ASCII)
FINISHED = "Finished request"
FINISHED_V0 = "Finished request "
ADDED_V0 = "Added request "
ADDED_V1 = "Added request"
ADDED_V1_AT = lazyre.compile(rf"\] Added request(?:{_after('async_llm', 'Added request')}) ")
ROUTE = lazyre.compile(r"\] Route: (/[^\s,]*), Methods: ")
#: The API server built its engine client (0.10+): V1's first stats window opened then.
SUPPORTED_KEY = "Supported"
SUPPORTED = lazyre.compile(r"\] Supported[_ ]tasks: ")

#: Per-request lines with exact counts (``vllm_requests``): RARE's keys, then the lines. Received
#: request with its prompt's token ids (0.2 ``prompt token ids``, 0.3 - 0.11 ``prompt_token_ids``),
#: the DEBUG ``Request ... details`` line of 0.13+, ``--enable-log-outputs``' ``Generated response``
#: (with its ids up to 0.2x; 0.33 puts them on a DEBUG ``... details`` line), and the API server's
#: response body (``VLLM_DEBUG_LOG_API_SERVER_RESPONSE``, non-streaming: it holds ``usage``).
RECEIVED_KEY, DETAILS_KEY = "Received request", "Request "
GENERATED_KEY, BODY_KEY = "Generated response", "response_body="
REQUEST_KEYS = frozenset({RECEIVED_KEY, DETAILS_KEY, GENERATED_KEY, BODY_KEY})
#: These four are anchored at the start of a line (process prefix, vLLM header): a prompt or an
#: output is logged with ``%r`` on the same line, so a log line quoted inside one never matches.
#: Groups: the request id, the rest of the line (the prompt's repr, then the ids: see ``id_count``).
PROMPT_IDS = lazyre.compile(rf"\n{PFXO}{HDR} (?:Received request|Request) ([^\s:]+)(?::| details:) ([^\n]*)")
#: Any Received request line (to pair with a Generated response): the request id.
RECEIVED = lazyre.compile(rf"\n{PFXO}{HDR} Received request ([^\s:]+): ")
#: Groups: the request id, the streaming marker (`` (streaming delta)`` / `` (streaming complete)``),
#: `` details`` (0.33's DEBUG line), the rest of the line.
GENERATED = lazyre.compile(rf"\n{PFXO}{HDR} Generated response ([^\s:]+?)"
                           r"( \(streaming (?:delta|complete)\))?( details)?: ([^\n]*)")
#: The usage object of a response body: prompt and completion tokens (vLLM's key order is
#: prompt, total, completion; any order is accepted).
BODY = lazyre.compile(rf"\n{PFXO}{HDR} response_body=\{{\{{([^\n]*)\}}\}}")
USAGE = lazyre.compile(r'"usage": ?\{([^{}]*)\}')
USAGE_FIELD = lazyre.compile(r'"(prompt|completion)_tokens": ?(\d+)')
#: The token-id list at the end of ``prompt_token_ids: [`` / ``output_token_ids: [`` (searched from
#: the right: the prompt's or output's repr comes first and may quote anything).
IDS_PROMPT = (", prompt_token_ids: [", ", prompt token ids: [", "prompt_token_ids: [")
IDS_OUTPUT = ("output_token_ids: [",)
#: ``--max-log-len`` in the start-up args (Namespace or dict form): the lists are cut at that length.
MAX_LOG_LEN = lazyre.compile(r"max_log_len(?:=|': )(\d+)")

#: The two forms of an abort, each led by its own literal so that counting them is fast (group 1:
#: the list form's ids).
ABORTED_LIST = lazyre.compile(r"\] Aborted request(?:\(s\))? ([^\n]*?)\.?(?=\n)")
#: A request aborted (``Request X aborted``, the group ``a``) or failed (``Request X failed``, empty).
REQUEST_ENDED = lazyre.compile(r"\] Request \S+ (?:(a)borted\.?(?=\n)|failed)")
FINISHED_AT = lazyre.compile(r"\] Finished request (?=\S+\n)")
PREEMPTED = lazyre.compile(r"\] Sequence group \S+ is preempted by "
                           r"[^\n]*?(?:total_num_cumulative_preemption=(\d+))?(?=\n)")
V0_PREFIX = lazyre.compile(rf"\] Prefix cache hit rate: GPU: {NUM}%")
#: V0 AsyncLLMEngine's request log, the only one with a finish line (0.2 - 0.10, non-MQ engine).
V0_REQUEST = lazyre.compile(r"async_llm_engine\.py:\d+[\]\[]+ (Added|Finished) request (\S+?)\.?(?=\n)")

#: Start-up lines; group 1 tells the kind: version (A), engine init (E), server start (S), or a
#: line that only names the model.
STARTUP = lazyre.compile(
    r"\] (vLLM (?:API )?server version|Initializing an? (?:V\d )?LLM engine|Starting vLLM"
    r"|args: Namespace\(|non-default args: )([^\n]*)"
)
STARTUP_KEYS = frozenset({"vLLM", "Starting vLLM", "Initializing a", "Initializing an", "args: Namespace",
                          "non-default args"})
#: RARE's keys of the lines that say the engine died or failed to start (also any
#: ``...EngineDeadError`` key), and those lines with their positions.
DEAD_KEYS = frozenset({"EngineCore encountered a fatal error", "Engine core proc", "Worker proc",
                       "EngineCore failed to start", "WorkerProc failed to start", "Engine background task failed"})
DEAD = lazyre.compile(
    r"\] (?:EngineCore encountered a fatal error|(?:Engine core|Worker) proc \S+ died unexpectedly"
    r"|(?:EngineCore|WorkerProc) failed to start|Engine background task failed"
    r"|(?:vllm\.[\w.]*\.)?(?:Async|MQ)?EngineDeadError)"
)
#: The API server's lines that begin a clean shutdown (SIGTERM/SIGINT): 0.2x+'s ``[shutdown]`` lines,
#: older servers' FastAPI line.
SHUTDOWN_MARKS = ("] [shutdown] API server: shutdown triggered", "] Shutting down FastAPI HTTP server")
#: ``RARE``'s keys for them: a text without one holds no shutdown mark (no search of it).
SHUTDOWN_KEYS = frozenset(mark[2:] for mark in SHUTDOWN_MARKS)

#: uvicorn's lifecycle lines (server ready, shutting down), found by ``LINES`` (one group: the text);
#: ``LIFE`` finds them on its own (``learn``), ``LIFE_AT`` checks a line's start up to the text.
_LIFE_TEXT = "|".join(map(re.escape, (UVICORN.ready[0].rstrip("."), *UVICORN.stopping)))
_LIFE = rf"INFO: +({_LIFE_TEXT})"
LIFE = lazyre.compile(rf"\n{PFXO}{_LIFE}", re.ASCII)
LIFE_AT = lazyre.compile(rf"{PFXO}INFO: +(?={_LIFE_TEXT})", re.ASCII)
LOGO_MODEL = lazyre.compile(r"\] [ \t]*[\u2580-\u259f][^\n]*? model {3}(\S+)")

#: An error record's first line: an ERROR/CRITICAL line (vLLM header or uvicorn ``ERROR:``) or a
#: raw traceback. Groups: 1 the logging file (vLLM header), 2 set if the line itself continues a
#: record (a traceback-ish message), 3 set for a raw traceback, 4 the message, 5 set if the next
#: line continues the record (the record has more than one line).
ERROR_START = lazyre.compile(
    rf"\n{PFXO}(?:(?:ERROR|CRITICAL)(?: \d\d-\d\d \d\d:\d\d:\d\d \[?([\w./-]+):\d+[\]\[]+(?: |(?=\n))"
    rf"(?:((?={TRACEBACK_BODY}))|)| *:|(?= ))|((?=Traceback \(most recent call last\))))"
    rf"([^\n]*)(?=\n(?:((?={CONTINUATION.pattern})[\s\S])|))",
    re.ASCII,
)
#: The start of a one-line error record, up to its message (``ERROR_START`` without the groups).
ERROR_HEAD = lazyre.compile(rf"\n{PFXO}(?:ERROR|CRITICAL)(?: \d\d-\d\d \d\d:\d\d:\d\d \[?[\w./-]+:\d+[\]\[]+ | *:| )",
                            re.ASCII)
#: Access lines and error lines in one scan (one ``findall``, counted in C). Groups: 1 the access
#: key (see ``UVICORN_ACCESS``); for an error: 2 the logging file, 3 set if the line continues a
#: record, 4 set for a raw traceback, 5 the message, 6 set if the next line continues the record;
#: 7 a uvicorn lifecycle line (``_LIFE``), rare, handled as a start-up line is; 8 set for any other
#: line that holds ``HTTP/`` and does not start with a vLLM header: an access line behind a prefix,
#: perhaps (``vllm_lines.prefixed_access``). A prompt that quotes an access line is logged on a
#: header line: it sets nothing (a level word rules a prefix out: ``common.access_line``). A header
#: line of a level below ERROR is turned away first, at once (most lines are); ERROR and CRITICAL
#: lines all match the error alternative.
#: Flags capture one character, so that ``findall``'s empty string means "not set".
LINES = lazyre.compile(
    rf"\n{PFXO}(?!(?:DEBUG|INFO|WARNING) \d\d-\d\d )(?:{UVICORN_ACCESS}"
    rf"|(?:(?:ERROR|CRITICAL)(?: \d\d-\d\d \d\d:\d\d:\d\d \[?([\w./-]+):\d+[\]\[]+(?: |(?=\n))"
    rf"(?:(?=((?={TRACEBACK_BODY})[\s\S]))|)| *:|(?= ))|(?=(T)raceback \(most recent call last\)))"
    rf"([^\n]*)(?=\n(?:((?={CONTINUATION.pattern})[\s\S])|))|{_LIFE}"
    r"|(?=[^\n]*HTTP/)([^\n]))",
    re.ASCII,
)

#: An error line that reports a client error (vLLM's ``ErrorInfo``/``ErrorResponse`` with a 4xx code):
#: the access line counts it, as a client error; it is no backend error.
CLIENT_ERROR = lazyre.compile(r"(?:\bcode=|'code': |\"code\": ?)4\d\d\b")

#: Exception lines inside an error record (after the first line).
EXCEPTION_IN = lazyre.compile(rf"\n{PFXO}(?:{HDR} )?({EXCEPTION_NAME}(?::[^\n]*)?)(?=\n)", re.ASCII)

TRACEBACK_TEXT = "Traceback (most recent call last)"
#: Inside a multi-line error record, matched at a line start: a traceback's first line; an
#: exception line; a line with an empty message. A traceback that follows an exception line
#: directly (no "During handling ..." between them) is another error.
TRACEBACK_AT = lazyre.compile(rf"{PFXO}(?:{HDR} )?Traceback \(most recent call last\)", re.ASCII)
EXCEPTION_AT = lazyre.compile(rf"{PFXO}(?:{HDR} )?{EXCEPTION_NAME}(?::|(?=\n))", re.ASCII)
EMPTY_AT = lazyre.compile(rf"{PFXO}(?:{HDR} ?)?(?=\n)", re.ASCII)
#: A text that begins with a traceback, after empty lines or none: right after an exception line,
#: another error.
TRACEBACK_FIRST = lazyre.compile(rf"\n(?:{EMPTY_AT.pattern}\n)*{TRACEBACK_AT.pattern}", re.ASCII)
#: The empty lines a text begins with (its first line that is not empty begins where they end).
EMPTY_FIRST = lazyre.compile(rf"(?:\n{EMPTY_AT.pattern})*", re.ASCII)

#: Lines that say this is vLLM (sniffing).
SNIFF_STRONG = (
    r"vLLM (?:API )?server version|Initializing an? (?:V\d )?LLM engine|Avg prompt throughput: "
    r"|\((?:APIServer|EngineCore\w*) pid=\d+\)|Starting vLLM"
)
SNIFF_HEADER = r"(?:DEBUG|INFO|WARNING|ERROR) \d\d-\d\d \d\d:\d\d:\d\d \[?[\w./-]+\.py:\d+\]"
#: A record that is the rest of a raw traceback whose header was never read (tailing began inside
#: it, or a rotation cut it): it starts with a frame or with the final exception line. It can only
#: be a batch's first record: further on, such lines continue the record above them.
HEADLESS = lazyre.compile(rf"\n{PFXO}(?:  File \"|{EXCEPTION_NAME}(?::|(?=\n)))", re.ASCII)
#: After an error record that a read pause cut off, the lines of its rest that no scan of errors
#: finds (without a vLLM header): indented, or chaining another traceback to it.
REST = lazyre.compile(rf"\n(?:{PFXO}\n)*{PFXO}(?:[ \t]|During handling of the above exception"
                      r"|The above exception was the direct cause)", re.ASCII)

# --- error phrases ----------------------------------------------------------------------------

#: Causes of vLLM's own, before and after the common ones (the order makes ``ERROR_TYPES``'s).
#: Within a tier the leftmost phrase in the text wins, so an ``MQEngineDeadError: ...
#: OutOfMemoryError(...)`` is ``engine_dead`` and an ``Error in chat completion stream generator.``
#: whose traceback ends in ``torch.OutOfMemoryError`` is ``oom``.
ERROR_CAUSES: tuple[tuple[str, tuple[str, ...]], ...] = (
    ("engine_dead", ("EngineDeadError", "died unexpectedly", "EngineCore encountered a fatal error",
                     "Background loop has errored", "Engine background task failed", "output_handler failed")),
    ("oom", ("No available memory for the cache blocks", "KV cache is needed, which is larger than the available")),
    ("startup", ("Engine core initialization failed", "failed to start")),
    *COMMON_CAUSES,
    ("bad_request", ("maximum context length",)),
)
#: Contexts: where it happened (they lose to any cause).
ERROR_CONTEXTS: tuple[tuple[str, tuple[str, ...]], ...] = (
    ("bad_request", ("Error in preprocessing prompt inputs",)),
    ("asgi", ("Exception in ASGI application",)),
    ("stream_error", ("stream generator",)),
)
PHRASES = Phrases(ERROR_CAUSES, ERROR_CONTEXTS)
#: Every error_type ``classify_error`` can return, so that the counters start at 0.
ERROR_TYPES: tuple[str, ...] = PHRASES.types
#: The error types of a dead engine: one crash prints several records of them (the engine's
#: traceback, the API server's, one per request in flight), so they are counted once per crash.
FATAL_TYPES = frozenset({"oom", "engine_dead", "cuda", "startup"})
#: ``classify_error(text, request_handler=False, traceback=False)``: the ``error_type`` of a record.
classify_error = PHRASES.classify
