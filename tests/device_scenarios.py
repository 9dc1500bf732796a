"""Staging scenarios shared by the simulated backend and the CuPy backend.

``tests/test_device_sim.py`` (CI, no GPU) and ``tests/test_device_cupy.py``
(marked ``gpu``) both import every ``test_*`` function of this module and
provide the ``dev`` fixture: a *harness* with the backend and the few
backend-specific operations the scenarios need (make a device array, read it
back, hold a stream, queue a kernel).  So the same scenarios run over both.

The send/receive primitives are a fake link (:class:`Wire`): a send request
completes when the test (or ``pump`` in auto mode) says so, and the bytes are
taken from the chunk *at completion*, so a chunk reused before its send
completed would corrupt the data.  Tests wait for conditions with
:func:`drive` (poll, pump, bounded by a deadline) and assert states and
orderings, never timings.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from typing import Any, Protocol

import numpy as np
import pytest

from aiopdbp.device.backend import DeviceBackend, Stream
from aiopdbp.device.chunks import MIN_CHUNK_SIZE, ArrayMeta, Piece, Role, Segment
from aiopdbp.device.staging import ChunkState, RecvTransfer, SendTransfer, Stager, Transfer, TransferState

CHUNK = MIN_CHUNK_SIZE  # 256 KiB: several chunks per test array, small memory


class Hold(Protocol):
    def release(self) -> None: ...


class Harness(Protocol):
    backend: DeviceBackend
    devices: int
    faults: bool  # can inject device faults (simulated backend only)

    def array(self, host: np.ndarray[Any, Any], device: int = 0) -> Any: ...
    def to_numpy(self, arr: Any) -> np.ndarray[Any, Any]: ...
    def hold(self, stream: Stream) -> Hold: ...
    def fill_async(self, arr: Any, value: float, stream: Stream) -> None: ...


# ----------------------------------------------------------------- fake link
class FakeRequest:
    def __init__(self, piece: Piece, buf: memoryview) -> None:
        self.piece = piece
        self.buf = buf
        self.completed = False
        self.cancelled = False
        self.error: BaseException | None = None

    def done(self) -> bool:
        if self.error is not None:
            raise self.error
        return self.completed

    def cancel(self) -> None:
        self.cancelled = True


class Wire:
    """A fake point-to-point link between one sender and one receiver."""

    def __init__(self, *, auto: bool = True, note: Callable[[str], Any] | None = None) -> None:
        self.auto = auto
        self.sends: dict[int, FakeRequest] = {}
        self.recvs: dict[int, FakeRequest] = {}
        self.payload: dict[int, bytes] = {}
        self.fail_send: dict[int, BaseException] = {}  # request error per piece
        self.fail_recv: dict[int, BaseException] = {}
        self.raise_on_post: BaseException | None = None
        self.note = note or (lambda text: None)

    def post_send(self, piece: Piece, buf: memoryview) -> FakeRequest:
        if self.raise_on_post is not None:
            raise self.raise_on_post
        assert len(buf) == piece.nbytes
        req = self.sends[piece.index] = FakeRequest(piece, buf)
        req.error = self.fail_send.get(piece.index)
        self.note(f"send-post {piece.index}")
        return req

    def post_recv(self, piece: Piece, buf: memoryview) -> FakeRequest:
        assert len(buf) == piece.nbytes and not buf.readonly
        req = self.recvs[piece.index] = FakeRequest(piece, buf)
        req.error = self.fail_recv.get(piece.index)
        return req

    def complete_send(self, i: int) -> None:
        req = self.sends[i]
        self.payload[i] = bytes(req.buf)  # read the chunk now: it must still hold piece i
        req.completed = True
        self.note(f"send-done {i}")

    def pump(self) -> None:
        if self.auto:
            for i, req in list(self.sends.items()):
                if not req.completed and req.error is None:
                    self.complete_send(i)
        for i, req in self.recvs.items():
            if req.completed:
                continue
            if i in self.payload:
                req.buf[:] = self.payload[i]
                req.completed = True
            elif req.cancelled:
                req.completed = True  # a cancelled receive is over


def drive(stagers: list[Stager], wire: Wire | None, until: Callable[[], bool], timeout: float = 20.0) -> None:
    """Poll (and pump the wire) until ``until()``; fail after ``timeout`` s."""
    deadline = time.monotonic() + timeout
    while not until():
        for s in stagers:
            s.poll()
        if wire is not None:
            wire.pump()
        if time.monotonic() > deadline:
            raise AssertionError(f"no progress: {[(t, t.state, t.chunk_states()) for s in stagers for t in s.transfers]}")
        time.sleep(0.0002)  # let the device (worker threads) run


def linger(stagers: list[Stager], wire: Wire | None = None, seconds: float = 0.2) -> None:
    """Keep polling for ``seconds``, giving the device every chance to do what
    it must not do yet (a correct implementation cannot progress, so the
    assertion that follows never depends on timing)."""
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        for s in stagers:
            s.poll()
        if wire is not None:
            wire.pump()
        time.sleep(0.001)


def states(t: Transfer) -> dict[int, ChunkState]:
    return dict(t.chunk_states())


@pytest.fixture
def new_stager(dev: Harness) -> Iterator[Callable[..., Stager]]:
    """``new_stager(**options)``: a Stager over the harness backend (closed at teardown)."""
    made: list[Stager] = []

    def make(**options: Any) -> Stager:
        options.setdefault("chunk_size", CHUNK)
        options.setdefault("pool_bytes", 8 * CHUNK)
        s = Stager(dev.backend, **options)
        made.append(s)
        return s

    yield make
    for s in made:
        s.close()


def roundtrip(
    dev: Harness, new_stager: Callable[..., Stager], host: np.ndarray[Any, Any], *,
    piece_size: int | None = None, max_in_flight: int = 3,
) -> tuple[Any, RecvTransfer, list[Segment]]:
    tx, rx = new_stager(), new_stager()
    wire = Wire()
    done: list[Transfer] = []
    segments: list[Segment] = []
    t = tx.send(dev.array(host, 0), wire.post_send, piece_size=piece_size, max_in_flight=max_in_flight,
                on_done=done.append)
    meta = ArrayMeta.from_wire(t.meta.to_wire())
    r = rx.recv(meta, wire.post_recv, device=dev.devices - 1, max_in_flight=max_in_flight,
                on_segment=lambda r, seg: segments.append(seg), on_done=done.append)
    drive([tx, rx], wire, lambda: t.settled and r.settled)
    assert (t.state, t.error, r.state, r.error) == (TransferState.DONE, None, TransferState.DONE, None)
    assert done == [t, r]
    assert tx.pool.in_use == rx.pool.in_use == 0
    return r.array, r, segments


# ----------------------------------------------------------------- scenarios
@pytest.mark.parametrize(
    ("shape", "dtype", "order"),
    [
        ((1000, 300), np.float32, "C"),  # several whole-row pieces
        ((1000, 300), np.float32, "F"),  # cut along the last axis
        ((3, 100_000), np.int64, "C"),  # rows longer than a piece: a row is a segment
        ((100_000, 3), np.int64, "F"),
        ((7, 5, 4, 3), np.complex128, "C"),  # a single piece
        ((), np.float64, "C"),  # 0-d
        ((0, 5), np.uint8, "C"),  # empty: no piece at all
        ((123_457,), np.uint8, "C"),  # 1-D, odd size
    ],
)
def test_roundtrip_preserves_data_dtype_shape_order(
    dev: Harness, new_stager: Callable[..., Stager], shape: tuple[int, ...], dtype: Any, order: str
) -> None:
    rng = np.random.default_rng(len(shape))
    host = np.asarray(rng.integers(0, 2**31, size=shape).astype(dtype), order=order)
    out, r, _ = roundtrip(dev, new_stager, host)
    info = dev.backend.inspect(out)
    assert (info.dtype, info.shape, info.device) == (host.dtype, host.shape, dev.devices - 1)
    assert info.order == ("F" if order == "F" and host.ndim > 1 and min(shape) > 1 else "C")
    np.testing.assert_array_equal(dev.to_numpy(out), host)


def test_roundtrip_non_contiguous_source_arrives_c_contiguous(dev: Harness, new_stager: Callable[..., Stager]) -> None:
    host = np.arange(600 * 400, dtype=np.float64).reshape(600, 400)
    tx, rx = new_stager(), new_stager()
    wire = Wire()
    src = dev.array(host)[:, ::3]
    t = tx.send(src, wire.post_send)
    assert t.meta.order == "C" and t.meta.shape == (600, 134)
    r = rx.recv(t.meta, wire.post_recv, device=0)
    drive([tx, rx], wire, lambda: t.settled and r.settled)
    assert r.state is TransferState.DONE
    np.testing.assert_array_equal(dev.to_numpy(r.array), host[:, ::3])


def test_segments_delivered_in_order_as_views_of_the_destination(
    dev: Harness, new_stager: Callable[..., Stager]
) -> None:
    host = np.arange(2000 * 100, dtype=np.int32).reshape(2000, 100)
    out, r, segments = roundtrip(dev, new_stager, host, piece_size=100_000)
    assert [s.index for s in segments] == list(range(r.plan.nsegments)) and len(segments) > 3
    assert segments[0].start == 0 and segments[-1].stop == 2000
    assert all(a.stop == b.start for a, b in zip(segments, segments[1:]))
    for seg in segments:
        np.testing.assert_array_equal(dev.to_numpy(r.view(seg)), host[seg.start : seg.stop])


def test_send_is_ordered_after_pending_producer_work(dev: Harness, new_stager: Callable[..., Stager]) -> None:
    tx, rx = new_stager(), new_stager()
    wire = Wire()
    arr = dev.array(np.zeros((1000, 300), np.float32))
    producer = dev.backend.current_stream(0)
    hold = dev.hold(producer)
    try:
        dev.fill_async(arr, 7.0, producer)  # the producer's kernel, still pending
        t = tx.send(arr, wire.post_send)
        linger([tx])
        assert set(states(t).values()) == {ChunkState.D2H_COPYING} and not wire.sends
    finally:
        hold.release()
    r = rx.recv(t.meta, wire.post_recv, device=0)
    drive([tx, rx], wire, lambda: t.settled and r.settled)
    assert (dev.to_numpy(r.array) == 7.0).all()


def test_receive_copies_are_ordered_after_the_consumer_stream(
    dev: Harness, new_stager: Callable[..., Stager]
) -> None:
    tx, rx = new_stager(), new_stager()
    wire = Wire()
    host = np.arange(1000 * 300, dtype=np.float32).reshape(1000, 300)
    t = tx.send(dev.array(host), wire.post_send)
    drive([tx], wire, lambda: t.settled)
    hold = dev.hold(dev.backend.current_stream(0))  # the consumer's pending work
    try:
        segments: list[Segment] = []
        r = rx.recv(t.meta, wire.post_recv, device=0, on_segment=lambda r, s: segments.append(s))
        drive([rx], wire, lambda: ChunkState.H2D_COPYING in states(r).values())
        linger([rx], wire)
        assert not segments and r.state is TransferState.ACTIVE
    finally:
        hold.release()
    drive([rx], wire, lambda: r.settled)
    np.testing.assert_array_equal(dev.to_numpy(r.array), host)


def test_next_chunk_is_copied_while_previous_one_is_sending(dev: Harness, new_stager: Callable[..., Stager]) -> None:
    tx = new_stager()
    wire = Wire(auto=False)
    t = tx.send(dev.array(np.arange(4 * CHUNK // 4, dtype=np.float32)), wire.post_send, max_in_flight=3)
    drive([tx], None, lambda: states(t).get(0) is ChunkState.SENDING)
    drive([tx], None, lambda: states(t).get(1) is ChunkState.SENDING)
    assert not wire.sends[0].completed  # chunk 1 was copied and posted while chunk 0 was on the wire
    assert len(t.chunk_states()) <= 3
    for i in range(4):
        drive([tx], None, lambda: i in wire.sends)
        wire.complete_send(i)
    drive([tx], None, lambda: t.settled)
    assert t.state is TransferState.DONE and tx.pool.in_use == 0


def test_chunk_returns_to_pool_only_when_its_send_completes(dev: Harness, new_stager: Callable[..., Stager]) -> None:
    tx = new_stager()
    wire = Wire(auto=False)
    t = tx.send(dev.array(np.ones(2 * CHUNK, np.uint8)), wire.post_send, max_in_flight=2)
    drive([tx], None, lambda: list(states(t).values()) == [ChunkState.SENDING] * 2)
    linger([tx])
    assert tx.pool.in_use == 2  # copies done, sends not: both still taken
    wire.complete_send(1)
    drive([tx], None, lambda: tx.pool.in_use == 1)
    assert states(t) == {0: ChunkState.SENDING}
    wire.complete_send(0)
    drive([tx], None, lambda: t.settled)
    assert tx.pool.in_use == 0 and wire.payload[0] == wire.payload[1] == b"\x01" * CHUNK


def test_chunks_in_flight_bounded_and_pool_never_overcommitted(
    dev: Harness, new_stager: Callable[..., Stager]
) -> None:
    tx = new_stager(pool_bytes=6 * CHUNK, recv_reserve=2)
    wires = [Wire() for _ in range(4)]
    sends = [tx.send(dev.array(np.full((3 * CHUNK,), i, np.uint8)), w.post_send, max_in_flight=3)
             for i, w in enumerate(wires)]
    peak = {id(t): 0 for t in sends}

    def step() -> bool:
        for w in wires:
            w.pump()
        for t in sends:
            peak[id(t)] = max(peak[id(t)], len(t.chunk_states()))
        return all(t.settled for t in sends)

    drive([tx], None, step)
    assert all(t.state is TransferState.DONE for t in sends)
    assert all(w.payload[k] == bytes([i]) * CHUNK for i, w in enumerate(wires) for k in range(3))
    assert max(peak.values()) == 3 and tx.pool.high_water == 4  # 6 chunks, 2 kept for receivers
    assert tx.pool.held_by(Role.SEND) == 0


def test_failing_send_request_fails_transfer_and_returns_chunks(
    dev: Harness, new_stager: Callable[..., Stager]
) -> None:
    tx = new_stager()
    wire = Wire()
    boom = ConnectionError("peer went away")
    wire.fail_send[1] = boom
    done: list[Transfer] = []
    t = tx.send(dev.array(np.ones(5 * CHUNK, np.uint8)), wire.post_send, on_done=done.append)
    drive([tx], wire, lambda: t.settled)
    assert (t.state, t.error, done) == (TransferState.FAILED, boom, [t])
    assert tx.pool.in_use == 0 and 4 not in wire.sends  # no new work after the failure


def test_raising_send_primitive_fails_transfer_and_returns_chunks(
    dev: Harness, new_stager: Callable[..., Stager]
) -> None:
    tx = new_stager()
    wire = Wire()
    wire.raise_on_post = OSError("cannot post")
    t = tx.send(dev.array(np.ones(3 * CHUNK, np.uint8)), wire.post_send)
    drive([tx], wire, lambda: t.settled)
    assert t.state is TransferState.FAILED and t.error is wire.raise_on_post and tx.pool.in_use == 0


def test_failing_receive_fails_receiver_and_cancels_posted_receives(
    dev: Harness, new_stager: Callable[..., Stager]
) -> None:
    rx = new_stager()
    wire = Wire()
    wire.fail_recv[0] = ConnectionError("truncated")
    meta = ArrayMeta(np.dtype(np.uint8), (4 * CHUNK,), "C", CHUNK)
    done: list[Transfer] = []
    r = rx.recv(meta, wire.post_recv, device=0, max_in_flight=3, on_done=done.append)
    drive([rx], wire, lambda: r.settled)
    assert r.state is TransferState.FAILED and done == [r] and r.array is None
    assert wire.recvs[1].cancelled and wire.recvs[2].cancelled and rx.pool.in_use == 0


def test_abort_waits_for_in_flight_sends_before_returning_chunks(
    dev: Harness, new_stager: Callable[..., Stager]
) -> None:
    tx = new_stager()
    wire = Wire(auto=False)
    done: list[Transfer] = []
    t = tx.send(dev.array(np.ones(3 * CHUNK, np.uint8)), wire.post_send, max_in_flight=1, on_done=done.append)
    drive([tx], None, lambda: states(t).get(0) is ChunkState.SENDING)
    t.abort(RuntimeError("cancelled by the user"))
    assert done == [t]  # the outcome is known at once ...
    linger([tx])
    # ... but the chunk MPI still reads stays taken
    assert t.state is TransferState.DRAINING and states(t) == {0: ChunkState.SENDING} and tx.pool.in_use == 1
    wire.complete_send(0)
    drive([tx], None, lambda: t.settled)
    assert t.state is TransferState.FAILED and tx.pool.in_use == 0 and set(wire.sends) == {0}


def test_abandon_withdraws_chunks_that_may_still_be_read(dev: Harness, new_stager: Callable[..., Stager]) -> None:
    tx = new_stager()
    wire = Wire(auto=False)
    t = tx.send(dev.array(np.ones(3 * CHUNK, np.uint8)), wire.post_send, max_in_flight=2)
    drive([tx], None, lambda: list(states(t).values()) == [ChunkState.SENDING] * 2)
    t.abandon()
    assert t.state is TransferState.FAILED and tx.pool.lost == 2 and tx.pool.in_use == 0
    assert tx.pool.free == tx.pool.nchunks - 2


def test_receivers_get_reserved_chunks_while_senders_hold_the_rest(
    dev: Harness, new_stager: Callable[..., Stager]
) -> None:
    node = new_stager(pool_bytes=4 * CHUNK, recv_reserve=1)
    out_wire, in_wire = Wire(auto=False), Wire()
    t = node.send(dev.array(np.ones(8 * CHUNK, np.uint8)), out_wire.post_send, max_in_flight=8)
    drive([node], None, lambda: len(out_wire.sends) == 3)  # the peer does not receive yet
    host = np.arange(CHUNK, dtype=np.uint8)
    in_wire.payload[0] = host.tobytes()
    r = node.recv(ArrayMeta(np.dtype(np.uint8), (CHUNK,), "C", CHUNK), in_wire.post_recv, device=0)
    drive([node], in_wire, lambda: r.settled)
    assert r.state is TransferState.DONE and len(out_wire.sends) == 3
    np.testing.assert_array_equal(dev.to_numpy(r.array), host)
    t.abandon()
