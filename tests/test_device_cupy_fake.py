"""Plumbing of the CuPy backend over a fake ``cupy`` (``tests/fake_cupy.py``).

No GPU: device memory is host memory and copies are synchronous, so this
checks what the backend *asks of CUDA* -- pointers, offsets, sizes, copy
kinds, which stream an event is recorded on and which stream waits for it,
how CUDA status codes become ``DeviceError`` -- and that data survives the
pointer arithmetic.  CUDA behaviour itself is tested by
``tests/test_device_cupy.py`` on a GPU.
"""

from __future__ import annotations

import sys
from collections.abc import Callable, Iterator
from typing import Any

import numpy as np
import pytest

from aiopdbp.device.cupy_backend import CupyBackend
from aiopdbp.device.staging import ChunkState, Stager, TransferState
from aiopdbp.errors import DeviceError

from tests import fake_cupy
from tests.device_scenarios import CHUNK, Wire, drive, new_stager, roundtrip, states  # noqa: F401

D2H, H2D = 2, 1


class FakeHarness:
    devices = 2
    faults = False

    def __init__(self) -> None:
        self.cp = fake_cupy.install(self.devices)
        self.backend = CupyBackend()
        self.runtime = self.cp.cuda.runtime

    def array(self, host: np.ndarray[Any, Any], device: int = 0) -> Any:
        with self.cp.cuda.Device(device):
            return self.cp.array(host)

    def to_numpy(self, arr: Any) -> np.ndarray[Any, Any]:
        return self.cp.asnumpy(arr)


@pytest.fixture
def dev() -> Iterator[FakeHarness]:
    saved = sys.modules.get("cupy")
    try:
        yield FakeHarness()
    finally:
        if saved is None:
            sys.modules.pop("cupy", None)
        else:
            sys.modules["cupy"] = saved


@pytest.mark.parametrize(
    ("shape", "dtype", "order"),
    [((1000, 300), np.float32, "C"), ((1000, 300), np.float32, "F"), ((3, 100_000), np.int64, "C"),
     ((), np.float64, "C"), ((0, 4), np.uint8, "C")],
)
def test_fake_cupy_roundtrip_moves_every_byte_with_the_right_copy_kinds(
    dev: FakeHarness, new_stager: Callable[..., Stager], shape: tuple[int, ...], dtype: Any, order: str
) -> None:
    host = np.asarray(np.random.default_rng(1).integers(0, 1000, size=shape).astype(dtype), order=order)
    out, r, _ = roundtrip(dev, new_stager, host)
    np.testing.assert_array_equal(out.get(), host)
    assert out.device.id == 1 and dev.backend.inspect(out).order == ("F" if order == "F" else "C")
    copies = [c for c in dev.runtime.calls if c[0] == "memcpyAsync"]
    assert sum(c[2] for c in copies if c[1] == D2H) == sum(c[2] for c in copies if c[1] == H2D) == host.nbytes
    assert {c[4] for c in copies if c[1] == H2D} <= {1}  # H2D copies run with the receiving device current


def test_fake_cupy_send_orders_copies_after_the_producer_stream_by_event(
    dev: FakeHarness, new_stager: Callable[..., Stager]
) -> None:
    tx = new_stager()
    arr = dev.array(np.ones(2 * CHUNK, np.uint8))
    producer = dev.backend.current_stream(0)
    start = len(dev.runtime.calls)
    t = tx.send(arr, Wire().post_send)
    calls = dev.runtime.calls[start:]
    copy_stream = t.stream.ptr  # type: ignore[attr-defined]
    assert calls[0][:1] + calls[0][2:] == ("eventRecord", producer.ptr)
    assert calls[1] == ("streamWaitEvent", copy_stream, calls[0][1])
    assert calls[2][:2] == ("memcpyAsync", D2H) and calls[2][3] == copy_stream
    assert copy_stream != producer.ptr and t.stream.owner.is_non_blocking  # type: ignore[attr-defined]


def test_fake_cupy_pinned_pool_is_one_portable_allocation(dev: FakeHarness) -> None:
    Stager(dev.backend, chunk_size=CHUNK, pool_bytes=4 * CHUNK).close()
    assert [c for c in dev.runtime.calls if c[0] == "PinnedMemory"] == [("PinnedMemory", 4 * CHUNK, 1)]


def test_fake_cupy_event_error_status_fails_transfer_with_cuda_cause(
    dev: FakeHarness, new_stager: Callable[..., Stager]
) -> None:
    tx = new_stager()
    t = tx.send(dev.array(np.ones(2 * CHUNK, np.uint8)), Wire().post_send, max_in_flight=1)
    first_copy_event = [c for c in dev.runtime.calls if c[0] == "eventRecord"][-1][1]
    dev.runtime.event_status[first_copy_event] = 600  # cudaErrorNotReady: still running
    for _ in range(5):
        tx.poll()
    assert states(t) == {0: ChunkState.D2H_COPYING}
    dev.runtime.event_status[first_copy_event] = 700  # cudaErrorIllegalAddress
    drive([tx], None, lambda: t.settled)
    assert t.state is TransferState.FAILED and isinstance(t.error, DeviceError)
    assert isinstance(t.error.__cause__, fake_cupy.CUDARuntimeError) and t.error.__cause__.status == 700
    assert tx.pool.in_use == 0


class _CAI:
    def __init__(self, arr: Any, stream: int | None) -> None:
        cai = dict(arr.__cuda_array_interface__)
        cai["stream"] = stream
        self.__cuda_array_interface__ = cai


class _DLPack:
    def __init__(self, arr: Any) -> None:
        self._arr = arr
        self.streams: list[Any] = []

    def __dlpack__(self, stream: Any = None) -> None:
        self.streams.append(stream)

    def __dlpack_device__(self) -> tuple[int, int]:
        return (2, self._arr.device.id)


@pytest.mark.parametrize("stream", [None, 0xBEEF])
def test_fake_cupy_foreign_cai_array_is_viewed_and_ordered_on_its_own_stream(
    dev: FakeHarness, new_stager: Callable[..., Stager], stream: int | None
) -> None:
    host = np.arange(1000 * 30, dtype=np.int32).reshape(1000, 30)[:, ::2]
    src = dev.array(np.ascontiguousarray(host))
    info = dev.backend.inspect(_CAI(src, stream))
    assert info.array.data.ptr == src.data.ptr and info.order == "C"
    assert info.stream.ptr == (stream if stream is not None else 0)  # type: ignore[attr-defined]
    tx, rx = new_stager(), new_stager()
    wire = Wire()
    start = len(dev.runtime.calls)
    t = tx.send(_CAI(src, stream), wire.post_send)
    assert dev.runtime.calls[start][2] == info.stream.ptr  # type: ignore[attr-defined]
    r = rx.recv(t.meta, wire.post_recv, device=0)
    drive([tx, rx], wire, lambda: t.settled and r.settled)
    np.testing.assert_array_equal(r.array.get(), host)


def test_fake_cupy_strided_foreign_array_is_made_contiguous_on_the_copy_stream(
    dev: FakeHarness, new_stager: Callable[..., Stager]
) -> None:
    host = np.arange(400 * 300, dtype=np.float64).reshape(400, 300)
    view = dev.array(host)[:, ::3]
    info = dev.backend.inspect(_CAI(view, None))
    assert info.order is None
    tx, rx = new_stager(), new_stager()
    wire = Wire()
    t = tx.send(_CAI(view, None), wire.post_send)
    assert ("ascontiguousarray", t.stream.ptr) in dev.runtime.calls  # type: ignore[attr-defined]
    r = rx.recv(t.meta, wire.post_recv, device=0)
    drive([tx, rx], wire, lambda: t.settled and r.settled)
    np.testing.assert_array_equal(r.array.get(), host[:, ::3])


def test_fake_cupy_dlpack_import_passes_the_current_stream(dev: FakeHarness) -> None:
    src = dev.array(np.arange(10))
    obj = _DLPack(src)
    info = dev.backend.inspect(obj)
    assert info.array is src and obj.streams == [dev.backend.current_stream(0).ptr]


def test_fake_cupy_select_device_and_errors(dev: FakeHarness) -> None:
    assert dev.backend.select_device(environ={"OMPI_COMM_WORLD_LOCAL_RANK": "3"}) == 1
    assert dev.backend.get_device() == 1 and dev.runtime.device == 1
    with pytest.raises(DeviceError) as info:
        dev.backend.set_device(7)
    assert isinstance(info.value.__cause__, fake_cupy.CUDARuntimeError)
    with pytest.raises(TypeError):
        dev.backend.inspect(np.zeros(3))


def test_fake_cupy_from_host_and_copy_d2d_use_the_right_pointers(dev: FakeHarness) -> None:
    host = np.arange(24, dtype=np.int16).reshape(4, 6)
    s = dev.backend.create_stream(1)
    pinned = dev.backend.alloc_pinned(host.nbytes)
    pinned[:] = np.frombuffer(host.tobytes(), np.uint8)
    arr, ev = dev.backend.from_host(pinned, host.dtype, (4, 6), "C", 1, s)
    assert ev.done() and arr.device.id == 1
    np.testing.assert_array_equal(arr.get(), host)
    dst = dev.backend.empty((4, 6), np.int16, "C", 0)
    dev.backend.copy_d2d(arr, dst, s)
    np.testing.assert_array_equal(dst.get(), host)
    assert dev.runtime.calls[-1][:3] == ("memcpyAsync", 4, host.nbytes)  # cudaMemcpyDefault (peer)
