"""MPITransport.abort(): rank 1 prints a message and aborts the whole job
while rank 0 waits for a message that never comes.  Expected: mpiexec exits
non-zero promptly and the message is on stderr."""

from __future__ import annotations

import asyncio

from aiopdbp.transport.mpi import MPITransport


async def main() -> None:
    t = MPITransport()
    await t.start(lambda src, ch, view: None)
    if t.rank == 1:
        await asyncio.sleep(0.05)
        t.abort("transport-abort-test: boom from rank 1", 7)
    await asyncio.sleep(30)  # killed by the abort long before
    print("rank 0 was not aborted", flush=True)


if __name__ == "__main__":
    asyncio.run(main())
