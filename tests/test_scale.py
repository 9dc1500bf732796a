"""Many ranks on few cores (issue 31): a 16-rank oversubscribed job, per-peer state on demand."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.mpirun import REPO_ROOT, requires_mpi, run_mpi

PROGRAM = REPO_ROOT / "benchmarks" / "scale_alltoall.py"


def _records(folder: Path, n: int) -> dict[int, dict[str, object]]:
    recs = {}
    for path in folder.glob("aiopdbp-*.json"):
        rec = json.loads(path.read_text(encoding="utf-8"))
        recs[rec["rank"]] = rec
    assert sorted(recs) == list(range(n)), f"ranks that wrote: {sorted(recs)}"
    return recs


@requires_mpi
@pytest.mark.timeout(180)
def test_16_rank_oversubscribed_ring_job_links_only_the_peers_it_talks_to(tmp_path: Path) -> None:
    r = run_mpi(PROGRAM, n=16, args=["--pattern", "ring", "--units", "5", "--out", str(tmp_path)],
                timeout=170, max_ranks=16)
    assert r.returncode == 0, r.stdout + r.stderr
    recs = _records(tmp_path, 16)
    for rank in range(2, 15):   # ring neighbours, the barrier's rank 0, and 1 <-> 15's round trips
        talked = {rank - 1, rank + 1, 0}
        assert set(recs[rank]["links"]) <= talked, (rank, recs[rank]["links"])  # type: ignore[arg-type]
    assert set(recs[0]["links"]) == set(range(1, 16))   # rank 0 releases everybody's barrier
