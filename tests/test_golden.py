"""Golden samples: every ``samples/<parser>/<case>.log`` through ``logmetrics watch --oneshot``,
with the test kit a plugin author uses (``logmetrics.testing.check_golden``).

Each log has a ``<case>.expected.prom`` next to it: the Prometheus text of every series the run
prints, except the engine's own ``logmetrics_*`` and ``backend_process_*`` series. The comparison
is semantic (parsed samples, floats to a relative 1e-9), not textual. The comment lines at the top
of a golden file say how its values were checked; they are kept when the file is rewritten.

``LOGMETRICS_UPDATE_GOLDEN=1 pytest tests/test_golden.py`` rewrites the golden files from the
current output instead of comparing. Check every value of a rewritten file by hand before
committing it: a golden file that only echoes the program is worth nothing.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from logmetrics.testing import GoldenError, Key, check_golden, diff, golden_path

ROOT = Path(__file__).resolve().parent.parent
SAMPLES = sorted((ROOT / "samples").glob("*/*.log"))
UPDATE = os.environ.get("LOGMETRICS_UPDATE_GOLDEN") == "1"


def test_every_sample_has_a_golden_file_or_update_mode() -> None:
    """Each sample log comes with its expected metrics (or the run is rewriting them)."""
    missing = [str(p.relative_to(ROOT)) for p in SAMPLES if not golden_path(p).exists()]
    assert UPDATE or not missing, f"samples without a .expected.prom file: {missing}"


@pytest.mark.parametrize("log", SAMPLES, ids=[f"{p.parent.name}/{p.name}" for p in SAMPLES])
def test_golden(log: Path) -> None:
    """The metrics of a sample log are exactly its golden file's series and values."""
    if check_golden(log, cwd=ROOT):
        pytest.skip(f"rewrote {golden_path(log).relative_to(ROOT)}; check its values by hand")


def test_a_golden_mismatch_names_the_series(tmp_path: Path) -> None:
    """A golden file that says another value fails with the series, the value wanted and the one got."""
    log = tmp_path / "vllm" / "case.log"
    log.parent.mkdir()
    log.write_bytes((ROOT / "samples" / "vllm" / "v1-0.10.log").read_bytes())
    golden = golden_path(log)
    golden.write_text((ROOT / "samples" / "vllm" / "v1-0.10.expected.prom").read_text()
                      .replace("\nbackend_restarts_total{", "\nbackend_restarts_total{x=\"1\",", 1))
    with pytest.raises(GoldenError, match=r"missing +backend_restarts_total\{.*x=\"1\"") as caught:
        check_golden(log, update=False)
    assert "unexpected  backend_restarts_total{" in str(caught.value)
    assert check_golden(log, update=True) is True  # rewritten from the run: now it holds
    assert check_golden(log, update=False) is False


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
