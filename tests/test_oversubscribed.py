"""More ranks than cores: a busy N-to-N exchange still completes, every unit
checked by content (benchmarks/soak.py), and the progress engine knows it is
oversubscribed (it then never spins: see aiopdbp/transport/progress.py).
How long it takes is a benchmark figure, not a test."""

from __future__ import annotations

import json
import os

import pytest

from tests.mpirun import REPO_ROOT, requires_mpi, run_mpi

pytestmark = [pytest.mark.mpi, requires_mpi, pytest.mark.timeout(300)]


def test_four_ranks_complete_a_busy_n_to_n_exchange_checked_by_content() -> None:
    proc = run_mpi(REPO_ROOT / "benchmarks" / "soak.py", n=4,
                   args=["--cdus", "120000", "--gps", "2", "--cancel", "0.01"], timeout=240)
    out = proc.stdout + proc.stderr
    assert proc.returncode == 0, out
    rows = [json.loads(line.split("SOAK ", 1)[1]) for line in proc.stdout.splitlines() if "SOAK " in line]
    assert sorted(r["rank"] for r in rows) == [0, 1, 2, 3], out
    cores = len(os.sched_getaffinity(0))
    for r in rows:
        assert (r["lost"], r["duplicated"], r["phantom"], r["corrupt"], r["out_of_order"]) == (0,) * 5, r
        assert r["msgs_received"] > 0 and r["cdus_received"] > 0, r
        assert r["oversubscribed"] == (4 > cores), r
    # a stream cancelled after its END was queued still arrives (40 segments + OPEN + END)
    late = sum(r["streams_completed_after_cancel"] for r in rows) * 42
    assert sum(r["cdus_sent"] for r in rows) + late == sum(r["cdus_received"] for r in rows), rows
