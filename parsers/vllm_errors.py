"""vLLM's error phrases: its ``Phrases`` table (on ``COMMON_CAUSES``) and the error types of a crash."""

from __future__ import annotations

from .errors import COMMON_CAUSES, Phrases

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
