"""The backends the conformance harness runs: how each is served, in which logging modes, what
traffic it gets, and which of its own figures (its ``/metrics``) and of the client's record each of
logmetrics' figures is held against.

Every backend gets the same shape of traffic: inference requests of each kind its API has
(completions and chat, streamed and not, several at once), client errors (a prompt over the
context, an unknown model, malformed JSON, a missing field, an unknown route), then a crash
(``kill -9``) and a restart into the same log, more traffic, and a clean SIGTERM.
"""

from __future__ import annotations

import json
import os
import random
import subprocess
import sys
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import client
from client import Record
from figures import Check, by_label, total

HERE = Path(__file__).resolve().parent


@dataclass(frozen=True)
class Mode:
    """A logging mode: extra flags and environment that change what the backend logs."""

    name: str
    flags: tuple[str, ...] = ()
    env: tuple[tuple[str, str], ...] = ()


@dataclass
class Backend:
    """One backend: ``venv`` and ``model`` under the cache, the logmetrics parser that reads it."""

    name: str
    parser: str
    served: str
    modes: tuple[Mode, ...]
    ready_path: str = "/health"
    #: The backend's own Prometheus endpoint, if it has one.
    metrics_path: str | None = "/metrics"
    #: Seconds between ready and the first request.
    warmup: float = 0.0
    ready_deadline: float = 300.0
    home: Path = field(default_factory=Path)

    # -- overridden per backend ----------------------------------------------------------------
    def prepare(self) -> None:
        """Make the model (once: it is kept in the cache)."""

    def command(self, mode: Mode, port: int) -> list[str]:
        """The server's command line."""
        raise NotImplementedError

    def env(self, mode: Mode) -> dict[str, str]:
        """The server's environment."""
        return {**os.environ, "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1", **dict(mode.env)}

    def traffic(self, base: str, record: Record, phase: str, rng: random.Random) -> None:
        """Send the traffic of one phase (``main`` before the crash, ``after`` after it)."""
        raise NotImplementedError

    def own(self, text: str) -> dict[str, float]:
        """The backend's own figures from its ``/metrics`` text (summed over the two lives)."""
        return {}

    def checks(self, live: str, oneshot: str, own: dict[str, float], record: Record, mode: Mode,
               starts: int, ready_before: float) -> list[Check]:
        """The rows of this backend's table."""
        raise NotImplementedError

    # -- shared --------------------------------------------------------------------------------
    def run_py(self, venv: str, script: str, *args: str) -> None:
        """Run one of the model makers with a backend virtualenv's python."""
        py = self.home / venv / "bin" / "python"
        subprocess.run([str(py), str(HERE / "models" / script), *args], check=True, env=self.env(Mode("make")),
                       stdout=subprocess.DEVNULL)


def common_checks(b: Backend, live: str, oneshot: str, starts: int, ready_before: float, *,
                  client: int | None = None, client_note: str = "", clean: bool = True) -> list[Check]:
    """Rows every backend has: no backend error after a clean run (unless not ``clean``: the
    traffic had requests fail), the client errors against ``client`` (information only if
    ``None``), the crash counted as a restart, readiness 1 before the SIGTERM and 0 after it, and
    the model label."""
    def errors(t: str) -> float:
        return total(t, "backend_errors_total") + total(
            t, "llm_requests_total", lambda lab: lab.get("outcome") == "error")

    def other_model(t: str) -> float:
        return sum(v for (model,), v in by_label(t, "llm_requests_total", "model").items() if model != b.served)

    def ready(t: str) -> float:
        return total(t, "backend_ready")

    clean_row = [Check("backend errors + requests failed", errors(live), errors(oneshot), 0, "clean run")]
    return [
        *(clean_row if clean else []),
        Check("client errors (4xx)", total(live, "llm_client_errors_total"),
              total(oneshot, "llm_client_errors_total"), client, "info" if client is None else "client",
              note=client_note),
        Check("start-ups (backend_restarts_total)", total(live, "backend_restarts_total"),
              total(oneshot, "backend_restarts_total"), starts, "harness", note="start + crash restart"),
        Check(f"backend_ready{{model=\"{b.served}\"}} before SIGTERM", ready_before, None, 1, "harness",
              note="the served name"),
        Check("backend_ready after SIGTERM", ready(live), ready(oneshot), 0, "harness"),
        Check(f"requests under a model other than {b.served}", other_model(live), other_model(oneshot), 0, "served"),
    ]


def http_checks(live: str, oneshot: str, record: Record, routes: Callable[[str], str]) -> list[Check]:
    """``http_requests_total`` by route and code against the client's record, route by route."""
    want: dict[tuple[str, str], float] = {}
    for (_, path, code), n in record.codes.items():
        key = (routes(path), str(code))
        want[key] = want.get(key, 0) + n
    got_live = by_label(live, "http_requests_total", "route", "code")
    got_one = by_label(oneshot, "http_requests_total", "route", "code")
    rows = [Check(f"HTTP {route} {code}", got_live.get((route, code), 0), got_one.get((route, code), 0), n, "client")
            for (route, code), n in sorted(want.items())]
    rows.append(Check("HTTP requests, all routes", sum(got_live.values()), sum(got_one.values()),
                      sum(want.values()), "client"))
    return rows


# ---------------------------------------------------------------------------------------------- vLLM

def openai_mix(base: str, record: Record, rng: random.Random, n: int, served: str, *, chat: bool = True,
               native: bool = False, usage_stream: bool = True) -> list[Callable[[], None]]:
    """Jobs for an OpenAI-compatible server: ``n`` of each kind (completions and chat, plain and
    streamed), each one recording the usage its response reports."""
    jobs: list[Callable[[], None]] = []

    def infer(path: str, payload: dict[str, object], stream: bool) -> Callable[[], None]:
        def job() -> None:
            code, data = client.post_json(base, path, payload, record)
            if code != 200:
                raise RuntimeError(f"{path}: HTTP {code}: {data[:300]!r}")
            obj = client.stream_usage(data) if stream else json.loads(data)
            if obj is None:
                raise RuntimeError(f"{path}: no usage in the stream")
            usage = obj.get("usage") or {}
            timings = obj.get("timings") or {}
            if "prompt_n" in timings:
                cached = int(obj.get("tokens_cached", 0) or 0)
                record.usage(int(timings["prompt_n"]), int(timings["predicted_n"]), cached)
            else:
                details = usage.get("prompt_tokens_details") or {}
                record.usage(int(usage["prompt_tokens"]), int(usage["completion_tokens"]),
                             int(details.get("cached_tokens", 0) or 0))
        return job

    for i in range(n):
        for stream in (False, True):
            extra: dict[str, object] = {"stream": True, "stream_options": {"include_usage": True}} if stream else {}
            text = client.prompt(rng, rng.randint(4, 40))
            max_tokens = rng.randint(4, 48)
            jobs.append(infer("/v1/completions", {"model": served, "prompt": text, "max_tokens": max_tokens,
                                                  "temperature": 0.8, **extra}, stream))
            if chat:
                msgs = [{"role": "user", "content": client.prompt(rng, rng.randint(4, 40))}]
                jobs.append(infer("/v1/chat/completions", {"model": served, "messages": msgs,
                                                           "max_tokens": rng.randint(4, 48), **extra}, stream))
            if native:
                jobs.append(infer("/completion", {"prompt": text if i % 3 else "hello world the", "n_predict":
                                                  max_tokens, "stream": stream}, stream))
    return jobs


def client_error_jobs(base: str, record: Record, rng: random.Random, served: str, *, unknown_model: bool = True,
                      too_long_words: int = 1600) -> list[Callable[[], None]]:
    """Requests a server must refuse for the client's fault: each job checks that it got a 4xx."""
    def expect_4xx(send: Callable[[], tuple[int, bytes]], what: str) -> Callable[[], None]:
        def job() -> None:
            code, data = send()
            if not 400 <= code < 500:
                raise RuntimeError(f"{what}: HTTP {code}, a 4xx was expected: {data[:200]!r}")
        return job

    long_prompt = client.prompt(rng, too_long_words)
    jobs = [
        expect_4xx(lambda: client.post_json(base, "/v1/completions", {"model": served, "prompt": long_prompt,
                                                                      "max_tokens": 8}, record), "too long"),
        expect_4xx(lambda: client.call(base, "POST", "/v1/chat/completions", b'{"model": "x", "messages": [',
                                       record), "malformed JSON"),
        expect_4xx(lambda: client.post_json(base, "/v1/chat/completions", {"model": served, "max_tokens": 4},
                                            record), "missing field"),
        expect_4xx(lambda: client.get(base, "/v1/no-such-route", record), "unknown route"),
    ]
    if unknown_model:
        jobs.append(expect_4xx(lambda: client.post_json(base, "/v1/completions", {
            "model": "no-such-model", "prompt": "hello", "max_tokens": 4}, record), "unknown model"))
    return jobs


def openai_traffic(base: str, record: Record, rng: random.Random, phase: str, served: str, n_main: int,
                   n_after: int, *, workers: int, native: bool = False, unknown_model: bool = True) -> None:
    """One phase of an OpenAI-compatible server's traffic, ``workers`` requests at a time: ``n_main``
    (or after the crash ``n_after``) of each kind, and twice each client error in the main phase."""
    jobs = openai_mix(base, record, rng, n_main if phase == "main" else n_after, served, native=native)
    if phase == "main":
        jobs += client_error_jobs(base, record, rng, served, unknown_model=unknown_model) * 2
    rng.shuffle(jobs)
    client.run_all(jobs, workers)


class VLLM(Backend):
    """vLLM's CPU build (V1 engine) serving a random Llama."""

    def __init__(self, home: Path) -> None:
        super().__init__("vllm", "vllm", "tiny-llama", (
            Mode("default"),
            Mode("log-requests", ("--enable-log-requests",)),
            Mode("log-outputs", ("--enable-log-requests", "--enable-log-outputs")),
            Mode("debug", (), (("VLLM_LOGGING_LEVEL", "DEBUG"),)),
        ), home=home, warmup=11.0)
        # The first stats window of a start-up is known to a second only (its stamps are cut to the
        # second), which on a run this short is more than the 0.5 % the tokens are held to: the
        # traffic starts after the first tick (10 s after the server started), as it does on a server
        # that has been up for a while. docs/parsers.md states the first window's error.
        self.model = home / "models" / "hf-llama"

    def prepare(self) -> None:
        """Write the random Llama once."""
        if not (self.model / "model.safetensors").exists():
            self.run_py("vllm", "hf_llama.py", str(self.model))

    def command(self, mode: Mode, port: int) -> list[str]:
        """``vllm serve`` with the harness's model."""
        return [str(self.home / "vllm" / "bin" / "vllm"), "serve", str(self.model), "--served-model-name",
                self.served, "--host", "127.0.0.1", "--port", str(port), "--max-model-len", "1024",
                "--dtype", "bfloat16", "--enforce-eager", *mode.flags]

    def env(self, mode: Mode) -> dict[str, str]:
        """The CPU build's settings."""
        return {**super().env(mode), "VLLM_TARGET_DEVICE": "cpu", "VLLM_CPU_KVCACHE_SPACE": "1",
                "VLLM_NO_USAGE_STATS": "1", "VLLM_DO_NOT_TRACK": "1"}

    def traffic(self, base: str, record: Record, phase: str, rng: random.Random) -> None:
        """Completions and chat, streamed and not, four at a time; client errors in the main phase."""
        openai_traffic(base, record, rng, phase, self.served, 20, 5, workers=4)

    def own(self, text: str) -> dict[str, float]:
        """vLLM's token and request counters."""
        return {
            "prompt": total(text, "vllm:prompt_tokens_total"),
            "generation": total(text, "vllm:generation_tokens_total"),
            "ok": total(text, "vllm:request_success_total",
                        lambda lab: lab.get("finished_reason") in ("stop", "length")),
        }

    def checks(self, live: str, oneshot: str, own: dict[str, float], record: Record, mode: Mode,
               starts: int, ready_before: float) -> list[Check]:
        """Tokens within 0.5 % of vLLM's counters, requests exact, HTTP exact."""
        def ok(t: str) -> float:
            return total(t, "llm_requests_total", lambda lab: lab.get("outcome") == "ok")

        rows = [
            Check("prompt tokens", total(live, "llm_prompt_tokens_total"), total(oneshot, "llm_prompt_tokens_total"),
                  own["prompt"], "vllm /metrics", 0.005),
            Check("prompt tokens (client usage)", None, None, None, "info", note=f"{record.prompt_tokens:,}"),
            Check("generation tokens", total(live, "llm_generation_tokens_total"),
                  total(oneshot, "llm_generation_tokens_total"), own["generation"], "vllm /metrics", 0.005),
            Check("generation tokens (client usage)", None, None, None, "info",
                  note=f"{record.generation_tokens:,}"),
            Check("successful requests", ok(live), ok(oneshot), own["ok"], "vllm /metrics"),
        ]
        rows += http_checks(live, oneshot, record, known_route)
        return rows + common_checks(self, live, oneshot, starts, ready_before, client=client_errors(record))


#: The route label of a path the server does not have (404): one series for every such path.
NOT_FOUND = "__not_found__"


def known_route(path: str) -> str:
    """The route label logmetrics gives a path: itself, or the one label of unknown routes."""
    return NOT_FOUND if path == "/v1/no-such-route" else path


# ----------------------------------------------------------------------------------------- llama.cpp

class Llama(Backend):
    """llama-server built from llama.cpp's sources, serving a random GGUF."""

    def __init__(self, home: Path) -> None:
        super().__init__("llama-server", "llamacpp", "tiny-llama", (Mode("default"), Mode("verbose", ("-lv", "4"))),
                         home=home, ready_deadline=60.0)
        self.model = home / "models" / "tiny-llama.gguf"

    def prepare(self) -> None:
        """Write the random GGUF once."""
        if not self.model.exists():
            self.model.parent.mkdir(parents=True, exist_ok=True)
            self.run_py("llama/venv", "gguf_llama.py", str(self.model))

    def command(self, mode: Mode, port: int) -> list[str]:
        """``llama-server`` with its own /metrics, two slots."""
        return [str(self.home / "llama" / "bin" / "llama-server"), "-m", str(self.model), "--host", "127.0.0.1",
                "--port", str(port), "--metrics", "-c", "2048", "-np", "2", "--slots", "-t", "2", *mode.flags]

    def traffic(self, base: str, record: Record, phase: str, rng: random.Random) -> None:
        """Native and OpenAI-style requests, streamed and not, two at a time (two slots); repeated
        prompts use the cache; client errors in the main phase."""
        openai_traffic(base, record, rng, phase, self.served, 8, 3, workers=3, native=True, unknown_model=False)

    def own(self, text: str) -> dict[str, float]:
        """llama-server's token counters."""
        return {
            "prompt": total(text, "llamacpp:prompt_tokens_total"),
            "generation": total(text, "llamacpp:tokens_predicted_total"),
            "cached": total(text, "llamacpp:prompt_tokens_cached_total"),
        }

    def checks(self, live: str, oneshot: str, own: dict[str, float], record: Record, mode: Mode,
               starts: int, ready_before: float) -> list[Check]:
        """Tokens exact (every request logs its timings), requests against the client's 200s."""
        def ok(t: str) -> float:
            return total(t, "llm_requests_total", lambda lab: lab.get("outcome") == "ok")

        return [
            Check("prompt tokens", total(live, "llm_prompt_tokens_total"), total(oneshot, "llm_prompt_tokens_total"),
                  own["prompt"], "llama /metrics"),
            Check("generation tokens", total(live, "llm_generation_tokens_total"),
                  total(oneshot, "llm_generation_tokens_total"), own["generation"], "llama /metrics"),
            # Only -lv 4's trace lines carry the cached part of each prompt.
            Check("cached prompt tokens", total(live, "llm_cached_prompt_tokens_total"),
                  total(oneshot, "llm_cached_prompt_tokens_total"), own["cached"] if mode.flags else None,
                  "llama /metrics" if mode.flags else "info",
                  note="" if mode.flags else f"not at this level; llama /metrics {own['cached']:,.0f}"),
            Check("successful requests", ok(live), ok(oneshot), record.ok_inference, "client"),
            Check("running requests after SIGTERM", total(live, "llm_requests_running"),
                  total(oneshot, "llm_requests_running"), 0, "harness"),
            *common_checks(self, live, oneshot, starts, ready_before,
                           client=client_errors(record, unknown_routes=False),
                           client_note="an unknown route is not logged"),
        ]


def client_errors(record: Record, *, unknown_routes: bool = True) -> int:
    """The 4xx answers the client got; those on routes the server does not have only if
    ``unknown_routes`` (a server that logs no access line says nothing of them)."""
    return sum(n for (_, path, code), n in record.codes.items()
               if 400 <= code < 500 and (unknown_routes or known_route(path) == path))


# ------------------------------------------------------------------------------------------- whisper

def wav(seconds: float, hz: float) -> bytes:
    """A 16 kHz mono WAV of a tone lasting ``seconds``."""
    import array
    import io
    import math
    import wave

    rate = 16000
    n = round(seconds * rate)
    pcm = array.array("h", (int(8000 * math.sin(2 * math.pi * hz * i / rate)) for i in range(n)))
    buf = io.BytesIO()
    with wave.open(buf, "wb") as w:
        w.setnchannels(1)
        w.setsampwidth(2)
        w.setframerate(rate)
        w.writeframes(pcm.tobytes())
    return buf.getvalue()


def multipart(fields: dict[str, str], files: dict[str, tuple[str, bytes]]) -> tuple[bytes, str]:
    """A multipart/form-data body and its content type."""
    boundary = "logmetrics-conformance-boundary"
    parts: list[bytes] = []
    for name, value in fields.items():
        parts.append(f'--{boundary}\r\nContent-Disposition: form-data; name="{name}"\r\n\r\n{value}\r\n'.encode())
    for name, (filename, data) in files.items():
        parts.append(f'--{boundary}\r\nContent-Disposition: form-data; name="{name}"; filename="{filename}"\r\n'
                     f"Content-Type: application/octet-stream\r\n\r\n".encode() + data + b"\r\n")
    parts.append(f"--{boundary}--\r\n".encode())
    return b"".join(parts), f"multipart/form-data; boundary={boundary}"


class Whisper(Backend):
    """faster-whisper-server on a random CTranslate2 Whisper; the ``faster_whisper`` logger at INFO."""

    def __init__(self, home: Path) -> None:
        super().__init__("whisper", "whisper", "tiny-whisper", (Mode("default"),), home=home, ready_deadline=120.0,
                         metrics_path=None)
        self.model = home / "models" / "tiny-whisper"

    def prepare(self) -> None:
        """Write and convert the random Whisper once."""
        if not (self.model / "model.bin").exists():
            self.run_py("whisper", "whisper_ct2.py", str(self.home / "models" / "hf-whisper"), str(self.model))

    def command(self, mode: Mode, port: int) -> list[str]:
        """The package's own server, with the transcription library's INFO lines let through."""
        boot = ("import logging, sys; logging.basicConfig(format='%(levelname)s:%(name)s:%(message)s'); "
                "logging.getLogger('faster_whisper').setLevel(logging.INFO); "
                "from faster_whisper_server.cli import main; sys.argv[0] = 'faster-whisper-server'; main()")
        return [str(self.home / "whisper" / "bin" / "python"), "-c", boot, str(self.model), "--host", "127.0.0.1",
                "--port", str(port), "--log-level", "info"]

    def traffic(self, base: str, record: Record, phase: str, rng: random.Random) -> None:
        """Transcriptions and translations of tones of known length, two at a time; a request with no
        file, a bad response format, bytes that are not audio and an unknown route in the main phase."""
        path_of = {0: "/v1/audio/transcriptions", 1: "/v1/audio/translations"}

        def audio(i: int) -> Callable[[], None]:
            seconds = rng.randint(500, 6000) / 1000

            def job() -> None:
                body, ctype = multipart({"response_format": "json", "temperature": "0"},
                                        {"file": ("a.wav", wav(seconds, 440.0))})
                code, data = client.call(base, "POST", path_of[i % 2], body, record, ctype)
                if code != 200:
                    raise RuntimeError(f"audio: HTTP {code}: {data[:200]!r}")
                with record.lock:
                    record.audio_seconds += seconds
                    record.ok_inference += 1
            return job

        def refused(fields: dict[str, str], files: dict[str, tuple[str, bytes]], lo: int,
                    hi: int) -> Callable[[], None]:
            def job() -> None:
                body, ctype = multipart(fields, files)
                code, _ = client.call(base, "POST", "/v1/audio/transcriptions", body, record, ctype)
                if not lo <= code < hi:
                    raise RuntimeError(f"expected {lo}-{hi - 1}, got HTTP {code}")
            return job

        jobs = [audio(i) for i in range(16 if phase == "main" else 4)]
        if phase == "main":
            jobs += [refused({}, {}, 400, 500), refused({"response_format": "srt", "temperature": "0"},
                                                        {"file": ("a.wav", wav(1, 300))},
                                                        400, 500),
                     refused({}, {"file": ("a.wav", b"not audio at all" * 64)}, 500, 600)] * 2
            jobs.append(lambda: None if client.get(base, "/v1/no-such-route", record)[0] == 404 else _fail(404))
        rng.shuffle(jobs)
        client.run_all(jobs, 2)

    def checks(self, live: str, oneshot: str, own: dict[str, float], record: Record, mode: Mode,
               starts: int, ready_before: float) -> list[Check]:
        """Audio seconds within 0.01 %, every access line under its code, decode errors as errors."""
        failed = sum(n for (_, _, code), n in record.codes.items() if code >= 500)

        def ok(t: str) -> float:
            return total(t, "llm_requests_total", lambda lab: lab.get("outcome") == "ok")

        rows = [
            Check("audio seconds", total(live, "llm_audio_seconds_total"), total(oneshot, "llm_audio_seconds_total"),
                  round(record.audio_seconds, 3), "client", 0.0001),
            Check("successful requests", ok(live), ok(oneshot), record.ok_inference, "client"),
            Check("backend errors (audio that does not decode: 500)", total(live, "backend_errors_total"),
                  total(oneshot, "backend_errors_total"), failed, "client"),
        ]
        rows += http_checks(live, oneshot, record, known_route)
        return rows + common_checks(self, live, oneshot, starts, ready_before, client=client_errors(record),
                                    clean=False)


def _fail(code: int) -> None:
    raise RuntimeError(f"expected HTTP {code}")


# ---------------------------------------------------------------------------------------- embeddings

class Embeddings(Backend):
    """infinity's embeddings server on a random sentence-transformers BERT."""

    def __init__(self, home: Path) -> None:
        super().__init__("embeddings", "embeddings", "tiny-bert", (Mode("default"),), home=home,
                         ready_deadline=180.0)
        self.model = home / "models" / "tiny-bert"

    def prepare(self) -> None:
        """Write the random BERT once, with the server's own sentence-transformers."""
        if not (self.model / "modules.json").exists():
            self.run_py("embeddings", "bert_st.py", str(self.model))

    def command(self, mode: Mode, port: int) -> list[str]:
        """``infinity_emb v2`` on the CPU."""
        return [str(self.home / "embeddings" / "bin" / "infinity_emb"), "v2", "--model-id", str(self.model),
                "--served-model-name", self.served, "--engine", "torch", "--device", "cpu", "--host", "127.0.0.1",
                "--port", str(port), "--log-level", "info"]

    def traffic(self, base: str, record: Record, phase: str, rng: random.Random) -> None:
        """Embeddings of one and of several inputs, four at a time; client errors in the main phase
        (malformed JSON, no input, an unknown route: a server of one model answers any model name)."""
        def embed(n: int) -> Callable[[], None]:
            def job() -> None:
                code, data = client.post_json(base, "/embeddings", {
                    "model": self.served, "input": [client.prompt(rng, 8) for _ in range(n)]}, record)
                if code != 200:
                    raise RuntimeError(f"embeddings: HTTP {code}: {data[:200]!r}")
                with record.lock:
                    record.ok_inference += 1
            return job

        def refused(send: Callable[[], tuple[int, bytes]]) -> Callable[[], None]:
            def job() -> None:
                code, data = send()
                if not 400 <= code < 500:
                    raise RuntimeError(f"expected a 4xx, got HTTP {code}: {data[:200]!r}")
            return job

        jobs = [embed(1 + i % 4) for i in range(24 if phase == "main" else 6)]
        if phase == "main":
            jobs += [refused(lambda: client.call(base, "POST", "/embeddings", b'{"input": [', record)),
                     refused(lambda: client.post_json(base, "/embeddings", {"model": self.served}, record)),
                     refused(lambda: client.get(base, "/v1/no-such-route", record))] * 2
        rng.shuffle(jobs)
        client.run_all(jobs, 4)

    def checks(self, live: str, oneshot: str, own: dict[str, float], record: Record, mode: Mode,
               starts: int, ready_before: float) -> list[Check]:
        """HTTP requests and successful requests exact; no embeddings count in this server's log."""
        def ok(t: str) -> float:
            return total(t, "llm_requests_total", lambda lab: lab.get("outcome") == "ok")

        rows = [Check("successful requests", ok(live), ok(oneshot), record.ok_inference, "client")]
        rows += http_checks(live, oneshot, record, known_route)
        rows.append(Check("embeddings created", total(live, "llm_embeddings_total"),
                          total(oneshot, "llm_embeddings_total"), None, "info", note="not in this server's log"))
        return rows + common_checks(self, live, oneshot, starts, ready_before, client=client_errors(record))


def backends(home: Path) -> dict[str, Backend]:
    """Every backend the harness knows, by name."""
    found: list[Backend] = [VLLM(home), Llama(home), Whisper(home), Embeddings(home)]
    return {b.name: b for b in found}


if __name__ == "__main__":
    sys.exit("run scripts/conformance/harness.py")
