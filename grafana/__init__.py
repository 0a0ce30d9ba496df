"""Grafana dashboards for logmetrics, generated from code (``python -m grafana.generate``).

A development tool: it needs grafana-foundation-sdk (the ``test`` extra), which logmetrics itself
never imports.
"""
