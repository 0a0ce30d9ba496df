"""The vLLM parser's zero series: only those the log seen so far can move.

Always (once per stream): ``backend_restarts_total`` and ``backend_errors_total`` for every error
type (any version can log them). Per model, once the log shows it:

- token counters: a stats line, or a start-up whose args leave stats logging on;
- ``llm_preemptions_total``: a V0 engine (its stats lines, init line or preemption warnings warn
  per preemption) or a V1 stats line with the ``Preemptions:`` field (0.13+);
- ``llm_requests_total{outcome="ok"}``: V0 AsyncLLMEngine's request lines (``Added``/``Finished
  request`` from ``async_llm_engine.py``, 0.2 - 0.10 non-MQ with request logging), a ``Generated
  response`` line or a logged response body: without them V1 logs no finished request, so it never
  shows ``ok`` 0 next to its aborts;
- ``outcome="aborted"``: those lines, or V1's ``Added request`` (request logging is on);
- ``outcome="error"``: V1's ``Added request`` (only V1 logs ``Request ... failed``).
"""

from __future__ import annotations

from collections.abc import Iterable

from logmetrics.plugins import ZeroSeries

from .common import Counted, remember
from .errors import restarts_and_errors
from .vllm_patterns import ERROR_TYPES

#: What request lines show the log can produce (see the module docstring).
V0_REQUESTS, V1_REQUESTS = ("ok", "aborted", "preempt"), ("aborted", "error")
#: Zero-started series by what the log must show before they can move.
ZERO_SERIES: dict[str, tuple[tuple[str, str | None], ...]] = {
    "tokens": (("llm_prompt_tokens_total", None), ("llm_generation_tokens_total", None)),
    "preempt": (("llm_preemptions_total", None),),
    "ok": (("llm_requests_total", "ok"),),
    "aborted": (("llm_requests_total", "aborted"),),
    "error": (("llm_requests_total", "error"),),
}


class Capabilities:
    """What the log has shown it can move (keys of ``ZERO_SERIES``), and for which models."""

    def __init__(self) -> None:
        self.caps: set[str] = set()
        self.counted = Counted()  # the models the log named or counted for
        self.new = False  # a capability was learned since ``moves`` was last called
        self._lists: dict[str, list[ZeroSeries]] = {}  # ``zero_series`` per model, until a capability comes

    def moves(self, model: str) -> bool:
        """The log names ``model``, or counts for it: its series can move. Whether that, or a
        capability learned since the last call, is news."""
        news, self.new = self.new, False
        return self.counted.add(model) or news

    def has(self, caps: Iterable[str]) -> bool:
        """Whether the log has shown all of ``caps``."""
        return self.caps.issuperset(caps)

    def can(self, *caps: str) -> None:
        """The log shows it can produce the series of ``caps``."""
        if not self.caps.issuperset(caps):
            self.caps.update(caps)
            self.new = True
            self._lists.clear()

    def zero_series(self, model: str) -> list[ZeroSeries]:
        """The series the log can move for ``model``: restarts and every error type (any version
        can log them), and those of what it has shown; none for a model it never named or counted for."""
        if model not in self.counted.models:
            return []
        zeros = self._lists.get(model)
        if zeros is not None:  # asked after every batch: the same list while nothing new was learned
            return zeros
        zeros = restarts_and_errors(model, ERROR_TYPES)
        zeros += [(name, (model,) if outcome is None else (model, outcome))
                  for cap in sorted(self.caps) for name, outcome in ZERO_SERIES[cap]]
        return remember(self._lists, model, zeros, 64)
