"""A reader that does not read: what its rank holds, by where its sender is and what it sends.

    aiopdbp launch -n 2 benchmarks/slow_reader_rss.py --sender local|remote --kind message|stream
                                                      [--size BYTES] [--count N]

The GP ``sink`` on rank 0 reads nothing while one sender GP -- on rank 0
(``local``: the reader's pipe bounds it) or on rank 1 (``remote``: credit
does) -- sends ``count`` payloads of ``size`` bytes, each a copy of its own
(a message snapshots its buffer; a short stream, one segment of at most
64 KiB, travels whole and its receiver gets a copy): ``message`` by
``gp.send``, ``stream`` by ``gp.send_stream``.  A send that waits 2 s is
taken as parked (bounded) and ends the sending.  Then the reader notes its
rank's RSS, reads everything and rank 0 prints one line::

    SLOW {"sender": ..., "kind": ..., "size": ..., "sent": n, "queued": q,
          "held_mib": RSS growth while parked, "sender_rank_held_mib": the same on the
          sender's rank (rank 1; for ``local``, rank 0's again), "bound_mib": max(gp_window, size) in MiB}

``held_mib`` includes the interpreter's own noise (a few MiB).  Used for
issue 28's slow-consumer rows in ``benchmarks/RESULTS.md``.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys

import aiopdbp
from aiopdbp.hosts.remote import RemoteConfig

MIB = 1 << 20
TIMEOUT = 60.0


def rss_mib() -> float:
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * 4096 / MIB


async def sender(node: aiopdbp.Node, args: argparse.Namespace) -> None:
    async with node.process("src") as gp:
        await node.lookup("sink", timeout=TIMEOUT)
        base = rss_mib()
        buf = bytearray(args.size)
        sent = 0
        try:
            for i in range(args.count):
                buf[:8] = i.to_bytes(8, "little")
                if args.kind == "message":
                    await gp.send("sink", buf, timeout=2.0)
                else:
                    await gp.send_stream("sink", buf, timeout=2.0)
                sent += 1
        except TimeoutError:
            pass    # parked: the rest would wait for the reader
        await gp.send("ctl", f"{sent} {rss_mib() - base:.1f}".encode(), timeout=TIMEOUT)


async def receiver(node: aiopdbp.Node, args: argparse.Namespace) -> None:
    async with node.process("sink") as sink, node.process("ctl") as ctl:
        base = rss_mib()
        note = await ctl.recv(timeout=TIMEOUT + args.count * 2.0)
        assert isinstance(note, aiopdbp.Message)
        sent_s, sender_held = bytes(note.data).decode().split()
        sent = int(sent_s)
        held = rss_mib() - base
        queued = len(sink.pipe or ())
        for i in range(sent):
            item = await sink.recv(timeout=TIMEOUT)
            data = item.data if isinstance(item, aiopdbp.Message) else await item.read()
            assert int.from_bytes(bytes(data[:8]), "little") == i and len(data) == args.size
            del item, data
        print("SLOW " + json.dumps({"sender": args.sender, "kind": args.kind, "size": args.size,
                                    "sent": sent, "queued": queued, "held_mib": round(held, 1),
                                    "sender_rank_held_mib": float(sender_held),
                                    "bound_mib": round(max(args.window, args.size) / MIB, 2)}), flush=True)


async def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--sender", choices=("local", "remote"), default="local")
    ap.add_argument("--kind", choices=("message", "stream"), default="message")
    ap.add_argument("--size", type=int, default=60 << 10)
    ap.add_argument("--count", type=int, default=2000)
    ap.add_argument("--window", type=int, default=RemoteConfig().gp_window)
    args = ap.parse_args()
    async with aiopdbp.open_node(remote=RemoteConfig(gp_window=args.window)) as node:
        at = 0 if args.sender == "local" else 1
        jobs = []
        if node.rank == 0:
            jobs.append(receiver(node, args))
        if node.rank == at:
            jobs.append(sender(node, args))
        await asyncio.gather(*jobs)
    return 0


if __name__ == "__main__":
    sys.exit(aiopdbp.run(main()))
