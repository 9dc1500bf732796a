"""Run a Python script under ``mpiexec`` from a test, with a hard timeout.

Usage in a test module::

    from mpirun import mpi_available, run_mpi, requires_mpi   # or tests.mpirun

    @requires_mpi
    @pytest.mark.timeout(90)
    def test_something_2ranks():
        r = run_mpi(SCRIPTS / "transport_x.py", n=2, args=["poll"])
        assert r.returncode == 0, r.stdout + r.stderr

``run_mpi`` starts ``mpiexec`` in its own session (process group); if the
job outlives ``timeout`` the whole group is killed (SIGTERM, then SIGKILL) and
the test fails with everything the job printed, so a hung MPI job can never
hang the suite.  ``PYTHONPATH`` gets the repository root prepended so the
scripts import the working-tree ``aiopdbp``.  Keep jobs small: this machine has
few cores, use 2 ranks (4 at most).
"""

from __future__ import annotations

import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
from collections.abc import Iterable, Mapping
from pathlib import Path

import pytest

REPO_ROOT = Path(__file__).resolve().parent.parent
SCRIPTS_DIR = Path(__file__).resolve().parent / "mpi_scripts"
from aiopdbp.launch.launcher import TCP_ENV, find_mpiexec
from aiopdbp.launch.watch import JobWatch

__all__ = ["run_mpi", "mpi_available", "requires_mpi", "REPO_ROOT", "SCRIPTS_DIR", "check_mpi",
           "unprefixed", "rank_lines", "HYDRA_FAILED"]

MAX_RANKS = 4


def _mpiexec_or_none() -> str | None:
    try:
        return find_mpiexec()
    except FileNotFoundError:
        return None


def mpi_available() -> bool:
    """True if an ``mpiexec`` and mpi4py are available (nothing is imported)."""
    import importlib.util

    return _mpiexec_or_none() is not None and importlib.util.find_spec("mpi4py") is not None


requires_mpi = pytest.mark.skipif(not mpi_available(), reason="needs mpiexec and mpi4py")


def run_mpi(
    script: str | Path,
    n: int = 2,
    *,
    tcp: bool = False,
    args: Iterable[str] = (),
    timeout: float = 60,
    env: Mapping[str, str] | None = None,
    max_ranks: int = MAX_RANKS,
) -> subprocess.CompletedProcess[str]:
    """Run ``mpiexec -n n python script *args``; return the completed process.

    ``tcp=True`` forces MPICH's network path (TCP) between the local ranks.
    ``env`` adds environment variables.  On timeout the process group is
    killed and the calling test fails (``pytest.fail``) with the output.
    ``max_ranks``: raise it only for a test whose point is oversubscription.
    """
    if not 1 <= n <= max_ranks:
        raise ValueError(f"use 1..{max_ranks} ranks on this machine, not {n}")
    mpiexec = _mpiexec_or_none()
    if mpiexec is None:
        pytest.skip("no mpiexec available")
    full_env = dict(os.environ)
    full_env["PYTHONPATH"] = os.pathsep.join(
        [str(REPO_ROOT)] + ([full_env["PYTHONPATH"]] if full_env.get("PYTHONPATH") else [])
    )
    full_env["PYTHONUNBUFFERED"] = "1"
    # never inherit a parent's launcher state (a test run from inside mpiexec)
    for var in ("PMI_FD", "PMI_RANK", "PMI_SIZE", "PMI_PORT", "MPI_LOCALNRANKS", "MPI_LOCALRANKID"):
        full_env.pop(var, None)
    if tcp:
        full_env.update(TCP_ENV)
    if env:
        full_env.update(env)
    job_dir = tempfile.mkdtemp(prefix="aiopdbp-test-job-")
    full_env["AIOPDBP_JOB_DIR"] = job_dir  # ranks list their shm segments there
    cmd = [mpiexec, "-n", str(n), sys.executable, str(script), *map(str, args)]
    proc = subprocess.Popen(
        cmd,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=full_env,
        cwd=str(REPO_ROOT),
        start_new_session=True,
    )
    # MPICH leaves /dev/shm segments behind when a job is aborted or killed:
    # remove the ones *this* job's processes mapped, whatever the outcome.
    watch = JobWatch(proc.pid, job_dir=job_dir).start()
    try:
        out, err = proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        _kill_group(proc)
        out, err = proc.communicate()
        _forget(watch)
        pytest.fail(
            f"MPI job timed out after {timeout:.0f}s and was killed: {' '.join(cmd)}\n"
            f"--- stdout ---\n{out}\n--- stderr ---\n{err}",
            pytrace=False,
        )
    _forget(watch)
    return subprocess.CompletedProcess(cmd, proc.returncode, out, err)


def _forget(watch: JobWatch) -> None:
    watch.stop()
    watch.kill_all()
    watch.remove_leftovers()
    if watch.job_dir is not None:
        shutil.rmtree(watch.job_dir, ignore_errors=True)


def _kill_group(proc: subprocess.Popen[str]) -> None:
    for sig, wait in ((signal.SIGTERM, 3.0), (signal.SIGKILL, 5.0)):
        try:
            os.killpg(proc.pid, sig)
        except ProcessLookupError:
            return
        try:
            proc.wait(wait)
            # mpiexec gone; ranks may linger in the group: make sure
            os.killpg(proc.pid, signal.SIGKILL)
            return
        except ProcessLookupError:
            return
        except subprocess.TimeoutExpired:
            continue


_PREFIX = re.compile(r"^\[(\d+)\] ", re.M)


def rank_lines(out: str) -> list[tuple[int | None, str]]:
    """``(rank, line)`` for every line of a job's output; ``rank`` is None for
    lines without aiopdbp's ``[rank] `` prefix (mpiexec's own lines)."""
    result: list[tuple[int | None, str]] = []
    for line in out.splitlines():
        m = _PREFIX.match(line)
        result.append((int(m.group(1)), line[m.end():]) if m else (None, line))
    return result


def unprefixed(out: str) -> str:
    """The job's output without the ``[rank] `` line prefixes."""
    return _PREFIX.sub("", out)


#: what a plain ``mpiexec`` (hydra) returns for a job whose failing rank
#: exited 1: hydra kills the ranks still running and ORs every rank's wait
#: status, and it records a rank it killed as 0 or, when it reaped it first,
#: as SIGKILL -- so 9 now and then (docs/guide/failures.md: "under a plain
#: `mpiexec`, hydra's own status"; `aiopdbp launch` returns 1 exactly).
HYDRA_FAILED = (1, 9)


def check_mpi(result: subprocess.CompletedProcess[str], expect_rc: int | tuple[int, ...] = 0) -> str:
    """Assert the job exited with ``expect_rc`` (or one of them); return its
    stdout without the ``[rank] `` line prefixes (``result.stdout`` keeps
    them)."""
    allowed = expect_rc if isinstance(expect_rc, tuple) else (expect_rc,)
    assert result.returncode in allowed, (
        f"{' '.join(result.args)} exited {result.returncode} (expected one of {allowed})\n"
        f"--- stdout ---\n{result.stdout}\n--- stderr ---\n{result.stderr}"
    )
    return unprefixed(result.stdout)
