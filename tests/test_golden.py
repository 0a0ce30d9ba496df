"""Golden samples: every ``samples/<parser>/<case>.log`` through ``logmetrics watch --oneshot``.

Each log has a ``<case>.expected.prom`` next to it: the Prometheus text of every series the run
prints, except the engine's own ``logmetrics_*`` and ``backend_process_*`` series. The comparison
is semantic (parsed samples, floats to a relative 1e-9), not textual. The comment lines at the top
of a golden file say how its values were checked; they are kept when the file is rewritten.

``LOGMETRICS_UPDATE_GOLDEN=1 pytest tests/test_golden.py`` rewrites the golden files from the
current output instead of comparing. Check every value of a rewritten file by hand before
committing it: a golden file that only echoes the program is worth nothing.
"""

from __future__ import annotations

import math
import os
import subprocess
import sys
from pathlib import Path

import pytest
from prometheus_client.parser import text_string_to_metric_families

from tests.helpers import parse

ROOT = Path(__file__).resolve().parent.parent
SAMPLES = sorted((ROOT / "samples").glob("*/*.log"))
IGNORED_PREFIXES = ("logmetrics_", "backend_process_")
UPDATE = os.environ.get("LOGMETRICS_UPDATE_GOLDEN") == "1"

Key = tuple[str, tuple[tuple[str, str], ...]]


def run_oneshot(parser: str, log: Path) -> str:
    """The exposition text ``logmetrics watch --oneshot`` prints for one sample log."""
    cmd = [sys.executable, "-m", "logmetrics", "watch", "--oneshot", "--parser", parser, "--source", "sample", str(log)]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=120, cwd=ROOT)
    assert proc.returncode == 0, f"{' '.join(cmd)} exited {proc.returncode}:\n{proc.stderr}"
    return proc.stdout


def samples_of(text: str) -> dict[Key, float]:
    """{(sample name, sorted labels): value} for the series a golden file covers."""
    return {key: v for key, v in parse(text).items() if not key[0].startswith(IGNORED_PREFIXES)}


def render(text: str) -> str:
    """The covered families of an exposition text, in the text format, families and series sorted."""
    lines: list[str] = []
    for family in sorted(text_string_to_metric_families(text), key=lambda f: f.name):
        kept = [s for s in family.samples if not s.name.startswith(IGNORED_PREFIXES)]
        if not kept:
            continue
        name = family.name + ("_total" if family.type == "counter" else "")
        lines.append(f"# HELP {name} {family.documentation}")
        lines.append(f"# TYPE {name} {family.type}")
        for s in sorted(kept, key=lambda s: (s.name, sorted((k, v) for k, v in s.labels.items() if k != "le"),
                                             _le(s.labels))):
            labels = ",".join(f'{k}="{v}"' for k, v in sorted(s.labels.items()))
            lines.append(f"{s.name}{{{labels}}} {s.value!r}")
    return "\n".join(lines) + "\n"


def _le(labels: dict[str, str]) -> float:
    return float(labels["le"]) if "le" in labels else 0.0


def header(path: Path) -> str:
    """The leading comment lines of a golden file (not HELP/TYPE lines), kept on update."""
    if not path.exists():
        return ""
    kept: list[str] = []
    for line in path.read_text().splitlines():
        if not line.startswith("#") or line.startswith(("# HELP ", "# TYPE ")):
            break
        kept.append(line)
    return "".join(line + "\n" for line in kept)


def diff(want: dict[Key, float], got: dict[Key, float]) -> str:
    """A readable list of the series that differ."""
    def show(key: Key) -> str:
        return key[0] + "{" + ",".join(f'{k}="{v}"' for k, v in key[1]) + "}"

    rows = []
    for key in sorted(set(want) | set(got)):
        if key not in got:
            rows.append(f"  missing     {show(key)} (expected {want[key]!r})")
        elif key not in want:
            rows.append(f"  unexpected  {show(key)} = {got[key]!r}")
        elif not same(want[key], got[key]):
            rows.append(f"  wrong value {show(key)}: expected {want[key]!r}, got {got[key]!r}")
    return "\n".join(rows)


def same(a: float, b: float) -> bool:
    """Equal values: floats to a relative 1e-9, NaN equal to NaN."""
    if math.isnan(a) or math.isnan(b):
        return math.isnan(a) and math.isnan(b)
    return math.isclose(a, b, rel_tol=1e-9, abs_tol=1e-12)


def test_every_sample_has_a_golden_file_or_update_mode() -> None:
    """Each sample log comes with its expected metrics (or the run is rewriting them)."""
    missing = [str(p.relative_to(ROOT)) for p in SAMPLES if not p.with_suffix(".expected.prom").exists()]
    assert UPDATE or not missing, f"samples without a .expected.prom file: {missing}"


@pytest.mark.parametrize("log", SAMPLES, ids=[f"{p.parent.name}/{p.name}" for p in SAMPLES])
def test_golden(log: Path) -> None:
    """The metrics of a sample log are exactly its golden file's series and values."""
    golden = log.with_suffix(".expected.prom")
    out = run_oneshot(log.parent.name, log)
    if UPDATE:
        golden.write_text(header(golden) + render(out))
        pytest.skip(f"rewrote {golden.relative_to(ROOT)}; check its values by hand")
    if not golden.exists():
        pytest.fail(f"{golden.relative_to(ROOT)} is missing; create it with LOGMETRICS_UPDATE_GOLDEN=1")
    want = samples_of(golden.read_text())
    got = samples_of(out)
    problems = diff(want, got)
    assert not problems, f"{log.relative_to(ROOT)} differs from {golden.name}:\n{problems}"


def test_diff_reports_missing_unexpected_and_wrong() -> None:
    """The comparison catches a missing series, an extra one and a wrong value, and nothing else."""
    a: Key = ("x_total", (("code", "200"),))
    b: Key = ("x_total", (("code", "500"),))
    c: Key = ("y", ())
    report = diff({a: 1.0, b: 2.0, c: 0.1 + 0.2}, {a: 1.0, c: 0.3, ("z", ()): 5.0, b: 2.5})
    assert "missing" not in report
    assert 'wrong value x_total{code="500"}: expected 2.0, got 2.5' in report
    assert 'unexpected  z{} = 5.0' in report
    assert "y{}" not in report
    assert diff({a: 1.0}, {}) == '  missing     x_total{code="200"} (expected 1.0)'
