"""Rank 1 never opens a node: rank 0's handshake must time out with a clear error."""
import sys
import time

import aiopdbp
from aiopdbp.transport.mpi import MPITransport


async def main() -> None:
    try:
        async with aiopdbp.open_node(MPITransport(), handshake_timeout=1.0):
            print("UNEXPECTED: handshake completed", flush=True)
    except aiopdbp.HandshakeError as exc:
        print(f"HANDSHAKE ERROR: {exc}", flush=True)


from mpi4py import MPI  # noqa: E402

if MPI.COMM_WORLD.rank == 0:
    aiopdbp.run(main(), use_uvloop=False)
else:
    MPITransport()  # the communicator set-up is collective; the node never starts
    time.sleep(3)
MPI.COMM_WORLD.Barrier()
sys.exit(0)
