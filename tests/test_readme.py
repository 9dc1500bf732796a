"""Every complete program shown in README.md runs exactly as shown: in one
process and under ``aiopdbp launch -n 2`` (a program is a ``python`` block
that calls ``aiopdbp.run(``; the other blocks are fragments)."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from tests.mpirun import REPO_ROOT, requires_mpi, unprefixed

PROGRAMS = [block for block in re.findall(r"```python\n(.*?)```", (REPO_ROOT / "README.md").read_text(),
                                           re.S) if "aiopdbp.run(" in block]
_LAUNCHER_VARS = ("PMI_FD", "PMI_RANK", "PMI_SIZE", "PMI_PORT", "MPI_LOCALNRANKS", "MPI_LOCALRANKID")

pytestmark = pytest.mark.timeout(120)


def _run(cmd: list[str], cwd: Path) -> str:
    env = {k: v for k, v in os.environ.items() if k not in _LAUNCHER_VARS}
    env["PYTHONPATH"] = str(REPO_ROOT)
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=100, env=env, cwd=cwd)
    assert proc.returncode == 0, f"{cmd} exited {proc.returncode}\n{proc.stdout}\n{proc.stderr}"
    return unprefixed(proc.stdout)


def test_readme_has_programs() -> None:
    assert PROGRAMS, "no complete program found in README.md"


@pytest.mark.parametrize("index", range(len(PROGRAMS)))
def test_readme_program_runs_in_one_process(index: int, tmp_path: Path) -> None:
    (tmp_path / "prog.py").write_text(PROGRAMS[index])
    out = _run([sys.executable, "prog.py"], tmp_path)
    assert out.strip(), "the program printed nothing"


@requires_mpi
@pytest.mark.mpi
@pytest.mark.parametrize("index", range(len(PROGRAMS)))
def test_readme_program_runs_under_launch_on_two_ranks(index: int, tmp_path: Path) -> None:
    (tmp_path / "prog.py").write_text(PROGRAMS[index])
    one = sorted(_run([sys.executable, "prog.py"], tmp_path).splitlines())
    two = sorted(_run([sys.executable, "-m", "aiopdbp", "launch", "-n", "2", "prog.py"], tmp_path).splitlines())
    assert two == one, f"one process printed {one}, two ranks printed {two}"
