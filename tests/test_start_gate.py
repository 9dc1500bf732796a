"""The start gate (issue 31): on an oversubscribed host the ranks of an ``aiopdbp
launch`` job wait asleep at a gate in the job directory until every rank has
come, and only then initialise MPI (``aiopdbp.env.start_gate``, held before the
first import of ``mpi4py.MPI`` by ``aiopdbp.rankout``)."""

from __future__ import annotations

import subprocess
import sys
import threading
from pathlib import Path

import pytest

from aiopdbp import env, rankout
from tests.mpirun import requires_mpi

LAUNCHER_VARS = (*env.RANK_VARS, *env.SIZE_VARS, *env.LOCAL_RANK_VARS, *env.LOCAL_SIZE_VARS, *env.JOB_VARS)


def _waiter(where: Path, rank: int, ranks: int, out: dict[int, bool]) -> threading.Thread:
    def wait() -> None:
        out[rank] = env.start_gate(str(where), rank, ranks, timeout=60.0)
    t = threading.Thread(target=wait, daemon=True)
    t.start()
    return t


@pytest.mark.timeout(60)
def test_the_gate_holds_every_rank_until_the_last_has_come_then_lets_all_through(tmp_path: Path) -> None:
    got: dict[int, bool] = {}
    waiters = [_waiter(tmp_path, rank, 4, got) for rank in range(3)]
    for t in waiters:
        t.join(0.2)
    assert all(t.is_alive() for t in waiters) and not got   # three of four came: all wait
    assert env.start_gate(str(tmp_path), 3, 4, timeout=60.0)   # the last one is not held
    for t in waiters:
        t.join(30)
    assert got == {0: True, 1: True, 2: True}


@pytest.mark.timeout(30)
def test_the_gate_lets_a_rank_go_after_its_timeout_when_one_never_comes(tmp_path: Path) -> None:
    assert not env.start_gate(str(tmp_path), 0, 2, timeout=0.05)
    assert (tmp_path / f"{env.GATE_FILE_PREFIX}0").exists()   # (its coming is marked all the same)


@pytest.mark.timeout(30)
def test_no_gate_where_the_directory_cannot_hold_one(tmp_path: Path) -> None:
    assert not env.start_gate(str(tmp_path / "gone"), 0, 2, timeout=5.0)


@pytest.fixture
def clean(monkeypatch: pytest.MonkeyPatch) -> pytest.MonkeyPatch:
    for var in LAUNCHER_VARS:
        monkeypatch.delenv(var, raising=False)
    monkeypatch.delenv(env.JOB_DIR, raising=False)
    return monkeypatch


def _job(monkeypatch: pytest.MonkeyPatch, where: Path, size: int, local: int, busy: bool) -> None:
    monkeypatch.setenv("PMI_RANK", "1")
    monkeypatch.setenv("PMI_SIZE", str(size))
    monkeypatch.setenv("MPI_LOCALNRANKS", str(local))
    monkeypatch.setenv(env.JOB_DIR, str(where))
    monkeypatch.setattr(env, "oversubscribed", lambda ranks=None: busy)


def test_a_rank_has_a_gate_only_with_every_rank_on_an_oversubscribed_host_under_aiopdbp_launch(
        clean: pytest.MonkeyPatch, tmp_path: Path) -> None:
    assert env.gate_ranks() is None                      # not in a job
    _job(clean, tmp_path, 4, 4, busy=True)
    assert env.gate_ranks() == 4
    _job(clean, tmp_path, 4, 2, busy=True)               # ranks on other hosts too
    assert env.gate_ranks() is None
    _job(clean, tmp_path, 4, 4, busy=False)              # a core for every rank
    assert env.gate_ranks() is None
    _job(clean, tmp_path, 4, 4, busy=True)
    clean.delenv(env.JOB_DIR)                            # not under aiopdbp launch
    assert env.gate_ranks() is None


@pytest.mark.timeout(30)
def test_the_first_import_of_mpi4py_mpi_passes_the_gate_once_then_the_finder_leaves(
        clean: pytest.MonkeyPatch, tmp_path: Path) -> None:
    _job(clean, tmp_path, 2, 2, busy=True)
    clean.setattr(sys, "meta_path", list(sys.meta_path))
    clean.delitem(sys.modules, "mpi4py.MPI", raising=False)
    gate = rankout.hold_mpi_init()
    assert gate is not None and sys.meta_path[0] is gate
    (tmp_path / f"{env.GATE_FILE_PREFIX}0").touch()       # rank 0 is at the gate already
    assert gate.find_spec("mpi4py") is None and gate.passed is None   # (the package is not held)
    assert gate.find_spec("mpi4py.MPI") is None           # the import itself is the other finders'
    assert gate.passed is True and gate not in sys.meta_path
    assert (tmp_path / f"{env.GATE_FILE_PREFIX}1").exists()


GATE_PROBE = """
import os, sys
import aiopdbp
from aiopdbp.env import job_dir

async def main():
    async with aiopdbp.open_node() as node:
        marks = sorted(n for n in os.listdir(job_dir()) if n.startswith("gate."))
        print("MARKS", node.rank, ",".join(marks), flush=True)

aiopdbp.run(main())
"""


@requires_mpi
@pytest.mark.mpi
@pytest.mark.timeout(150)
def test_every_rank_of_an_oversubscribed_launch_passed_the_gate_before_mpi_init(tmp_path: Path) -> None:
    n = 4
    if not env.oversubscribed(n):
        pytest.skip(f"{n} ranks are not more than this machine's cores: no gate")
    prog = tmp_path / "gate_probe.py"
    prog.write_text(GATE_PROBE, encoding="utf-8")
    r = subprocess.run([sys.executable, "-m", "aiopdbp", "launch", "-n", str(n), str(prog)],
                       capture_output=True, text=True, timeout=140, cwd=tmp_path)
    out = r.stdout + r.stderr
    assert r.returncode == 0, out
    want = ",".join(sorted(f"{env.GATE_FILE_PREFIX}{k}" for k in range(n)))
    assert out.count(f" {want}") == n, out   # every rank saw every rank's mark once its MPI had started
