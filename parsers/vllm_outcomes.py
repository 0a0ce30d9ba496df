"""The vLLM parser's finished requests and client errors from access lines, and generated tokens.

Finished requests and client errors come from the uvicorn access lines where they are logged (a
2xx POST on an inference route; a 4xx of any method on any route, by the shared code table, a 404
on an inference route being ``model_not_found``): the access log covers every request, the
per-request lines only some. Which source counts ``outcome="ok"`` is decided once per stream
(``OkSource``).
"""

from __future__ import annotations

from collections import Counter

from logmetrics.events import Event

from . import vllm_patterns as P
from .common import access_answer, remember
from .vllm_requests import Requests

#: Routes of vLLM's OpenAI-compatible server (0.2 - 0.33), known to be served before its
#: ``Route: ..., Methods: ...`` start-up lines are seen.
ROUTES = (
    "/health", "/ping", "/metrics", "/version", "/load", "/v1/models", "/v1/chat/completions", "/v1/completions",
    "/v1/embeddings", "/v1/responses", "/v1/responses/{id}", "/v1/responses/{id}/cancel", "/v1/audio/transcriptions",
    "/v1/audio/translations", "/tokenize", "/detokenize", "/pooling", "/classify", "/score", "/v1/score",
    "/rerank", "/v1/rerank", "/v2/rerank", "/invocations", "/v1/load_lora_adapter", "/v1/unload_lora_adapter",
    "/server_info", "/reset_prefix_cache", "/sleep", "/wake_up", "/is_sleeping", "/collective_rpc",
    "/scale_elastic_ep", "/is_scaling_elastic_ep", "/docs", "/redoc", "/openapi.json",
)
#: Routes that run the engine: a 2xx access line on one is a finished request (``outcome="ok"``).
INFERENCE_ROUTES = frozenset({
    "/v1/chat/completions", "/v1/completions", "/v1/embeddings", "/v1/responses", "/v1/audio/transcriptions",
    "/v1/audio/translations", "/pooling", "/classify", "/score", "/v1/score", "/rerank", "/v1/rerank",
    "/v2/rerank", "/invocations", "/v1/chat/completions/batch",
})


def access_outcomes(events: list[Event]) -> tuple[int, Counter[str]]:
    """Finished requests and client errors by type from the access lines' events in ``events``.

    A 2xx on an inference route is a finished request: the access log covers every request, so it
    is the source of ``outcome="ok"`` once it has counted one (``OkSource``). A 4xx is the
    client's fault: ``llm_client_errors_total`` by type, never a backend error.
    """
    ok = 0
    client: Counter[str] = Counter()
    for e in events:
        if e.metric != "http_requests_total" or e.rule != "access" or isinstance(e.value, tuple):
            continue
        said = _said.get(e.labels)
        if said is None:
            said = _saying(e.labels)
        if said is True:
            ok += int(e.value)
        elif said:
            client[said] += int(e.value)
    return ok, client


#: What each (method, route, code) says (``_saying``): met again and again, told by a look-up (bounded).
_said: dict[tuple[str, ...], str | bool] = {}


def _saying(labels: tuple[str, ...]) -> str | bool:
    """What an access line's labels say: True for a finished request (a 2xx POST on an inference
    route; a 5xx is counted from the error record), the type of a client error (any method, any
    route: a GET of an unknown path too), else False."""
    method, route, code = labels
    answer = access_answer(code, route, route in INFERENCE_ROUTES, "model_not_found")
    said = (answer[1] if answer[0] else method == "POST" and answer[1] == "ok") if answer is not None else False
    return remember(_said, labels, said)


class OkSource:
    """What counts ``outcome="ok"`` in a stream: its access lines, or V0's ``Finished request`` lines."""

    def __init__(self, requests: Requests) -> None:
        self.requests = requests
        self.source: str | None = None  # "access" or "finished", once a line of either was seen

    def load(self, data: object) -> None:
        """Take back a saved ``source`` (anything else is ignored): with the access lines', they
        count ``ok`` from the start of every text read from now on, as after ``decide``."""
        if data in ("access", "finished"):
            self.source = str(data)
            if self.source == "access":
                self.requests.access_from = 0

    def decide(self, t: str, ok: int, finished: int) -> tuple[int, int]:
        """Decided once per stream by the first line seen of either (both cover every request).
        Returns the access lines' count (0 if they lose) and the finished lines'. From the first
        access line on, the other per-request lines count no ``ok`` (``Requests.access_from``)."""
        if self.source is None and (ok or finished):
            m = P.ACCESS_OK.search(t) if ok else None
            at = (m.start() if m else 0) if ok else len(t)
            m = P.FINISHED_AT.search(t) if finished else None
            done_at = m.start() if m else len(t)
            self.source = "access" if at <= done_at else "finished"
            if self.source == "access":
                self.requests.access_from = at
        return (ok, finished) if self.source == "access" else (0, finished)


class Generation:
    """Generated tokens: the larger of the estimate and the per-request count, both cumulative.

    vLLM logs the outputs of some requests only (``/v1/completions`` never, empty outputs not,
    streamed deltas only when a chunk carries text; response bodies only when not streamed), so a
    per-request count is a floor for the requests it covers, never the total: the series follows
    it only where it exceeds the estimate."""

    def __init__(self) -> None:
        self._sums: dict[str, list[float]] = {}  # per model: tokens estimated, counted per request

    def dump(self) -> dict[str, list[float]]:
        """The cumulative sums per model (JSON), for a restart of logmetrics."""
        return self._sums

    def load(self, data: object) -> None:
        """Take back what ``dump`` gave (anything else is ignored)."""
        if isinstance(data, dict):
            for model, sums in list(data.items())[:64]:
                if isinstance(model, str) and isinstance(sums, list) and len(sums) == 2 \
                        and all(isinstance(x, (int, float)) for x in sums):
                    self._sums[model] = [float(sums[0]), float(sums[1])]

    def merge(self, model: str, out: list[Event]) -> None:
        """The generation events in ``out`` replaced by one increment (rule of the larger source)."""
        est = exact = 0.0
        rule = ""
        keep: list[Event] = []
        for e in out:
            if e.metric != "llm_generation_tokens_total" or isinstance(e.value, tuple):
                keep.append(e)
            elif e.rule.startswith("stats"):
                est += e.value
                rule = e.rule
            else:
                exact += e.value
        if len(keep) == len(out):
            return
        sums = self._sums.get(model)
        if sums is None:
            sums = remember(self._sums, model, [0.0, 0.0], 64)
        before = max(sums)
        sums[0] += est
        sums[1] += exact
        keep.append(Event("llm_generation_tokens_total", (model,), max(sums) - before,
                          rule="request_log" if sums[1] > sums[0] else rule or "stats_v1"))
        out[:] = keep
