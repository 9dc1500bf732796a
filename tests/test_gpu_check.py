"""``tools/gpu_check.sh`` in simulated mode, as CI runs it: every step runs,
is recorded in the JSON, and the whole check stays well under a minute."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from aiopdbp.launch.launcher import find_mpiexec
from tests.mpirun import requires_mpi

ROOT = Path(__file__).resolve().parent.parent
STEPS = ["setup", "info", "bandwidth", "blocking", "tests", "bench"]


@requires_mpi
@pytest.mark.mpi
@pytest.mark.timeout(240)
def test_gpu_check_in_sim_mode_runs_every_step(tmp_path: Path) -> None:
    env = {**os.environ, "AIOPDBP_DEVICE": "sim", "PYTHON": sys.executable, "AIOPDBP_MPIEXEC": find_mpiexec()}
    proc = subprocess.run(["bash", str(ROOT / "tools" / "gpu_check.sh"), str(tmp_path)], env=env, cwd=ROOT,
                          capture_output=True, text=True, timeout=230, start_new_session=True)
    report = json.loads((tmp_path / "gpu_check.json").read_text())
    statuses = {k: v["status"] for k, v in report["steps"].items()}
    assert proc.returncode == 0 and statuses == dict.fromkeys(STEPS, "ok"), (statuses, proc.stderr[-3000:])
    blocking = report["steps"]["blocking"]["result"]["calls"]
    assert blocking["copy_d2h_pageable_held_stream"]["blocks"] and not blocking["copy_d2h_pinned_other_stream"]["blocks"]
