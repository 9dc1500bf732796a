"""Dual channel: a control message sent after a large data backlog overtakes
it.  Rank 0 queues BACKLOG x 4 MiB on DATA, then sends one control message;
rank 1 records how many data blocks it had when the control one arrived.
argv: [progress-mode]."""

from __future__ import annotations

import asyncio
import sys
import time

from transport_common import Inbox, run

from aiopdbp.transport.base import Channel
from aiopdbp.transport.mpi import MPITransport

BACKLOG = 48
SIZE = 4 << 20


async def main(t: MPITransport, inbox: Inbox) -> None:
    if t.rank == 0:
        big = bytearray(SIZE)
        data = asyncio.ensure_future(t.send(1, Channel.DATA, [big] * BACKLOG))
        await asyncio.sleep(0)  # the backlog is posted
        t0 = time.perf_counter()
        await t.send(1, Channel.CONTROL, [b"urgent"])
        t_ctl = time.perf_counter() - t0
        await data
        t_data = time.perf_counter() - t0
        await inbox.wait_count(1)  # rank 1's verdict
        verdict = bytes(inbox.by_key[(1, Channel.CONTROL)][0]).decode()
        print(f"INFO control send {t_ctl * 1e6:.0f} us, data backlog {t_data * 1e3:.1f} ms; {verdict}", flush=True)
    else:
        seen: list[int] = []
        await inbox.wait_until(lambda: inbox.by_key[(0, Channel.CONTROL)] != [], "control message")
        seen.append(len(inbox.by_key[(0, Channel.DATA)]))
        await inbox.wait_count(BACKLOG + 1)
        assert bytes(inbox.by_key[(0, Channel.CONTROL)][0]) == b"urgent"
        before = seen[0]
        print(f"INFO control arrived after {before}/{BACKLOG} data blocks", flush=True)
        assert before < BACKLOG, "control message queued behind the whole data backlog"
        await t.send(0, Channel.CONTROL, [f"overtook at {before}/{BACKLOG}".encode()])


if __name__ == "__main__":
    run(main, sys.argv[1] if len(sys.argv) > 1 else "auto")
