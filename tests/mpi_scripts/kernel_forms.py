"""Both forms of the per-message MPI calls (aiopdbp.transport.kernel and its
compiled twin) over real MPI.  Prober: rank 0 sends the same batch once
per form and case, rank 1 receives each batch with one form and prints what its
sinks got (each delivery as source, channel, length and CRC-32; in the case
"raise" the data sink raises at its third message, and what ``fail`` was told).  post_one: rank 0 posts the
batch with each form (printing which calls returned a request), rank 1
receives it plainly.  recv_one: rank 1 receives a plain batch with each form
(each into a buffer 5 bytes longer).  SendLane: rank 0 posts the batch
through a lane of each form (printing its returns, counters and rings),
rank 1 receives it plainly; post_pair likewise, a header and a payload per size on two
communicators.  The test compares the forms.  Prints ``FORM <name> <repr>`` lines and ``rank N OK``."""

from __future__ import annotations

import collections
import functools
import sys
import zlib

from aiopdbp.transport.mpiload import prepare_mpi_import

prepare_mpi_import()
from mpi4py import MPI  # noqa: E402

from aiopdbp.transport import kernel as pure  # noqa: E402

try:
    import aiopdbp.transport.ckernel as compiled  # noqa: E402
except ImportError:
    compiled = None

TAG = 5
MARK = 6
SIZES = [0, 1, 8, 100, 3, 4095, 4096, 9, 70000, 7]
SMALL = 4096


def _received(comm: MPI.Comm) -> list[tuple[int, int]]:
    """The batch from rank 0, received plainly: each message's length and CRC-32."""
    got = []
    for _ in SIZES:
        status = MPI.Status()
        comm.Probe(0, TAG, status)
        buf = bytearray(status.Get_count(MPI.BYTE))
        comm.Recv([buf, MPI.BYTE], 0, TAG)
        got.append((len(buf), zlib.crc32(buf)))
    return got


def main() -> None:
    world = MPI.COMM_WORLD
    rank = world.Get_rank()
    comm = world.Dup()
    quiet = world.Dup()   # nothing is ever sent on it
    forms = [("pure", pure)] + ([("compiled", compiled)] if compiled is not None else [])
    for name, form in forms:
        for case in ("batch", "fifo", "budget", "raise"):
            if rank == 0:
                reqs = [comm.Isend([bytes([i % 251]) * n, MPI.BYTE], 1, TAG) for i, n in enumerate(SIZES)]
                reqs.append(comm.Isend([b"", MPI.BYTE], 1, MARK))  # after the batch: all of it is here
                world.Barrier()  # (the 70000 B one completes only once rank 1 has received it)
                MPI.Request.Waitall(reqs)
            else:
                comm.Recv([bytearray(0), MPI.BYTE], 0, MARK)
                out = []
                status = MPI.Status()
                deliveries: list = []
                failed: list = []

                def sink(channel: str, src: int, view: memoryview) -> None:
                    deliveries.append((src, channel, view))
                    if case == "raise" and len(deliveries) == 3 and channel == "CH":
                        raise ValueError(f"sink refuses {len(view)} B")

                sinks = (functools.partial(sink, "CTL"), functools.partial(sink, "CH"))
                fifo: dict = {(1, 0): collections.deque(["landing"])} if case == "fifo" else {}
                budget = 10 if case == "budget" else 1 << 20
                left = len(SIZES)
                ch = 0
                prober = form.Prober([quiet, comm], TAG, status, SMALL, sinks, fifo, failed.append)
                while left:
                    # channel 0 (quiet) is probed first, the batch is on channel 1
                    n, nbytes, ch, msg = prober.probe(max(ch, 0), budget)
                    if not n and msg is None:
                        raise AssertionError(f"{name} {case}: nothing received, {left} messages left")
                    out.append(("got", n, nbytes, [(s, c, len(v), zlib.crc32(v)) for s, c, v in deliveries],
                                [repr(e) for e in failed]))
                    failed.clear()
                    left -= n
                    deliveries.clear()
                    if msg is not None:
                        size = status.Get_count(MPI.BYTE)
                        buf = bytearray(size)
                        msg.Recv([buf, MPI.BYTE])
                        out.append(("matched", ch, status.Get_source(), size, bytes(buf[:2])))
                        left -= 1
                        fifo.clear()
                print(f"FORM {name} {case} {out!r}", flush=True)  # (short: one atomic write)
                world.Barrier()
    for name, form in forms:  # post_one: rank 0 posts each size with the form, rank 1 checks the bytes
        if rank == 0:
            reqs = [form.post_one(comm, bytes([i % 251]) * n, 1, TAG) for i, n in enumerate(SIZES)]
            world.send([type(r).__name__ for r in reqs], 1, 99)  # rank 1 prints it: one writer, no interleaving
            MPI.Request.Waitall([r for r in reqs if r is not None])
        else:
            got = _received(comm)
            print(f"FORM {name} post {world.recv(source=0, tag=99)!r}", flush=True)
            print(f"FORM {name} posted {got!r}", flush=True)
        world.Barrier()
    for name, form in forms:  # SendLane: rank 0 posts each size through a lane, rank 1 checks the bytes
        if rank == 0:
            rings: list[int] = []
            held: list = []
            kept: list = []   # a pending send's buffer lives until its request completes, as the engine's do

            class Bell:
                def ring(self, dest: int) -> None:
                    rings.append(dest)

            def pending(req: object, buf: object) -> str:
                held.append(req)
                kept.append(buf)
                return f"pending {len(buf)}"  # type: ignore[arg-type]

            def refuse() -> None:
                raise RuntimeError("lane shut")

            last = [-1e9, -1e9]
            lane = form.SendLane(comm, 1, TAG, last, 1e9, Bell(), pending, refuse)
            outs = [lane.post(bytes([i % 251]) * n) for i, n in enumerate(SIZES)]
            lane.open = False
            try:
                lane.post(b"x")
                outs.append("posted after shut")
            except RuntimeError as exc:
                outs.append(str(exc))
            report = (outs, lane.sends, lane.fast, lane.nbytes, rings, last[1] > 0)
            world.send(report, 1, 99)
            MPI.Request.Waitall(held)  # type: ignore[arg-type]
        else:
            got = _received(comm)
            print(f"FORM {name} lane {world.recv(source=0, tag=99)!r}", flush=True)
            print(f"FORM {name} laned {got!r}", flush=True)
        world.Barrier()
    bulk = world.Dup()
    for name, form in forms:  # post_pair: a header on comm, its payload on bulk (tag: its number)
        if rank == 0:
            rings, held, kept = [], [], []

            class Bell:  # noqa: F811
                def ring(self, dest: int) -> None:
                    rings.append(dest)

            def pending(req: object, buf: object) -> str:
                held.append(req)
                kept.append(buf)
                return f"pending head {len(buf)}"  # type: ignore[arg-type]

            def pending_bulk(req: object, buf: object, done: object) -> str:
                held.append(req)
                kept.append(buf)
                return f"pending {len(buf)} {done}"  # type: ignore[arg-type]

            def refuse() -> None:
                raise RuntimeError("lane shut")

            last = [-1e9, -1e9]
            lane = form.SendLane(comm, 1, TAG, last, 1e9, Bell(), pending, refuse, bulk, pending_bulk)
            outs = [lane.post_pair(bytes([i % 251]) * (i + 1), bytes([i % 251]) * n, i, f"done{i}")
                    for i, n in enumerate(SIZES)]
            lane.open = False
            try:
                lane.post_pair(b"h", b"x", 0, None)
                outs.append("posted after shut")
            except RuntimeError as exc:
                outs.append(str(exc))
            report = (outs, lane.sends, lane.fast, lane.bulk_sends, lane.nbytes, rings, last[1] > 0)
            world.send(report, 1, 99)
            MPI.Request.Waitall(held)  # type: ignore[arg-type]
        else:
            heads = _received(comm)
            payloads = []
            for i, n in enumerate(SIZES):
                buf = bytearray(n)
                bulk.Recv([buf, MPI.BYTE], 0, i)
                payloads.append((n, zlib.crc32(buf)))
            print(f"FORM {name} pair {world.recv(source=0, tag=99)!r}", flush=True)
            print(f"FORM {name} paired {(heads, payloads)!r}", flush=True)
        world.Barrier()
    for name, form in forms:  # BulkRecv: rank 0 sends each payload on bulk (tag: its number), rank 1 posts
        if rank == 0:
            reqs = [bulk.Isend([bytes([i % 251]) * n, MPI.BYTE], 1, i) for i, n in enumerate(SIZES)]
            world.Barrier()
            MPI.Request.Waitall(reqs)
        else:
            world.Barrier()
            made: list[str] = []
            later: list[object] = []

            def empty(n: int) -> bytearray:
                made.append(f"empty {n}")
                return bytearray(n)

            def alloc(n: int) -> bytearray:
                made.append(f"alloc {n}")
                return bytearray(n)

            def refuse(source: int) -> None:
                raise RuntimeError(f"refused {source}")

            rx = form.BulkRecv(bulk, 2, 4096, 65536, empty, alloc, lambda req, buf, done: later.append((req, done)),
                               refuse)
            outs: list[object] = []
            try:
                rx.post(0, 0, 1, None)
            except RuntimeError as exc:
                outs.append(str(exc))          # shut until opened
            rx.open = True
            try:
                rx.post(2, 0, 1, None)
            except RuntimeError as exc:
                outs.append(str(exc))          # not a rank of the job
            for i, n in enumerate(SIZES):
                own = bytearray(n) if i == 2 else None
                buf, track = rx.post(0, i, n, own)
                if track is not None:
                    track(f"done{i}")
                    req, done = later.pop()
                    req.Wait()  # type: ignore[attr-defined]
                    outs.append(done)
                outs.append((n, zlib.crc32(buf), buf is own))
            print(f"FORM {name} bulkin {(outs, made, rx.recvs, rx.user, rx.nbytes)!r}", flush=True)
        world.Barrier()
    bulk.Free()
    for name, form in forms:  # recv_one: rank 0 sends plainly, rank 1 receives each into a larger buffer
        if rank == 0:
            reqs = [comm.Isend([bytes([i % 251]) * n, MPI.BYTE], 1, TAG) for i, n in enumerate(SIZES)]
            world.Barrier()
            MPI.Request.Waitall(reqs)
        else:
            world.Barrier()
            got = []
            for n in SIZES:
                buf = bytearray(n + 5)
                req = form.recv_one(comm, buf, n, 0, TAG)
                if req is not None:
                    req.Wait()
                got.append((n, zlib.crc32(buf[:n]), bytes(buf[n:])))
            print(f"FORM {name} received {got!r}", flush=True)
        world.Barrier()
    if rank == 1:
        print("FORMS " + " ".join(name for name, _ in forms), flush=True)
    comm.Free()
    quiet.Free()
    world.Barrier()
    if rank == 1:
        print("rank 0 OK" if world.recv(source=0, tag=98) else "rank 0 FAILED", flush=True)
        print(f"rank {rank} OK", flush=True)
    else:
        world.send(True, 1, 98)


if __name__ == "__main__":
    try:
        main()
    except BaseException:
        import traceback
        traceback.print_exc()
        sys.stdout.flush()
        MPI.COMM_WORLD.Abort(1)
