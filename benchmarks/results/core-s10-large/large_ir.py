"""One large owned message's path through our code, in one process (MPI to itself), for
instruction counting under callgrind (N=0 vs N=K); core-s9-large's large_ir.py taken one step
up to the host link: the owned-send entry as the router makes it (base: the link's
reserve_nowait, an OwnedDone, OwnedSend and put_to; new: the link's one `owned` call), the split
frame posted, the receiving inbound's cached-header path (on_data -> the payload's receive -> the
message delivered to a stand-in for the arrivals), engine steps that take the header and complete
the send, and the grant that gives the credit back.  Prints nothing but a check line."""
import asyncio, os
import numpy as np
from aiopdbp.transport.mpiload import prepare_mpi_import
prepare_mpi_import()
from mpi4py import MPI  # noqa: F401
from aiopdbp.transport.mpi import MPITransport
from aiopdbp.hosts.inbound import Inbound
from aiopdbp.hosts.link import HostLink
from aiopdbp.hosts.owned import OwnedDone, OwnedSend
from aiopdbp.pool import PoolMatrix, SendPool, UserMemory
from aiopdbp.wire.codec import encode_split_array
from aiopdbp.wire.mesp import Kind
from aiopdbp.wire.message import CREDIT_OVERHEAD, Message
N = int(os.environ.get("N", "1000")); SIZE = int(os.environ.get("SIZE", "65536"))
PID = 7


class Arrivals:
    n = 0
    def place_messages(self, host, pids, item, cost):
        Arrivals.n += 1


async def main():
    tr = MPITransport()
    await tr.start(lambda *a: None)
    eng = tr._engine
    pool = SendPool(PoolMatrix(2, 4, UserMemory(65536, 8), 4, 0.5))
    link = HostLink(0, tr, pool, window=1 << 20, block_size=65536, large=32 << 10, max_inflight=16,
                    allow_pickle=False)
    inb = Inbound(1, 2, None, Arrivals(), None, name_of=str, fail_host=lambda h, e: print(h, e),
                  block_size=65536, allow_pickle=False, bulk=tr)
    arr = np.ones(SIZE, np.uint8)
    fields = ("src", Kind.SHORT, 0, arr, 3)
    cost = SIZE + CREDIT_OVERHEAD
    head, _ = encode_split_array(Kind.SHORT, 3, PID, 0, arr)
    loop = asyncio.get_running_loop()
    owned = getattr(link, "owned", None)
    for i in range(N + 2):
        if owned is not None:
            done = owned(PID, cost, fields)
        else:                                      # what the base router's send_owned did
            link.reserve_nowait(PID, cost)
            done = OwnedDone(loop=loop)
            link.put_to(PID, OwnedSend(Message(fields), done))
        inb.on_data(0, memoryview(head))           # the header as the inbound gets it
        while eng.step():                          # the header (to the no-op sink), the send's completion
            pass
        assert done.done()
        link.grant(PID, cost)
    print("delivered", Arrivals.n, "of", N + 2)
    await tr.aclose()

asyncio.run(main())
