"""Layouts: what a log file's place on a Kubernetes node or a Docker host says about its stream.

``Layouts.of(path)`` gives the ``source`` label of a file in one of these layouts, and the names
that routing matches against the parsers' ``claims``. Only the tail of the path is matched, so the
same tree anywhere (a copy, a mount at another place) is read the same way.

- kubelet's ``pods/<namespace>_<pod>_<uid>/<container>/<N>.log`` and its rotations
  ``<N>.log.<YYYYMMDD-HHMMSS>``: source ``namespace/pod/container``. Neither the pod uid nor the
  restart number N is in it, so a restarted container (``1.log``) goes on in the same series.
  Routing name: the container's. (The older ``pods/<uid>/<container>/<N>.log`` names no
  namespace or pod: no layout.)
- kubelet's symlinks ``containers/<pod>_<namespace>_<container>-<64 hex>.log``: the same, from
  the name; where kubelet cut the name at 255 bytes, from the pods path it points to.
- Docker's json-file ``containers/<id>/<id>-json.log`` and its rotations ``.1``, ``.2`` ...:
  source is the container's name from ``config.v2.json`` beside the log (``"Name": "/vllm"``),
  else the first 12 hex digits of the id (what ``docker ps`` shows) when that file is missing,
  unreadable, too big or not the JSON expected. Routing names: the container's name and its
  image's last path part without tag (``ghcr.io/org/vllm:0.13`` gives ``vllm``).

``is_log(path)`` says which files of a Docker container directory are logs at all: its
``config.v2.json``, ``hostconfig.json``, ``hostname`` and the like are not.
"""

from __future__ import annotations

import logging
import os
import re
from dataclasses import dataclass
from typing import Any

import orjson

from logmetrics import lazyre

log = logging.getLogger(__name__)

CONFIG_MAX_BYTES = 1 << 20  # a Docker config.v2.json larger than this is not read (the id is used)
CACHE_MAX = 4096  # paths (and containers) remembered; past this the cache starts again

_POD_PART = r"(?P<ns>[^/_]+)_(?P<pod>[^/_]+)_[^/_]+/(?P<container>[^/_]+)/\d+\.log(?:\.\d{8}-\d{6})?"
_PODS = lazyre.compile(r"(?:^|/)pods/" + _POD_PART + r"\Z")
_LINK = lazyre.compile(r"(?:^|/)containers/(?P<pod>[^/_]+)_(?P<ns>[^/_]+)_(?P<container>[^/_]+)-[0-9a-f]{64}\.log\Z")
_DOCKER = lazyre.compile(r"(?:^|/)containers/(?P<id>[0-9a-f]{64})/(?P<rest>[^/].*)\Z", re.DOTALL)
_DOCKER_LOG = lazyre.compile(r"(?P<id>[0-9a-f]{64})-json\.log(?:\.\d+)?\Z")
_IMAGE_TAG = lazyre.compile(r":[\w][\w.-]*\Z")


@dataclass(frozen=True, slots=True)
class Layout:
    """What a file's place says: its source label and the names routing tries, most specific first."""

    kind: str  # "pods", "containers" (a kubelet symlink) or "docker"
    source: str
    names: tuple[str, ...]


def is_log(path: str) -> bool:
    """False for the files of a Docker container directory that are not its json-file logs."""
    if "containers" not in path:
        return True
    m = _DOCKER.search(path)
    if m is None:
        return True
    rest = _DOCKER_LOG.match(m["rest"])
    return rest is not None and rest["id"] == m["id"]


def image_name(image: str) -> str | None:
    """The last path part of an image reference, without tag or digest (None for a bare image id)."""
    image = image.split("@", 1)[0]
    last = _IMAGE_TAG.sub("", image.rsplit("/", 1)[-1])
    if not last or image.startswith("sha256:") or re.fullmatch(r"[0-9a-f]{64}", last):
        return None
    return last


def read_docker_config(directory: str) -> tuple[str | None, str | None]:
    """(container name, image) from ``config.v2.json`` in ``directory``; None for what it does not
    give (missing, unreadable, over ``CONFIG_MAX_BYTES``, bad JSON, unexpected types)."""
    path = os.path.join(directory, "config.v2.json")
    try:
        with open(path, "rb") as f:
            data = f.read(CONFIG_MAX_BYTES + 1)
    except OSError as exc:
        log.debug("no container name from %s: %s", path, exc)
        return None, None
    if len(data) > CONFIG_MAX_BYTES:
        log.warning("%s is larger than %d bytes: not read; the container id names its logs", path, CONFIG_MAX_BYTES)
        return None, None
    try:
        obj: Any = orjson.loads(data)
    except orjson.JSONDecodeError:
        log.warning("%s is not valid JSON; the container id names its logs", path)
        return None, None
    if not isinstance(obj, dict):
        return None, None
    raw_name, config = obj.get("Name"), obj.get("Config")
    name = raw_name.lstrip("/") if isinstance(raw_name, str) else None
    image = config.get("Image") if isinstance(config, dict) else None
    return name or None, image if isinstance(image, str) and image else None


def _pod(m: re.Match[str]) -> Layout:
    container = m["container"]
    return Layout("pods", f"{m['ns']}/{m['pod']}/{container}", (container,))


class Layouts:
    """``of(path)``, remembered per path; each Docker container's config is read once."""

    def __init__(self) -> None:
        self._paths: dict[str, Layout | None] = {}
        self._docker: dict[str, tuple[str, tuple[str, ...]]] = {}  # container id -> source, names

    def of(self, path: str) -> Layout | None:
        """The layout of the file at ``path``, or None for a path in none of them."""
        try:
            return self._paths[path]
        except KeyError:
            pass
        if len(self._paths) >= CACHE_MAX:
            self._paths.clear()
        found = self._paths[path] = self._find(path)
        return found

    def forget(self, path: str) -> None:
        """``path`` is gone for good: its layout is found again if a file shows up there."""
        self._paths.pop(path, None)

    def _find(self, path: str) -> Layout | None:
        m = _PODS.search(path)
        if m is not None:
            return _pod(m)
        m = _LINK.search(path)
        if m is not None:
            container = m["container"]
            return Layout("containers", f"{m['ns']}/{m['pod']}/{container}", (container,))
        m = _DOCKER.search(path)
        if m is not None:
            rest = _DOCKER_LOG.match(m["rest"])
            if rest is not None and rest["id"] == m["id"]:
                return self._docker_layout(os.path.dirname(path), m["id"])
        if os.path.islink(path):  # a kubelet symlink whose name was cut, or a link of one's own
            m = _PODS.search(os.path.realpath(path))
            if m is not None:
                return _pod(m)
        return None

    def _docker_layout(self, directory: str, cid: str) -> Layout:
        known = self._docker.get(cid)
        if known is None:
            if len(self._docker) >= CACHE_MAX:
                self._docker.clear()
            name, image = read_docker_config(directory)
            source = name or cid[:12]
            base = image_name(image) if image is not None else None
            names = tuple(dict.fromkeys(n for n in (name, base) if n)) or (source,)
            known = self._docker[cid] = (source, names)
        return Layout("docker", *known)
