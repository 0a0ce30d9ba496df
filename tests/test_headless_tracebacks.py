"""Every built-in parser counts a traceback seen from its middle, or only its last line, as one typed error."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from tests.helpers import parse

FRAMES = ('  File "/app/main.py", line 3, in <module>\n    run()\n  File "/app/run.py", line 9, in run\n'
          "    model.generate()\n")
LAST = "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB.\n"
AFTER = "a line of its own after it\n"


@pytest.mark.parametrize("parser", ["vllm", "llamacpp", "whisper", "embeddings"])
@pytest.mark.parametrize("text", [FRAMES + LAST, LAST], ids=["from-its-middle", "last-line-only"])
def test_a_traceback_without_its_header_is_one_error(tmp_path: Path, parser: str, text: str) -> None:
    """Tailing that begins inside a traceback, or a rotation that cut it, still counts one error of its type."""
    log = tmp_path / "x.log"
    log.write_text(text + AFTER)
    out = subprocess.run([sys.executable, "-m", "logmetrics", "watch", "--oneshot", "--parser", parser, str(log)],
                         capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    errors = {labels: v for (name, labels), v in parse(out.stdout).items() if name == "backend_errors_total" and v}
    assert len(errors) == 1 and sum(errors.values()) == 1, errors
    assert dict(next(iter(errors)))["error_type"] == "oom", errors
