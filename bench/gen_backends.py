"""Line writers of the mixed corpus (``bench/gen_mix.py``): one per backend other than vLLM.

Each writer draws whole events (a request with all its lines, an error, a piece of chatter) from
its own seeded random generator, prints them in the backend's format (see the formats in the
README of each parser) and adds what they stand for to its ``Figures``, from the values it drew
and with the rounding it printed them with.
"""

from __future__ import annotations

import random
from collections import Counter
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any

START = datetime(2026, 1, 5, 9, 0, 0)
@dataclass
class Figures:
    """What one file must yield, summed over every label but the ones named."""

    lines: int = 0
    http: Counter[tuple[str, str, str]] = field(default_factory=Counter)
    outcomes: Counter[str] = field(default_factory=Counter)
    prompt_tokens: int = 0
    generation_tokens: int = 0
    audio_ms: int = 0
    embeddings: int = 0
    errors: int = 0
    errors_per_record: int = 0
    gauges: dict[str, float] = field(default_factory=dict)
    #: histogram name -> [count, sum in the unit the sum is kept in], ``scale`` turns it into seconds
    hist: dict[str, list[int]] = field(default_factory=dict)
    scale: dict[str, float] = field(default_factory=dict)
    #: families this file feeds that the generator cannot compute (estimates); not checked
    unchecked: tuple[str, ...] = ()

    def observe(self, name: str, value: int, scale: float) -> None:
        """Add one observation of ``value * scale`` seconds to histogram ``name``."""
        entry = self.hist.setdefault(name, [0, 0])
        entry[0] += 1
        entry[1] += value
        self.scale[name] = scale

    def as_json(self) -> dict[str, Any]:
        """This file's part of expected.json."""
        return {
            "lines": self.lines,
            "http_requests_total": [{"method": m, "route": r, "code": c, "value": n}
                                    for (m, r, c), n in sorted(self.http.items())],
            "llm_requests_total": dict(sorted(self.outcomes.items())),
            "llm_prompt_tokens_total": self.prompt_tokens,
            "llm_generation_tokens_total": self.generation_tokens,
            "llm_audio_seconds_total": self.audio_ms / 1000.0,
            "llm_embeddings_total": self.embeddings,
            "backend_errors_total": self.errors,
            "backend_errors_per_record": self.errors_per_record,
            "gauges": self.gauges,
            "histograms": {k: {"count": c, "sum": s * self.scale[k]} for k, (c, s) in sorted(self.hist.items())},
            "unchecked": list(self.unchecked),
        }


class Writer:
    """Lines of one file, drawn with the file's own random generator, and its figures."""

    def __init__(self, seed: int) -> None:
        self.rng = random.Random(seed)
        self.fig = Figures()
        self.ms = 0  # milliseconds since START

    def advance(self, lo: int, hi: int) -> None:
        """Let between ``lo`` and ``hi`` milliseconds pass."""
        self.ms += self.rng.randint(lo, hi)

    def stamp(self, sep: str = " ", frac: str = ",") -> str:
        """``2026-01-05 09:00:00,123`` (or ISO with ``sep='T'``) for the current time."""
        t = START + timedelta(milliseconds=self.ms)
        return t.strftime(f"%Y-%m-%d{sep}%H:%M:%S") + f"{frac}{self.ms % 1000:03d}"

    def event(self) -> list[str]:
        """One event's lines (a request, an error, a piece of chatter)."""
        raise NotImplementedError


def mmss(ms: int) -> str:
    """faster-whisper's ``format_timestamp``: ``MM:SS.mmm``, hours in front only when there are any."""
    h, rest = divmod(ms, 3_600_000)
    m, rest = divmod(rest, 60_000)
    s, frac = divmod(rest, 1000)
    return (f"{h:02d}:" if h else "") + f"{m:02d}:{s:02d}.{frac:03d}"


def rust_duration(ns: int) -> str:
    """A ``std::time::Duration`` as Rust's Debug prints it: the largest unit of s / ms / µs / ns
    that is at most the value, the fraction without trailing zeros."""
    for unit, size in (("s", 1_000_000_000), ("ms", 1_000_000), ("µs", 1_000)):
        if ns >= size:
            whole, frac = divmod(ns, size)
            digits = len(str(size)) - 1
            text = f"{frac:0{digits}d}".rstrip("0")
            return f"{whole}.{text}{unit}" if text else f"{whole}{unit}"
    return f"{ns}ns"



# --- llama.cpp llama-server (2025 format: module prefixes, no timestamps) ---------------------

LLAMA_ROUTES: tuple[tuple[str, str, int], ...] = (
    ("POST", "/v1/chat/completions", 62),
    ("POST", "/completion", 18),
    ("POST", "/chat/completions", 8),
    ("POST", "/infill", 4),
)
LLAMA_OTHER: tuple[tuple[str, str, int], ...] = (
    ("GET", "/health", 80), ("GET", "/v1/models", 12), ("GET", "/props", 8),
)


class LlamaWriter(Writer):
    """llama-server: a finished request is launch, new prompt, progress, release, the timing block
    (a header line and three timing lines) and the ``request:`` line the HTTP layer writes last."""

    def __init__(self, seed: int) -> None:
        super().__init__(seed)
        self.task = 0

    def client(self) -> str:
        """Who asked: mostly a local proxy."""
        rng = self.rng
        return "127.0.0.1" if rng.random() < 0.7 else f"10.0.{rng.randint(0, 255)}.{rng.randint(1, 254)}"

    def request_line(self, method: str, route: str, code: int) -> str:
        """The HTTP layer's line for a finished request (no latency, no port)."""
        self.fig.http[(method, route, str(code))] += 1
        return f"srv  log_server_r: request: {method} {route} {self.client()} {code}"

    def event(self) -> list[str]:
        """One event of llama-server's log."""
        rng = self.rng
        pick = rng.randrange(100)
        if pick < 30:
            method, route, _ = rng.choices(LLAMA_OTHER, weights=[w for *_, w in LLAMA_OTHER])[0]
            return [self.request_line(method, route, 200)]
        if pick < 36:
            return [rng.choice(("srv  update_slots: all slots are idle", "srv  params_from_: Chat format: Content-only",
                                "srv  params_from_: Chat format: Hermes 2 Pro"))]
        self.task += 1
        slot = rng.randrange(4)
        head = f"slot %s: id {slot:2d} | task {self.task} | "
        method, route, _ = rng.choices(LLAMA_ROUTES, weights=[w for *_, w in LLAMA_ROUTES])[0]
        n_ctx = 8192
        if pick < 39:  # the prompt does not fit: the client's fault (a 400), no timing block
            n_prompt = rng.randint(n_ctx + 1, 3 * n_ctx)
            return [head % "launch_slot_" + "processing task",
                    head % "update_slots" + f"new prompt, n_ctx_slot = {n_ctx}, n_keep = 0, "
                    f"n_prompt_tokens = {n_prompt}",
                    f"srv    send_error: task id = {self.task}, error: the request exceeds the available context "
                    "size. try increasing the context size or enable context shift",
                    head % "     release" + "stop processing: n_past = 0, truncated = 0",
                    self.request_line(method, route, 400)]
        if pick < 40:  # the KV cache is full: the batch fails to decode (one error), and the server
            # sends each request of the batch an error (a failed request, not one more error)
            self.fig.errors += 1
            self.fig.errors_per_record += 1
            self.fig.outcomes["error"] += 1
            return [head % "launch_slot_" + "processing task",
                    "srv  update_slots: failed to decode the batch: KV cache is full - try increasing it via the "
                    "context size, i = 0, n_batch = 2048, ret = 1",
                    f"srv    send_error: task id = {self.task}, error: Input prompt is too big compared to KV size. "
                    "Please try increasing KV size.",
                    head % "     release" + "stop processing: n_past = 0, truncated = 0",
                    self.request_line(method, route, 500)]
        if pick < 41:  # the HTTP layer fails on a body it cannot read: an error, no inference request
            self.fig.errors += 1
            self.fig.errors_per_record += 1
            return ['got exception: {"code":500,"message":"[json.exception.parse_error.101] parse error at line 1, '
                    "column 1: syntax error while parsing value - invalid literal; last read: 'x'\",\"type\":"
                    '"server_error"}',
                    self.request_line(method, route, 500)]
        return self.finished(head, method, route, n_ctx)

    def finished(self, head: str, method: str, route: str, n_ctx: int) -> list[str]:
        """A request that ran to its end, with its timing block."""
        rng, fig = self.rng, self.fig
        n_prompt = rng.randint(1, 3000)
        n_gen = rng.randint(1, 900)
        prompt_c = max(1, round(n_prompt * rng.uniform(0.05, 1.2) * 100))  # hundredths of a ms
        eval_c = max(1, round(n_gen * rng.uniform(7.0, 45.0) * 100))
        total_c = prompt_c + eval_c + rng.randint(0, 300)
        p_ms, e_ms, t_ms = prompt_c / 100, eval_c / 100, total_c / 100
        per_token = f"{e_ms / n_gen:8.2f}"
        fig.prompt_tokens += n_prompt
        fig.generation_tokens += n_gen
        fig.outcomes["ok"] += 1
        fig.observe("llm_request_duration_seconds", total_c, 1e-5)
        fig.observe("llm_time_to_first_token_seconds", prompt_c, 1e-5)
        fig.observe("llm_time_per_output_token_seconds", round(float(per_token) * 100), 1e-5)
        n_past = n_prompt + n_gen
        lines = [head % "launch_slot_" + "processing task",
                 head % "update_slots" + f"new prompt, n_ctx_slot = {n_ctx}, n_keep = 0, n_prompt_tokens = {n_prompt}",
                 head % "update_slots" + "kv cache rm [0, end)"]
        done = 0
        while done < n_prompt:
            done = min(n_prompt, done + 2048)
            lines.append(head % "update_slots" + f"prompt processing progress, n_past = {done}, "
                         f"n_tokens = {done}, progress = {done / n_prompt:.6f}")
        lines += [head % "update_slots" + f"prompt done, n_past = {n_prompt}, n_tokens = {n_prompt}",
                  head % "     release" + f"stop processing: n_past = {n_past}, truncated = 0",
                  head % "print_timing",
                  f"prompt eval time = {p_ms:10.2f} ms / {n_prompt:5d} tokens ({p_ms / n_prompt:8.2f} ms per token, "
                  f"{1000.0 * n_prompt / p_ms:8.2f} tokens per second)",
                  f"       eval time = {e_ms:10.2f} ms / {n_gen:5d} tokens ({per_token} ms per token, "
                  f"{1000.0 * n_gen / e_ms:8.2f} tokens per second)",
                  f"      total time = {t_ms:10.2f} ms / {n_past:5d} tokens",
                  self.request_line(method, route, 200)]
        if self.rng.random() < 0.3:
            lines.append("srv  update_slots: all slots are idle")
        return lines


# --- llama.cpp llama-server, current format (2026: time since start and level on every line) ------

#: Client errors the HTTP layer answers with a JSON error body (``got exception: {"error":{...}}``):
#: (code, type, message), drawn by weight.
LLAMA_CLIENT_ERRORS: tuple[tuple[int, str, str, int], ...] = (
    (400, "invalid_request_error", "[json.exception.parse_error.101] parse error at line 1, column 9: syntax "
     "error while parsing object key - invalid literal; last read: '{bad'; expected string literal", 6),
    (400, "invalid_request_error", "[json.exception.type_error.302] type must be string, but is number", 3),
    (404, "not_found_error", "model not found", 1),
)


class LlamaCurrentWriter(Writer):
    """llama-server as its 2026 builds log at the default level: every line starts with the time
    since start (``M.SS.mmm.uuu``) and a level letter; a request is the slot choice, its start, the
    four timing lines (each with its slot and task), and its release; no HTTP request lines (they
    are not logged at any level). Client errors are the HTTP layer's ``got exception`` warnings
    with the error's JSON; a prompt over the context is a ``send_error`` the slot releases."""

    N_CTX = 4096

    def __init__(self, seed: int) -> None:
        super().__init__(seed)
        self.task = 0
        self.us = 0  # microseconds since the start
        self.client = Counter[str]()
        self.started = False

    def line(self, level: str, text: str) -> str:
        """A line stamped with the time since start; the clock moves a little."""
        self.us += self.rng.randint(20, 4000)
        us = self.us
        return f"{us // 60_000_000}.{us // 1_000_000 % 60:02d}.{us // 1000 % 1000:03d}.{us % 1000:03d} {level} {text}"

    def event(self) -> list[str]:
        """One event of the log: the start-up banner first, then requests and client errors."""
        if not self.started:
            self.started = True
            return [self.line("I", "srv  llama_server: initializing ..."),
                    self.line("I", "srv    load_model: loading model '/models/tiny-llama.gguf'"),
                    self.line("I", f"srv    load_model: initializing, n_slots = 4, n_ctx_slot = {self.N_CTX}, "
                              "kv_unified = 'true'"),
                    self.line("I", "srv  llama_server: model loaded"),
                    self.line("I", "srv  llama_server: listening on http://127.0.0.1:8080")]
        rng = self.rng
        pick = rng.randrange(100)
        if pick < 4:
            code, kind, message, _ = rng.choices(LLAMA_CLIENT_ERRORS, weights=[w for *_, w in LLAMA_CLIENT_ERRORS])[0]
            # the parser's type: bad_json for a body that is not JSON, else the type without "_error"
            self.client["bad_json" if "parse_error" in message else kind.removesuffix("_error")] += 1
            body = f'{{"error":{{"code":{code},"message":"{message}","type":"{kind}"}}}}'
            return [self.line("W", f"srv    operator(): got exception: {body}")]
        self.task += 1
        slot = rng.randrange(4)
        head = f"slot %s: id {slot:2d} | task {self.task} | "
        pick_line = (head.replace(f"task {self.task}", "task -1") % "get_availabl"
                     + (f"selected slot by LCP similarity, f_sim_best = {rng.uniform(0.1, 1):.3f} (> 0.100 thold), "
                        f"f_keep = {rng.uniform(0, 1):.3f}" if rng.random() < 0.5
                        else f"selected slot by LRU, t_last = {rng.randint(10**9, 10**10)}"))
        lines = [self.line("I", pick_line), self.line("I", head % "launch_slot_" + "processing task, is_child = 0")]
        if pick < 6:  # the prompt does not fit: the client's fault, the slot is released
            n = rng.randint(self.N_CTX, 3 * self.N_CTX)
            self.client["context_length"] += 1
            return [
                *lines,
                self.line("E", f"srv    send_error: task id = {self.task}, error: request ({n} tokens) exceeds the "
                          f"available context size ({self.N_CTX} tokens), try increasing it"),
                self.line("I", head % "     release" + "stop processing: n_tokens = 0, truncated = 0")]
        return lines + self.finished(head)

    def finished(self, head: str) -> list[str]:
        """A request that ran to its end: its four timing lines and its release."""
        rng, fig = self.rng, self.fig
        n_prompt = rng.randint(1, 3000)
        n_gen = rng.randint(1, 900)
        n_cached = rng.choice((0, 0, rng.randint(1, 2000)))
        prompt_c = max(1, round(n_prompt * rng.uniform(0.05, 1.2) * 100))  # hundredths of a ms
        eval_c = max(1, round(n_gen * rng.uniform(7.0, 45.0) * 100))
        p_ms, e_ms = prompt_c / 100, eval_c / 100
        t_ms = (prompt_c + eval_c) / 100
        per_token = f"{e_ms / n_gen:8.2f}"
        fig.prompt_tokens += n_prompt
        fig.generation_tokens += n_gen
        fig.outcomes["ok"] += 1
        fig.observe("llm_request_duration_seconds", prompt_c + eval_c, 1e-5)
        fig.observe("llm_time_to_first_token_seconds", prompt_c, 1e-5)
        fig.observe("llm_time_per_output_token_seconds", round(float(per_token) * 100), 1e-5)
        lines = []
        if n_gen > 100 and rng.random() < 0.3:
            lines.append(self.line("I", head % "print_timing" + f"n_gen = {100:6d}, tg = {rng.uniform(5, 60):6.2f} "
                                   f"t/s, tg_3s = {rng.uniform(5, 60):6.2f} t/s"))
        n_all = n_prompt + n_gen
        return [
            *lines,
            self.line("I", head % "print_timing" + f"prompt eval time = {p_ms:10.2f} ms / {n_prompt:5d} tokens "
                      f"({p_ms / n_prompt:8.2f} ms per token, {1000.0 * n_prompt / p_ms:8.2f} tokens per second)"),
            self.line("I", head % "print_timing" + f"       eval time = {e_ms:10.2f} ms / {n_gen:5d} tokens "
                      f"({per_token} ms per token, {1000.0 * n_gen / e_ms:8.2f} tokens per second)"),
            self.line("I", head % "print_timing" + f"      total time = {t_ms:10.2f} ms / {n_all:5d} tokens"),
            self.line("I", head % "print_timing" + f"   graphs reused = {max(0, n_gen - 2):10d}"),
            self.line("I", head % "     release" + f"stop processing: n_tokens = {n_cached + n_all - 1}, "
                      "truncated = 0")]


# --- LeapfrogAI whisper and faster-whisper -----------------------------------------------------

LANGS = ("en", "de", "fr", "es", "ja", "uk")


class WhisperWriter(Writer):
    """LeapfrogAI's whisper backend: ``name: time | LEVEL | file:line >>> message`` lines, one
    request after the other (its gRPC server logs no request id)."""

    def lf(self, logger: str, level: str, where: str, msg: str) -> str:
        """One LeapfrogAI line at the current time; time passes a little after it."""
        line = f"{logger}: {self.stamp()} | {level} | {where} >>> {msg}"
        self.advance(0, 40)
        return line

    def event(self) -> list[str]:
        """One whisper request, or a refused one."""
        rng, fig = self.rng, self.fig
        self.advance(50, 5000)
        task = "transcribe" if rng.random() < 0.85 else "translate"
        if rng.random() < 0.01:  # refused before it starts: a failed request
            fig.errors += 1
            fig.errors_per_record += 1
            fig.outcomes["error"] += 1
            bad = rng.choice(("summarize", "align"))
            return [self.lf("__main__", "ERROR", "main.py:95", f"Task {bad} is not supported")]
        temp = rng.choice(("0.0", "0.2"))
        lines = [self.lf("__main__", "INFO", "main.py:66", f"Updated metadata: Temperature={temp}")]
        start = self.ms  # the request's duration runs from its start line to its completion line
        lines.append(self.lf("__main__", "INFO", "main.py:92", f"Task {task} is starting"))
        lang = rng.choice(LANGS) if rng.random() < 0.6 else None
        if lang:
            lines.append(self.lf("__main__", "INFO", "main.py:101", f"Language {lang} is supported"))
        lines.append(self.lf("__main__", "INFO", "main.py:110", "Temperature 0.0 is set"))
        done = "Transcription complete!" if task == "transcribe" else "Translation complete!"
        if rng.random() < 0.04:
            # The audio cannot be decoded: no duration line; the backend logs the error and returns
            # an empty text, so the completion line still follows (a failed request all the same).
            self.advance(5, 200)
            msg = "[Errno 1094995529] Invalid data found when processing input: '<none>'"
            lines.append(self.lf("__main__", "ERROR", "main.py:131", f"Error transcribing audio: {msg}"))
            fig.errors += 1
            fig.errors_per_record += 1
            fig.outcomes["error"] += 1
            fig.observe("llm_request_duration_seconds", self.ms - start, 1e-3)
            lines.append(self.lf("__main__", "INFO", "main.py:158", done))
            return lines
        audio = rng.randint(800, 600_000) if rng.random() < 0.97 else rng.randint(3_600_000, 7_200_000)
        fig.audio_ms += audio
        lines.append(self.lf("faster_whisper", "INFO", "transcribe.py:281",
                             f"Processing audio with duration {mmss(audio)}"))
        if not lang:
            p = f"{rng.uniform(0.5, 1.0):.2f}"
            lines.append(self.lf("faster_whisper", "INFO", "transcribe.py:330",
                                 f"Detected language '{rng.choice(LANGS)}' with probability {p}"))
        self.advance(audio // 40, audio // 8)
        lines.append(self.lf("__main__", "INFO", "main.py:150", f"Completed /tmp/tmp{rng.getrandbits(40):010x}"))
        fig.observe("llm_request_duration_seconds", self.ms - start, 1e-3)
        lines.append(self.lf("__main__", "INFO", "main.py:158", done))
        fig.outcomes["ok"] += 1
        return lines


class FasterWhisperWriter(Writer):
    """faster-whisper inside an application that keeps Python's default logging format
    (``LEVEL:logger:message``): audio durations, with VAD lines that must not count as audio."""

    def event(self) -> list[str]:
        """One transcription, or a line of chatter from the HTTP client."""
        rng, fig = self.rng, self.fig
        if rng.random() < 0.1:
            return ['INFO:httpx:HTTP Request: GET https://huggingface.co/api/models/Systran/faster-whisper-small/'
                    'revision/main "HTTP/1.1 200 OK"']
        audio = rng.randint(500, 1_200_000)
        fig.audio_ms += audio
        lines = [f"INFO:faster_whisper:Processing audio with duration {mmss(audio)}"]
        if rng.random() < 0.5:
            removed = rng.randint(0, audio // 3)
            lines.append(f"INFO:faster_whisper:VAD filter removed {mmss(removed)} of audio")
            lines.append(f"DEBUG:faster_whisper:VAD filter kept the following audio segments: "
                         f"[00:00.000 -> {mmss(audio - removed)}]")
        if rng.random() < 0.5:
            lines.append(f"INFO:faster_whisper:Detected language '{rng.choice(LANGS)}' with probability "
                         f"{rng.uniform(0.4, 1.0):.2f}")
        for seg in range(0, min(audio, 90_000), 30_000):
            lines.append(f"DEBUG:faster_whisper:Processing segment at {mmss(seg)}")
        return lines


# --- embeddings: LeapfrogAI text-embeddings and text-embeddings-inference ----------------------


class EmbeddingsWriter(Writer):
    """LeapfrogAI's text-embeddings backend: start and finish lines around a tqdm progress bar."""

    def __init__(self, seed: int) -> None:
        super().__init__(seed)
        self.started = False

    def lf(self, level: str, where: str, msg: str, logger: str = "__main__") -> str:
        """One LeapfrogAI line at the current time."""
        line = f"{logger}: {self.stamp()} | {level} | {where} >>> {msg}"
        self.advance(0, 30)
        return line

    def event(self) -> list[str]:
        """One CreateEmbedding request (or the start-up banner, first)."""
        rng, fig = self.rng, self.fig
        if not self.started:
            self.started = True
            return ["load INSTRUCTOR_Transformer", "max_seq_length  512",
                    "Starting server. Listening on 0.0.0.0:50051."]
        self.advance(20, 3000)
        n = rng.choice((1, 1, 1, 2, 4, 8, 16, 32, 64))
        chars = rng.randint(10, 20000)
        start = self.ms
        lines = [self.lf("INFO", "main.py:38", f"processing CreateEmbedding request: char-length: {chars} "
                                               f"word-count: {max(1, chars // 6)}")]
        batches = (n + 31) // 32
        self.advance(10, 400 * batches)
        lines.append(f"Batches: 100%|██████████| {batches}/{batches} [00:00<00:00, {rng.uniform(2, 90):5.2f}it/s]")
        if rng.random() < 0.02:  # the model runs out of memory; gRPC logs the exception with its traceback
            fig.errors += 1
            fig.errors_per_record += 1
            fig.outcomes["error"] += 1
            msg = "CUDA out of memory. Tried to allocate 2.00 GiB. GPU 0 has a total capacity of 23.68 GiB"
            return [*lines, self.lf("ERROR", "_server.py:552", "Exception calling application: " + msg, "grpc._server"),
                    "Traceback (most recent call last):",
                    '  File "/home/leapfrogai/.venv/lib/python3.11/site-packages/grpc/_server.py", line 542, '
                    "in _call_behavior",
                    "    response_or_iterator = behavior(argument, context)",
                    f"torch.OutOfMemoryError: {msg}"]
        fig.embeddings += n
        fig.outcomes["ok"] += 1
        fig.observe("llm_request_duration_seconds", self.ms - start, 1e-3)
        lines.append(self.lf("INFO", "main.py:52",
                             f"finished processing CreateEmbedding request, created {n} embeddings"))
        return lines


TEI_SPANS: tuple[tuple[str, int], ...] = (("embed", 50), ("openai_embed", 35), ("embed_all", 5), ("rerank", 10))


class TeiWriter(Writer):
    """text-embeddings-inference: one ``Success`` line per request inside the handler's span, whose
    fields carry its durations in Rust's notation; errors inside the span before any field."""

    def __init__(self, seed: int) -> None:
        super().__init__(seed)
        self.started = False

    def ts(self) -> str:
        """``2026-01-05T09:00:00.123456Z``."""
        return self.stamp("T", ".") + f"{self.rng.randrange(1000):03d}Z"

    def event(self) -> list[str]:
        """One request, an error, or the start-up lines (first)."""
        rng, fig = self.rng, self.fig
        self.advance(1, 400)
        if not self.started:
            self.started = True
            src = "text_embeddings_router: router/src"
            return [f"{self.ts()}  INFO {src}/main.rs:175: Args {{ model_id: \"BAA*/***-****-**-v1.5\", "
                    "revision: None, max_batch_tokens: 16384, port: 80 }",
                    f"{self.ts()}  INFO {src}/lib.rs:188: Maximum number of tokens per request: 512",
                    f"{self.ts()}  INFO text_embeddings_router::http::server: router/src/http/server.rs:1555: "
                    "Starting HTTP server: 0.0.0.0:80",
                    f"{self.ts()}  INFO text_embeddings_router::http::server: router/src/http/server.rs:1556: Ready"]
        span = rng.choices(TEI_SPANS, weights=[w for _, w in TEI_SPANS])[0][0]
        if rng.random() < 0.015:
            if rng.random() < 0.7:  # the client's fault (TEI answers 422): no backend error, no failed request
                given = rng.randint(513, 4000)
                msg = f"Input validation error: `inputs` must have less than 512 tokens. Given: {given}"
            else:
                fig.errors += 1
                fig.errors_per_record += 1
                fig.outcomes["error"] += 1
                msg = "Model is overloaded"
            return [f"{self.ts()} ERROR {span}: text_embeddings_router::http::server: "
                    f"router/src/http/server.rs:{rng.randint(600, 700)}: {msg}"]
        tok = rng.randint(20_000, 20_000_000)
        queue = rng.randint(500, 50_000_000)
        infer = rng.randint(800_000, 2_500_000_000)
        total = tok + queue + infer + rng.randint(1_000, 90_000)
        fig.outcomes["ok"] += 1
        fig.observe("llm_request_duration_seconds", total, 1e-9)
        return [f'{self.ts()}  INFO {span}{{total_time="{rust_duration(total)}" tokenization_time='
                f'"{rust_duration(tok)}" queue_time="{rust_duration(queue)}" '
                f'inference_time="{rust_duration(infer)}"}}: '
                f"text_embeddings_router::http::server: router/src/http/server.rs:{rng.randint(700, 1300)}: Success"]
