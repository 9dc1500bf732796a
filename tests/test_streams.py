"""Tests of data streams (aiopdbp.streams.sender, aiopdbp.streams.receiver): send_stream and IncomingStream, single host."""

from __future__ import annotations

import array
import asyncio
import random
from collections.abc import AsyncIterator
from typing import Any

import numpy as np
import pytest

import aiopdbp
from aiopdbp import (
    CDU,
    BrokenResourceError,
    IncomingStream,
    Kind,
    Message,
    StreamError,
    StreamOp,
    UnknownProcessError,
)

pytestmark = pytest.mark.timeout(10)

DATA = bytes(range(256)) * 40  # 10240 bytes


async def _yield(times: int = 10) -> None:
    for _ in range(times):
        await asyncio.sleep(0)


async def _recv_stream(gp: aiopdbp.GP) -> IncomingStream:
    item = await gp.recv()
    assert isinstance(item, IncomingStream)
    return item


def _assert_stream_resources_free(node: aiopdbp.Node, bound_gps: int) -> None:
    stats = node.stats()
    assert (stats.streams_in, stats.streams_out) == (0, 0)
    assert stats.pipes_in_use == bound_gps
    assert node.cps_streams.in_use == 0
    assert node.streams.mta == {}


async def _idle_source(release: asyncio.Event) -> AsyncIterator[bytes]:
    """A chunk source that yields one empty chunk (which opens the stream and
    carries nothing), then nothing until released: the test can feed the
    stream's pipe itself."""
    yield b""
    await release.wait()


def _segment(stream: IncomingStream, src: aiopdbp.GP, dst: aiopdbp.GP, segno: int, data: bytes) -> CDU:
    return CDU(Kind.STREAM, src.pid, (dst.pid,), data, 0, 0, stream.sno, segno, stream.key[0])


def _end(stream: IncomingStream, src: aiopdbp.GP, dst: aiopdbp.GP, segno: int, nbytes: int) -> CDU:
    return CDU(Kind.STREAM, src.pid, (dst.pid,), nbytes.to_bytes(8, "little"), 0, 0, stream.sno,
               segno, stream.key[0], (), StreamOp.END)


# ------------------------------------------------------------------ round trips
async def test_bytes_stream_round_trip_with_read(pdbp_node) -> None:
    async with pdbp_node.process("c") as c, pdbp_node.process("p") as p:
        sender = asyncio.create_task(p.send_stream("c", DATA, segment_size=100, com=7))
        stream = await _recv_stream(c)
        assert (stream.source, stream.com) == ("p", 7)
        got = await stream.read()
        assert bytes(got) == DATA
        assert stream.finished
        assert await sender == len(DATA)


async def test_bytearray_stream_read_is_not_affected_by_later_source_change(pdbp_node) -> None:
    async with pdbp_node.process("c") as c, pdbp_node.process("p") as p:
        src = bytearray(DATA)
        sender = asyncio.create_task(p.send_stream("c", src, segment_size=1000))
        got = await (await _recv_stream(c)).read()
        await sender
        src[:] = bytes(len(src))
        assert bytes(got) == DATA


async def test_empty_bytes_stream_reads_empty(pdbp_node) -> None:
    async with pdbp_node.process("c") as c, pdbp_node.process("p") as p:
        sender = asyncio.create_task(p.send_stream("c", b""))
        assert bytes(await (await _recv_stream(c)).read()) == b""
        assert await sender == 0


async def test_read_into_reused_out_buffer(pdbp_node) -> None:
    async with pdbp_node.process("c") as c, pdbp_node.process("p") as p:
        buf = bytearray(len(DATA) + 100)
        for payload in (DATA, DATA[::-1][:5000]):
            sender = asyncio.create_task(p.send_stream("c", payload, segment_size=1000))
            view = await (await _recv_stream(c)).read(out=buf)
            await sender
            assert bytes(view) == payload
            assert bytes(buf[:len(payload)]) == payload  # landed in the caller's buffer
            buf[0] ^= 0xFF
            assert view[0] == buf[0]  # the result is a view of `buf`, not a copy
            buf[0] ^= 0xFF


async def test_read_out_too_small_raises_valueerror_and_consumes_nothing(pdbp_node) -> None:
    async with pdbp_node.process("c") as c, pdbp_node.process("p") as p:
        sender = asyncio.create_task(p.send_stream("c", DATA, segment_size=1000))
        stream = await _recv_stream(c)
        with pytest.raises(ValueError):
            await stream.read(out=bytearray(10))
        assert bytes(await stream.read()) == DATA
        await sender


async def test_iteration_yields_segments_in_order_within_segment_size(pdbp_node) -> None:
    async with pdbp_node.process("c") as c, pdbp_node.process("p") as p:
        sender = asyncio.create_task(p.send_stream("c", DATA, segment_size=300))
        segments = [bytes(seg) async for seg in await _recv_stream(c)]
        await sender
        assert all(0 < len(seg) <= 300 for seg in segments)
        assert len(segments) == -(-len(DATA) // 300)
        assert b"".join(segments) == DATA


async def test_numpy_stream_read_keeps_dtype_and_shape(pdbp_node) -> None:
    async with pdbp_node.process("c") as c, pdbp_node.process("p") as p:
        arr = np.arange(50 * 3 * 4, dtype=np.float32).reshape(50, 3, 4)
        sender = asyncio.create_task(p.send_stream("c", arr, segment_size=100))
        got = await (await _recv_stream(c)).read()
        assert await sender == arr.nbytes
        assert isinstance(got, np.ndarray)
        assert (got.dtype, got.shape) == (arr.dtype, arr.shape)
        np.testing.assert_array_equal(got, arr)


async def test_numpy_stream_segments_are_cut_along_axis_zero(pdbp_node) -> None:
    async with pdbp_node.process("c") as c, pdbp_node.process("p") as p:
        arr = np.arange(7 * 3, dtype=np.int16).reshape(7, 3)  # rows of 6 bytes
        sender = asyncio.create_task(p.send_stream("c", arr, segment_size=13))
        segments = [seg async for seg in await _recv_stream(c)]
        await sender
        assert [s.shape for s in segments] == [(2, 3), (2, 3), (2, 3), (1, 3)]
        assert all(s.dtype == np.int16 for s in segments)
        np.testing.assert_array_equal(np.concatenate(segments), arr)


@pytest.mark.parametrize("layout", ["strided", "fortran"])
async def test_numpy_stream_of_non_contiguous_array_round_trips(pdbp_node, layout: str) -> None:
    base = np.arange(8 * 6, dtype=np.float64).reshape(8, 6)
    arr = base[:, ::2] if layout == "strided" else np.asfortranarray(base)
    async with pdbp_node.process("c") as c, pdbp_node.process("p") as p:
        sender = asyncio.create_task(p.send_stream("c", arr, segment_size=64))
        got = await (await _recv_stream(c)).read()
        assert await sender == arr.nbytes
        assert (got.dtype, got.shape) == (arr.dtype, arr.shape)
        np.testing.assert_array_equal(got, arr)


async def test_numpy_stream_read_into_out_array(pdbp_node) -> None:
    async with pdbp_node.process("c") as c, pdbp_node.process("p") as p:
        arr = np.arange(20, dtype=np.float64).reshape(4, 5)
        out = np.zeros(40, dtype=np.float64)
        sender = asyncio.create_task(p.send_stream("c", arr, segment_size=40))
        got = await (await _recv_stream(c)).read(out=out)
        await sender
        assert (got.dtype, got.shape) == (arr.dtype, arr.shape)
        np.testing.assert_array_equal(got, arr)
        assert np.shares_memory(got, out)


async def test_stream_from_sync_iterable_reassembles(pdbp_node) -> None:
    async with pdbp_node.process("c") as c, pdbp_node.process("p") as p:
        chunks = [b"ab", bytearray(b"cde"), b"", memoryview(b"fghij")]
        sender = asyncio.create_task(p.send_stream("c", iter(chunks), segment_size=2))
        got = await (await _recv_stream(c)).read()
        assert bytes(got) == b"abcdefghij"
        assert await sender == 10


async def test_stream_from_async_generator_of_arrays_reassembles(pdbp_node) -> None:
    async def chunks() -> AsyncIterator[np.ndarray]:
        for i in range(3):
            yield np.full((2, 3), i, dtype=np.int16)

    async with pdbp_node.process("c") as c, pdbp_node.process("p") as p:
        sender = asyncio.create_task(p.send_stream("c", chunks(), segment_size=6))
        got = await (await _recv_stream(c)).read()
        assert await sender == 3 * 2 * 3 * 2
        assert (got.dtype, got.shape) == (np.dtype(np.int16), (6, 3))
        np.testing.assert_array_equal(got, np.repeat(np.arange(3, dtype=np.int16), 2)[:, None]
                                      * np.ones((1, 3), dtype=np.int16))


async def test_stream_from_async_generator_of_bytes_iterates_in_order(pdbp_node) -> None:
    async def chunks() -> AsyncIterator[bytes]:
        for i in range(5):
            yield bytes([i]) * 10

    async with pdbp_node.process("c") as c, pdbp_node.process("p") as p:
        sender = asyncio.create_task(p.send_stream("c", chunks(), segment_size=4))
        got = b"".join([bytes(seg) async for seg in await _recv_stream(c)])
        await sender
        assert got == b"".join(bytes([i]) * 10 for i in range(5))


async def test_stream_from_array_array_buffer_round_trips(pdbp_node) -> None:
    async with pdbp_node.process("c") as c, pdbp_node.process("p") as p:
        src = array.array("i", range(100))
        sender = asyncio.create_task(p.send_stream("c", src, segment_size=64))
        stream = await _recv_stream(c)
        got, sent = await asyncio.gather(stream.read(), sender, return_exceptions=True)
        assert sent == len(src.tobytes()), sent
        assert bytes(got) == src.tobytes()


async def test_send_stream_to_unknown_name_raises_unknownprocesserror(pdbp_node) -> None:
    async with pdbp_node.process("p") as p:
        with pytest.raises(UnknownProcessError):
            await p.send_stream("nobody", DATA, timeout=0)
        _assert_stream_resources_free(pdbp_node, 1)


async def test_send_stream_of_non_buffer_raises_typeerror(pdbp_node) -> None:
    async with pdbp_node.process("c"), pdbp_node.process("p") as p:
        with pytest.raises(TypeError):
            await p.send_stream("c", 42)
        with pytest.raises(ValueError):
            await p.send_stream("c", DATA, segment_size=0)


async def test_stream_from_generator_announces_unknown_size_as_none(pdbp_node) -> None:
    def rows():
        for i in range(3):
            yield np.full((2, 4), i, dtype=np.float32)

    async with pdbp_node.process("c") as c, pdbp_node.process("p") as p:
        sender = asyncio.create_task(p.send_stream("c", rows()))
        stream = await _recv_stream(c)
        assert (stream.meta.nbytes, stream.meta.shape, stream.meta.dtype) == (None, (None, 4), np.float32)
        assert isinstance(stream.meta.dtype, np.dtype) and stream.meta.dtype == "<f4"   # as a name too
        assert (await stream.read()).shape == (6, 4)
        await sender
        sender = asyncio.create_task(p.send_stream("c", iter([b"ab", b"cd"])))
        stream = await _recv_stream(c)
        assert (stream.meta.nbytes, stream.meta.shape) == (None, ())
        assert bytes(await stream.read()) == b"abcd"
        await sender


def test_stream_meta_unknown_size_travels_as_none() -> None:
    from aiopdbp.streams.receiver import StreamMeta

    meta = StreamMeta("ndarray", None, np.dtype("<f4"), (None, 4))
    assert meta.to_wire()["nbytes"] == -1 and meta.to_wire()["shape"] == [0, 4]   # the wire is unchanged
    assert StreamMeta.from_wire(meta.to_wire()) == meta
    known = StreamMeta("ndarray", 0, np.dtype("<f4"), (0, 4))                                # an empty array
    assert StreamMeta.from_wire(known.to_wire()) == known


@pytest.mark.parametrize(("source", "named"), [({b"a", b"b"}, "cannot stream a set"),
                                               ({"k": b"v"}, "cannot stream a dict"),
                                               (42, "cannot stream an int"),
                                               ([b"ok", 3], "chunk 1 of the stream (item 1 of the iterable "
                                                            "given to send_stream) is an int")])
async def test_send_stream_of_unsupported_type_names_it_and_what_is_accepted(pdbp_node, source, named) -> None:
    async with pdbp_node.process("c"), pdbp_node.process("p") as p:
        with pytest.raises(TypeError) as info:
            await p.send_stream("c", source)
        assert named in str(info.value)
        assert ("give bytes, a bytearray or memoryview, a numpy array or CPU tensor, or an ordered (async) "
                "iterable") in str(info.value)


# ------------------------------------------------------------------ delivery
async def test_send_stream_returns_only_after_receiver_consumed_everything(pdbp_node) -> None:
    async with pdbp_node.process("c") as c, pdbp_node.process("p") as p:
        nseg = 5
        got_last = asyncio.Event()
        go_on = asyncio.Event()

        async def consume() -> bytes:
            stream = await _recv_stream(c)
            parts = []
            async for seg in stream:
                parts.append(bytes(seg))
                if len(parts) == nseg:  # the last data segment; the END is still unread
                    got_last.set()
                    await go_on.wait()
            return b"".join(parts)

        consumer = asyncio.create_task(consume())
        sender = asyncio.create_task(p.send_stream("c", DATA[:500], segment_size=100))
        await got_last.wait()
        await _yield()
        assert not sender.done()
        go_on.set()
        assert await consumer == DATA[:500]
        assert await sender == 500


async def test_stream_and_messages_keep_arrival_order(pdbp_node) -> None:
    async with pdbp_node.process("c") as c, pdbp_node.process("p") as p:
        opened = asyncio.Event()

        async def chunks() -> AsyncIterator[bytes]:
            opened.set()  # runs after the OPEN was queued
            yield DATA

        await p.send("c", b"before")
        sender = asyncio.create_task(p.send_stream("c", chunks(), segment_size=1000))
        await opened.wait()
        await p.send("c", b"after")

        first = await c.recv()
        assert isinstance(first, Message) and first.data == b"before"
        stream = await _recv_stream(c)
        assert bytes(await stream.read()) == DATA
        last = await c.recv()
        assert isinstance(last, Message) and last.data == b"after"
        await sender


async def test_finished_stream_removes_mta_row_and_returns_pipes(pdbp_node) -> None:
    node = pdbp_node
    async with node.process("c") as c, node.process("p") as p:
        sender = asyncio.create_task(p.send_stream("c", DATA, segment_size=100))
        stream = await _recv_stream(c)
        stats = node.stats()
        assert (stats.streams_in, stats.streams_out, stats.pipes_in_use) == (1, 1, 3)
        assert list(node.streams.mta) == [stream.key]
        assert node.cps_streams.in_use == 1
        await stream.read()
        await sender
        _assert_stream_resources_free(node, 2)


async def test_two_concurrent_streams_to_one_receiver(pdbp_node) -> None:
    node = pdbp_node
    async with node.process("c") as c, node.process("p1") as p1, node.process("p2") as p2:
        s1 = asyncio.create_task(p1.send_stream("c", DATA, segment_size=64))
        s2 = asyncio.create_task(p2.send_stream("c", DATA[::-1], segment_size=64))
        a, b = await _recv_stream(c), await _recv_stream(c)
        got = dict(zip((a.source, b.source), await asyncio.gather(a.read(), b.read())))
        assert bytes(got["p1"]) == DATA and bytes(got["p2"]) == DATA[::-1]
        await asyncio.gather(s1, s2)
        _assert_stream_resources_free(node, 3)


# ----------------------------------------------------------- reorder / protocol
async def test_out_of_order_segments_are_delivered_in_order(pdbp_node) -> None:
    async with pdbp_node.process("c") as c, pdbp_node.process("p") as p:
        release = asyncio.Event()
        sender = asyncio.create_task(p.send_stream("c", _idle_source(release)))
        stream = await _recv_stream(c)
        segs = [bytes([i]) * (i + 1) for i in range(6)]
        cdus = [_segment(stream, p, c, i, seg) for i, seg in enumerate(segs)]
        cdus.append(_end(stream, p, c, len(segs), sum(map(len, segs))))
        random.Random(1).shuffle(cdus)
        assert [cdu.segno for cdu in cdus] != sorted(cdu.segno for cdu in cdus)
        for cdu in cdus:
            stream.pipe.force_put(cdu)
        assert [bytes(seg) async for seg in stream] == segs
        sender.cancel()
        with pytest.raises(asyncio.CancelledError):
            await sender


async def test_duplicate_segment_raises_streamerror(pdbp_node) -> None:
    async with pdbp_node.process("c") as c, pdbp_node.process("p") as p:
        release = asyncio.Event()
        sender = asyncio.create_task(p.send_stream("c", _idle_source(release)))
        stream = await _recv_stream(c)
        stream.pipe.force_put(_segment(stream, p, c, 0, b"a"))
        stream.pipe.force_put(_segment(stream, p, c, 0, b"a"))
        assert bytes(await stream.__anext__()) == b"a"
        with pytest.raises(StreamError, match="duplicate"):
            await stream.__anext__()
        release.set()
        with pytest.raises(BrokenResourceError):  # the sender learns the stream failed
            await sender


async def test_missing_segment_beyond_window_raises_streamerror() -> None:
    async with aiopdbp.open_node(stream_window=4) as node:
        async with node.process("c") as c, node.process("p") as p:
            release = asyncio.Event()
            sender = asyncio.create_task(p.send_stream("c", _idle_source(release)))
            stream = await _recv_stream(c)
            for segno in range(1, 6):  # segment 0 never comes
                stream.pipe.force_put(_segment(stream, p, c, segno, b"x"))
            with pytest.raises(StreamError, match="missing"):
                await stream.read()
            release.set()
            with pytest.raises(BrokenResourceError):
                await sender
            _assert_stream_resources_free(node, 2)


async def test_end_with_wrong_byte_count_raises_streamerror(pdbp_node) -> None:
    async with pdbp_node.process("c") as c, pdbp_node.process("p") as p:
        release = asyncio.Event()
        sender = asyncio.create_task(p.send_stream("c", _idle_source(release)))
        stream = await _recv_stream(c)
        stream.pipe.force_put(_segment(stream, p, c, 0, b"abc"))
        stream.pipe.force_put(_end(stream, p, c, 1, 4))
        with pytest.raises(StreamError):
            await stream.read()
        release.set()
        with pytest.raises(BrokenResourceError):
            await sender


# ----------------------------------------------------------------- failures
async def test_sender_cancelled_midway_fails_receiver_and_loses_no_other_message(pdbp_node) -> None:
    node = pdbp_node
    async with node.process("c") as c, node.process("p") as p, node.process("other") as other:
        first_sent = asyncio.Event()
        never = asyncio.Event()

        async def chunks() -> AsyncIterator[bytes]:
            yield DATA[:100]
            first_sent.set()
            await never.wait()
            yield DATA[100:]  # pragma: no cover - never reached

        sender = asyncio.create_task(p.send_stream("c", chunks(), segment_size=50))
        stream = await _recv_stream(c)
        await first_sent.wait()
        await other.send("c", b"during")
        assert bytes(await stream.__anext__()) == DATA[:50]

        sender.cancel()
        with pytest.raises(asyncio.CancelledError):
            await sender
        await other.send("c", b"after")

        with pytest.raises(StreamError):
            await stream.read()
        assert [(await c.recv()).data, (await c.recv()).data] == [b"during", b"after"]
        _assert_stream_resources_free(node, 3)


async def test_sender_generator_error_raises_streamerror_at_receiver(pdbp_node) -> None:
    async with pdbp_node.process("c") as c, pdbp_node.process("p") as p:
        async def chunks() -> AsyncIterator[bytes]:
            yield b"partial"
            raise ValueError("source broke")

        sender = asyncio.create_task(p.send_stream("c", chunks()))
        stream = await _recv_stream(c)
        with pytest.raises(StreamError, match="source broke"):
            await stream.read()
        with pytest.raises(ValueError, match="source broke"):
            await sender
        _assert_stream_resources_free(pdbp_node, 2)


async def test_receiver_aclose_midway_makes_send_stream_raise_brokenresourceerror(pdbp_node) -> None:
    async with pdbp_node.process("c") as c, pdbp_node.process("p") as p:
        sender = asyncio.create_task(p.send_stream("c", DATA, segment_size=100))
        stream = await _recv_stream(c)
        assert bytes(await stream.__anext__()) == DATA[:100]
        await stream.aclose()
        await stream.aclose()  # idempotent
        with pytest.raises(BrokenResourceError):
            await sender
        with pytest.raises(StreamError):
            await stream.read()
        _assert_stream_resources_free(pdbp_node, 2)


async def test_receiver_releasing_pipe_breaks_stream_in_flight(pdbp_node) -> None:
    async with pdbp_node.process("c") as c, pdbp_node.process("p") as p:
        sender = asyncio.create_task(p.send_stream("c", DATA, segment_size=100))
        stream = await _recv_stream(c)
        await c.release_pipe()
        with pytest.raises(BrokenResourceError):
            await sender
        with pytest.raises(BrokenResourceError):  # not StreamError: see the report
            await stream.read()
        _assert_stream_resources_free(pdbp_node, 1)


async def test_blocked_reader_when_receiver_releases_pipe_gets_brokenresourceerror(pdbp_node, pdbp_spawn) -> None:
    async with pdbp_node.process("c") as c, pdbp_node.process("p") as p:
        more = asyncio.Event()

        async def chunks() -> AsyncIterator[bytes]:
            yield b"first"
            await more.wait()
            yield b"second"

        sender = asyncio.create_task(p.send_stream("c", chunks()))
        stream = await _recv_stream(c)
        reader = await pdbp_spawn(stream.read())
        assert not reader.done()
        await c.release_pipe()
        try:
            with pytest.raises(BrokenResourceError):
                await reader
        finally:
            more.set()
            with pytest.raises(BrokenResourceError):
                await sender


async def test_send_stream_timeout_raises_timeouterror_and_aborts(pdbp_node) -> None:
    async with pdbp_node.process("c") as c, pdbp_node.process("p") as p:
        with pytest.raises(TimeoutError):
            await p.send_stream("c", DATA, segment_size=100, timeout=0.01)  # nobody reads
        stream = await _recv_stream(c)
        with pytest.raises(StreamError):
            await stream.read()
        _assert_stream_resources_free(pdbp_node, 2)


async def _outcome(task: asyncio.Task, guard: float) -> BaseException | object:
    """The task's exception/result, or the task itself if it is still running after
    ``guard`` seconds (a bounded wait used only to turn a hang into a failure)."""
    done, _ = await asyncio.wait({task}, timeout=guard)
    if not done:
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)
        return task
    return task.exception() or task.result()


@pytest.mark.parametrize("blocked_on", ["receiver_pipe_full", "pipe_pool_exhausted"])
async def test_send_stream_timeout_bounds_opening_the_stream(blocked_on: str) -> None:
    options = {"pipe_capacity": 1} if blocked_on == "receiver_pipe_full" else {"max_pipes": 2}
    async with aiopdbp.open_node(**options) as node:
        async with node.process("c"), node.process("p") as p:
            if blocked_on == "receiver_pipe_full":
                await p.send("c", b"fill")
            # segments: a stream that binds a pipe (one carried whole needs none)
            sender = asyncio.create_task(p.send_stream("c", b"data", segment_size=2, timeout=0.02))
            outcome = await _outcome(sender, guard=0.3)
            assert isinstance(outcome, TimeoutError)


async def test_cancel_while_opening_stream_leaves_no_binding(pdbp_spawn) -> None:
    async with aiopdbp.open_node(pipe_capacity=1) as node:
        async with node.process("c") as c, node.process("p") as p:
            await p.send("c", b"fill")  # the OPEN cannot get a slot
            opening = await pdbp_spawn(p.send_stream("c", DATA))
            assert not opening.done()
            opening.cancel()
            with pytest.raises(asyncio.CancelledError):
                await opening
            _assert_stream_resources_free(node, 2)
            assert (await c.recv()).data == b"fill"
            with pytest.raises(aiopdbp.WouldBlock):
                c.recv_nowait()


async def test_messages_arrive_while_a_stream_is_unread(pdbp_node) -> None:
    async with pdbp_node.process("c") as c, pdbp_node.process("p") as p, \
            pdbp_node.process("other") as other:
        sender = asyncio.create_task(p.send_stream("c", DATA, segment_size=100))  # > window
        stream = await _recv_stream(c)
        for i in range(5):
            await other.send("c", bytes([i]))
        assert [(await c.recv()).data for _ in range(5)] == [bytes([i]) for i in range(5)]
        assert not sender.done()
        assert bytes(await stream.read()) == DATA
        await sender


async def test_stream_to_self_round_trips(pdbp_node) -> None:
    async with pdbp_node.process("me") as me:
        sender = asyncio.create_task(me.send_stream("me", DATA, segment_size=500))
        stream = await _recv_stream(me)
        assert stream.source == "me"
        assert bytes(await stream.read()) == DATA
        await sender


# ------------------------------------------- opened by the two hosts alone
from tests.mpirun import SCRIPTS_DIR, check_mpi, requires_mpi, run_mpi


@requires_mpi
@pytest.mark.mpi
@pytest.mark.timeout(120)
def test_streams_between_ranks_1_and_2_send_nothing_to_rank_0() -> None:
    import json

    out = check_mpi(run_mpi(SCRIPTS_DIR / "stream_hosts.py", n=4, timeout=100))
    row = json.loads(next(line for line in out.splitlines() if line.startswith("RESULT "))[7:])
    assert row["done"] == "ok", out
    # rank 0 heard nothing from rank 1, and from rank 2 only its "done";
    # it sent each of them only its "go": no stream control, and no table
    # update but the one that opens every link (a host's first send to
    # another names its own GPs: aiopdbp.hosts.names, NameService.announce)
    assert row["received"] == {"1": {}, "2": {"TableMsg": 1, "data": 1}}, out
    assert row["sent"] == {"1": {"TableMsg": 1, "data": 1}, "2": {"TableMsg": 1, "data": 1}}, out


@requires_mpi
@pytest.mark.mpi
@pytest.mark.timeout(120)
def test_stream_of_small_segments_to_another_host_needs_no_credit_message_per_window() -> None:
    # 2,000 segments of 64 B: a window of 16 segments would take a credit
    # message back every 8 of them (250); a window sized in bytes takes none.
    import json

    out = check_mpi(run_mpi(SCRIPTS_DIR / "stream_small_segments.py", n=2, timeout=100))
    row = json.loads(next(line for line in out.splitlines() if line.startswith("RESULT "))[7:])
    assert row == {"ok": True, "credit_msgs": 0}, out


async def test_carried_stream_is_done_once_routed_and_a_stray_done_changes_nothing() -> None:
    # A short remote stream rides whole in its OPEN and is done once that is
    # routed (no DONE comes back for it); a stray DONE after that (a peer of
    # an older version, a malformed one) must not break it.  (Before the
    # stream was done at routing, a DONE before the sender resumed broke it
    # with "SendSegment in state BROKEN", found by the seeded stress.)
    from typing import Any, cast

    from aiopdbp.routing.pipes import Pipe
    from aiopdbp.streams.table import OutgoingStream

    from aiopdbp import StreamState

    out = OutgoingStream((1, 7), 5, Pipe(4), cast(Any, None), None, 1, window=16)
    out.carried = 910
    out.opened()
    out.delivered()
    await asyncio.wait_for(out.done, 5)
    assert out.state is StreamState.DONE and out.broken is None


class _DroppingLink:
    """A remote host's link that has failed: it drops what is routed to it."""

    remote = True

    def put_to(self, pid: int, item: Any) -> bool:
        return False


async def test_carried_stream_routed_to_a_failed_link_breaks_its_sender() -> None:
    # A short stream is done once its OPEN is routed; an OPEN the link drops
    # (its host failed while the OPEN queued in the PipeManager) was not
    # sent, and its sender must not return as if it had been.
    from typing import cast

    from aiopdbp.streams.outgoing import OpenRoute, OutgoingStream

    from aiopdbp import StreamState

    link = _DroppingLink()
    out = OutgoingStream((1, 7), 5, None, cast(Any, link), None, 1, window=16)
    out.carried = 910
    assert OpenRoute(cast(Any, link), out).put_to(5, object()) is False
    with pytest.raises(BrokenResourceError, match="host 1 is gone"):
        await asyncio.wait_for(out.done, 5)
    assert out.state is StreamState.BROKEN


class _CountingLink:
    """A remote host's link that records what is routed to it and the credit given back."""

    remote = True
    host = 1

    def __init__(self, put: bool) -> None:
        self.put, self.items, self.unreserved = put, [], 0

    def put_to(self, pid: int, item: Any) -> bool:
        self.items.append(item)
        return self.put

    def unreserve(self, pid: int = 0, nbytes: int = 0) -> None:
        self.unreserved += nbytes


def test_segment_is_routed_at_once_when_nothing_is_queued_else_behind_in_its_pipe() -> None:
    # A stream's segment skips its PipeA when no public pipe holds an entry
    # (what the PipeManager would do next); else it queues, in order.
    from aiopdbp.routing.manager import PipeManager
    from aiopdbp.routing.pipes import Pipe

    pm, link = PipeManager(), _CountingLink(True)
    pipe_a: Pipe[Any] = Pipe(16)
    pm.watch(pipe_a)
    pm.put(pipe_a, link, 0, "seg0")
    assert link.items == ["seg0"] and not len(pipe_a)
    pm.public.force_put((link, 0, "msg"))   # queued: the manager has not run yet
    pm.put(pipe_a, link, 0, "seg1")
    assert link.items == ["seg0"] and pipe_a.drain_nowait() == [(link, 0, "seg1")]


async def test_short_stream_routed_to_a_failed_link_without_a_handle_breaks_its_sender() -> None:
    # The short stream that waited for credit has no OutgoingStream: its
    # route tells the sender that the link dropped the record.
    from typing import cast

    from aiopdbp.streams.outgoing import WholeRoute

    link = _CountingLink(False)
    route = WholeRoute(cast(Any, link), 910)
    waiting = asyncio.create_task(route.wait())
    await asyncio.sleep(0)   # it queued: the sender waits for the routing
    assert route.put_to(5, "record") is False
    with pytest.raises(BrokenResourceError, match="host 1 is gone"):
        await asyncio.wait_for(waiting, 5)


async def test_short_stream_cancelled_while_its_record_queues_without_a_handle_is_not_sent() -> None:
    from typing import cast

    from aiopdbp.streams.outgoing import WholeRoute

    link = _CountingLink(True)
    route = WholeRoute(cast(Any, link), 910)
    waiting = asyncio.create_task(route.wait())
    await asyncio.sleep(0)
    waiting.cancel()         # before the PipeManager reaches the record
    assert route.put_to(5, "record") is True
    assert (link.items, link.unreserved) == ([], 910)
    with pytest.raises(asyncio.CancelledError):
        await waiting


class _LandingOwner:
    """The stream table's part an IncomingStream talks to, for one stream."""

    def incoming_closed(self, stream: Any, error: str | None, notify: bool) -> None:
        pass

    def give_credit(self, stream: Any, segments: int) -> None:
        pass

    def landing_array(self, nbytes: int) -> Any:
        return np.empty(nbytes, dtype=np.uint8)


async def test_read_returns_segments_landed_in_place_without_a_copy() -> None:
    from aiopdbp.routing.pipes import Pipe
    from aiopdbp.streams.receiver import IncomingStream, StreamMeta
    from aiopdbp.wire.mesp import CDU, Kind, StreamOp

    pipe: Pipe[Any] = Pipe(16)
    stream = IncomingStream(_LandingOwner(), (1, 1), "src", pipe, 8, meta=StreamMeta(nbytes=300))
    parts = [stream.landing(100), stream.landing(100), stream.landing(100)]
    assert stream.landing(1) is None  # past the announced size
    for i, part in enumerate(parts, 1):
        part[:] = i
        pipe.force_put(CDU(Kind.STREAM, 5, (0,), part, segno=i - 1, sno=1, source_n=1))
    pipe.force_put(CDU(Kind.STREAM, 5, (0,), (300).to_bytes(8, "little"), segno=3, sno=1, source_n=1,
                       op=StreamOp.END))
    got = await stream.read()
    assert bytes(got) == bytes([1] * 100 + [2] * 100 + [3] * 100)
    assert np.shares_memory(np.frombuffer(got, np.uint8), parts[0])  # the landed array itself


async def test_read_begun_before_the_first_segment_returns_the_landed_array(pdbp_spawn) -> None:
    # The usual order: the reader takes the stream at its OPEN and waits in
    # read(); only then does the first segment's header arrive and take the
    # landing array.  read() must return that array, not gather a copy.
    from aiopdbp.routing.pipes import Pipe
    from aiopdbp.streams.receiver import IncomingStream, StreamMeta
    from aiopdbp.wire.mesp import CDU, Kind, StreamOp

    pipe: Pipe[Any] = Pipe(16)
    stream = IncomingStream(_LandingOwner(), (1, 1), "src", pipe, 8, meta=StreamMeta(nbytes=200))
    reading = await pdbp_spawn(stream.read())
    assert not reading.done()
    parts = [stream.landing(100), stream.landing(100)]
    for i, part in enumerate(parts, 1):
        part[:] = i
        pipe.force_put(CDU(Kind.STREAM, 5, (0,), part, segno=i - 1, sno=1, source_n=1))
    pipe.force_put(CDU(Kind.STREAM, 5, (0,), (200).to_bytes(8, "little"), segno=2, sno=1, source_n=1,
                       op=StreamOp.END))
    got = await reading
    assert bytes(got) == bytes([1] * 100 + [2] * 100)
    assert np.shares_memory(np.frombuffer(got, np.uint8), parts[0])  # the landed array itself


async def test_read_gathers_right_when_a_segment_did_not_land_in_place() -> None:
    # Segment 2 came another way, so segment 3 landed where segment 2 belongs:
    # copying segment 2 into the landed array would overwrite segment 3.
    from aiopdbp.routing.pipes import Pipe
    from aiopdbp.streams.receiver import IncomingStream, StreamMeta
    from aiopdbp.wire.mesp import CDU, Kind, StreamOp

    pipe: Pipe[Any] = Pipe(16)
    stream = IncomingStream(_LandingOwner(), (1, 1), "src", pipe, 8, meta=StreamMeta(nbytes=300))
    first, third = stream.landing(100), stream.landing(100)
    first[:] = 1
    third[:] = 3
    for i, data in enumerate([first, np.full(100, 2, np.uint8), third], 1):
        pipe.force_put(CDU(Kind.STREAM, 5, (0,), data, segno=i - 1, sno=1, source_n=1))
    pipe.force_put(CDU(Kind.STREAM, 5, (0,), (300).to_bytes(8, "little"), segno=3, sno=1, source_n=1,
                       op=StreamOp.END))
    got = await stream.read()
    assert bytes(got) == bytes([1] * 100 + [2] * 100 + [3] * 100)


def test_landing_arrays_of_a_host_stay_within_land_max() -> None:
    from aiopdbp.hosts.tables import Tables
    from aiopdbp.routing.pipes import PipePool
    from aiopdbp.routing.arrivals import Arrivals
    from aiopdbp.routing.router import Router
    from aiopdbp.streams.receiver import LAND_MAX, IncomingStream, StreamMeta
    from aiopdbp.streams.table import StreamTable

    tables = Tables()
    pps = PipePool(4, 4)
    router = Router(tables, pps, 0, name_timeout=1.0, submit=lambda *a: None, offer=lambda *a: False)
    table = StreamTable(0, 8, tables, pps, PipePool(1 << 30, 4, first_id=1 << 20), router,
                        Arrivals(tables, router.targets, 0), submit=lambda *a: None, watch=lambda p: None)
    big = LAND_MAX // 2 + 1
    first = IncomingStream(table, (1, 1), "a", pps.apply_nowait(), 8, meta=StreamMeta(nbytes=big))
    second = IncomingStream(table, (1, 2), "b", pps.apply_nowait(), 8, meta=StreamMeta(nbytes=big))
    assert first.landing(1 << 20) is not None
    assert second.landing(1 << 20) is None        # both would exceed LAND_MAX
    assert second.landing(1 << 20) is None        # and it stays pooled for the rest of its segments
    table.incoming_closed(first, None, False)     # the first one's bytes are the reader's now
    third = IncomingStream(table, (1, 3), "c", pps.apply_nowait(), 8, meta=StreamMeta(nbytes=big))
    assert third.landing(1 << 20) is not None


async def test_stream_arrived_whole_in_a_short_record_is_read_without_another_copy(pdbp_node) -> None:
    # what the router hands the table for a short stream record: the decode's own copy
    arr = np.arange(12, dtype=">i4").reshape(3, 4)
    st = pdbp_node.streams.open_whole(1, 99, 5, "src", 3, 7, 16, arr)
    assert st is not None and st.com == 3 and st.finished
    got = await st.read()
    assert got is arr and got.dtype == arr.dtype and got.shape == arr.shape
    st = pdbp_node.streams.open_whole(1, 99, 5, "src", 0, 8, 16, bytearray(b"seg"))
    assert st is not None
    mv = await st.read()
    assert bytes(mv) == b"seg" and not mv.readonly


async def test_stream_arrived_whole_binds_nothing(pdbp_node) -> None:
    # complete on arrival, its sender done once it sent it: like a message,
    # it is the reader's (scenario short_streams_carried_whole: no DONE goes back)
    st = pdbp_node.streams.open_whole(1, 99, 5, "src", 0, 7, 16, bytearray(b"seg"))
    assert st is not None and st.finished
    assert pdbp_node.stats().streams_in == 0
    pdbp_node.streams.undelivered([object(), st])  # its GP was gone: the router could not put it anywhere
    assert pdbp_node.stats().streams_in == 0


async def test_stream_arrived_whole_without_a_window_is_dropped_and_counted(pdbp_node) -> None:
    before = pdbp_node.stats().dropped
    assert pdbp_node.streams.open_whole(1, 99, 5, "src", 0, 9, 0, bytearray(b"no window")) is None
    assert pdbp_node.stats().streams_in == 0 and pdbp_node.stats().dropped == before + 1


@pytest.mark.parametrize("dest", [("c",), ["c"], b"c", 3])
async def test_send_stream_to_anything_but_one_name_raises_typeerror(pdbp_node, dest: Any) -> None:
    # a tuple waited for a GP literally named "('c',)", a list failed as unhashable
    async with pdbp_node.process("p") as p:
        with pytest.raises(TypeError, match="one GP"):
            await p.send_stream(dest, b"x")


@pytest.mark.parametrize("size", [1.5, "10", True])
async def test_send_stream_segment_size_not_an_int_raises_typeerror(pdbp_node, size: Any) -> None:
    async with pdbp_node.process("c"), pdbp_node.process("p") as p:
        with pytest.raises(TypeError, match="segment_size"):
            await p.send_stream("c", b"x" * 10, segment_size=size)


async def test_stream_of_a_sender_that_timed_out_says_so(pdbp_node) -> None:
    async with pdbp_node.process("c") as c, pdbp_node.process("p") as p:
        with pytest.raises(TimeoutError):
            await p.send_stream("c", DATA, segment_size=100, timeout=0.01)  # nobody reads
        stream = await _recv_stream(c)
        with pytest.raises(StreamError, match="aborted by its sender: sender timed out$"):
            await stream.read()


@pytest.mark.parametrize("source", [
    np.arange(4096, dtype=np.uint8), np.arange(24, dtype=">i4").reshape(4, 6), np.arange(48, dtype=np.int16)[::2],
    np.array(5), np.empty(0, np.uint8), np.zeros((64 << 10) + 1, np.uint8), np.array([b"x"], dtype=object),
    b"abc", bytearray(b"abcd"), memoryview(b"abcdef").cast("b"), memoryview(bytes(range(12))).cast("B", (3, 4)),
    b"", bytes(64 << 10)])
def test_short_segment_is_what_the_host_source_carries_whole(source: Any) -> None:
    # The send fast path takes its one segment without a HostSource: it
    # must be the segment the general path would carry, or None (then the
    # general path runs, with its checks and errors).
    from aiopdbp.streams.sender import HostSource, short_segment

    fast = short_segment(source, 1 << 20)
    try:
        slow = HostSource(source, 1 << 20).single()
    except TypeError:   # refused there (an object dtype): the fast path must not take it
        assert fast is None
        return
    if fast is None:
        assert slow is None
        return
    assert slow is not None and type(fast) is type(slow) and bytes(fast) == bytes(slow)
    if isinstance(fast, np.ndarray):
        assert (fast.dtype, fast.shape, fast.flags.c_contiguous) == (slow.dtype, slow.shape, True)
    else:
        assert (fast.format, fast.ndim) == ("B", 1)
