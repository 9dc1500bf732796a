"""Liveness under MPI: each rank prints one ``RESULT {json}`` line.

Modes (argv[1]); heartbeats every 0.25 s, timeout 2 s unless argv[2:4] say
otherwise (interval, timeout):
  stop        -- 3 ranks: rank 0 sends SIGSTOP to rank 1; ranks 0 and 2 must
                 report it lost; then rank 0 sends SIGCONT and the job ends
  numpy       -- 2 ranks: rank 1 spends > 2 timeouts in ONE numpy matmul
                 (releases the GIL), then leaves with a goodbye; rank 0 watches
  python      -- the same with a pure-Python busy loop
  gil         -- the same with ``sum(range(N))``, C code that holds the GIL
                 (the control: rank 0 must report rank 1 lost)
  serialized  -- MPI at THREAD_SERIALIZED: start() must refuse, poll() works
Coordination uses COMM_WORLD; the heartbeats run on a Dup() of it, as on
the transport's control communicator.
"""
import json
import os
import signal
import sys
import threading
import time

from aiopdbp.errors import TransportError
from aiopdbp.hosts.liveness import Heartbeat
from aiopdbp.transport.mpi import load_mpi

MPI = load_mpi()
world = MPI.COMM_WORLD
rank, size = world.Get_rank(), world.Get_size()
mode = sys.argv[1]
interval, timeout = (float(sys.argv[2]), float(sys.argv[3])) if len(sys.argv) > 3 else (0.25, 2.0)
TAG = 4242
comm = world.Dup()
lost_at: dict[int, float] = {}
lost_evt = threading.Event()


def on_lost(r: int, silence: float) -> None:
    lost_at[r] = time.time()
    lost_evt.set()


hb = Heartbeat(comm, TAG, interval=interval, timeout=timeout, on_lost=on_lost)
result: dict[str, object] = {"rank": rank, "mode": mode, "timeout": timeout, "interval": interval}


def until(cond, limit: float = 60.0, step: float = 0.01) -> bool:
    deadline = time.monotonic() + limit
    while not cond():
        if time.monotonic() > deadline:
            return False
        time.sleep(step)
    return True


def world_barrier(limit: float = 90.0) -> None:
    req = world.Ibarrier()
    if not until(lambda: req.Test(), limit):
        print(f"rank {rank}: final barrier timed out", flush=True)
        world.Abort(3)


def warm() -> None:
    """Every peer heard of at least twice."""
    assert until(lambda: hb.stats()["received"] >= 2 * (size - 1)), "peers never heard"


def busy(kind: str, seconds: float = 6.0) -> None:
    if kind == "numpy":
        import numpy as np
        a = np.ones((1500, 1500))
        t0 = time.perf_counter(); a @ a; per = time.perf_counter() - t0
        n = min(9000, int(1500 * (seconds / max(per, 1e-3)) ** (1 / 3)))
        b = np.ones((n, n))
        b @ b                                # one call; BLAS releases the GIL
    elif kind == "python":
        end = time.perf_counter() + seconds
        while time.perf_counter() < end:
            pass
    else:
        t0 = time.perf_counter(); sum(range(10**7)); per = time.perf_counter() - t0
        sum(range(int(10**7 * seconds / max(per, 1e-4))))   # holds the GIL throughout


if mode == "serialized":
    try:
        hb.start()
        result["start_error"] = result["start_error_type"] = ""
    except TransportError as exc:
        result["start_error"], result["start_error_type"] = str(exc), type(exc).__name__
    end = time.monotonic() + 4 * timeout
    while time.monotonic() < end:
        hb.poll()
        time.sleep(hb.tick)
elif mode == "stop":
    hb.start()
    pids = world.allgather(os.getpid())
    warm()
    if rank == 0:
        t_stop = time.time()
        os.kill(pids[1], signal.SIGSTOP)
        try:
            assert lost_evt.wait(60), "rank 1 was not reported lost"
            other = world.irecv(source=2, tag=99)
            ok, t2 = False, None
            deadline = time.monotonic() + 60
            while not ok and time.monotonic() < deadline:
                ok, t2 = other.test()
                time.sleep(0.01)
            result["detect_s"] = {"0": lost_at[1] - t_stop, "2": (t2 - t_stop) if ok else None}
        finally:
            os.kill(pids[1], signal.SIGCONT)
    elif rank == 2:
        lost_evt.wait(60)
        world.send(lost_at.get(1), dest=0, tag=99)
    world_barrier()
    until(lambda: hb.stats()["received"] >= 2 * (size - 1) + 2, 5)   # a few rounds after CONT
else:
    hb.start()
    warm()
    world_barrier()
    if rank == 1:
        sent = hb.stats()["sent"]
        t0 = time.perf_counter()
        busy(mode)
        result["busy_s"] = time.perf_counter() - t0
        result["sent_while_busy"] = hb.stats()["sent"] - sent
        hb.stop()                                    # goodbye: rank 0 must not declare us lost
    else:
        peak = 0.0
        deadline = time.monotonic() + 90
        while 1 not in hb.departed and time.monotonic() < deadline:
            peak = max(peak, hb.silence().get(1, 0.0))
            time.sleep(0.02)
        result["max_silence_s"] = peak
        time.sleep(2 * timeout)                      # a departed peer stays not-lost
    world_barrier()

hb.stop()
s = hb.stats()
result.update(lost=sorted(hb.lost), departed=s["departed"], received=s["received"], sent=s["sent"],
              stalls=s["stalls"], thread_cpu_s=s["thread_cpu_s"], abandoned=s["abandoned"])
# one write: print() writes the text and the newline separately, and mpiexec
# merges the ranks' output, so another rank's line could land in between
sys.stdout.write("RESULT " + json.dumps(result) + "\n")
sys.stdout.flush()
# Goodbyes may arrive after our own stop: discard them before Comm_free
# (MPICH refuses to free a communicator with unmatched messages).
world_barrier()
status = MPI.Status()
while (msg := comm.Improbe(MPI.ANY_SOURCE, TAG, status)) is not None:
    msg.Recv([bytearray(status.Get_count(MPI.BYTE)), MPI.BYTE])
comm.Free()
