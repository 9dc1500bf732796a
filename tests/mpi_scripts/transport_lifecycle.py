"""Lifecycle and error paths: send before start, bad destination, a raising
deliver callback, a cancelled send (its blocks are still delivered and the
engine drains it), aclose() idempotent / concurrent / cancelled-and-repeated,
ClosedResourceError after close, no pending tasks at exit.
argv: [progress-mode]."""

from __future__ import annotations

import asyncio
import sys
from typing import Any

from transport_common import Inbox, run

from aiopdbp.errors import ClosedResourceError
from aiopdbp.transport.base import Channel
from aiopdbp.transport.mpi import MPITransport

MODE = sys.argv[1] if len(sys.argv) > 1 else "auto"
BIG = 4 << 20
N_BIG = 8


class RaisingInbox(Inbox):
    def __init__(self) -> None:
        super().__init__()
        # installed before the transport starts: a message may arrive early
        self.reported: list[dict[str, Any]] = []
        asyncio.get_running_loop().set_exception_handler(lambda _l, ctx: self.reported.append(ctx))

    def deliver(self, source: int, channel: Channel, view: memoryview) -> None:
        super().deliver(source, channel, view)
        if bytes(view[:8]) == b"raise-me":
            raise RuntimeError("deliver callback failure (expected by the test)")


async def expect(exc: type[BaseException], aw: Any) -> None:
    try:
        await aw
    except exc:
        return
    raise AssertionError(f"expected {exc.__name__}")


async def main(t: MPITransport, inbox: Inbox) -> None:
    assert isinstance(inbox, RaisingInbox)
    reported = inbox.reported
    peer = 1 - t.rank

    # -- a second transport: send before start, close without start, idempotent close
    t2 = MPITransport(progress=MODE)  # collective Dup: same order on every rank
    await expect(RuntimeError, t2.send(peer, Channel.DATA, [b"x"]))
    await t2.aclose()
    await t2.aclose()
    await expect(ClosedResourceError, t2.send(peer, Channel.DATA, [b"x"]))
    await expect(ClosedResourceError, t2.start(lambda *a: None))

    # -- bad destinations
    await expect(ValueError, t.send(t.size, Channel.DATA, [b"x"]))
    await expect(ValueError, t.send(-1, Channel.DATA, [b"x"]))

    # -- a raising deliver callback is reported, progress goes on
    await t.send(peer, Channel.CONTROL, [b"raise-me", b"after-the-raise"])
    await inbox.wait_count(2)
    assert [bytes(v) for v in inbox.by_key[(peer, Channel.CONTROL)]] == [b"raise-me", b"after-the-raise"]
    assert t.stats()["deliver_errors"] == 1, t.stats()
    assert len(reported) == 1 and isinstance(reported[0].get("exception"), RuntimeError), reported

    # -- cancelling a send: posted blocks are still delivered, engine drains them
    if t.rank == 0:
        blocks = [bytes([i]) * BIG for i in range(N_BIG)]
        task = asyncio.ensure_future(t.send(1, Channel.DATA, blocks))
        await asyncio.sleep(0)  # posted now
        task.cancel()
        try:
            await task
        except asyncio.CancelledError:
            pass
        del blocks  # the engine keeps its own references
        await inbox.wait_until(
            lambda: any(bytes(v) == b"got them all" for v in inbox.by_key[(1, Channel.CONTROL)]), "receipt"
        )
        for _ in range(1000):  # engine completes the cancelled requests
            if t.stats()["inflight"] == 0:
                break
            await asyncio.sleep(0.005)
        assert t.stats()["inflight"] == 0, t.stats()
        print(f"INFO cancelled send: task cancelled={task.cancelled()}", flush=True)
    else:
        await inbox.wait_until(lambda: len(inbox.by_key[(0, Channel.DATA)]) == N_BIG, "cancelled blocks")
        got = inbox.by_key[(0, Channel.DATA)]
        for i, v in enumerate(got):
            assert v.nbytes == BIG and v[0] == i and v[BIG - 1] == i, f"block {i} corrupt"
        await t.send(0, Channel.CONTROL, [b"got them all"])

    # -- quiesce, then close: concurrent + repeated, cancelled + repeated
    await t.send(peer, Channel.CONTROL, [b"bye"])
    await inbox.wait_until(lambda: any(bytes(v) == b"bye" for v in inbox.by_key[(peer, Channel.CONTROL)]), "bye")
    closing = asyncio.ensure_future(t.aclose())
    await asyncio.sleep(0)
    closing.cancel()
    try:
        await closing
    except asyncio.CancelledError:
        pass
    await asyncio.gather(t.aclose(), t.aclose())
    await t.aclose()
    await expect(ClosedResourceError, t.send(peer, Channel.CONTROL, [b"late"]))
    st = t.stats()
    assert st["closed"] and st["inflight"] == 0, st
    assert len(reported) == 1, reported
    print(f"INFO rank {t.rank} lifecycle OK", flush=True)


if __name__ == "__main__":
    run(main, MODE, inbox_factory=RaisingInbox)
