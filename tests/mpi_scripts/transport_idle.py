"""Idle cost: after a short exchange, an idle transport must not spin a core.
Measures process CPU time over 0.5 s of wall time (all threads) and checks it
is well under one core; then checks that a message sent after the idle
period still arrives promptly.  argv: [progress-mode]."""

from __future__ import annotations

import asyncio
import os
import sys
import time

from transport_common import Inbox, run

from aiopdbp.transport.base import Channel
from aiopdbp.transport.mpi import MPITransport

IDLE_S = 0.5
MAX_CPU_FRACTION = 0.5


async def main(t: MPITransport, inbox: Inbox) -> None:
    peer = 1 - t.rank
    await t.send(peer, Channel.CONTROL, [b"hello"])
    await inbox.wait_count(1)
    await asyncio.sleep(0.05)  # past the spin window
    st0 = t.stats()
    c0, w0 = time.process_time(), time.perf_counter()
    await asyncio.sleep(IDLE_S)
    cpu = (time.process_time() - c0) / (time.perf_counter() - w0)
    st1 = t.stats()
    print(
        f"INFO rank {t.rank} mode={t.progress_mode} idle cpu={cpu:.1%} of one core, "
        f"idle_sleeps={st1['idle_sleeps'] - st0['idle_sleeps']} steps={st1['steps'] - st0['steps']}",
        flush=True,
    )
    assert cpu < MAX_CPU_FRACTION, f"idle transport used {cpu:.0%} of a core"
    assert st1["idle_sleeps"] > st0["idle_sleeps"], "engine never backed off"
    # wake-up after idling: a ping-pong still completes, and quickly
    t0 = time.perf_counter()
    if t.rank == 0:
        await t.send(1, Channel.CONTROL, [b"ping"])
        await inbox.wait_count(2, timeout=5)
    else:
        await inbox.wait_count(2, timeout=5)
        await t.send(0, Channel.CONTROL, [b"pong"])
    print(f"INFO rank {t.rank} first exchange after idle {(time.perf_counter() - t0) * 1e3:.2f} ms", flush=True)
    st2 = t.stats()
    if os.environ.get("AIOPDBP_DOORBELL") == "0":
        assert not st2["doorbell"] and st2["rings_heard"] == 0, st2
    else:
        # every peer rang us at start; the ping after idling rang rank 1 awake
        assert st1["doorbell"], st1
        if t.rank == 1:
            assert st2["rings_heard"] > st0["rings_heard"], (st0, st2)
    print(f"INFO rank {t.rank} doorbell={st2['doorbell']} rings_heard={st2['rings_heard']}", flush=True)


if __name__ == "__main__":
    run(main, sys.argv[1] if len(sys.argv) > 1 else "auto")
