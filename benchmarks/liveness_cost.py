"""CPU cost of the liveness heartbeat thread (aiopdbp.hosts.liveness).

Not a test: run under mpiexec (4 ranks on this machine), from the repository root::

    .venv/bin/mpiexec -n 4 .venv/bin/python benchmarks/liveness_cost.py [--seconds 10] [--repeat 3] [--interval 1.0]

Each repeat starts a :class:`~aiopdbp.hosts.liveness.Heartbeat` on every rank (on a
``Dup`` of COMM_WORLD, as on the transport's control communicator), lets the
main thread sleep ``--seconds``, and reads the CPU time of the heartbeat
thread (``stats()["thread_cpu_s"]``, ``time.thread_time()`` in the thread).
Printed: CPU per wall second (µs/s and % of a core) per rank, median of the
repeats, and the rounds and beats per second.  The machine may be shared:
the figure is the thread's own CPU time, not wall time, so load elsewhere
changes it little.
"""
from __future__ import annotations

import argparse
import statistics
import time

from aiopdbp.hosts.liveness import Heartbeat
from aiopdbp.transport.mpi import load_mpi


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--seconds", type=float, default=10.0)
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--interval", type=float, default=1.0)
    ap.add_argument("--timeout", type=float, default=30.0)
    args = ap.parse_args()
    mpi = load_mpi()
    world = mpi.COMM_WORLD
    rows = []
    for i in range(args.repeat):
        comm = world.Dup()
        tag = 1000 + i
        lost: list[int] = []
        hb = Heartbeat(comm, tag, interval=args.interval, timeout=args.timeout,
                       on_lost=lambda r, s: lost.append(r))
        world.Barrier()
        hb.start()
        t0 = time.monotonic()
        time.sleep(args.seconds)
        s = hb.stats()
        wall = time.monotonic() - t0
        hb.stop()
        rows.append((s["thread_cpu_s"] / wall, s["rounds"] / wall, s["sent"] / wall, len(lost)))
        world.Barrier()
        st = mpi.Status()
        while (msg := comm.Improbe(mpi.ANY_SOURCE, tag, st)) is not None:   # late goodbyes
            msg.Recv([bytearray(st.Get_count(mpi.BYTE)), mpi.BYTE])
        comm.Free()
    cpu = statistics.median(r[0] for r in rows)
    mine = (world.rank, cpu, statistics.median(r[1] for r in rows), statistics.median(r[2] for r in rows),
            sum(r[3] for r in rows))
    table = world.gather(mine, root=0)
    if world.rank == 0:
        print(f"heartbeat thread, {world.size} ranks, interval {args.interval} s, "
              f"{args.seconds} s x {args.repeat} repeats, main thread asleep (median of repeats)")
        print(f"{'rank':>4} {'CPU µs/s':>9} {'% core':>7} {'rounds/s':>9} {'beats/s':>8} {'lost':>5}")
        for rank, c, rounds, sent, nlost in table:
            print(f"{rank:>4} {c * 1e6:>9.0f} {c * 100:>7.3f} {rounds:>9.1f} {sent:>8.1f} {nlost:>5}")


if __name__ == "__main__":
    main()
