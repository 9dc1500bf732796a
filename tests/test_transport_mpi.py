"""The MPI transport under real ``mpiexec`` runs (2 ranks, one 4-rank case).

Each test runs one script of ``tests/mpi_scripts/transport_*.py`` with
:func:`mpirun.run_mpi` (hard timeout, process group killed on expiry) and
asserts on the exit code and the ``OK``/``INFO`` lines.  ``net``: ``shm`` is
MPICH's default local path, ``tcp`` forces its network path
(``UCX_TLS=tcp,self MPIR_CVAR_NOLOCAL=1``), standing in for a cluster.  The
scripts abort the whole job on any failure, so a broken rank never hangs.
A few in-process tests cover ``aiopdbp.launch.launcher`` and the env helpers.
"""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from tests.mpirun import REPO_ROOT, SCRIPTS_DIR, check_mpi, mpi_available, requires_mpi, run_mpi

from aiopdbp.launch import launcher as launch_mod
pytestmark = pytest.mark.mpi

NETS = [pytest.param(False, id="shm"), pytest.param(True, id="tcp")]
MODES = ["poll"]  # the one progress mode (a progress thread is gone: see progress.py)
JOB_TIMEOUT = 60  # run_mpi kills the job after this ...
TEST_TIMEOUT = 90  # ... well before pytest-timeout fires


def _script(name: str) -> Path:
    return SCRIPTS_DIR / f"transport_{name}.py"


def _ok_ranks(out: str, n: int, mode: str | None = None) -> None:
    for r in range(n):
        line = f"rank {r} OK" + (f" {mode}" if mode else "")
        assert line in out, f"missing {line!r} in output:\n{out}"


# --------------------------------------------------------------- ordering


@requires_mpi
@pytest.mark.timeout(TEST_TIMEOUT)
@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("tcp", NETS)
def test_blocks_arrive_in_order_per_source_and_channel_2ranks(tcp: bool, mode: str) -> None:
    out = check_mpi(run_mpi(_script("order"), 2, tcp=tcp, args=[mode], timeout=JOB_TIMEOUT))
    _ok_ranks(out, 2, mode)


@requires_mpi
@pytest.mark.timeout(TEST_TIMEOUT)
def test_blocks_arrive_in_order_per_source_and_channel_4ranks() -> None:
    out = check_mpi(run_mpi(_script("order"), 4, args=["poll"], timeout=JOB_TIMEOUT))
    _ok_ranks(out, 4, "poll")


@requires_mpi
@pytest.mark.timeout(TEST_TIMEOUT)
def test_blocks_arrive_in_order_under_uvloop() -> None:
    pytest.importorskip("uvloop")
    r = run_mpi(_script("order"), 2, args=["poll"], env={"TRANSPORT_TEST_LOOP": "uvloop"}, timeout=JOB_TIMEOUT)
    _ok_ranks(check_mpi(r), 2, "poll")


# ---------------------------------------------------------- payload sizes


@requires_mpi
@pytest.mark.timeout(TEST_TIMEOUT)
@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("tcp", NETS)
def test_zero_length_and_16mib_blocks_intact(tcp: bool, mode: str) -> None:
    out = check_mpi(run_mpi(_script("large"), 2, tcp=tcp, args=[mode], timeout=JOB_TIMEOUT))
    _ok_ranks(out, 2, mode)
    assert out.count("large OK") == 2


# ----------------------------------------------------------- dual channel


@requires_mpi
@pytest.mark.timeout(TEST_TIMEOUT)
@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("tcp", NETS)
def test_control_message_overtakes_data_backlog(tcp: bool, mode: str) -> None:
    out = check_mpi(run_mpi(_script("overtake"), 2, tcp=tcp, args=[mode], timeout=JOB_TIMEOUT))
    _ok_ranks(out, 2, mode)
    assert "control arrived after" in out


# ------------------------------------------------------------ many small


@requires_mpi
@pytest.mark.timeout(TEST_TIMEOUT)
@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("tcp", NETS)
def test_many_small_sends_complete_in_order(tcp: bool, mode: str) -> None:
    out = check_mpi(run_mpi(_script("many_small"), 2, tcp=tcp, args=[mode], timeout=JOB_TIMEOUT))
    _ok_ranks(out, 2, mode)


# ------------------------------------------- alloc hook and post()


@requires_mpi
@pytest.mark.timeout(TEST_TIMEOUT)
@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("tcp", NETS)
def test_alloc_hook_receives_in_place_and_post_returns_futures(tcp: bool, mode: str) -> None:
    out = check_mpi(run_mpi(_script("alloc"), 2, tcp=tcp, args=[mode], timeout=JOB_TIMEOUT))
    _ok_ranks(out, 2, mode)
    expect = "user_allocs=5 errors=1" if mode == "poll" else "user_allocs=0 errors=0"
    assert out.count(f"alloc hook OK {expect}") == 2, out


@requires_mpi
@pytest.mark.timeout(TEST_TIMEOUT)
def test_alloc_hook_skips_messages_below_alloc_min() -> None:
    # alloc_min 64: 5 of the 10 data messages reach the hook; the 1st, 3rd and 5th get its buffer
    out = check_mpi(run_mpi(_script("alloc"), 2, args=["poll", "64"], timeout=JOB_TIMEOUT))
    _ok_ranks(out, 2, "poll")
    assert out.count("alloc hook OK user_allocs=3 errors=1") == 2, out


# ------------------------------------------------------------- lifecycle


@requires_mpi
@pytest.mark.timeout(TEST_TIMEOUT)
@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("tcp", NETS)
def test_aclose_idempotent_and_send_after_close_raises(tcp: bool, mode: str) -> None:
    out = check_mpi(run_mpi(_script("lifecycle"), 2, tcp=tcp, args=[mode], timeout=JOB_TIMEOUT))
    _ok_ranks(out, 2, mode)
    assert out.count("lifecycle OK") == 2
    assert "task cancelled=True" in out


@requires_mpi
@pytest.mark.timeout(TEST_TIMEOUT)
@pytest.mark.parametrize("mode", ["auto"])
@pytest.mark.parametrize("doorbell", ["1", "0"])
def test_idle_transport_does_not_spin_a_core(mode: str, doorbell: str) -> None:
    # "auto" is the default (poll with back-off); AIOPDBP_PROGRESS must not leak in.
    # With the doorbell the ping after idling rings the peer; without, its timer finds it.
    env = {"AIOPDBP_PROGRESS": "", "AIOPDBP_DOORBELL": doorbell}
    out = check_mpi(run_mpi(_script("idle"), 2, args=[mode], env=env, timeout=JOB_TIMEOUT))
    _ok_ranks(out, 2, "poll" if mode == "auto" else mode)


@requires_mpi
@pytest.mark.timeout(TEST_TIMEOUT)
def test_abort_terminates_job_with_message() -> None:
    t0 = time.monotonic()
    r = run_mpi(_script("abort"), 2, timeout=JOB_TIMEOUT)
    assert r.returncode != 0, r
    assert "transport-abort-test: boom from rank 1" in r.stderr + r.stdout
    assert "was not aborted" not in r.stdout
    assert time.monotonic() - t0 < 25, "abort did not tear the job down promptly"


@requires_mpi
@pytest.mark.timeout(TEST_TIMEOUT)
def test_world_size_and_thread_level_under_mpiexec() -> None:
    out = check_mpi(run_mpi(_script("env"), 2, timeout=JOB_TIMEOUT))
    for r in range(2):
        assert f"rank {r} OK env size=2 mode=poll" in out, out


# ------------------------------------------------- in-process: helpers


def test_mpi_world_size_without_launcher_is_one_and_does_not_import_mpi() -> None:
    code = textwrap.dedent(
        """
        import os, sys
        for v in ("PMI_SIZE", "OMPI_COMM_WORLD_SIZE", "PMIX_SIZE", "MV2_COMM_WORLD_SIZE",
                  "SLURM_STEP_NUM_TASKS", "MPI_LOCALNRANKS"):
            os.environ.pop(v, None)
        from aiopdbp.transport.mpi import MPITransport, mpi_world_size
        assert mpi_world_size() == 1
        os.environ["OMPI_COMM_WORLD_SIZE"] = "8"
        assert mpi_world_size() == 8
        del os.environ["OMPI_COMM_WORLD_SIZE"]
        os.environ["PMI_SIZE"] = "garbage"
        os.environ["MPI_LOCALNRANKS"] = "3"
        assert mpi_world_size() == 3
        MPITransport.available()
        assert "mpi4py.MPI" not in sys.modules, "MPI initialised needlessly"
        print("ok")
        """
    )
    env = dict(os.environ, PYTHONPATH=str(REPO_ROOT))
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=60)
    assert r.returncode == 0 and r.stdout.strip() == "ok", r.stdout + r.stderr


def test_find_mpiexec_prefers_the_one_next_to_python() -> None:
    if not mpi_available():
        pytest.skip("needs mpiexec")
    beside = Path(sys.executable).parent / "mpiexec"
    found = launch_mod.find_mpiexec()
    if beside.exists():
        assert found == str(beside)
    assert os.access(found, os.X_OK)


def test_find_mpiexec_env_override_and_clear_error(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    fake = tmp_path / "my-mpiexec"
    fake.write_text("#!/bin/sh\nexit 0\n")
    fake.chmod(0o755)
    monkeypatch.setenv("AIOPDBP_MPIEXEC", str(fake))
    assert launch_mod.find_mpiexec() == str(fake)
    monkeypatch.setenv("AIOPDBP_MPIEXEC", str(tmp_path / "missing"))
    with pytest.raises(FileNotFoundError, match="AIOPDBP_MPIEXEC"):
        launch_mod.find_mpiexec()
    # nothing anywhere: a clear error with a hint
    monkeypatch.delenv("AIOPDBP_MPIEXEC")
    monkeypatch.setattr(launch_mod.sys, "executable", str(tmp_path / "bin" / "python"))
    monkeypatch.setattr(launch_mod, "_mpich_wheel_mpiexec", lambda: [])
    monkeypatch.setattr(launch_mod.sysconfig, "get_path", lambda *a, **k: str(tmp_path / "nothing"))
    monkeypatch.setenv("PATH", str(tmp_path / "empty"))
    with pytest.raises(FileNotFoundError, match="pip install mpich"):
        launch_mod.find_mpiexec()


def test_launch_command_shape_and_validation() -> None:
    if not mpi_available():
        pytest.skip("needs mpiexec")
    cmd = launch_mod.launch_command(3, ["prog.py", "--x", "1"], mpiexec_args=["-v"])
    rank_main = ["-m", "aiopdbp.rankout"]   # the rank's output prefixed from its start
    assert cmd[1:] == ["-v", "-n", "3", sys.executable, *rank_main, "prog.py", "--x", "1"]
    assert launch_mod.launch_command(2, ["python", "prog.py"])[-4:] == [sys.executable, *rank_main, "prog.py"]
    assert launch_mod.launch_command(2, ["python3", "prog.py"])[-4:] == [sys.executable, *rank_main, "prog.py"]
    assert launch_mod.launch_command(2, ["/opt/py/bin/python3.12", "p.py"])[-4:] == \
        ["/opt/py/bin/python3.12", *rank_main, "p.py"]
    assert launch_mod.launch_command(2, ["-m", "pkg.mod"])[-5:] == [sys.executable, *rank_main, "-m", "pkg.mod"]
    assert launch_mod.launch_command(2, ["-u", "prog.py"])[-3:] == [sys.executable, "-u", "prog.py"]
    with pytest.raises(ValueError):
        launch_mod.launch_command(0, ["prog.py"])
    with pytest.raises(ValueError):
        launch_mod.launch_command(2, [])
    env = launch_mod.launch_env(tcp=True, extra_env={"FOO": "1"}, base={})
    assert env == {"MPIR_CVAR_NOLOCAL": "1", "UCX_TLS": "tcp,self", "FI_PROVIDER": "tcp", "FOO": "1"}


@requires_mpi
@pytest.mark.timeout(TEST_TIMEOUT)
def test_launch_returns_the_jobs_exit_code(tmp_path: Path) -> None:
    prog = tmp_path / "prog.py"
    prog.write_text(
        textwrap.dedent(
            """
            import os, sys
            ok = os.environ.get("UCX_TLS") == "tcp,self" and os.environ.get("MY_FLAG") == "on"
            if not ok:
                sys.exit(9)
            sys.exit(3 if os.environ.get("PMI_RANK") == "1" else 0)
            """
        )
    )
    rc = launch_mod.launch(2, [str(prog)], tcp=True, extra_env={"MY_FLAG": "on"}, timeout=JOB_TIMEOUT)
    assert rc == 3
    rc = launch_mod.launch(1, [str(prog)], tcp=False, extra_env={"UCX_TLS": "x"}, timeout=JOB_TIMEOUT)
    assert rc == 9


@requires_mpi
@pytest.mark.timeout(TEST_TIMEOUT)
def test_run_mpi_kills_a_hung_job_on_timeout(tmp_path: Path) -> None:
    hang = tmp_path / "hang.py"
    hang.write_text("import time\nprint('started', flush=True)\ntime.sleep(120)\n")
    t0 = time.monotonic()
    with pytest.raises(pytest.fail.Exception, match="timed out"):
        run_mpi(hang, 2, timeout=3)
    assert time.monotonic() - t0 < 20
    # nothing of the job survives
    r = subprocess.run(["pgrep", "-f", str(hang)], capture_output=True, text=True)
    assert r.stdout.strip() == "", f"leftover processes: {r.stdout}"


@requires_mpi
@pytest.mark.timeout(TEST_TIMEOUT)
@pytest.mark.parametrize("spin", ["default", "0"])
def test_waiting_task_drives_progress_and_hands_it_back(spin: str) -> None:
    # no doorbell: a ring must not be what wakes the engine after its driver left
    env = {"AIOPDBP_SPIN_US": "" if spin == "default" else "0", "AIOPDBP_DOORBELL": "0"}
    _ok_ranks(check_mpi(run_mpi(_script("drive"), 2, env=env, timeout=JOB_TIMEOUT)), 2)
