"""Kubernetes node and Docker host layouts: source labels, routing by container name, each line once."""

from __future__ import annotations

import gzip
import json
from pathlib import Path

import pytest

from logmetrics.sources.discovery import discover
from logmetrics.sources.layouts import CONFIG_MAX_BYTES, Layout, Layouts, image_name, is_log
from tests.helpers import Samples, Server, append, total
from tests.test_engine import oneshot_metrics

ROOT = Path(__file__).resolve().parent.parent
UID = "0f1e2d3c-4b5a-6978-8796-a5b4c3d2e1f0"
VLLM = (ROOT / "samples/vllm/exact-tokens.log").read_text()
LLAMA = (ROOT / "samples/llamacpp/python-server.log").read_text()
TEI = (ROOT / "samples/embeddings/tei-1.x.log").read_text()
API = (ROOT / "samples/api/leapfrog-uvicorn.log").read_text()
FAMILY_SUFFIXES = ("_total", "_count", "_sum", "_bucket")  # counters and histograms: what must be exact


def hexid(c: str) -> str:
    """A container id: 64 hex digits."""
    return c * 64


def stamp(i: int) -> str:
    """The i-th line's time: one second apart, increasing."""
    return f"2025-01-02T{3 + i // 3600:02d}:{i // 60 % 60:02d}:{i % 60:02d}.{i:09d}Z"


def cri(text: str, start: int = 0) -> str:
    """``text`` as a container runtime writes it under /var/log/pods: one ``F`` entry per line."""
    return "".join(f"{stamp(start + i)} stdout F {line}\n" for i, line in enumerate(text.splitlines()))


def json_file(text: str, start: int = 0) -> str:
    """``text`` as Docker's json-file driver writes it: one JSON object per line."""
    return "".join(json.dumps({"log": line + "\n", "stream": "stderr", "time": stamp(start + i)},
                              separators=(",", ":")) + "\n" for i, line in enumerate(text.splitlines()))


def lines(text: str) -> int:
    """How many lines ``text`` holds."""
    return text.count("\n")


def exact(samples: Samples) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    """Counter and histogram samples the logs gave, summed over the source label."""
    out: dict[tuple[str, tuple[tuple[str, str], ...]], float] = {}
    for (name, labels), value in samples.items():
        # backend_process_*: read from the processes running on this machine, not from the logs
        if name.startswith(("logmetrics_", "backend_process_")) or not name.endswith(FAMILY_SUFFIXES):
            continue
        key = (name, tuple((k, v) for k, v in labels if k != "source"))
        out[key] = out.get(key, 0.0) + value
    return out


def backend_sources(samples: Samples) -> set[str]:
    """The source labels of the backends' series."""
    return {dict(ls).get("source", "") for (n, ls) in samples if not n.startswith(("logmetrics_", "backend_process_"))}


# -- the layouts themselves ------------------------------------------------------------------------


@pytest.mark.parametrize(("path", "want"), [
    (f"/var/log/pods/llm_vllm-0_{UID}/vllm/0.log", Layout("pods", "llm/vllm-0/vllm", ("vllm",))),
    (f"/var/log/pods/llm_vllm-0_{UID}/vllm/3.log", Layout("pods", "llm/vllm-0/vllm", ("vllm",))),
    (f"/tmp/x/pods/llm_vllm-0_{UID}/vllm/0.log.20241101-120000", Layout("pods", "llm/vllm-0/vllm", ("vllm",))),
    (f"/var/log/containers/llama-7f9c-x2x_llm_llama-cpp-python-{hexid('a')}.log",
     Layout("containers", "llm/llama-7f9c-x2x/llama-cpp-python", ("llama-cpp-python",))),
    (f"/var/log/pods/{UID}/vllm/0.log", None),  # older kubelets: no namespace or pod in the path
    (f"/var/log/pods/llm_vllm-0_{UID}/vllm/notes.txt", None),
    ("/var/log/llm/vllm.log", None),
])
def test_kubernetes_paths_name_namespace_pod_and_container(path: str, want: Layout | None) -> None:
    """kubelet's paths give namespace/pod/container, without pod uid or restart number; others nothing."""
    assert Layouts().of(path) == want


def test_cut_symlink_name_is_read_from_its_target(tmp_path: Path) -> None:
    """A /var/log/containers name cut at 255 bytes takes namespace/pod/container from its pods target."""
    target = tmp_path / "pods" / f"llm_{'p' * 200}_{UID}" / "whisper" / "0.log"
    target.parent.mkdir(parents=True)
    target.write_text("")
    link = tmp_path / "containers" / (f"{'p' * 200}_llm_whisper-{hexid('c')}"[:251] + ".log")
    link.parent.mkdir()
    link.symlink_to(target)
    assert Layouts().of(str(link)) == Layout("pods", f"llm/{'p' * 200}/whisper", ("whisper",))


@pytest.mark.parametrize(("image", "want"), [
    ("ghcr.io/defenseunicorns/leapfrogai/vllm:0.13", "vllm"),
    ("localhost:5000/llama-cpp-python", "llama-cpp-python"),
    (f"text-embeddings@sha256:{hexid('d')}", "text-embeddings"),
    (f"sha256:{hexid('d')}", None),
])
def test_image_name_is_its_last_path_part_without_tag(image: str, want: str | None) -> None:
    """An image reference gives its last path part, without tag or digest; a bare image id gives none."""
    assert image_name(image) == want


def docker_container(root: Path, cid: str, config: bytes | None, logs: dict[str, str]) -> Path:
    """A Docker container directory under ``root``: its config.v2.json (if any), the files beside it and
    its json-file logs (name suffix -> content)."""
    d = root / "containers" / cid
    d.mkdir(parents=True)
    if config is not None:
        (d / "config.v2.json").write_bytes(config)
    (d / "hostconfig.json").write_text('{"LogConfig": {"Type": "json-file"}}\n')
    (d / "hostname").write_text(cid[:12] + "\n")
    for suffix, text in logs.items():
        (d / f"{cid}-json.log{suffix}").write_text(text)
    return d / f"{cid}-json.log"


def config(name: str, image: str | None = None) -> bytes:
    """A config.v2.json as the Docker daemon writes it (only the fields read here, and a few others)."""
    obj: dict[str, object] = {"ID": "x", "Name": f"/{name}", "State": {"Running": True}}
    if image is not None:
        obj["Config"] = {"Image": image, "Env": ["PATH=/usr/bin"]}
    return json.dumps(obj).encode()


@pytest.mark.parametrize(("cfg", "source", "names"), [
    (config("model-a", "ghcr.io/defenseunicorns/leapfrogai/vllm:0.13"), "model-a", ("model-a", "vllm")),
    (config("vllm"), "vllm", ("vllm",)),
    (None, "bbbbbbbbbbbb", ("bbbbbbbbbbbb",)),
    (b'{"Name": "/vllm", "Config": {', "bbbbbbbbbbbb", ("bbbbbbbbbbbb",)),  # cut short: not JSON
    (b'["/vllm"]', "bbbbbbbbbbbb", ("bbbbbbbbbbbb",)),
    (b'{"Name": 7, "Config": {"Image": ["vllm"]}}', "bbbbbbbbbbbb", ("bbbbbbbbbbbb",)),
    (b'{"Name": "/vllm", "Pad": "' + b"x" * CONFIG_MAX_BYTES + b'"}', "bbbbbbbbbbbb", ("bbbbbbbbbbbb",)),
])
def test_docker_source_is_the_container_name_else_its_short_id(tmp_path: Path, cfg: bytes | None, source: str,
                                                               names: tuple[str, ...]) -> None:
    """The container's name from config.v2.json (and its image for routing), else the first 12 hex of its id."""
    log = docker_container(tmp_path, hexid("b"), cfg, {"": "", ".1": ""})
    layouts = Layouts()
    assert layouts.of(str(log)) == Layout("docker", source, names)
    assert layouts.of(f"{log}.1") == Layout("docker", source, names)  # a rotation is the same container


def test_docker_config_is_read_once_per_container(tmp_path: Path) -> None:
    """config.v2.json is read once per container: the rotated log of a container keeps its first name."""
    log = docker_container(tmp_path, hexid("b"), config("vllm"), {"": "", ".1": ""})
    layouts = Layouts()
    assert layouts.of(str(log)) is not None
    (log.parent / "config.v2.json").write_bytes(config("renamed"))
    got = layouts.of(f"{log}.1")
    assert got is not None and got.source == "vllm"


def test_only_the_logs_of_a_docker_container_directory_are_discovered(tmp_path: Path) -> None:
    """config.v2.json, hostconfig.json and hostname beside a container's logs are not read as logs."""
    cid = hexid("e")
    log = docker_container(tmp_path, cid, config("vllm"), {"": "", ".1": "", ".2.gz": ""})
    found = discover([str(tmp_path)], lambda err: None)
    assert found == [str(log), f"{log}.1"]
    assert not is_log(str(log.parent / "config.v2.json")) and is_log(str(tmp_path / "config.v2.json"))


# -- through the engine ----------------------------------------------------------------------------


def pod_log(root: Path, ns: str, pod: str, container: str, n: int = 0) -> Path:
    """kubelet's log file of a container: pods/<ns>_<pod>_<uid>/<container>/<n>.log (created empty)."""
    path = root / "pods" / f"{ns}_{pod}_{UID}" / container / f"{n}.log"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.touch()
    return path


def link(root: Path, target: Path, ns: str, pod: str, container: str, cid: str) -> Path:
    """kubelet's symlink to it: containers/<pod>_<ns>_<container>-<id>.log."""
    path = root / "containers" / f"{pod}_{ns}_{container}-{cid}.log"
    path.parent.mkdir(exist_ok=True)
    path.symlink_to(target)
    return path


def test_file_reached_by_several_paths_is_read_once(tmp_path: Path) -> None:
    """pods/, containers/ and the file itself given together: each line is read once."""
    root = tmp_path / "log"
    log = pod_log(root, "llm", "vllm-0", "vllm")
    log.write_text(cri(VLLM))
    link(root, log, "llm", "vllm-0", "vllm", hexid("a"))
    got = oneshot_metrics(str(root / "pods"), str(root / "containers"), str(log))
    assert total(got, "logmetrics_lines_read_total", source="llm/vllm-0/vllm") == lines(VLLM)
    assert exact(got) == exact(oneshot_metrics("--parser", "vllm", str(log)))


def test_container_name_routes_and_pod_name_does_not(tmp_path: Path) -> None:
    """A container's name routes its log; a sidecar of a pod named vllm-0 is sniffed, not sent to vLLM."""
    root = tmp_path / "log"
    api = pod_log(root, "llm", "vllm-0", "api")
    api.write_text(cri(API))
    sidecar = pod_log(root, "llm", "vllm-0", "istio-proxy")
    sidecar.write_text(cri("".join(f"[2025-01-02T03:04:{i:02d}.000Z] envoy upstream reset {i}\n" for i in range(5))))
    got = oneshot_metrics(str(root))
    assert backend_sources(got) == {"llm/vllm-0/api"}
    assert total(got, "http_requests_total", backend="api", source="llm/vllm-0/api") > 0
    assert total(got, "logmetrics_lines_unmatched_total", parser="none") == 5
    assert total(got, "logmetrics_lines_read_total", source="llm/vllm-0/istio-proxy") == 5


def test_source_flag_and_static_labels_still_win(tmp_path: Path) -> None:
    """--source overrides the layout's label; --label GLOB matches namespace/pod/container."""
    log = pod_log(tmp_path / "log", "llm", "llama-0", "llama-cpp-python")
    log.write_text(cri(LLAMA))
    got = oneshot_metrics(str(log), "--source", "mine")
    assert backend_sources(got) == {"mine"}
    got = oneshot_metrics(str(log), "--label", "llm/llama-0/*:model=local-7b")
    assert backend_sources(got) == {"llm/llama-0/llama-cpp-python"}
    models = {dict(ls).get("model") for (n, ls) in got if n.startswith("llm_")}
    assert models == {"local-7b"}


def settle(srv: Server, barrier: Path, polls: int = 3) -> None:
    """Let the engine finish several more polls, each proven by a line of another file being read."""
    for _ in range(polls):
        append(barrier, "barrier\n")
        wait_lines(srv, "llm/barrier-0/barrier", lines(barrier.read_text()))


def wait_lines(srv: Server, source: str, n: int) -> Samples:
    """Block until the engine reports ``n`` lines read from ``source``; the metrics then."""
    return srv.wait_for(lambda s: total(s, "logmetrics_lines_read_total", source=source) == n)


def test_pods_layout_live_rotation_gzip_and_restart_count_each_line_once(tmp_path: Path) -> None:
    """watch over /var/log/pods and /var/log/containers both: kubelet's rotation, its gzip via a .tmp
    file and a container restart count every line once, under namespace/pod/container."""
    root = tmp_path / "var" / "log"
    backends = {  # container -> (pod, text)
        "vllm": ("vllm-0", VLLM),
        "llama-cpp-python": ("llama-0", LLAMA),
        "text-embeddings": ("tei-5d8f-k2j4x", TEI),
        "api": ("api-7b6c-9qz2w", API),
    }
    logs = {}
    for i, (container, (pod, _text)) in enumerate(backends.items()):
        logs[container] = pod_log(root, "llm", pod, container)
        link(root, logs[container], "llm", pod, container, hexid("abcd"[i]))
    barrier = pod_log(root, "llm", "barrier-0", "barrier")
    srv = Server(str(root / "pods"), str(root / "containers"), "--poll-interval", "0.1")
    try:
        for container, (_pod, text) in backends.items():
            append(logs[container], cri(text))
        n = lines(VLLM)
        vllm_source = "llm/vllm-0/vllm"
        srv.wait_for(lambda s: all(total(s, "logmetrics_lines_read_total", source=f"llm/{pod}/{c}") == lines(t)
                                   for c, (pod, t) in backends.items()))
        # kubelet's rotation: 0.log renamed with a timestamp, the runtime opens a new 0.log
        vllm0 = logs["vllm"]
        rotated = vllm0.with_name("0.log.20241101-120000")
        vllm0.rename(rotated)
        append(vllm0, cri(VLLM, n))
        got = wait_lines(srv, vllm_source, 2 * n)
        assert total(got, "logmetrics_rotations_total", source=vllm_source) == 1
        # later, kubelet gzips the rotated file through a .tmp file, then removes it
        tmp = rotated.with_name(rotated.name + ".tmp")
        tmp.write_bytes(gzip.compress(rotated.read_bytes()))
        tmp.rename(rotated.with_name(rotated.name + ".gz"))
        rotated.unlink()
        # the container restarts: 1.log (and a symlink for the new container id); 0.log is kept
        vllm1 = pod_log(root, "llm", "vllm-0", "vllm", 1)
        link(root, vllm1, "llm", "vllm-0", "vllm", hexid("f"))
        append(vllm1, cri(VLLM, 2 * n))
        wait_lines(srv, vllm_source, 3 * n)
        settle(srv, barrier)
        live = srv.samples()
        ready = total(live, "backend_ready", source=vllm_source)
        assert ready == 1  # 1.log's server is up
        # kubelet removes the log of the container before the last: the live 1.log keeps its gauges.
        # First the rotated file is closed (once idle for a while): four backends, 1.log, the barrier.
        srv.wait_for(lambda s: total(s, "logmetrics_open_files") == 6)
        vllm0.unlink()
        srv.wait_for(lambda s: total(s, "logmetrics_open_files") == 5)
        settle(srv, barrier)
        after = srv.samples()
    finally:
        assert srv.stop() == 0
    assert total(after, "backend_ready", source=vllm_source) == ready
    assert total(after, "logmetrics_lines_read_total", source=vllm_source) == 3 * n
    # the tailer's figures of 0.log and 1.log add up under their one label
    written = sum(len(cri(VLLM, k * n).encode()) for k in range(3))
    assert total(after, "logmetrics_bytes_read_total", source=vllm_source) == written
    assert total(after, "logmetrics_rotations_total", source=vllm_source) == 1
    assert backend_sources(live) == {f"llm/{pod}/{c}" for c, (pod, _t) in backends.items()}
    assert {dict(ls).get("backend") for (name, ls) in live if name == "http_requests_total"} >= {"vllm", "api"}
    # the same lines through --oneshot on plain files: 0.log and its successor are one stream, 1.log another
    plain = tmp_path / "plain"
    plain.mkdir()
    (plain / "vllm-0.log").write_text(cri(VLLM) + cri(VLLM, n))
    (plain / "vllm-1.log").write_text(cri(VLLM, 2 * n))
    (plain / "llama-cpp.log").write_text(cri(LLAMA))
    (plain / "text-embeddings.log").write_text(cri(TEI))
    (plain / "api.log").write_text(cri(API))
    want = exact(oneshot_metrics(str(plain)))
    assert want and exact(live) == want
    assert exact(after) == want


def test_docker_layout_names_and_counts(tmp_path: Path) -> None:
    """/var/lib/docker/containers: the container's name (or short id), routed by name or image, rotated
    logs included, config files not read; counts equal those of the same lines in plain files."""
    root = tmp_path / "docker"
    ids = {k: hexid(c) for k, c in (("model", "1"), ("llama", "2"), ("tei", "3"), ("api", "4"))}
    docker_container(root, ids["model"], config("model-a", "ghcr.io/defenseunicorns/leapfrogai/vllm:0.13"),
                     {"": json_file(VLLM)})
    # rotated by max-file: the older lines are in .1
    parts = LLAMA.splitlines(keepends=True)
    cut = len(parts) // 2
    older, newer = "".join(parts[:cut]), "".join(parts[cut:])
    docker_container(root, ids["llama"], config("llama-cpp-python"),
                     {".1": json_file(older), "": json_file(newer, cut)})
    docker_container(root, ids["tei"], None, {"": json_file(TEI)})
    docker_container(root, ids["api"], b'{"Name": "/gateway", "Config": {"Ima', {"": json_file(API)})
    got = oneshot_metrics(str(root))
    want_sources = {"model-a", "llama-cpp-python", ids["tei"][:12], ids["api"][:12]}
    assert backend_sources(got) == want_sources
    assert {src for (n, ls) in got if n == "logmetrics_lines_read_total" for k, src in ls if k == "source"} \
        == want_sources
    assert total(got, "logmetrics_lines_read_total", source="llama-cpp-python") == lines(LLAMA)
    backends: dict[str, set[str]] = {}
    for name, labels in got:
        if not name.startswith(("logmetrics_", "backend_process_")):
            backends.setdefault(dict(labels)["source"], set()).add(dict(labels)["backend"])
    assert backends == {"model-a": {"vllm"}, "llama-cpp-python": {"llamacpp"}, ids["tei"][:12]: {"embeddings"},
                        ids["api"][:12]: {"api"}}
    plain = tmp_path / "plain"
    plain.mkdir()
    (plain / "vllm.log").write_text(json_file(VLLM))
    (plain / "llama-cpp-older.log").write_text(json_file(older))  # a rotated file found at start is a
    (plain / "llama-cpp.log").write_text(json_file(newer, cut))  # stream of its own
    (plain / "text-embeddings.log").write_text(json_file(TEI))
    (plain / "api.log").write_text(json_file(API))
    want = exact(oneshot_metrics(str(plain)))
    assert want and exact(got) == want
