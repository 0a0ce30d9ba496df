"""A busy log rotated under load: 200,000 lines, rename and copytruncate rotations, each line once."""

from __future__ import annotations

import os
import shutil
from pathlib import Path

from tests.helpers import Server, access_line, total

BURST = 2_000


def write_burst(path: Path, first: int) -> None:
    """BURST access lines in one write, as a busy server's buffered logger does."""
    with open(path, "a") as f:
        f.write("".join(access_line(i) for i in range(first, first + BURST)))


def wait_until_counted(srv: Server, n: int) -> None:
    """Block until the server has counted at least ``n`` requests (its own metrics as the barrier)."""
    srv.wait_for(lambda s: total(s, "http_requests_total") >= n, timeout=60)


def test_rotations_under_load_lose_and_repeat_nothing(tmp_path: Path) -> None:
    """Rename rotations and a copytruncate while lines pour in: the count is exact at the end."""
    log = tmp_path / "vllm.log"
    log.write_text("")
    srv = Server(str(tmp_path), "--poll-interval", "0.05")
    written = 0
    try:
        for burst in range(100):
            write_burst(log, written)
            written += BURST
            if burst % 25 == 24 or burst == 60:  # the file being rotated is followed, with a backlog
                wait_until_counted(srv, written - 5 * BURST)
            if burst % 25 == 24:  # rename rotation, logrotate style: .1 -> .2, current -> .1
                if (tmp_path / "vllm.log.1").exists():
                    os.replace(tmp_path / "vllm.log.1", tmp_path / "vllm.log.2")
                os.replace(log, tmp_path / "vllm.log.1")
                log.write_text("")
            elif burst == 60:  # copytruncate: the copy holds lines maybe not read yet
                shutil.copyfile(log, tmp_path / "vllm.log.copy")
                with open(log, "r+") as f:
                    f.truncate(0)
        got = srv.wait_for(lambda s: total(s, "http_requests_total") >= written
                           and total(s, "logmetrics_rotations_total") >= 4, timeout=60)
        assert total(got, "http_requests_total") == written
        assert total(got, "logmetrics_rotations_total") == 4
        assert total(got, "logmetrics_truncations_total") == 1
        assert total(got, "http_requests_total", source=str(log)) == written  # one stream throughout
        again = srv.wait_for(lambda s: True)
        assert total(again, "http_requests_total") == written
    finally:
        assert srv.stop() == 0
