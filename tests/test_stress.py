"""The seeded stress (issue 15 item 4, ``benchmarks/stress.py``): a short
seeded run over MPI, and the bugs it found, each pinned by a test of its own."""

from __future__ import annotations

import asyncio
import json

import pytest

import aiopdbp
from aiopdbp import BrokenResourceError

try:
    from tests.mpirun import REPO_ROOT, requires_mpi, run_mpi, unprefixed
except ImportError:  # pragma: no cover - run from tests/
    from mpirun import REPO_ROOT, requires_mpi, run_mpi, unprefixed  # type: ignore[no-redef]

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
