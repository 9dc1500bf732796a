"""Liveness at the node level.  Modes (argv[1]):

stop    -- 3 ranks: rank 2 stops itself (SIGSTOP) once all are up; ranks 0 and
           1 must learn of it from node.host_lost() within the host timeout,
           then the job is aborted with that message.
busy    -- 2 ranks: rank 1 keeps its event loop busy for 5 s in numpy (a
           matrix product, which releases the GIL); nobody is declared lost
           and the job ends normally.
nojoin  -- 2 ranks: rank 1 never opens a node (never creates its transport);
           rank 0 gets a HandshakeError within the handshake timeout.
"""
import asyncio
import os
import signal
import sys
import time

import numpy as np

import aiopdbp

MODE = sys.argv[1]
TIMEOUT = 2.0


async def main() -> None:
    rank = aiopdbp.runtime.job.env_rank()
    if MODE == "nojoin":
        if rank == 1:
            time.sleep(4)
            os._exit(0)
        t0 = time.monotonic()
        try:
            async with aiopdbp.open_node(name_timeout=TIMEOUT):
                print("UNEXPECTED: the node opened", flush=True)
        except aiopdbp.HandshakeError as exc:
            print(f"HANDSHAKE ERROR after {time.monotonic() - t0:.1f} s: {exc}", flush=True)
        sys.stdout.flush()
        os._exit(0)  # MPI_Finalize would wait for the rank that never joined
    async with aiopdbp.open_node(host_timeout=TIMEOUT) as node:
        async with node.process(f"g{node.rank}") as gp:
            for r in range(node.size):
                await node.lookup(f"g{r}")
            heard: list[tuple[int, BaseException]] = []
            node.on_host_lost(lambda r, e: heard.append((r, e)))
            if MODE == "stop":
                if node.rank == 2:
                    os.kill(os.getpid(), signal.SIGSTOP)
                    return
                t0 = time.monotonic()
                rank, err = await node.host_lost()
                print(f"LOST rank {rank} after {time.monotonic() - t0:.1f} s: {type(err).__name__}: {err}",
                      flush=True)
                assert heard and heard[0][0] == rank, heard
                await asyncio.sleep(60)  # the job is aborted before this ends
                print("UNEXPECTED: not aborted", flush=True)
            elif MODE == "busy":
                if node.rank == 1:
                    a = np.ones((1500, 1500))
                    t0 = time.monotonic()
                    while time.monotonic() - t0 < 5:
                        a @ a  # BLAS releases the GIL: the heartbeat thread keeps beating
                    print(f"busy for {time.monotonic() - t0:.1f} s", flush=True)
                await gp.send(f"g{1 - node.rank}", b"after")
                msg = await gp.recv(timeout=30)
                assert msg.data == b"after"
                assert not heard, heard
                print(f"OK rank {node.rank} liveness {node.stats().liveness.get('lost')}", flush=True)


aiopdbp.run(main())
