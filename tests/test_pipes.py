"""Tests of aiopdbp.routing.pipes: the bounded Pipe (with reservations) and the PipePool (DPP)."""

from __future__ import annotations

import asyncio
import sys
from collections import Counter

import pytest

import aiopdbp

from aiopdbp import BrokenResourceError, ClosedResourceError, NoPipeError, Pipe, PipePool, WouldBlock
from aiopdbp.wire.mesp import Kind

pytestmark = pytest.mark.timeout(10)


# ------------------------------------------------------------------ Pipe: basics
def test_pipe_capacity_below_one_raises_valueerror() -> None:
    with pytest.raises(ValueError):
        Pipe(0)


async def test_fifo_order_preserved() -> None:
    pipe: Pipe[int] = Pipe(8)
    for i in range(6):
        await pipe.send(i)
    assert [await pipe.receive() for _ in range(6)] == list(range(6))


async def test_receive_waits_for_item_when_empty(pdbp_spawn) -> None:
    pipe: Pipe[str] = Pipe(2)
    receiver = await pdbp_spawn(pipe.receive())
    assert not receiver.done()
    pipe.send_nowait("x")
    assert await receiver == "x"


async def test_send_waits_when_full_and_resumes_after_receive(pdbp_spawn) -> None:
    pipe: Pipe[str] = Pipe(2)
    pipe.send_nowait("a")
    pipe.send_nowait("b")
    sender = await pdbp_spawn(pipe.send("c"))
    assert not sender.done()
    assert len(pipe) == 2
    assert await pipe.receive() == "a"
    await sender
    assert [pipe.receive_nowait(), pipe.receive_nowait()] == ["b", "c"]


def test_send_nowait_raises_wouldblock_when_full() -> None:
    pipe: Pipe[int] = Pipe(2)
    pipe.send_nowait(1)
    pipe.send_nowait(2)
    with pytest.raises(WouldBlock):
        pipe.send_nowait(3)
    assert len(pipe) == 2


def test_receive_nowait_raises_wouldblock_when_empty() -> None:
    pipe: Pipe[int] = Pipe(2)
    with pytest.raises(WouldBlock):
        pipe.receive_nowait()


# ------------------------------------------------------------- reservations
def test_reservations_count_against_capacity() -> None:
    pipe: Pipe[str] = Pipe(3)
    pipe.reserve_nowait()
    assert (len(pipe), pipe.room.free) == (0, 2)
    pipe.send_nowait("a")
    assert (len(pipe), pipe.room.free) == (1, 1)
    pipe.reserve_nowait()
    assert pipe.room.free == 0
    with pytest.raises(WouldBlock):
        pipe.send_nowait("b")
    with pytest.raises(WouldBlock):
        pipe.reserve_nowait()


def test_put_reserved_fills_the_reserved_slot() -> None:
    pipe: Pipe[str] = Pipe(2)
    pipe.reserve_nowait()
    pipe.reserve_nowait()
    pipe.put_reserved("a")
    assert (len(pipe), pipe.room.free) == (1, 0)
    pipe.put_reserved("b")
    assert (len(pipe), pipe.room.free) == (2, 0)
    assert [pipe.receive_nowait(), pipe.receive_nowait()] == ["a", "b"]
    assert pipe.room.free == 2


def test_unreserve_gives_slot_back_and_is_noop_without_reservation() -> None:
    pipe: Pipe[str] = Pipe(1)
    pipe.reserve_nowait()
    assert pipe.room.free == 0
    pipe.unreserve()
    assert pipe.room.free == 1
    pipe.unreserve()  # nothing reserved: no-op, free never exceeds capacity
    assert pipe.room.free == 1
    pipe.send_nowait("x")
    assert pipe.room.free == 0


async def test_unreserve_wakes_waiting_sender(pdbp_spawn) -> None:
    pipe: Pipe[str] = Pipe(1)
    pipe.reserve_nowait()
    sender = await pdbp_spawn(pipe.send("x"))
    assert not sender.done()
    pipe.unreserve()
    await sender
    assert pipe.receive_nowait() == "x"


async def test_reserve_waits_for_room_then_holds_slot(pdbp_spawn) -> None:
    pipe: Pipe[str] = Pipe(1)
    pipe.send_nowait("a")
    reserver = await pdbp_spawn(pipe.reserve())
    assert not reserver.done()
    assert pipe.receive_nowait() == "a"
    await reserver
    assert (len(pipe), pipe.room.free) == (0, 0)


def test_force_put_exceeds_capacity() -> None:
    pipe: Pipe[str] = Pipe(1)
    pipe.send_nowait("a")
    pipe.force_put("b")
    assert len(pipe) == 2
    assert [pipe.receive_nowait(), pipe.receive_nowait()] == ["a", "b"]


# ---------------------------------------------------------------- cancellation
async def test_cancelled_receive_loses_no_item_when_woken(pdbp_spawn) -> None:
    pipe: Pipe[str] = Pipe(2)
    first = await pdbp_spawn(pipe.receive())
    second = await pdbp_spawn(pipe.receive())
    pipe.send_nowait("item")  # wakes `first`, which has not run yet
    first.cancel()
    with pytest.raises(asyncio.CancelledError):
        await first
    assert await second == "item"  # the wake-up was handed on


async def test_cancelled_receive_leaves_item_for_next_receive(pdbp_spawn) -> None:
    pipe: Pipe[str] = Pipe(2)
    receiver = await pdbp_spawn(pipe.receive())
    pipe.send_nowait("item")
    receiver.cancel()
    with pytest.raises(asyncio.CancelledError):
        await receiver
    assert await pipe.receive() == "item"


async def test_cancelled_send_puts_nothing(pdbp_spawn) -> None:
    pipe: Pipe[str] = Pipe(1)
    pipe.send_nowait("a")
    sender = await pdbp_spawn(pipe.send("lost"))
    sender.cancel()
    with pytest.raises(asyncio.CancelledError):
        await sender
    assert pipe.receive_nowait() == "a"
    with pytest.raises(WouldBlock):
        pipe.receive_nowait()
    assert pipe.room.free == 1


async def test_cancelled_woken_sender_hands_room_to_next_sender(pdbp_spawn) -> None:
    pipe: Pipe[str] = Pipe(1)
    pipe.send_nowait("a")
    first = await pdbp_spawn(pipe.send("first"))
    second = await pdbp_spawn(pipe.send("second"))
    assert pipe.receive_nowait() == "a"  # wakes `first`, which has not run yet
    first.cancel()
    with pytest.raises(asyncio.CancelledError):
        await first
    await second
    assert pipe.receive_nowait() == "second"


# ------------------------------------------------------------------- closing
async def test_close_fails_waiting_receiver_with_closedresourceerror(pdbp_spawn) -> None:
    pipe: Pipe[str] = Pipe(1)
    receiver = await pdbp_spawn(pipe.receive())
    pipe.close()
    with pytest.raises(ClosedResourceError):
        await receiver


async def test_close_fails_waiting_sender_with_brokenresourceerror(pdbp_spawn) -> None:
    pipe: Pipe[str] = Pipe(1)
    pipe.send_nowait("a")
    sender = await pdbp_spawn(pipe.send("b"))
    pipe.close()
    with pytest.raises(BrokenResourceError):
        await sender


async def test_closed_pipe_refuses_receive_and_send() -> None:
    pipe: Pipe[str] = Pipe(2)
    pipe.send_nowait("discarded")
    pipe.close()
    assert pipe.closed
    assert len(pipe) == 0
    with pytest.raises(ClosedResourceError):
        pipe.receive_nowait()
    with pytest.raises(ClosedResourceError):
        await pipe.receive()
    with pytest.raises(BrokenResourceError):
        pipe.send_nowait("x")
    with pytest.raises(BrokenResourceError):
        await pipe.send("x")
    with pytest.raises(BrokenResourceError):
        pipe.reserve_nowait()


async def test_close_twice_is_ok() -> None:
    pipe: Pipe[str] = Pipe(1)
    pipe.close()
    pipe.close()
    await pipe.aclose()
    await pipe.aclose()
    assert pipe.closed


async def test_close_send_gives_eoferror_after_drain() -> None:
    pipe: Pipe[str] = Pipe(3)
    pipe.send_nowait("a")
    pipe.send_nowait("b")
    pipe.close_send()
    assert await pipe.receive() == "a"
    assert pipe.receive_nowait() == "b"
    with pytest.raises(EOFError):
        await pipe.receive()
    with pytest.raises(EOFError):
        pipe.receive_nowait()


async def test_close_send_wakes_waiting_receiver_with_eoferror(pdbp_spawn) -> None:
    pipe: Pipe[str] = Pipe(1)
    receiver = await pdbp_spawn(pipe.receive())
    pipe.close_send()
    with pytest.raises(EOFError):
        await receiver


async def test_send_after_close_send_raises_closedresourceerror() -> None:
    pipe: Pipe[str] = Pipe(1)
    pipe.close_send()
    with pytest.raises(ClosedResourceError):
        pipe.send_nowait("x")
    with pytest.raises(ClosedResourceError):
        await pipe.send("x")


# ------------------------------------------------------------------ PipePool
def test_pool_creates_pipes_lazily_up_to_max() -> None:
    pool = PipePool(4, 3)
    assert pool.created == 0
    pipes = [pool.apply_nowait() for _ in range(3)]
    assert len({p.pipe_id for p in pipes}) == 3
    assert (pool.created, pool.in_use) == (3, 3)
    assert all(p.room.capacity == 4 for p in pipes)


def test_pool_apply_nowait_raises_nopipeerror_when_exhausted() -> None:
    pool = PipePool(4, 1)
    pool.apply_nowait()
    with pytest.raises(NoPipeError):
        pool.apply_nowait()


async def test_pool_release_fails_reader_woken_just_before_release() -> None:
    pool = PipePool(4, 1)
    pipe = pool.apply_nowait()
    reader = asyncio.ensure_future(pipe.receive())
    await asyncio.sleep(0)  # parked in receive
    pipe.send_nowait("item")  # wakes the reader; it has not run yet
    pool.release(pipe)
    with pytest.raises(ClosedResourceError):
        await reader
    assert len(pool.apply_nowait()) == 0


async def test_pool_released_pipe_is_reused_empty_and_open() -> None:
    pool = PipePool(4, 1)
    pipe = pool.apply_nowait()
    pipe.send_nowait("stale")
    pipe.reserve_nowait()
    pipe.room.capacity = 2  # e.g. narrowed for a stream
    pool.release(pipe)
    assert pool.in_use == 0
    again = pool.apply_nowait()
    assert again.pipe_id == pipe.pipe_id and again is not pipe
    assert pipe.closed  # the released object stays closed for stale holders
    assert not again.closed
    assert len(again) == 0
    assert (again.room.capacity, again.room.free) == (4, 4)
    again.send_nowait("fresh")
    assert await again.receive() == "fresh"


async def test_pool_release_fails_blocked_receiver(pdbp_spawn) -> None:
    pool = PipePool(4, 1)
    pipe = pool.apply_nowait()
    receiver = await pdbp_spawn(pipe.receive())
    pool.release(pipe)
    with pytest.raises(ClosedResourceError):
        await receiver


def test_pool_release_twice_returns_pipe_once() -> None:
    pool = PipePool(4, 1)
    pipe = pool.apply_nowait()
    pool.release(pipe)
    pool.release(pipe)
    assert pool.apply_nowait().pipe_id == pipe.pipe_id
    with pytest.raises(NoPipeError):
        pool.apply_nowait()


def test_pool_release_of_foreign_pipe_is_ignored() -> None:
    pool = PipePool(4, 1)
    pool.release(Pipe(4, 0))
    assert pool.in_use == 0
    pool.apply_nowait()
    with pytest.raises(NoPipeError):
        pool.apply_nowait()


async def test_pool_apply_without_timeout_waits_for_released_pipe(pdbp_spawn) -> None:
    pool = PipePool(4, 1)
    pipe = pool.apply_nowait()
    waiter = await pdbp_spawn(pool.apply())
    assert not waiter.done()
    pool.release(pipe)
    assert (await waiter).pipe_id == pipe.pipe_id


async def test_pool_apply_with_timeout_waits_for_released_pipe(pdbp_spawn) -> None:
    pool = PipePool(4, 1)
    pipe = pool.apply_nowait()
    waiter = await pdbp_spawn(pool.apply(timeout=0.2))
    assert not waiter.done()
    pool.release(pipe)
    assert (await waiter).pipe_id == pipe.pipe_id


async def test_pool_apply_with_timeout_gets_pipe_released_later(pdbp_spawn) -> None:
    pool = PipePool(4, 1)
    pipe = pool.apply_nowait()
    waiter = await pdbp_spawn(pool.apply(timeout=5))
    await asyncio.sleep(0)  # let the waiter park
    assert not waiter.done()
    pool.release(pipe)
    assert (await waiter).pipe_id == pipe.pipe_id


async def test_pool_apply_timeout_raises_nopipeerror_when_nothing_released() -> None:
    pool = PipePool(4, 1)
    pool.apply_nowait()
    with pytest.raises(NoPipeError):
        await pool.apply(timeout=0)
    with pytest.raises(NoPipeError):
        await pool.apply(timeout=0.01)


async def test_pool_cancelled_apply_holds_no_pipe(pdbp_spawn) -> None:
    pool = PipePool(4, 1)
    pipe = pool.apply_nowait()
    waiter = await pdbp_spawn(pool.apply())
    waiter.cancel()
    with pytest.raises(asyncio.CancelledError):
        await waiter
    pool.release(pipe)
    assert pool.apply_nowait().pipe_id == pipe.pipe_id


async def test_pool_close_fails_waiting_apply(pdbp_spawn) -> None:
    pool = PipePool(4, 1)
    pool.apply_nowait()
    waiter = await pdbp_spawn(pool.apply())
    pool.close()
    with pytest.raises(NoPipeError):
        await waiter


# ------------------------------------------- local pipes bounded in bytes
@pytest.mark.timeout(10)
async def test_reader_fed_from_its_own_rank_holds_at_most_the_window_in_bytes() -> None:
    """A GP that does not read holds at most ``gp_window`` bytes of its own
    rank's messages (as it does per other host), not ``pipe_capacity`` of them."""
    from aiopdbp import RemoteConfig, open_node
    window = 64 << 10
    async with open_node(remote=RemoteConfig(gp_window=window)) as node, \
            node.process("reader") as reader, node.process("sender") as sender:
        sent = 0
        with pytest.raises(WouldBlock):
            for _ in range(100):
                sender.send_nowait("reader", bytes(8 << 10))
                sent += 1
        assert 1 <= sent <= window // (8 << 10)
        for _ in range(sent):                   # reading gives the bytes back
            await reader.recv()
        sender.send_nowait("reader", bytes(8 << 10))


@pytest.mark.timeout(10)
async def test_message_larger_than_the_byte_bound_goes_alone() -> None:
    pipe: Pipe[bytes] = Pipe(16, max_bytes=100)
    assert pipe.offer(1, 500, ("s", 0, 0, bytes(480), 1))   # type: ignore[arg-type]
    with pytest.raises(WouldBlock):
        pipe.reserve_nowait(1, 10)              # nothing more until it is taken
    pipe.receive_nowait()
    pipe.reserve_nowait(1, 10)
    assert pipe.room.held_bytes == 10


@pytest.mark.timeout(10)
async def test_parked_sender_gets_the_bytes_given_back() -> None:
    pipe: Pipe[bytes] = Pipe(16, max_bytes=100)
    pipe.reserve_nowait(1, 60)
    pipe.reserve_nowait(1, 40)
    waiter = asyncio.create_task(pipe.reserve(1, 50))
    await asyncio.sleep(0)
    assert not waiter.done()                    # a free slot, but no room in bytes
    pipe.unreserve(1, 60)
    await asyncio.wait_for(waiter, 5)
    assert pipe.room.held_bytes == 90


@pytest.mark.timeout(10)
async def test_reader_fed_streams_from_its_own_rank_holds_at_most_the_window_in_bytes() -> None:
    """Short streams sent whole to a GP that does not read count in its
    pipe's bytes as messages do: at most ``gp_window`` bytes of them are
    held, then the sender waits; reading them gives the bytes back."""
    from aiopdbp import RemoteConfig, open_node
    window, size = 64 << 10, 8 << 10
    async with open_node(remote=RemoteConfig(gp_window=window)) as node, \
            node.process("reader") as reader, node.process("sender") as sender:
        sent = 0
        with pytest.raises(TimeoutError):       # the window is full: the next send waits
            for _ in range(100):
                await sender.send_stream("reader", bytes(size), timeout=0.5)
                sent += 1
        assert 1 <= sent <= window // size, sent
        pipe = reader.pipe
        assert pipe is not None and pipe.room.held_bytes <= window, pipe.room.held_bytes
        for _ in range(sent):                   # reading gives the bytes back
            stream = await reader.recv()
            assert isinstance(stream, aiopdbp.IncomingStream)
            assert len(await stream.read()) == size
        assert pipe.room.held_bytes == 0
        await sender.send_stream("reader", bytes(size), timeout=5)


# ------------------------------------------------ fair hand-off to local senders
async def test_senders_woken_together_each_run_before_one_sends_again(pdbp_spawn) -> None:
    """Two senders parked on a full pipe; the reader frees more slots than
    they need: each sends once per round (the first one woken does not
    take the spare slots on the fast path before the other has run)."""
    pipe: Pipe[str] = Pipe(4)
    for _ in range(4):
        pipe.send_nowait("x")

    async def sender(name: str) -> None:
        for _ in range(8):
            await pipe.send(name)

    await pdbp_spawn(sender("a"))
    await pdbp_spawn(sender("b"))
    assert [pipe.receive_nowait() for _ in range(4)] == ["x"] * 4   # a, b woken; 2 slots spare
    first = [await pipe.receive() for _ in range(4)]
    assert sorted(first) == ["a", "a", "b", "b"], first


# ------------------------------------------------- turns between senders (issue 28)
def _msgs(sender: int, n: int, first: int = 0) -> list[aiopdbp.Message]:
    """``n`` messages of GP ``sender`` (pid), numbered from ``first`` in their payload."""
    return [aiopdbp.Message((f"s{sender}", Kind.SHORT, 0, f"{sender}.{i}".encode(), sender))
            for i in range(first, first + n)]


def _label(item: aiopdbp.Message) -> str:
    return item.data.decode()


def test_reader_takes_senders_in_turns_whichever_came_first() -> None:
    """A host's whole window queued first (sender 1's batch) does not go
    first: once other senders' items arrive -- a batch from another host,
    a local message -- the reader takes one item of each sender in turn,
    each sender's in its order."""
    pipe: Pipe[aiopdbp.Message] = Pipe(64)
    pipe.put_many(_msgs(1, 5), 1)
    pipe.put_many(_msgs(2, 3), 1)
    assert pipe.offer(3, 8, ("s3", Kind.SHORT, 0, b"3.0", 3))
    taken = [_label(pipe.receive_nowait()) for _ in range(9)]
    assert taken == ["1.0", "2.0", "3.0", "1.1", "2.1", "1.2", "2.2", "1.3", "1.4"], taken


def test_a_batch_of_several_senders_is_split_in_order_when_turns_begin() -> None:
    pipe: Pipe[aiopdbp.Message] = Pipe(64)
    a, b = _msgs(1, 2), _msgs(2, 2)
    pipe.put_many([a[0], b[0], a[1], b[1]], 1)   # one host's block: its senders interleaved
    pipe.send_nowait(_msgs(3, 1)[0])
    assert [_label(pipe.receive_nowait()) for _ in range(5)] == ["1.0", "2.0", "3.0", "1.1", "2.1"]


def test_stream_opens_take_their_senders_turn() -> None:
    """An item that is not a message (a stream's OPEN) waits in its sender's
    lane, behind that sender's earlier messages."""
    class Open:
        source_pid = 1
    pipe: Pipe[object] = Pipe(64)
    pipe.put_many(_msgs(1, 2), 1)
    opened = Open()
    pipe.send_nowait(opened)
    pipe.put_many(_msgs(2, 2), 1)
    taken = [pipe.receive_nowait() for _ in range(5)]
    assert taken[1].data == b"2.0" and taken[3].data == b"2.1" and taken[4] is opened  # type: ignore[attr-defined]


def test_credit_is_never_counted_for_an_item_still_queued() -> None:
    """Other hosts' credit is settled (``on_watch(pipe, upto, host)``) for
    the items numbered below ``upto``: under turns it counts up to the oldest
    of their items not taken yet, so nothing is credited for an item the
    reader has not taken (items of different sizes: no trade, below)."""
    pipe: Pipe[aiopdbp.Message] = Pipe(64)
    seen: list[int] = []

    def watch(_: object, upto: int, host: int) -> int:
        seen.append(upto)
        return 0                               # report every take
    pipe.on_watch = watch
    pipe.watch_at = 0
    pipe.put_many(_msgs(1, 3), 1)              # arrivals 0..2
    pipe.put_many([aiopdbp.Message(("s2", Kind.SHORT, 0, b"2.%d longer" % i, 2)) for i in range(3)],
                  1)                           # arrivals 3..5, the same host, larger
    for _ in range(6):
        pipe.receive_nowait()
    assert seen == [1, 1, 2, 2, 5, 6], seen      # 1.0 2.0 1.1 2.1 1.2 2.2
    assert pipe.taken == 6                     # (items taken, whatever their order)
    pipe.put_many(_msgs(2, 2, 3), 1)           # empty again: one FIFO, counted one by one
    pipe.watch_at = 0                          # (the router's mark for the batch)
    pipe.receive_nowait()
    assert seen[-1] == pipe.taken == 7


def test_a_long_local_lane_does_not_hold_back_other_hosts_credit() -> None:
    """Local items and other hosts' are counted apart: once the reader has
    taken every item that came from other hosts, their credit is due, even
    while older local items still wait for their turns."""
    pipe: Pipe[aiopdbp.Message] = Pipe(64, max_bytes=1000)
    seen: list[int] = []
    pipe.on_watch = lambda _, upto, host: seen.append(upto) or 1 << 62
    pipe.watch_at = 6                          # the other host's batch below: arrivals 4, 5
    for i in range(4):                         # arrivals 0..3, local
        assert pipe.offer(1, 10, ("s1", Kind.SHORT, 0, f"1.{i}".encode(), 1))
    pipe.put_many(_msgs(9, 2), 1)
    assert [_label(pipe.receive_nowait()) for _ in range(4)] == ["1.0", "9.0", "1.1", "9.1"]
    assert seen == [6]                         # all of the other host's: settled
    assert pipe.room.held_bytes == 20               # 1.2 and 1.3 still hold theirs


def test_one_senders_long_lane_does_not_hold_back_its_hosts_credit() -> None:
    """A message taken ahead of an older one of the same host and credit
    cost trades numbers with it: the host's count moves on with every take,
    so one sender's long lane (it started first) does not hold back the
    credit of the others on its host, and still nothing is credited beyond
    the bytes taken."""
    pipe: Pipe[aiopdbp.Message] = Pipe(64)
    seen: list[int] = []

    def watch(_: object, upto: int, host: int) -> int:
        seen.append(upto)
        return 0                               # report every take
    pipe.on_watch = watch
    pipe.watch_at = 0
    pipe.put_many(_msgs(1, 4), 1)              # arrivals 0..3: the sender that started first
    pipe.put_many(_msgs(2, 2), 1)              # arrivals 4, 5: another on the same host
    assert [_label(pipe.receive_nowait()) for _ in range(4)] == ["1.0", "2.0", "1.1", "2.1"]
    assert seen == [1, 2, 3, 4], seen          # one more item's credit per take
    assert [_label(pipe.receive_nowait()) for _ in range(2)] == ["1.2", "1.3"]
    assert seen[-1] == 6


def test_one_hosts_long_lane_does_not_hold_back_another_hosts_credit() -> None:
    """Each host's items are counted apart: once the reader has taken every
    item that came from host 2, host 2's credit is due, even while older
    items of host 1 (one sender's long lane) still wait for their turns."""
    pipe: Pipe[aiopdbp.Message] = Pipe(64)
    seen: list[tuple[int, int]] = []

    def watch(_: object, upto: int, host: int) -> int:
        seen.append((host, upto))
        return 1 << 62                         # nothing more marked
    pipe.on_watch = watch
    pipe.put_many(_msgs(1, 5), 1)              # arrivals 0..4, host 1
    pipe.watch_at = 5                          # (the router's mark for that batch)
    pipe.put_many(_msgs(2, 2), 2)              # arrivals 5, 6, host 2
    assert [_label(pipe.receive_nowait()) for _ in range(4)] == ["1.0", "2.0", "1.1", "2.1"]
    assert seen == [(2, 7)], seen              # host 2's: settled; host 1's 1.2..1.4 still queued
    for _ in range(3):
        pipe.receive_nowait()
    assert seen == [(2, 7), (1, 7)], seen      # host 1 had items up to its last: all taken


def test_a_sender_served_this_round_waits_for_the_others_not_served_yet() -> None:
    """A sender whose lane ran dry after its turn and refilled waits for the
    next round, while senders not served in this one go first -- though
    only one of them has an item queued at a time (one message per window
    from their host): a local sender always queued against five remote
    senders arriving one by one gets 1/6, not 1/2."""
    pipe: Pipe[aiopdbp.Message] = Pipe(64)
    pipe.send_nowait(_msgs(0, 1)[0])           # the local sender: always one queued
    pipe.put_many(_msgs(1, 1), 1)              # the remote host's first sender
    taken: list[str] = []
    local, remote = 1, 1
    for _ in range(60):
        item = pipe.receive_nowait()
        taken.append(_label(item))
        if item.source_pid == 0:               # the local sender's next
            pipe.send_nowait(_msgs(0, 1, local)[0])
            local += 1
        else:                                  # credit back: the host's next sender's
            sender = remote % 5 + 1
            pipe.put_many(_msgs(sender, 1, remote // 5), 1)
            remote += 1
    shares = {s: sum(t.startswith(f"{s}.") for t in taken) for s in range(6)}
    assert shares == dict.fromkeys(range(6), 10), (shares, taken)


async def test_drain_takes_turns_too() -> None:
    pipe: Pipe[aiopdbp.Message] = Pipe(64)
    pipe.put_many(_msgs(1, 3), 1)
    pipe.put_many(_msgs(2, 1), 1)
    assert [_label(m) for m in pipe.drain_nowait(3)] == ["1.0", "2.0", "1.1"]
    assert [_label(m) for m in pipe.drain_nowait()] == ["1.2"]
    assert pipe.taken == pipe.appended == 4


async def test_local_bytes_are_freed_when_taken_ahead_of_older_items_of_other_hosts() -> None:
    """The byte bound under turns: a local message the reader took before
    older items from another host gives its bytes back at once (they are
    counted apart), and the bound still holds for those it has not taken."""
    pipe: Pipe[aiopdbp.Message] = Pipe(64, max_bytes=100)
    pipe.put_many(_msgs(9, 3), 1)              # another host's, not counted here
    assert pipe.offer(1, 60, ("s1", Kind.SHORT, 0, b"1.0", 1))
    assert pipe.offer(1, 40, ("s1", Kind.SHORT, 0, b"1.1", 1))
    assert not pipe.offer(1, 10, ("s1", Kind.SHORT, 0, b"1.2", 1))
    assert [_label(pipe.receive_nowait()) for _ in range(2)] == ["9.0", "1.0"]
    assert pipe.room.held_bytes == 40               # 9.1 and 9.2 are older and still queued
    assert pipe.offer(1, 60, ("s1", Kind.SHORT, 0, b"1.2", 1))
    assert not pipe.offer(1, 10, ("s1", Kind.SHORT, 0, b"1.3", 1))


def _one_at_a_time(pipe: Pipe[aiopdbp.Message], takes: int) -> Counter[int]:
    """The reader takes ``takes`` items from a local sender (pid 9: its next
    item queued as soon as one is taken) and five senders on host 1 (pids
    1-5) whose host has one item in the pipe at a time, the next (the next
    sender's, in turn) arriving only after the reader's following take --
    or once the reader waits for it (messages of a whole window)."""
    pipe.send_nowait(_msgs(9, 1)[0])
    pipe.put_many(_msgs(1, 1), 1)
    counts: Counter[int] = Counter()
    on_way: list[aiopdbp.Message] = []
    sent = 1
    while sum(counts.values()) < takes:
        try:
            item = pipe.receive_nowait()
        except WouldBlock:
            assert on_way, "the reader waits with nothing on the way"
            pipe.put_many([on_way.pop()], 1)
            continue
        counts[item.source_pid] += 1
        if on_way:                         # it arrives after this take
            pipe.put_many([on_way.pop()], 1)
        if item.source_pid == 9:
            pipe.send_nowait(_msgs(9, 1, counts[9])[0])
        else:
            on_way.append(_msgs(sent % 5 + 1, 1, sent)[0])
            sent += 1
    return counts


async def test_a_host_with_one_message_in_the_pipe_gets_its_senders_turns() -> None:
    """A round that served a host whose lane then ran dry waits for that
    host's next message: each of its five senders has a turn for every one
    of the local sender's (it had every other item: 3x fair)."""
    pipe: Pipe[aiopdbp.Message] = Pipe(64)
    pipe.hold_s = 60.0                     # the bound (below) plays no part here
    counts = _one_at_a_time(pipe, 60)
    assert counts == {pid: 10 for pid in (1, 2, 3, 4, 5, 9)}, counts


def _round_served_host_1(hold_s: float) -> Pipe[aiopdbp.Message]:
    """A pipe whose round served the local sender 9 and host 1's lone item;
    the local sender has its next queued, host 1 nothing."""
    pipe: Pipe[aiopdbp.Message] = Pipe(64)
    pipe.hold_s = hold_s
    pipe.send_nowait(_msgs(9, 1)[0])
    pipe.put_many(_msgs(1, 1), 1)
    pipe.send_nowait(_msgs(9, 1, 1)[0])
    assert [_label(pipe.receive_nowait()) for _ in range(2)] == ["9.0", "1.0"]
    return pipe


async def test_a_round_waits_for_a_host_at_most_hold_s() -> None:
    """A host that stops sending holds the reader up once, for ``hold_s``."""
    pipe = _round_served_host_1(0.01)
    assert len(pipe) == 0 and not pipe.ready()            # waits for host 1
    with pytest.raises(WouldBlock):
        pipe.receive_nowait()
    assert _label(await pipe.receive()) == "9.1"          # host 1 sent nothing
    pipe.send_nowait(_msgs(9, 1, 2)[0])
    pipe.put_many(_msgs(2, 1), 1)
    assert _label(pipe.receive_nowait()) == "9.2"         # a new round: no wait


def test_senders_of_the_readers_own_host_never_wait() -> None:
    pipe: Pipe[aiopdbp.Message] = Pipe(64)
    pipe.send_nowait(_msgs(1, 1)[0])
    pipe.send_nowait(_msgs(2, 1)[0])
    for i in range(1, 20):
        item = pipe.receive_nowait()
        pipe.send_nowait(_msgs(item.source_pid, 1, i)[0])
    assert len(pipe) == 2


async def test_a_pipe_at_its_end_hands_over_what_a_round_waited_with() -> None:
    pipe = _round_served_host_1(60.0)
    assert not pipe.ready()
    pipe.close_send()
    assert _label(await pipe.receive()) == "9.1"
    with pytest.raises(EOFError):
        await pipe.receive()
