"""deploy/: the Kubernetes manifests, the Dockerfile, the systemd unit and the Prometheus and
Alertmanager configuration are valid, hardened, and in step with rules/."""

from __future__ import annotations

import grp
import os
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

import pytest
import yaml

from logmetrics.app import config
from tests.helpers import Server, total
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


def _setpriv(uid: int, gid: int, caps: Sequence[str], groups: Sequence[int] = ()) -> list[str]:
    """A command prefix that runs as ``uid``:``gid`` (and only ``groups`` besides) with only ``caps``.

    The process as the service's uid also gets ``dac_read_search``, to reach this test's interpreter
    under a home directory it could not search otherwise (the image has its own in /usr/local):
    that capability lets it read and search, never write, so every write is checked as on the node."""
    setpriv = shutil.which("setpriv")
    if setpriv is None or os.geteuid() != 0:
        pytest.skip("needs root and setpriv (util-linux) to take another uid with chosen capabilities")
    if uid != 0:
        caps = [*caps, "dac_read_search"]
    wanted = ",".join(["-all", *(f"+{c.lower()}" for c in caps)])
    return [setpriv, f"--reuid={uid}", f"--regid={gid}",
            f"--groups={','.join(map(str, groups))}" if groups else "--clear-groups",
            f"--inh-caps={wanted}", f"--ambient-caps={wanted}" if uid != 0 else "--ambient-caps=-all",
            f"--bounding-set={wanted}"]


def _serve_once(wrapper: list[str], state_file: Path, logs: Path, env: dict[str, str] | None = None) -> int:
    """Start a serving watch under ``wrapper`` with ``state_file``, wait until it counted the log's
    line, stop it with SIGTERM; its exit code (an AssertionError if it did not start)."""
    server = Server("--from-beginning", "--state-file", str(state_file), str(logs), wrapper=wrapper, env=env)
    try:
        server.wait_for(lambda s: total(s, "http_requests_total") == 1)
    finally:
        rc = server.stop()
    return rc


@pytest.fixture
def open_tmp() -> Iterator[Path]:
    """A fresh directory others may search (pytest's own is its owner's alone), removed afterwards."""
    path = Path(tempfile.mkdtemp(prefix="logmetrics-node-"))
    path.chmod(0o755)
    try:
        yield path
    finally:
        shutil.rmtree(path)


def test_the_daemonset_starts_on_a_fresh_node(open_tmp: Path) -> None:
    """On a fresh node the kubelet creates the state hostPath root:root 0755: logmetrics as the
    pod's uid and gid cannot start on it; after the init container's command, run as it is
    declared (uid 0, only its capabilities), it starts and saves its state, and a second start
    (the directory now its own) works too."""
    pod = manifests()["DaemonSet"]["spec"]["template"]["spec"]
    (main,) = pod["containers"]
    (init,) = pod["initContainers"]
    uid, gid = pod["securityContext"]["runAsUser"], pod["securityContext"]["runAsGroup"]
    mount = next(m["mountPath"] for m in main["volumeMounts"] if m["name"] == "state")
    assert any(m["name"] == "state" and m["mountPath"] == mount for m in init["volumeMounts"])
    assert main["securityContext"]["capabilities"] == {"drop": ["ALL"]}
    init_ctx = init["securityContext"]
    assert init_ctx["allowPrivilegeEscalation"] is False and init_ctx["readOnlyRootFilesystem"] is True
    assert init_ctx["capabilities"]["drop"] == ["ALL"]

    state = open_tmp / "node" / mount.strip("/")
    state.mkdir(parents=True)
    os.chown(state, 0, 0)
    state.chmod(0o755)  # as the kubelet's DirectoryOrCreate leaves it
    for part in state.parents:
        if part == open_tmp:
            break
        part.chmod(0o755)
    logs = open_tmp / "logs"
    logs.mkdir(mode=0o755)
    (logs / "api.log").write_text('INFO:     10.0.0.1:5 - "GET /health HTTP/1.1" 200 OK\n')
    (logs / "api.log").chmod(0o640)  # as the kubelet writes the pods' logs: root:root 0640
    as_pod = _setpriv(uid, gid, [])

    with pytest.raises(AssertionError, match="not writable"):
        _serve_once(as_pod, state / "state.db", logs)

    command = [arg.replace(mount, str(state)) for arg in init["command"]]
    command[0] = sys.executable if command[0] in ("python", "python3") else command[0]
    as_init = _setpriv(init_ctx["runAsUser"], init_ctx.get("runAsGroup", 0), init_ctx["capabilities"]["add"])
    for start in range(2):
        done = subprocess.run([*as_init, *command], capture_output=True, text=True, timeout=60)
        assert done.returncode == 0, f"start {start}: {done.stderr}"
        assert (state.stat().st_uid, state.stat().st_gid, state.stat().st_mode & 0o777) == (uid, gid, 0o700)
        assert _serve_once(as_pod, state / "state.db", logs) == 0
        assert (state / "state.db").stat().st_uid == uid


def test_the_systemd_unit_starts_in_its_state_directory(open_tmp: Path) -> None:
    """systemd makes StateDirectory= the dynamic user's own (StateDirectoryMode) and sets
    STATE_DIRECTORY: the unit's ExecStart, run as such a user with its supplementary groups and
    UMask, starts and saves its state there, readable by no one else."""
    text = (DEPLOY / "logmetrics.service").read_text()
    directives = dict(line.split("=", 1) for line in text.splitlines() if "=" in line and not line.startswith("#"))
    exec_start = directives["ExecStart"].split()
    assert exec_start[:2] == ["/usr/local/bin/logmetrics", "watch"]
    uid = 61184  # the first uid systemd gives a DynamicUser
    state = open_tmp / "lib" / directives["StateDirectory"]
    state.mkdir(parents=True)
    (open_tmp / "lib").chmod(0o755)
    os.chown(state, uid, uid)
    state.chmod(int(directives["StateDirectoryMode"], 8))
    logs = open_tmp / "llm"
    logs.mkdir(mode=0o755)
    (logs / "api.log").write_text('INFO:     10.0.0.1:5 - "GET /health HTTP/1.1" 200 OK\n')
    (logs / "api.log").chmod(0o640)
    adm = grp.getgrnam("adm").gr_gid
    os.chown(logs / "api.log", 0, adm)  # as Debian's logs are: the adm group reads them
    args = exec_start[2:]
    at = args.index("--listen")
    del args[at:at + 2]  # the test's server listens on a free port of its own
    args = [a.replace("${STATE_DIRECTORY}", str(state)).replace("/var/log/llm", str(logs)) for a in args]
    umask = ["sh", "-c", f'umask {directives["UMask"]} && exec "$@"', "sh"]
    env = {**os.environ, "STATE_DIRECTORY": str(state)}
    server = Server("--from-beginning", *args, wrapper=[*_setpriv(uid, uid, [], groups=[adm]), *umask], env=env)
    try:
        server.wait_for(lambda s: total(s, "http_requests_total") == 1)
    finally:
        assert server.stop() == 0
    saved = (state / "state.db").stat()
    assert saved.st_uid == uid and saved.st_mode & 0o077 == 0
