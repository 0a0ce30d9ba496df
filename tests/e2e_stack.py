"""Parts of the end-to-end test (tests/test_e2e_stack.py): a writer that keeps the shipped samples
coming with fresh timestamps and request ids, a webhook receiver, a real Alertmanager, and the rules
with short intervals."""

from __future__ import annotations

import json
import re
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from datetime import datetime, timedelta
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.test_prometheus import Piped, free_port, wait_ready

ROOT = Path(__file__).resolve().parent.parent
#: log file -> (sample, a line from which later rounds repeat the sample: its start-up is logged once;
#: None: the whole sample again, start-up included, so that restarts are seen too)
STACK: dict[str, tuple[str, str | None]] = {
    "vllm-qwen.log": ("vllm/exact-tokens", "Received request"),
    "vllm-mistral.log": ("vllm/v1-0.33", None),
    "vllm-v0.log": ("vllm/v0-0.5", None),
    "llamacpp.log": ("llamacpp/server-era-d", None),
    "whisper.log": ("whisper/leapfrog", None),
    "embeddings.log": ("embeddings/leapfrog", None),
    "api.log": ("api/leapfrog-uvicorn", None),
    "ui.log": ("ui/leapfrogai-ui", None),
    **{f"supabase-{name}.log": (f"supabase/{name}", None)
       for name in ("auth", "kong", "postgres", "rest", "storage", "realtime")},
}
#: log file -> (text, replacement): lines of its sample that are written once more per round with the text
#: replaced. No sample has a redirect; a browser revalidating a public object gets 304 from Kong.
VARIANTS = {"supabase-kong.log": ('" 200 20480 ', '" 304 0 ')}
#: The model of vllm-qwen.log, whose error burst must make the error-ratio alert fire.
BURST_MODEL = "qwen2.5-7b"
#: Timestamp shapes of the samples, with their strptime formats (the year-less vLLM one gets this year).
STAMPS = [
    (re.compile(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d"), "%Y-%m-%dT%H:%M:%S"),
    (re.compile(r"\d{4}-\d\d-\d\d \d\d:\d\d:\d\d"), "%Y-%m-%d %H:%M:%S"),
    (re.compile(r"\d{4}/\d\d/\d\d \d\d:\d\d:\d\d"), "%Y/%m/%d %H:%M:%S"),
    (re.compile(r"\d\d/[A-Z][a-z]{2}/\d{4}:\d\d:\d\d:\d\d"), "%d/%b/%Y:%H:%M:%S"),
    (re.compile(r"(?<![\d-])\d\d-\d\d \d\d:\d\d:\d\d"), "%m-%d %H:%M:%S"),
]
REQUEST_ID = re.compile(r"\b(chatcmpl|cmpl|req)-(\w+)")
HEADER = "(APIServer pid=1) INFO {stamp} [async_llm.py:318] "


def _parse(text: str, fmt: str) -> datetime:
    """``text`` in ``fmt``; a format without a year gets this year."""
    if "%Y" in fmt:
        return datetime.strptime(text, fmt)
    return datetime.strptime(f"{datetime.now().year} {text}", f"%Y {fmt}")


class Sample:
    """One sample file, to be written again and again as fresh lines."""

    def __init__(self, name: str, repeat_from: str | None, variant: tuple[str, str] | None = None) -> None:
        self.lines = (ROOT / "samples" / f"{name}.log").read_text().splitlines()
        if variant:
            self.lines += [line.replace(*variant) for line in self.lines if variant[0] in line]
        start = next(i for i, line in enumerate(self.lines) if repeat_from in line) if repeat_from else 0
        self.again = self.lines[start:]
        self.base: dict[str, datetime] = {}  # format -> the first time of that shape in the sample
        for line in self.lines:
            for pattern, fmt in STAMPS:
                m = pattern.search(line)
                if m and fmt not in self.base:
                    self.base[fmt] = _parse(m.group(0), fmt)

    @staticmethod
    def _shifter(fmt: str, shift: timedelta) -> Callable[[re.Match[str]], str]:
        """A re.sub replacement moving a time of format ``fmt`` by ``shift``."""
        return lambda m: (_parse(m.group(0), fmt) + shift).strftime(fmt)

    def round(self, n: int, now: datetime) -> str:
        """Round ``n``: its lines, timed as if the sample had started at ``now``, ids made unique."""
        out = []
        for line in self.lines if n == 0 else self.again:
            for pattern, fmt in STAMPS:
                if fmt in self.base:
                    line = pattern.sub(self._shifter(fmt, now - self.base[fmt]), line)
            out.append(REQUEST_ID.sub(lambda m: f"{m.group(1)}-r{n}x{m.group(2)}", line))
        return "\n".join(out) + "\n"


class Writer(threading.Thread):
    """Appends a round of every sample to its log file every ``every`` seconds until stopped."""

    def __init__(self, logs: Path, every: float = 1.0) -> None:
        super().__init__(daemon=True)
        self.logs = logs
        self.every = every
        self.samples = {file: Sample(name, again, VARIANTS.get(file)) for file, (name, again) in STACK.items()}
        self.done = threading.Event()
        self.lock = threading.Lock()  # one writer per file at a time: the rounds and the burst
        self.rounds = 0
        self.write_round()  # the files exist before logmetrics starts

    def write_round(self) -> None:
        """One round of every sample."""
        with self.lock:
            now = datetime.now()
            for file, sample in self.samples.items():
                with (self.logs / file).open("a") as f:
                    f.write(sample.round(self.rounds, now))
            self.rounds += 1

    def run(self) -> None:
        while not self.done.wait(self.every):
            self.write_round()

    def burst(self, n: int) -> None:
        """``n`` requests of vllm-qwen.log failing, as vLLM logs a request refused as too long."""
        stamp = datetime.now().strftime("%m-%d %H:%M:%S")
        lines = []
        for i in range(n):
            rid = f"chatcmpl-burst{i:04x}e2e"
            lines += [HEADER.format(stamp=stamp) + f"Added request {rid}-a1f3.",
                      HEADER.format(stamp=stamp).replace("318", "560") +
                      f"Request {rid}-a1f3 failed (bad request): Prompt length of 40211 is longer than the "
                      "maximum model length of 32768.",
                      f'(APIServer pid=1) INFO:     10.0.0.5:{42000 + i} - "POST /v1/chat/completions HTTP/1.1" '
                      "400 Bad Request"]
        with self.lock, (self.logs / "vllm-qwen.log").open("a") as f:
            f.write("\n".join(lines) + "\n")


class Webhook:
    """An HTTP server collecting the JSON bodies POSTed to it (Alertmanager's webhook payloads)."""

    def __init__(self) -> None:
        self.payloads: list[dict[str, Any]] = []
        self.arrived = threading.Condition()
        outer = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                body = self.rfile.read(int(self.headers.get("Content-Length", "0")))
                with outer.arrived:
                    outer.payloads.append(json.loads(body))
                    outer.arrived.notify_all()
                self.send_response(200)
                self.end_headers()

            def log_message(self, format: str, *args: Any) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}/alerts"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def wait_for(self, labels: dict[str, str], timeout: float) -> dict[str, Any]:
        """The first firing alert POSTed whose labels include ``labels``; fail after ``timeout``."""
        deadline = time.monotonic() + timeout
        with self.arrived:
            while True:
                for payload in self.payloads:
                    for alert in payload.get("alerts", []):
                        if alert.get("status") == "firing" and labels.items() <= alert["labels"].items():
                            return dict(alert)
                left = deadline - time.monotonic()
                if left <= 0:
                    got = [a["labels"] for p in self.payloads for a in p.get("alerts", [])]
                    pytest.fail(f"no firing alert with {labels} at the webhook within {timeout}s; got {got}")
                self.arrived.wait(left)

    def close(self) -> None:
        """Stop serving."""
        self.server.shutdown()
        self.server.server_close()


def alertmanager_config(webhook: str) -> str:
    """deploy/alertmanager.yml with the webhook pointed at ``webhook`` and its waits cut to a second."""
    config = yaml.safe_load((ROOT / "deploy" / "alertmanager.yml").read_text())
    config["route"].update(group_wait="1s", group_interval="1s", repeat_interval="1h")
    (receiver,) = config["receivers"]
    receiver["webhook_configs"][0]["url"] = webhook
    return yaml.safe_dump(config)


class Alertmanager:
    """A real Alertmanager (no cluster), with its own storage, on a free port."""

    def __init__(self, exe: str, workdir: Path, webhook: str) -> None:
        workdir.mkdir(parents=True, exist_ok=True)
        config = workdir / "alertmanager.yml"
        config.write_text(alertmanager_config(webhook))
        self.url = f"http://127.0.0.1:{free_port()}"
        cmd = [exe, f"--config.file={config}", f"--storage.path={workdir / 'data'}",
               f"--web.listen-address={self.url.removeprefix('http://')}", "--cluster.listen-address=",
               "--log.level=warn"]
        self.proc = subprocess.Popen(cmd, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                                     stderr=subprocess.PIPE, text=True, errors="replace", cwd=workdir)
        self.piped = Piped(self.proc)

    def wait_ready(self, timeout: float = 30.0) -> None:
        """Poll /-/ready until it answers 200."""
        wait_ready("alertmanager", self.proc, self.piped, self.url, timeout)


def fast_rules(out: Path, alert_for: str = "1s") -> tuple[Path, list[str]]:
    """rules/logmetrics.rules.yml as is, but evaluated at the global interval (the groups' own
    ``interval`` dropped) and with every ``for:`` cut to ``alert_for``; the file and the recorded names."""
    doc = yaml.safe_load((ROOT / "rules" / "logmetrics.rules.yml").read_text())
    recorded = []
    for group in doc["groups"]:
        group.pop("interval", None)
        for rule in group["rules"]:
            if "for" in rule:
                rule["for"] = alert_for
            if "record" in rule:
                recorded.append(rule["record"])
    out.write_text(yaml.safe_dump(doc, sort_keys=False))
    return out, recorded


def wait_until(check: Any, timeout: float, every: float = 1.0) -> Any:
    """Call ``check()`` until it returns a falsy value (nothing missing) or time runs out; its last value."""
    deadline = time.monotonic() + timeout
    while True:
        missing = check()
        if not missing or time.monotonic() > deadline:
            return missing
        time.sleep(every)


def stand_in(marker: str) -> subprocess.Popen[str]:
    """A process whose command line carries ``marker``: what --process counts as a backend's process."""
    return subprocess.Popen([sys.executable, "-c", "import sys; sys.stdin.read()", marker], stdin=subprocess.PIPE,
                            text=True)

