"""Device streams across 2 ranks: aiopdbp's pipelined staging vs the naive path.

    aiopdbp launch -n 2 benchmarks/gpu_stream.py                  # CuPy, 1 GiB
    aiopdbp launch -n 2 benchmarks/gpu_stream.py --device sim     # anywhere

Rank 0 streams one device array to an SGP on rank 1 (``send_stream``; the
receiver's ``read()`` returns the complete device array, and ``send_stream``
returns when the receiver has it).  In the same run, with the same array:

* **naive**: ``ndarray.get(out=)`` -> ``MPI.Send`` -> ``ndarray.set`` (whole
  array, one stage after the other, through one pageable host buffer
  allocated once), timed the same way (rank 0 waits for rank 1's 1-byte
  acknowledgement); the received array is checked every round;
* references, per chunk size, each measured *alone* (the other rank waits
  at a barrier, so two ranks sharing one GPU do not share its copy engines
  while one is timed): **pinned D2H** (rank 0) and **pinned H2D** (rank 1)
  bandwidth (the array copied chunk by chunk through pinned buffers) and the
  **wire** (mpi4py ``Send``/``Recv`` of the array in chunk-sized messages
  between pinned buffers, acknowledged);
* a sweep of the chunk size (256 KiB-16 MiB) and of the chunks in flight.

Every figure is the median of ``--repeat`` runs after one warm-up.  Columns:
``vs_ref`` = aiopdbp bandwidth / min(pinned D2H, wire, pinned H2D) of the
same chunk size: the pipelining limit (target >= 0.9), ``vs_naive`` = naive time / aiopdbp time (target >= 1.3), and
``overlap`` = (t_D2H + t_MPI + t_H2D of the whole array) / aiopdbp time:
above 1 only if the three stages overlapped (at most 3).

With ``--device sim`` the "device" is the simulated backend: every copy
sleeps ``copy_delay + nbytes / sim_gbps`` on a worker thread, so the D2H and
H2D stage times are *configured*, and the ``copy_overlap`` column checks
that the pipeline really runs its stages concurrently: from the simulated
copies' timestamps (both ranks' clocks are the machine's monotonic clock),
the share of the shorter copy stage's busy time during which the other
stage was busy too -- 0 when the sender's device-to-host copies and the
receiver's host-to-device copies never ran at once, 1 when they always did.
That share does not depend on how loaded the machine is; the times do.  It
is a correctness check of the pipeline, not a performance figure.  A lent GPU machine has one GPU, so
both ranks share it and MPI runs over shared memory: say so beside figures.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import statistics
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))

import aiopdbp  # noqa: E402
from aiopdbp import IncomingStream, PType  # noqa: E402
from aiopdbp.device import SimBackend, open_backend  # noqa: E402
from aiopdbp.device.backend import DeviceBackend, default_device  # noqa: E402
from aiopdbp.streams.devicebind import DeviceConfig  # noqa: E402
from aiopdbp.transport.mpi import load_mpi  # noqa: E402

from _common import format_table, fmt_bytes, machine_info, write_json  # noqa: E402

MiB = 1 << 20


def parse_size(text: str) -> int:
    units = {"k": 1 << 10, "m": 1 << 20, "g": 1 << 30}
    t = text.strip().lower().removesuffix("ib").removesuffix("b")
    return int(float(t[:-1]) * units[t[-1]]) if t and t[-1] in units else int(t)


# ------------------------------------------------------------------ device ops
class Dev:
    """What the benchmark does with the device, over CuPy or the simulator."""

    def __init__(self, kind: str, sim_gbps: float, sim_copy_us: float) -> None:
        self.kind = kind
        if kind == "sim":
            self.backend: DeviceBackend = SimBackend(copy_delay=sim_copy_us * 1e-6, byte_delay=1 / (sim_gbps * 1e9))
        else:
            self.backend = open_backend("cupy")
        self.backend.set_device(default_device(self.backend.device_count()))
        self.device = self.backend.get_device()
        self.stream = self.backend.create_stream(self.device)

    def make(self, nbytes: int, seed: int) -> Any:
        n = nbytes // 4
        if self.kind == "sim":
            return self.backend.asarray(np.arange(n, dtype=np.uint32) * np.uint32(seed), self.device)  # type: ignore[attr-defined]
        import cupy

        return cupy.arange(n, dtype=cupy.uint32) * cupy.uint32(seed)

    def digest(self, arr: Any) -> int:
        if self.kind == "sim":
            return int(arr.get().sum(dtype=np.uint64))
        import cupy

        return int(cupy.asarray(arr).view(cupy.uint32).sum(dtype=cupy.uint64))

    def sync(self) -> None:
        self.backend.record_event(self.stream).synchronize()  # benchmark only: blocks

    def pinned_copy(self, arr: Any, direction: str, chunk: int) -> float:
        """Seconds to copy ``arr`` D2H (or H2D) through one pinned chunk-sized
        buffer per chunk, on one stream: the pinned bandwidth reference."""
        be = self.backend
        nbytes = be.inspect(arr).nbytes
        bufs = [be.alloc_pinned(chunk) for _ in range(2)]
        t0 = time.perf_counter()
        for i, off in enumerate(range(0, nbytes, chunk)):
            view = bufs[i % 2][: min(chunk, nbytes - off)]
            if direction == "d2h":
                be.copy_d2h(arr, off, view, self.stream)
            else:
                be.copy_h2d(view, arr, off, self.stream)
        self.sync()
        return time.perf_counter() - t0

    def to_host(self, arr: Any, out: np.ndarray[Any, Any]) -> np.ndarray[Any, Any]:
        """The naive D2H: the whole array into pageable ``out`` (allocated
        once by the caller), synchronously."""
        if self.kind == "cupy":
            arr.get(out=out.view(arr.dtype))
            return out
        self.backend.copy_d2h(arr, 0, out, self.stream)  # pageable: synchronous
        return out

    def to_device(self, host: np.ndarray[Any, Any], arr: Any) -> Any:
        """The naive H2D: the whole array from pageable memory into ``arr``
        (allocated once by the caller), synchronously."""
        if self.kind == "cupy":
            import cupy

            arr.set(host.view(arr.dtype))
            cupy.cuda.get_current_stream().synchronize()
            return arr
        self.backend.copy_h2d(host.view(np.uint8), arr, 0, self.stream)  # pageable: synchronous
        return arr


# ------------------------------------------------------------ raw references
def references(comm: Any, dev: Dev, x: Any, y: Any, want: int, nbytes: int, chunk: int,
               repeat: int) -> dict[str, float]:
    """Medians (seconds) of pinned D2H (rank 0, alone), pinned H2D (rank 1,
    alone), the wire (chunk-sized messages between pinned buffers) and the
    naive path; every rank returns the same dict.  ``y`` is rank 1's
    destination (checked every naive round)."""
    rank = comm.Get_rank()
    host = np.empty(nbytes, np.uint8)  # pageable, once: the naive path's buffer
    pinned = dev.backend.alloc_pinned(chunk)
    ack = np.zeros(1, np.uint8)
    out: dict[str, list[float]] = {"d2h": [], "h2d": [], "mpi": [], "naive": []}
    for r in range(repeat + 1):
        comm.Barrier()
        d2h = comm.bcast(dev.pinned_copy(x, "d2h", chunk) if rank == 0 else 0.0, root=0)
        comm.Barrier()
        h2d = comm.bcast(dev.pinned_copy(y, "h2d", chunk) if rank == 1 else 0.0, root=1)
        comm.Barrier()
        t0 = time.perf_counter()
        for off in range(0, nbytes, chunk):
            view = pinned[: min(chunk, nbytes - off)]
            if rank == 0:
                comm.Send([view, MPI.BYTE], 1, 1)
            else:
                comm.Recv([view, MPI.BYTE], 0, 1)
        if rank == 0:
            comm.Recv([ack, MPI.BYTE], 1, 2)
        else:
            comm.Send([ack, MPI.BYTE], 0, 2)
        mpi = comm.bcast(time.perf_counter() - t0, root=0)
        comm.Barrier()
        t0 = time.perf_counter()
        if rank == 0:
            comm.Send([dev.to_host(x, host), MPI.BYTE], 1, 3)
            comm.Recv([ack, MPI.BYTE], 1, 4)
        else:
            comm.Recv([host, MPI.BYTE], 0, 3)
            dev.to_device(host, y)
            comm.Send([ack, MPI.BYTE], 0, 4)
        naive = comm.bcast(time.perf_counter() - t0, root=0)
        if rank == 1 and dev.digest(y) != want:
            raise AssertionError("the naive path delivered a different array")
        if r:  # the first round warms up
            for k, v in (("d2h", d2h), ("h2d", h2d), ("mpi", mpi), ("naive", naive)):
                out[k].append(v)
    return {k: statistics.median(v) for k, v in out.items()}


# ---------------------------------------------------- simulated copy overlap
Span = tuple[float, float]


def copy_spans(dev: Dev, kind: str, since: int) -> tuple[list[Span], int]:
    """(start, end) of the simulated ``kind`` copies logged since trace entry ``since``."""
    trace = getattr(dev.backend, "trace", [])
    end = len(trace)
    opened: dict[str, float] = {}
    spans = []
    for e in trace[since:end]:
        if e.kind == kind and e.phase == "start":
            opened[e.stream] = e.time
        elif e.kind == kind and e.stream in opened:  # "end" or "failed"
            spans.append((opened.pop(e.stream), e.time))
    return spans, end


def _union(spans: list[Span]) -> list[Span]:
    out: list[list[float]] = []
    for a, b in sorted(spans):
        if out and a <= out[-1][1]:
            out[-1][1] = max(out[-1][1], b)
        else:
            out.append([a, b])
    return [(a, b) for a, b in out]


def overlap_share(d2h: list[Span], h2d: list[Span]) -> float:
    """Share of the shorter stage's busy time during which the other was busy."""
    u, v = _union(d2h), _union(h2d)
    both = sum(max(0.0, min(b, d) - max(a, c)) for a, b in u for c, d in v)
    shorter = min(sum(b - a for a, b in u), sum(b - a for a, b in v))
    return both / shorter if shorter > 0 else 0.0


# ------------------------------------------------------------------ aiopdbp
async def through_aiopdbp(dev: Dev, x: Any, want: int, chunk: int, inflight: int,
                          repeat: int) -> tuple[list[float], list[float]]:
    """Seconds per send_stream (rank 0; it returns once rank 1 has the
    array) and, simulated, the copy overlap of each run."""
    cfg = DeviceConfig(backend=dev.backend, chunk_size=chunk, max_in_flight=inflight,
                       pool_bytes=2 * inflight * chunk, recv_reserve=inflight)
    times: list[float] = []
    overlaps: list[float] = []
    async with aiopdbp.open_node(device=cfg) as node:
        if node.rank == 0:
            async with node.process("src", PType.GPU) as src:
                await node.lookup("dst")
                mark = copy_spans(dev, "d2h", 0)[1]
                for _ in range(repeat + 1):
                    t0 = time.perf_counter()
                    await src.send_stream("dst", x)
                    times.append(time.perf_counter() - t0)
                    d2h, mark = copy_spans(dev, "d2h", mark)
                    m = await src.recv()  # the receiver's report on this run
                    good, h2d = json.loads(bytes(m.data))
                    if not good:
                        raise AssertionError(f"chunk {chunk}, {inflight} in flight: the received array differs")
                    overlaps.append(overlap_share(d2h, [tuple(s) for s in h2d]))
        else:
            async with node.process("dst", PType.GPU) as dst:
                mark = copy_spans(dev, "h2d", 0)[1]
                for r in range(repeat + 1):
                    s = await dst.recv()
                    assert isinstance(s, IncomingStream)
                    y = await s.read()
                    good = dev.digest(y) == want  # every round: a wrong copy must not look fast
                    h2d, mark = copy_spans(dev, "h2d", mark)
                    await dst.send("src", json.dumps([good, h2d]).encode())
    return times[1:], overlaps[1:]


async def sweep(dev: Dev, x: Any, want: int, args: argparse.Namespace, chunk: int) -> list[dict[str, Any]]:
    rows = []
    for k in args.inflight:
        times, overlaps = await through_aiopdbp(dev, x, want, chunk, k, args.repeat)  # rank 0's
        rows.append({"chunk": chunk, "inflight": k, "seconds": statistics.median(times) if times else 0.0,
                     "copy_overlap": statistics.median(overlaps) if overlaps else 0.0})
    return rows


# -------------------------------------------------------------------- main
def main() -> int:
    global MPI
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--device", choices=["cupy", "sim"], default="cupy")
    ap.add_argument("--size", type=parse_size, default=None, help="array bytes (default 1GiB, sim 64MiB)")
    ap.add_argument("--chunks", type=lambda s: [parse_size(x) for x in s.split(",")], default=None,
                    help="chunk sizes (default 256K,1M,4M,16M; sim 256K,1M,4M)")
    ap.add_argument("--inflight", type=lambda s: [int(x) for x in s.split(",")], default=None,
                    help="chunks in flight per transfer (default 2,4,8; sim 1,2,4)")
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--sim-gbps", type=float, default=2.0, help="simulated copy bandwidth (GB/s)")
    ap.add_argument("--sim-copy-us", type=float, default=50.0, help="simulated per-copy latency (us)")
    ap.add_argument("--sim-switch-us", type=float, default=100.0,
                    help="sim: the interpreter's thread switch interval (us; Python's default is 5000)")
    ap.add_argument("--json", type=Path, default=None)
    args = ap.parse_args()
    sim = args.device == "sim"
    args.size = args.size or (64 * MiB if sim else 1 << 30)
    args.chunks = args.chunks or ([256 << 10, MiB, 4 * MiB] if sim else [256 << 10, MiB, 4 * MiB, 16 * MiB])
    args.inflight = args.inflight or ([1, 2, 4] if sim else [2, 4, 8])

    if sim:  # the simulated copies are Python threads: let them have the GIL soon
        sys.setswitchinterval(args.sim_switch_us * 1e-6)
    MPI = load_mpi()
    comm = MPI.COMM_WORLD.Dup()
    rank = comm.Get_rank()
    if comm.Get_size() != 2:
        print("gpu_stream: run it on 2 ranks (aiopdbp launch -n 2 ...)", file=sys.stderr)
        return 2
    dev = Dev(args.device, args.sim_gbps, args.sim_copy_us)
    x = dev.make(args.size, 7)
    want = dev.digest(x)
    y = dev.make(args.size, 3)  # rank 1's destination of the references (never the array sent)
    refs: dict[int, dict[str, float]] = {}
    rows: list[dict[str, Any]] = []
    # The blocking MPI calls of the references run only between aiopdbp.run
    # calls, never while a node is open: a name's home answers lookups only
    # while its loop runs, and each node's close (BYE from every rank) ends
    # before its rank returns here, so no rank can wait on one stuck in MPI.
    for chunk in args.chunks:  # the references of each chunk size, then aiopdbp with it
        refs[chunk] = references(comm, dev, x, y, want, args.size, chunk, args.repeat)
        rows += aiopdbp.run(sweep(dev, x, want, args, chunk))
    comm.Free()
    if rank != 0:
        return 0
    gb = args.size / 1e9
    ref = refs[args.chunks[0]]
    label = "SIMULATED device: a pipeline correctness check, not a performance figure" if sim else \
        "CuPy device (both ranks share this machine's GPU; MPI between them over shared memory)"
    print(f"gpu_stream: {fmt_bytes(args.size)} device array, rank 0 -> SGP on rank 1; {label}")
    if sim:
        print(f"  simulated copies: {args.sim_copy_us:g} us + nbytes / {args.sim_gbps:g} GB/s")
    for chunk, rf in refs.items():
        print(f"  references, {fmt_bytes(chunk)} chunks (median of {args.repeat}, each alone): pinned D2H "
              f"{gb / rf['d2h']:.2f} GB/s, wire {gb / rf['mpi']:.2f} GB/s, pinned H2D {gb / rf['h2d']:.2f} GB/s")
    print(f"  naive get->Send->set {gb / ref['naive']:.2f} GB/s ({ref['naive'] * 1e3:.1f} ms)")
    table = []
    for r in rows:
        rf = refs[r["chunk"]]
        table.append({"chunk": fmt_bytes(r["chunk"]), "in_flight": r["inflight"], "ms": r["seconds"] * 1e3,
                      "GB/s": gb / r["seconds"], "vs_ref": max(rf["d2h"], rf["mpi"], rf["h2d"]) / r["seconds"],
                      "vs_naive": rf["naive"] / r["seconds"],
                      "overlap": (rf["d2h"] + rf["mpi"] + rf["h2d"]) / r["seconds"],
                      **({"copy_overlap": r["copy_overlap"]} if sim else {})})
    print(format_table(table), flush=True)
    if args.json is not None:
        write_json(args.json, {"machine": machine_info(), "device": args.device, "size": args.size,
                               "references_s": {str(k): v for k, v in refs.items()}, "rows": rows, "args": {k: str(v) for k, v in vars(args).items()}})
    return 0


MPI: Any = None

if __name__ == "__main__":
    sys.exit(main())
