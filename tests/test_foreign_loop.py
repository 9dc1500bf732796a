"""A node opened under asyncio.run, uvloop.run or an asyncio.Runner (not
aiopdbp.run) fails and ends the job as aiopdbp.run would: no hang."""

from __future__ import annotations

import asyncio

import pytest

import aiopdbp
from aiopdbp.runtime import job as jobmod
from tests.mpirun import SCRIPTS_DIR, requires_mpi, run_mpi

LOOPS = ["asyncio", "uvloop", "runner"]


@requires_mpi
@pytest.mark.mpi
@pytest.mark.timeout(90)
@pytest.mark.parametrize("loop", LOOPS)
def test_a_raising_rank_ends_the_job_under_another_loop(loop: str) -> None:
    r = run_mpi(SCRIPTS_DIR / "foreign_loop.py", 2, args=[loop, "raise"], timeout=60)
    out = r.stdout + r.stderr
    assert r.returncode != 0, out
    assert "[1] Traceback (most recent call last):" in out, out
    assert "[1] KeyError: 'missing'" in out, out
    assert "[0] aiopdbp: rank 1 (GP g1) failed: KeyError: 'missing'" in out, out


@requires_mpi
@pytest.mark.mpi
@pytest.mark.timeout(90)
@pytest.mark.parametrize("loop", LOOPS)
def test_a_clean_job_under_another_loop_ends_with_zero(loop: str) -> None:
    r = run_mpi(SCRIPTS_DIR / "foreign_loop.py", 2, args=[loop, "clean"], timeout=60)
    assert r.returncode == 0, r.stdout + r.stderr
    assert "[0] rank 0 got b'hi'" in r.stdout and "[1] rank 1 got b'hi'" in r.stdout, r.stdout


def test_one_process_under_asyncio_run_adopts_nothing() -> None:
    async def main() -> bytes:
        async with aiopdbp.open_node() as node, node.process("solo") as gp:
            await gp.send("solo", b"x")
            return (await gp.recv()).data  # type: ignore[no-any-return]

    assert asyncio.run(main()) == b"x"
    assert jobmod.current_job() is None


def test_a_running_kernel_refuses_a_job_of_several_ranks(monkeypatch: pytest.MonkeyPatch) -> None:
    import sys
    import types

    monkeypatch.setitem(sys.modules, "ipykernel", types.ModuleType("ipykernel"))
    monkeypatch.setattr(jobmod, "env_size", lambda: 2)
    monkeypatch.setattr(jobmod, "_current", None)

    async def start() -> None:
        jobmod.adopt_loop()

    with pytest.raises(RuntimeError, match="aiopdbp launch -n N prog.py"):
        asyncio.run(start())
