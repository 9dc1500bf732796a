"""A rank whose send fails only because a GP on another rank left (a
consequence no rank reports) fails the job naming its own GP, as any other
failing rank does (issue 30's newcomer round: it said "rank 0 failed")."""

from __future__ import annotations

import pytest

from tests.mpirun import SCRIPTS_DIR, requires_mpi, run_mpi

pytestmark = [pytest.mark.mpi, requires_mpi, pytest.mark.timeout(120)]


def test_a_sender_whose_receiver_left_mid_stream_names_its_gp() -> None:
    proc = run_mpi(SCRIPTS_DIR / "leave_mid_stream.py", n=2, timeout=90)
    out = proc.stdout + proc.stderr
    assert proc.returncode != 0, out
    assert "[0] aiopdbp: rank 0 (GP src) failed: BrokenResourceError: " in out, out
