"""Include and exclude globs of an input: which files under a directory it takes."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from logmetrics.app import config
from logmetrics.sources.filefilter import Rule, file_filter
from tests.helpers import access_line, parse, total


def test_a_rule_matches_names_and_paths_below_its_input(tmp_path: Path) -> None:
    """A glob without / matches the file name, one with / the path below the input; include then exclude."""
    rule = Rule(str(tmp_path), include=("*.log", "pods/*/vllm/**"), exclude=("debug-*", "*/old/*"))
    assert rule.takes(str(tmp_path / "api.log"))
    assert rule.takes(str(tmp_path / "pods" / "p1" / "vllm" / "0.txt"))
    assert not rule.takes(str(tmp_path / "api.txt"))
    assert not rule.takes(str(tmp_path / "debug-api.log"))
    assert not rule.takes(str(tmp_path / "x" / "old" / "a.log"))


def test_the_first_input_that_covers_a_file_decides(tmp_path: Path) -> None:
    """Configured inputs come first; a PATH argument's globs apply to what no input covers."""
    f = file_filter([(str(tmp_path / "a"), ("*.log",), ())], [str(tmp_path)], (), ("*.txt",))
    assert f.wanted(str(tmp_path / "a" / "x.log")) and not f.wanted(str(tmp_path / "a" / "x.out"))
    assert f.wanted(str(tmp_path / "b" / "x.out")) and not f.wanted(str(tmp_path / "b" / "x.txt"))
    assert not file_filter([], [str(tmp_path)], (), ())  # no glob: no filter at all


def test_watch_include_and_exclude_and_the_config_keys(tmp_path: Path) -> None:
    """--include/--exclude and [[input]] include/exclude leave files out; a file named is always read."""
    logs = tmp_path / "logs"
    (logs / "archive").mkdir(parents=True)
    for name in ("vllm-0.log", "vllm-1.log", "debug-vllm.log", "notes.txt", "archive/vllm-old.log"):
        (logs / name).write_text(access_line(1))

    def requests(*args: str) -> float:
        cmd = [sys.executable, "-m", "logmetrics", "watch", "--oneshot", "--parser", "vllm", *args]
        out = subprocess.run(cmd, capture_output=True, text=True, timeout=120, check=True, cwd=tmp_path).stdout
        return total(parse(out), "http_requests_total")

    assert requests("logs") == 5
    assert requests("logs", "--include", "*.log", "--exclude", "debug-*", "--exclude", "archive/**") == 2
    assert requests("logs", "--include", "*.log", "logs/notes.txt") == 5  # named: read all the same
    cfg = tmp_path / "lm.toml"
    cfg.write_text('[[input]]\npath = "logs"\ninclude = ["vllm-*.log"]\nexclude = "archive/**"\n')
    assert requests("--config", str(cfg)) == 2
    assert config.load(str(cfg), {}).inputs[0].include == ("vllm-*.log",)
