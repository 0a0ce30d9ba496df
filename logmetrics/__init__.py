"""logmetrics: turn the logs of an LLM serving stack into Prometheus metrics."""

__version__ = "0.1.0"
