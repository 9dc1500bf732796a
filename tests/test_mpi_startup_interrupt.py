"""Ctrl-C while the ranks are still starting (before ``aiopdbp.run``: a slow
import, say) ends the job as it does later: one line, status 130, no rank's
traceback and no hydra banner (issue 30's newcomer round)."""

from __future__ import annotations

import os
import signal

import pytest

from tests.mpirun import SCRIPTS_DIR, requires_mpi
from tests.test_mpi_failures import LiveJob, _assert_clean, _launch

pytestmark = [pytest.mark.mpi, requires_mpi, pytest.mark.timeout(120)]

SLOW = SCRIPTS_DIR / "slow_start.py"


def _interrupted(job: LiveJob) -> tuple[int, str]:
    pids = [int(m.group(1)) for m in job.wait_for(r"ready (\d+)$", 3)]
    os.kill(job.proc.pid, signal.SIGINT)  # what Ctrl-C does: the launcher passes it on
    rc = job.finish()
    _assert_clean(pids, [], job.output)
    return rc, job.output


def test_ctrl_c_before_aiopdbp_run_prints_one_line_and_exits_130() -> None:
    rc, out = _interrupted(_launch("-n", "3", str(SLOW)))
    assert rc == 130, out
    lines = [ln for ln in out.splitlines() if ln.strip() and not ln.split(" ", 1)[-1].startswith("ready ")]
    assert len(lines) == 1 and lines[0].startswith("aiopdbp launch: interrupted by SIGINT"), out


def test_ctrl_c_before_aiopdbp_run_shows_no_traceback_or_banner() -> None:
    rc, out = _interrupted(_launch("-n", "3", str(SLOW)))
    assert "Traceback" not in out and "KeyboardInterrupt" not in out, out
    assert "BAD TERMINATION" not in out, out
