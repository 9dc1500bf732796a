"""The programs in examples/ run and print what they promise.

Each example runs as a user would run it: ``python examples/x.py ...`` in a
subprocess (one process, no MPI: ``AIOPDBP_TRANSPORT`` unset, no launcher
variables), and under ``mpiexec`` (tests marked ``mpi``).  Every run has a
hard timeout; a hung job is killed with its process group.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys

import pytest

from tests.mpirun import REPO_ROOT, check_mpi, requires_mpi, run_mpi

EXAMPLES = REPO_ROOT / "examples"
TRAPEZOID = "9.000004291534424"

pytestmark = pytest.mark.timeout(120)

_LAUNCHER_VARS = ("AIOPDBP_TRANSPORT", "PMI_FD", "PMI_RANK", "PMI_SIZE", "PMI_PORT",
                  "MPI_LOCALNRANKS", "MPI_LOCALRANKID", "OMPI_COMM_WORLD_SIZE", "PMIX_SIZE")


def _env() -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k not in _LAUNCHER_VARS}
    env["PYTHONPATH"] = os.pathsep.join([str(REPO_ROOT), *filter(None, [env.get("PYTHONPATH")])])
    env["PYTHONUNBUFFERED"] = "1"
    return env


def run_local(argv: list[str], timeout: float = 60) -> str:
    """Run ``python *argv`` (or another command) in its own session; return stdout."""
    cmd = [sys.executable, *argv] if argv[0].endswith(".py") else argv
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            env=_env(), cwd=str(REPO_ROOT), start_new_session=True)
    try:
        out, err = proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        out, err = proc.communicate()
        pytest.fail(f"{cmd} timed out\n--- stdout ---\n{out}\n--- stderr ---\n{err}", pytrace=False)
    assert proc.returncode == 0, f"{cmd} exited {proc.returncode}\n{out}\n{err}"
    return out


def _check_trapezoid(out: str) -> None:
    lines = out.strip().splitlines()
    assert lines[-1] == TRAPEZOID, out
    assert abs(float(lines[-1]) - float(TRAPEZOID)) <= 1e-12
    assert out.count(TRAPEZOID) == 1           # printed once, by rank 0 / GP 0


# ------------------------------------------------------------- trapezoid
@pytest.mark.parametrize("p", [8, 64, 128])
def test_trapezoid_in_process(p: int) -> None:
    out = run_local([str(EXAMPLES / "trapezoid.py"), str(p)])
    _check_trapezoid(out)
    assert f"{p} GPs on 1 host(s)" in out


def test_trapezoid_value_is_exact_for_any_split() -> None:
    from examples import trapezoid
    for p in (1, 3, 7, 8, 64, 128, 1000):
        total = sum(trapezoid.local_trapezoid(k, p) for k in range(p))
        assert repr(total) == TRAPEZOID
        assert total == 9 + 9 * 2.0**-21


@pytest.mark.mpi
@requires_mpi
@pytest.mark.parametrize(("ranks", "p"), [(2, 8), (2, 64), (4, 128), (4, 8)])
def test_trapezoid_mpi(ranks: int, p: int) -> None:
    out = check_mpi(run_mpi(EXAMPLES / "trapezoid.py", n=ranks, args=[str(p)], timeout=90))
    _check_trapezoid(out)
    assert f"{p} GPs on {ranks} host(s)" in out


# ----------------------------------------------------------- jacobi heat
@pytest.mark.parametrize("args", [["4"], ["3", "--barrier", "dissemination", "--size", "24"],
                                  ["5", "--barrier", "counter", "--size", "20", "--check", "1"]])
def test_jacobi_heat_matches_numpy_in_process(args: list[str]) -> None:
    out = run_local([str(EXAMPLES / "jacobi_heat.py"), *args])
    assert "max |parallel - numpy reference| = 0 " in out and out.rstrip().endswith("OK"), out


@pytest.mark.mpi
@requires_mpi
def test_jacobi_heat_mpi() -> None:
    out = check_mpi(run_mpi(EXAMPLES / "jacobi_heat.py", n=2, args=["4", "--size", "32"], timeout=90))
    assert "4 strips on 2 host(s)" in out and out.rstrip().endswith("OK"), out


# --------------------------------------------------------------- pipeline
def test_pipeline_in_process() -> None:
    out = run_local([str(EXAMPLES / "pipeline.py"), "--workers", "3", "--chunks", "12", "--cpu"])
    assert "sink: all 12 chunks arrived once, in order per worker, content OK" in out, out
    assert "MB/s" in out and "frames/s" in out


@pytest.mark.mpi
@requires_mpi
def test_pipeline_mpi() -> None:
    out = check_mpi(run_mpi(EXAMPLES / "pipeline.py", n=2,
                            args=["--workers", "3", "--chunks", "12", "--cpu"], timeout=90))
    assert "2 host(s)" in out and "content OK" in out, out


def test_pipeline_device_sim_in_process() -> None:
    out = run_local([str(EXAMPLES / "pipeline.py"), "--workers", "2", "--chunks", "8", "--device", "sim"])
    assert "(SGPs, sim device)" in out, out
    assert "sink: all 8 chunks arrived once, in order per worker, content OK" in out, out


@pytest.mark.mpi
@requires_mpi
def test_pipeline_device_sim_mpi() -> None:
    out = check_mpi(run_mpi(EXAMPLES / "pipeline.py", n=2,
                            args=["--workers", "3", "--chunks", "12", "--device", "sim"], timeout=90))
    assert "2 host(s)" in out and "(SGPs, sim device)" in out and "content OK" in out, out


# ----------------------------------------------------------- hello cluster
def test_hello_cluster_in_process() -> None:
    out = run_local([str(EXAMPLES / "hello_cluster.py")])
    assert "hello_cluster: 1 rank(s)" in out
    assert "ring: hello-0 -> hello-0: 'hello from hello-0'" in out
    assert "streams to hello-0: 1 x 4000 bytes, all correct" in out


@pytest.mark.mpi
@requires_mpi
def test_hello_cluster_mpi() -> None:
    out = check_mpi(run_mpi(EXAMPLES / "hello_cluster.py", n=2, timeout=90))
    assert "ring: hello-1 -> hello-0: 'hello from hello-1'" in out
    assert "streams to hello-0: 2 x 4000 bytes, all correct" in out
    assert "barrier: all 2 GPs passed" in out


@pytest.mark.mpi
@requires_mpi
def test_hello_cluster_aiopdbp_launch_4() -> None:
    out = run_local([sys.executable, "-m", "aiopdbp", "launch", "-n", "4",
                     str(EXAMPLES / "hello_cluster.py")], timeout=90)
    assert "hello_cluster: 4 rank(s)" in out and "4 x 4000 bytes, all correct" in out, out
