"""What the emulated cluster's links deliver (a measurement, not a test).

Run on 3 emulated hosts (needs root)::

    .venv/bin/aiopdbp launch -n 3 --emulate --link 1gbit benchmarks/emulate_link.py
    .venv/bin/aiopdbp launch -n 3 --emulate --link 100mbit benchmarks/emulate_link.py
    # options: --seconds 1.0 (data per run ~ this long at line rate) --repeat 5 --json PATH

One rank per emulated host, raw mpi4py (no aiopdbp).  Each pattern gets one
warm-up run, then ``--repeat`` runs; the table shows the median (and the
min..max) of the payload goodput of each flow:

* ``mpi a->b``: windowed ``Isend``/``Irecv`` of 4 MiB messages (UCX over TCP,
  as ``--emulate`` configures it);
* ``mpi a<->b``: both directions at once (each direction has its own shaper);
* ``mpi 0->1 + 2->1``: two senders into one host share its downlink;
* ``mpi 0->1 + 0->2``: one sender's uplink shared by two receivers;
* ``tcp a->b``: one plain TCP socket, no MPI.

``% of link`` is the goodput over the configured rate (``--link``, from
``AIOPDBP_EMULATE_LINK_BPS``); for shared links it is the flows' sum.  tbf
counts Ethernet frames (14 + 1500 bytes for 1448 bytes of TCP payload), so
about 95.6 % is the ceiling; real Ethernet's is 94.1 % (preamble, FCS, gap).
No delay is added by the emulation.
"""

from __future__ import annotations

import argparse
import os
import socket
import statistics
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np
from mpi4py import MPI

_HERE = str(Path(__file__).resolve().parent)
if _HERE not in sys.path:
    sys.path.insert(0, _HERE)
from _common import fmt_bytes, machine_info, print_table, write_json  # noqa: E402

MSG = 4 << 20
WINDOW = 4
TCP_CEILING = 1448 / 1514
Flow = tuple[int, int]


def mpi_flows(comm: MPI.Intracomm, flows: list[Flow], nbytes: int) -> float:
    """Move ``nbytes`` along every flow at once; return the elapsed seconds (max over ranks)."""
    rank = comm.Get_rank()
    sbuf = np.full(MSG, 0xA5, dtype=np.uint8)
    rbufs = [np.empty(MSG, dtype=np.uint8) for _ in range(WINDOW * len(flows))]
    nmsg = nbytes // MSG
    comm.Barrier()
    t0 = time.perf_counter()
    for first in range(0, nmsg, WINDOW):
        reqs = []
        k = 0
        for i, (src, dst) in enumerate(flows):
            for m in range(first, min(first + WINDOW, nmsg)):
                if rank == src:
                    reqs.append(comm.Isend([sbuf, MPI.BYTE], dst, tag=i))
                if rank == dst:
                    reqs.append(comm.Irecv([rbufs[k], MPI.BYTE], src, tag=i))
                    k += 1
        MPI.Request.Waitall(reqs)
    elapsed = time.perf_counter() - t0
    return float(comm.allreduce(elapsed, op=MPI.MAX))


def _my_address() -> str:
    """This emulated host's address (its hostname is its namespace's name)."""
    me = socket.gethostname()
    for pair in os.environ.get("AIOPDBP_EMULATE_HOSTS", "").split():
        addr, _, netns = pair.partition("=")
        if netns == me:
            return addr
    raise SystemExit("emulate_link.py: run it with aiopdbp launch --emulate (no emulated host found)")


def tcp_flow(comm: MPI.Intracomm, src: int, dst: int, nbytes: int) -> float:
    """One TCP connection ``src`` -> ``dst``; seconds from connect to the last byte read."""
    rank = comm.Get_rank()
    elapsed = 0.0
    if rank == dst:
        srv = socket.create_server((_my_address(), 0))
        comm.send(srv.getsockname(), dest=src, tag=7)
        conn, _ = srv.accept()
        buf = bytearray(1 << 20)
        got = 0
        t0 = time.perf_counter()
        while got < nbytes:
            n = conn.recv_into(buf)
            if not n:
                raise SystemExit(f"tcp {src}->{dst}: connection closed after {got} bytes")
            got += n
        elapsed = time.perf_counter() - t0
        conn.sendall(b"k")  # the sender's close waits for this: no half-measured tail
        conn.close()
        srv.close()
    elif rank == src:
        addr = comm.recv(source=dst, tag=7)
        data = bytes(1 << 20)
        with socket.create_connection(addr, timeout=60) as s:
            sent = 0
            while sent < nbytes:
                sent += s.send(memoryview(data)[: min(len(data), nbytes - sent)])
            s.recv(1)
    return float(comm.allreduce(elapsed, op=MPI.MAX))


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--seconds", type=float, default=1.0, help="data per run: this long at line rate")
    ap.add_argument("--repeat", type=int, default=5)
    ap.add_argument("--json", type=Path)
    args = ap.parse_args()
    comm = MPI.COMM_WORLD
    size, rank = comm.Get_size(), comm.Get_rank()
    if size < 3:
        raise SystemExit("emulate_link.py needs 3 ranks (aiopdbp launch -n 3 --emulate ...)")
    rate = int(os.environ.get("AIOPDBP_EMULATE_LINK_BPS", "0"))
    if not os.environ.get("AIOPDBP_EMULATE_JOB"):
        raise SystemExit("emulate_link.py: run it with aiopdbp launch --emulate")
    line = rate if rate else 10 * 10**9  # unshaped: size the runs as for 10 Gbit/s
    nbytes = max(MSG, int(line / 8 * args.seconds) // MSG * MSG)

    patterns: list[tuple[str, str, list[Flow]]] = [
        ("mpi 0->1", "mpi", [(0, 1)]), ("mpi 1->0", "mpi", [(1, 0)]),
        ("mpi 0<->1", "mpi", [(0, 1), (1, 0)]),
        ("mpi 0->1 + 2->1", "mpi", [(0, 1), (2, 1)]), ("mpi 0->1 + 0->2", "mpi", [(0, 1), (0, 2)]),
        ("tcp 0->1", "tcp", [(0, 1)]), ("tcp 1->0", "tcp", [(1, 0)]),
    ]
    rows: list[dict[str, Any]] = []
    for name, kind, flows in patterns:
        def once() -> float:
            if kind == "tcp":
                return tcp_flow(comm, *flows[0], nbytes)
            return mpi_flows(comm, flows, nbytes)

        once()  # warm-up: connections, page faults
        per_flow = [nbytes * 8 / once() / 1e9 for _ in range(args.repeat)]  # Gbit/s per flow
        med = statistics.median(per_flow)
        shared = name.endswith(("+ 2->1", "+ 0->2"))  # both flows cross one shaped link
        total = med * (len(flows) if shared else 1)
        rows.append({
            "pattern": name, "bytes/flow": fmt_bytes(nbytes),
            "Gbit/s per flow": med, "min..max": f"{min(per_flow):.3f}..{max(per_flow):.3f}",
            "% of link": 100 * total * 1e9 / rate if rate else float("nan"),
            "% of tbf ceiling": 100 * total * 1e9 / (rate * TCP_CEILING) if rate else float("nan"),
        })
    if rank == 0:
        link = f"{rate / 1e9:g} Gbit/s" if rate else "unshaped"
        print(f"emulated cluster {os.environ['AIOPDBP_EMULATE_JOB']}: {size} hosts, links {link} "
              f"each way, no added delay; median of {args.repeat} runs", flush=True)
        print_table(rows)
        if args.json:
            write_json(args.json, {"machine": machine_info(), "link_bps": rate, "repeat": args.repeat,
                                   "rows": rows})
    return 0


if __name__ == "__main__":
    sys.exit(main())
