"""deploy/: the Kubernetes manifests, the Dockerfile, the systemd unit and the Prometheus and
Alertmanager configuration are valid, hardened, and in step with rules/."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml

from logmetrics import config
from tests.test_prometheus import binary

ROOT = Path(__file__).resolve().parent.parent
DEPLOY = ROOT / "deploy"
KUBE = DEPLOY / "kubernetes"
BIN = Path(sys.executable).parent  # the test extras' command-line tools live beside the interpreter


def tool(name: str) -> str:
    """A command-line tool of the test extras (hadolint, kubernetes-validate)."""
    found = shutil.which(name, path=str(BIN)) or shutil.which(name)
    assert found is not None, f"{name} is missing: pip install -e '.[test]'"
    return found


def manifests() -> dict[str, dict[str, Any]]:
    """Every Kubernetes object under deploy/kubernetes, by kind."""
    out: dict[str, dict[str, Any]] = {}
    for path in sorted(KUBE.glob("*.yaml")):
        for doc in yaml.safe_load_all(path.read_text()):
            out[doc["kind"]] = doc
    return out


def test_kubernetes_validate_passes_on_the_manifests() -> None:
    """kubernetes-validate --strict accepts the manifests (CRDs it has no schema for are only warned)."""
    out = subprocess.run([tool("kubernetes-validate"), "--strict", *map(str, sorted(KUBE.glob("*.yaml")))],
                         capture_output=True, text=True)
    assert out.returncode == 0, out.stdout + out.stderr
    assert "passed for resource daemonset/logmetrics" in out.stdout + out.stderr


def test_hadolint_passes_on_the_dockerfile() -> None:
    """hadolint finds nothing in deploy/Dockerfile."""
    out = subprocess.run([tool("hadolint"), str(DEPLOY / "Dockerfile")], capture_output=True, text=True)
    assert out.returncode == 0 and out.stdout == "", out.stdout + out.stderr


def test_the_daemonset_is_hardened_and_reads_the_pods_log_read_only() -> None:
    """Non-root, read-only root filesystem, no capabilities, probes on /healthz, requests and limits,
    /var/log/pods mounted read-only and the state file on the node."""
    ds = manifests()["DaemonSet"]
    pod = ds["spec"]["template"]["spec"]
    (c,) = pod["containers"]
    assert pod["securityContext"]["runAsNonRoot"] is True and pod["securityContext"]["runAsUser"] != 0
    assert c["securityContext"] == {"allowPrivilegeEscalation": False, "readOnlyRootFilesystem": True,
                                    "capabilities": {"drop": ["ALL"]}}
    assert c["readinessProbe"]["httpGet"]["path"] == c["livenessProbe"]["httpGet"]["path"] == "/healthz"
    assert set(c["resources"]) == {"requests", "limits"}
    mounts = {m["mountPath"]: m for m in c["volumeMounts"]}
    assert mounts["/var/log/pods"]["readOnly"] is True
    assert c["args"] == ["watch", "--config=/etc/logmetrics/logmetrics.toml"]
    assert mounts["/etc/logmetrics"]["readOnly"] is True and "subPath" not in mounts["/etc/logmetrics"]
    volume = next(v for v in pod["volumes"] if v["name"] == mounts["/etc/logmetrics"]["name"])
    configmap = manifests()["ConfigMap"]
    assert volume["configMap"]["name"] == configmap["metadata"]["name"]
    conf = config.parse(configmap["data"]["logmetrics.toml"], "logmetrics.toml", ["vllm"])
    assert conf.state_file == "/var/lib/logmetrics/state.db" and [i.path for i in conf.inputs] == ["/var/log/pods"]
    port = next(p for p in c["ports"] if p["name"] == "metrics")
    assert conf.listen == f":{port['containerPort']}"


def test_the_podmonitor_selects_the_daemonset_pods_by_their_port() -> None:
    """The PodMonitor's selector matches the DaemonSet's pod labels and names its metrics port."""
    kinds = manifests()
    pod = kinds["DaemonSet"]["spec"]["template"]
    monitor = kinds["PodMonitor"]["spec"]
    assert monitor["selector"]["matchLabels"].items() <= pod["metadata"]["labels"].items()
    ports = {p["name"] for c in pod["spec"]["containers"] for p in c["ports"]}
    assert {e["port"] for e in monitor["podMetricsEndpoints"]} <= ports


def test_the_prometheusrule_is_generated_from_rules() -> None:
    """deploy/kubernetes/prometheusrule.yaml holds exactly the groups of rules/ (regenerate if not)."""
    out = subprocess.run([sys.executable, str(ROOT / "scripts" / "prometheusrule.py"), "--check"],
                         capture_output=True, text=True)
    assert out.returncode == 0, out.stderr
    groups = [g for p in sorted((ROOT / "rules").glob("*.yml")) for g in yaml.safe_load(p.read_text())["groups"]]
    assert manifests()["PrometheusRule"]["spec"]["groups"] == groups


def test_promtool_accepts_the_prometheus_configuration() -> None:
    """promtool check config accepts deploy/prometheus.yml with the rules it loads."""
    out = subprocess.run([binary("promtool"), "check", "config", str(DEPLOY / "prometheus.yml")],
                         capture_output=True, text=True)
    assert out.returncode == 0, out.stdout + out.stderr
    assert "60 rules found" in out.stdout + out.stderr or "rules found" in out.stdout + out.stderr


def test_the_systemd_unit_verifies_and_is_sandboxed(tmp_path: Path) -> None:
    """systemd-analyze verify accepts the unit (with an existing ExecStart), it sandboxes the service, and
    systemctl reload sends SIGHUP (the --config file is read again)."""
    text = (DEPLOY / "logmetrics.service").read_text()
    for directive in ("ExecReload=/bin/kill -HUP $MAINPID",
                      "DynamicUser=yes", "NoNewPrivileges=yes", "ProtectSystem=strict", "CapabilityBoundingSet=\n",
                      "StateDirectory=logmetrics", "RestrictAddressFamilies=AF_INET AF_INET6 AF_UNIX"):
        assert directive in text, directive
    analyze = shutil.which("systemd-analyze")
    if analyze is None:
        pytest.skip("systemd-analyze is not installed")
    unit = tmp_path / "logmetrics.service"
    unit.write_text(text.replace("/usr/local/bin/logmetrics", tool("logmetrics")))
    out = subprocess.run([analyze, "verify", str(unit)], capture_output=True, text=True)
    assert out.returncode == 0 and "logmetrics.service" not in out.stdout + out.stderr, out.stdout + out.stderr


def test_alertmanager_configuration_routes_to_a_receiver() -> None:
    """The shipped Alertmanager configuration has a route to a defined receiver (amtool checks it where installed)."""
    conf = yaml.safe_load((DEPLOY / "alertmanager.yml").read_text())
    assert conf["route"]["receiver"] in {r["name"] for r in conf["receivers"]}
    amtool = shutil.which("amtool")
    if amtool is not None:
        out = subprocess.run([amtool, "check-config", str(DEPLOY / "alertmanager.yml")], capture_output=True, text=True)
        assert out.returncode == 0, out.stdout + out.stderr
