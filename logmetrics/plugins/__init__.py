"""Parser plugins: the contract (``contract``), the finder that loads and validates them
(``finder``), which parser a stream gets (``routing``) and ``logmetrics check`` (``checker``).

A plugin's names are importable from here: ``from logmetrics.plugins import Parser``.
"""

from logmetrics.plugins.contract import (
    PLUGIN_ERRORS,
    BatchResult,
    Parser,
    ZeroKey,
    ZeroSeries,
    has_fast_path,
    has_frequent,
    has_own_batch,
    record_rule,
    start_zeros,
)
from logmetrics.plugins.finder import ParserEntry, PluginError, discover, load_spec, validate

__all__ = [
    "PLUGIN_ERRORS",
    "BatchResult",
    "Parser",
    "ParserEntry",
    "PluginError",
    "ZeroKey",
    "ZeroSeries",
    "discover",
    "has_fast_path",
    "has_frequent",
    "has_own_batch",
    "load_spec",
    "record_rule",
    "start_zeros",
    "validate",
]
