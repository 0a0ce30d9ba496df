"""Hugging Face text-embeddings-inference (TEI): its ``tracing`` lines, as text or JSON.

Text (``tracing_subscriber::fmt`` with file and line; ANSI colours when stdout is a terminal)::

    2025-08-09T19:36:02.798333Z  INFO openai_embed{total_time="1.2s" tokenization_time="11.2ms" \
queue_time="686.2µs" inference_time="1.19s"}: text_embeddings_router::http::server: \
router/src/http/server.rs:1290: Success

Spans come before the target, joined by ``:`` (``embed:embed_pooled_inner{compute_tokens=7 ...}``
in the gRPC server). JSON (``--json-output``) carries the same: ``level``, ``message``,
``target``, ``span`` (the innermost span's fields and ``name``) and ``spans`` (the chain).
Durations are Rust's ``Duration`` Debug text: ``1.5s``, ``12.3ms``, ``686.2µs``, ``100ns``.
"""

from __future__ import annotations

import math
import re
from typing import NamedTuple

import orjson

from logmetrics import lazyre

from .errors import COMMON_CAUSES, Phrases

#: ANSI colour codes (``\x1b[2m``), removed before anything else when a line holds one.
ANSI = lazyre.compile(r"\x1b\[[0-9;]*m")
LINE = lazyre.compile(
    r"(?P<ts>\d{4}-\d{2}-\d{2}T\S+)\s+(?P<level>TRACE|DEBUG|INFO|WARN|ERROR)\s+"
    r"(?:(?P<spans>\w+(?:\{[^}\n]*\})?(?::\w+(?:\{[^}\n]*\})?)*): )?"
    r"(?P<target>[A-Za-z_][\w]*(?:::\w+)*): (?:[^\s:]+:\d+: )?(?P<msg>[^\n]*)"
)
_SPAN = lazyre.compile(r"(\w+)(?:\{([^}\n]*)\})?")
_FIELD = lazyre.compile(r'(\w+)=(?:"([^"\n]*)"|([^\s"}]+))')
_DURATION = lazyre.compile(r"(\d+(?:[.,]\d+)?(?:[eE][+-]?\d+)?)(ns|µs|μs|us|ms|s|m|h)\Z")
#: Seconds per unit of a Rust ``Duration`` Debug text.
UNITS = {"ns": 1e-9, "µs": 1e-6, "μs": 1e-6, "us": 1e-6, "ms": 1e-3, "s": 1.0, "m": 60.0, "h": 3600.0}
#: Marks of a TEI text line or JSON record (their targets are the crates ``text_embeddings_*``).
MARK = "text_embeddings_"

#: The HTTP and gRPC handlers' spans: an error inside one of them failed a request.
REQUEST_SPANS = frozenset({
    "embed", "embed_all", "embed_sparse", "openai_embed", "rerank", "predict", "similarity", "tokenize",
    "decode", "vertex_compatibility", "embed_stream", "embed_all_stream", "embed_sparse_stream",
    "predict_pair", "predict_stream", "predict_pair_stream", "rerank_stream", "tokenize_stream",
    "decode_stream",
})

#: TEI's own error phrases (``core/src/lib.rs`` ``TextEmbeddingsError``, ``core/src/infer.rs``,
#: the routers' handlers, ``backends``): causes first, then where it happened.
PHRASES = Phrases(
    (
        ("overloaded", ("Model is overloaded", "no permits available")),
        ("oom", ("OUT_OF_MEMORY", "out of memory", "OutOfMemoryError")),
        ("validation", ("must have less than", "maximum allowed batch size", "cannot be empty",
                        "should be positive", "should be smaller than the maximum embedding dimension",
                        "is not available for SPLADE", "Model is not an embedding model",
                        "Model is not a classifier model", "Model is not a re-ranker model")),
        ("unhealthy", ("Backend is unhealthy",)),
        ("startup", ("Could not start", "Could not create backend", "Could not download model artifacts",
                     "Weights not found", "No backend found")),
        *COMMON_CAUSES,
    ),
    (
        ("validation", ("Input validation error",)),
        ("tokenizer", ("tokenizer error",)),
        ("backend", ("Backend error",)),
        ("panic", ("panicked at",)),
    ),
)


#: Error types that are the client's fault: TEI answers them 4xx (``Validation`` and ``Tokenizer``
#: 422, an empty input 400), so they count in ``llm_client_errors_total``, never as a backend error
#: or a failed request, which error-rate alerts read.
CLIENT_TYPES = {"validation": "invalid_request", "tokenizer": "invalid_request"}


class TeiLine(NamedTuple):
    """One TEI log event: level, message, span names (outermost first) and span fields."""

    level: str
    msg: str
    spans: tuple[str, ...]
    fields: dict[str, str]


def duration(text: str) -> float | None:
    """Seconds of a Rust ``Duration`` Debug text (``1.5s``, ``686.2µs``), ``None`` if not one or not finite."""
    m = _DURATION.match(text.strip())
    if m is None:
        return None
    value = float(m.group(1).replace(",", ".")) * UNITS[m.group(2)]
    return value if math.isfinite(value) and value >= 0 else None


def tei_line(text: str) -> TeiLine | None:
    """The TEI event on ``text``'s first line (text or JSON format), else ``None``."""
    if "\x1b" in text:
        text = ANSI.sub("", text)
    if text.startswith("{"):
        return _json_line(text.split("\n", 1)[0])
    m = LINE.match(text)
    if m is None:
        return None
    spans: list[str] = []
    fields: dict[str, str] = {}
    chain = m.group("spans")
    if chain:
        for s in _SPAN.finditer(chain):
            spans.append(s.group(1))
            if s.group(2):
                for f in _FIELD.finditer(s.group(2)):
                    fields[f.group(1)] = f.group(2) if f.group(2) is not None else f.group(3)
    return TeiLine(m.group("level"), m.group("msg"), tuple(spans), fields)


def _json_line(line: str) -> TeiLine | None:
    try:
        obj = orjson.loads(line)
    except orjson.JSONDecodeError:
        return None
    if not isinstance(obj, dict) or not str(obj.get("target", "")).startswith(MARK):
        return None
    chain = obj.get("spans")
    current = obj.get("span")
    found = [s for s in (chain if isinstance(chain, list) else [current]) if isinstance(s, dict)]
    if isinstance(current, dict) and isinstance(chain, list):
        found.append(current)  # the innermost span again, maybe with fields recorded since
    spans = tuple(dict.fromkeys(str(s.get("name", "")) for s in found))
    fields = {k: str(v) for s in found for k, v in s.items() if k != "name"}
    level, msg = obj.get("level"), obj.get("message", obj.get("fields", {}))
    if isinstance(msg, dict):  # not flattened: {"fields": {"message": ...}}
        msg = msg.get("message", "")
    return TeiLine(str(level or ""), str(msg or ""), spans, fields)


def model_from_args(msg: str) -> str | None:
    """The served model from TEI's start-up ``Args { model_id: "...", served_model_name: Some("...") ... }``."""
    served = re.search(r'served_model_name: Some\("([^"\n]+)"\)', msg)
    if served:
        return served.group(1)
    m = re.search(r'model_id: "([^"\n]+)"', msg)
    return m.group(1) if m else None
