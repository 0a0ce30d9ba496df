"""The engine end to end through --oneshot: routing, compose sources, envelopes, faulty parsers."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import time
from pathlib import Path

import pytest

from logmetrics.app.procs import ProcessWatcher, is_logmetrics
from tests.helpers import Samples, access_line, parse, total

STATS = ("INFO 04-10 03:35:27 [loggers.py:80] Engine 000: Avg prompt throughput: 12.5 tokens/s, Avg generation "
         "throughput: 40.1 tokens/s, Running: 3 reqs, Waiting: 1 reqs, GPU KV cache usage: 4.2%, Prefix cache "
         "hit rate: 0.0%\n")


def oneshot(*args: str, stdin: str = "") -> subprocess.CompletedProcess[str]:
    """Run 'logmetrics watch --oneshot ARGS'."""
    return subprocess.run([sys.executable, "-m", "logmetrics", "watch", "--oneshot", *args], input=stdin,
                          capture_output=True, text=True, timeout=60)


def oneshot_metrics(*args: str) -> Samples:
    """Run 'logmetrics watch --oneshot ARGS', which must succeed, and parse what it prints."""
    out = oneshot(*args)
    assert out.returncode == 0, out.stderr
    return parse(out.stdout)


def test_unclaimed_file_is_routed_by_sniffing(tmp_path: Path) -> None:
    """A file whose name claims nothing is routed to vLLM by its first lines."""
    log = tmp_path / "server.log"
    log.write_text(STATS + "".join(access_line(i) for i in range(4)))
    got = oneshot_metrics(str(log))
    assert total(got, "http_requests_total", backend="vllm") == 4
    assert total(got, "llm_requests_running", backend="vllm") == 3


def test_unrecognised_stream_is_counted_not_lost(tmp_path: Path) -> None:
    """Lines no parser recognises are counted as unmatched under parser 'none'."""
    log = tmp_path / "other.log"
    log.write_text("".join(f"hello {i}\n" for i in range(7)))
    got = oneshot_metrics(str(log))
    assert total(got, "logmetrics_lines_unmatched_total", parser="none") == 7
    assert total(got, "logmetrics_lines_read_total") == 7


def test_compose_service_becomes_the_source(tmp_path: Path) -> None:
    """'docker compose logs' output: each service is its own stream and source label."""
    lines = []
    for i in range(6):
        service = "vllm-a" if i % 3 else "vllm-b"
        lines.append(f"{service}  | {access_line(i)}")
    log = tmp_path / "compose.log"
    log.write_text("".join(lines))
    got = oneshot_metrics("--parser", "vllm", str(log))
    assert total(got, "http_requests_total", source="vllm-a") == 4
    assert total(got, "http_requests_total", source="vllm-b") == 2


def test_docker_json_envelope_and_source_flag(tmp_path: Path) -> None:
    """Docker json-file lines are unwrapped by themselves; --source names the stream."""
    log = tmp_path / "abc-json.log"
    with log.open("w") as f:
        for line in [STATS, *(access_line(i) for i in range(3))]:
            f.write(json.dumps({"log": line, "stream": "stdout", "time": "2025-04-06T07:55:21.108632509Z"}) + "\n")
    got = oneshot_metrics("--parser", "vllm", "--source", "vllm-0", str(log))
    assert total(got, "http_requests_total", source="vllm-0") == 3
    assert total(got, "llm_kv_cache_usage_ratio", source="vllm-0") == 0.042


def test_a_parser_that_raises_is_counted_and_the_rest_goes_on(tmp_path: Path) -> None:
    """A record that makes a parser raise is counted in parse errors; the other records still count."""
    plugin = tmp_path / "flaky.py"
    plugin.write_text(
        "from logmetrics.events import Event\n"
        "from logmetrics.plugins import Parser\n\n\n"
        "class Flaky(Parser):\n"
        "    name = 'flaky'\n\n"
        "    def parse(self, record):\n"
        "        if 'boom' in record.text:\n"
        "            raise ValueError('boom')\n"
        "        return [Event('backend_restarts_total', ())]\n")
    out = oneshot("--plugin", str(plugin), "--parser", "flaky", "-", stdin="a\nboom\nb\n")
    assert out.returncode == 0, out.stderr
    got = parse(out.stdout)
    assert total(got, "logmetrics_parse_errors_total", parser="flaky") == 1
    assert total(got, "backend_restarts_total", backend="flaky") == 2
    assert "parser flaky raised ValueError: boom" in out.stderr


def test_process_watcher_finds_a_backend_by_command_line(tmp_path: Path) -> None:
    """CPU and memory of processes whose program names the backend are summed, even one run from a
    folder called logmetrics (as a clone of this project is)."""
    marker = f"fake_vllm_backend_{os.getpid()}"  # the script's name: only this test's process matches
    script = tmp_path / "logmetrics" / f"{marker}.py"
    script.parent.mkdir()
    script.write_text("import sys\nsum(range(10**6))\nsys.stdin.read()\n")
    proc = subprocess.Popen([sys.executable, str(script)], stdin=subprocess.PIPE)
    watcher = ProcessWatcher({"vllm": (marker,)}, min_interval=0)
    try:
        deadline = time.monotonic() + 10
        while True:
            cpu, mem = watcher.samples()
            if (cpu and cpu[0][2] > 0) or time.monotonic() > deadline:
                break
        assert [s[:2] for s in cpu] == [("backend_process_cpu_seconds_total", ("vllm", "local"))]
        assert cpu[0][2] > 0
        assert mem[0][2] > 1_000_000
    finally:
        proc.communicate(b"", timeout=10)
    after, mem = watcher.samples()
    assert after and after[0][2] >= cpu[0][2]  # an exited process's CPU time stays counted
    assert mem == []  # no process left: no memory to report


def test_a_process_that_is_no_backend_is_not_read_again(monkeypatch: pytest.MonkeyPatch) -> None:
    """A scan reads the command line of the processes it has not seen lately only: the second of
    two scans in a row reads next to none (a scrape stays cheap on a host of many processes)."""
    import psutil

    reads = [0]
    real = psutil.Process.cmdline

    def counting(self: psutil.Process) -> list[str]:
        reads[0] += 1
        return real(self)

    monkeypatch.setattr(psutil.Process, "cmdline", counting)
    watcher = ProcessWatcher({"vllm": (f"--no-such-backend-{os.getpid()}",)}, min_interval=0)
    watcher.samples()
    first, reads[0] = reads[0], 0
    watcher.samples()
    assert first >= 5 and reads[0] <= 2, (first, reads[0])  # (a process or two may start between)


def test_process_rules_first_in_order_then_the_parsers_names() -> None:
    """A command line counts for the first match: the --process rules in the order given, then the parsers'
    own names in parser-name order; logmetrics' own command line never counts."""
    watcher = ProcessWatcher({"vllm": ("vllm",), "llamacpp": ("llama-server",)},
                             rules=[("gw", re.compile(r"uvicorn .*gw:app")), ("vllm2", re.compile(r"vllm serve"))])
    assert watcher.backend_of(["vllm", "serve", "m"]) == "vllm2"
    assert watcher.backend_of(["python", "-m", "vllm.entrypoints.openai.api_server"]) == "vllm"
    assert watcher.backend_of(["llama-server", "-m", "vllm-compare.gguf"]) == "llamacpp"
    assert watcher.backend_of(["uvicorn", "--port", "80", "gw:app"]) == "gw"
    assert watcher.backend_of(["python", "-m", "logmetrics", "watch", "--process", "gw=uvicorn gw:app"]) is None
    assert watcher.backend_of(["bash"]) is None


@pytest.mark.parametrize(("argv", "backend"), [
    (["vllm", "serve", "/models/tiny", "--port", "8000"], "vllm"),
    (["/usr/bin/python3", "-u", "-m", "vllm.entrypoints.openai.api_server", "--model", "m"], "vllm"),
    (["VLLM::EngineCore_DP0"], "vllm"),
    (["tail", "-F", "/var/log/vllm/vllm.log"], None),
    (["less", "/srv/vllm-logs/0.log"], None),
    (["/opt/vllm/bin/python", "tool.py", "--out", "/data/vllm"], None),
    (["python", "-c", "import vllm; print(vllm.__version__)"], None),
    (["/opt/llama.cpp/build/bin/llama-server", "-m", "/models/vllm-compare.gguf"], "llamacpp"),
    (["/usr/local/bin/faster-whisper-server", "/models/ct2-tiny", "--port", "8000"], "whisper"),
    (["/venv/bin/python", "/venv/bin/uvicorn", "--port", "8000", "faster_whisper_server.api:app"], "whisper"),
    (["uvicorn", "gw:app", "--root-path", "/whisper"], None),
    (["grep", "-r", "whisper", "/var/log"], None),
    (["/venv/bin/python", "/venv/bin/infinity_emb", "v2", "--model-id", "/m/bert"], "embeddings"),
    (["text-embeddings-router", "--model-id", "BAAI/bge-small-en-v1.5"], "embeddings"),
    (["vi", "/etc/text-embeddings/config.toml"], None),
    (["/usr/local/bin/myvllm-proxy", "120"], None),
    (["vllm-exporter", "--port", "9000"], None),
    (["python3", "vllm_tool.py", "serve"], None),
    (["whisper-ctl", "30"], None),
    (["infinity_emb_cli"], None),
    (["/opt/whisper.cpp/build/bin/whisper-server", "-m", "ggml-base.bin"], "whisper"),
    (["python3", "whisper.py"], "whisper"),
])
def test_parsers_names_match_the_program_not_its_arguments(argv: list[str], backend: str | None) -> None:
    """A parser's process names find the program a process runs (executable, script, -m module, a
    runner's module:app, a title it set), never a path or word among its other arguments."""
    from logmetrics_parsers.embeddings import EmbeddingsParser
    from logmetrics_parsers.llamacpp import LlamaCppParser
    from logmetrics_parsers.vllm import VllmParser
    from logmetrics_parsers.whisper import WhisperParser

    watcher = ProcessWatcher({p.name: p.process_names for p in (VllmParser, LlamaCppParser, WhisperParser,
                                                               EmbeddingsParser)})
    assert watcher.backend_of(argv) == backend


@pytest.mark.parametrize(("argv", "ours"), [
    (["/usr/bin/python3", "-m", "logmetrics", "watch", "/var/log"], True),
    (["/opt/venv/bin/logmetrics", "watch", "/var/log/vllm"], True),
    (["/srv/logmetrics/.venv/bin/python", "-m", "vllm.entrypoints.openai.api_server"], False),
    (["python", "serve.py", "--log-dir", "/var/log/logmetrics"], False),
])
def test_logmetrics_itself_is_told_from_backends(argv: list[str], ours: bool) -> None:
    """Only logmetrics' own command lines are left out of the backends' CPU and memory, not paths that name it."""
    assert is_logmetrics(argv) is ours


def test_progress_line_for_long_oneshot_runs() -> None:
    """A long --oneshot run on a terminal shows bytes read, share done and speed, then a newline."""
    import io

    from logmetrics.app.progress import Progress
    from logmetrics.sources.chunks import SourceStats

    out = io.StringIO()
    progress = Progress(out, after=0, every=0)
    stats = SourceStats()
    stats.bytes_read["a"] = 2_000_000
    stats.lag_bytes["a"] = 6_000_000
    progress.update(stats)
    assert "read 2.0 MB of 8.0 MB (25 %)" in out.getvalue()
    progress.done(stats)
    assert out.getvalue().endswith("\n")
    quiet = io.StringIO()
    Progress(quiet, after=60).update(stats)
    assert quiet.getvalue() == ""


def test_a_claim_on_the_file_name_beats_one_on_its_folder(tmp_path: Path) -> None:
    """In a folder named after vLLM, a file another parser claims by name goes to that parser."""
    plugin = tmp_path / "gw.py"
    plugin.write_text(
        "from logmetrics.events import Event\n"
        "from logmetrics.plugins import Parser\n\n\n"
        "class Gateway(Parser):\n"
        "    name = 'gateway'\n"
        "    claims = ('gateway*.log',)\n\n"
        "    def parse(self, record):\n"
        "        return [Event('backend_restarts_total', ())]\n")
    folder = tmp_path / "vllm-stack"
    folder.mkdir()
    (folder / "gateway.log").write_text("started\n")
    (folder / "engine.log").write_text(STATS)
    got = oneshot_metrics("--plugin", str(plugin), str(folder))
    assert total(got, "backend_restarts_total", backend="gateway") == 1
    assert total(got, "llm_requests_running", backend="vllm", source=str(folder / "engine.log")) == 3


def test_journalctl_output_unit_becomes_the_source(tmp_path: Path) -> None:
    """'journalctl -f -u vllm' output: the prefix is peeled off and the unit names the source."""
    log = tmp_path / "journal.txt"
    log.write_text("".join(f"Jan 02 03:04:0{i} gpu-1 vllm[812]: {access_line(i)}" for i in range(3)))
    assert total(oneshot_metrics("--parser", "vllm", str(log)), "http_requests_total", source="vllm") == 3


MALFORMED_PLUGIN = '''
from logmetrics.events import Event
from logmetrics.plugins import Parser


class Bad(Parser):
    name = "bad"
    claims = ("bad-*",)

    def parse(self, record):
        word = record.text.strip()
        if word == "list":
            return [Event("llm_prompt_tokens_total", (["a"],), 1)]
        if word == "none":
            return [Event("llm_prompt_tokens_total", (None,), 1)]
        if word == "object":
            return [object()]
        if word == "bytes":
            return [Event("llm_prompt_tokens_total", (b"m",), 1)]
        if word == "huge":
            return [Event("llm_prompt_tokens_total", ("m",), 10**400)]
        if word == "unknown":
            return [Event("no_such_metric_total", ("m",), 1)]
        if word == "short":
            return [Event("llm_prompt_tokens_total", (), 1)]
        if word == "negative":
            return [Event("llm_prompt_tokens_total", ("m",), -3)]
        if word == "exit":
            raise SystemExit(0)
        return [Event("llm_prompt_tokens_total", ("m",), 2)]
'''


def test_malformed_plugin_events_are_refused_and_counted(tmp_path: Path) -> None:
    """A plugin's malformed events (bad labels, a huge value, an unknown metric, no Event) and its sys.exit()
    are refused and counted; the run goes on."""
    (tmp_path / "bad.py").write_text(MALFORMED_PLUGIN)
    log = tmp_path / "bad-x.log"
    log.write_text("good\nlist\nnone\nobject\nbytes\nhuge\nunknown\nshort\nnegative\nexit\ngood\n")
    cmd = ["watch", "--oneshot", "--plugin", str(tmp_path / "bad.py"), str(log)]
    out = subprocess.run([sys.executable, "-m", "logmetrics", *cmd], capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    got = parse(out.stdout)
    assert total(got, "llm_prompt_tokens_total") == 4  # the two good lines
    # list, none, bytes, huge and the negative increment, which is refused and counted, never applied
    assert total(got, "logmetrics_values_rejected_total", parser="bad", metric="llm_prompt_tokens_total") == 6
    assert total(got, "logmetrics_values_rejected_total", parser="bad", metric="__malformed__") == 2
    assert total(got, "logmetrics_parse_errors_total", parser="bad") == 1  # the sys.exit()
    assert 'model="None"' not in out.stdout and "b'm'" not in out.stdout
    assert out.stderr.count("malformed event") == 1, out.stderr
    labelled = subprocess.run([sys.executable, "-m", "logmetrics", *cmd, "--label", "model=m"],
                              capture_output=True, text=True, timeout=60)  # relabelling meets them first
    assert labelled.returncode == 0, labelled.stderr
    assert total(parse(labelled.stdout), "logmetrics_values_rejected_total", metric="__malformed__") == 2


def test_a_sniff_that_raises_is_reported_once_without_a_traceback(tmp_path: Path) -> None:
    """A plugin whose sniff() raises gets one warning line; the other parsers still route the stream."""
    (tmp_path / "sniffy.py").write_text(
        "from logmetrics.plugins import Parser\n\n\n"
        "class Sniffy(Parser):\n"
        "    name = 'sniffy'\n\n"
        "    @classmethod\n"
        "    def sniff(cls, lines):\n"
        "        raise RuntimeError('sniff bug')\n\n"
        "    def parse(self, record):\n"
        "        return []\n")
    log = tmp_path / "server.log"
    log.write_text("INFO 04-10 03:35:27 [api_server.py:1] vLLM API server version 0.10.0\n" + access_line(1) * 3)
    out = subprocess.run([sys.executable, "-m", "logmetrics", "watch", "--oneshot", "--plugin",
                          str(tmp_path / "sniffy.py"), str(log)], capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    assert out.stderr.count("parser sniffy: sniff raised RuntimeError: sniff bug") == 1, out.stderr
    assert "Traceback" not in out.stderr
    assert total(parse(out.stdout), "http_requests_total") == 3


BATCH_PLUGIN = '''
from logmetrics.events import Event
from logmetrics.plugins import Parser


class Counting(Parser):
    """parse_batch only, stateful: counts the lines it has seen, raises on a line 'boom'."""
    name = "counting"
    seen = 0

    def parse_batch(self, batch):
        events = []
        for line in batch.text.splitlines():
            Counting.seen += 1
            if line == "boom":
                raise ValueError(f"boom after {Counting.seen} lines")
            events.append(Event("backend_restarts_total", (), Counting.seen))
        return events, len(events)


class Picky(Parser):
    """parse only, with a prefilter; raises on any record the prefilter should have kept from it."""
    name = "picky"
    prefilter = ("keep",)

    def parse(self, record):
        if "keep" not in record.text or "boom" in record.text:
            raise ValueError("boom")
        return [Event("backend_restarts_total", ())]
'''


def test_a_raising_parse_batch_is_not_run_again_record_by_record(tmp_path: Path) -> None:
    """A parse_batch that raises loses its batch: the engine never re-runs those records through parse(),
    reports the parser's own exception, and counts the batch's records as parse errors."""
    (tmp_path / "batch.py").write_text(BATCH_PLUGIN)
    out = oneshot("--plugin", str(tmp_path / "batch.py"), "--parser", "counting", "-", stdin="a\nboom\nb\n")
    got = parse(out.stdout)
    assert total(got, "logmetrics_parse_errors_total", parser="counting") == 2  # the batch 'a', 'boom'
    assert total(got, "backend_restarts_total", backend="counting") == 3  # 'b' is the 3rd line seen, not a 5th
    assert "parser counting raised ValueError: boom after 2 lines" in out.stderr, out.stderr
    assert "NotImplementedError" not in out.stderr


def test_the_prefilter_holds_when_a_record_raises(tmp_path: Path) -> None:
    """A parse() plugin's prefilter keeps records from it on every path, also around a record that raises."""
    (tmp_path / "batch.py").write_text(BATCH_PLUGIN)
    out = oneshot("--plugin", str(tmp_path / "batch.py"), "--parser", "picky", "-",
                  stdin="keep 1\nother\nkeep boom\nother\nkeep 2\n")
    got = parse(out.stdout)
    assert total(got, "logmetrics_parse_errors_total", parser="picky") == 1
    assert total(got, "backend_restarts_total", backend="picky") == 2


def test_check_shows_the_events_the_engine_would_refuse(tmp_path: Path) -> None:
    """'logmetrics check' lists a plugin's refused events with their reasons, as the store's own checks see them."""
    (tmp_path / "bad.py").write_text(MALFORMED_PLUGIN)
    log = tmp_path / "bad-x.log"
    log.write_text("good\nlist\nnone\nobject\nbytes\nhuge\nunknown\nshort\nnegative\nexit\ngood\n")
    out = subprocess.run([sys.executable, "-m", "logmetrics", "check", "--plugin", str(tmp_path / "bad.py"),
                          "--parser", "bad", str(log)], capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    assert "1 parse errors, 8 events refused" in out.stdout.splitlines()[0], out.stdout
    assert "'no_such_metric_total': no such metric" in out.stdout
    assert "1 label values wanted (model), got 0" in out.stdout
    assert "a counter cannot take the value 1000" in out.stdout
    assert "'llm_prompt_tokens_total': a counter cannot take the value -3" in out.stdout
    assert "malformed: label values must be str, got NoneType" in out.stdout


NODE_PLUGIN = '''
from logmetrics.events import Event
from logmetrics.plugins import Parser
from logmetrics.records.shapes import NODE_STACK
from logmetrics_parsers.errors import node_error


class NodeApp(Parser):
    """parse() only, stateful (the model from a 'serving' line), Node stacks, zero declarations."""
    name = "nodeapp"
    shapes = (NODE_STACK,)

    def zero_series(self, model):
        return [("backend_errors_total", (model, kind)) for kind in ("exception", "timeout")]

    def parse(self, record):
        if record.text.startswith("serving "):
            self.model = record.text.split()[1]
            return [Event("backend_ready", (self.model,), 1)]
        if node_error(record.text):
            return [Event("backend_errors_total", (self.model, "exception"))]
        return []


class Lines(Parser):
    """parse_batch only: counts 'x' lines and says how many lines matched."""
    name = "lines"

    def parse_batch(self, batch):
        n = batch.text.split("\\n").count("x")
        return [Event("backend_restarts_total", (), n)], n, n
'''

NODE_LOG = ("serving m1\n"
            "TypeError: a is undefined\n    at f (/app/a.js:1:2)\n    at g (/app/b.js:3:4)\n"
            "TypeError: b is undefined\n    at h (/app/c.js:5:6)\n"
            "listening\nGET /\n")


def test_a_stateful_parse_plugin_with_shapes_zeros_and_unmatched_lines(tmp_path: Path) -> None:
    """A parse() plugin keeps its model across records; each Node error is one record; its declared
    zero series start at 0 for that model; only the lines of records that matched nothing are unmatched."""
    (tmp_path / "node.py").write_text(NODE_PLUGIN)
    out = oneshot("--plugin", str(tmp_path / "node.py"), "--parser", "nodeapp", "-", stdin=NODE_LOG)
    assert out.returncode == 0, out.stderr
    got = parse(out.stdout)
    assert total(got, "backend_errors_total", model="m1", error_type="exception") == 2
    assert ("backend_errors_total", (("backend", "nodeapp"), ("error_type", "timeout"), ("model", "m1"),
                                     ("source", "stdin"))) in got
    assert total(got, "backend_errors_total", model="unknown") == 0
    assert total(got, "logmetrics_lines_matched_total", parser="nodeapp") == 3
    assert total(got, "logmetrics_lines_unmatched_total", parser="nodeapp") == 2  # 'listening', 'GET /'


def test_zero_series_for_each_model_a_batch_passes_through(tmp_path: Path) -> None:
    """A log that serves m1, then m2, in one batch gets the declared zero series of both models."""
    (tmp_path / "node.py").write_text(NODE_PLUGIN)
    # 'GET /' last: the engine holds a stream's last record back until the end of the input
    (tmp_path / "app.log").write_text("serving m1\nTypeError: a is undefined\n    at f (/app/a.js:1:2)\n"
                                      "serving m2\nGET /\n")
    out = oneshot("--plugin", str(tmp_path / "node.py"), "--parser", "nodeapp", "--source", "stdin",
                  str(tmp_path / "app.log"))
    assert out.returncode == 0, out.stderr
    got = parse(out.stdout)
    for model in ("m1", "m2"):
        assert ("backend_errors_total", (("backend", "nodeapp"), ("error_type", "timeout"), ("model", model),
                                         ("source", "stdin"))) in got, model
    assert total(got, "backend_errors_total", model="m1") == 1


ZERO_PLUGIN = '''
import itertools, os
from logmetrics.events import SEEN, Event
from logmetrics.plugins import Parser


class Zeros(Parser):
    """zero_series as the ZS variable says: raise, junk, an endless generator, an unknown family."""
    name = "zeros"

    def zero_series(self, model):
        how = os.environ["ZS"]
        if how == "raise":
            raise RuntimeError("no zeros today")
        if how == "junk":
            return [("backend_errors_total", (model, 5))]
        if how == "endless":
            return itertools.repeat(("backend_errors_total", (model, "timeout")))
        return [("no_such_family_total", (model,))]

    def parse(self, record):
        if record.text.startswith("model "):
            self.model = record.text.split()[1]
            return [SEEN]
        return [Event("backend_restarts_total", ())] if record.text == "start" else []
'''


@pytest.mark.parametrize("how", ["raise", "junk", "endless", "unknown"])
def test_a_zero_series_that_fails_loses_nothing_else(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                     how: str) -> None:
    """A zero_series that raises or names junk is counted as a parse error and the batch's events
    count; an endless one is cut (no hang); one that names an unknown family is refused as watch
    refuses it, and ``check`` lists the refusal instead of failing."""
    (tmp_path / "zeros.py").write_text(ZERO_PLUGIN)
    monkeypatch.setenv("ZS", how)
    out = oneshot("--plugin", str(tmp_path / "zeros.py"), "--parser", "zeros", "-", stdin="model m1\nstart\nstart\nx\n")
    assert out.returncode == 0, out.stderr
    got = parse(out.stdout)
    assert total(got, "backend_restarts_total", backend="zeros") == 2
    assert total(got, "logmetrics_lines_matched_total", parser="zeros") == 3  # the model line is SEEN
    errors = total(got, "logmetrics_parse_errors_total", parser="zeros")
    assert errors == (1 if how in ("raise", "junk") else 0)
    if how == "endless":
        assert total(got, "backend_errors_total", model="m1", error_type="timeout") == 0
    (tmp_path / "z.log").write_text("model m1\nstart\nx\n")
    checked = subprocess.run([sys.executable, "-m", "logmetrics", "check", "--plugin", str(tmp_path / "zeros.py"),
                              "--parser", "zeros", str(tmp_path / "z.log")], capture_output=True, text=True,
                             timeout=60, env={**os.environ, "ZS": how})
    assert checked.returncode == 0 and "Traceback" not in checked.stderr, checked.stderr
    if how == "unknown":
        assert "1 events refused" in checked.stdout and "no_such_family_total" in checked.stdout, checked.stdout


def test_a_log_whose_lines_end_in_a_lone_cr_is_not_lost(tmp_path: Path) -> None:
    """A log whose lines end in a lone \\r (no \\n): a parser that reads each as a record is not
    taken to claim more records than the batch holds, and what it read counts."""
    sample = Path(__file__).resolve().parent.parent / "samples" / "vllm" / "v1-0.10.log"
    (tmp_path / "cr.log").write_bytes(sample.read_bytes()[:200_000].replace(b"\n", b"\r"))
    out = oneshot("--parser", "vllm", str(tmp_path / "cr.log"))
    got = parse(out.stdout)
    assert total(got, "logmetrics_parse_errors_total", parser="vllm") == 0, out.stderr
    assert total(got, "logmetrics_lines_matched_total", parser="vllm") >= 1


def test_a_parse_batch_plugin_says_how_many_lines_matched(tmp_path: Path) -> None:
    """A parse_batch() plugin's third value, its matched lines, decides the unmatched lines."""
    (tmp_path / "node.py").write_text(NODE_PLUGIN)
    out = oneshot("--plugin", str(tmp_path / "node.py"), "--parser", "lines", "-", stdin="x\ny\nx\nz\nw\n")
    got = parse(out.stdout)
    assert total(got, "backend_restarts_total", backend="lines") == 2
    assert total(got, "logmetrics_lines_unmatched_total", parser="lines") == 3


def test_every_line_of_a_matched_vllm_traceback_is_recognised() -> None:
    """A vLLM error record of five lines adds nothing to the unmatched lines; a stray line adds one."""
    trace = ("ERROR 04-10 03:35:28 [serving_chat.py:200] Error in chat completion\n"
             "Traceback (most recent call last):\n"
             '  File "/app/x.py", line 3, in run\n'
             "    raise ValueError('bad')\n"
             "ValueError: bad\n")
    got = parse(oneshot("--parser", "vllm", "-", stdin=STATS + trace + "a stray line\n").stdout)
    assert total(got, "backend_errors_total") == 1
    assert total(got, "logmetrics_lines_unmatched_total", parser="vllm") == 1


TB_HEAD = 'ERROR 01-02 03:04:05 [serving_chat.py:200] Error in chat completion\nTraceback (most recent call last):\n'
TB_TAIL = '  File "/app/x.py", line 3, in f\n    g()\ntorch.OutOfMemoryError: CUDA out of memory.\n'


def _vllm_errors(hold: float, force: bool) -> tuple[float, float]:
    """(errors counted, oom errors) after a traceback arrives in two reads with a quiet poll between."""
    from logmetrics.engine.engine import Engine
    from logmetrics.plugins import discover
    from logmetrics.sources.chunks import Chunk
    from logmetrics.store.store import Store

    store = Store()
    engine = Engine(discover(), store, parser="vllm", hold=hold)
    engine.feed(Chunk("v.log", TB_HEAD.encode(), time.time()))
    engine.idle(force=force)
    engine.feed(Chunk("v.log", (TB_TAIL + 'INFO:     127.0.0.1:1 - "GET /health HTTP/1.1" 200 OK\n').encode(),
                      time.time()))
    engine.finish()
    errors = {k[1][-1]: v for k, v in store.counters.items() if k[0] == "backend_errors_total" and v}
    return sum(errors.values()), errors.get("oom", 0.0)


def test_a_quiet_poll_inside_a_record_does_not_cut_it() -> None:
    """A traceback written in two pieces with a quiet poll between is one record: one error, of its type."""
    assert _vllm_errors(hold=1000.0, force=False) == (1.0, 1.0)


def test_a_held_back_record_counts_once_the_stream_is_quiet() -> None:
    """After the hold time (or when forced, as before a state save) the held-back record counts by itself."""
    assert _vllm_errors(hold=0.0, force=False)[0] >= 1.0
    assert _vllm_errors(hold=1000.0, force=True)[0] >= 1.0


def _held_errors(written_ago: float | None) -> float:
    """Errors counted after a traceback's head is fed, from a file last written ``written_ago``
    seconds before the read (None: not known), and the engine went idle once, with 5 s of hold."""
    from logmetrics.engine.engine import Engine
    from logmetrics.plugins import discover
    from logmetrics.sources.chunks import Chunk
    from logmetrics.store.store import Store

    store = Store()
    engine = Engine(discover(), store, parser="vllm", hold=5.0)
    now = time.time()
    engine.feed(Chunk("v.log", TB_HEAD.encode(), now, None if written_ago is None else now - written_ago))
    engine.idle()
    return sum(v for k, v in store.counters.items() if k[0] == "backend_errors_total")


def test_the_hold_counts_from_the_files_last_write() -> None:
    """A record read from a file quiet for the hold time already counts at the next idle; one just
    written, or from a read that did not reach the end of its file, is held."""
    assert _held_errors(written_ago=10.0) == 1.0
    assert _held_errors(written_ago=0.0) == 0.0
    assert _held_errors(written_ago=None) == 0.0
