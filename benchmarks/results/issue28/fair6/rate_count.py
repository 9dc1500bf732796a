"""One sender streams N 64 B messages to a reader on another rank that takes
them as fast as it can: wall time, process CPU per message (each rank's) and the credit
control traffic (asks sent, credit messages and grants received by the
sender's rank).  Run with PYTHONPATH set to the checkout under test:

    PYTHONPATH=TREE mpiexec -n 2 python rate_count.py [N]
"""
import asyncio
import json
import sys
import time

import aiopdbp
from aiopdbp.hosts import credit as C
from aiopdbp.transport.mpi import load_mpi

MPI = load_mpi()
RANK = MPI.COMM_WORLD.Get_rank()
N = int(sys.argv[1]) if len(sys.argv) > 1 else 200_000
count = {"asks": 0, "credit_msgs": 0, "grants": 0}
_ask, _on_credit = C.Credit.ask, C.Credit.on_credit


def ask(self, host, pid):
    count["asks"] += 1
    return _ask(self, host, pid)


def on_credit(self, src, msg):
    count["credit_msgs"] += 1
    count["grants"] += len(msg.grants)
    return _on_credit(self, src, msg)


C.Credit.ask, C.Credit.on_credit = ask, on_credit


async def main() -> int:
    async with aiopdbp.open_node() as node:
        if RANK == 0:
            async with node.process("reader") as gp:
                await node.lookup("sender", timeout=30)
                await gp.send("sender", b"go")
                c0 = time.process_time()
                for _ in range(N):
                    await gp.recv()
                cpu = time.process_time() - c0
                await gp.send("sender", b"done")
                print("RECV " + json.dumps({"reader_cpu_us": round(cpu / N * 1e6, 2)}), flush=True)
        else:
            async with node.process("sender") as gp:
                await node.lookup("reader", timeout=30)
                await gp.recv()
                data = bytes(64)
                t0, c0 = time.perf_counter(), time.process_time()
                for _ in range(N):
                    await gp.send("reader", data)
                await gp.recv()
                wall, cpu = time.perf_counter() - t0, time.process_time() - c0
                print("RATE " + json.dumps({"msgs_per_s": round(N / wall), "sender_cpu_us": round(cpu / N * 1e6, 2),
                                            **count}), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(aiopdbp.run(main()))
