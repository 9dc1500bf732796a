"""The `bench rate` aiopdbp-msg case, alone, with counters: the benchmark's own driver
(`AioSide.flows` on the `rate` flows, 64 B ring), then per rank: wall and CPU per message,
the link's lone frames / blocks / MPI messages (messages per MPI message), the receiver's
data messages and progress counters, and (PROF=1) cProfile calls per message by function.

mpiexec -n 2 python rate_probe.py   (env: N units, default 100000; REPS timed runs; PROF=1)
"""
import cProfile, io, os, pstats, sys, time

from mpi4py import MPI

from aiopdbp.bench.aio import AioSide
from aiopdbp.bench.workload import Checker, Ring, flows

N = int(os.environ.get("N", "100000"))
REPS = int(os.environ.get("REPS", "3"))
PROF = os.environ.get("PROF") == "1"
SIZE = int(os.environ.get("SIZE", "64"))
comm = MPI.COMM_WORLD.Dup()
rank, size = comm.Get_rank(), comm.Get_size()
aio = AioSide(rank, size, 1, 300.0, True)
aio.open()
ring = Ring(SIZE, 64)
fl = flows("rate", size)


def snap():
    st = aio.node.stats()
    link = st.links.get(1 - rank)
    t = st.transport
    return {"lone": link.lone if link else 0, "blocks": link.blocks if link else 0,
            "mpi_sent": link.messages if link else 0, "credit_waits": link.credit_waits if link else 0,
            "ctl_sent": sum(v for k, v in st.messages_sent.get(1 - rank, {}).items() if k != "data"),
            "recv_data": sum(st.received.values()),
            **{k: v for k, v in t.items() if isinstance(v, int)}}


def one(prof):
    checker = Checker(ring, "aiopdbp-msg", rank)
    comm.Barrier()
    s0 = snap()
    if prof is not None:
        prof.enable()
    m = aio.measure(lambda: aio.flows(fl, ring, N, ring, checker, stream=False))
    if prof is not None:
        prof.disable()
    s1 = snap()
    assert not checker.errors, checker.errors
    return m, {k: s1[k] - s0.get(k, 0) for k in s1}


one(None)  # warm-up
rows = []
for r in range(REPS):
    prof = cProfile.Profile() if PROF and r == REPS - 1 else None
    m, d = one(prof)
    ms = comm.gather((m.elapsed, m.cpu, m.sent, m.recvd, d), root=0)
    if rank == 0:
        el = max(x[0] for x in ms)
        rate = sum(x[3] for x in ms) / el
        tx, rx = ms[0], ms[1]
        print(f"run {r}: rate {rate:,.0f} msg/s  cpu/msg tx {tx[1]/N*1e6:.2f} us rx {rx[1]/N*1e6:.2f} us;"
              f" tx lone {tx[4]['lone']} blocks {tx[4]['blocks']} mpi msgs {tx[4]['mpi_sent']}"
              f" -> {N / max(1, tx[4]['mpi_sent']):.1f} msgs per MPI message;"
              f" credit waits {tx[4]['credit_waits']}; ctl msgs tx {tx[4]['ctl_sent']} rx {rx[4]['ctl_sent']};"
              f" rx data msgs {rx[4]['recv_data']}", flush=True)
        if r == 0:
            print("  tx transport delta:", {k: v for k, v in tx[4].items() if v}, flush=True)
            print("  rx transport delta:", {k: v for k, v in rx[4].items() if v}, flush=True)
    if prof is not None:
        s = io.StringIO()
        st = pstats.Stats(prof, stream=s)
        total = sum(v[1] for v in st.stats.values())
        s.write(f"rank {rank}: {total} calls, {total / N:.2f} per message\n")
        st.sort_stats("tottime").print_stats(30)
        out = os.environ.get("PROF_OUT", "/tmp/rate12")
        with open(f"{out}/prof-rank{rank}.txt", "w") as f:
            f.write(s.getvalue())
        prof.dump_stats(f"{out}/prof-rank{rank}.pstats")
aio.close()
