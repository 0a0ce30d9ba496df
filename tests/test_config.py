"""The configuration file: parsing, strict checks, check-config, and SIGHUP reload of a running watch."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from logmetrics.app import config
from logmetrics.app.config import ConfigError, Input, parse_expiry
from logmetrics.cli.main import main
from tests.helpers import Server, access_line, append, total

ROOT = Path(__file__).resolve().parent.parent
PARSERS = ("vllm", "whisper", "api")


def lines(n: int) -> str:
    """``n`` access lines of vLLM's API server."""
    return "".join(access_line(i) for i in range(n))


def check(text: str, tmp_path: Path) -> Config:
    """Write ``text`` as c.toml and load it."""
    path = tmp_path / "c.toml"
    path.write_text(text)
    return config.load(str(path), PARSERS)


Config = config.Config


def test_a_full_file_is_read_with_relative_paths_from_its_directory(tmp_path: Path) -> None:
    """Every setting is read; relative paths are taken from the file's directory, not the working one."""
    got = check('listen = "127.0.0.1:9000"\nstate_file = "s.db"\nweb_config = "web.yml"\npoll_interval = 1\n'
                'rescan_interval = 30\nfrom_beginning = true\nmax_line_bytes = 4096\n[label_limits]\nmodel = 7\n'
                '[[input]]\npath = "logs/*.log"\nparser = "vllm"\nenvelope = "cri"\nsource = "v"\n'
                '[input.labels]\nmodel = "m"\n[[input]]\npath = "/abs/x.log"\n'
                '[[process]]\nbackend = "gw"\npattern = "uvicorn .*app"\n', tmp_path)
    assert got.inputs == (Input(str(tmp_path / "logs/*.log"), "vllm", "cri", "v", "m"), Input("/abs/x.log"))
    assert got.processes == (("gw", "uvicorn .*app"),)
    assert (got.listen, got.state_file, got.web_config) == ("127.0.0.1:9000", str(tmp_path / "s.db"),
                                                            str(tmp_path / "web.yml"))
    assert (got.poll_interval, got.from_beginning, got.max_line_bytes, got.label_limits) == (1, True, 4096,
                                                                                             (("model", 7),))
    assert got.rescan_interval == 30


def test_an_empty_file_sets_nothing(tmp_path: Path) -> None:
    """An empty file is valid and leaves every setting to the flags and defaults (None)."""
    got = check("", tmp_path)
    assert got.inputs == () and got.listen is None and got.poll_interval is None and got.state_file is None


ERRORS = [
    ('listen = ":9877"\n\nlisten2 = 1\n', 3, "unknown key 'listen2'"),
    ('[[input]]\npath = "a"\n\n[[input]]\npath = "b"\nenvlope = "cri"\n', 6, "unknown key 'envlope'"),
    ('poll_interval = "fast"\n', 1, "poll_interval must be a number, not a string"),
    ('\npoll_interval = 0\n', 2, "between 0.01 and 60"),
    ('rescan_interval = 7200\n', 1, "between 0.01 and 3600"),
    ('max_line_bytes = 1.5\n', 1, "must be an integer"),
    ('max_line_bytes = 99999999999999999999\n', 1, "a number too large"),
    ('from_beginning = "yes"\n', 1, "from_beginning must be true or false"),
    ('listen = "nowhere"\n', 1, "listen expects HOST:PORT"),
    ('listen = 9877\n', 1, "listen must be a string, not an integer"),
    ('[[input]]\nparser = "vllm"\n', 1, "input #1: path is required"),
    ('[[input]]\npath = 3\n', 2, "input #1: path must be a string"),
    ('[[input]]\npath = "-"\n', 2, "stdin"),
    ('[[input]]\npath = ""\n', 2, "non-empty string"),
    ('[[input]]\npath = "a"\nenvelope = "tar"\n', 3, "envelope 'tar' is none of"),
    ('[[input]]\npath = "a"\nparser = "nginx"\n', 3, "unknown parser 'nginx'"),
    ('[[input]]\npath = "a"\n[input.labels]\nroute = "/x"\n', 4, "label 'route' cannot be set per input"),
    ('[[input]]\npath = "a"\nlabels = "m"\n', 3, "labels must be a table"),
    ('input = "a.log"\n', 1, "input must be an array of tables"),
    ('[[process]]\nbackend = "gw"\n', 1, "backend and pattern are both required"),
    ('[[process]]\nbackend = "gw"\npattern = "(unclosed"\n', 3, "not a valid regular expression"),
    ('expire_after = "soon"\n', 1, "expire_after: 'soon' is not a duration"),
    ('expire_after = 60\n', 1, "expire_after must be a string"),
    ('[label_limits]\nmodel = 0\n', 2, "label_limits.model must be an integer from 1"),
    ('[label_limits]\nuser = 5\n', 2, "unknown label 'user'"),
    ('listen = ":9877"\nstate_file = \n', 2, "not valid TOML"),
    ('a = [1,\n2,\n', 2, "not valid TOML"),  # at its end: its last line
    ('[[input]\npath = "a"\n', 1, "not valid TOML"),
    ('[[input]]\npath = "a"\ninclude = [1]\n', 3,
     "include: glob #1 must be a non-empty string (such as \"*.log\"), not an integer"),
    ('[[input]]\npath = "a"\nexclude = ["b", ""]\n', 3, "exclude: glob #2 must be a non-empty string"),
    ('[[input]]\npath = "a"\ninclude = 1\n', 3, "include must be a list of globs"),
]


@pytest.mark.parametrize(("text", "line", "reason"), ERRORS)
def test_each_error_names_the_file_the_line_and_the_reason(text: str, line: int, reason: str,
                                                          tmp_path: Path) -> None:
    """A bad file is refused with FILE:LINE: reason, the line being where the problem is."""
    with pytest.raises(ConfigError) as err:
        check(text, tmp_path)
    assert (err.value.file, err.value.line) == (str(tmp_path / "c.toml"), line)
    assert reason in err.value.reason
    assert str(err.value).startswith(f"{tmp_path / 'c.toml'}:{line}: ")
    assert "\n" not in str(err.value)


def test_an_unreadable_or_binary_file_is_refused_with_its_name(tmp_path: Path) -> None:
    """A missing file, a directory and a file that is not UTF-8 are refused, each naming the file."""
    (tmp_path / "bin.toml").write_bytes(b'listen = "\xff"\n')
    for name, reason in (("missing.toml", "cannot read it"), ("bin.toml", "not UTF-8")):
        with pytest.raises(ConfigError, match=reason) as err:
            config.load(str(tmp_path / name))
        assert str(tmp_path / name) in str(err.value)


def run_cli(args: list[str], capsys: pytest.CaptureFixture[str]) -> tuple[int, str, str]:
    """``logmetrics ARGS`` in this process: (exit code, stdout, stderr)."""
    with pytest.raises(SystemExit) as done:
        main(args)
    out = capsys.readouterr()
    return int(done.value.code or 0), out.out, out.err


def test_check_config_exit_codes(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """check-config: 0 and a summary for a good file, 2 and FILE:LINE: reason for a bad one."""
    good, bad = tmp_path / "good.toml", tmp_path / "bad.toml"
    good.write_text('[[input]]\npath = "a.log"\n[[input]]\npath = "b/"\n[[process]]\nbackend = "g"\npattern = "x"\n')
    bad.write_text('[[input]]\npath = "a.log"\nparser = "no-such-parser"\n')
    assert run_cli(["check-config", str(good)], capsys) == (0, f"{good}: OK: 2 inputs, 1 process rule\n", "")
    code, out, err = run_cli(["check-config", str(bad)], capsys)
    assert (code, out) == (2, "")
    assert err.startswith(f"logmetrics: error: {bad}:3: input #1: unknown parser 'no-such-parser'")
    assert run_cli(["check-config", str(tmp_path / "none.toml")], capsys)[0] == 2


def test_a_fifo_or_a_device_is_refused_at_once(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """A FIFO (no writer) or a device at the config path: exit 2, 'not a regular file', without waiting."""
    fifo = tmp_path / "c.toml"
    os.mkfifo(fifo)
    for path in (str(fifo), "/dev/zero"):
        code, out, err = run_cli(["check-config", path], capsys)
        assert (code, out) == (2, "") and f"{path}: not a regular file" in err


def test_the_shipped_example_is_valid(capsys: pytest.CaptureFixture[str]) -> None:
    """deploy/logmetrics.toml (the configuration page's example) passes check-config."""
    code, out, _ = run_cli(["check-config", str(ROOT / "deploy/logmetrics.toml")], capsys)
    assert code == 0 and "OK: 3 inputs, 1 process rule" in out


def test_the_readme_example_is_the_shipped_file() -> None:
    """The configuration page's full example is deploy/logmetrics.toml, word for word."""
    readme = (ROOT / "docs" / "configuration.md").read_text()
    assert (ROOT / "deploy/logmetrics.toml").read_text() in readme


@pytest.mark.parametrize(("text", "seconds"), [("30m", 1800.0), ("7d", 604800.0), ("90", 90.0), ("never", None)])
def test_expire_after_takes_a_duration_or_never(text: str, seconds: float | None, tmp_path: Path) -> None:
    """expire_after is read as seconds, or None for never; without it the file sets nothing."""
    got = check(f'expire_after = "{text}"\n', tmp_path)
    assert (got.expire_after, got.expire_after_set) == (seconds, True)
    assert not check("", tmp_path).expire_after_set
    assert parse_expiry(text) == seconds
    with pytest.raises(ValueError, match="not a duration"):
        parse_expiry("-1h")


def test_flags_win_over_the_file_and_paths_add_to_its_inputs(tmp_path: Path) -> None:
    """--source on the command line wins over an input's source; a PATH argument adds an input; --oneshot
    leaves out the file's settings for a running watch."""
    (tmp_path / "a.log").write_text(lines(3))
    (tmp_path / "b.log").write_text(lines(2))
    cfg = tmp_path / "c.toml"
    cfg.write_text('state_file = "s.db"\n[[process]]\nbackend = "g"\npattern = "x"\n'  # left out by --oneshot
                   '[[input]]\npath = "a.log"\nparser = "vllm"\nsource = "from-file"\n')
    run = [sys.executable, "-m", "logmetrics", "watch", "--oneshot", "--config", str(cfg)]
    out = subprocess.run(run, capture_output=True, text=True, timeout=60, check=True).stdout
    assert 'http_requests_total{backend="vllm",code="200",method="POST",route="/v1/chat/completions",' \
           'source="from-file"} 3.0' in out
    out = subprocess.run([*run, "--source", "flag", str(tmp_path / "b.log")], capture_output=True, text=True,
                         timeout=60, check=True).stdout
    assert 'backend="vllm",code="200",method="POST",route="/v1/chat/completions",source="flag"} 3.0' in out
    assert 'logmetrics_lines_read_total{source="flag"} 5.0' in out and "from-file" not in out


def test_watch_refuses_a_bad_file_at_start(tmp_path: Path) -> None:
    """watch --config with an invalid file exits 2 with FILE:LINE: reason, before serving anything."""
    cfg = tmp_path / "c.toml"
    cfg.write_text('poll_interval = 0.1\n[[input]]\npath = "a.log"\nsource = 5\n')
    done = subprocess.run([sys.executable, "-m", "logmetrics", "watch", "--config", str(cfg)], capture_output=True,
                          text=True, timeout=60)
    assert done.returncode == 2
    assert done.stderr == f"logmetrics: error: {cfg}:4: input #1: source must be a string, not an integer\n"


def inputs_file(path: Path, *names: str, extra: str = "") -> None:
    """A configuration with one input per name (file NAME.log, source NAME)."""
    path.write_text(extra + "".join(f'[[input]]\npath = "{n}.log"\nsource = "{n}"\nparser = "vllm"\n'
                                    for n in names))


def requests(samples: dict[tuple[str, tuple[tuple[str, str], ...]], float], source: str) -> float:
    """http_requests_total of one source."""
    return total(samples, "http_requests_total", source=source)


def reloads(samples: dict[tuple[str, tuple[tuple[str, str], ...]], float], result: str) -> float:
    """logmetrics_config_reloads_total of one result."""
    return total(samples, "logmetrics_config_reloads_total", result=result)


def test_sighup_adds_and_drops_inputs_without_resetting_anything(tmp_path: Path) -> None:
    """SIGHUP: a kept input's counters carry on, an added one is counted, a dropped one stops; a broken
    file is refused (file, line, reason on stderr), counted as a failure, and the running set stays."""
    for name in ("a", "b", "c"):
        (tmp_path / f"{name}.log").write_text("")
    cfg = tmp_path / "c.toml"
    inputs_file(cfg, "a", "b")
    srv = Server("--config", str(cfg), "--poll-interval", "0.05")
    try:
        append(tmp_path / "a.log", lines(5))
        append(tmp_path / "b.log", lines(4))
        got = srv.wait_for(lambda s: requests(s, "a") == 5 and requests(s, "b") == 4)
        assert reloads(got, "success") == 0 and "c" not in {dict(k[1]).get("source") for k in got}
        stamp = total(got, "logmetrics_config_last_reload_success_timestamp_seconds")

        inputs_file(cfg, "a", "c", extra="max_line_bytes = 4096\n")  # b dropped, c added; a restart setting
        os.kill(srv.proc.pid, signal.SIGHUP)
        srv.wait_for(lambda s: reloads(s, "success") == 1)
        append(tmp_path / "b.log", lines(7))  # first: were b still read, the same poll would read it
        append(tmp_path / "a.log", lines(2))
        append(tmp_path / "c.log", lines(3))
        got = srv.wait_for(lambda s: requests(s, "a") == 7 and requests(s, "c") == 3)
        assert requests(got, "b") == 4  # dropped: no longer grows, and not reset either
        assert total(got, "logmetrics_config_last_reload_success_timestamp_seconds") > stamp

        cfg.write_text('[[input]]\npath = "a.log"\n\nsource = [\n')  # broken: the running set must stay
        os.kill(srv.proc.pid, signal.SIGHUP)
        srv.wait_for(lambda s: reloads(s, "failure") == 1)
        append(tmp_path / "c.log", lines(1))
        append(tmp_path / "a.log", lines(1))
        got = srv.wait_for(lambda s: requests(s, "a") == 8 and requests(s, "c") == 4)
        assert (reloads(got, "success"), requests(got, "b")) == (1, 4)
    finally:
        assert srv.stop() == 0
    assert srv.proc.stderr is not None
    err = srv.proc.stderr.read().decode()
    assert "max_line_bytes changed; it takes effect at the next restart" in err
    assert f"logmetrics: ERROR: {cfg}:4: not valid TOML" in err and "the running configuration stays" in err
    assert "Traceback" not in err


def test_a_reload_records_the_new_inputs_in_the_state_file(tmp_path: Path) -> None:
    """With a state file, a restart after a reload that changed the inputs goes on with the state:
    the new inputs are committed even when no read position changed (a glob that matches nothing yet)."""
    (tmp_path / "a.log").write_text("")
    (tmp_path / "later").mkdir()
    cfg = tmp_path / "c.toml"
    state = f'state_file = "{tmp_path / "state.db"}"\n'
    later = '[[input]]\npath = "later/*.log"\nsource = "later"\n'
    inputs_file(cfg, "a", extra=state)
    srv = Server("--config", str(cfg), "--poll-interval", "0.05")
    try:
        append(tmp_path / "a.log", lines(3))
        srv.wait_for(lambda s: requests(s, "a") == 3)
        inputs_file(cfg, "a", extra=state + later)
        os.kill(srv.proc.pid, signal.SIGHUP)
        srv.wait_for(lambda s: reloads(s, "success") == 1)
    finally:
        assert srv.stop() == 0  # its last commit: nothing changed but the inputs
    srv = Server("--config", str(cfg), "--poll-interval", "0.05")  # exit code 2 if refused as foreign
    try:
        append(tmp_path / "later" / "x.log", lines(2))
        got = srv.wait_for(lambda s: requests(s, "later") == 2)
        assert requests(got, "a") == 3  # the counters came back from the state
    finally:
        assert srv.stop() == 0


TOML_VALUES: st.SearchStrategy[object] = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats() | st.text(max_size=20) | st.just([]) | st.just({}),
    lambda inner: st.lists(inner, min_size=1, max_size=3) | st.dictionaries(st.text(max_size=8), inner, min_size=1,
                                                                            max_size=3),
    max_leaves=8)
KEYS = st.sampled_from([*config.TOP_KEYS, "path", "parser", "labels", "x"])


def toml_value(value: object) -> str:
    """A Python value as TOML text (None as a quoted string: TOML has no null)."""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int | float):
        return repr(value)
    if isinstance(value, list):
        return "[" + ", ".join(toml_value(v) for v in value) + "]"
    if isinstance(value, dict):
        return "{" + ", ".join(f'"{k}" = {toml_value(v)}' for k, v in value.items()) + "}"
    return '"' + str(value).replace("\\", "\\\\").replace('"', '\\"') + '"'


HOSTILE = st.one_of(
    st.text(max_size=200),  # anything at all
    st.lists(st.tuples(KEYS, TOML_VALUES), max_size=6).map(
        lambda kv: "".join(f"{k} = {toml_value(v)}\n" for k, v in kv)),  # known keys, any values
    st.lists(st.tuples(KEYS, TOML_VALUES), max_size=4).map(
        lambda kv: "[[input]]\n" + "".join(f"{k} = {toml_value(v)}\n" for k, v in kv)),
    st.integers(1, 3000).map(lambda n: "a = " + "[" * n + "]" * n + "\n"),  # deep nesting
    st.integers(1, 3000).map(lambda n: "a = " + "{b = " * n + "1" + "}" * n + "\n"),
    st.integers(1, 6000).map(lambda n: f"max_line_bytes = 1{'0' * n}\n"),  # huge numbers
    st.sampled_from(["../../../../etc/passwd", "/", "~root/x", "*/../**", "\\\\?\\C:"]).map(
        lambda p: f'state_file = "{p}"\nweb_config = "{p}"\n[[input]]\npath = "{p}"\n'),  # paths outside
)


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(text=HOSTILE)
def test_hostile_files_give_a_one_line_error_or_a_config(text: str) -> None:
    """Whatever the file holds: a Config, or a ConfigError of one line naming the file; never another exception."""
    try:
        got = config.parse(text, "h.toml", PARSERS)
    except ConfigError as exc:
        assert str(exc).startswith("h.toml") and "\n" not in str(exc) and exc.reason
    else:
        assert isinstance(got, Config)


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(text=HOSTILE)
def test_check_config_on_hostile_files_exits_0_or_2_without_a_traceback(
        text: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """check-config on a hostile file: exit 0 with its summary, or 2 with one error line; no traceback."""
    path = tmp_path / "h.toml"
    path.write_bytes(text.encode("utf-8", "surrogatepass"))  # a lone surrogate: a file that is not UTF-8
    code, out, err = run_cli(["check-config", str(path)], capsys)
    assert ((code, err) == (0, "") and out.startswith(f"{path}: OK")) or (
        code == 2 and err.startswith(f"logmetrics: error: {path}") and err.count("\n") == 1)


@pytest.mark.parametrize(("arg", "path", "named"), [
    ("/logs/a.log", "/logs/a.log", True),
    ("/logs/a.log", "/logs/a.log.1", False),
    ("/logs", "/logs/x/y.log", True),
    ("/logs", "/logs2/y.log", False),
    ("/logs/*.log", "/logs/a.log", True),
    ("/logs/*.log", "/logs/a.txt", False),
    ("/logs/**/*.log", "/logs/a.log", True),
    ("/logs/**/*.log", "/logs/x/y/a.log", True),
    ("/logs/pod-*", "/logs/pod-1/c/0.log", True),
])
def test_which_files_an_input_names(arg: str, path: str, named: bool) -> None:
    """covers(): the file itself, the files under a directory, the files a glob (or a directory it matches) names."""
    from logmetrics.sources.discovery import covers

    assert covers(arg, path) is named


def test_an_inputs_model_and_envelope_apply_to_its_files_only(tmp_path: Path) -> None:
    """labels.model and envelope of an input apply to the files it names; --envelope wins over the input's."""
    vllm, docker = ROOT / "samples/vllm/v1-0.10.log", ROOT / "samples/vllm/docker-json.log"
    cfg = tmp_path / "c.toml"
    cfg.write_text(f'[[input]]\npath = "{vllm}"\n[input.labels]\nmodel = "mine"\n'
                   f'[[input]]\npath = "{docker}"\n')
    run = [sys.executable, "-m", "logmetrics", "watch", "--oneshot", "--config", str(cfg)]
    out = subprocess.run(run, capture_output=True, text=True, timeout=60, check=True).stdout
    mine = [line for line in out.splitlines() if f'source="{vllm}"' in line and 'model="' in line]
    assert mine and all('model="mine"' in line for line in mine)
    assert 'model="gemma-3-12b"' in out and f'model="mine",source="{docker}"' not in out
    cfg.write_text(f'[[input]]\npath = "{docker}"\nparser = "vllm"\nenvelope = "none"\n')
    matched = 'logmetrics_lines_matched_total{parser="vllm"}'
    out = subprocess.run(run, capture_output=True, text=True, timeout=60, check=True).stdout
    assert f"{matched} 3.0" in out  # its JSON lines left wrapped: only the few the parser finds inside
    out = subprocess.run([*run, "--envelope", "docker-json"], capture_output=True, text=True, timeout=60,
                         check=True).stdout
    assert f"{matched} 16.0" in out
