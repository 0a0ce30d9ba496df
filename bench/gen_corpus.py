#!/usr/bin/env python3
"""Write a deterministic, mixed LLM-serving log for benchmarks, and the totals it must yield.

Shares of lines (each kind drawn at random, so the counts are close to these, not exact):

    50 %  vLLM chatter that no rule should count, with decoys: lines that share prefixes and words
          with the real rules (``Avg prompt throughput: n/a``, ``Error in 2 of 0 recent steps``,
          a prompt that mentions ``ValueError:``, uvicorn start-up lines)
    25 %  uvicorn access lines           INFO:     10.0.3.7:51408 - "POST /v1/chat/completions HTTP/1.1" 200 OK
     5 %  vLLM V1 periodic stats lines   INFO 01-05 13:02:11 [loggers.py:118] Engine 000: Avg prompt throughput: ...
    15 %  llama.cpp timing blocks        prompt eval time / eval time / total time (three lines each)
     5 %  single-line vLLM ERROR lines   ERROR 01-05 13:02:11 [serving_chat.py:240] Error in chat completion: X: ...

Next to ``OUT`` it writes ``OUT.expected.json`` with what the ``vllm`` parser must report for the
file: ``http_requests_total`` per method, route and code, the gauges of the last stats line,
``backend_errors_total`` per ``error_type`` (how the parser classifies each exception, a crash
counted once: a fatal type (oom, engine_dead, cuda) counts only when no fatal error came since the
last stats or ready line; ``backend_errors_per_record`` counts every line, as a line-by-line tool
does; the counts per exception type are there too), aborted requests, and the number of lines.
llama.cpp totals are included for reference (the ``vllm`` parser does not read those lines).

    python3 bench/gen_corpus.py -n 1000000 --seed 7 -o bench/out/corpus.log

The mixed corpus (one log per backend in a directory) is ``bench/gen_mix.py``'s.

    python3 bench/gen_mix.py bench/out/mix-1000000-7 -n 1000000 --seed 7
"""

from __future__ import annotations

import argparse
import json
import random
import sys
from collections import Counter
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

# (method, route, weight)
ROUTES: tuple[tuple[str, str, int], ...] = (
    ("POST", "/v1/chat/completions", 46),
    ("POST", "/v1/completions", 18),
    ("POST", "/v1/embeddings", 8),
    ("GET", "/health", 16),
    ("GET", "/metrics", 8),
    ("GET", "/v1/models", 4),
)
# (code, reason phrase as uvicorn prints it, weight)
STATUSES: tuple[tuple[int, str, int], ...] = (
    (200, "OK", 88),
    (400, "Bad Request", 6),
    (404, "Not Found", 2),
    (500, "Internal Server Error", 3),
    (503, "Service Unavailable", 1),
)
# (exception type, message template, weight, error_type the vllm parser files it under)
EXCEPTIONS: tuple[tuple[str, str, int, str], ...] = (
    ("ValueError", "This model's maximum context length is 8192 tokens. However, you requested {a} tokens "
                   "({b} in the messages, {c} in the completion). Please reduce the length of the messages.",
     38, "bad_request"),
    ("torch.OutOfMemoryError", "CUDA out of memory. Tried to allocate {b}.00 MiB. GPU 0 has a total capacity "
                               "of 79.19 GiB of which 12.38 MiB is free.", 12, "oom"),
    ("vllm.v1.engine.exceptions.EngineDeadError", "EngineCore encountered an issue. See stack trace (above) "
                                                  "for the root cause.", 8, "engine_dead"),
    ("RuntimeError", "CUDA error: device-side assert triggered", 14, "cuda"),
    ("TimeoutError", "request {rid} did not finish within {a} ms", 16, "timeout"),
    ("KeyError", "'messages'", 12, "exception"),
)
#: Error types of a dead engine, counted once per crash (``parsers.vllm_patterns.FATAL_TYPES``).
FATAL = frozenset({"oom", "engine_dead", "cuda", "startup"})
#: Version of expected.json; ``bench/run.py`` regenerates a cached corpus of another version.
FORMAT = 4
ERROR_SITES: tuple[tuple[str, str], ...] = (
    ("serving_chat.py", "chat completion"),
    ("serving_completion.py", "completion"),
    ("serving_embedding.py", "embedding request"),
)
# Event kinds and their weights per event; a llama.cpp event writes three lines, so per line the
# shares are 50 / 25 / 5 / 15 / 5.
KINDS = ("noise", "access", "stats", "llama", "error")
KIND_WEIGHTS = (50, 25, 5, 5, 5)
START = datetime(2026, 1, 5, 9, 0, 0)


@dataclass
class Expected:
    """The totals an extractor must report for the corpus."""

    lines: int = 0
    kinds: Counter[str] = field(default_factory=Counter)
    requests: Counter[tuple[str, str, str]] = field(default_factory=Counter)
    gauges: dict[str, float] = field(default_factory=dict)
    errors: Counter[str] = field(default_factory=Counter)
    error_types: Counter[str] = field(default_factory=Counter)
    error_records: Counter[str] = field(default_factory=Counter)
    aborted: int = 0
    ok: int = 0
    client_errors: int = 0
    llama_prompt_tokens: int = 0
    llama_generated_tokens: int = 0
    llama_requests: int = 0
    llama_total_ms: float = 0.0

    def as_json(self) -> dict[str, Any]:
        """The expected.json document."""
        return {
            "format": FORMAT,
            "lines": self.lines,
            "kinds": dict(sorted(self.kinds.items())),
            "http_requests_total": [
                {"method": m, "route": r, "code": c, "value": n} for (m, r, c), n in sorted(self.requests.items())
            ],
            "requests": sum(self.requests.values()),
            "gauges": self.gauges,
            "backend_errors_total": dict(sorted(self.error_types.items())),
            "backend_errors_per_record": dict(sorted(self.error_records.items())),
            "errors": sum(self.errors.values()),
            "errors_by_exception": dict(sorted(self.errors.items())),
            "llm_requests_total": {"aborted": self.aborted, "ok": self.ok},
            "llm_client_errors_total": self.client_errors,
            "llamacpp": {
                "requests": self.llama_requests,
                "prompt_tokens": self.llama_prompt_tokens,
                "generated_tokens": self.llama_generated_tokens,
                "total_ms": round(self.llama_total_ms, 2),
            },
        }


class Corpus:
    """Draws the lines of the corpus and keeps the expected totals up to date."""

    def __init__(self, seed: int) -> None:
        self.rng = random.Random(seed)
        self.exp = Expected()
        self.clock = START
        self.stamp = self.clock.strftime("%m-%d %H:%M:%S")
        self.last_error_prefix = ""
        self.crashed = False  # a fatal error came since the last stats or ready line

    def tick(self) -> None:
        """Let time pass now and then (vLLM stamps have one-second resolution and no year)."""
        if self.rng.random() < 0.02:
            self.clock += timedelta(seconds=1)
            self.stamp = self.clock.strftime("%m-%d %H:%M:%S")

    def request_id(self) -> str:
        """An OpenAI-style request id."""
        return f"chatcmpl-{self.rng.getrandbits(96):024x}"

    def noise(self) -> str:
        """A line no rule may count: ordinary chatter or a decoy."""
        rng, ts = self.rng, self.stamp
        pick = rng.randrange(100)
        if pick < 22:
            return (f"DEBUG {ts} [core.py:{rng.randint(100, 999)}] EngineCore loop: {rng.randint(0, 64)} running, "
                    f"{rng.randint(0, 2048)} tokens scheduled, {rng.randint(0, 30000)} free KV blocks")
        if pick < 40:
            return f"INFO {ts} [async_llm.py:{rng.randint(250, 420)}] Added request {self.request_id()}."
        if pick < 50:
            return (f"INFO {ts} [logger.py:43] Received request {self.request_id()}: params: SamplingParams(n=1, "
                    f"temperature={rng.choice(('0.0', '0.7', '1.0'))}, top_p=0.95, max_tokens={rng.randint(16, 4096)}"
                    f"), lora_request: None.")
        if pick < 56:
            # decoy: the prompt talks about an error type and an HTTP status
            return (f"DEBUG {ts} [logger.py:47] Request {self.request_id()} details: prompt: 'Why does my script "
                    f"fail with ValueError: bad value and return \"POST /v1/completions HTTP/1.1\" 500?', "
                    f"prompt_token_ids: None, prompt_embeds shape: None.")
        if pick < 66:
            # decoy: a stats-like line without numbers
            return (f"INFO {ts} [loggers.py:{rng.randint(100, 130)}] Engine 000: Avg prompt throughput: n/a tokens/s, "
                    f"Avg generation throughput: n/a tokens/s (warming up)")
        if pick < 72:
            # decoy: the word Error at DEBUG level
            return f"DEBUG {ts} [core.py:{rng.randint(100, 999)}] Error in {rng.randint(0, 9)} of 0 recent steps: none"
        if pick < 80:
            return (f"WARNING {ts} [protocol.py:{rng.randint(50, 90)}] The following fields were present in the "
                    f"request but ignored: {{'{rng.choice(('user', 'logit_bias', 'stream_options', 'seed'))}'}}")
        if pick < 86:
            # decoy: uvicorn lines that are not access lines
            line = rng.choice((
                "INFO:     Started server process [7]",
                "INFO:     Waiting for application startup.",
                "INFO:     Application startup complete.",
                "WARNING:  Invalid HTTP request received.",
                "INFO:     Uvicorn running on http://0.0.0.0:8000 (Press CTRL+C to quit)",
            ))
            if line.endswith("startup complete."):  # the server is ready: a crash before is over
                self.crashed = False
            return line
        if pick < 93:
            self.exp.aborted += 1
            return f"INFO {ts} [async_llm.py:{rng.randint(420, 480)}] Aborted request {self.request_id()}."
        return (f"INFO {ts} [metrics.py:{rng.randint(60, 99)}] Prefix cache hit rate over last 1000 requests is "
                f"being recomputed")

    def access(self) -> str:
        """A uvicorn access line; counted per method, route and code."""
        rng = self.rng
        method, route, _ = rng.choices(ROUTES, weights=[w for *_, w in ROUTES])[0]
        code, phrase, _ = rng.choices(STATUSES, weights=[w for *_, w in STATUSES])[0]
        if rng.random() < 0.65:
            client = "127.0.0.1"
        else:
            client = f"10.0.{rng.randint(0, 255)}.{rng.randint(1, 254)}"
        self.exp.requests[(method, route, str(code))] += 1
        if method == "POST" and code < 300:  # every POST route of the corpus is an inference route
            self.exp.ok += 1
        elif 400 <= code < 500:  # the client's fault, on any route
            self.exp.client_errors += 1
        return f'INFO:     {client}:{rng.randint(1024, 65535)} - "{method} {route} HTTP/1.1" {code} {phrase}'

    def stats(self) -> str:
        """A vLLM V1 stats line; its values become the expected gauges (the last one wins)."""
        rng = self.rng
        prompt = round(rng.uniform(0.0, 6000.0), 1)
        gen = round(rng.uniform(0.0, 2500.0), 1)
        running = rng.randint(0, 96)
        waiting = rng.randint(0, 24)
        kv = round(rng.uniform(0.0, 100.0), 1)
        hit = round(rng.uniform(0.0, 100.0), 1)
        self.crashed = False
        self.exp.gauges = {
            "llm_prompt_throughput_tokens_per_second": prompt,
            "llm_generation_throughput_tokens_per_second": gen,
            "llm_requests_running": running,
            "llm_requests_waiting": waiting,
            "llm_kv_cache_usage_ratio": kv / 100.0,
            "llm_prefix_cache_hit_ratio": hit / 100.0,
        }
        return (f"INFO {self.stamp} [loggers.py:118] Engine 000: Avg prompt throughput: {prompt:.1f} tokens/s, "
                f"Avg generation throughput: {gen:.1f} tokens/s, Running: {running} reqs, Waiting: {waiting} reqs, "
                f"GPU KV cache usage: {kv:.1f}%, Prefix cache hit rate: {hit:.1f}%")

    def llama(self) -> list[str]:
        """A llama.cpp server timing block (three lines)."""
        rng = self.rng
        n_prompt = rng.randint(1, 3500)
        n_gen = rng.randint(1, 900)
        prompt_ms = n_prompt * rng.uniform(0.04, 1.2)
        gen_ms = n_gen * rng.uniform(7.0, 45.0)
        total_ms = round(prompt_ms + gen_ms, 2)
        self.exp.llama_requests += 1
        self.exp.llama_prompt_tokens += n_prompt
        self.exp.llama_generated_tokens += n_gen
        self.exp.llama_total_ms += total_ms
        return [
            f"prompt eval time = {prompt_ms:10.2f} ms / {n_prompt:5d} tokens "
            f"({prompt_ms / n_prompt:8.2f} ms per token, {1000.0 * n_prompt / prompt_ms:8.2f} tokens per second)",
            f"       eval time = {gen_ms:10.2f} ms / {n_gen:5d} tokens ({gen_ms / n_gen:8.2f} ms per token, "
            f"{1000.0 * n_gen / gen_ms:8.2f} tokens per second)",
            f"      total time = {total_ms:10.2f} ms / {n_prompt + n_gen:5d} tokens",
        ]

    def error(self, previous: str) -> str:
        """A single-line vLLM ERROR record; counted once per line, by exception type."""
        rng = self.rng
        exc, template, _, error_type = rng.choices(EXCEPTIONS, weights=[e[2] for e in EXCEPTIONS])[0]
        filename, what = rng.choice(ERROR_SITES)
        prefix = f"ERROR {self.stamp} [{filename}:{rng.randint(180, 320)}]"
        while previous.startswith(prefix + " "):
            # Two adjacent ERROR lines with one prefix read as one re-prefixed multi-line record in
            # vLLM's log format; keep every error a record of its own.
            prefix = f"ERROR {self.stamp} [{filename}:{rng.randint(180, 320)}]"
        b, c = rng.randint(100, 6000), rng.randint(16, 4096)
        message = template.format(a=b + c, b=b, c=c, rid=self.request_id())
        self.exp.errors[exc] += 1
        self.exp.error_records[error_type] += 1
        if error_type not in FATAL:
            self.exp.error_types[error_type] += 1
        elif not self.crashed:
            self.exp.error_types[error_type] += 1
            self.crashed = True
        return f"{prefix} Error in {what}: {exc}: {message}"

    def write(self, out: Path, n: int, weights: tuple[int, ...] = KIND_WEIGHTS) -> Expected:
        """Write ``n`` lines to ``out``, drawing the kinds of ``KINDS`` with ``weights``."""
        rng, exp = self.rng, self.exp
        written = 0
        previous = ""
        buf: list[str] = []
        with out.open("w", encoding="ascii", newline="\n") as f:
            while written < n:
                kinds = rng.choices(KINDS, weights=weights, k=4096)
                for kind in kinds:
                    if written >= n:
                        break
                    self.tick()
                    if kind == "llama" and n - written < 3:
                        kind = "noise"
                    if kind == "llama":
                        block = self.llama()
                        buf.extend(block)
                        previous = block[-1]
                        written += 3
                        exp.kinds[kind] += 3
                        continue
                    if kind == "noise":
                        line = self.noise()
                    elif kind == "access":
                        line = self.access()
                    elif kind == "stats":
                        line = self.stats()
                    else:
                        line = self.error(previous)
                    buf.append(line)
                    previous = line
                    written += 1
                    exp.kinds[kind] += 1
                f.write("\n".join(buf))
                f.write("\n")
                buf.clear()
        exp.lines = written
        return exp


def main(argv: list[str] | None = None) -> int:
    """Command line entry point."""
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("-n", "--lines", type=int, default=1_000_000, help="number of lines (default 1,000,000)")
    ap.add_argument("--seed", type=int, default=7, help="random seed (default 7)")
    ap.add_argument("-o", "--out", type=Path, default=Path("corpus.log"), help="output log file")
    args = ap.parse_args(argv)
    if args.lines < 1:
        ap.error("--lines must be at least 1")
    args.out.parent.mkdir(parents=True, exist_ok=True)
    exp = Corpus(args.seed).write(args.out, args.lines)
    expected_path = args.out.with_name(args.out.name + ".expected.json")
    expected_path.write_text(json.dumps(exp.as_json(), indent=1) + "\n")
    shares = ", ".join(f"{k} {v}" for k, v in sorted(exp.kinds.items()))
    print(f"wrote {exp.lines} lines to {args.out} ({shares}) and {expected_path}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
