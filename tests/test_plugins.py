"""The plugin finder: entry points, --plugin files and modules, validation at load."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from logmetrics.events import Event
from logmetrics.plugins import Parser, PluginError, discover, load_spec, record_rule, validate
from logmetrics.records import Record
from logmetrics.records.shapes import DEFAULT_SHAPES, NODE_STACK, Shape, Shapes
from logmetrics.store.catalog import Family
from logmetrics.testing import EventError, check_events

GOOD = '''
from logmetrics.events import Event
from logmetrics.plugins import Parser


class Echo(Parser):
    name = "echo"

    def parse(self, record):
        return [Event("backend_restarts_total", ())] if "start" in record.text else []
'''


def write(tmp_path: Path, body: str, name: str = "plug.py") -> str:
    """Write a plugin file and return its path."""
    path = tmp_path / name
    path.write_text(body)
    return str(path)


def test_builtin_vllm_comes_from_the_entry_point_group() -> None:
    """The built-in parser is found through the same entry-point group as third-party ones."""
    entry = discover()["vllm"]
    assert entry.origin.startswith("entry point logmetrics_parsers.vllm:VllmParser")


def test_one_parser_asked_for_is_loaded_alone_and_an_unknown_one_names_them_all() -> None:
    """``only`` loads the one installed parser a run reads every input with; the others are named
    (for an unknown name's error) without being imported."""
    broken: dict[str, str] = {}
    entries = discover(broken=broken, only="vllm")
    assert list(entries) == ["vllm"] and {"whisper", "llamacpp", "api"} <= set(broken)
    alone = subprocess.run([sys.executable, "-c", "import sys; from logmetrics.plugins import discover; "
                            "discover(only='vllm'); print(sorted(m for m in sys.modules if 'parsers.' in m))"],
                           capture_output=True, text=True, timeout=60).stdout
    assert "vllm" in alone and "whisper" not in alone and "llamacpp" not in alone, alone
    proc = subprocess.run([sys.executable, "-c", "import sys; from logmetrics.cli.main import main; "
                           "sys.argv = ['logmetrics', 'watch', '--oneshot', '--parser', 'nope', '-']; main()"],
                          capture_output=True, text=True, input="", timeout=60)
    assert proc.returncode == 2 and "installed: api, embeddings, llamacpp" in proc.stderr, proc.stderr


def test_sniffs_give_the_score_of_the_first_pattern_found() -> None:
    """``sniffs`` are tried from the surest down, ``^`` at each line's start, a ``\\r`` before the
    line end left out; none found is 0."""
    class Sniffed(Parser):
        name = "sniffed"
        sniffs = ((0.9, r"^strong$"), (0.4, r"weak"))

    assert Sniffed.sniff(["x", "strong\r", "weak"]) == 0.9
    assert Sniffed.sniff(["a weak one"]) == 0.4
    assert Sniffed.sniff(["x strong"]) == 0.0 and Parser.sniff(["strong"]) == 0.0


def test_file_plugin_is_loaded_and_listed(tmp_path: Path) -> None:
    """--plugin path.py loads every Parser subclass the file defines."""
    found = discover([write(tmp_path, GOOD)])
    assert found["echo"].origin == f"file {tmp_path / 'plug.py'}"


def test_module_class_spec(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """--plugin module:Class imports a module from the path."""
    write(tmp_path, GOOD, "myplug.py")
    monkeypatch.syspath_prepend(str(tmp_path))
    [entry] = load_spec("myplug:Echo")
    assert entry.name == "echo" and entry.origin == "module myplug:Echo"


@pytest.mark.parametrize(("body", "message"), [
    ("def broken(:\n", "import failed: SyntaxError"),
    (GOOD.replace('"echo"', '"Bad Name"'), "name must match"),
    (GOOD.replace("    def parse(self, record):\n        return [Event(\"backend_restarts_total\", ())]"
                  " if \"start\" in record.text else []\n", "    pass\n"), "implements neither"),
    (GOOD.replace('name = "echo"', 'name = "echo"\n    claims = "*.log"'), "claims must be a tuple"),
    ("x = 1\n", "defines no subclass"),
    (GOOD.replace('name = "echo"', 'name = "echo"\n    from logmetrics.store.catalog import Family\n'
                  '    metrics = (Family("other_total", "counter", (), "h"),)'), "must be named echo_"),
    (GOOD.replace('name = "echo"', 'name = "echo"\n    from logmetrics.store.catalog import Family\n'
                  '    metrics = (Family("echo_things", "counter", (), "h"),)'), "must end in _total"),
    (GOOD.replace('name = "echo"', 'name = "echo"\n    sniffs = ((1.5, "echo"),)'), "sniffs must be a tuple of (score"),
    (GOOD.replace('name = "echo"', 'name = "echo"\n    sniffs = (0.9, "echo")'), "sniffs must be a tuple of (score"),
    (GOOD.replace('name = "echo"', 'name = "echo"\n    sniffs = ((0.9, "(echo"),)'), "a pattern of sniffs is not"),
])
def test_bad_plugins_are_refused_with_a_message_naming_them(tmp_path: Path, body: str, message: str) -> None:
    """A bad plugin is refused whole, with a message that names the plugin and the problem."""
    path = write(tmp_path, body)
    with pytest.raises(PluginError) as info:
        discover([path])
    assert message in str(info.value)
    assert "plug" in str(info.value) or "echo" in str(info.value) or "Bad Name" in str(info.value)


def test_missing_plugin_file(tmp_path: Path) -> None:
    """A plugin path that does not exist is a clear error."""
    with pytest.raises(PluginError, match="no such file"):
        load_spec(str(tmp_path / "nope.py"))


@pytest.mark.parametrize("form", ["file", "module"])
def test_missing_class_is_named(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, form: str) -> None:
    """--plugin x.py:Nope and module:Nope name the missing class and the parser classes there are."""
    path = write(tmp_path, GOOD, "namedplug.py")
    monkeypatch.syspath_prepend(str(tmp_path))
    spec = f"{path}:Nope" if form == "file" else "namedplug:Nope"
    with pytest.raises(PluginError) as info:
        load_spec(spec)
    assert "no class 'Nope'" in str(info.value) and "Echo" in str(info.value)
    assert "None" not in str(info.value)


def test_module_spec_imports_from_the_current_directory(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """--plugin module:Class finds a module in the current directory, as `python -m` would."""
    write(tmp_path, GOOD, "cwdplug.py")
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr("sys.path", [p for p in __import__("sys").path if p not in ("", str(tmp_path))])
    [entry] = load_spec("cwdplug:Echo")
    assert entry.name == "echo"


def test_plugin_replacing_an_installed_parser_says_so(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    """A --plugin with the name of an installed parser replaces it, with a warning naming both."""
    path = write(tmp_path, GOOD.replace('"echo"', '"vllm"'), "myvllm.py")
    found = discover([path])
    assert found["vllm"].origin == f"file {path}"
    [warning] = [r.getMessage() for r in caplog.records if r.levelname == "WARNING"]
    assert "'vllm'" in warning and "myvllm.py" in warning and "entry point" in warning


def test_plugin_that_exits_at_import_is_refused(tmp_path: Path) -> None:
    """A plugin file that calls sys.exit() while imported is refused with a message, not a silent exit."""
    with pytest.raises(PluginError, match="import failed: SystemExit"):
        discover([write(tmp_path, "raise SystemExit(0)\n", "quits.py")])


def installed_broken_plugin(tmp_path: Path) -> dict[str, str]:
    """A distribution on PYTHONPATH whose entry point in the parsers group fails to import; its env."""
    site = tmp_path / "site"
    info = site / "brokenplug-1.0.dist-info"
    info.mkdir(parents=True)
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: brokenplug\nVersion: 1.0\n")
    (info / "entry_points.txt").write_text("[logmetrics.parsers]\nbroken = brokenmod:Broken\n")
    (site / "brokenmod.py").write_text("import no_such_module_anywhere\n")
    return {**os.environ, "PYTHONPATH": os.pathsep.join([str(site), *sys.path])}


def test_a_broken_installed_plugin_is_left_out(tmp_path: Path) -> None:
    """One installed parser that fails to import is reported and left out; the others still run."""
    env = installed_broken_plugin(tmp_path)
    log = tmp_path / "vllm.log"
    log.write_text('INFO:     1.2.3.4:5 - "GET /health HTTP/1.1" 200 OK\n')
    out = subprocess.run([sys.executable, "-m", "logmetrics", "watch", "--oneshot", str(log)],
                         capture_output=True, text=True, timeout=60, env=env)
    assert out.returncode == 0, out.stderr
    assert "http_requests_total{" in out.stdout
    [warning] = out.stderr.splitlines()
    assert "plugin 'broken'" in warning and "ModuleNotFoundError" in warning and "left out" in warning
    named = subprocess.run([sys.executable, "-m", "logmetrics", "watch", "--oneshot", "--parser", "broken", str(log)],
                           capture_output=True, text=True, timeout=60, env=env)
    assert named.returncode == 2
    assert named.stderr.splitlines()[-1].startswith("logmetrics: error: plugin 'broken'"), named.stderr


class Things(Parser):
    """A parser with a family of its own, for the events checker."""

    name = "things"
    metrics = (Family("things_total", "counter", ("kind",), "Things seen."),)

    def parse(self, record: Record) -> list[Event]:
        return []


def test_check_events_names_every_event_the_engine_would_refuse() -> None:
    """check_events fails on an unknown family, a wrong label count and a negative counter, with reasons."""
    good = [Event("backend_errors_total", ("m", "oom"), 1), Event("things_total", ("a",), 2)]
    assert check_events(Things, good) == good
    bad = [Event("no_such_total", ("m",), 1), Event("backend_errors_total", ("m",), 1),
           Event("backend_errors_total", ("m", "oom"), -1)]
    with pytest.raises(EventError) as info:
        check_events(Things, [*good, *bad])
    message = str(info.value)
    assert message.startswith("3 event(s) of parser 'things' would be refused")
    assert "no such metric" in message and "2 label values wanted (model, error_type), got 1" in message
    assert "a counter cannot take the value -1" in message


def test_shapes_cut_records_and_the_old_continuation_is_refused_with_its_replacement() -> None:
    """A parser's shapes are compiled into its record rule; a plugin that still sets the
    ``continuation`` of earlier releases is refused at load, told to name those lines as a Shape."""

    class Lines(Parser):
        name = "lines"
        continuation = re.compile(r"\+")

        def parse(self, record: Record) -> list[Event]:
            return []

    class Node(Parser):
        name = "node"
        shapes = (NODE_STACK,)

        def parse(self, record: Record) -> list[Event]:
            return []

    rule = record_rule(Things)
    assert isinstance(rule, Shapes) and rule.shapes == DEFAULT_SHAPES
    assert record_rule(Node).shapes == (NODE_STACK,)
    validate(Node, "test")
    with pytest.raises(PluginError, match=r"sets continuation, which logmetrics no longer reads.*"
                                          r"shapes = \(Shape\('lines', lines='\\\\\+'\),\)"):
        validate(Lines, "test")


COMPILED = r"lines must be the text of a regular expression \(a str, not Pattern\): write lines=PATTERN.pattern"


@pytest.mark.parametrize(("lines", "says"), [(re.compile(r"\s"), COMPILED),
                                             (r"^\s", "starts with \\^, which never matches there"),
                                             (r"\s|^Traceback", "starts with \\^")])
def test_a_shape_written_as_a_continuation_was_is_refused_in_one_line(lines: object, says: str) -> None:
    """A shape given a compiled pattern, or a pattern anchored with ``^`` (as a continuation
    regex was written), is refused at load with what to write instead, not a traceback."""

    class Moved(Parser):
        name = "moved"
        shapes = (Shape("mine", lines=lines),)  # type: ignore[arg-type]  # the mistake under test

        def parse(self, record: Record) -> list[Event]:
            return []

    with pytest.raises(PluginError, match=says):
        validate(Moved, "test")

    class Broken(Parser):
        name = "broken"
        shapes = (Shape("mine", lines="(unclosed"),)

        def parse(self, record: Record) -> list[Event]:
            return []

    with pytest.raises(PluginError, match="its shapes do not make a regular expression"):
        validate(Broken, "test")
