"""Tests of aiopdbp.runtime.node: open_node lifecycle, shutdown, stats() and aiopdbp.run()."""

from __future__ import annotations

import asyncio

import numpy as np
import pytest

import aiopdbp
from aiopdbp import CDU, BrokenResourceError, ClosedResourceError, IncomingStream, Kind, Message, NodeType

pytestmark = pytest.mark.timeout(10)


async def _yield(times: int = 10) -> None:
    for _ in range(times):
        await asyncio.sleep(0)


# ------------------------------------------------------------------ lifecycle
async def test_open_node_single_host_is_rank_zero_master() -> None:
    async with aiopdbp.open_node() as node:
        assert (node.rank, node.size) == (0, 1)
        assert [n.ntype for n in node.tables.nta.values()] == [NodeType.MASTER]


async def test_leaving_open_node_frees_all_gps_and_leaves_no_task() -> None:
    async with aiopdbp.open_node() as node:
        bare = await node.register("bare")
        bound = await node.register("bound")
        await bound.apply_pipe()
        await bare.send("bound", b"queued")
        # segments (not one record, which is done once sent): its sender waits for the reader
        stream_sender = asyncio.create_task(bare.send_stream("bound", b"x" * 100, segment_size=10))
        assert (await bound.recv()).data == b"queued"
        stream = await bound.recv()
        assert isinstance(stream, IncomingStream)
    with pytest.raises(BrokenResourceError):
        await stream_sender
    assert node.tables.pta == {} and node.streams.mta == {}
    stats = node.stats()
    assert (stats.gps, stats.pipes_in_use, stats.streams_in, stats.streams_out) == (0, 0, 0, 0)
    assert asyncio.all_tasks() == {asyncio.current_task()}
    with pytest.raises(ClosedResourceError):
        await bound.recv()
    with pytest.raises(ClosedResourceError):
        await bare.send("bound", b"x")


async def test_leaving_open_node_on_exception_still_cleans_up() -> None:
    with pytest.raises(RuntimeError):
        async with aiopdbp.open_node() as node:
            await node.register("a")
            raise RuntimeError("boom")
    assert node.tables.pta == {}
    assert asyncio.all_tasks() == {asyncio.current_task()}


async def test_node_aclose_is_idempotent() -> None:
    node = aiopdbp.open_node()
    await node.start()
    await node.aclose()
    await node.aclose()
    assert asyncio.all_tasks() == {asyncio.current_task()}


async def test_nodes_can_be_opened_one_after_another() -> None:
    for _ in range(2):
        async with aiopdbp.open_node() as node, node.process("a") as a, node.process("b") as b:
            await a.send("b", b"x")
            assert (await b.recv()).data == b"x"


async def test_gp_blocked_in_recv_gets_closedresourceerror_when_node_closes(pdbp_spawn) -> None:
    async with aiopdbp.open_node() as node:
        gp = await node.register("c")
        await gp.apply_pipe()
        receiver = await pdbp_spawn(gp.recv())
        assert not receiver.done()
    with pytest.raises(ClosedResourceError):
        await receiver


async def test_async_for_over_gp_ends_when_node_closes(pdbp_spawn) -> None:
    async def collect(gp: aiopdbp.GP) -> list[bytes]:
        return [msg.data async for msg in gp]

    async with aiopdbp.open_node() as node:
        async with node.process("c") as c, node.process("p") as p:
            await p.send("c", b"1")
            consumer = await pdbp_spawn(collect(c))
            await _yield()
            assert not consumer.done()
    assert await consumer == [b"1"]


async def test_send_waiting_for_name_fails_when_node_closes(pdbp_spawn) -> None:
    async with aiopdbp.open_node() as node:
        p = await node.register("p")
        waiting = await pdbp_spawn(p.send("late", b"x", timeout=5))
        assert not waiting.done()
    done, _ = await asyncio.wait({waiting}, timeout=0.3)  # bounded: turns the hang into a failure
    if not done:
        waiting.cancel()
        await asyncio.gather(waiting, return_exceptions=True)
    assert done
    assert isinstance(waiting.exception(), (ClosedResourceError, BrokenResourceError))


async def test_sender_blocked_by_backpressure_gets_brokenresourceerror_when_node_closes(pdbp_spawn) -> None:
    async with aiopdbp.open_node(pipe_capacity=1) as node:
        c = await node.register("c")
        await c.apply_pipe()
        p = await node.register("p")
        await p.send("c", b"1")
        blocked = await pdbp_spawn(p.send("c", b"2"))
        assert not blocked.done()
    with pytest.raises(BrokenResourceError):
        await blocked


async def test_stream_read_after_node_closed_raises_brokenresourceerror() -> None:
    async with aiopdbp.open_node() as node:
        c = await node.register("c")
        await c.apply_pipe()
        p = await node.register("p")
        sender = asyncio.create_task(p.send_stream("c", b"x" * 1000, segment_size=10))
        stream = await c.recv()
    with pytest.raises(BrokenResourceError):
        await stream.read()
    with pytest.raises(BrokenResourceError):
        await sender


async def test_stream_reader_blocked_gets_brokenresourceerror_when_node_closes(pdbp_spawn) -> None:
    async with aiopdbp.open_node() as node:
        c = await node.register("c")
        await c.apply_pipe()
        p = await node.register("p")
        never = asyncio.Event()

        async def chunks():
            yield b"first"
            await never.wait()

        sender = asyncio.create_task(p.send_stream("c", chunks()))
        stream = await c.recv()
        reader = await pdbp_spawn(stream.read())
        assert not reader.done()
    try:
        with pytest.raises(BrokenResourceError):
            await reader
    finally:
        sender.cancel()
    await asyncio.gather(sender, return_exceptions=True)
    assert node.stats().streams_out == 0
    assert asyncio.all_tasks() == {asyncio.current_task()}


# ---------------------------------------------------------------------- stats
async def test_stats_counts_gps_pipes_routed_and_table_version() -> None:
    async with aiopdbp.open_node() as node:
        base = node.stats()
        assert (base.rank, base.size, base.gps, base.routed, base.dropped) == (0, 1, 0, 0, 0)
        async with node.process("c") as c, node.process("p") as p:
            stats = node.stats()
            assert (stats.gps, stats.pipes_in_use, stats.pipes_created) == (2, 2, 2)
            assert stats.table_version == base.table_version + 2  # one bound registration each
            assert stats.table_digest == node.tables.digest != base.table_digest
            for i in range(3):
                await p.send("c", bytes([i]))
            for _ in range(3):
                await c.recv()
            assert node.stats().routed == 3
            await p.send(["c", "p"], b"both")
            await c.recv()
            await p.recv()
            assert node.stats().routed == 5  # one multicast: an entry per destination pipe
        stats = node.stats()
        assert (stats.gps, stats.pipes_in_use, stats.pipes_created) == (0, 0, 2)
        assert stats.table_version == base.table_version + 4  # + 2x free (a clean exit: the free says the pipe went too)


async def test_stats_counts_dropped_cdu_for_gp_gone_before_routing() -> None:
    async with aiopdbp.open_node() as node:
        async with node.process("p") as p:
            c = await node.register("c")
            await c.apply_pipe()
            # Queue an entry in the public message pipe as the PipeManager
            # would see it under load (an idle manager routes a send at once).
            node.manager.public.force_put((c.pipe, c.pid, Message(("p", Kind.SHORT, 0, b"x", p.pid))))
            await c.free()
            await p.send("p", b"marker")
            assert (await p.recv()).data == b"marker"  # routing passed the dropped CDU
            assert node.stats().dropped == 1


# ------------------------------------------------------------------------ run
async def _main(value: object) -> tuple[object, str]:
    loop = asyncio.get_running_loop()
    async with aiopdbp.open_node() as node, node.process("c") as c, node.process("p") as p:
        await p.send("c", np.arange(3))
        got = (await c.recv()).data
    assert got.tolist() == [0, 1, 2]
    return value, type(loop).__module__


def test_run_returns_value_with_uvloop() -> None:
    pytest.importorskip("uvloop")
    value, loop_module = aiopdbp.run(_main(42), use_uvloop=True)
    assert value == 42
    assert loop_module.startswith("uvloop")


def test_run_returns_value_without_uvloop() -> None:
    value, loop_module = aiopdbp.run(_main("v"), use_uvloop=False)
    assert value == "v"
    assert loop_module.startswith("asyncio")


def test_run_defaults_to_uvloop_unless_disabled_by_env(monkeypatch) -> None:
    pytest.importorskip("uvloop")
    monkeypatch.delenv("AIOPDBP_UVLOOP", raising=False)
    assert aiopdbp.run(_main(1))[1].startswith("uvloop")
    monkeypatch.setenv("AIOPDBP_UVLOOP", "0")
    assert aiopdbp.run(_main(2))[1].startswith("asyncio")


def test_run_accepts_a_non_coroutine_awaitable() -> None:
    class Awaitable:
        def __await__(self):
            return _main("aw").__await__()

    assert aiopdbp.run(Awaitable(), use_uvloop=False)[0] == "aw"


def test_run_propagates_exception() -> None:
    async def fail() -> None:
        raise KeyError("x")

    with pytest.raises(KeyError):
        aiopdbp.run(fail(), use_uvloop=False)


@pytest.mark.parametrize("call", ["send", "send_stream"])
async def test_send_waiting_for_a_binding_of_a_gp_that_is_freed_names_it(pdbp_spawn, call: str) -> None:
    # Found by a newcomer check: a send (with a timeout, so it waits for the
    # binding) to a GP freed meanwhile said "no generalized process named
    # 'pid 2'": the pid, looked up again after the GP had gone.
    async with aiopdbp.open_node() as node:
        async with node.process("s") as s:
            peer = await node.register("peer")   # no pipe: a send with a timeout waits for one
            coro = s.send("peer", b"x", timeout=10) if call == "send" else s.send_stream("peer", b"x", timeout=10)
            waiting = await pdbp_spawn(coro)
            assert not waiting.done()
            await peer.free()
            with pytest.raises(aiopdbp.UnknownProcessError) as info:
                await waiting
            assert "'peer'" in str(info.value) and info.value.freed_on == 0, info.value


async def test_send_to_a_gp_whose_pipe_was_released_names_the_gp(pdbp_spawn) -> None:
    async with aiopdbp.open_node(pipe_capacity=1) as node:
        async with node.process("s") as s:
            async with node.process("peer") as peer:
                await s.send("peer", b"fills its pipe")
                sending = await pdbp_spawn(s.send("peer", b"waits for room"))
                assert not sending.done()
                await peer.release_pipe()
            with pytest.raises(BrokenResourceError, match="of GP 'peer'"):
                await sending
