"""Device-path scenarios: SGPs and device arrays over every transport.

Built on ``tests/scenarios.py`` (same :class:`~scenarios.Ctx`, same runners'
conventions) with a registry of its own, :data:`SCENARIOS`:
``tests/test_devicepath.py`` runs each over 1 and 2 in-process hosts and, under
``mpiexec``, over 2 ranks (``run_scenarios.py --registry tests.devicepath_scenarios``).
GP 0 lives on rank 0, GP 1 on ``ctx.owner(1)``: with one host every transfer
is local (device-to-device), with two it is staged through pinned chunks.

Backend: the simulated one (every node its own ``SimBackend``, copies on
worker threads), or CuPy with ``AIOPDBP_TEST_DEVICE=cupy`` (scenarios that
inject faults or gate copies are simulator-only: ``SIM_ONLY``).
"""

from __future__ import annotations

import asyncio
import os
from collections.abc import Awaitable, Callable
from typing import Any

import numpy as np

import aiopdbp
from aiopdbp import BrokenResourceError, DeviceError, IncomingStream, Message, PType, StreamError
from aiopdbp.device import Fault, SimArray, SimTensor, is_device_array
from aiopdbp.streams.devicebind import DeviceConfig

from tests import scenarios as _sc

Ctx = _sc.Ctx
Scenario = _sc.Scenario

#: "sim" (default) or "cupy" (GPU machines)
BACKEND = os.environ.get("AIOPDBP_TEST_DEVICE", "sim").strip().lower() or "sim"
CHUNK = 256 << 10

SCENARIOS: dict[str, Scenario] = {}
#: scenarios that need more than one host
REMOTE_ONLY: set[str] = set()
#: scenarios that inject faults or hold copies (the simulator's controls)
SIM_ONLY: set[str] = set()


def device_options(**sim: Any) -> dict[str, Any]:
    """Node options: a small pinned pool of 256 KiB chunks (several chunks per test array)."""
    return {"device": DeviceConfig(backend=BACKEND, pool_bytes=4 << 20, chunk_size=CHUNK, max_in_flight=4,
                                   sim={"copy_delay": 0.0002, **sim} if BACKEND == "sim" else {})}


def scenario(*, timeout: float = 30.0, remote_only: bool = False, sim_only: bool = False,
             requires: tuple[str, ...] = (), **sim: Any) -> Callable[[Callable[[Ctx], Awaitable[None]]], Scenario]:
    def deco(fn: Callable[[Ctx], Awaitable[None]]) -> Scenario:
        sc = Scenario(fn.__name__, fn, device_options(**sim), timeout * _sc.TIMEOUT_SCALE, (fn.__doc__ or "").strip(),
                      requires)
        SCENARIOS[sc.name] = sc
        if remote_only:
            REMOTE_ONLY.add(sc.name)
        if sim_only:
            SIM_ONLY.add(sc.name)
        return sc
    return deco


async def run_inproc(name: str | Scenario, n: int) -> None:
    """Run device scenario ``name`` on ``n`` in-process hosts (scenarios.run_inproc)."""
    await _sc.run_inproc(SCENARIOS[name] if isinstance(name, str) else name, n)


# ------------------------------------------------------------------ helpers
def to_dev(node: aiopdbp.Node, host: np.ndarray[Any, Any], device: int = 0) -> Any:
    """A device copy of ``host`` made by ``node``'s backend (order kept; a
    non-contiguous 2-D host array gives a strided view of a device array)."""
    if host.ndim == 2 and not (host.flags.c_contiguous or host.flags.f_contiguous):
        full = np.zeros((host.shape[0] * 2, host.shape[1] * 3), host.dtype)
        full[::2, ::3] = host
        return to_dev(node, full, device)[::2, ::3]
    backend = node.devices.open().backend
    if backend.name == "sim":
        return backend.asarray(host, device)  # type: ignore[attr-defined]
    import cupy

    with cupy.cuda.Device(device):
        return cupy.array(host, order="K")  # C or F as the host array


def to_host(arr: Any) -> np.ndarray[Any, Any]:
    return arr if isinstance(arr, np.ndarray) else arr.get()


def _is_f(a: np.ndarray[Any, Any]) -> bool:
    return bool(a.flags.f_contiguous and not a.flags.c_contiguous)


def arrays() -> list[tuple[str, np.ndarray[Any, Any]]]:
    """Test arrays: dtypes, ranks, C/F order, several chunks, empty, 0-d, a strided view."""
    rng = np.random.default_rng(9)
    return [
        ("f32-C-2d", rng.random((64, 33), dtype=np.float32)),
        ("i16-F-3d", np.asfortranarray(rng.integers(-999, 999, (7, 9, 5), dtype=np.int16))),
        ("u8-1d-3chunks", rng.integers(0, 256, 600_000, dtype=np.uint8)),
        ("c128-0d", np.array(1 + 2j)),
        ("bool-2d", rng.random((10, 10)) > 0.5),
        ("f64-empty", np.empty((0, 5))),
        ("f32-F-4chunks", np.asfortranarray(rng.random((300, 700), dtype=np.float32))),
        ("f64-strided", rng.random((40, 30))[::2, ::3]),
    ]


def check(got: Any, want: np.ndarray[Any, Any], what: str, *, device: int | None) -> None:
    """``got`` equals ``want``: dtype, shape, memory order (a strided source
    arrives C-contiguous), placement (device ``device``, or numpy for None)."""
    if device is None:
        assert isinstance(got, np.ndarray), f"{what}: an NGP got {type(got).__name__}, not numpy"
    else:
        assert is_device_array(got), f"{what}: an SGP got {type(got).__name__}, not a device array"
        dev = getattr(got, "device", None)
        assert getattr(dev, "id", dev) == device, f"{what}: on device {dev}, not {device}"
    host = to_host(got)
    assert host.dtype == want.dtype and host.shape == want.shape, \
        f"{what}: {host.dtype}{host.shape} != {want.dtype}{want.shape}"
    if want.size > 1 and (want.flags.c_contiguous or want.flags.f_contiguous):
        flags = got.flags if hasattr(got, "flags") else host.flags  # CuPy's get() gives C order
        assert (flags.f_contiguous and not flags.c_contiguous) == _is_f(want), f"{what}: memory order changed"
    assert np.array_equal(host, want), f"{what}: content differs"


async def both(ctx: Ctx, sender: Callable[[], Awaitable[None]], receiver: Callable[[], Awaitable[None]]) -> None:
    """Run the sender (GP 0, rank 0) and the receiver (GP 1) where they live,
    concurrently when both live here."""
    async with asyncio.TaskGroup() as tg:
        if ctx.rank == 0:
            tg.create_task(sender())
        if ctx.rank == ctx.owner(1):
            tg.create_task(receiver())


def pools_full(node: aiopdbp.Node) -> bool:
    """Nothing staged is left: every pinned chunk is back in the pool (none
    lost), no transfer and no receive job (draining included) is alive."""
    d = node.stats().devices
    return d["jobs"] == 0 and ("chunks" not in d or (
        d["chunks_free"] == d["chunks"] and d["chunks_lost"] == 0 and d["transfers"] == 0))


async def settled(ctx: Ctx) -> None:
    """Every pinned chunk of this host is back in its pool (checked on every host)."""
    await ctx.wait_until(lambda: pools_full(ctx.node), "the pinned chunks back in the pool")
    await ctx.barrier("settled")


# ---------------------------------------------------------------- scenarios
@scenario()
async def device_roundtrip_dtype_shape_order(ctx: Ctx) -> None:
    """send and send_stream of device arrays deliver device arrays on the
    receiving SGP's device with the sender's dtype, shape, order and bytes."""
    cases = arrays()
    async def sender() -> None:
        src = await ctx.process("src", ptype=PType.GPU)
        await ctx.lookup(ctx.name("dst"))
        for i, (_, host) in enumerate(cases):
            await src.send(ctx.name("dst"), to_dev(ctx.node, host), com=i, timeout=ctx.timeout)
            n = await src.send_stream(ctx.name("dst"), to_dev(ctx.node, host), com=i, timeout=ctx.timeout)
            assert n == host.nbytes
    async def receiver() -> None:
        dst = await ctx.process("dst", ptype=PType.GPU)
        for i, (label, host) in enumerate(cases):
            m = await dst.recv(timeout=ctx.timeout)
            assert isinstance(m, Message) and m.com == i and m.source == ctx.name("src"), m
            check(m.data, host, f"message {label}", device=dst.device)
            s = await dst.recv(timeout=ctx.timeout)
            assert isinstance(s, IncomingStream) and s.com == i, s
            check(await s.read(), host, f"stream {label}", device=dst.device)
    await both(ctx, sender, receiver)
    await settled(ctx)


@scenario()
async def device_data_to_ngp_is_numpy(ctx: Ctx) -> None:
    """An NGP receives device data as numpy arrays (messages, read(), segments)."""
    host = np.asfortranarray(np.random.default_rng(1).random((200, 900)))  # 1.4 MB: 6 chunks
    async def sender() -> None:
        src = await ctx.process("src", ptype=PType.GPU)
        await ctx.lookup(ctx.name("dst"))
        await src.send(ctx.name("dst"), to_dev(ctx.node, host), timeout=ctx.timeout)
        await src.send_stream(ctx.name("dst"), to_dev(ctx.node, host), timeout=ctx.timeout)
        await src.send_stream(ctx.name("dst"), to_dev(ctx.node, host), timeout=ctx.timeout)
    async def receiver() -> None:
        dst = await ctx.process("dst")
        m = await dst.recv(timeout=ctx.timeout)
        assert isinstance(m, Message)
        check(m.data, host, "message", device=None)
        s = await dst.recv(timeout=ctx.timeout)
        assert isinstance(s, IncomingStream)
        check(await s.read(), host, "read()", device=None)
        s = await dst.recv(timeout=ctx.timeout)
        assert isinstance(s, IncomingStream)
        segs = [seg.copy() async for seg in s]  # each as it is when delivered
        assert len(segs) > 1 and all(isinstance(seg, np.ndarray) for seg in segs), [type(x) for x in segs]
        check(np.asfortranarray(np.concatenate(segs, axis=-1)), host, "segments", device=None)
    await both(ctx, sender, receiver)
    await settled(ctx)


@scenario()
async def host_data_to_sgp_is_numpy_unless_to_device(ctx: Ctx) -> None:
    """An SGP receives host arrays as numpy; opened with to_device=True, as
    device arrays on its device (messages, streams, and short streams: one
    record that arrived whole)."""
    host = np.random.default_rng(2).integers(0, 1 << 30, (300, 257), dtype=np.int32)
    short = host[:4]   # 4 KiB: carried whole by its OPEN
    async def sender() -> None:
        src = await ctx.process("src")
        for name in ("plain", "todev"):
            await ctx.lookup(ctx.name(name))
            await src.send(ctx.name(name), host, timeout=ctx.timeout)
            await src.send_stream(ctx.name(name), host, timeout=ctx.timeout)
            await src.send_stream(ctx.name(name), short, timeout=ctx.timeout)
    async def receiver() -> None:
        plain = await ctx.process("plain", ptype=PType.GPU)
        todev = await ctx.node.register(ctx.name("todev"), PType.GPU, bind=True, to_device=True)
        try:
            for gp, device in ((plain, None), (todev, todev.device)):
                m = await gp.recv(timeout=ctx.timeout)
                assert isinstance(m, Message)
                check(m.data, host, f"{gp.name} message", device=device)
                s = await gp.recv(timeout=ctx.timeout)
                assert isinstance(s, IncomingStream)
                check(await s.read(), host, f"{gp.name} stream", device=device)
                s = await gp.recv(timeout=ctx.timeout)
                assert isinstance(s, IncomingStream)
                check(await s.read(), short, f"{gp.name} short stream", device=device)
        finally:
            await todev.free()
    await both(ctx, sender, receiver)
    await settled(ctx)


@scenario()
async def device_stream_segments_are_chunks(ctx: Ctx) -> None:
    """A device stream's segments are its staging chunks (min(segment_size,
    chunk_size) bytes of whole rows), delivered in order as device views; the
    pinned pool was allocated once."""
    host = np.random.default_rng(3).random((512, 1024), dtype=np.float32)  # 2 MiB, 4 KiB rows
    async def sender() -> None:
        src = await ctx.process("src", ptype=PType.GPU)
        await ctx.lookup(ctx.name("dst"))
        await src.send_stream(ctx.name("dst"), to_dev(ctx.node, host), timeout=ctx.timeout)
        await src.send_stream(ctx.name("dst"), to_dev(ctx.node, host), segment_size=100_000, timeout=ctx.timeout)
    async def receiver() -> None:
        dst = await ctx.process("dst", ptype=PType.GPU)
        for rows in (CHUNK // 4096, 100_000 // 4096):  # 64 rows, then 24
            s = await dst.recv(timeout=ctx.timeout)
            assert isinstance(s, IncomingStream)
            segs = [seg async for seg in s]
            assert len(segs) == -(-512 // rows), (rows, len(segs))
            start = 0
            for seg in segs:
                assert is_device_array(seg)
                check(seg, host[start:start + seg.shape[0]], f"segment at row {start}", device=dst.device)
                assert seg.shape[0] == min(rows, 512 - start)
                start += seg.shape[0]
    await both(ctx, sender, receiver)
    await settled(ctx)
    backend = ctx.node.devices.backend
    if backend is not None and backend.name == "sim":
        assert backend.pinned_allocations == 1, backend.pinned_allocations  # type: ignore[attr-defined]


@scenario()
async def device_messages_keep_order_with_host_messages(ctx: Ctx) -> None:
    """Host and device messages of one sender arrive in the order sent."""
    host = np.arange(70_000, dtype=np.float64)  # 560 KB: 3 chunks
    async def sender() -> None:
        src = await ctx.process("src", ptype=PType.GPU)
        await ctx.lookup(ctx.name("dst"))
        for i in range(6):
            data = to_dev(ctx.node, host + i) if i % 2 else f"host {i}".encode()
            await src.send(ctx.name("dst"), data, com=i, timeout=ctx.timeout)
    async def receiver() -> None:
        dst = await ctx.process("dst", ptype=PType.GPU)
        for i in range(6):
            m = await dst.recv(timeout=ctx.timeout)
            assert isinstance(m, Message) and m.com == i, (i, m)
            if i % 2:
                check(m.data, host + i, f"device message {i}", device=dst.device)
            else:
                assert m.data == f"host {i}".encode()
    await both(ctx, sender, receiver)
    await settled(ctx)


@scenario(sim_only=True, faults=[Fault("d2h", 3), Fault("d2d", 1)])
async def device_copy_fault_fails_sender_and_stream(ctx: Ctx) -> None:
    """A failing device copy at the sender (d2h #3 when staged, d2d #1 on one
    host) raises DeviceError in send_stream, the receiver's stream ends with
    StreamError, every chunk returns to its pool, and the next stream works."""
    host = np.random.default_rng(4).random((1024, 256))  # 2 MiB: 8 chunks
    async def sender() -> None:
        src = await ctx.process("src", ptype=PType.GPU)
        await ctx.lookup(ctx.name("dst"))
        try:
            await src.send_stream(ctx.name("dst"), to_dev(ctx.node, host), timeout=ctx.timeout)
        except DeviceError as exc:
            assert "injected failure" in str(exc.__cause__ or exc), exc
        else:
            raise AssertionError("the copy fault did not reach the sender")
        await src.send_stream(ctx.name("dst"), to_dev(ctx.node, host), timeout=ctx.timeout)
    async def receiver() -> None:
        dst = await ctx.process("dst", ptype=PType.GPU)
        s = await dst.recv(timeout=ctx.timeout)
        assert isinstance(s, IncomingStream)
        try:
            await s.read()
        except StreamError as exc:
            assert "DeviceError" in str(exc), exc
        else:
            raise AssertionError("the receiver did not get StreamError")
        s = await dst.recv(timeout=ctx.timeout)
        assert isinstance(s, IncomingStream)
        check(await s.read(), host, "the stream after the fault", device=dst.device)
    await both(ctx, sender, receiver)
    await settled(ctx)


@scenario(remote_only=True, sim_only=True, faults=[Fault("h2d", 2)])
async def device_receiver_copy_fault_fails_both_ends(ctx: Ctx) -> None:
    """A failing host-to-device copy at the receiver ends its stream with
    StreamError and the sender's send_stream with BrokenResourceError; the
    chunks return to both pools."""
    host = np.random.default_rng(5).random((1024, 256))
    async def sender() -> None:
        src = await ctx.process("src", ptype=PType.GPU)
        await ctx.lookup(ctx.name("dst"))
        try:
            await src.send_stream(ctx.name("dst"), to_dev(ctx.node, host), timeout=ctx.timeout)
        except BrokenResourceError as exc:
            assert "DeviceError" in str(exc), exc
        else:
            raise AssertionError("the sender did not hear of the receiver's failure")
    async def receiver() -> None:
        dst = await ctx.process("dst", ptype=PType.GPU)
        s = await dst.recv(timeout=ctx.timeout)
        assert isinstance(s, IncomingStream)
        try:
            await s.read()
        except StreamError as exc:
            assert "injected failure of h2d" in str(exc), exc
        else:
            raise AssertionError("the receiver's copy fault did not fail the stream")
    await both(ctx, sender, receiver)
    await settled(ctx)


def _gate(ctx: Ctx) -> Any:
    """Hold the sender's 3rd chunk copy (staged) or its one device copy (one host)."""
    backend: Any = ctx.node.devices.open().backend
    return backend.gate("d2h", 3) if ctx.size > 1 else backend.gate("d2d", 1)


@scenario(sim_only=True)
async def device_sender_cancel_midstream_frees_chunks(ctx: Ctx) -> None:
    """A send_stream cancelled while chunks are in flight ends the receiver's
    stream with StreamError, returns every chunk on both hosts, and the next
    stream between the same GPs arrives whole."""
    host = np.random.default_rng(6).random((1024, 256))
    async def sender() -> None:
        src = await ctx.process("src", ptype=PType.GPU)
        await ctx.lookup(ctx.name("dst"))
        gate = _gate(ctx)  # the transfer cannot finish before the cancel
        task = asyncio.create_task(src.send_stream(ctx.name("dst"), to_dev(ctx.node, host)))
        m = await src.recv(timeout=ctx.timeout)  # the receiver has the stream open
        assert isinstance(m, Message) and m.data == b"cancel"
        task.cancel()
        try:
            await task
        except asyncio.CancelledError:
            pass
        else:
            raise AssertionError("the send completed while a copy was held")
        gate.release()
        await src.send_stream(ctx.name("dst"), to_dev(ctx.node, host), timeout=ctx.timeout)
    async def receiver() -> None:
        dst = await ctx.process("dst", ptype=PType.GPU)
        s = await dst.recv(timeout=ctx.timeout)
        assert isinstance(s, IncomingStream)
        await dst.send(ctx.name("src"), b"cancel", timeout=ctx.timeout)
        try:
            await s.read()
        except StreamError as exc:
            assert "cancelled" in str(exc), exc
        else:
            raise AssertionError("a cancelled stream was read whole")
        s = await dst.recv(timeout=ctx.timeout)
        assert isinstance(s, IncomingStream)
        check(await s.read(), host, "the stream after the cancel", device=dst.device)
    await both(ctx, sender, receiver)
    await settled(ctx)


@scenario(sim_only=True)
async def device_receiver_closes_midstream_frees_chunks(ctx: Ctx) -> None:
    """A receiver that closes a device stream midway fails the sender with
    BrokenResourceError; every chunk returns on both hosts (the receiver
    drains what was sent) and the next stream arrives whole."""
    host = np.random.default_rng(7).random((1024, 256))
    async def sender() -> None:
        src = await ctx.process("src", ptype=PType.GPU)
        await ctx.lookup(ctx.name("dst"))
        gate = _gate(ctx)
        task = asyncio.create_task(src.send_stream(ctx.name("dst"), to_dev(ctx.node, host)))
        m = await src.recv(timeout=ctx.timeout)
        assert isinstance(m, Message) and m.data == b"closed"
        gate.release()
        try:
            await task
        except BrokenResourceError as exc:
            assert "receiver closed the stream" in str(exc), exc
        else:
            raise AssertionError("the sender did not hear that the receiver closed the stream")
        await src.send_stream(ctx.name("dst"), to_dev(ctx.node, host), timeout=ctx.timeout)
    async def receiver() -> None:
        dst = await ctx.process("dst", ptype=PType.GPU)
        s = await dst.recv(timeout=ctx.timeout)
        assert isinstance(s, IncomingStream)
        await s.aclose()
        await dst.send(ctx.name("src"), b"closed", timeout=ctx.timeout)
        s = await dst.recv(timeout=ctx.timeout)
        assert isinstance(s, IncomingStream)
        check(await s.read(), host, "the stream after the close", device=dst.device)
    await both(ctx, sender, receiver)
    await settled(ctx)


def _dtype_cases() -> list[np.ndarray[Any, Any]]:
    """One small array of every dtype the device path carries (the
    ml_dtypes family where it is installed)."""
    base = np.arange(-6, 6).reshape(3, 4)
    out = [base.astype(t) for t in (np.float16, np.float32, np.float64, np.complex64, np.complex128, np.uint8,
                                    np.int8, np.uint16, np.int16, np.uint32, np.int32, np.uint64, np.int64)]
    out += [base > 0, base.astype(">f4"), np.array(3.5, np.float32), np.empty((0, 4), np.int32)]
    try:
        import ml_dtypes
    except ImportError:
        return out
    return out + [base.astype(getattr(ml_dtypes, n)) for n in ("bfloat16", "float8_e4m3fn", "float8_e5m2")]


@scenario(sim_only=True)
async def device_arrays_of_every_dtype_arrive_as_themselves(ctx: Ctx) -> None:
    """Device arrays of every dtype (bfloat16 and float8 included) arrive by
    send and send_stream as device arrays of that dtype, shape and bytes:
    the stream header names the dtype (ArrayMeta), not its ``dtype.str``."""
    cases = _dtype_cases()

    def same(got: Any, want: np.ndarray[Any, Any], what: str) -> None:
        assert is_device_array(got), f"{what}: {type(got).__name__}"
        host = to_host(got)
        assert (host.dtype, host.shape) == (want.dtype, want.shape), f"{what}: {host.dtype}{host.shape}"
        assert host.tobytes() == want.tobytes(), f"{what}: content differs"

    async def sender() -> None:
        src = await ctx.process("src", ptype=PType.GPU)
        await ctx.lookup(ctx.name("dst"))
        for i, host in enumerate(cases):
            await src.send(ctx.name("dst"), to_dev(ctx.node, host), com=i, timeout=ctx.timeout)
            await src.send_stream(ctx.name("dst"), to_dev(ctx.node, host), com=i, timeout=ctx.timeout)

    async def receiver() -> None:
        dst = await ctx.process("dst", ptype=PType.GPU)
        for i, host in enumerate(cases):
            m = await dst.recv(timeout=ctx.timeout)
            assert isinstance(m, Message) and m.com == i, m
            same(m.data, host, f"message {host.dtype}")
            s = await dst.recv(timeout=ctx.timeout)
            assert isinstance(s, IncomingStream) and s.com == i, s
            same(await s.read(), host, f"stream {host.dtype}")

    await both(ctx, sender, receiver)
    await settled(ctx)


@scenario(sim_only=True, requires=("torch",))
async def device_tensors_arrive_as_tensors(ctx: Ctx) -> None:
    """A tensor on the device (a simulated one, SimTensor: torch has no
    simulated device) sent by send and send_stream arrives at an SGP as a
    tensor on that SGP's device (the backend's as_tensor, torch.from_dlpack
    on a GPU), at an NGP as a CPU torch tensor, with the sent dtype, shape
    and bytes; a plain device array still arrives as the backend's array;
    a CPU tensor reaches an SGP with to_device as a tensor on its device."""
    import torch

    cases = [np.arange(12, dtype=np.float32).reshape(3, 4), np.arange(300_000, dtype=np.int32)]  # 1.2 MB: 5 chunks

    async def sender() -> None:
        src = await ctx.process("src", ptype=PType.GPU)
        backend = ctx.node.devices.open().backend
        for dest in ("sgp", "ngp"):
            await ctx.lookup(ctx.name(dest))
            for host in cases:
                t = backend.as_tensor(to_dev(ctx.node, host))  # type: ignore[attr-defined]
                await src.send(ctx.name(dest), t, timeout=ctx.timeout)
                await src.send_stream(ctx.name(dest), t, timeout=ctx.timeout)
            await src.send(ctx.name(dest), to_dev(ctx.node, cases[0]), timeout=ctx.timeout)
        await ctx.lookup(ctx.name("tod"))
        for host in cases:  # CPU tensors to an SGP with to_device
            await src.send(ctx.name("tod"), torch.from_numpy(host), timeout=ctx.timeout)
            await src.send_stream(ctx.name("tod"), torch.from_numpy(host), timeout=ctx.timeout)

    async def to_sgp() -> None:
        dst = await ctx.process("sgp", ptype=PType.GPU)
        for host in cases:
            m = await dst.recv(timeout=ctx.timeout)
            assert isinstance(m, Message) and type(m.data) is SimTensor, f"message: {type(m.data).__name__}"
            check(m.data, host, "message", device=dst.device)
            s = await dst.recv(timeout=ctx.timeout)
            assert isinstance(s, IncomingStream)
            got = await s.read()
            assert type(got) is SimTensor, f"read(): {type(got).__name__}"
            check(got, host, "read()", device=dst.device)
        m = await dst.recv(timeout=ctx.timeout)
        assert isinstance(m, Message) and type(m.data) is SimArray, f"a plain device array: {type(m.data).__name__}"

    async def to_ngp() -> None:
        dst = await ctx.process("ngp")
        for host in cases:
            m = await dst.recv(timeout=ctx.timeout)
            assert isinstance(m, Message) and type(m.data) is torch.Tensor, f"message: {type(m.data).__name__}"
            assert torch.equal(m.data, torch.from_numpy(host)), "message: content differs"
            s = await dst.recv(timeout=ctx.timeout)
            assert isinstance(s, IncomingStream)
            got = await s.read()
            assert type(got) is torch.Tensor and torch.equal(got, torch.from_numpy(host)), f"read(): {got!r:.80}"
        m = await dst.recv(timeout=ctx.timeout)
        assert isinstance(m, Message) and type(m.data) is np.ndarray, f"a plain device array: {type(m.data).__name__}"

    async def to_device_sgp() -> None:
        tod = await ctx.node.register(ctx.name("tod"), PType.GPU, bind=True, to_device=True)
        try:
            for host in cases:
                m = await tod.recv(timeout=ctx.timeout)
                assert isinstance(m, Message) and type(m.data) is SimTensor, f"to_device: {type(m.data).__name__}"
                check(m.data, host, "to_device message", device=tod.device)
                s = await tod.recv(timeout=ctx.timeout)
                assert isinstance(s, IncomingStream)
                got = await s.read()
                assert type(got) is SimTensor, f"to_device read(): {type(got).__name__}"
                check(got, host, "to_device read()", device=tod.device)
        finally:
            await tod.free()

    async with asyncio.TaskGroup() as tg:
        if ctx.rank == 0:
            tg.create_task(sender())
        if ctx.rank == ctx.owner(1):
            tg.create_task(to_sgp())
            tg.create_task(to_ngp())
            tg.create_task(to_device_sgp())
    await settled(ctx)
