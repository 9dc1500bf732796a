"""Every rank sends to every other rank on both channels; blocks must arrive
intact and in order per (source, channel), mixing zero-length, small (inline
receive) and larger-than-inline (Imrecv) sizes.  argv: [progress-mode]."""

from __future__ import annotations

import asyncio
import sys

from transport_common import Inbox, make_block, run

from aiopdbp.transport.base import Channel
from aiopdbp.transport.mpi import MPITransport

SIZES = [0, 1, 17, 100, 70_000, 3, 200_000, 8, 65_536, 65_537, 0, 4096]
PER_KEY = 120  # messages per (dest, channel)
GROUPS = [1, 3, 2, 5, 1, 4]  # blocks per send() call, cycled


def expected(src: int, ch: Channel) -> list[bytes]:
    return [make_block(src, seq + 1000 * int(ch), SIZES[seq % len(SIZES)]) for seq in range(PER_KEY)]


async def main(t: MPITransport, inbox: Inbox) -> None:
    peers = [r for r in range(t.size) if r != t.rank]

    async def feed(dest: int, ch: Channel) -> None:
        blocks = expected(t.rank, ch)
        i = g = 0
        while i < len(blocks):
            n = GROUPS[g % len(GROUPS)]
            await t.send(dest, ch, blocks[i : i + n])
            i += n
            g += 1

    await asyncio.gather(*(feed(d, ch) for d in peers for ch in Channel))
    await inbox.wait_count(len(peers) * 2 * PER_KEY)
    for src in peers:
        for ch in Channel:
            got = [bytes(v) for v in inbox.by_key[(src, ch)]]
            exp = expected(src, ch)
            assert len(got) == len(exp), (src, ch, len(got))
            for seq, (g_, e_) in enumerate(zip(got, exp)):
                assert g_ == e_, f"from {src} on {ch.name}: message {seq} differs ({len(g_)} vs {len(e_)} bytes)"
    assert inbox.count == len(peers) * 2 * PER_KEY
    st = t.stats()
    assert st["recvs"] == inbox.count, st
    assert st["sends"] == len(peers) * 2 * PER_KEY, st
    print(f"INFO rank {t.rank} stats {st}", flush=True)


if __name__ == "__main__":
    run(main, sys.argv[1] if len(sys.argv) > 1 else "auto")
