"""Tests of generalized processes and the CPI (aiopdbp.runtime.process, single host)."""

from __future__ import annotations

import asyncio
import enum

import numpy as np
import pytest

import aiopdbp
from aiopdbp.runtime.node import DEFAULT_NAME_TIMEOUT
from aiopdbp.runtime.sending import BURST_BYTES
from aiopdbp.wire.message import credit_cost
from aiopdbp.hosts.tables import PendingName
from aiopdbp import (
    ClosedResourceError,
    DuplicateProcessError,
    Kind,
    Message,
    NoPipeError,
    PType,
    UnknownProcessError,
    WouldBlock,
)

pytestmark = pytest.mark.timeout(10)


async def _yield(times: int = 10) -> None:
    """Give every runnable task a few turns (used only to show something stays blocked)."""
    for _ in range(times):
        await asyncio.sleep(0)


# ------------------------------------------------------------------ lifecycle
async def test_register_apply_release_free_update_pta_each_step(pdbp_node) -> None:
    node = pdbp_node
    gp = await node.register("worker", PType.COMM)
    entry = node.tables.pta[gp.pid]
    assert (entry.name, entry.ptype, entry.node, entry.pipe) == ("worker", PType.COMM, node.rank, None)
    assert node.tables.pid_of("worker") == gp.pid
    assert gp.pipe is None

    await gp.apply_pipe()
    assert gp.pipe is not None
    assert node.tables.pta[gp.pid].pipe == gp.pipe.pipe_id
    assert node.stats().pipes_in_use == 1

    await gp.release_pipe()
    assert gp.pipe is None
    assert node.tables.pta[gp.pid].pipe is None
    assert node.stats().pipes_in_use == 0

    await gp.free()
    assert gp.pid not in node.tables.pta
    with pytest.raises(UnknownProcessError):
        node.tables.pid_of("worker")
    assert node.stats().gps == 0


async def test_register_duplicate_name_raises_duplicateprocesserror(pdbp_node) -> None:
    await pdbp_node.register("a")
    with pytest.raises(DuplicateProcessError):
        await pdbp_node.register("a")


async def test_register_empty_name_raises_valueerror(pdbp_node) -> None:
    with pytest.raises(ValueError):
        await pdbp_node.register("")


async def test_apply_release_free_are_idempotent(pdbp_node) -> None:
    gp = await pdbp_node.register("a")
    await gp.apply_pipe()
    pipe = gp.pipe
    await gp.apply_pipe()
    assert gp.pipe is pipe
    assert pdbp_node.stats().pipes_in_use == 1
    await gp.release_pipe()
    await gp.release_pipe()
    await gp.free()
    await gp.free()
    assert pdbp_node.stats().gps == 0


async def test_name_can_be_registered_again_after_free(pdbp_node) -> None:
    gp = await pdbp_node.register("a")
    await gp.free()
    again = await pdbp_node.register("a")
    assert again.pid != gp.pid


async def test_released_pipe_is_rebound_to_another_gp(pdbp_node) -> None:
    node = pdbp_node
    async with node.process("first") as first, node.process("sender") as sender:
        pipe_id = first.pipe.pipe_id
        await first.release_pipe()
        async with node.process("second") as second:
            assert second.pipe.pipe_id == pipe_id
            assert node.tables.pta[second.pid].pipe == pipe_id
            assert node.stats().pipes_created == 2  # no new pipe was made
            with pytest.raises(NoPipeError):
                await sender.send("first", b"x")
            await sender.send("second", b"y")
            msg = await second.recv()
            assert msg.data == b"y"


async def test_process_context_manager_frees_on_exception(pdbp_node) -> None:
    with pytest.raises(RuntimeError):
        async with pdbp_node.process("w") as gp:
            raise RuntimeError("boom")
    assert "w" not in pdbp_node.tables.by_name
    assert pdbp_node.stats().pipes_in_use == 0
    assert pdbp_node.stats().gps == 0
    with pytest.raises(ClosedResourceError):
        await gp.recv()


async def test_gp_context_manager_applies_and_frees(pdbp_node) -> None:
    gp = await pdbp_node.register("w")
    async with gp as same:
        assert same is gp and gp.pipe is not None
    assert "w" not in pdbp_node.tables.by_name


# ------------------------------------------------------------------- sending
async def test_recv_returns_messages_in_send_order(pdbp_node) -> None:
    async with pdbp_node.process("c") as c, pdbp_node.process("p") as p:
        for i in range(20):
            await p.send("c", bytes([i]))
        got = [(await c.recv()).data for _ in range(20)]
        assert got == [bytes([i]) for i in range(20)]


async def test_message_carries_source_kind_com_and_id(pdbp_node) -> None:
    async with pdbp_node.process("c") as c, pdbp_node.process("p") as p:
        await p.send("c", b"hi", com=1)
        msg = await c.recv()
        assert isinstance(msg, Message)
        assert (msg.source, msg.kind, msg.com, msg.data) == ("p", Kind.SHORT, 1, b"hi")
        assert msg.source_pid == p.pid


async def test_message_source_names_sender_after_sender_freed(pdbp_node) -> None:
    async with pdbp_node.process("c") as c:
        async with pdbp_node.process("p") as p:
            await p.send("c", b"bye")
        msg = await c.recv()
        assert msg.source == "p"


async def test_command_sets_kind_command_and_com(pdbp_node) -> None:
    async with pdbp_node.process("c") as c, pdbp_node.process("p") as p:
        await p.command("c", 42, b"arg")
        msg = await c.recv()
        assert (msg.kind, msg.com, msg.data) == (Kind.COMMAND, 42, b"arg")


async def test_send_to_self_arrives(pdbp_node) -> None:
    async with pdbp_node.process("me") as me:
        await me.send("me", b"note")
        assert (await me.recv()).data == b"note"


async def test_send_with_stream_kind_is_refused_and_sends_nothing(pdbp_node) -> None:
    async with pdbp_node.process("p") as p, pdbp_node.process("q") as q:
        with pytest.raises(ValueError, match="send_stream"):
            await p.send("q", b"x", kind=Kind.STREAM)
        with pytest.raises(ValueError, match="Kind.SHORT or Kind.COMMAND"):
            p.send_nowait("q", b"x", kind=Kind.STREAM)
        await p.send("q", b"after")
        assert (await q.recv()).data == b"after"


async def test_short_name_timeout_does_not_shorten_liveness() -> None:
    async with aiopdbp.open_node(name_timeout=0.05) as node:
        assert node.host_timeout == DEFAULT_NAME_TIMEOUT == 30


async def test_send_to_unknown_name_raises_after_name_timeout() -> None:
    async with aiopdbp.open_node(name_timeout=0.05) as node, node.process("p") as p:
        with pytest.raises(UnknownProcessError) as info:
            await p.send("nobody", b"x")
        assert (info.value.name, info.value.waited) == ("nobody", 0.05)
        assert "within 0.05 s" in str(info.value) and "name_timeout" in str(info.value)


async def test_send_to_misspelt_name_suggests_the_registered_one() -> None:
    async with aiopdbp.open_node(name_timeout=0.05) as node, node.process("p") as p, \
            node.process("worker-1"), node.process("worker-2"):
        with pytest.raises(UnknownProcessError) as info:
            await p.send("wroker-1", b"x")
        assert info.value.suggestions[0] == "worker-1"
        assert "did you mean 'worker-1'" in str(info.value), info.value
        with pytest.raises(UnknownProcessError, match="did you mean 'worker-1'"):
            await p.send("wroker-1", b"x", timeout=0)
        with pytest.raises(UnknownProcessError) as info:
            await p.send("zzz", b"x")
        assert info.value.suggestions == () and "did you mean" not in str(info.value)


async def test_waiting_for_misspelt_name_logs_the_suggestion_while_it_waits(pdbp_node, caplog) -> None:
    async with pdbp_node.process("p") as p, pdbp_node.process("worker-1"):
        with caplog.at_level("WARNING", logger="aiopdbp.routing.router"), pytest.raises(UnknownProcessError):
            await p.send("wroker-1", b"x", timeout=0.2)   # the hint comes after half the wait
        assert any("'wroker-1'" in r.getMessage() and "did you mean 'worker-1'" in r.getMessage()
                   for r in caplog.records), caplog.records


async def test_the_misspelt_name_hint_says_how_to_fail_sooner(pdbp_node, caplog) -> None:
    async with pdbp_node.process("p") as p, pdbp_node.process("worker-1"):
        with caplog.at_level("WARNING", logger="aiopdbp.routing.router"), pytest.raises(UnknownProcessError):
            await p.send("wroker-1", b"x", timeout=0.2)
        assert any("name_timeout=" in r.getMessage() and "timeout=" in r.getMessage()
                   for r in caplog.records), caplog.records


async def test_send_to_unknown_name_with_zero_timeout_raises_at_once(pdbp_node) -> None:
    async with pdbp_node.process("p") as p:
        with pytest.raises(UnknownProcessError) as info:
            await p.send("nobody", b"x", timeout=0)
        assert info.value.waited is None
        with pytest.raises(LookupError):
            p.send_nowait("nobody", b"x")


async def test_send_to_freed_name_raises_at_once(pdbp_node) -> None:
    async with pdbp_node.process("p") as p:
        async with pdbp_node.process("gone"):
            pass
        with pytest.raises(UnknownProcessError) as info:
            await p.send("gone", b"x")  # no wait: it was there and left
        assert info.value.waited is None
        assert info.value.freed_on == 0 and "was freed" in str(info.value)
        assert info.value.origin_rank is None   # freed on this rank: not another rank's doing


async def test_lookup_waits_for_name_by_default(pdbp_node, pdbp_spawn) -> None:
    looking = await pdbp_spawn(pdbp_node.lookup("late"))
    assert not looking.done()
    async with pdbp_node.process("late") as late:
        assert await looking == late.pid


async def test_send_with_timeout_waits_for_name_registration(pdbp_node, pdbp_spawn) -> None:
    node = pdbp_node
    async with node.process("p") as p:
        sending = await pdbp_spawn(p.send("late", b"x", timeout=5))
        assert not sending.done()
        async with node.process("late") as late:
            await sending
            msg = await late.recv()
            assert (msg.source, msg.data) == ("p", b"x")


async def test_send_with_timeout_waits_for_pipe_bind(pdbp_node, pdbp_spawn) -> None:
    node = pdbp_node
    async with node.process("p") as p:
        late = await node.register("late")
        sending = await pdbp_spawn(p.send("late", b"x", timeout=5))
        assert not sending.done()
        await late.apply_pipe()
        await sending
        assert (await late.recv()).data == b"x"
        await late.free()


async def test_send_with_timeout_raises_unknownprocesserror_when_never_registered(pdbp_node) -> None:
    async with pdbp_node.process("p") as p:
        with pytest.raises(UnknownProcessError) as info:
            await p.send("never", b"x", timeout=0.01)
        assert info.value.waited == 0.01


async def test_send_to_gp_that_released_its_pipe_says_so_not_apply_pipe(pdbp_node) -> None:
    async with pdbp_node.process("p") as p, pdbp_node.process("left") as left:
        await left.release_pipe()
        with pytest.raises(NoPipeError, match="'left' on rank 0 released its pipe") as info:
            await p.send("left", b"x")
        assert "apply_pipe" not in str(info.value)
        await left.apply_pipe()          # bound again: it receives again
        await p.send("left", b"x")
        assert (await left.recv()).data == b"x"


async def test_send_to_registered_gp_without_pipe_raises_nopipeerror(pdbp_node) -> None:
    async with pdbp_node.process("p") as p:
        await pdbp_node.register("bare")
        with pytest.raises(NoPipeError):
            await p.send("bare", b"x")
        with pytest.raises(NoPipeError):
            p.send_nowait("bare", b"x")


async def test_send_after_free_raises_closedresourceerror(pdbp_node) -> None:
    async with pdbp_node.process("c"):
        p = await pdbp_node.register("p")
        await p.free()
        with pytest.raises(ClosedResourceError):
            await p.send("c", b"x")


class _Names(str, enum.Enum):
    CONSUMER = "consumer"


async def test_send_to_str_subclass_name_is_unicast(pdbp_node) -> None:
    async with pdbp_node.process("consumer") as c, pdbp_node.process("p") as p:
        await p.send(_Names.CONSUMER, b"x")
        assert (await c.recv()).data == b"x"


# ------------------------------------------------------------------- payloads
async def test_bytes_payload_arrives_as_same_bytes(pdbp_node) -> None:
    async with pdbp_node.process("c") as c, pdbp_node.process("p") as p:
        await p.send("c", b"payload")
        msg = await c.recv()
        assert type(msg.data) is bytes and msg.data == b"payload"


async def test_none_payload_arrives_as_none(pdbp_node) -> None:
    async with pdbp_node.process("c") as c, pdbp_node.process("p") as p:
        await p.send("c")
        assert (await c.recv()).data is None


async def test_bytearray_payload_is_snapshot_at_send(pdbp_node) -> None:
    async with pdbp_node.process("c") as c, pdbp_node.process("p") as p:
        buf = bytearray(b"old")
        await p.send("c", buf)
        buf[:] = b"new"
        msg = await c.recv()
        assert type(msg.data) is bytes and msg.data == b"old"


async def test_memoryview_payload_arrives_as_bytes(pdbp_node) -> None:
    async with pdbp_node.process("c") as c, pdbp_node.process("p") as p:
        buf = bytearray(b"abcdef")
        await p.send("c", memoryview(buf)[1:4])
        buf[:] = b"XXXXXX"
        msg = await c.recv()
        assert type(msg.data) is bytes and msg.data == b"bcd"


async def test_numpy_payload_keeps_dtype_shape_and_is_copied(pdbp_node) -> None:
    async with pdbp_node.process("c") as c, pdbp_node.process("p") as p:
        arr = np.arange(12, dtype=np.float32).reshape(3, 4)
        await p.send("c", arr)
        arr[0, 0] = 99.0
        data = (await c.recv()).data
        assert isinstance(data, np.ndarray)
        assert (data.dtype, data.shape) == (np.dtype(np.float32), (3, 4))
        assert data[0, 0] == 0.0
        assert not np.shares_memory(data, arr)
        np.testing.assert_array_equal(data.ravel()[1:], np.arange(1, 12, dtype=np.float32))


async def test_read_only_numpy_payload_arrives_intact(pdbp_node) -> None:
    async with pdbp_node.process("c") as c, pdbp_node.process("p") as p:
        arr = np.arange(4, dtype=np.int32)
        arr.flags.writeable = False
        await p.send("c", arr)
        data = (await c.recv()).data
        np.testing.assert_array_equal(data, np.arange(4, dtype=np.int32))


async def test_read_only_view_payload_is_snapshot_at_send(pdbp_node) -> None:
    async with pdbp_node.process("c") as c, pdbp_node.process("p") as p:
        buf = np.arange(4, dtype=np.int32)
        view = buf.view()
        view.flags.writeable = False
        await p.send("c", view)
        buf[:] = -1
        data = (await c.recv()).data
        np.testing.assert_array_equal(data, np.arange(4, dtype=np.int32))


async def test_object_payload_refused_without_allow_pickle(pdbp_node) -> None:
    async with pdbp_node.process("c"), pdbp_node.process("p") as p:
        with pytest.raises(TypeError):
            await p.send("c", {"a": 1})
        with pytest.raises(TypeError):
            await p.send("c", np.array([object()], dtype=object))


@pytest.mark.parametrize(("payload", "hint"), [("text", r"encode it first \(text.encode\(\)\), or open"),
                                              ([1, 2], r"make it an array first \(np.asarray\(values\)\), or open"),
                                              ({"a": 1}, r"not bytes-like or an ndarray; open the node")])
async def test_a_refused_payload_says_what_to_send_instead(pdbp_node, payload: object, hint: str) -> None:
    async with pdbp_node.process("c"), pdbp_node.process("p") as p:
        with pytest.raises(TypeError, match=hint):
            await p.send("c", payload)


async def test_object_payload_delivered_as_copy_with_allow_pickle() -> None:
    async with aiopdbp.open_node(allow_pickle=True) as node:
        async with node.process("c") as c, node.process("p") as p:
            obj = {"a": [1, 2], "b": ("x", None)}
            await p.send("c", obj)
            obj["a"].append(3)
            data = (await c.recv()).data
            assert data == {"a": [1, 2], "b": ("x", None)}
            assert data is not obj


@pytest.mark.parametrize("how", ["send", "send_nowait", "multicast"])
async def test_refused_payload_does_not_consume_destination_slot(how: str) -> None:
    async with aiopdbp.open_node(pipe_capacity=1) as node:
        async with node.process("c") as c, node.process("p") as p:
            with pytest.raises(TypeError):
                if how == "send":
                    await p.send("c", object())
                elif how == "send_nowait":
                    p.send_nowait("c", object())
                else:
                    await p.send(["c", "p"], object())
            p.send_nowait("c", b"fits")  # the single slot must still be free
            assert (await c.recv()).data == b"fits"


# ------------------------------------------------------------------ multicast
async def test_multicast_reaches_every_named_gp_exactly_once(pdbp_node) -> None:
    node = pdbp_node
    async with node.process("a") as a, node.process("b") as b, node.process("c") as c, \
            node.process("p") as p:
        await p.send(["a", "b", "a", "c"], b"all", com=3)
        for gp in (a, b, c):
            await p.send(gp.name, b"sentinel")  # queued after the multicast
        for gp in (a, b, c):
            msg = await gp.recv()
            assert (msg.source, msg.com, msg.data) == ("p", 3, b"all")
            assert (await gp.recv()).data == b"sentinel"  # no second copy


async def test_multicast_array_is_one_shared_read_only_copy(pdbp_node) -> None:
    node = pdbp_node
    async with node.process("a") as a, node.process("b") as b, node.process("p") as p:
        arr = np.arange(6, dtype=np.int64).reshape(2, 3)
        await p.send(["a", "b"], arr)
        arr[:] = -1
        da, db = (await a.recv()).data, (await b.recv()).data
        assert da is db
        assert not da.flags.writeable
        assert (da.dtype, da.shape) == (np.dtype(np.int64), (2, 3))
        np.testing.assert_array_equal(da, np.arange(6).reshape(2, 3))


async def test_multicast_with_unknown_name_raises_and_delivers_nothing(pdbp_node) -> None:
    async with pdbp_node.process("a") as a, pdbp_node.process("p") as p:
        with pytest.raises(UnknownProcessError):
            await p.send(["a", "nobody"], b"x", timeout=0)
        await p.send("a", b"after")
        assert (await a.recv()).data == b"after"


async def test_multicast_to_full_destination_times_out_and_delivers_to_none() -> None:
    async with aiopdbp.open_node(pipe_capacity=1) as node:
        async with node.process("a") as a, node.process("b") as b, node.process("p") as p:
            await p.send("b", b"fill")
            with pytest.raises(TimeoutError, match="waiting for room in its pipe"):
                await p.send(["a", "b"], b"multi", timeout=0.01)
            p.send_nowait("a", b"single")  # a's slot was given back
            assert (await a.recv()).data == b"single"
            assert (await b.recv()).data == b"fill"
            with pytest.raises(WouldBlock):
                b.recv_nowait()


async def test_cancelled_multicast_delivers_to_none(pdbp_spawn) -> None:
    async with aiopdbp.open_node(pipe_capacity=1) as node:
        async with node.process("a") as a, node.process("b") as b, node.process("p") as p:
            await p.send("b", b"fill")
            blocked = await pdbp_spawn(p.send(["a", "b"], b"multi"))
            blocked.cancel()
            with pytest.raises(asyncio.CancelledError):
                await blocked
            p.send_nowait("a", b"single")
            assert (await a.recv()).data == b"single"
            assert (await b.recv()).data == b"fill"
            await p.send("b", b"next")
            assert (await b.recv()).data == b"next"


async def test_multicast_to_empty_set_raises_valueerror(pdbp_node) -> None:
    async with pdbp_node.process("p") as p:
        with pytest.raises(ValueError):
            await p.send([], b"x")


async def test_command_multicast_sets_kind_for_every_receiver(pdbp_node) -> None:
    async with pdbp_node.process("a") as a, pdbp_node.process("b") as b, pdbp_node.process("p") as p:
        await p.command(["a", "b"], 9)
        for gp in (a, b):
            msg = await gp.recv()
            assert (msg.kind, msg.com, msg.data) == (Kind.COMMAND, 9, None)


# --------------------------------------------------------------- backpressure
async def test_producer_blocks_after_pipe_capacity_until_consumer_receives() -> None:
    n = 12
    async with aiopdbp.open_node(pipe_capacity=4) as node:
        async with node.process("c") as c, node.process("p") as p:
            sent = 0
            four_sent = asyncio.Event()

            async def produce() -> None:
                nonlocal sent
                for i in range(n):
                    await p.send("c", i.to_bytes(2, "little"))
                    sent += 1
                    if sent == 4:
                        four_sent.set()

            producer = asyncio.create_task(produce())
            await four_sent.wait()
            await _yield()
            assert sent == 4 and not producer.done()
            with pytest.raises(WouldBlock):
                c.send_nowait("c", b"extra")  # the consumer's pipe is full

            first = await c.recv()
            assert first.data == (0).to_bytes(2, "little")
            got = [first.data]
            await _yield()
            assert sent == 5  # one receive made room for exactly one more

            while len(got) < n:
                got.append((await c.recv()).data)
            await producer
            assert got == [i.to_bytes(2, "little") for i in range(n)]
            with pytest.raises(WouldBlock):
                c.recv_nowait()


async def test_send_with_timeout_raises_timeouterror_while_destination_full() -> None:
    async with aiopdbp.open_node(pipe_capacity=1) as node:
        async with node.process("c") as c, node.process("p") as p:
            await p.send("c", b"1")
            with pytest.raises(TimeoutError, match="room in its pipe to send to GP 'c'"):
                await p.send("c", b"2", timeout=0.01)
            assert (await c.recv()).data == b"1"
            await p.send("c", b"3")
            assert (await c.recv()).data == b"3"  # the timed-out send queued nothing


async def test_cancelled_send_queues_nothing(pdbp_spawn) -> None:
    async with aiopdbp.open_node(pipe_capacity=1) as node:
        async with node.process("c") as c, node.process("p") as p:
            await p.send("c", b"1")
            blocked = await pdbp_spawn(p.send("c", b"lost"))
            blocked.cancel()
            with pytest.raises(asyncio.CancelledError):
                await blocked
            assert (await c.recv()).data == b"1"
            await p.send("c", b"3")
            assert (await c.recv()).data == b"3"


#: a 1 KiB payload, and how many sends of it a run makes before it yields
KIB = bytes(1024)
QUIET = (BURST_BYTES - 1) // credit_cost(KIB)


async def test_looping_senders_take_turns_on_an_empty_window() -> None:
    """Two senders whose sends never wait fill an empty pipe in turns: the
    first to run does not send all it has before the other runs."""
    async with aiopdbp.open_node() as node:
        async with node.process("c") as c, node.process("a") as a, node.process("b") as b:
            async def loop(gp: aiopdbp.GP) -> None:
                for _ in range(4 * QUIET):
                    await gp.send("c", KIB)

            await asyncio.gather(loop(a), loop(b))
            first = [c.recv_nowait().source for _ in range(2 * QUIET)]
            assert min(first.count("a"), first.count("b")) >= QUIET // 2, first


async def test_send_cancelled_at_its_turn_to_yield_queues_nothing(pdbp_spawn) -> None:
    """The yield of a run of sends comes before the message is queued, so a
    send cancelled there has sent nothing."""
    async with aiopdbp.open_node() as node:
        async with node.process("c") as c, node.process("p") as p:
            for i in range(QUIET):
                await p.send("c", bytes([i]) * 1024)
            yielded = await pdbp_spawn(p.send("c", KIB))   # runs to its yield
            assert not yielded.done()
            yielded.cancel()
            with pytest.raises(asyncio.CancelledError):
                await yielded
            assert [c.recv_nowait().data for _ in range(QUIET)] == [bytes([i]) * 1024 for i in range(QUIET)]
            with pytest.raises(WouldBlock):
                c.recv_nowait()


async def test_send_nowait_raises_wouldblock_when_destination_full() -> None:
    async with aiopdbp.open_node(pipe_capacity=2) as node:
        async with node.process("c") as c, node.process("p") as p:
            p.send_nowait("c", b"1")
            p.send_nowait("c", b"2")
            with pytest.raises(WouldBlock):
                p.send_nowait("c", b"3")
            assert [(await c.recv()).data, (await c.recv()).data] == [b"1", b"2"]


async def test_slow_gp_does_not_block_traffic_to_another_gp(pdbp_spawn) -> None:
    async with aiopdbp.open_node(pipe_capacity=4) as node:
        async with node.process("slow") as slow, node.process("fast") as fast, \
                node.process("p1") as p1, node.process("p2") as p2:
            for i in range(4):
                await p1.send("slow", bytes([i]))
            stuck = await pdbp_spawn(p1.send("slow", b"5th"))
            assert not stuck.done()

            async def produce_fast() -> None:
                for i in range(50):
                    await p2.send("fast", bytes([i]))

            producer = asyncio.create_task(produce_fast())
            got = [(await fast.recv()).data for _ in range(50)]
            await producer
            assert got == [bytes([i]) for i in range(50)]
            assert not stuck.done()  # still held back by the slow GP only

            assert (await slow.recv()).data == bytes([0])
            await stuck
            assert [(await slow.recv()).data for _ in range(4)] == [b"\x01", b"\x02", b"\x03", b"5th"]


# ------------------------------------------------------------------ receiving
async def test_recv_timeout_raises_timeouterror(pdbp_node) -> None:
    async with pdbp_node.process("c") as c:
        with pytest.raises(TimeoutError):
            await c.recv(timeout=0.01)


async def test_recv_nowait_raises_wouldblock_when_empty(pdbp_node) -> None:
    async with pdbp_node.process("c") as c:
        with pytest.raises(WouldBlock):
            c.recv_nowait()


async def test_recv_nowait_returns_queued_message(pdbp_node) -> None:
    async with pdbp_node.process("c") as c, pdbp_node.process("p") as p:
        await p.send("c", b"a")
        await p.send("c", b"b")
        assert (await c.recv()).data == b"a"  # routing has happened by now
        assert c.recv_nowait().data == b"b"


async def test_recv_after_free_raises_closedresourceerror(pdbp_node) -> None:
    gp = await pdbp_node.register("c")
    await gp.apply_pipe()
    await gp.free()
    with pytest.raises(ClosedResourceError):
        await gp.recv()
    with pytest.raises(ClosedResourceError):
        gp.recv_nowait()


async def test_recv_without_pipe_raises_nopipeerror(pdbp_node) -> None:
    gp = await pdbp_node.register("c")
    with pytest.raises(NoPipeError):
        await gp.recv()


async def test_recv_blocked_when_pipe_released_raises_closedresourceerror(pdbp_node, pdbp_spawn) -> None:
    async with pdbp_node.process("c") as c:
        receiver = await pdbp_spawn(c.recv())
        await c.release_pipe()
        with pytest.raises(ClosedResourceError):
            await receiver


async def test_cancelled_recv_loses_no_message(pdbp_node, pdbp_spawn) -> None:
    async with pdbp_node.process("c") as c, pdbp_node.process("p") as p:
        receiver = await pdbp_spawn(c.recv())
        receiver.cancel()
        with pytest.raises(asyncio.CancelledError):
            await receiver
        await p.send("c", b"kept")
        assert (await c.recv()).data == b"kept"


async def test_async_for_ends_when_pipe_released(pdbp_node) -> None:
    async with pdbp_node.process("c") as c, pdbp_node.process("p") as p:
        got: list[bytes] = []
        three = asyncio.Event()

        async def consume() -> list[bytes]:
            async for msg in c:
                got.append(msg.data)
                if len(got) == 3:
                    three.set()
            return got

        consumer = asyncio.create_task(consume())
        for i in range(3):
            await p.send("c", bytes([i]))
        await three.wait()
        await c.release_pipe()
        assert await consumer == [b"\x00", b"\x01", b"\x02"]


async def test_async_for_over_gp_without_pipe_yields_nothing(pdbp_node) -> None:
    gp = await pdbp_node.register("c")
    assert [item async for item in gp] == []


# ------------------------------------------- data ahead of its sender's name
def _unnamed_message(pid: int) -> Message:
    """What a host builds when data from GP ``pid`` overtakes the table update
    that registers it (the two travel on different channels)."""
    return Message((PendingName(f"<pid {pid}>"), Kind.SHORT, 0, b"x", pid))


async def test_recv_waits_for_the_name_of_a_sender_registered_after_its_message(pdbp_node, pdbp_spawn) -> None:
    node = pdbp_node
    async with node.process("rcv") as rcv:
        late_pid = rcv.pid + 1
        rcv.pipe.send_nowait(_unnamed_message(late_pid))
        task = await pdbp_spawn(rcv.recv())
        assert not task.done()
        late = await node.register("late")
        assert late.pid == late_pid  # pids are handed out in order
        msg = await task
        assert (msg.source, type(msg.source), msg.source_pid, msg.data) == ("late", str, late_pid, b"x")


async def test_recv_cancelled_while_waiting_for_a_name_loses_nothing(pdbp_node, pdbp_spawn) -> None:
    node = pdbp_node
    async with node.process("rcv") as rcv:
        late_pid = rcv.pid + 1
        rcv.pipe.send_nowait(_unnamed_message(late_pid))
        task = await pdbp_spawn(rcv.recv())
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
        await node.register("late")
        msg = await rcv.recv()
        assert (msg.source, msg.data) == ("late", b"x")


async def test_recv_gives_the_placeholder_when_the_sender_never_registers() -> None:
    async with aiopdbp.open_node(name_timeout=0.05) as node, node.process("rcv") as rcv:
        rcv.pipe.send_nowait(_unnamed_message(999))
        msg = await rcv.recv()
        assert (msg.source, msg.data) == ("<pid 999>", b"x")


async def test_recv_into_refuses_to_start_while_a_recv_waits(pdbp_node) -> None:
    gp = await pdbp_node.register("one", bind=True)
    waiting = asyncio.ensure_future(gp.recv())
    await asyncio.sleep(0)  # a yield: recv runs until it waits on the empty pipe
    with pytest.raises(RuntimeError, match="one receiver at a time"):
        await gp.recv_into(bytearray(16))
    await gp.send("one", b"hi")
    assert (await waiting).data == b"hi"  # the waiting recv lost nothing


async def test_recv_refuses_to_start_while_recv_into_waits(pdbp_node) -> None:
    gp = await pdbp_node.register("one", bind=True)
    out = bytearray(16)
    into = asyncio.ensure_future(gp.recv_into(out))
    await asyncio.sleep(0)
    with pytest.raises(RuntimeError, match="one receiver at a time"):
        await gp.recv()
    await gp.send("one", b"hello")
    msg = await into
    assert bytes(msg.data) == b"hello" and bytes(out[:5]) == b"hello"


async def test_recv_into_waits_for_the_name_of_a_sender_registered_after_its_message(pdbp_node, pdbp_spawn) -> None:
    node = pdbp_node
    async with node.process("rcv") as rcv:
        late_pid = rcv.pid + 1
        rcv.pipe.send_nowait(_unnamed_message(late_pid))
        out = bytearray(8)
        task = await pdbp_spawn(rcv.recv_into(out))
        assert not task.done()
        await node.register("late")
        msg = await task
        assert (msg.source, type(msg.source), bytes(out[:1])) == ("late", str, b"x")


# ------------------------------------------------------------------ bad input
@pytest.mark.parametrize("dest", [b"b", bytearray(b"b"), 123, ["b", 5]])
async def test_send_to_a_dest_that_is_not_names_raises_typeerror(pdbp_node, dest: object) -> None:
    async with pdbp_node.process("a") as a, pdbp_node.process("b") as b:
        with pytest.raises(TypeError, match="GP name"):
            await a.send(dest, b"x")  # type: ignore[arg-type]
        assert len(b.pipe) == 0  # type: ignore[arg-type]


@pytest.mark.parametrize("timeout", [-1, -0.5, float("nan")])
@pytest.mark.parametrize("call", ["send", "recv", "recv_into", "send_stream"])
async def test_negative_or_nan_timeout_raises_valueerror(pdbp_node, call: str, timeout: float) -> None:
    async with pdbp_node.process("a") as a, pdbp_node.process("b") as b:
        calls = {"send": lambda: a.send("b", b"x", timeout=timeout),
                 "recv": lambda: b.recv(timeout=timeout),
                 "recv_into": lambda: b.recv_into(bytearray(8), timeout=timeout),
                 "send_stream": lambda: a.send_stream("b", b"x", timeout=timeout)}
        with pytest.raises(ValueError, match="timeout must be"):
            await calls[call]()
        assert len(b.pipe) == 0  # type: ignore[arg-type]


@pytest.mark.parametrize("into", [False, True])
async def test_recv_timeout_says_what_it_waited_for(pdbp_node, into: bool) -> None:
    async with pdbp_node.process("b") as b:
        with pytest.raises(TimeoutError, match="GP 'b' received nothing"):
            await (b.recv_into(bytearray(8), timeout=0.01) if into else b.recv(timeout=0))
