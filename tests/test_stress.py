"""The seeded stress (issue 15 item 4, ``benchmarks/stress.py``): a short
seeded run over MPI, and the bugs it found, each pinned by a test of its own."""

from __future__ import annotations

import asyncio
import json

import pytest

import aiopdbp
from aiopdbp import BrokenResourceError

from tests.mpirun import REPO_ROOT, requires_mpi, run_mpi, unprefixed

STRESS = REPO_ROOT / "benchmarks" / "stress.py"


@pytest.mark.timeout(10)
async def test_stream_to_a_gp_that_leaves_before_its_open_is_routed_raises() -> None:
    # Found by the stress (a local send_stream to a GP freed mid-traffic hung):
    # the OPEN queues behind another stream's segments in the PipeManager, the
    # receiver frees its pipe (which breaks the stream) before the OPEN is
    # routed, and the sender waited for the routing forever.
    async with aiopdbp.open_node() as node:
        async with node.process("a") as a, node.process("c") as c, node.process("d") as d:
            b = await node.register("b")
            await b.apply_pipe()
            go = asyncio.Event()

            async def busy() -> None:       # segments that keep the PipeManager busy
                await go.wait()
                await c.send_stream("d", b"y" * 50, segment_size=10)

            async def stream() -> None:     # its OPEN queues behind them
                await go.wait()
                await a.send_stream("b", b"x" * 10)

            async def leave() -> None:      # b leaves before the OPEN is routed
                await go.wait()
                await b.free()

            tasks = [asyncio.create_task(f()) for f in (busy, stream, leave)]
            go.set()
            with pytest.raises(BrokenResourceError):
                await asyncio.wait_for(tasks[1], 5)
            incoming = await d.recv()
            assert isinstance(incoming, aiopdbp.IncomingStream)
            assert bytes(await incoming.read()) == b"y" * 50
            await asyncio.gather(tasks[0], tasks[2])


@requires_mpi
@pytest.mark.mpi
@pytest.mark.timeout(240)
def test_seeded_stress_delivers_exactly_once_or_names_the_error() -> None:
    # 3 ranks, 20 s of seed 1: random GPs, 1-256 senders, messages and
    # streams, cancellations, GPs closing mid-traffic (benchmarks/stress.py).
    r = run_mpi(STRESS, n=3, args=["--worker", "--seconds", "20", "--seed", "1"], timeout=200)
    out = f"--- stdout ---\n{r.stdout}\n--- stderr ---\n{unprefixed(r.stderr)}"
    rows = {row["rank"]: row for row in (json.loads(line.split("STRESS ", 1)[1])
                                         for line in unprefixed(r.stdout).splitlines()
                                         if line.startswith("STRESS "))}
    assert r.returncode == 0 and sorted(rows) == [0, 1, 2], out
    assert all(row["ok"] for row in rows.values()), out
    job = rows[0]["job"]                      # an idle seed cannot pass
    for what in ("cancelled", "closes", "raised_after_close", "credit_waits", "delivered"):
        assert job[what] > 0, (what, job)
