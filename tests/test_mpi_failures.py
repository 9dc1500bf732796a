"""Failures across ranks end with a clear error, never a hang."""

from __future__ import annotations

import time

import pytest

try:
    from tests.mpirun import SCRIPTS_DIR, requires_mpi, run_mpi
except ImportError:  # tests/ is not a package
    from mpirun import SCRIPTS_DIR, requires_mpi, run_mpi

pytestmark = [pytest.mark.mpi, requires_mpi, pytest.mark.timeout(120)]


def test_raising_rank_aborts_job_with_traceback() -> None:
    t0 = time.monotonic()
    proc = run_mpi(SCRIPTS_DIR / "fail_rank.py", n=2, timeout=90)
    out = proc.stdout + proc.stderr
    assert proc.returncode != 0
    assert "boom from rank 1" in out and "Traceback" in out
    assert time.monotonic() - t0 < 60  # the waiting rank did not hang


def test_handshake_timeout_raises_handshake_error_on_waiting_rank() -> None:
    proc = run_mpi(SCRIPTS_DIR / "handshake_timeout.py", n=2, timeout=90)
    out = proc.stdout + proc.stderr
    assert "HANDSHAKE ERROR" in out and "within 1.0 s" in out, out
    assert "UNEXPECTED" not in out
