"""The lines of llama.cpp's ``llama-server`` (every era) and of llama-cpp-python, as patterns.

Eras of llama-server (see docs/parsers.md): A/B (2023 - Feb 2024) JSON lines with ``message``
plus plain ``print_timings:`` / ``slot N ...`` lines; C (Feb - Sep 2024) JSON with ``msg`` or text
``INFO [ function] msg | k=v ...``; D (Sep 2024 - 2025) ``slot func: id  S | task T | msg`` and
``srv  func: msg`` with a three-line timing block under one ``slot print_timing`` line; E (2026)
the same with a ``M.SS.mmm.uuu L`` time-since-start prefix and one record per timing line. The
library (and llama-cpp-python, which prints it once per completion) prints
``llama_print_timings:`` / ``llama_perf_context_print:`` blocks.
"""

from __future__ import annotations

import re

from logmetrics import lazyre
from logmetrics.records.shapes import DEFAULT_SHAPES, Shape, unconditional

from .errors import COMMON_CAUSES, Phrases

# --- prefixes ----------------------------------------------------------------------------------

#: Router mode's ``[ 8081] `` child port, Era E's ``0.08.526.747 I `` time since start and level.
PREFIX = lazyre.compile(r"(?:\[ *\d{1,5}\] )?(?:\d+\.\d{2}\.\d{3}\.\d{3} (?P<lvl>[IWEDT]) )?\r?")
#: Era D/E module prefixes: ``slot print_timing: id  0 | task 5 | msg``, ``srv  update_slots: msg``.
SLOT = lazyre.compile(r"slot +(?P<func>[\w()~ ]{1,12}?): id +(?P<slot>\d+) \| task (?P<task>-?\d+) \| ?(?P<msg>.*)")
SRV = lazyre.compile(r"(?:srv|que) +(?P<func>[\w() ]{1,40}?): (?P<msg>.*)")
#: Era C text: ``INFO [           print_timings] msg | tid="1" timestamp=1 id_slot=0 id_task=0``.
ERA_C = lazyre.compile(
    r"(?P<lvl>INFO|WARN|WARNING|ERR|ERROR|VERB|DEBUG) \[ *(?P<func>[\w:~]+)\] (?P<msg>.*?)(?: \| (?P<kv>.*))?"
)
KV = lazyre.compile(r'(\w+)=("(?:[^"\\]|\\.)*"|\S+)')
#: Library timing lines: ``llama_print_timings: prompt eval time = ...``; Era B ``print_timings: ...``.
LIB_TIMING = lazyre.compile(
    r"(?:llama_print_timings|llama_perf_context_print|llama_perf_print|print_timings): *(?P<msg>.*)"
)

# --- the timing block ------------------------------------------------------------------------

NUM = r"(?:[\d.,]+|[-+]?nan(?:\(ind\))?|[-+]?inf)"
#: A timing line: prompt or generation (``kind``), or the block's ``total`` time.
TIMING = lazyre.compile(
    rf"(?P<kind>prompt eval|generation eval|eval) time *= *(?P<ms>{NUM}) ms(?: */ *(?P<n>\d+) (?:tokens|runs))?"
    rf"(?: *\( *(?P<per>{NUM}) ms per (?:token|run))?|total time *= *(?P<total>{NUM}) ms"
)

#: The timing block's continuation lines (Era D prints them under one ``slot print_timing`` line;
#: Sep - Dec 2024 builds start each with ``\r``), added to the default shapes' lines (an exception
#: line continues any record above it).
CONTINUATION_LLAMA = lazyre.compile(rf"(?:{unconditional(DEFAULT_SHAPES)})|\r|prompt eval time")
#: The same lines as the parser's record shape.
SHAPE = Shape("llamacpp", lines=CONTINUATION_LLAMA.pattern)

# --- requests in flight, cache, HTTP -----------------------------------------------------------

#: Era B's slot taking a task, or (group 2) released: group 1 the slot.
SLOT_B = lazyre.compile(r"slot (\d+) (?:is processing \[task id: \d+\]|(released) \()")
#: Prompt tokens found in the cache (the one group that matched: a count, or ``p0``, a key of the
#: line): Era B's, llama-cpp-python's prefix-match hit, the server's cache removal from N on.
CACHED = lazyre.compile(r"slot \d+ : in cache: (\d+) tokens|Llama\.generate: (\d+) prefix-match hit"
                        r"|(?:kv cache rm|memory_seq_rm) \[(\d+|p0), end\)")
REQUEST = lazyre.compile(r"(?:done )?request: (?P<method>[A-Z]+) (?P<path>\S+) \S+ (?P<code>\d{3})\s*$")
#: llama-box (a fork): ``log_server_response: rid 1 | POST /v1/embeddings 1.2.3.4:5 | status 500 | ...``.
RESPONSE_BOX = lazyre.compile(
    r"log_server_response: rid \S+ \| (?P<method>[A-Z]+) (?P<path>\S+) \S+ \| status (?P<code>\d{3})"
)

# --- model, life, errors ---------------------------------------------------------------------

MODEL_PATH = lazyre.compile(
    r"loaded meta data with \d+ key-value pairs and \d+ tensors from (?P<m>.+?) \(version"
    r"|loading model '(?P<q>[^']+)'|llama\.cpp: loading model from (?P<g>\S+)|model_path=\"(?P<c>[^\"]+)\""
)
GENERAL_NAME = lazyre.compile(r"general\.name +(?:str +)?= +(?P<name>\S.*?)\s*$")
#: Ready: the model is loaded (llama-server's "HTTP server listening" comes before the model loads).
#: A start-up: the build line of every era, uvicorn's first line (llama-cpp-python).
#: 2026 builds print no build line at the default level: ``srv  llama_server: initializing ...``
#: opens every start-up (``-lv 4`` adds ``common_params_print_info: build N (...)`` before it).
STARTUP = lazyre.compile(
    r"^build: \d+ \(|^main: build = \d+|\] build info|\"(?:message|msg)\":\"build info\"|Started server process \["
    r"|^common_params_print_info: build \d+ |^srv +llama_server: initializing \.\.\."
)
READY = lazyre.compile(
    r"server is listening on|: listening on http|Application startup complete|(?:: |\] |\")model loaded(?:$|\"| )"
)
SHUTDOWN = lazyre.compile(
    r"cleaning up before exit|Shutting down|Finished server process|exiting due to model loading error"
)
#: A failed model load prints several lines (gguf, loader, server); it counts once per start-up.
#: The first four are llama.cpp's own lines; llama-cpp-python raises the last.
LOAD_PHRASES = ("error loading model", "failed to load model", "exiting due to model loading error",
                "invalid magic characters", "Model path does not exist")
LOAD_FAILED = lazyre.compile("|".join(LOAD_PHRASES))
#: Library lines about a failed decode: the server's own ``failed to decode the batch`` line follows.
LIB_DECODE = lazyre.compile(r"(?:llama_decode|llama_prepare_sbatch|decode|llama_batch_allocr\w*): ")
#: Lines that are errors without a level (llama-server without ``--log-prefix``, the library).
ERROR_LINE = lazyre.compile("|".join(map(re.escape, (
    "send_error: ", "failed to decode the batch", "decode() failed", "got exception: ", "got another exception: ",
    "couldn't bind HTTP server", "error: invalid argument", "CUDA error", "cudaMalloc failed", "GGML_ASSERT",
    "Segmentation fault", "core dumped", *LOAD_PHRASES[:4], "failed to allocate", "unable to allocate backend buffer",
    "Unhandled exception", "Exception in ASGI application"))))
#: A record that begins with a Python exception (llama-cpp-python's ``Exception: ...`` + traceback).
EXCEPTION_START = lazyre.compile(r"(?:ERROR: +)?[A-Za-z_][\w.]*(?:Error|Exception): ")
SEND_ERROR = lazyre.compile(r"send_error: |\] task error|\"(?:msg|message)\":\"task error\"")

# --- client errors (HTTP 4xx): counted apart from the backend's own errors ----------------------

#: The HTTP layer's answer to a request it refused: ``got exception: {"error":{"code":400,...}}``
#: (2026; ``{"code":500,...}`` without the ``error`` wrapper before): its JSON.
GOT_EXCEPTION = lazyre.compile(r"got exception: (?P<json>\{.*\})\s*$")
#: A JSON error body that ``orjson`` could not read (a cut line): its code, message and type.
ERROR_FIELDS = lazyre.compile(
    r'"code": *(?P<code>\d{3}).*?(?:"message": *(?P<msg>"(?:[^"\\]|\\.)*"))?.*?"type": *"(?P<type>\w+)"'
)
#: ``send_error`` / ``task error`` messages of requests refused for the client's fault (the server
#: answers them with a 4xx; the log line carries the message only), by client error type.
CLIENT_SEND: tuple[tuple[str, re.Pattern[str]], ...] = (
    ("context_length", lazyre.compile(r"exceeds? the available context size|is larger than the max context size")),
    ("invalid_request", lazyre.compile(r"Invalid slot ID|Prompt contains invalid tokens|Failed to format input"
                                       r"|Cannot run multiple aLoRAs|Unable to restore slot")),
)
#: The JSON error types of llama-server's 4xx answers, as ``llm_client_errors_total`` types.
CLIENT_KINDS = {"invalid_request_error": "invalid_request", "exceed_context_size_error": "context_length",
                "not_found_error": "not_found", "authentication_error": "authentication",
                "permission_error": "permission"}
#: Client error types every llama-server can produce (any body can be malformed or lack a field,
#: any prompt can be too long): their zero series.
CLIENT_TYPES = ("invalid_request", "bad_json", "context_length")

PHRASES = Phrases(
    (
        ("kv_cache_full", ("KV cache is full", "Input prompt is too big compared to KV size")),
        ("context_overflow", ("exceeds the available context size", "exceed context window",
                              "exceed_context_size_error", "exceeds the available context")),
        ("oom", ("unable to allocate backend buffer", "cudaMalloc failed", "failed to allocate compute buffers")),
        *COMMON_CAUSES,
        ("model_load", LOAD_PHRASES),
        ("bind", ("couldn't bind HTTP server socket",)),
    ),
    (
        ("decode", ("failed to decode", "decode() failed")),
        ("exception", ("got exception", "got another exception", "Exception in ASGI application")),
    ),
)

#: Strong signs of llama.cpp / llama-cpp-python in a stream's first lines.
SNIFF_STRONG = (
    r"llama_print_timings:|llama_perf_context_print:|llama_model_loader: |llama_new_context_with_model:"
    r"|llm_load_print_meta:|llama_model_load_internal:|llama\.cpp: loading model|^slot +\w+: id +\d+ \| task"
    r"|^(?:\d+\.\d{2}\.\d{3}\.\d{3} [IWED] )?(?:srv|slot) +\w+: |\"function\":\"(?:main|print_timings|update_slots"
    r"|log_server_request|launch_slot_with_task)\"|^(?:INFO|WARN|ERR) \[ +\w+\] |Llama\.generate: "
    r"|^print_info: |^load_tensors: |^llama_context: |^build: \d+ \("
    r"|/llama_cpp/(?:server/|llama\.py)|Requested tokens \(\d+\) exceed context window of \d+"
)
#: The error types this parser can count (``bad_request`` needs a request handler's ValueError,
#: which llama.cpp does not log).
ERROR_TYPES = tuple(kind for kind in PHRASES.types if kind != "bad_request")

# --- the whole-chunk scan of the frequent llama-server lines (``llamacpp_batch``) ---------------
# Each pattern matches one whole record of the 2024-2026 formats, and only in the exact form whose
# record-by-record meaning is known (plain numbers in ASCII digits ``[0-9]``, cheaper to match than
# ``\d``; no ``nan``; clean paths); anything else is left to ``parse``. A record ends where the next
# line does not continue it. The current format's time since start and level (``0.12.000.001 I ``)
# may stand before each line; only ``I`` lines are read here (a ``W``/``E`` line goes to ``parse``,
# which reads its level).

_CONT = rf"(?:{CONTINUATION_LLAMA.pattern})"
#: After a record: the next line (past empty lines, which the records stage skips) starts a record;
#: a ``slot``/``srv`` line or one that starts with a digit (the time prefix) always does (tested
#: first: it is the next line nearly every time).
_ENDS = rf"\n(?:(?=s(?:lot|rv) |[0-9])|(?!\n*{_CONT}))"
#: The time since start and the INFO level, when the build prints them.
_PFX = r"(?:[0-9]+\.[0-9][0-9]\.[0-9]{3}\.[0-9]{3} I )?"
_SLOT_ID = r"id +[0-9]+ \| task [0-9]+ \| "
#: Slot lines that say nothing the parser counts: prompt progress, a new prompt, prompt done, the
#: slot chosen for a task, generation progress, the graphs reused line that ends a timing block.
_NOOP = (
    rf"{_PFX}(?:slot (?:update_slots: {_SLOT_ID}(?:prompt processing progress, n_past = [0-9]+, "
    r"n_tokens = [0-9]+, progress = [0-9.]+|new prompt, n_ctx_slot = [0-9]+, n_keep = [0-9]+, n_prompt_tokens = [0-9]+"
    r"|prompt done, n_past = [0-9]+, n_tokens = [0-9]+)"
    r"|get_availabl: id +[0-9]+ \| task -?[0-9]+ \| selected slot by (?:LCP similarity, f_sim_best = [0-9.]+ "
    r"\(> [0-9.]+ thold\), f_keep = [0-9.]+|LRU, t_last = -?[0-9]+)"
    rf"|print_timing: {_SLOT_ID}(?:n_(?:gen|decoded) = +[0-9]+, tg = +[0-9.]+ t/s(?:, tg_3s = +[0-9.]+ t/s)?"
    r"|prompt processing, n_tokens = +[0-9]+, progress = [0-9.]+, t = +[0-9.]+ s / [0-9.]+ tokens per second"
    r"| +graphs reused = +[0-9]+))"
    # the chat template's name, without a word that the model, life or error rules look for
    r"|srv  params_from_: Chat format: (?:(?!model|released|idle|listening|startup|exit|Shutting|process|failed"
    r"|error|GGML|fault|dumped|magic|allocate|xception|Traceback)[\w .()-]){1,60})"
)
_EVAL = (r"time = +([0-9]+\.[0-9]+) ms / +([0-9]+) tokens \( *([0-9]+\.[0-9]+) ms per token, "
         r"+[0-9]+\.[0-9]+ tokens per second\)\n")
#: The whole timing block under its ``slot print_timing`` line (2024-2025): groups 1 task, 2-4
#: prompt ms, tokens, ms per token, 5-7 the same of the generation, 8 total ms.
_BLOCK = (
    rf"slot print_timing: id +[0-9]+ \| task ([0-9]+) \| ?\nprompt eval {_EVAL} +eval {_EVAL}"
    r" +total time = +([0-9]+\.[0-9]+) ms / +[0-9]+ tokens"
)
#: The current format's timing lines, one record each, all of one task in a row: groups 9 task,
#: 10-12 prompt, 13-15 generation, 16 total ms (the ``graphs reused`` line after them is a no-op).
#: Groups 17 the slot of ``processing task``, 18 that of ``stop processing``, 19 the tokens of
#: ``kv cache rm [N, end)``, 20-22 method, path and status of a request line, 23 ``all slots are idle``.
#: After the optional time and level, the line's module and function pick the alternative.
_TIMING_E = rf"{_PFX}slot print_timing: id +[0-9]+ \| task "
_PREFIXED = (
    rf"{_PFX}(?:slot (?:print_timing: id +[0-9]+ \| task ([0-9]+) \| prompt eval {_EVAL}"
    rf"{_TIMING_E}\9 \|        eval {_EVAL}"
    rf"{_TIMING_E}\9 \|       total time = +([0-9]+\.[0-9]+) ms / +[0-9]+ tokens"
    r"|launch_slot_: id +([0-9]+) \| task [0-9]+ \| processing task(?:, is_child = [0-9]+)?"
    r"| +release: id +([0-9]+) \| task [0-9]+ \| stop processing: n_(?:past|tokens) = [0-9]+, truncated = [0-9]+"
    rf"|update_slots: {_SLOT_ID}kv cache rm \[([0-9]+), end\))"
    # a path with no quote (``model_path="``) and no ``GGML_ASSERT`` (an error phrase), an address
    r'|srv  (?:log_server_r: (?:done )?request: ([A-Z]+) ((?![^\s]*GGML_ASSERT)[^\s"]+) [0-9a-fA-F.:\[\]]+ ([0-9]{3})'
    r"|update_slots: (all slots are idle)))"
)
#: A request refused for the client's fault, as the current format's HTTP layer logs it (a warning):
#: groups 24 code, 25 message, 26 type.
_CLIENT = (r'(?:[0-9]+\.[0-9][0-9]\.[0-9]{3}\.[0-9]{3} W )?srv +operator\(\): got exception: '
           r'\{"error":\{"code":(4[0-9][0-9]),"message":"((?:[^"\\\n]|\\.)*)","type":"(\w+)"\}\}')
#: Any other record: a line and the lines that continue it (group 27).
_OTHER = rf"([^\n]*\n(?:\n*{_CONT}[^\n]*\n)*)"
#: One match per record that counts (the records that say nothing are skipped inside the match).
SCAN = lazyre.compile(
    rf"^(?>(?:\n|{_NOOP}{_ENDS})*)(?:(?:{_BLOCK}|{_PREFIXED}|{_CLIENT}){_ENDS}"
    rf"|{_OTHER}|\Z)",
    re.M,
)
#: The first record of a text.
FIRST_RECORD = lazyre.compile(_OTHER)
