"""Zero-length and large (16 MiB) blocks arrive intact on both channels, in
both directions at once; non-bytes buffers (numpy arrays, memoryview slices)
are sent as their raw bytes.  argv: [progress-mode]."""

from __future__ import annotations

import asyncio
import sys

import numpy as np
from transport_common import Inbox, crc, run

from aiopdbp.transport.base import Channel
from aiopdbp.transport.mpi import MPITransport

MiB = 1 << 20


def blocks_for(rank: int) -> list[object]:
    rng = np.random.default_rng(1234 + rank)
    big = rng.integers(0, 256, 16 * MiB, dtype=np.uint8)
    floats = rng.standard_normal(100_000)  # float64 array: 800_000 bytes
    raw = bytearray(rng.integers(0, 256, 3 * MiB + 7, dtype=np.uint8).tobytes())
    return [
        b"",
        big,  # numpy uint8, 16 MiB
        b"",
        floats,
        memoryview(raw)[5 : 2 * MiB + 5],  # contiguous slice of a bytearray
        bytes(raw),
        memoryview(b""),
        big[: 16 * MiB - 1],  # odd length
    ]


def as_bytes(b: object) -> bytes:
    return memoryview(b).cast("B").tobytes() if not isinstance(b, bytes) else b  # type: ignore[arg-type]


async def main(t: MPITransport, inbox: Inbox) -> None:
    peer = 1 - t.rank
    mine = blocks_for(t.rank)
    # both channels, both directions, concurrently
    await asyncio.gather(t.send(peer, Channel.DATA, mine), t.send(peer, Channel.CONTROL, mine[:4]))
    await inbox.wait_count(len(mine) + 4)
    theirs = [as_bytes(b) for b in blocks_for(peer)]
    for ch, exp in ((Channel.DATA, theirs), (Channel.CONTROL, theirs[:4])):
        got = inbox.by_key[(peer, ch)]
        assert [v.nbytes for v in got] == [len(e) for e in exp], (ch, [v.nbytes for v in got])
        for i, (g, e) in enumerate(zip(got, exp)):
            assert crc(g) == crc(e), f"{ch.name} block {i}: checksum mismatch"
            assert g.format == "B" and g.ndim == 1 and g.contiguous
    # delivered buffers are the receiver's: writable and independent
    v = inbox.by_key[(peer, Channel.DATA)][1]
    v[0] ^= 0xFF
    print(f"INFO rank {t.rank} large OK bytes_recv={t.stats()['bytes_recv']}", flush=True)


if __name__ == "__main__":
    run(main, sys.argv[1] if len(sys.argv) > 1 else "auto")
