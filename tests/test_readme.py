"""The docs' promises: the plugin page's example works as shown, the metric table is current, and
the README stays one page that links every topic."""

from __future__ import annotations

import random
import re
import subprocess
import sys
from collections.abc import Iterable
from pathlib import Path

import pytest

from logmetrics.engine.parsing import parse_records
from logmetrics.events import Event
from logmetrics.plugins import Parser
from logmetrics.records import Batch, Record
from logmetrics.store import catalog
from logmetrics.testing import assert_fast_path_matches

ROOT = Path(__file__).resolve().parent.parent
README = (ROOT / "README.md").read_text()
PLUGINS = (ROOT / "docs" / "plugins.md").read_text()
METRICS = (ROOT / "docs" / "metrics.md").read_text()


def cli(*args: str, cwd: Path, stdin: str = "") -> subprocess.CompletedProcess[str]:
    """Run the logmetrics CLI as a user would."""
    return subprocess.run([sys.executable, "-m", "logmetrics", *args], cwd=cwd, input=stdin,
                          capture_output=True, text=True, timeout=60)


def example_plugin() -> str:
    """The plugin page's example plugin source (the Python block that defines MyGateway)."""
    blocks: list[str] = re.findall(r"```python\n(.*?)```", PLUGINS, re.S)
    [code] = [b for b in blocks if "class MyGateway" in b]
    return code


def fast_example_plugin() -> str:
    """The plugin page's example plugin with the fast path's two members added to its class, as
    the page says (the block that defines ``parse_run``: its imports, then the members)."""
    blocks: list[str] = re.findall(r"```python\n(.*?)```", PLUGINS, re.S)
    [code] = [b for b in blocks if "def parse_run" in b]
    imports, members = code.split("# ... and in MyGateway's class body, beside parse():\n")
    return imports + example_plugin() + "\n" + members


def test_example_fast_path_gives_what_parse_gives() -> None:
    """The plugin page's fast path, on request lines mixed with others, gives what ``parse`` gives
    record by record (the kit's assertion), and reads the request lines without ``parse``."""
    space: dict[str, object] = {}
    exec(compile(fast_example_plugin(), "my_gateway.py", "exec"), space)  # the page's code, as a user writes it
    assert "parse_run" in vars(space["MyGateway"])
    fast = space["MyGateway"]
    assert isinstance(fast, type) and issubclass(fast, Parser)
    rnd = random.Random(3)
    lines = [f"ts={i} request done model={rnd.choice('ab')} prompt_tokens={rnd.randint(1, 99)} "
             f"completion_tokens={rnd.randint(1, 99)} duration_ms={rnd.randint(1, 9999)} "
             f"status={rnd.choice((200, 200, 404, 500))}" for i in range(300)]
    lines += ["ts=9 starting up on port 8080", "Traceback (most recent call last):", "  File 'x'", "ValueError: x"]
    text = "\n".join(rnd.sample(lines, len(lines))) + "\n"
    assert assert_fast_path_matches(fast, text)[1] == 300
    calls = 0

    def counting(self: Parser, record: Record) -> Iterable[Event]:
        nonlocal calls
        calls += 1
        return ()

    runs_only = type("Counted", (fast,), {"parse": counting})
    matched = parse_records(runs_only(), Batch("test", "\n".join(lines[:300]) + "\n", 0.0, 300))[1]
    assert (matched, calls) == (300, 0)


def test_metric_reference_matches_the_catalog() -> None:
    """The metric reference page's table is exactly what 'logmetrics metrics' prints."""
    block = METRICS.split("<!-- metrics:begin -->\n", 1)[1].split("<!-- metrics:end -->", 1)[0]
    assert block == catalog.markdown()
    assert cli("metrics", cwd=ROOT).stdout == catalog.markdown()


def test_example_plugin_is_listed(tmp_path: Path) -> None:
    """'logmetrics parsers --plugin my_gateway.py' lists the plugin page's plugin with its origin."""
    (tmp_path / "my_gateway.py").write_text(example_plugin())
    out = cli("parsers", "--plugin", "my_gateway.py", cwd=tmp_path)
    assert out.returncode == 0, out.stderr
    assert "mygateway        file my_gateway.py  (claims: *mygateway*)" in out.stdout.splitlines()
    assert any(line.startswith("vllm ") for line in out.stdout.splitlines())


def test_example_plugin_output_is_as_shown(tmp_path: Path) -> None:
    """The plugin page's plugin, fed its line, prints its token counters as shown."""
    (tmp_path / "my_gateway.py").write_text(example_plugin())
    shown = PLUGINS.split("| logmetrics watch - --plugin my_gateway.py", 1)[1].split("```", 1)[0]
    expected = [line for line in shown.splitlines() if line.startswith("llm_")]
    assert len(expected) == 2
    line = "ts=1 request done model=llama3 prompt_tokens=12 completion_tokens=40 duration_ms=850 status=200\n"
    out = cli("watch", "-", "--plugin", "my_gateway.py", "--parser", "mygateway", "--oneshot",
              cwd=tmp_path, stdin=line)
    assert out.returncode == 0, out.stderr
    for want in expected:
        assert want in out.stdout.splitlines()
    assert 'llm_requests_total{backend="mygateway",model="llama3",outcome="ok",source="stdin"} 1.0' in out.stdout
    assert 'llm_request_duration_seconds_bucket{backend="mygateway",le="1.28",model="llama3",source="stdin"} 1.0' \
        in out.stdout


def test_example_plugin_check(tmp_path: Path) -> None:
    """'logmetrics check' on the plugin page's plugin reports matched records and unmatched shapes."""
    (tmp_path / "my_gateway.py").write_text(example_plugin())
    log = tmp_path / "gateway.log"
    log.write_text("ts=1 request done model=a prompt_tokens=1 completion_tokens=2 duration_ms=3 status=500\n"
                   "ts=2 starting up on port 8080\nts=3 starting up on port 8081\n")
    out = cli("check", "--plugin", "my_gateway.py", "--parser", "mygateway", str(log), cwd=tmp_path)
    assert out.returncode == 0, out.stderr
    assert "3 records, 1 matched, 0 used, 2 unmatched" in out.stdout
    assert "2  ts=2 starting up on port 8080" in out.stdout


def test_check_does_not_count_zero_started_series_as_matches(tmp_path: Path) -> None:
    """'logmetrics check' lists series a parser starts at 0 apart from the rules that matched, and
    counts the line that named the model as used, not unmatched."""
    log = tmp_path / "vllm.log"
    log.write_text("INFO 06-19 15:38:02 [utils.py:326] non-default args: {'model': 'm1'}\nhello\n")
    out = cli("check", "--parser", "vllm", str(log), cwd=tmp_path).stdout
    assert "2 records, 0 matched, 1 used, 1 unmatched" in out, out
    assert "series started at 0" in out and "backend_errors_total{m1,oom}" in out
    assert "\nmodel " not in out, out


def test_check_counts_no_zero_increment_as_an_event(tmp_path: Path) -> None:
    """A zero increment a rule emits next to real ones is listed as a series started at 0, not as an event."""
    root = Path(__file__).resolve().parent.parent
    out = cli("check", str(root / "samples" / "whisper" / "whisper-cpp-cli.log"), cwd=tmp_path).stdout
    assert "3 x backend_restarts_total{}" in out, out
    assert "1 x llm_requests_total{base.en,ok}" in out, out
    assert "x llm_requests_total{base.en,error}" not in out, out
    assert "          llm_requests_total{base.en,error}" in out.split("series started at 0", 1)[1], out


def test_example_gateway_log_is_routed_by_sniff(tmp_path: Path) -> None:
    """The plugin page's gateway.log, named unlike the plugin's claims, reaches it through sniff() as shown."""
    (tmp_path / "my_gateway.py").write_text(example_plugin())
    shown = PLUGINS.split("$ logmetrics check --plugin my_gateway.py gateway.log\n", 1)[1].split("\n```", 1)[0]
    lines = re.findall(r"^\s+'(ts=[^']*)'", PLUGINS.split("> gateway.log", 1)[0][-400:], re.M)
    first = PLUGINS.split("> gateway.log", 1)[0].rsplit("$ printf '%s\\n' '", 1)[1].split("'", 1)[0]
    (tmp_path / "gateway.log").write_text("\n".join([first, *lines]) + "\n")
    out = cli("check", "--plugin", "my_gateway.py", "gateway.log", cwd=tmp_path)
    assert out.returncode == 0, out.stderr
    assert out.stdout.splitlines()[:2] == shown.splitlines()  # the summary, and how it was routed
    served = cli("watch", "--oneshot", "--plugin", "my_gateway.py", "gateway.log", cwd=tmp_path).stdout
    assert 'llm_prompt_tokens_total{backend="mygateway",model="llama3",source="gateway.log"} 12.0' in served


def test_the_readme_is_one_page_that_links_every_doc() -> None:
    """README.md reads in five minutes (at most 2,000 words) and links every page under docs/."""
    assert len(README.split()) <= 2000
    for page in sorted((ROOT / "docs").glob("*.md")):
        assert f"](docs/{page.name})" in README, page.name


def test_every_relative_link_of_the_docs_resolves() -> None:
    """Each relative link in README.md and docs/*.md names a file that exists, and an anchor a heading of it."""
    def anchors(path: Path) -> set[str]:
        heads = re.findall(r"^#+ (.+)$", re.sub(r"```.*?```", "", path.read_text(), flags=re.S), re.M)
        return {re.sub(r"[^\w\- ]", "", h.strip().lower()).replace(" ", "-") for h in heads}

    broken = []
    for doc in [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]:
        for target in re.findall(r"\]\(([^)\s]+)\)", re.sub(r"```.*?```", "", doc.read_text(), flags=re.S)):
            if target.startswith(("http://", "https://", "mailto:")):
                continue
            file, _, anchor = target.partition("#")
            path = (doc.parent / file).resolve() if file else doc
            if not path.exists() or (anchor and path.suffix == ".md" and anchor not in anchors(path)):
                broken.append(f"{doc.relative_to(ROOT)}: {target}")
    assert not broken, broken


BAD_PLUGIN = '''
from logmetrics.events import Event
from logmetrics.plugins import Parser


class Careless(Parser):
    name = "careless"
    claims = ("*careless*",)

    def parse(self, record):
        if "boom" in record.text:
            raise ValueError("cannot read this")
        if "done" in record.text:
            yield Event("llm_requests_total", ("m1",), 1)  # one label short of (model, outcome)
'''


def test_check_strict_fails_on_a_parser_fault(tmp_path: Path) -> None:
    """'check --strict' exits 1 when the parser raises or makes an event the engine refuses, 0
    otherwise; without --strict check reports the faults and exits 0."""
    (tmp_path / "careless.py").write_text(BAD_PLUGIN)
    (tmp_path / "careless.log").write_text("done\nboom\n")
    (tmp_path / "careless-ok.log").write_text("nothing to see\n")
    loose = cli("check", "--plugin", "careless.py", "careless.log", cwd=tmp_path)
    assert loose.returncode == 0 and "1 parse errors, 1 events refused" in loose.stdout, loose.stdout
    strict = cli("check", "--strict", "--plugin", "careless.py", "careless.log", cwd=tmp_path)
    assert strict.returncode == 1 and "--strict" in strict.stderr, strict.stderr
    both = cli("check", "--strict", "--plugin", "careless.py", "careless.log", "careless-ok.log", cwd=tmp_path)
    assert both.returncode == 1 and "(1 parse errors, 1 events refused)" in both.stdout, both.stdout
    clean = cli("check", "--strict", "--plugin", "careless.py", "careless-ok.log", cwd=tmp_path)
    assert clean.returncode == 0, clean.stdout + clean.stderr


#: A plugin whose fast path counts one request too many per run, and whose parse is right.
OFF_BY_ONE = """
from logmetrics.events import Event
from logmetrics.plugins import Parser


class OffByOne(Parser):
    name = "offbyone"
    frequent = "done"

    def parse(self, record):
        return [Event("llm_requests_total", ("m", "ok"), 1)] if record.text == "done" else []

    def parse_run(self, run):
        n = len(run.lines())
        return [Event("llm_requests_total", ("m", "ok"), n + 1)], n
"""


def test_check_strict_holds_the_fast_path_to_parse(tmp_path: Path) -> None:
    """'check --strict' runs a parser's fast path as watch runs it: one that gives other figures
    than parse fails the check, naming the series; without --strict the check does not run it."""
    (tmp_path / "offbyone.py").write_text(OFF_BY_ONE)
    (tmp_path / "gateway.log").write_text("done\ndone\nother\ndone\n")
    strict = cli("check", "--strict", "--plugin", "offbyone.py", "--parser", "offbyone", "gateway.log", cwd=tmp_path)
    assert strict.returncode == 1, strict.stdout + strict.stderr
    assert "llm_requests_total{m,ok}: parse gives 3.0, the fast path 5.0" in strict.stdout
    loose = cli("check", "--plugin", "offbyone.py", "--parser", "offbyone", "gateway.log", cwd=tmp_path)
    assert loose.returncode == 0 and "fast path" not in loose.stdout


def test_the_quick_start_runs_as_written(tmp_path: Path) -> None:
    """The README's quick start, run word for word in a copy of the repository: it installs, serves
    the samples' metrics at the URL it prints, and every backend's sample is counted there."""
    import os
    import select
    import signal
    import time
    import urllib.request

    block = README.split("## Quick start", 1)[1].split("```sh\n", 1)[1].split("```", 1)[0].strip()
    assert block.startswith("python3 -m venv .venv") and "logmetrics watch" in block, block
    files = subprocess.run(["git", "ls-files", "-z"], cwd=ROOT, capture_output=True, check=True).stdout
    copy = tmp_path / "clone"
    for name in filter(None, files.decode().split("\0")):
        src, dst = ROOT / name, copy / name
        if src.is_file():
            dst.parent.mkdir(parents=True, exist_ok=True)
            dst.write_bytes(src.read_bytes())
    env = {k: v for k, v in os.environ.items() if not k.startswith(("VIRTUAL_ENV", "PYTHONPATH"))}
    proc = subprocess.Popen(["bash", "-c", block], cwd=copy, env=env, stdout=subprocess.DEVNULL,
                            stderr=subprocess.PIPE, start_new_session=True)
    assert proc.stderr is not None
    url, said = "", []
    try:
        deadline = time.monotonic() + 600  # pip installs the dependencies first
        while not url and time.monotonic() < deadline and proc.poll() is None:
            if select.select([proc.stderr], [], [], 1.0)[0]:
                line = proc.stderr.readline().decode(errors="replace")
                said.append(line)
                if "serving metrics at " in line:
                    url = line.split("serving metrics at ", 1)[1].strip()
        assert url, "".join(said[-20:])
        want = {"vllm", "llamacpp", "whisper", "embeddings", "supabase-kong", "api", "ui"}
        seen: set[str] = set()
        while time.monotonic() < deadline and not want <= seen:
            with urllib.request.urlopen(url, timeout=10) as resp:
                text = resp.read().decode()
            seen = set(re.findall(r'^logmetrics_lines_matched_total\{parser="([^"]+)"\}', text, re.M))
            seen |= set(re.findall(r'^\w+\{backend="([^"]+)"', text, re.M))
            time.sleep(0.5)
        assert want <= seen, sorted(seen)
    finally:
        os.killpg(proc.pid, signal.SIGTERM)
        proc.wait(timeout=30)


def test_the_plugin_pages_test_kit_example_runs(tmp_path: Path) -> None:
    """The plugin page's tests, on its plugin and a sample of its own: the golden file is written
    once, then holds; a sample changed since fails with the series that moved; the fast path holds."""
    from logmetrics.testing import GoldenError, assert_fast_path_matches, check_golden

    plugin = tmp_path / "my_gateway.py"
    plugin.write_text(example_plugin())
    log = tmp_path / "samples" / "mygateway" / "busy.log"
    log.parent.mkdir(parents=True)
    line = "ts={} request done model=llama3 prompt_tokens=12 completion_tokens=40 duration_ms=850 status=200\n"
    log.write_text("".join(line.format(i) for i in range(5)))
    assert check_golden(log, "mygateway", plugins=[str(plugin)], update=True, cwd=tmp_path) is True
    assert 'llm_prompt_tokens_total{backend="mygateway",model="llama3",source="sample"} 60.0' \
        in log.with_suffix(".expected.prom").read_text()
    assert check_golden(log, "mygateway", plugins=[str(plugin)], update=False, cwd=tmp_path) is False
    with open(log, "a") as f:
        f.write(line.format(5))
    with pytest.raises(GoldenError, match=r"wrong value llm_prompt_tokens_total\{.*expected 60.0, got 72.0"):
        check_golden(log, "mygateway", plugins=[str(plugin)], update=False, cwd=tmp_path)
    namespace: dict[str, object] = {}
    exec(compile(example_plugin(), str(plugin), "exec"), namespace)  # the class itself, for the fast path
    gateway = namespace["MyGateway"]
    assert isinstance(gateway, type)
    run = assert_fast_path_matches(gateway, log.read_text())
    assert run[1] == 6
    kit = [b for b in re.findall(r"```python\n(.*?)```", PLUGINS, re.S) if "check_golden" in b]
    assert kit and "assert_fast_path_matches(MyGateway" in kit[0] and 'plugins=["my_gateway.py"]' in kit[0]
