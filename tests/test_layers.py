"""The import rules of docs/architecture.md: stages in order, no cycle (scripts/layers.py)."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "scripts"))
import layers  # noqa: E402  # scripts/ is not a package: its path is set just above

DOC = (ROOT / "docs" / "architecture.md").read_text(encoding="utf-8")


@pytest.fixture(scope="module")
def edges() -> dict[str, set[str]]:
    """The import graph of logmetrics/ and parsers/ as it is."""
    return layers.graph()


def test_the_code_keeps_the_drawing(edges: dict[str, set[str]]) -> None:
    """Every module lies in a stage of the table, imports none above its own, and no cycle exists."""
    assert layers.problems(edges, layers.stages(DOC)) == []


def test_an_import_of_a_stage_above_is_found(edges: dict[str, set[str]]) -> None:
    """A source module that imported the engine would be named, with both stages."""
    broken = {**edges, "logmetrics.sources.tailer": edges["logmetrics.sources.tailer"] | {"logmetrics.engine.engine"}}
    found = layers.problems(broken, layers.stages(DOC))
    assert found == ["logmetrics.sources.tailer (stage 1) imports logmetrics.engine.engine, of stage 8 above it"]


def test_a_cycle_within_one_stage_is_found(edges: dict[str, set[str]]) -> None:
    """Two modules of one stage that import each other are a cycle, though no stage rule is broken."""
    tailfile = "logmetrics.sources.tailfile"
    broken = {**edges, tailfile: edges[tailfile] | {"logmetrics.sources.tailer"}}
    found = layers.problems(broken, layers.stages(DOC))
    assert len(found) == 1 and found[0].startswith("import cycle: ")
    assert "logmetrics.sources.tailer" in found[0] and "logmetrics.sources.tailfile" in found[0]


def test_a_module_outside_every_stage_is_found(edges: dict[str, set[str]]) -> None:
    """A new top-level module must be given a stage in the table before it lands."""
    found = layers.problems({**edges, "logmetrics.newthing": set()}, layers.stages(DOC))
    assert found == ["logmetrics.newthing: in no stage of docs/architecture.md"]


def test_imports_inside_functions_and_for_types_count(tmp_path: Path) -> None:
    """A lazy import and one under TYPE_CHECKING are dependencies as much as one at the top."""
    (tmp_path / "logmetrics").mkdir()
    (tmp_path / "parsers").mkdir()
    (tmp_path / "logmetrics" / "__init__.py").write_text("")
    (tmp_path / "logmetrics" / "a.py").write_text(
        "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from logmetrics import b\n")
    (tmp_path / "logmetrics" / "b.py").write_text("def f():\n    from . import c\n")
    (tmp_path / "logmetrics" / "c.py").write_text("import logmetrics.a\n")
    found = layers.graph(tmp_path)
    assert found["logmetrics.a"] == {"logmetrics.b"} and found["logmetrics.b"] == {"logmetrics.c"}
    assert layers.cycles(found) == [["logmetrics.a", "logmetrics.b", "logmetrics.c"]]


def test_every_stage_folder_is_described() -> None:
    """Each package of logmetrics/ has a row in the table and a line saying what it holds."""
    holds = DOC.split("## What each stage holds", 1)[1].split("## What each stage may import", 1)[0]
    for package in sorted(p.name for p in (ROOT / "logmetrics").iterdir() if (p / "__init__.py").exists()):
        assert f"`logmetrics/{package}/`" in holds
        assert layers.stage_of(f"logmetrics.{package}", layers.stages(DOC)) is not None


def test_the_script_fails_the_test_command_on_a_problem() -> None:
    """scripts/layers.py exits 0 on the tree as it is and prints its summary."""
    done = subprocess.run([sys.executable, str(ROOT / "scripts" / "layers.py")], capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    assert done.stdout.rstrip().endswith("stages: OK")


def test_every_stage_package_is_installed() -> None:
    """setup.cfg lists each package of logmetrics/, so that 'pip install .' installs every stage."""
    listed = (ROOT / "setup.cfg").read_text(encoding="utf-8").split("packages =", 1)[1].split("package_dir", 1)[0]
    names = set(listed.split())
    for package in sorted(p.name for p in (ROOT / "logmetrics").iterdir() if (p / "__init__.py").exists()):
        assert f"logmetrics.{package}" in names
    assert {"logmetrics", "logmetrics_parsers"} <= names


def test_the_parsers_have_one_name() -> None:
    """Tests, benchmarks and scripts import the built-in parsers as installed (``logmetrics_parsers``),
    never by their folder's name; the type checker reads them under that name too
    (``scripts/typing/logmetrics_parsers`` leads to ``parsers/``)."""
    pattern = re.compile(r"^\s*(?:from|import) parsers\b", re.M)
    found = [str(p.relative_to(ROOT)) for folder in ("tests", "bench", "scripts", "grafana", "logmetrics")
             for p in sorted((ROOT / folder).rglob("*.py")) if "typing" not in p.parts
             and pattern.search(p.read_text(encoding="utf-8"))]
    assert found == []
    link = ROOT / "scripts" / "typing" / "logmetrics_parsers"
    assert link.is_symlink() and link.resolve() == (ROOT / "parsers").resolve()
