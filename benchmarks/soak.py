"""Soak: many CDUs N-to-N between ranks, messages and streams mixed, with
randomly cancelled senders; counts what was lost or duplicated.

Run under MPI (``benchmarks/faults.py`` does)::

    aiopdbp launch -n 3 benchmarks/soak.py --cdus 1000000

Every rank hosts ``--gps`` GPs; each GP sends to every GP of the other ranks
(n·(n-1)·gps² flows), short 64-byte messages mostly and every
``--stream-every``-th unit a small stream, every ``--large-every``-th a
writable array of ``--large-size`` bytes (sent from its own buffer, MPI_Send
ownership, when it is at least ``RemoteConfig.large``).  A fraction ``--cancel`` of the
sends runs in a task that is cancelled right after it starts: if the send had
to wait (backpressure), it is cancelled and must deliver nothing; if it had
already returned, it counts as sent (as does a large array's send cancelled
while MPI read its buffer: it returns once the payload went).  Each flow ends with a summary message
listing which units' sends *returned*.  A receiver checks order and content
and counts:

* **lost**: units whose send returned but that never arrived (must be 0: no
  receiver releases its pipe before the end);
* **duplicated**: units that arrived twice (must be 0);
* **phantom**: cancelled sends that arrived anyway (must be 0 for messages:
  "a cancelled send queues nothing"; a stream cancelled after its END was
  queued may still complete -- counted apart);

and reports its peak RSS.  Each rank prints one ``SOAK {json}`` line.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import random
import resource
import struct
import time
from typing import Any

import numpy as np

import aiopdbp
import aiopdbp.hosts.remote

HEAD = struct.Struct("<IIQ")  # source GP index, destination GP index, unit number
MSG = 64
END = 9


_TAILS = [bytes((j + i) & 0xFF for i in range(MSG - HEAD.size)) for j in range(256)]


def payload(src: int, dst: int, seq: int) -> bytes:
    return HEAD.pack(src, dst, seq) + _TAILS[seq & 0xFF]


def large_data(src: int, dst: int, seq: int, size: int) -> np.ndarray[Any, Any]:
    arr = np.full(size, seq & 0xFF, dtype=np.uint8)
    arr[:HEAD.size] = np.frombuffer(HEAD.pack(src, dst, seq), dtype=np.uint8)
    return arr


def stream_data(src: int, dst: int, seq: int, nseg: int, seg: int) -> np.ndarray[Any, Any]:
    rng = np.random.default_rng(seq * 7919 + src * 31 + dst)
    arr = rng.integers(0, 256, (nseg, seg), dtype=np.uint8)
    arr[0, :HEAD.size] = np.frombuffer(HEAD.pack(src, dst, seq), dtype=np.uint8)
    return arr


async def sender(gp: aiopdbp.GP, me: int, dests: list[tuple[int, str]], units: int,
                 args: argparse.Namespace, stats: dict[str, int]) -> None:
    rnd = random.Random(args.seed * 1000 + me)
    returned = {d: bytearray((units + 7) // 8) for d, _ in dests}
    for seq in range(units):
        for d, name in dests:
            is_stream = args.stream_every and seq % args.stream_every == args.stream_every - 1
            if is_stream:
                coro: Any = gp.send_stream(name, stream_data(me, d, seq, args.stream_segments, 4096),
                                           segment_size=4096)
            elif args.large_every and seq % args.large_every == args.large_every - 1:
                coro = gp.send(name, large_data(me, d, seq, args.large_size))
            else:
                coro = gp.send(name, payload(me, d, seq))
            if rnd.random() < args.cancel:
                stats["cancel_attempts"] += 1
                task = asyncio.ensure_future(coro)
                await asyncio.sleep(0)
                task.cancel()
                try:
                    await task
                except asyncio.CancelledError:
                    stats["streams_cancelled" if is_stream else "msgs_cancelled"] += 1
                    continue
            else:
                await coro
            returned[d][seq >> 3] |= 1 << (seq & 7)
            stats["streams_sent" if is_stream else "msgs_sent"] += 1
            if args.large_every and seq % args.large_every == args.large_every - 1 and not is_stream:
                stats["large_sent"] += 1
            stats["cdus_sent"] += args.stream_segments + 2 if is_stream else 1
    for d, name in dests:
        await gp.send(name, HEAD.pack(me, d, units) + bytes(returned[d]), com=END)


async def receiver(gp: aiopdbp.GP, me: int, nsrc: int, units: int, args: argparse.Namespace,
                   stats: dict[str, int], phantoms: list[list[int]]) -> None:
    got: dict[int, bytearray] = {}
    last: dict[int, int] = {}
    ended = 0
    while ended < nsrc:
        item = await gp.recv()
        if isinstance(item, aiopdbp.IncomingStream):
            try:
                arr = await item.read()
            except aiopdbp.StreamError:
                stats["streams_aborted"] += 1
                continue
            src, dst, seq = HEAD.unpack(arr[0, :HEAD.size].tobytes())
            ok = np.array_equal(arr, stream_data(src, dst, seq, args.stream_segments, 4096))
            stats["streams_received" if ok else "corrupt"] += 1
            stats["cdus_received"] += args.stream_segments + 2
        else:
            data = item.data
            large = type(data) is np.ndarray
            src, dst, seq = HEAD.unpack(bytes(data[:HEAD.size]))
            assert dst == me, (dst, me)
            if item.com == END:
                bits = got.setdefault(src, bytearray((units + 7) // 8))
                returned = item.data[HEAD.size:]
                every = args.stream_every
                for i in range(units):
                    r = returned[i >> 3] >> (i & 7) & 1
                    g = bits[i >> 3] >> (i & 7) & 1
                    if r and not g:
                        stats["lost"] += 1
                    elif g and not r:
                        # a cancelled send that arrived: never for a message; a
                        # stream cancelled after its END was queued completes
                        if every and i % every == every - 1:
                            stats["streams_completed_after_cancel"] += 1
                        else:
                            stats["phantom"] += 1
                            if len(phantoms) < 8:
                                phantoms.append([src, i])
                ended += 1
                continue
            if not (np.array_equal(data, large_data(src, dst, seq, args.large_size)) if large
                    else data == payload(src, dst, seq)):
                stats["corrupt"] += 1
            stats["large_received" if large else "msgs_received"] += 1
            stats["cdus_received"] += 1
        bits = got.setdefault(src, bytearray((units + 7) // 8))
        if bits[seq >> 3] >> (seq & 7) & 1:
            stats["duplicated"] += 1
        bits[seq >> 3] |= 1 << (seq & 7)
        if seq <= last.get(src, -1) and not isinstance(item, aiopdbp.IncomingStream):
            stats["out_of_order"] += 1
        last[src] = max(seq, last.get(src, -1))


async def main(args: argparse.Namespace) -> None:
    stats = dict.fromkeys(("msgs_sent", "msgs_cancelled", "streams_sent", "streams_cancelled",
                           "cdus_sent", "msgs_received", "streams_received", "streams_aborted",
                           "cdus_received", "lost", "duplicated", "phantom", "corrupt",
                           "out_of_order", "streams_completed_after_cancel", "cancel_attempts",
                           "large_sent", "large_received"), 0)
    # Small queues, so that senders often wait (backpressure) and a
    # cancellation finds them waiting.
    phantoms: list[list[int]] = []  # (source GP, unit) of the first few phantoms
    remote = aiopdbp.hosts.remote.RemoteConfig(gp_window=args.gp_window)
    async with aiopdbp.open_node(pipe_capacity=args.pipe_capacity, remote=remote) as node:
        n, k = node.size, args.gps
        gps_total = n * k
        flows = gps_total * k * (n - 1)
        units = max(1, args.cdus // max(1, flows))
        t0 = time.perf_counter()
        async with asyncio.TaskGroup() as tg:
            gps = [await node.register(f"soak-{node.rank}-{i}", bind=True) for i in range(k)]
            for i, gp in enumerate(gps):
                me = node.rank * k + i
                dests = [(r * k + j, f"soak-{r}-{j}") for r in range(n) if r != node.rank for j in range(k)]
                tg.create_task(sender(gp, me, dests, units, args, stats))
                tg.create_task(receiver(gp, me, len(dests), units, args, stats, phantoms))
        elapsed = time.perf_counter() - t0
        await node.flush()
        oversubscribed = bool(node.stats().transport.get("oversubscribed"))
        for gp in gps:
            await gp.free()
    rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    print("SOAK " + json.dumps({"rank": node.rank, "ranks": n, "units_per_flow": units,
                                "oversubscribed": oversubscribed,
                                "seconds": round(elapsed, 3), "peak_rss_kib": rss, **stats,
                                "phantom_units": phantoms}), flush=True)


if __name__ == "__main__":
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--cdus", type=int, default=1_000_000, help="CDUs in all (default %(default)s)")
    p.add_argument("--gps", type=int, default=2, help="GPs per rank")
    p.add_argument("--cancel", type=float, default=0.01, help="fraction of sends cancelled")
    p.add_argument("--stream-every", type=int, default=1000, help="every k-th unit is a stream (0: none)")
    p.add_argument("--stream-segments", type=int, default=40, help="4 KiB segments per stream "
                   "(more than the stream window, so a cancelled stream is cut short)")
    p.add_argument("--large-every", type=int, default=0, help="every k-th unit is a large array (0: none; "
                   "a stream's unit stays a stream)")
    p.add_argument("--large-size", type=int, default=256 << 10, help="bytes of each large array")
    p.add_argument("--seed", type=int, default=1)
    p.add_argument("--pipe-capacity", type=int, default=16, help="CDUs per private pipe")
    p.add_argument("--gp-window", type=int, default=64 << 10,
                   help="per-destination credit window, bytes (small: senders often wait)")
    aiopdbp.run(main(p.parse_args()))
