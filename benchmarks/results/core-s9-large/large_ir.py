"""One large owned message's path through our code, in one process (MPI to itself), for
instruction counting under callgrind (N=0 vs N=K): the sender's split post (the link's sender,
compiled or pure as chosen), the receiving inbound's cached-header path (on_data -> the payload's
receive -> the message delivered to a stand-in for the arrivals), and the engine steps that take the
header and complete the send.  Prints nothing but a check line."""
import asyncio, os
import numpy as np
from aiopdbp.transport.mpiload import prepare_mpi_import
prepare_mpi_import()
from mpi4py import MPI  # noqa: F401
from aiopdbp.transport.mpi import MPITransport
from aiopdbp.hosts.inbound import Inbound
from aiopdbp.hosts.owned import OwnedDone
from aiopdbp.hosts.sendercore import LinkSender
from aiopdbp.pool import PoolMatrix, SendPool, UserMemory
from aiopdbp.wire.codec import encode_split_array
from aiopdbp.wire.mesp import Kind
from aiopdbp.wire.message import Message
N = int(os.environ.get("N", "1000")); SIZE = int(os.environ.get("SIZE", "65536"))

class Arrivals:
    n = 0
    def place_messages(self, host, pids, item, cost):
        Arrivals.n += 1

async def main():
    tr = MPITransport()
    await tr.start(lambda *a: None)
    eng = tr._engine
    pool = SendPool(PoolMatrix(2, 4, UserMemory(65536, 8), 4, 0.5))
    out = LinkSender(0, tr, pool, block_size=65536, large=32 << 10, max_inflight=16, allow_pickle=False,
                     on_error=print)
    inb = Inbound(1, 2, None, Arrivals(), None, name_of=str, fail_host=lambda h, e: print(h, e),
                  block_size=65536, allow_pickle=False, bulk=tr)
    arr = np.ones(SIZE, np.uint8)
    msg = Message(("src", Kind.SHORT, 0, arr, 3))
    head, _ = encode_split_array(Kind.SHORT, 3, 7, 0, arr)
    loop = asyncio.get_running_loop()
    for i in range(N + 2):
        done = OwnedDone(loop=loop)
        out.message(7, msg, done)                  # header + payload posted to ourselves
        inb.on_data(0, memoryview(head))           # the header as the inbound gets it: the payload's receive
        while eng.step():                          # the header (to the no-op sink), the send's completion
            pass
        assert done.done()
    print("delivered", Arrivals.n, "of", N + 2)
    await tr.aclose()

asyncio.run(main())
