"""The receive-buffer hook ``start(deliver, alloc)`` and ``post()``.

Poll mode: alloc is called once per message in arrival order per (source,
channel); a returned buffer receives the message and is delivered as that
very object; None or a broken hook falls back to an own buffer (a broken
hook is reported, progress goes on); messages below ``alloc_min`` never
reach the hook.  post() returns futures without tasks; errors land on the
future.  argv: [progress-mode] [alloc_min]."""

from __future__ import annotations

import asyncio
import sys
from typing import Any

from transport_common import Inbox, make_block, run

from aiopdbp.errors import ClosedResourceError
from aiopdbp.transport.base import Channel
from aiopdbp.transport.mpi import MPITransport

MODE = sys.argv[1] if len(sys.argv) > 1 else "auto"
ALLOC_MIN = int(sys.argv[2]) if len(sys.argv) > 2 else 0
SIZES = [10, 100_000, 0, 300_000, 5, 70_000, 64, 1 << 20, 33, 7]
BROKEN_AT = 3  # the hook returns a too-small buffer for this message


class HookInbox(Inbox):
    def __init__(self) -> None:
        super().__init__()
        self.calls: list[tuple[int, Channel, int]] = []
        self.alloc_min = ALLOC_MIN
        self.handed: dict[int, Any] = {}  # id -> buffer the hook returned
        self.identity_ok = 0
        # installed before the transport starts: a message may arrive early
        self.reported: list[dict[str, Any]] = []
        asyncio.get_running_loop().set_exception_handler(lambda _l, ctx: self.reported.append(ctx))

    def alloc(self, source: int, channel: Channel, nbytes: int) -> Any:
        self.calls.append((source, channel, nbytes))
        if channel != Channel.DATA:
            return None
        k = sum(1 for c in self.calls if c[1] == Channel.DATA) - 1  # index among data messages
        if k == BROKEN_AT:
            return memoryview(bytearray(nbytes + 1))  # wrong size: must be rejected
        if k % 2:
            return None  # "allocate yourself"
        buf = memoryview(bytearray(nbytes + 16))[8 : 8 + nbytes]  # a slice of a bigger block
        self.handed[id(buf)] = buf
        return buf

    def deliver(self, source: int, channel: Channel, view: Any) -> None:
        if id(view) in self.handed:
            assert self.handed.pop(id(view)) is view
            self.identity_ok += 1
        super().deliver(source, channel, memoryview(view))


async def main(t: MPITransport, inbox: Inbox) -> None:
    assert isinstance(inbox, HookInbox)
    reported = inbox.reported
    peer = 1 - t.rank
    blocks = [make_block(t.rank, i, n) for i, n in enumerate(SIZES)]
    # post(): no task per send; a window of futures
    futs = [t.post(peer, Channel.DATA, [b]) for b in blocks]
    futs.append(t.post(peer, Channel.CONTROL, [b"ctl"]))
    bad = t.post(t.size + 1, Channel.DATA, [b"x"])
    await asyncio.gather(*futs)
    try:
        await bad
        raise AssertionError("post to a bad rank succeeded")
    except ValueError:
        pass
    await inbox.wait_count(len(SIZES) + 1)
    got = [bytes(v) for v in inbox.by_key[(peer, Channel.DATA)]]
    assert got == [make_block(peer, i, n) for i, n in enumerate(SIZES)], "payload mismatch"
    st = t.stats()
    if t.progress_mode == "poll":
        data_calls = [(s, n) for s, ch, n in inbox.calls if ch == Channel.DATA]
        hooked = [n for n in SIZES if n >= ALLOC_MIN]
        assert data_calls == [(peer, n) for n in hooked], data_calls
        assert all(n >= ALLOC_MIN for _, ch, n in inbox.calls), inbox.calls
        expect_hook = len([k for k in range(len(hooked)) if k % 2 == 0 and k != BROKEN_AT])
        assert inbox.identity_ok == expect_hook, (inbox.identity_ok, expect_hook)
        assert st["alloc_errors"] == 1, st
        assert st["user_allocs"] == expect_hook, st
        assert len(reported) == st["alloc_errors"], reported
    else:
        assert inbox.calls == [] and st["user_allocs"] == 0, st
    await t.aclose()
    closed = t.post(peer, Channel.DATA, [b"late"])
    try:
        await closed
        raise AssertionError("post after close succeeded")
    except ClosedResourceError:
        pass
    print(f"INFO rank {t.rank} alloc hook OK user_allocs={st['user_allocs']} errors={st['alloc_errors']}", flush=True)


if __name__ == "__main__":
    run(main, MODE, inbox_factory=HookInbox)
