"""``logmetrics backfill``: samples per step of log time, and blocks that a real Prometheus serves.

The end-to-end test needs Debian's ``prometheus`` package (promtool and the server; scripts/test
installs it).
"""

from __future__ import annotations

import itertools
import json
import os
import re
import resource
import shutil
import subprocess
import sys
import urllib.parse
from datetime import UTC, datetime, timedelta
from pathlib import Path
from unittest import mock

import pytest
import yaml
from hypothesis import given, settings
from hypothesis import strategies as st

from tests.helpers import parse
from tests.test_prometheus import PROM_TIMEOUT, Piped, binary, free_port, http_get, stop, wait_ready

ROOT = Path(__file__).resolve().parent.parent
SAMPLES = ROOT / "samples"
# vLLM's stamps carry no year: the file's modification time gives it (2025 here)
VLLM_MTIME = 1755820800.0  # 2025-08-22T00:00:00Z
HTTP_SAMPLES = ("supabase/kong.log", "supabase/rest.log", "supabase/storage.log", "api/gunicorn-workers.log")
SAMPLE = re.compile(r'(?P<name>[a-zA-Z_:][\w:]*)\{(?P<labels>.*)\} (?P<value>\S+) (?P<ts>\S+)')
LABEL = re.compile(r'(\w+)="((?:[^"\\]|\\.)*)"')
Series = dict[tuple[str, tuple[tuple[str, str], ...]], list[tuple[float, float]]]


def logmetrics(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    """Run the real command line."""
    return subprocess.run([sys.executable, "-m", "logmetrics", *args], capture_output=True, text=True,
                          timeout=300, check=False, env=env)


def openmetrics(path: Path) -> Series:
    """(sample name, sorted labels) -> [(timestamp, value)] of an OpenMetrics text with timestamps.

    (prometheus_client's parser refuses a histogram with more than one timestamp, so the samples
    are read here; promtool, the real reader, is run by the end-to-end test.)"""
    out: Series = {}
    text = path.read_text()
    assert text.endswith("# EOF\n")
    for line in text.splitlines():
        if line.startswith("#"):
            continue
        m = SAMPLE.fullmatch(line)
        assert m is not None, line
        labels = tuple(sorted((k, v.replace('\\"', '"').replace("\\\\", "\\"))
                              for k, v in LABEL.findall(m["labels"])))
        out.setdefault((m["name"], labels), []).append((float(m["ts"]), float(m["value"])))
    return out


def oneshot(*paths: Path) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    """What ``watch --oneshot`` reports for the files."""
    proc = logmetrics("watch", "--oneshot", *map(str, paths))
    assert proc.returncode == 0, proc.stderr
    return parse(proc.stdout)


def copy(tmp: Path, name: str, mtime: float | None = None) -> Path:
    """A sample copied into ``tmp`` (its modification time set, for year-less stamps)."""
    dst = tmp / name.replace("/", "-")
    shutil.copyfile(SAMPLES / name, dst)
    if mtime is not None:
        os.utime(dst, (mtime, mtime))
    return dst


def test_steps_follow_log_time_and_end_as_oneshot(tmp_path: Path) -> None:
    """One sample per series per step at the steps' ends while it changes and for 5 minutes after
    (none over a longer quiet stretch); the last ones, at the log's end, equal watch --oneshot's."""
    log = copy(tmp_path, "vllm/v1-0.10.log", VLLM_MTIME)
    out = tmp_path / "om"
    proc = logmetrics("backfill", str(log), "--out", str(out), "--openmetrics-only", "--timezone", "UTC")
    assert proc.returncode == 0, proc.stderr
    got = openmetrics(out / "backfill.om")
    want = oneshot(log)
    first, last = 1755784931, 1755785411  # 2025-08-21T14:02:11Z and 14:10:11Z, the log's first and last stamps
    for key, value in want.items():
        if key[0].startswith("logmetrics_") or key[0].endswith("_created"):
            assert key not in got, f"{key[0]}: the engine's own families are not backfilled"
            continue
        samples = got[key]
        stamps = [t for t, _ in samples]
        assert stamps == sorted(stamps) and all(t % 15 == 0 for t in stamps), key
        assert samples[-1] == (float(last - last % 15 + 15), value), key
        assert stamps[0] >= first - first % 15, key
        if key[0].endswith(("_total", "_bucket", "_count", "_sum")):
            assert samples[0][1] == 0, f"{key}: a counter series starts at zero"
        rest = samples[1:] if samples[0][1] == 0 else samples
        for (a, va), (b, vb) in itertools.pairwise(rest):  # every step, but across a quiet stretch
            assert b - a == 15.0 or vb == va, (key, a, b)
    assert {k for k in got} == {k for k in want if not k[0].startswith("logmetrics_") and not k[0].endswith("_created")}


def test_start_and_end_bound_what_is_written(tmp_path: Path) -> None:
    """--start/--end keep samples inside them; counters still count from the start of the file."""
    log = copy(tmp_path, "vllm/v1-0.10.log", VLLM_MTIME)
    whole, part = tmp_path / "whole", tmp_path / "part"
    args = ("--openmetrics-only", "--timezone", "UTC", "--step", "1m")
    assert logmetrics("backfill", str(log), "--out", str(whole), *args).returncode == 0
    proc = logmetrics("backfill", str(log), "--out", str(part), *args, "--start", "2025-08-21T14:05:00Z",
                      "--end", "1755785220")  # 14:07:00Z
    assert proc.returncode == 0, proc.stderr
    a, b = openmetrics(whole / "backfill.om"), openmetrics(part / "backfill.om")
    assert b, "something was written"
    for key, samples in b.items():
        assert all(1755785100 <= t <= 1755785220 for t, _ in samples), key
        assert samples == [s for s in a[key] if 1755785100 <= s[0] <= 1755785220], key


def test_start_after_the_log_writes_nothing_and_says_so(tmp_path: Path) -> None:
    """--start after the log's last time: no sample, a warning with the log's times, exit 0."""
    log = copy(tmp_path, "vllm/v1-0.10.log", VLLM_MTIME)
    proc = logmetrics("backfill", str(log), "--out", str(tmp_path / "out"), "--openmetrics-only", "--timezone", "UTC",
                      "--start", "2030-01-01T00:00:00Z")
    assert proc.returncode == 0, proc.stderr
    assert "no sample written: the log's times run from 2025-08-21T14:" in proc.stderr, proc.stderr
    assert "0 samples" in proc.stderr


def test_files_merge_by_log_time(tmp_path: Path) -> None:
    """Several files: their series share one time line, each from the step of its first line."""
    paths = [copy(tmp_path, name) for name in HTTP_SAMPLES]
    out = tmp_path / "om"
    proc = logmetrics("backfill", *map(str, paths), "--out", str(out), "--openmetrics-only", "--step", "5s")
    assert proc.returncode == 0, proc.stderr
    got = openmetrics(out / "backfill.om")
    want = oneshot(*paths)
    http = {k: v for k, v in want.items() if k[0] == "http_requests_total"}
    assert len({dict(k[1])["source"] for k in http}) >= 3, "several files feed http_requests_total"
    for key, value in http.items():
        assert got[key][-1][1] == value, key
    kong = [s for k, s in got.items() if k[0] == "http_requests_total" and dict(k[1])["source"].endswith("kong.log")]
    # kong's first access line is stamped 02/Mar/2025:10:00:05 +0000: a zero at the start of its
    # step, its count at the end
    first = min(kong, key=lambda s: s[0][0])
    assert first[:2] == [(1740909605.0, 0.0), (1740909610.0, 1.0)]
    ends = {s[-1][0] for s in got.values()}
    assert ends == {max(ends)}, "every series is written up to the last step"


def test_include_exclude_and_input_globs_choose_the_files(tmp_path: Path) -> None:
    """--include/--exclude, and a --config file's [[input]] globs, choose the files read under a
    directory, as in watch; globs that leave out every file are one error line."""
    logs = tmp_path / "logs"
    logs.mkdir()
    for name in HTTP_SAMPLES:
        copy(logs, name)

    def sources(*args: str) -> set[str]:
        out = tmp_path / "om"
        shutil.rmtree(out, ignore_errors=True)
        proc = logmetrics("backfill", "--out", str(out), "--openmetrics-only", *args)
        assert proc.returncode == 0, proc.stderr
        series = openmetrics(out / "backfill.om")
        return {Path(dict(k[1])["source"]).name for k in series if k[0] == "http_requests_total"}

    assert sources(str(logs)) == {"supabase-kong.log", "supabase-rest.log", "supabase-storage.log",
                                  "api-gunicorn-workers.log"}
    assert sources(str(logs), "--include", "supabase-*", "--exclude", "*rest*") == {"supabase-kong.log",
                                                                                     "supabase-storage.log"}
    config = tmp_path / "in.toml"
    config.write_text(f'[[input]]\npath = "{logs}"\ninclude = ["api-*"]\n')
    assert sources("--config", str(config)) == {"api-gunicorn-workers.log"}
    proc = logmetrics("backfill", str(logs), "--out", str(tmp_path / "o"), "--include", "*.txt")
    assert proc.returncode == 2 and "leave out every one" in proc.stderr and proc.stderr.count("\n") == 1, proc.stderr


def test_errors_are_one_line(tmp_path: Path) -> None:
    """A bad --step, --start or time zone, a missing promtool: one line naming the flag."""
    log = copy(tmp_path, "vllm/v1-0.10.log")
    for args, needle in ((("--step", "soon"), "--step"), (("--start", "yesterday"), "--start 'yesterday'"),
                         (("--timezone", "Mars/Olympus"), "--timezone"),
                         (("--start", "2025-01-02T00:00:00Z", "--end", "2025-01-01T00:00:00Z"), "before --start")):
        proc = logmetrics("backfill", str(log), "--out", str(tmp_path / "o"), *args)
        assert proc.returncode == 2 and needle in proc.stderr and proc.stderr.count("\n") == 1, proc.stderr
    env = dict(os.environ, PATH=str(tmp_path / "nothing-here"))
    proc = logmetrics("backfill", str(log), "--out", str(tmp_path / "o"), env=env)
    assert proc.returncode == 2 and "promtool not found" in proc.stderr, proc.stderr


def test_target_labels_go_on_every_series(tmp_path: Path) -> None:
    """--target-label job=... instance=... is on every series written, histograms' included, so that
    the history lines up with scraped series; a label logmetrics sets itself is refused."""
    log = copy(tmp_path, "llamacpp/server-era-c.log")
    out = tmp_path / "om"
    proc = logmetrics("backfill", str(log), "--out", str(out), "--openmetrics-only", "--timezone", "UTC",
                      "--target-label", "job=logmetrics", "--target-label", "instance=gpu-1:9877")
    assert proc.returncode == 0, proc.stderr
    got = openmetrics(out / "backfill.om")
    assert any(key[0].endswith("_bucket") for key in got)
    assert got and all({("job", "logmetrics"), ("instance", "gpu-1:9877")} <= set(key[1]) for key in got)
    for bad in ("model=x", "__name__=x", "9lives=x", "job"):
        proc = logmetrics("backfill", str(log), "--out", str(out), "--openmetrics-only", "--target-label", bad)
        assert proc.returncode == 2 and "--target-label" in proc.stderr and proc.stderr.count("\n") == 1, proc.stderr


def test_a_quiet_stretch_costs_nothing(tmp_path: Path) -> None:
    """Two requests three hours apart: a series is written for 5 minutes after each change and at
    the end, not at every step between; '--staleness forever' writes every step, as before."""
    log = tmp_path / "api.log"
    log.write_text('2025-03-02 10:00:00 +0000 INFO:     10.0.0.1:5 - "GET /v1/models HTTP/1.1" 200 OK\n'
                   '2025-03-02 13:00:00 +0000 INFO:     10.0.0.1:5 - "GET /v1/models HTTP/1.1" 200 OK\n')

    def written(*args: str) -> list[tuple[float, float]]:
        out = tmp_path / f"om{len(args)}"
        proc = logmetrics("backfill", str(log), "--parser", "api", "--out", str(out), "--openmetrics-only", *args)
        assert proc.returncode == 0, proc.stderr
        (samples,) = [v for k, v in openmetrics(out / "backfill.om").items() if k[0] == "http_requests_total"]
        return samples

    quiet = written()
    assert [v for _, v in quiet][-1] == 2.0 and len(quiet) <= 2 * (300 // 15 + 2) + 1
    assert all(t <= 1740909600 + 330 or t >= 1740920400 for t, _ in quiet)  # nothing in the quiet hours
    full = written("--staleness", "forever")
    assert len(full) >= 3 * 3600 // 15 and full[-1] == quiet[-1]


def test_backfill_of_the_samples_grows_with_the_log(tmp_path: Path) -> None:
    """The sample logs span years: their OpenMetrics text stays small (a few samples per line),
    where writing every step between them would have been millions of samples."""
    out = tmp_path / "om"
    proc = logmetrics("backfill", str(ROOT / "samples"), "--out", str(out), "--openmetrics-only", "--timezone", "UTC")
    assert proc.returncode == 0, proc.stderr
    assert (out / "backfill.om").stat().st_size < 10 << 20
    assert int(re.search(r"(\d+) samples", proc.stderr)[1]) < 200_000, proc.stderr  # type: ignore[index]  # a match


def test_a_low_open_file_limit_writes_the_same_text(tmp_path: Path) -> None:
    """Under an open-file limit lower than the number of families written, the OpenMetrics text is
    byte for byte the one written without it: a family's spool file is open only while it is
    appended to (it failed with a traceback at the 21st family). The two runs hash strings with
    other seeds: the order of the series does not hang on it."""
    texts = []
    for name, limit, seed in (("free", None, "1"), ("tight", 24, "2")):
        out = tmp_path / name
        cmd = [sys.executable, "-m", "logmetrics", "backfill", str(ROOT / "samples"), "--out", str(out),
               "--openmetrics-only", "--timezone", "UTC"]
        proc = subprocess.run(cmd, capture_output=True, text=True, timeout=300, check=False,
                              env={**os.environ, "PYTHONHASHSEED": seed}, preexec_fn=(
            None if limit is None else lambda n=limit: resource.setrlimit(resource.RLIMIT_NOFILE, (n, n))))
        assert proc.returncode == 0, proc.stderr
        texts.append((out / "backfill.om").read_bytes())
    assert texts[0] == texts[1]
    assert texts[0].count(b"# TYPE ") > 24


def test_blocks_of_a_failed_promtool_run_are_removed(tmp_path: Path) -> None:
    """When promtool fails after it made some blocks, those are removed (a part of the data would
    pass for the whole) and the error says so; what was in --out before stays."""
    real = binary("promtool")
    fake = tmp_path / "bin" / "promtool"
    fake.parent.mkdir()
    fake.write_text(f'#!/bin/sh\n"{real}" "$@" >/dev/null 2>&1\necho "it went wrong" >&2\nexit 1\n')
    fake.chmod(0o755)
    out = tmp_path / "out"
    out.mkdir()
    (out / "keep").write_text("mine")
    env = {**os.environ, "PATH": f"{fake.parent}{os.pathsep}{os.environ['PATH']}"}
    proc = logmetrics("backfill", str(ROOT / "samples" / "vllm" / "v1-0.33.log"), "--out", str(out), env=env)
    assert proc.returncode == 2, proc.stderr
    assert "it went wrong; the 1 block(s) it had made are removed" in proc.stderr, proc.stderr
    assert sorted(p.name for p in out.iterdir()) == ["keep"]


def test_a_second_run_into_the_same_out_says_the_blocks_there_and_a_killed_ones_spool_goes(tmp_path: Path) -> None:
    """Blocks already in --out are said (Prometheus would load both); the spool a backfill killed
    on the way left there (its process gone) is removed, one of a live process is not."""
    log = str(ROOT / "samples" / "vllm" / "v1-0.33.log")
    out = tmp_path / "out"
    assert logmetrics("backfill", log, "--out", str(out)).returncode == 0
    dead = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, text=True,
                          check=True).stdout.strip()
    (out / f".spool-{dead}-abc").mkdir()
    (out / f".spool-{dead}-abc" / "0").write_text("x")
    (out / f".blocks-{dead}-abc" / "01HV").mkdir(parents=True)  # promtool's work when the run was killed
    (out / f".blocks-{dead}-abc" / "01HV" / "meta.json").write_text("{}")
    (out / f".spool-{os.getpid()}-def").mkdir()
    proc = logmetrics("backfill", log, "--out", str(out))
    assert proc.returncode == 0, proc.stderr
    assert f"--out {out} holds 1 TSDB block(s) already" in proc.stderr, proc.stderr
    assert sorted(p.name for p in out.iterdir() if p.name.startswith(".")) == [f".spool-{os.getpid()}-def"]
    assert sum((p / "meta.json").is_file() for p in out.iterdir()) == 2


def test_a_second_backfill_into_an_out_in_use_is_refused(tmp_path: Path) -> None:
    """While a backfill writes into --out (it holds the directory's lock), another one into it stops
    at once with one line saying so, and leaves it as it was."""
    from logmetrics.offline.omwriter import lock_folder

    out = tmp_path / "out"
    out.mkdir()
    lock = lock_folder(str(out))
    try:
        proc = logmetrics("backfill", str(ROOT / "samples" / "vllm" / "v1-0.33.log"), "--out", str(out))
    finally:
        os.close(lock)
    assert proc.returncode == 2, proc.stderr
    assert f"--out {out}: another backfill is writing into it" in proc.stderr
    assert "Traceback" not in proc.stderr and list(out.iterdir()) == []


# --- end to end: promtool, then a real Prometheus on the blocks ---------------------------------


class Server:
    """A Prometheus server on existing blocks (no scrape targets), with a long retention."""

    def __init__(self, exe: str, storage: Path, workdir: Path) -> None:
        config = workdir / "prometheus.yml"
        config.write_text("global:\n  evaluation_interval: 1m\nscrape_configs: []\n")
        self.url = f"http://127.0.0.1:{free_port()}"
        cmd = [exe, f"--config.file={config}", f"--storage.tsdb.path={storage}", "--storage.tsdb.retention.time=10y",
               f"--web.listen-address={self.url.removeprefix('http://')}", "--log.level=warn"]
        self.proc = subprocess.Popen(cmd, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                                     text=True, errors="replace", cwd=workdir)
        self.piped = Piped(self.proc)

    def query(self, promql: str, at: float) -> dict[tuple[tuple[str, str], ...], float]:
        """Instant query at a past time: labels -> value."""
        qs = urllib.parse.urlencode({"query": promql, "time": str(at)})
        status, _, body = http_get(f"{self.url}/api/v1/query?{qs}")
        assert status == 200, f"{promql}: HTTP {status}: {body}"
        return {tuple(sorted(r["metric"].items())): float(r["value"][1]) for r in json.loads(body)["data"]["result"]}


def blocks(tmp: Path, name: str, paths: list[Path], storage: Path) -> None:
    """Backfill ``paths`` with promtool, and move the blocks into ``storage``."""
    out = tmp / name
    proc = logmetrics("backfill", *map(str, paths), "--out", str(out), "--timezone", "UTC")
    assert proc.returncode == 0, proc.stderr
    made = [p for p in out.iterdir() if p.is_dir()]
    assert made and all((p / "meta.json").is_file() for p in made), proc.stderr
    for p in made:
        shutil.move(str(p), storage / p.name)


def test_prometheus_serves_the_backfilled_samples(tmp_path: Path) -> None:
    """Blocks from promtool in a real Prometheus: increase() of tokens and the HTTP counters at the
    end equal watch --oneshot's, and a recording rule's expression evaluates over the past range."""
    binary("promtool")
    exe = binary("prometheus")
    storage = tmp_path / "tsdb"
    storage.mkdir()
    vllm = [copy(tmp_path, "vllm/v1-0.10.log", VLLM_MTIME)]
    http = [copy(tmp_path, name) for name in HTTP_SAMPLES]
    blocks(tmp_path, "vllm-blocks", vllm, storage)  # August 2025
    blocks(tmp_path, "http-blocks", http, storage)  # March 2025: a second run, other blocks
    want_vllm, want_http = oneshot(*vllm), oneshot(*http)
    vllm_end = 1755785411 - 1755785411 % 15 + 15  # the end of the step of the last line, 14:10:11Z
    http_end = 1740909641 - 1740909641 % 15 + 15  # gunicorn's last line, 2025-03-02T10:00:41Z

    server = Server(exe, storage, tmp_path)
    try:
        wait_ready("prometheus", server.proc, server.piped, server.url, PROM_TIMEOUT)
        tokens = {k: v for k, v in want_vllm.items() if k[0] == "llm_generation_tokens_total"}
        assert tokens and all(v > 0 for v in tokens.values())
        got = server.query("increase(llm_generation_tokens_total[1h])", vllm_end)
        assert {labels: pytest.approx(v, rel=1e-9) for (_n, labels), v in tokens.items()} == got
        counts = {labels: v for (n, labels), v in want_http.items() if n == "http_requests_total"}
        assert len(counts) >= 10
        got = server.query("http_requests_total", http_end)
        assert {tuple(x for x in k if x[0] != "__name__"): v for k, v in got.items()} == counts
        rules = yaml.safe_load((ROOT / "rules" / "logmetrics.rules.yml").read_text())["groups"]
        expr = next(r["expr"] for g in rules for r in g["rules"]
                    if r.get("record") == "backend_model:llm_generation_tokens:rate5m")
        rates = [server.query(expr, at) for at in range(vllm_end - 300, vllm_end + 1, 60)]
        assert all(list(r) == [(("backend", "vllm"), ("model", "qwen2.5-7b"))] for r in rates), rates
        assert all(v >= 0 for r in rates for v in r.values()) and next(iter(rates[-1].values())) > 0, rates
        assert server.query(expr, vllm_end - 3 * 86400) == {}, "nothing before the log"
    finally:
        stop(server.proc)


@pytest.mark.parametrize("block", [64, 1000, 1 << 18])
def test_groups_cut_where_a_step_ends(tmp_path: Path, block: int) -> None:
    """Bisection within read blocks cuts the lines exactly where a per-line reading would."""
    from logmetrics.offline.loggroups import groups
    from logmetrics.records.logtime import LogClock

    lines = ["no time yet, before the first stamp"]
    for i in range(400):
        lines.append(f"INFO 04-10 03:{i // 60 % 60:02d}:{i % 60:02d} [x.py:1] line {i}")
        lines += ["  continued without a time"] * (i % 3)
    log = tmp_path / "x.log"
    log.write_text("\n".join(lines) + "\n")
    mtime = 1712800000.0  # 2024-04-11
    got = list(groups(str(log), 0, 15.0, LogClock(mtime, UTC), block=block))
    assert got[-1][3] == b"" and b"".join(g[3] for g in got).decode() == log.read_text()
    clock = LogClock(mtime, UTC)
    want: dict[int, list[str]] = {}
    first = next(t for line in lines if (t := LogClock(mtime, UTC).stated(line)) is not None)
    for line in lines:
        t = clock.stated(line)
        step = int((t if t is not None else clock.last or first) // 15)
        want.setdefault(step, []).append(line + "\n")
    have: dict[int, list[str]] = {}
    for step, _n, _seq, data, _t in got:
        have.setdefault(step, []).append(data.decode())
    assert {k: "".join(v) for k, v in have.items() if "".join(v)} == {k: "".join(v) for k, v in want.items()}


_STAMPED = {  # a line stating the time T, in the forms of several backends
    "vllm": lambda t: f"INFO {t:%m-%d %H:%M:%S} [x.py:1] served",
    "iso": lambda t: f"__main__: {t:%Y-%m-%d %H:%M:%S},250 | INFO | main.py:92 >>> Task transcribe is starting",
    "json": lambda t: f'{{"level":"info","time":"{t:%Y-%m-%dT%H:%M:%SZ}","msg":"x"}}',
    "kv": lambda t: f"level=info time={t:%Y-%m-%dT%H:%M:%SZ} msg=x",
}
_PLAIN = {  # lines that state no time: a record's continuation, llama-server's, one with a clock time in it
    "indented": "  continued without a time",
    "llama": "slot update_slots: id  1 | task 1 | kv cache rm [0, end)",
    "decoy": "srv  log_server_r: done at 12:34:56, 10 ms",
}


@settings(max_examples=200, deadline=None)
@given(st.lists(st.one_of(
    st.tuples(st.just("stamp"), st.sampled_from([0, 0, 0, 0, 1, 2, 7, 60, 3600]), st.sampled_from(sorted(_STAMPED))),
    st.tuples(st.just("plain"), st.integers(0, 60), st.sampled_from(sorted(_PLAIN)))), min_size=1, max_size=60),
    st.sampled_from([64, 300, 4096, 1 << 18]), st.sampled_from([200, 1 << 22]))
def test_groups_cut_where_a_per_line_reading_would(tmp_path_factory: pytest.TempPathFactory,
                                                    parts: list[tuple[str, int, str]], block: int, cap: int) -> None:
    """Steps a few lines long (a log whose tasks take minutes) and long runs of lines stating no
    time (llama-server's, and ones holding a clock time that is no stamp) are cut where reading
    line by line would cut them, whatever the size of the blocks read, and whatever the size at
    which a step's lines are given in parts (``cap``)."""
    from logmetrics.offline import loggroups
    from logmetrics.offline.loggroups import groups
    from logmetrics.records.logtime import LogClock

    at = datetime(2024, 4, 10, 3, 30, tzinfo=UTC)
    lines: list[str] = []
    for kind, n, form in parts:
        if kind == "stamp":
            at += timedelta(seconds=n)
            lines.append(_STAMPED[form](at))
        else:
            lines += [_PLAIN[form]] * n
    log = tmp_path_factory.mktemp("groups") / "x.log"
    log.write_text("".join(line + "\n" for line in lines))
    mtime = at.timestamp() + 86400
    step = 5.0
    with mock.patch.object(loggroups, "GROUP_BYTES", cap):
        got = list(groups(str(log), 0, step, LogClock(mtime, UTC), block=block))
    assert got[-1][3] == b"" and b"".join(g[3] for g in got).decode() == log.read_text()
    assert [g[2] for g in got] == list(range(len(got)))  # (a step's parts in order)
    clock = LogClock(mtime, UTC)
    first = next((t for line in lines if (t := LogClock(mtime, UTC).stated(line)) is not None), mtime)
    want: dict[int, list[str]] = {}
    for line in lines:
        t = clock.stated(line)
        want.setdefault(int((t if t is not None else clock.last or first) // step), []).append(line + "\n")
    have: dict[int, list[str]] = {}
    for n, _n, _seq, data, _t in got:
        have.setdefault(n, []).append(data.decode())
    assert {k: "".join(v) for k, v in have.items() if "".join(v)} == {k: "".join(v) for k, v in want.items()}


@pytest.mark.parametrize("tail", ["", "INFO 04-10 03:30:00 [x.py:1] served\n"])
def test_lines_that_state_no_time_are_given_in_parts_at_the_step_of_the_first_time_after_them(
        tmp_path: Path, tail: str) -> None:
    """Megabytes of lines that state no time (llama-server's) are not held whole: they come in parts
    of about ``GROUP_BYTES``, at the step of the first time stated after them, or of the file's
    modification time if none is."""
    from logmetrics.offline.loggroups import BLOCK, GROUP_BYTES, groups
    from logmetrics.records.logtime import LogClock

    plain = "slot update_slots: id  1 | task 1 | kv cache rm [0, end)\n"
    log = tmp_path / "x.log"
    log.write_text(plain * (3 * GROUP_BYTES // len(plain)) + tail)
    mtime = 1712800000.0  # 2024-04-11, a day after the stamp
    got = list(groups(str(log), 0, 15.0, LogClock(mtime, UTC)))
    assert b"".join(g[3] for g in got).decode() == log.read_text()
    assert len(got) >= 4 and max(len(g[3]) for g in got) < GROUP_BYTES + BLOCK
    stamp = LogClock(mtime, UTC).stated(tail) if tail else mtime
    assert stamp is not None
    assert {g[0] for g in got} == {int(stamp // 15)}


@pytest.mark.parametrize("back", [660, 30])
def test_a_line_stamped_earlier_at_the_end_of_a_block_does_not_pull_the_block_back(tmp_path: Path,
                                                                                   back: int) -> None:
    """Lines in order, then one stamped earlier as the last line of a block (before the first
    line, or inside the block's span of time): every line in order is in its own step, and the
    one stamped earlier joins the step of the line before it (it pulled the block back to its time)."""
    from logmetrics.offline.loggroups import groups
    from logmetrics.records.logtime import LogClock

    at = datetime(2026, 1, 5, 10, 0, tzinfo=UTC)
    lines = [f"{at + timedelta(seconds=i):%Y-%m-%dT%H:%M:%SZ} INFO served request {i}" for i in range(600)]
    lines.append(f"{at + timedelta(seconds=599 - back):%Y-%m-%dT%H:%M:%SZ} INFO stamped early")
    log = tmp_path / "x.log"
    log.write_text("".join(line + "\n" for line in lines))
    got = list(groups(str(log), 0, 5.0, LogClock(at.timestamp() + 3600, UTC), block=1 << 18))
    steps = {line: step for step, _n, _seq, data, _t in got for line in data.decode().splitlines()}
    assert all(steps[line] == int((at.timestamp() + i) // 5) for i, line in enumerate(lines[:-1]))
    assert steps[lines[-1]] == steps[lines[-2]]


def test_a_file_truncated_while_it_is_read_is_read_no_further_and_said(tmp_path: Path,
                                                                       caplog: pytest.LogCaptureFixture) -> None:
    """A file cut shorter between two blocks read: a warning, and no more of it (as for a file
    replaced or removed), rather than its rest silently gone."""
    from logmetrics.offline.loggroups import _blocks

    log = tmp_path / "x.log"
    log.write_bytes(b"x" * 300)
    blocks = _blocks(str(log), 100)
    assert next(blocks) == b"x" * 100
    os.truncate(log, 50)
    assert list(blocks) == []
    assert "x.log was truncated while it was read (to 50 bytes, 100 read)" in caplog.text


def test_a_state_file_lets_watch_go_on_from_the_backfill(tmp_path: Path) -> None:
    """watch --state-file after backfill --state-file counts only lines written since, on top of
    the backfilled counters: its values equal --oneshot's over the whole, grown file."""
    from tests.helpers import Server

    log = copy(tmp_path, "vllm/v1-0.10.log", VLLM_MTIME)
    state = tmp_path / "state.db"
    proc = logmetrics("backfill", str(log), "--out", str(tmp_path / "om"), "--openmetrics-only", "--timezone", "UTC",
                      "--state-file", str(state))
    assert proc.returncode == 0, proc.stderr
    backfilled = openmetrics(tmp_path / "om" / "backfill.om")
    with log.open("a") as f:  # written after the backfill, while nothing reads the file
        f.writelines(f'INFO:     10.8.0.12:{41000 + i} - "GET /health HTTP/1.1" 200 OK\n' for i in range(3))
    want = {k: v for k, v in oneshot(log).items() if k[0] in ("http_requests_total", "llm_generation_tokens_total")}
    health = next(k for k in want if k[0] == "http_requests_total" and ("route", "/health") in k[1])
    assert want[health] == backfilled[health][-1][1] + 3
    server = Server("--state-file", str(state), str(log))
    try:
        got = server.wait_for(lambda s: s.get(health) == want[health])
        assert {k: got.get(k) for k in want} == want
    finally:
        assert server.stop() == 0
    again = logmetrics("backfill", str(log), "--out", str(tmp_path / "om2"), "--openmetrics-only",
                       "--state-file", str(state))
    assert again.returncode == 2 and "exists" in again.stderr, again.stderr


def test_a_log_whose_time_goes_back_for_good_is_said_once(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    """An hour of lines, then the same hour again (logs joined out of order): said once, with both
    times; the lines after the jump count at the step before it, as the lines of a file are in time order."""
    from logmetrics.offline.loggroups import groups
    from logmetrics.records.logtime import LogClock

    at = datetime(2026, 1, 5, 9, 0, tzinfo=UTC)
    hour = [f"INFO {at + timedelta(seconds=s):%m-%d %H:%M:%S} [x.py:1] served {s}" for s in range(0, 3600, 2)]
    log = tmp_path / "x.log"
    log.write_text("".join(line + "\n" for line in hour + hour))
    got = list(groups(str(log), 0, 15.0, LogClock(at.timestamp() + 7200, UTC), block=4096))
    said = [r.getMessage() for r in caplog.records if "goes back" in r.getMessage()]
    assert len(said) == 1 and "from 2026-01-05T09:59:45+00:00 to 2026-01-05T09:" in said[0], said
    last_step = int((at.timestamp() + 3598) // 15)
    steps = [g[0] for g in got]
    assert steps == sorted(steps) and steps[-1] == last_step
    assert sum(g[3].count(b"\n") for g in got if g[0] == last_step) > len(hour)  # (the second hour)
