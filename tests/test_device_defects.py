"""What goes wrong on a real GPU, caught on the simulated device -- and the
same tests on CuPy when a GPU is present.

Each test is one way CUDA's rules bite an asynchronous library: the current
stream is per thread and scoped by ``with``; the legacy null stream orders
against blocking streams only; CuPy's memory pool hands a freed block to the
next allocation on the same stream; a copy to pageable memory is
synchronous.  The simulated backend models all four (see
:mod:`aiopdbp.device.sim`), so these fail on code that ignores them.  The
``cupy`` leg skips cleanly without CuPy or a device; there every test also
has a hard thread-method timeout, since a CUDA call blocked behind a held
kernel cannot be interrupted by a signal.
"""

from __future__ import annotations

import asyncio
import gc
import time
from collections.abc import AsyncIterator, Callable, Iterator
from typing import Any

import numpy as np
import pytest

import aiopdbp
from aiopdbp import Message, PType
from aiopdbp.device import SimBackend, Stager, TransferState
from aiopdbp.device.chunks import Piece

from tests.device_harness import CHUNK, CupyDev, Dev, SimDev, cupy_available

N = 3 * CHUNK // 4  # float32 elements: three chunks
pytestmark = pytest.mark.timeout(60, method="thread")


@pytest.fixture(params=["sim", pytest.param("cupy", marks=pytest.mark.gpu)])
def dev(request: pytest.FixtureRequest) -> Iterator[Dev]:
    if request.param == "cupy":
        if not cupy_available():
            pytest.skip("needs CuPy and a CUDA device")
        d: Dev = CupyDev()
    else:
        d = SimDev()
    yield d
    d.close()


async def linger(seconds: float = 0.1) -> None:
    """Let the loop and the device run: what must not happen gets every chance."""
    loop = asyncio.get_running_loop()
    end = loop.time() + seconds
    while loop.time() < end:
        await asyncio.sleep(0.001)


@pytest.fixture(params=[1, 2], ids=["local", "staged"])
async def pair(request: pytest.FixtureRequest, dev: Dev) -> AsyncIterator[tuple[aiopdbp.GP, aiopdbp.GP]]:
    """An NGP ``a`` and an SGP ``b`` on the same host (1) or on two hosts (2)."""
    async with aiopdbp.open_cluster(request.param, device=dev.config()) as nodes:
        async with nodes[0].process("a") as a, nodes[-1].process("b", PType.GPU) as b:
            yield a, b


class _Done:
    def done(self) -> bool:
        return True

    def cancel(self) -> None:
        pass


def _post(piece: Piece, buf: memoryview) -> _Done:
    return _Done()


def drive(stager: Stager, until: Callable[[], bool], timeout: float = 10.0) -> bool:
    """Poll until ``until()``; False after ``timeout`` s."""
    deadline = time.monotonic() + timeout
    while not until():
        stager.poll()
        if time.monotonic() > deadline:
            return False
        time.sleep(0.0002)
    return True


# ------------------------------------------------- 1. stream captured late
async def test_send_is_ordered_after_the_stream_current_at_the_call(dev: Dev, pair: Any) -> None:
    a, b = pair
    s = dev.stream()
    with s:
        x = dev.zeros(N)
        hold = dev.hold(s)
        dev.fill(x, 7.0)  # queued on s behind the hold
        call = a.send("b", x)  # the call is inside the block; its await is not
    task = asyncio.ensure_future(call)
    await linger()
    hold.release()
    await task
    m = await b.recv(timeout=30)
    assert isinstance(m, Message) and np.all(dev.get(m.data) == 7.0)


async def test_explicit_stream_orders_the_send(dev: Dev, pair: Any) -> None:
    a, b = pair
    s = dev.stream()
    with s:
        x = dev.zeros(N)
        hold = dev.hold(s)
        dev.fill(x, 4.0)
    task = asyncio.ensure_future(a.send_stream("b", x, stream=s))  # outside the block: named
    await linger()
    hold.release()
    st = await b.recv(timeout=30)
    got = await st.read()
    await task
    assert np.all(dev.get(got) == 4.0)


# ----------------------------------- 2. a received block freed under a kernel
async def test_received_array_is_not_overwritten_while_the_consumer_reads_it(dev: Dev, pair: Any) -> None:
    a, b = pair
    x1 = dev.zeros(N)
    dev.fill(x1, 1.0)
    await a.send("b", x1)
    m1 = await b.recv(timeout=30)
    with dev.on_device(b.device), b.stream:  # the documented idiom: work on gp.stream
        hold = dev.hold(b.stream)
        seen = dev.snapshot(m1.data)  # a kernel still reading the received array...
    del m1  # ...when the user drops it
    gc.collect()
    x2 = dev.zeros(N)
    dev.fill(x2, 2.0)
    task = asyncio.ensure_future(a.send("b", x2))
    await linger()
    hold.release()
    await task
    m2 = await b.recv(timeout=30)
    dev.synchronize(b.stream)
    assert np.all(dev.get(seen) == 1.0) and np.all(dev.get(m2.data) == 2.0)
    assert dev.violations() == []


# -------------------------------- 3. arrays dropped while copies are in flight
async def test_timed_out_send_keeps_its_arrays_until_the_copy_completed(dev: Dev) -> None:
    async with aiopdbp.open_node(device=dev.config()) as node:
        async with node.process("a") as a, node.process("b", PType.GPU) as b:
            s = dev.stream()
            with s:
                x = dev.zeros(N)
                hold = dev.hold(s)
                dev.fill(x, 9.0)
                call = a.send("b", x, timeout=0.1)
            with pytest.raises(TimeoutError):
                await call
            del x, call
            gc.collect()
            y0 = dev.zeros(N)  # may get a block the copy still writes, were it freed
            with dev.on_device(b.device), b.stream:
                y1 = dev.zeros(N)
            hold.release()
            await linger(0.3)
            dev.synchronize(s)
            assert not np.any(dev.get(y0)) and not np.any(dev.get(y1))
            assert dev.violations() == []


def test_abandoned_transfer_keeps_its_source_until_the_copies_completed(dev: Dev) -> None:
    stager = Stager(dev.backend, pool_bytes=4 * CHUNK, chunk_size=CHUNK)
    try:
        s = dev.stream()
        with s:
            x = dev.zeros(N)
            hold = dev.hold(s)
            t = stager.send(x, _post)  # its copies wait behind the hold
        t.abandon()
        del x
        gc.collect()
        assert dev.violations() == []
        hold.release()
        assert drive(stager, lambda: not stager.pending)
    finally:
        stager.close()


# ------------------------------------------- 4. one copy stream for everyone
def test_a_held_producer_does_not_stall_another_transfer(dev: Dev) -> None:
    stager = Stager(dev.backend, pool_bytes=8 * CHUNK, chunk_size=CHUNK)
    try:
        s = dev.stream()
        with s:
            x1 = dev.zeros(N)
            hold = dev.hold(s)
            t1 = stager.send(x1, _post)
        t2 = stager.send(dev.zeros(N), _post)
        assert drive(stager, lambda: t2.settled), "the second transfer waited on the first's producer"
        assert t2.state is TransferState.DONE and not t1.settled
        hold.release()
        assert drive(stager, lambda: t1.settled) and t1.state is TransferState.DONE
    finally:
        stager.close()


async def test_receive_does_not_wait_for_a_held_blocking_stream(dev: Dev, pair: Any) -> None:
    a, b = pair
    blocking = dev.stream(non_blocking=False)
    hold = dev.hold(blocking)  # unrelated work of the user, on a blocking stream
    try:
        s = dev.stream()
        with s:
            x = dev.zeros(N)
            dev.fill(x, 3.0)
        await asyncio.wait_for(a.send("b", x, stream=s), 20)
        m = await b.recv(timeout=20)
        dev.synchronize(b.stream)
        assert np.all(dev.get(m.data) == 3.0)
    finally:
        hold.release()


# ---------------------------------------------- 5. the current device changed
async def test_opening_the_device_path_leaves_the_current_device(dev: Dev, monkeypatch: pytest.MonkeyPatch) -> None:
    if dev.device_count() < 2:
        pytest.skip("needs two devices")
    monkeypatch.setenv("MPI_LOCALRANKID", "1")  # the rank's device is 1
    before = dev.backend.get_device()
    async with aiopdbp.open_node(device=dev.config()) as node, node.process("g", PType.GPU) as g:
        assert g.device == 1 and dev.backend.get_device() == before


# ------------------------------------------------------ 6. blocking, leaking
def test_from_host_refuses_pageable_memory(dev: Dev) -> None:
    s = dev.backend.create_stream(0)
    with pytest.raises(ValueError, match="pinned"):
        dev.backend.from_host(np.zeros(64, np.uint8), np.float32, (16,), "C", 0, s)


def test_a_copy_error_that_is_no_device_error_frees_its_chunk(dev: Dev, monkeypatch: pytest.MonkeyPatch) -> None:
    stager = Stager(dev.backend, pool_bytes=4 * CHUNK, chunk_size=CHUNK)
    try:
        def broken(*args: Any) -> None:
            raise RuntimeError("a bug in the backend")

        monkeypatch.setattr(dev.backend, "copy_d2h", broken)
        t = stager.send(dev.zeros(N), _post)
        assert isinstance(t.error, RuntimeError)
        assert drive(stager, lambda: t.settled) and t.state is TransferState.FAILED
        assert stager.pool.free == stager.pool.nchunks
    finally:
        stager.close()


def test_sim_stream_of_another_device_cannot_be_entered() -> None:
    sim = SimBackend(devices=2)
    try:
        with pytest.raises(RuntimeError, match="current device"):
            with sim.create_stream(1):
                pass
    finally:
        sim.close()


def test_sim_null_stream_orders_against_blocking_streams_only() -> None:
    sim = SimBackend()
    try:
        blocking, free = sim.create_stream(0, non_blocking=False), sim.create_stream(0)
        hold = sim.hold(blocking)
        sim.record_event(free).synchronize()  # a non-blocking stream is not held up
        ev = sim.record_event(sim.null_stream(0))
        time.sleep(0.05)
        assert not ev.done()  # the null stream waits for the held blocking stream
        hold.release()
        ev.synchronize()
    finally:
        sim.close()


def test_sim_allocator_hands_a_freed_block_to_the_next_allocation_on_its_stream() -> None:
    sim = SimBackend()
    try:
        s = sim.create_stream(0)
        a = sim.empty((256,), np.float32, "C", 0, s)
        del a
        sim.empty((256,), np.float32, "C", 0)  # another stream: a fresh block
        assert sim.memory.reuses == 0
        sim.empty((256,), np.float32, "C", 0, s)
        assert sim.memory.reuses == 1
    finally:
        sim.close()


def test_sim_copy_to_pageable_memory_is_synchronous() -> None:
    sim = SimBackend(copy_delay=0.05)
    try:
        s = sim.create_stream(0)
        x = sim.asarray(np.arange(16, dtype=np.uint8))
        host = np.zeros(16, np.uint8)  # pageable
        sim.copy_d2h(x, 0, host, s)
        assert host.tolist() == list(range(16))  # done when the call returns
    finally:
        sim.close()


# ------------------------------------------------------------ every dtype
def _dtypes() -> list[Any]:
    names = ["bool", "int8", "uint8", "int16", "uint16", "int32", "uint32", "int64", "uint64",
             "float16", "float32", "float64", "complex64", "complex128", ">i4", ">f8"]
    out: list[Any] = [pytest.param(np.dtype(n), id=n) for n in names]
    try:
        import ml_dtypes
    except ImportError:
        out.append(pytest.param(None, id="bfloat16", marks=pytest.mark.skip(reason="needs ml_dtypes")))
    else:
        out.append(pytest.param(np.dtype(ml_dtypes.bfloat16), id="bfloat16"))
    return out


@pytest.mark.parametrize("dtype", _dtypes())
@pytest.mark.parametrize("how", ["send", "send_stream"])
async def test_device_arrays_of_every_dtype_arrive_as_themselves(dev: Dev, pair: Any, dtype: Any, how: str) -> None:
    if not isinstance(dev, SimDev):
        pytest.skip("the simulated device's target (issue 32)")
    a, b = pair
    host = (np.arange(24) % 7).astype(dtype).reshape(4, 6)
    x = dev.backend.asarray(host)
    if how == "send":
        await a.send("b", x)
        m = await b.recv(timeout=20)
        got = m.data
    else:
        task = asyncio.ensure_future(a.send_stream("b", x))
        got = await (await b.recv(timeout=20)).read()
        await task
    arr = got.get()
    assert arr.dtype == host.dtype and arr.shape == host.shape and np.array_equal(arr, host)
