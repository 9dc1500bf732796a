"""The raw mpi4py twin of the scale benchmark's rank program (run by path, not imported).

``mpiexec -n N python aiopdbp/bench/scale_raw.py --pattern alltoall --out DIR``:
every rank initialises MPI and meets a ``Barrier`` (the figure ``open_node``
is held to), then runs the pattern -- ``alltoall``: ``MPI_Alltoall`` of
``--units`` x ``--unit`` bytes per pair, one call per unit; ``ring``: the same
units to and from both neighbours with ``Isend``/``Irecv`` -- and a last
``Barrier``, and writes ``DIR/raw-RANK.json`` (times in seconds, peak RSS in
KiB; ``phases``: wall seconds since ``--launched`` and CPU seconds at
``main``, ``init`` (``MPI_Init``), ``open`` (the ``Barrier``), ``pattern``,
as :mod:`aiopdbp.bench.scale_job` stamps them).  It imports neither aiopdbp nor anything of it, so that its memory is
MPI's and numpy's alone: run it by path, never as ``-m aiopdbp...``.
"""

from __future__ import annotations

import argparse
import json
import resource
import time
from pathlib import Path

import numpy as np


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__)
    p.add_argument("--pattern", choices=("alltoall", "ring"), default="alltoall")
    p.add_argument("--units", type=int, default=20)
    p.add_argument("--unit", type=int, default=256)
    p.add_argument("--out", required=True)
    p.add_argument("--launched", type=float, default=0.0)
    a = p.parse_args()
    t0 = time.perf_counter()
    launched = a.launched or time.time()

    def stamp() -> tuple[float, float]:
        return time.time() - launched, time.process_time()

    phases = {"main": stamp()}
    from mpi4py import MPI  # MPI_Init happens here

    phases["init"] = stamp()
    comm = MPI.COMM_WORLD
    comm.Barrier()
    t_open = time.perf_counter() - t0
    phases["open"] = stamp()
    rank, size = comm.Get_rank(), comm.Get_size()
    rss_open = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    t1 = time.perf_counter()
    if a.pattern == "alltoall":
        send = np.full(size * a.unit, rank % 251, dtype=np.uint8)
        recv = np.empty_like(send)
        for _ in range(a.units):
            comm.Alltoall(send, recv)
            if recv[0] != 0 or recv[-1] != (size - 1) % 251:
                raise SystemExit(f"rank {rank}: wrong Alltoall data")
    else:
        left, right = (rank - 1) % size, (rank + 1) % size
        buf = np.full(a.unit, rank % 251, dtype=np.uint8)
        inl = [np.empty(a.unit, dtype=np.uint8) for _ in range(a.units)]
        inr = [np.empty(a.unit, dtype=np.uint8) for _ in range(a.units)]
        reqs = [comm.Irecv(b, source=left, tag=1) for b in inl]
        reqs += [comm.Irecv(b, source=right, tag=2) for b in inr]
        reqs += [comm.Isend(buf, dest=right, tag=1) for _ in range(a.units)]
        reqs += [comm.Isend(buf, dest=left, tag=2) for _ in range(a.units)]
        MPI.Request.Waitall(reqs)
        if inl[-1][0] != left % 251 or inr[-1][0] != right % 251:
            raise SystemExit(f"rank {rank}: wrong ring data")
    comm.Barrier()
    t_pattern = time.perf_counter() - t1
    phases["pattern"] = stamp()
    rec = {"impl": "raw", "pattern": a.pattern, "rank": rank, "size": size,
           "open_s": t_open, "pattern_s": t_pattern, "total_s": time.perf_counter() - t0,
           "rss_open_kib": rss_open,
           "rss_peak_kib": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss, "phases": phases}
    Path(a.out, f"raw-{rank}.json").write_text(json.dumps(rec), encoding="utf-8")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
