"""End to end: logmetrics following a live stack's logs, a real Prometheus loading rules/ and a real
Alertmanager routing to a webhook served here. Needs Debian's ``prometheus`` and
``prometheus-alertmanager`` (``scripts/test`` installs them); skipped without them, failed in CI."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from grafana.generate import PanelQuery, dashboards, fill, panel_queries, variable_defaults
from tests.e2e_stack import BURST_MODEL, STACK, Alertmanager, Webhook, Writer, fast_rules, stand_in, wait_until
from tests.test_prometheus import Logmetrics, Prometheus, binary, stop

JOB = "logmetrics"
#: The command line of a process standing in for a backend, counted with --process.
MARKER = "logmetrics-e2e-backend-stand-in"
RECORDED_TIMEOUT = 45.0
PANELS_TIMEOUT = 30.0
ALERT_TIMEOUT = 30.0


@pytest.fixture
def stack(tmp_path: Path) -> Iterator[tuple[Prometheus, Webhook, Writer, list[str]]]:
    """The writer, logmetrics, Alertmanager with the webhook and Prometheus, all running; the
    recorded names of the rules Prometheus loaded."""
    prometheus_exe = binary("prometheus")
    alertmanager_exe = binary("prometheus-alertmanager", package="prometheus-alertmanager")
    logs = tmp_path / "logs"
    logs.mkdir()
    writer = Writer(logs)
    webhook = Webhook()
    backend = stand_in(MARKER)
    procs = []
    try:
        lm = Logmetrics(str(logs), "--from-beginning", "--poll-interval", "0.2", "--process", f"vllm={MARKER}")
        procs.append(lm.proc)
        writer.start()
        am = Alertmanager(alertmanager_exe, tmp_path / "am", webhook.url)
        procs.append(am.proc)
        am.wait_ready()
        rules, recorded = fast_rules(tmp_path / "rules.yml")
        extra = (f"rule_files: ['{rules}']\n"
                 f"alerting:\n  alertmanagers:\n    - static_configs:\n        - targets: ['{am.url[7:]}']\n")
        prom = Prometheus(prometheus_exe, tmp_path / "prom", f"127.0.0.1:{lm.port}", JOB, extra)
        procs.append(prom.proc)
        prom.wait_ready()
        yield prom, webhook, writer, recorded
    finally:
        writer.done.set()
        for proc in reversed(procs):
            stop(proc)
        stop(backend)
        webhook.close()


def empty_recorded(prom: Prometheus, recorded: list[str]) -> list[str]:
    """The recorded names with no series."""
    return [name for name in recorded if not prom.query(name)]


def empty_queries(prom: Prometheus, queries: list[PanelQuery]) -> list[PanelQuery]:
    """The panel queries that return no series, their variables filled as Grafana's All does."""
    values = {m["uid"]: variable_defaults(m) for m in dashboards().values()}
    return [q for q in queries if not prom.query(fill(q.expr, values[q.dashboard]))]


def describe(queries: list[PanelQuery]) -> str:
    """One line per query, for a failure message."""
    return "\n".join(f"  {q.dashboard} / {q.panel}: {q.expr}" for q in queries)


@pytest.mark.integration
def test_rules_panels_and_an_alert_against_real_prometheus_and_alertmanager(
        stack: tuple[Prometheus, Webhook, Writer, list[str]], capsys: pytest.CaptureFixture[str]) -> None:
    """Every recording rule and dashboard query has data, and an error burst's alert reaches the webhook.

    The samples of every backend are written again every second with fresh times and ids. Prometheus
    loads a copy of rules/logmetrics.rules.yml in which only the timing differs: the groups run at the
    1 s global interval and every alert's ``for:`` is 1 s (the shipped 5-10 minutes would not fit in
    a test). Alertmanager runs deploy/alertmanager.yml with the webhook pointed here and 1 s waits.
    """
    prom, webhook, writer, recorded = stack
    prom.wait_value(f'up{{job="{JOB}"}}', 1)

    missing = wait_until(lambda: empty_recorded(prom, recorded), RECORDED_TIMEOUT)
    assert not missing, f"recording rules with no series after {RECORDED_TIMEOUT}s: {missing}; " \
                        f"targets: {prom.targets()}"

    queries = panel_queries()
    empty = wait_until(lambda: empty_queries(prom, queries), PANELS_TIMEOUT)
    assert not empty, f"panel queries with no data after {PANELS_TIMEOUT}s:\n{describe(empty)}"

    # The error-ratio alert of the burst's model is not firing, nor pending, before the burst.
    alert = {"alertname": "LLMHighErrorRatio", "backend": "vllm", "model": BURST_MODEL}
    selector = ", ".join(f'{k}="{v}"' for k, v in alert.items())
    assert prom.query(f"ALERTS{{{selector}}}") == [], "the alert is on before any error was logged"
    writer.burst(200)
    got = webhook.wait_for(alert, ALERT_TIMEOUT)
    assert got["labels"]["severity"] == "critical", got
    assert "Runbook" in got["annotations"]["description"], got

    with capsys.disabled():  # the figures, shown in the test command's own output
        print(f"\nend to end: {len(recorded)} recording rules with series; {len(queries)} of {len(queries)} "
              f"panel queries with data; {writer.rounds} rounds of {len(STACK)} logs; alert {alert['alertname']} "
              f"{{backend={alert['backend']}, model={alert['model']}}} arrived at the webhook through Alertmanager")
