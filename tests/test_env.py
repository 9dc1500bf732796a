"""The environment is read in one module (aiopdbp.env), by typed functions;
importing the bottom layers does not load MPI."""

from __future__ import annotations

import ast
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from aiopdbp import env
from aiopdbp.transport.mpiload import mpi_world_size

PACKAGE = Path(env.__file__).parent
LAUNCHER_VARS = (*env.RANK_VARS, *env.SIZE_VARS, *env.LOCAL_RANK_VARS, *env.LOCAL_SIZE_VARS, *env.JOB_VARS)


@pytest.fixture
def clean(monkeypatch: pytest.MonkeyPatch) -> pytest.MonkeyPatch:
    """No launcher variable set."""
    for var in LAUNCHER_VARS:
        monkeypatch.delenv(var, raising=False)
    return monkeypatch


def _reads_environment(tree: ast.AST) -> list[int]:
    """Lines that touch ``os.environ``/``os.getenv`` or import them from os."""
    lines = []
    for node in ast.walk(tree):
        if (isinstance(node, ast.Attribute) and node.attr in ("environ", "environb", "getenv", "getenvb")
                and isinstance(node.value, ast.Name) and node.value.id == "os"):
            lines.append(node.lineno)
        elif isinstance(node, ast.ImportFrom) and node.module == "os" and any(
                a.name in ("environ", "environb", "getenv", "getenvb") for a in node.names):
            lines.append(node.lineno)
    return lines


def test_no_module_but_env_reads_the_environment() -> None:
    found = {}
    for path in sorted(PACKAGE.rglob("*.py")):
        if path.name == "env.py" and path.parent == PACKAGE:
            continue
        lines = _reads_environment(ast.parse(path.read_text(encoding="utf-8")))
        if lines:
            found[str(path.relative_to(PACKAGE.parent))] = lines
    assert found == {}


_ENV_NAME = re.compile(r"(AIOPDBP|PMIX?|OMPI|MV2|MPI_LOCAL|SLURM|HYDRA)_[A-Z_]+")


def test_no_module_but_env_names_a_variable() -> None:
    """A launcher or AIOPDBP_* variable's name is a string of env.py's alone
    (a message that mentions one in a sentence is fine): the others use its names."""
    found = {}
    for path in sorted(PACKAGE.rglob("*.py")):
        if path.name == "env.py" and path.parent == PACKAGE:
            continue
        tree = ast.parse(path.read_text(encoding="utf-8"))
        docs = {id(n.body[0].value) for n in ast.walk(tree)
                if isinstance(n, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef))
                and n.body and isinstance(n.body[0], ast.Expr) and isinstance(n.body[0].value, ast.Constant)}
        names = [f"{node.lineno}: {node.value}" for node in ast.walk(tree)
                 if isinstance(node, ast.Constant) and isinstance(node.value, str) and id(node) not in docs
                 and _ENV_NAME.fullmatch(node.value)]
        if names:
            found[str(path.relative_to(PACKAGE.parent))] = names
    assert found == {}


def test_env_rank_without_launcher_is_zero(clean: pytest.MonkeyPatch) -> None:
    assert (env.env_rank(), env.launcher_rank()) == (0, None)


def test_env_rank_skips_a_garbage_variable(clean: pytest.MonkeyPatch) -> None:
    clean.setenv("OMPI_COMM_WORLD_RANK", "x")
    clean.setenv("PMI_RANK", "3")
    assert env.env_rank() == 3


def test_env_size_without_launcher_is_one(clean: pytest.MonkeyPatch) -> None:
    assert env.env_size() == 1


def test_env_size_is_what_the_transport_reports(clean: pytest.MonkeyPatch) -> None:
    clean.setenv("PMI_SIZE", "4")
    assert env.env_size() == mpi_world_size() == 4


def test_local_ranks_reads_hydras_count_without_its_suffix(clean: pytest.MonkeyPatch) -> None:
    clean.setenv("MPI_LOCALNRANKS", "3(x2)")
    assert env.local_ranks() == 3


def test_in_mpi_job_under_hydra(clean: pytest.MonkeyPatch) -> None:
    assert not env.in_mpi_job()
    clean.setenv("PMI_RANK", "0")
    assert env.in_mpi_job()


def test_flags_are_on_unless_zero(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(env.DOORBELL, raising=False)
    monkeypatch.setenv(env.UVLOOP, "0")
    assert (env.doorbell_enabled(), env.uvloop_wanted()) == (True, False)


def test_device_backend_defaults_to_auto_and_lowers_the_name(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(env.DEVICE, raising=False)
    assert env.device_backend() == "auto"
    monkeypatch.setenv(env.DEVICE, " SIM ")
    assert env.device_backend() == "sim"


def test_microsecond_setting_is_read_in_seconds(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(env.SPIN_US, "5")
    monkeypatch.delenv(env.IDLE_MAX_US, raising=False)
    assert (env.spin_seconds(1.0), env.idle_max_seconds(0.05)) == (pytest.approx(5e-6), 0.05)


def test_microsecond_setting_not_a_number_is_a_clear_error(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(env.MAX_BACKOFF_US, "fast")
    with pytest.raises(ValueError, match="AIOPDBP_MAX_BACKOFF_US='fast' is not a number"):
        env.max_backoff_seconds(1e-3)


def test_mpi_thread_level_rejects_an_unknown_level(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(env.MPI_THREAD_LEVEL, "lots")
    with pytest.raises(ValueError, match="is not an MPI thread level"):
        env.mpi_thread_level()


def test_emulated_link_bps_only_on_an_emulated_cluster() -> None:
    assert env.emulated_link_bps({}) is None
    assert env.emulated_link_bps({env.EMULATE_JOB: "ab12cd", env.EMULATE_LINK_BPS: "1000"}) == 1000
    assert env.emulated_link_bps({env.EMULATE_JOB: "ab12cd", env.EMULATE_LINK_BPS: "?"}) == 0


def test_job_directory_carries_a_failure_status(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    assert env.recorded_failure(str(tmp_path)) is None
    monkeypatch.setenv(env.JOB_DIR, str(tmp_path))
    env.record_failure(1)
    assert env.recorded_failure(str(tmp_path)) == 1


def test_job_directory_lists_only_mpich_segments(tmp_path: Path) -> None:
    (tmp_path / f"{env.SHM_FILE_PREFIX}123").write_text("/dev/shm/mpich_shm_a\n/etc/passwd\n")
    (tmp_path / env.FAILED_FILE).write_text("/dev/shm/mpich_shm_b\n")
    assert env.recorded_shm(str(tmp_path)) == {"/dev/shm/mpich_shm_a"}


def test_without_job_directory_nothing_is_recorded(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.delenv(env.JOB_DIR, raising=False)
    monkeypatch.chdir(tmp_path)
    env.record_failure(1)
    env.record_own_shm()
    assert list(tmp_path.iterdir()) == []


# ------------------------------------------------------------------ MPI
@pytest.mark.parametrize("module", ["aiopdbp.env", "aiopdbp.transport", "aiopdbp.device", "aiopdbp.launch"])
def test_importing_a_bottom_layer_does_not_load_mpi4py(module: str) -> None:
    """MPI is loaded when a transport is made (tests/test_layers.py checks
    that a layer loads nothing above it)."""
    code = f"import sys, {module}\nprint('mpi4py' in sys.modules)\n"
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60,
                       env={**os.environ, "PYTHONPATH": str(PACKAGE.parent)})
    assert (r.returncode, r.stdout.strip()) == (0, "False"), r.stderr


@pytest.mark.timeout(60)
@pytest.mark.parametrize("flag, helpers", [("1", 1), ("0", 0)])
def test_the_last_words_helper_starts_under_plain_mpiexec_unless_aiopdbp_last_words_is_0(
        flag: str, helpers: int) -> None:
    # a rank of a plain mpiexec (a PMI socket, no aiopdbp launch): one helper
    # process, unless turned off; the child list is the kernel's
    code = ("import os\nr, w = os.pipe()\nos.environ['PMI_FD'] = str(r)\n"
            "from aiopdbp.runtime import lastwords\nlastwords.start(0)\n"
            "print(len(open(f'/proc/self/task/{os.getpid()}/children').read().split()))\n"
            "lastwords.quiet()\n")
    env = {k: v for k, v in os.environ.items() if k not in ("AIOPDBP_LAUNCHER", "PMI_FD")}
    env["AIOPDBP_LAST_WORDS"] = flag
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=30)
    assert out.returncode == 0, out.stderr
    assert int(out.stdout) == helpers, out.stdout


_CELLS_PROBE = ("import os, sys; from aiopdbp.transport.mpiload import prepare_mpi_import; prepare_mpi_import(); "
                "print(os.environ.get(sys.argv[1]), 'mpi4py.MPI' in sys.modules)")


def _cells_after_prepare(environ: dict[str, str]) -> str:
    """What a fresh process's MPICH cells variable is after aiopdbp prepared MPI's import."""
    out = subprocess.run([sys.executable, "-c", _CELLS_PROBE, env.MPICH_SHM_CELLS], env=environ,
                         capture_output=True, text=True, timeout=50, check=True)
    return out.stdout.strip()


def _rank_of(local: int, **extra: str) -> dict[str, str]:
    """The environment of rank 0 of a job with ``local`` ranks on its host."""
    base = {k: v for k, v in os.environ.items() if k not in LAUNCHER_VARS and k != env.MPICH_SHM_CELLS}
    return {**base, "PMI_RANK": "0", "PMI_SIZE": str(local), "MPI_LOCALNRANKS": str(local), **extra}


@pytest.mark.parametrize("local,cells", [(2, 64), (4, 42), (16, 8), (32, 8)])
def test_a_rank_asks_mpich_for_a_cell_budget_shared_among_its_local_peers(local: int, cells: int) -> None:
    """Before MPI starts, MPICH is asked for 128 cells over the local peers (8 to its own 64)."""
    assert _cells_after_prepare(_rank_of(local)) == f"{cells} False"


def test_a_cell_count_named_in_the_environment_stands() -> None:
    assert _cells_after_prepare(_rank_of(32, **{env.MPICH_SHM_CELLS: "32"})) == "32 False"


def test_a_process_outside_a_job_leaves_the_cell_count_to_the_jobs_it_starts() -> None:
    environ = {k: v for k, v in os.environ.items() if k not in LAUNCHER_VARS and k != env.MPICH_SHM_CELLS}
    assert _cells_after_prepare(environ) == "None False"
