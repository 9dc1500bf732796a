"""A simulated device backend: CUDA's ordering rules over host memory, for CI.

Theory of operation
===================

The simulator keeps the *semantics* the staging machinery relies on and
nothing else, so that ordering, overlap, chunks in flight, pool accounting
and every error path can be tested on a machine without a GPU:

* **Device memory** is host memory owned by :class:`SimArray`, a wrapper of
  its own.  It deliberately has no ``__cuda_array_interface__``, no DLPack
  and no buffer protocol, and ``numpy.asarray(sim_array)`` raises (as for
  CuPy): code that forgets to stage device data fails loudly instead of
  reading host pointers.  ``arr.get()`` is the explicit, synchronising
  device-to-host copy (``cupy.ndarray.get``); :meth:`SimBackend.asarray`
  the host-to-device one.  :func:`~aiopdbp.device.backend.classify` sees a
  ``SimArray`` as ``Placement.SIM``.
* **Streams** are FIFO queues, each drained by its own worker thread
  (started on the first operation).  Operations on one stream therefore run
  in order and operations on different streams run concurrently, as on a
  GPU.  A copy sleeps ``copy_delay + byte_delay * nbytes`` seconds before it
  moves the bytes, so it completes *later* than it was queued.
* **Events** are recorded by queueing a marker: the event completes when the
  worker reaches it, i.e. when everything queued before it on that stream
  has run.  ``done()`` only reads a flag (``cudaEventQuery``).
  ``wait_event(stream, ev)`` queues a marker that stalls that stream's
  worker until ``ev`` completes (``cudaStreamWaitEvent``): later work on the
  stream cannot start earlier.  Every operation queued on a stream before a
  record is captured by it; events are never re-recorded (each record makes a
  new event, as ``cupy.cuda.Stream.record()`` does).
* **Kernels**: :meth:`SimBackend.launch` queues a Python callable (a
  simulated kernel) on a stream; :meth:`SimBackend.hold` stalls a stream until
  the test releases it.  Together they stand in for "the producer's work is
  still pending on its stream", which the staging must order after.
  :meth:`SimBackend.gate` holds back one particular future copy (the *n*-th
  of its kind) until released: a deterministic interleaving, e.g. "copy 2
  runs while send 1 is in flight", without relying on timing.
* **Errors**: :class:`Fault` makes the *n*-th operation of a kind fail, either
  when it is queued (the call raises ``DeviceError``, nothing is queued) or
  when it runs (no bytes move; the next event recorded on that stream raises
  ``DeviceError`` from ``done()``, and so does any event of a stream that
  waited on it).  A *sticky* fault poisons its stream for good (every later
  operation fails, every later event raises), like a CUDA context after a
  kernel fault.
* **Trace**: every operation appends ``start``/``end`` entries with a global
  sequence number to :attr:`SimBackend.trace`; :meth:`SimBackend.note` adds
  a caller's mark to the same sequence, so a test asserts *ordering* ("copy
  of chunk 2 ended before the send of chunk 1 completed"), never timing.
  Entries also carry ``time.perf_counter()``, for benchmarks that measure
  how much simulated copies overlapped.
* **Current stream and the legacy null stream** (as CuPy): the current
  stream is per thread and per device, the legacy null stream unless a
  ``with stream:`` block of that thread says otherwise (entering a stream of
  another device than the thread's current one raises ``RuntimeError``).
  Work on the null stream waits for all earlier work of the device's
  *blocking* streams, and work on a blocking stream for earlier null-stream
  work; non-blocking streams (:meth:`SimBackend.create_stream`, the default)
  order against neither.
* **Caching allocator** (CuPy's memory pool): a device array's memory
  belongs to the stream current when it was allocated; once the last array
  using it is collected it goes back to that stream's free list, and the next
  allocation of the same size on the same stream gets it -- safe for work on
  that stream only.  A block freed while an operation queued on *another*
  stream still touches it is the bug that corrupts data on a GPU: it is
  recorded in :attr:`SimBackend.violations`.
* **Pageable memory**: a copy to or from a host buffer that is not pinned
  (:meth:`SimBackend.alloc_pinned`) is synchronous, as ``cudaMemcpyAsync``
  is: the call returns when the copy ran, after everything before it on its
  stream.
* **Shutdown**: :meth:`SimBackend.close` stops every worker (delays are
  interruptible), fails what is still queued (its events raise
  ``DeviceError``) and joins the threads, so no thread outlives the backend.
"""

from __future__ import annotations

import collections
import itertools
import threading
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any, Literal, NamedTuple

import numpy as np
import numpy.typing as npt

from aiopdbp.errors import ClosedResourceError, DeviceError
from aiopdbp.device.backend import ArrayInfo, DeviceBackend, Event, HostBuffer, Order, Stream, order_of
from aiopdbp.device.simmem import CurrentStreams, SimMemory

__all__ = ["Fault", "SimArray", "SimBackend", "SimEvent", "SimFault", "SimHold", "SimStream", "SimTensor",
           "TraceEntry"]

OpKind = Literal["d2h", "h2d", "d2d", "kernel"]


class SimFault(RuntimeError):
    """An injected failure of a simulated device operation."""


@dataclass(frozen=True)
class Fault:
    """Make the ``nth`` (1-based, counted per backend) operation of kind
    ``op`` fail, when it is queued (``at="submit"``) or when it runs."""

    op: OpKind
    nth: int = 1
    at: Literal["submit", "complete"] = "complete"
    sticky: bool = False


class TraceEntry(NamedTuple):
    """One line of :attr:`SimBackend.trace`."""

    seq: int
    phase: str  #: "start", "end", "failed" or "note"
    kind: str  #: operation kind, or the note's text
    stream: str
    nbytes: int
    time: float = 0.0  #: ``time.perf_counter()`` when logged (wall-clock overlap checks)


class _Block:
    """One allocation of the caching allocator; back to its stream's free
    list when the last array using it is collected."""

    __slots__ = ("raw", "stream", "backend")

    def __init__(self, raw: npt.NDArray[np.uint8], stream: SimStream, backend: SimBackend) -> None:
        self.raw = raw
        self.stream = stream
        self.backend = backend

    def __del__(self) -> None:
        self.backend.memory.free(self.raw, self.stream, self.stream.name)


class SimArray:
    """A simulated device array: host memory that only the backend touches."""

    __aiopdbp_sim_device__ = True
    __slots__ = ("_data", "device", "backend", "_block")

    def __init__(self, data: npt.NDArray[Any], device: int, backend: SimBackend, block: _Block | None = None) -> None:
        self._data = data
        self.device = device
        self.backend = backend
        self._block = block  # views share their base's block

    @property
    def dtype(self) -> np.dtype[Any]:
        return self._data.dtype

    @property
    def shape(self) -> tuple[int, ...]:
        return tuple(self._data.shape)

    @property
    def strides(self) -> tuple[int, ...]:
        return tuple(self._data.strides)

    @property
    def nbytes(self) -> int:
        return int(self._data.nbytes)

    @property
    def ndim(self) -> int:
        return int(self._data.ndim)

    @property
    def size(self) -> int:
        return int(self._data.size)

    def get(self) -> npt.NDArray[Any]:
        """A numpy copy, after the device's current stream has drained (like
        ``cupy.ndarray.get()``; blocks)."""
        self.backend.current_stream(self.device).synchronize()
        return self._data.copy(order="K")

    def unsafe_host_view(self) -> npt.NDArray[Any]:
        """The simulated device memory itself: for simulated kernels
        (:meth:`SimBackend.launch`) only."""
        return self._data

    def __getitem__(self, key: Any) -> SimArray:
        return SimArray(self._data[key], self.device, self.backend, self._block)

    def __len__(self) -> int:
        return len(self._data)

    def __array__(self, *args: Any, **kwargs: Any) -> Any:
        raise TypeError("implicit conversion of a simulated device array to numpy; use .get()")

    def __repr__(self) -> str:
        return f"SimArray(shape={self.shape}, dtype={self.dtype}, device={self.device})"


class SimTensor(SimArray):
    """A simulated CUDA torch tensor: a :class:`SimArray` that the device
    path takes for a tensor (``__aiopdbp_tensor__``), so that it arrives as
    one (:meth:`SimBackend.as_tensor`) -- the tensor path without a GPU
    (torch itself has no simulated device)."""

    __aiopdbp_tensor__ = True
    __slots__ = ()

    def __getitem__(self, key: Any) -> SimTensor:
        return SimTensor(self._data[key], self.device, self.backend, self._block)

    def __repr__(self) -> str:
        return f"SimTensor(shape={self.shape}, dtype={self.dtype}, device={self.device})"


class SimEvent:
    """A recorded point of a simulated stream."""

    def __init__(self, label: str) -> None:
        self.flag = threading.Event()
        self.error: BaseException | None = None
        self.label = label

    def done(self) -> bool:
        if not self.flag.is_set():
            return False
        self._raise()
        return True

    def synchronize(self) -> None:
        self.flag.wait()
        self._raise()

    def _raise(self) -> None:
        if self.error is not None:
            raise DeviceError(f"simulated device work before event {self.label} failed: {self.error}") from self.error

    def complete(self, error: BaseException | None) -> None:
        self.error = error
        self.flag.set()


class SimHold:
    """Stalls stream work until :meth:`release` (:meth:`SimBackend.hold`, :meth:`SimBackend.gate`)."""

    def __init__(self, event: SimEvent) -> None:
        self.event = event

    def release(self) -> None:
        if not self.event.flag.is_set():
            self.event.complete(None)


class _Op:
    __slots__ = ("kind", "fn", "nbytes", "fail", "sticky", "event", "wait_for", "gate", "touches", "done")

    def __init__(self, kind: str, fn: Callable[[], None] | None = None, nbytes: int = 0) -> None:
        self.kind = kind
        self.fn = fn
        self.nbytes = nbytes
        self.fail: BaseException | None = None
        self.sticky = False
        self.event: SimEvent | None = None  # kind "record": the event to complete
        self.wait_for: SimEvent | None = None  # kind "wait": the event to wait on
        self.gate: SimEvent | None = None  # a copy or kernel waits for this before it starts
        self.touches: tuple[int, ...] = ()  # ids of the device blocks it reads or writes
        self.done: threading.Event | None = None  # set once it ran (synchronous copies wait on it)


class SimStream:
    """A simulated stream: a FIFO of operations drained by one worker thread."""

    def __init__(self, backend: SimBackend, device: int, name: str, *, non_blocking: bool = True,
                 null: bool = False) -> None:
        self.backend = backend
        self._device = device
        self.name = name
        self.non_blocking = non_blocking
        self.null = null  #: the legacy null (default) stream of its device
        self._ops: collections.deque[_Op] = collections.deque()
        self._cv = threading.Condition()
        self._thread: threading.Thread | None = None
        self._stopping = False
        self._pending_error: BaseException | None = None  # failures since the last record
        self._sticky: BaseException | None = None

    @property
    def device(self) -> int:
        return self._device

    def __enter__(self) -> SimStream:
        """Make this the calling thread's current stream of its device (``with s:``)."""
        be = self.backend
        if self.device != be.get_device():
            raise RuntimeError(f"stream {self.name} is on device {self.device}, "
                               f"not on the current device {be.get_device()}")
        be.current.stack(self.device).append(self)
        return self

    def __exit__(self, *exc: object) -> None:
        stack = self.backend.current.stack(self.device)
        if stack and stack[-1] is self:
            stack.pop()

    def synchronize(self) -> None:
        """Block until everything queued so far has run (tests, ``get()``)."""
        with self._cv:
            while self._ops and not self._stopping:
                self._cv.wait()

    def submit(self, op: _Op) -> None:
        with self._cv:
            if self._stopping:
                raise DeviceError(f"simulated stream {self.name} is closed") from ClosedResourceError("backend closed")
            self._ops.append(op)
            if self._thread is None:
                self._thread = threading.Thread(target=self._run, name=f"aiopdbp-sim-{self.name}", daemon=True)
                self._thread.start()
            self._cv.notify_all()

    def stop(self) -> threading.Thread | None:
        with self._cv:
            self._stopping = True
            self._cv.notify_all()
            return self._thread

    def _run(self) -> None:
        closed = ClosedResourceError("simulated backend closed before the operation ran")
        while True:
            with self._cv:
                while not self._ops and not self._stopping:
                    self._cv.wait()
                if self._stopping:
                    for op in self._ops:  # fail what never ran: its events must not hang
                        if op.event is not None:
                            op.event.complete(closed)
                        if op.done is not None:
                            op.done.set()
                    self._ops.clear()
                    self._cv.notify_all()
                    return
                op = self._ops[0]
            self._execute(op, closed)
            if op.touches:
                self.backend.memory.touch(op.touches, self, -1)
            if op.done is not None:
                op.done.set()
            with self._cv:
                if self._ops and self._ops[0] is op:
                    self._ops.popleft()
                self._cv.notify_all()

    def _execute(self, op: _Op, closed: BaseException) -> None:
        be = self.backend
        if op.kind == "record":
            assert op.event is not None
            err = self._sticky or self._pending_error
            self._pending_error = None
            op.event.complete(err)
            return
        if op.kind == "wait":
            assert op.wait_for is not None
            err = self._wait(op.wait_for, closed)
            if err is not None:  # work ordered after failed work fails too
                self._pending_error = self._pending_error or err
            return
        gate_error = self._wait(op.gate, closed) if op.gate is not None else None
        be.log("start", op.kind, self.name, op.nbytes)
        error = self._sticky or op.fail or gate_error
        if error is None:
            delay = be.copy_delay + be.byte_delay * op.nbytes if op.kind != "kernel" else 0.0
            if delay > 0 and be.stopping.wait(delay):
                error = closed
            elif op.fn is not None:
                try:
                    op.fn()
                except Exception as exc:  # a simulated kernel raised: a device fault
                    error = exc
        if error is not None:
            if op.sticky:
                self._sticky = error
            self._pending_error = self._pending_error or error
            be.log("failed", op.kind, self.name, op.nbytes)
        else:
            be.log("end", op.kind, self.name, op.nbytes)


    def record_raw(self) -> SimEvent:
        """Queue a record, bypassing the null stream's implicit ordering."""
        op = _Op("record")
        op.event = SimEvent(f"{self.name}#{next(self.backend.labels)}")
        self.submit(op)
        return op.event

    def wait_raw(self, event: SimEvent) -> None:
        """Queue a wait, bypassing the null stream's implicit ordering."""
        op = _Op("wait")
        op.wait_for = event
        self.submit(op)

    def _wait(self, event: SimEvent, closed: BaseException) -> BaseException | None:
        """Stall this worker until ``event`` completes (or the backend closes)."""
        while not event.flag.wait(0.05):
            if self.backend.stopping.is_set():
                return closed
        return event.error


def _bytes_of(arr: SimArray) -> npt.NDArray[np.uint8]:
    """The array's memory as a flat uint8 view, in its own (C or F) order."""
    data = arr.unsafe_host_view()
    if data.flags.c_contiguous:
        flat = data.reshape(-1)
    elif data.flags.f_contiguous:
        flat = data.T.reshape(-1)
    else:
        raise ValueError("copies need a C- or F-contiguous device array (use contiguous())")
    return flat.view(np.uint8)


class SimBackend(DeviceBackend):
    """The simulated backend (see the module docstring).

    ``devices`` simulated devices; every copy takes ``copy_delay`` seconds
    plus ``byte_delay`` per byte; ``faults`` inject failures.
    """

    name = "sim"

    def __init__(
        self, devices: int = 1, *, copy_delay: float = 0.0, byte_delay: float = 0.0, faults: Iterable[Fault] = ()
    ) -> None:
        if devices < 1:
            raise ValueError("devices must be >= 1")
        if copy_delay < 0 or byte_delay < 0:
            raise ValueError("delays must be >= 0")
        self.devices = devices
        self.copy_delay = copy_delay
        self.byte_delay = byte_delay
        self.faults = list(faults)
        self.trace: list[TraceEntry] = []
        self.pinned_allocations = 0  #: calls of alloc_pinned (a pool allocates once)
        self.memory = SimMemory()  #: the caching allocator and the pinned ranges
        #: device memory freed while work on another stream still touched it (each a description)
        self.violations = self.memory.violations
        self.current: CurrentStreams[SimStream] = CurrentStreams()
        self._lock = threading.Lock()
        self._seq = itertools.count()
        self.labels = itertools.count()  #: numbers of event labels
        self._counts: collections.Counter[str] = collections.Counter()
        self.stopping = threading.Event()
        self._streams: list[SimStream] = []
        self._holds: list[SimHold] = []
        self._gates: dict[tuple[str, int], SimHold] = {}
        self._null = [self._new_stream(d, f"dev{d}-null", non_blocking=False, null=True) for d in range(devices)]
        self._closed = False

    # -- devices
    def device_count(self) -> int:
        return self.devices

    def get_device(self) -> int:
        return self.current.device

    def set_device(self, device: int) -> None:
        self._check_device(device)
        self.current.device = device

    # -- arrays and memory
    def asarray(self, host: Any, device: int | None = None) -> SimArray:
        """A device copy of host data, made synchronously (``cupy.asarray``)."""
        dev = self.get_device() if device is None else device
        self._check_device(dev)
        data = np.array(host, order="K", copy=True)
        if data.dtype.hasobject:
            raise TypeError("device arrays cannot hold Python objects")
        order: Order = "F" if data.flags.f_contiguous and not data.flags.c_contiguous else "C"
        out = self.empty(tuple(data.shape), data.dtype, order, dev)
        out.unsafe_host_view()[...] = data
        return out

    def inspect(self, obj: Any, stream: Stream | None = None) -> ArrayInfo:
        if not isinstance(obj, SimArray) or obj.backend is not self:
            raise TypeError(f"{type(obj).__name__} is not a device array of this simulated backend")
        data = obj.unsafe_host_view()
        return ArrayInfo(
            obj, obj.device, data.dtype, tuple(data.shape), tuple(data.strides), int(data.nbytes),
            order_of(tuple(data.shape), tuple(data.strides), data.itemsize),
            self.current_stream(obj.device) if stream is None else self._stream(stream),
        )

    def empty(self, shape: tuple[int, ...], dtype: npt.DTypeLike, order: Order, device: int,
              stream: Stream | None = None) -> SimArray:
        self._check_device(device)
        dt = np.dtype(dtype)
        if dt.hasobject:
            raise TypeError("device arrays cannot hold Python objects")
        s = self.current_stream(device) if stream is None else self._stream(stream)
        nbytes = dt.itemsize * int(np.prod(shape, dtype=np.int64))
        raw = self.memory.alloc(nbytes, s)
        data = np.ndarray(shape, dt, buffer=raw, order=order) if nbytes else np.empty(shape, dt, order=order)
        return SimArray(data, device, self, _Block(raw, s, self))

    def contiguous(self, array: Any, stream: Stream) -> SimArray:
        info = self.inspect(array)
        out = self.empty(info.shape, info.dtype, "C", info.device)
        src, dst = array.unsafe_host_view(), out.unsafe_host_view()
        self._queue(stream, "kernel", lambda: np.copyto(dst, src), info.nbytes, (array, out))
        return out

    def as_tensor(self, array: Any) -> SimTensor:
        """``array`` as a :class:`SimTensor` over the same memory (torch has
        no simulated device: this stands in for ``torch.from_dlpack``)."""
        if not isinstance(array, SimArray) or array.backend is not self:
            raise TypeError(f"{type(array).__name__} is not a device array of this simulated backend")
        return SimTensor(array.unsafe_host_view(), array.device, self, array._block)

    def alloc_pinned(self, nbytes: int) -> HostBuffer:
        if nbytes < 0:
            raise ValueError("nbytes must be >= 0")
        self.pinned_allocations += 1
        buf = np.zeros(nbytes, dtype=np.uint8)
        self.memory.pin(buf)
        return buf

    def is_pinned(self, buf: Any) -> bool:
        """True for memory inside an :meth:`alloc_pinned` allocation."""
        return self.memory.is_pinned(buf)

    # -- streams and events
    def create_stream(self, device: int, *, non_blocking: bool = True) -> SimStream:
        """A new stream (non-blocking unless asked: ``cupy.cuda.Stream(non_blocking=False)``
        is the user's default, ordered against the null stream)."""
        self._check_device(device)
        return self._new_stream(device, f"dev{device}-s{len(self._streams)}", non_blocking=non_blocking)

    def current_stream(self, device: int) -> SimStream:
        """The calling thread's current stream of ``device``: the innermost
        ``with stream:`` of this thread, else the legacy null stream."""
        self._check_device(device)
        stack = self.current.stack(device)
        return stack[-1] if stack else self._null[device]

    def null_stream(self, device: int) -> SimStream:
        """The legacy null (default) stream of ``device``."""
        self._check_device(device)
        return self._null[device]

    def record_event(self, stream: Stream) -> SimEvent:
        s = self._stream(stream)
        op = _Op("record")
        op.event = SimEvent(f"{s.name}#{next(self.labels)}")
        self._submit(s, op)
        return op.event

    def wait_event(self, stream: Stream, event: Event) -> None:
        if not isinstance(event, SimEvent):
            raise TypeError(f"expected a SimEvent, got {type(event).__name__}")
        op = _Op("wait")
        op.wait_for = event
        self._submit(self._stream(stream), op)

    # -- copies
    def copy_d2h(self, src: Any, src_offset: int, dst: HostBuffer, stream: Stream) -> None:
        mem = _bytes_of(self.inspect(src).array)
        n = _check_range(src_offset, dst.nbytes, mem.nbytes)
        self._queue(stream, "d2h", lambda: np.copyto(dst, mem[src_offset : src_offset + n]), n, (src,),
                    sync=not self.is_pinned(dst))

    def copy_h2d(self, src: HostBuffer, dst: Any, dst_offset: int, stream: Stream) -> None:
        mem = _bytes_of(self.inspect(dst).array)
        n = _check_range(dst_offset, src.nbytes, mem.nbytes)
        self._queue(stream, "h2d", lambda: np.copyto(mem[dst_offset : dst_offset + n], src), n, (dst,),
                    sync=not self.is_pinned(src))

    def copy_d2d(self, src: Any, dst: Any, stream: Stream) -> None:
        a, b = _bytes_of(self.inspect(src).array), _bytes_of(self.inspect(dst).array)
        if a.nbytes != b.nbytes:
            raise ValueError(f"copy_d2d of {a.nbytes} bytes into {b.nbytes}")
        self._queue(stream, "d2d", lambda: np.copyto(b, a), a.nbytes, (src, dst))

    # -- simulation controls
    def launch(self, stream: Stream, kernel: Callable[[], None], uses: Iterable[SimArray] = ()) -> None:
        """Queue a simulated kernel; an exception it raises is a device fault.
        ``uses``: the arrays it touches (for :attr:`violations`; the kernel
        itself should hold their memory, not the arrays)."""
        self._queue(stream, "kernel", kernel, 0, tuple(uses))

    def hold(self, stream: Stream) -> SimHold:
        """Stall ``stream`` from now on until the returned hold is released."""
        event = SimEvent("hold")
        hold = SimHold(event)
        with self._lock:
            self._holds.append(hold)
        self.wait_event(stream, event)
        return hold

    def gate(self, op: OpKind, nth: int) -> SimHold:
        """Make the ``nth`` operation of kind ``op`` (counted as for
        :class:`Fault`, not yet queued) wait, on its stream, until the returned
        hold is released: deterministic interleavings for tests."""
        hold = SimHold(SimEvent(f"gate {op} #{nth}"))
        with self._lock:
            self._gates[(op, nth)] = hold
            self._holds.append(hold)
        return hold

    def note(self, text: str) -> int:
        """Add a caller's mark to :attr:`trace`; returns its sequence number."""
        return self.log("note", text, "", 0)

    def close(self) -> None:
        """Stop and join every worker; queued operations fail (idempotent)."""
        if self._closed:
            return
        self._closed = True
        self.stopping.set()
        with self._lock:
            holds, streams = list(self._holds), list(self._streams)
        threads = [t for t in (s.stop() for s in streams) if t is not None]  # before waking them
        closed = ClosedResourceError("simulated backend closed")
        for hold in holds:
            if not hold.event.flag.is_set():
                hold.event.complete(closed)
        for t in threads:
            t.join()

    # -- internals
    def _submit(self, s: SimStream, op: _Op) -> None:
        """Queue ``op`` on ``s`` with the legacy null stream's implicit ordering."""
        if op.kind != "wait":
            if s.null:
                with self._lock:
                    blocking = [b for b in self._streams if b.device == s.device and not b.non_blocking
                                and not b.null]
                for b in blocking:
                    s.wait_raw(b.record_raw())
            elif not s.non_blocking:
                s.wait_raw(self._null[s.device].record_raw())
        s.submit(op)

    def _new_stream(self, device: int, name: str, *, non_blocking: bool = True, null: bool = False) -> SimStream:
        s = SimStream(self, device, name, non_blocking=non_blocking, null=null)
        with self._lock:
            self._streams.append(s)
        return s

    def _stream(self, stream: Stream) -> SimStream:
        if not isinstance(stream, SimStream) or stream.backend is not self:
            raise TypeError(f"expected a stream of this simulated backend, got {type(stream).__name__}")
        return stream

    def _check_device(self, device: int) -> None:
        if not 0 <= device < self.devices:
            raise ValueError(f"no simulated device {device} (devices: {self.devices})")

    def _queue(self, stream: Stream, kind: OpKind, fn: Callable[[], None], nbytes: int,
               uses: tuple[SimArray, ...] = (), *, sync: bool = False) -> None:
        s = self._stream(stream)
        op = _Op(kind, fn, nbytes)
        with self._lock:
            self._counts[kind] += 1
            n = self._counts[kind]
            gate = self._gates.pop((kind, n), None)
        if gate is not None:
            op.gate = gate.event
        for fault in self.faults:
            if fault.op == kind and fault.nth == n:
                err = SimFault(f"injected failure of {kind} #{n}")
                if fault.at == "submit":
                    raise DeviceError(f"simulated {kind} failed") from err
                op.fail, op.sticky = err, fault.sticky
        blocks = tuple(id(a._block.raw) for a in uses if a._block is not None)
        if blocks:
            op.touches = blocks
            self.memory.touch(blocks, s, +1)
        if sync:
            op.done = threading.Event()
        self._submit(s, op)
        if op.done is not None:  # pageable host memory: the copy is synchronous
            op.done.wait()

    def log(self, phase: str, kind: str, stream: str, nbytes: int) -> int:
        with self._lock:
            seq = next(self._seq)
            self.trace.append(TraceEntry(seq, phase, kind, stream, nbytes, time.perf_counter()))
        return seq


def _check_range(offset: int, n: int, size: int) -> int:
    if offset < 0 or offset + n > size:
        raise ValueError(f"byte range [{offset}, {offset + n}) outside a {size}-byte array")
    return n
