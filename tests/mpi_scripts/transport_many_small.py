"""Many small sends complete and arrive in order: one send() with thousands
of blocks, then thousands of concurrent single-block send() calls.  In-flight
requests are completed in batches (Testsome), so the engine makes far fewer
Testsome calls than messages.  argv: [progress-mode]."""

from __future__ import annotations

import asyncio
import struct
import sys

from transport_common import Inbox, run

from aiopdbp.transport.base import Channel
from aiopdbp.transport.mpi import MPITransport

N_BATCH = 5000
N_CALLS = 2000


async def main(t: MPITransport, inbox: Inbox) -> None:
    peer = 1 - t.rank
    pack = struct.Struct("<Q56x").pack  # 64-byte messages
    await t.send(peer, Channel.DATA, [pack(i) for i in range(N_BATCH)])
    await asyncio.gather(*(t.send(peer, Channel.DATA, [pack(N_BATCH + i)]) for i in range(N_CALLS)))
    total = N_BATCH + N_CALLS
    await inbox.wait_count(total)
    seq = [struct.unpack_from("<Q", v)[0] for v in inbox.by_key[(peer, Channel.DATA)]]
    assert seq == list(range(total)), "out of order or lost"
    assert all(v.nbytes == 64 for v in inbox.by_key[(peer, Channel.DATA)])
    st = t.stats()
    assert st["sends"] == total and st["recvs"] == total, st
    assert st["completed_reqs"] >= st["testsome_hits"], st
    assert st["inflight"] == 0, st
    print(f"INFO rank {t.rank} " + " ".join(f"{k}={st[k]}" for k in ("sends", "fast_sends", "testsome_calls", "testsome_hits", "completed_reqs", "steps")), flush=True)


if __name__ == "__main__":
    run(main, sys.argv[1] if len(sys.argv) > 1 else "auto")
