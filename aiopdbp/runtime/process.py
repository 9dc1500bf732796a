"""Generalized processes (GP, SPEC section 3) and the CPI (SPEC section 7).

A GP is a named unit of computation living in one host's event loop, with a
private pipe as its inbox.  The paper's *communication programming
interface* maps onto methods of :class:`GP` (and :class:`~aiopdbp.runtime.node.Node`):

===================  =====================================================
paper (CPI)          aiopdbp
===================  =====================================================
``prcsReg``          ``await node.register(name, ptype=PType.CPU)``
``prcsApplyPipe``    ``await gp.apply_pipe()``
``sendData``         ``await gp.send(dest, data, com=...)`` (INFO) /
                     ``await gp.send_stream(dest, data)`` (SINFO)
``recvData``         ``await gp.recv()``
``prcsReleasePipe``  ``await gp.release_pipe()``
``prcsFree``         ``await gp.free()``
===================  =====================================================

``async with node.process(name) as gp`` does register + apply on entry and
release + free on exit.  NGP (``PType.CPU``) and SGP (``PType.GPU``,
:mod:`aiopdbp.runtime.sgp`) have the same interface; device arrays given to
``send``/``send_stream`` take the device path (:mod:`aiopdbp.streams.devicepath`).
"""

from __future__ import annotations

import asyncio
import contextlib
import pickle
import sys
from collections import deque
from collections.abc import Awaitable, Callable, Coroutine, Iterable
from typing import TYPE_CHECKING, Any, Protocol

import numpy as np

from aiopdbp.wire.mesp import Kind
from aiopdbp.device.backend import is_device_array
from aiopdbp.errors import ClosedResourceError, NoPipeError, PDBPError, WouldBlock
from aiopdbp.wire.message import CREDIT_OVERHEAD, Message, credit_cost
from aiopdbp.wire.payload import travels_raw
from aiopdbp.arrays import KINDS, arrival, cpu_tensor_array, host_array
from aiopdbp.routing.pipes import Pipe
from aiopdbp.streams.receiver import DEFAULT_SEGMENT, IncomingStream
from aiopdbp.streams.sender import send_stream
from aiopdbp.streams.devicebind import Captured
from aiopdbp.hosts.tables import PType, Tables

if TYPE_CHECKING:
    from aiopdbp.routing.router import Router
    from aiopdbp.streams.devicepath import DevicePath
    from aiopdbp.streams.table import StreamTable

__all__ = ["FAILED_CLOSE_TIMEOUT", "GP", "GPHost", "snapshot"]

#: how long a GP leaving with an exception tries to close what it owns
FAILED_CLOSE_TIMEOUT = 1.0


def snapshot(data: Any, allow_pickle: bool, shared: bool) -> Any:
    """The payload as the receiver will see it, taken *now*.

    ``send`` returns as soon as the CDU is queued, so a mutable payload must
    not be aliased: bytes stay as they are (immutable), other bytes-likes
    become bytes, writable arrays are copied (read-only ones are shared);
    a multicast shares one read-only copy among its receivers.  Python
    objects are pickled and unpickled (protocol 5) so that a local receiver
    gets what a remote one would -- and an unpicklable payload fails at the
    sender in both cases.
    """
    if data is None or type(data) is bytes:
        return data
    if isinstance(data, np.generic):
        data = np.asarray(data)  # numpy scalars travel as 0-d arrays
    elif not isinstance(data, np.ndarray) and (arr := host_array(data)) is not None:
        data = arr  # a tensor (or any host array by DLPack): an ndarray over its memory
    if isinstance(data, np.ndarray):
        # the wire's rule, here too: one host refuses what many would
        if not travels_raw(data, allow_pickle):
            return _pickle_copy(data)
        if _frozen(data):
            return data
        out = data.copy()
        if shared:
            out.flags.writeable = False
        return out
    if is_device_array(data):
        raise TypeError("a device array is sent with await gp.send(...) (it waits for the device); "
                        "send_nowait() cannot")
    if isinstance(data, (bytearray, memoryview)):
        return bytes(data)
    try:
        return bytes(memoryview(data))
    except TypeError:
        pass
    if not allow_pickle:
        raise TypeError(f"payload of type {type(data).__name__} is not bytes-like or an ndarray; "
                        "open the node with allow_pickle=True to send Python objects "
                        "(pickle: trusted clusters only)")
    return _pickle_copy(data)


def _frozen(arr: np.ndarray[Any, Any]) -> bool:
    """True when no one can change ``arr``'s memory: read-only all the way
    down to an immutable ``bytes`` object (a read-only *view* of writable
    memory is not frozen)."""
    if arr.flags.writeable:
        return False
    base: Any = arr.base
    while isinstance(base, np.ndarray):
        if base.flags.writeable:
            return False
        base = base.base
    if isinstance(base, memoryview):
        base = base.obj
    return isinstance(base, bytes)


async def _raising(exc: Exception) -> Any:
    """An awaitable that raises ``exc``: what a plain function returning an
    awaitable hands back for an error found at the call, so that it is raised
    where the caller awaits, as an ``async def`` would."""
    raise exc


def _check_timeout(timeout: float | None) -> None:
    """``timeout`` is None or a number >= 0 (as ``queue.Queue.get`` wants)."""
    if timeout is not None and not timeout >= 0:  # (NaN too)
        raise ValueError(f"timeout must be None or a number >= 0, not {timeout!r}")


def _check_dest(dest: Any) -> None:
    """A multicast's names are strings (bytes would iterate as ints)."""
    if isinstance(dest, (bytes, bytearray, memoryview)) or not hasattr(dest, "__iter__"):
        raise TypeError(f"dest must be a GP name (str) or an iterable of names, not {type(dest).__name__}")


def _ownable(arr: np.ndarray[Any, Any]) -> bool:
    """A writable array whose bytes can travel from its own memory as one
    MPI message (see :meth:`GP.send`, "Buffer ownership")."""
    dt = arr.dtype
    return (arr.flags.c_contiguous and not dt.hasobject and dt.fields is None and dt.subdtype is None
            and not _frozen(arr))


def _named_now(item: Message | IncomingStream) -> bool:
    """Whether ``item`` names its sender already (else :meth:`GP._named` waits for it)."""
    return type(item[0] if type(item) is Message else item.source) is str


def _flat_writable(out: Any) -> memoryview:
    """``out`` as a flat writable byte view, or a clear error."""
    if not isinstance(out, np.ndarray) and (arr := host_array(out)) is not None:
        out = arr  # a CPU tensor: its memory
    try:
        mv = memoryview(out)
    except TypeError:
        raise TypeError(f"recv_into needs a writable buffer, not {type(out).__name__}") from None
    if mv.readonly:
        raise ValueError("recv_into needs a writable buffer (this one is read-only)")
    if not mv.c_contiguous:
        raise ValueError("recv_into needs a C-contiguous buffer")
    return mv.cast("B") if mv.ndim != 1 or mv.format != "B" else mv


def _size(data: Any) -> int:
    return len(data) if type(data) is bytes else int(data.nbytes)


def _views(item: Any, flat: memoryview) -> bool:
    """Whether ``item`` is a message whose array payload lies at the start of ``flat``."""
    data = _host_data(item.data) if type(item) is Message else None
    if not isinstance(data, np.ndarray) or not flat.nbytes:
        return False
    start = np.frombuffer(flat, dtype=np.uint8, count=1).ctypes.data
    return bool(data.ctypes.data == start)


_SHORT, _COMMAND = Kind.SHORT, Kind.COMMAND


def _arrive(item: Message | IncomingStream, kind: str) -> Message | IncomingStream:
    """``item`` with its array as the receiver asked (:func:`aiopdbp.arrays.arrival`)."""
    if type(item) is Message:
        return _arrived(item, kind)
    if kind != "auto" and isinstance(item, IncomingStream):
        item.arrays = kind
    return item


def _arrived(msg: Message, kind: str) -> Message:
    data = msg[3]
    if type(data) is np.ndarray and (kind != "auto" or data.dtype.metadata is not None):
        return Message((msg[0], msg[1], msg[2], arrival(data, kind), msg[4]))
    return msg


def _host_data(data: Any) -> Any:
    """A received tensor as the ndarray over its memory (recv_into's checks)."""
    if data is None or type(data) is bytes or type(data) is np.ndarray:
        return data
    arr = host_array(data)
    return data if arr is None else arr


def _check_com(com: int) -> None:
    if type(com) is not int and not isinstance(com, int) or not 0 <= com <= 0xFFFFFFFF:
        raise ValueError(f"com must be an int in [0, 2**32), got {com!r}")


def _pickle_copy(obj: Any) -> Any:
    buffers: list[pickle.PickleBuffer] = []
    payload = pickle.dumps(obj, protocol=5, buffer_callback=buffers.append)
    return pickle.loads(payload, buffers=[b.raw() for b in buffers])


class GPHost(Protocol):
    """What a GP needs of its node (:class:`aiopdbp.runtime.node.Node`, which
    creates it): the node's parts, and the table operations it carries out."""

    @property
    def rank(self) -> int: ...
    @property
    def allow_pickle(self) -> bool: ...

    @property
    def arrays(self) -> str: ...
    @property
    def router(self) -> Router: ...
    @property
    def streams(self) -> StreamTable: ...
    @property
    def devices(self) -> DevicePath: ...
    @property
    def tables(self) -> Tables: ...
    @property
    def drive(self) -> Callable[[Callable[[], bool]], Awaitable[None]] | None: ...
    @property
    def owned_min(self) -> int | None: ...
    async def register(self, name: str, ptype: PType = PType.CPU, *, bind: bool = False,
                       device: int | None = None, to_device: bool = False) -> GP: ...
    async def lookup(self, name: str, timeout: float | None = None) -> int: ...
    async def apply_pipe(self, gp: GP, timeout: float | None) -> None: ...
    async def release_pipe(self, gp: GP, reason: BaseException | None = None) -> None: ...
    async def free(self, gp: GP, *, wait: bool = True) -> None: ...


class GP:
    """A generalized process: a name, a private pipe, send and receive.

    Create GPs with :meth:`Node.register` or :meth:`Node.process`.
    """

    def __init__(self, node: GPHost, name: str, pid: int, ptype: PType) -> None:
        self.node = node
        self.name = name
        self.pid = pid
        self.ptype = ptype
        self._pipe: Pipe[Any] | None = None
        self._freed = False
        self._owned: list[Any] = []       # closed when the GP is freed (own())
        #: taken from the pipe, then a wait for its sender's name was cancelled
        self._unnamed: Message | IncomingStream | None = None
        #: more items taken out of arrival order's way by recv_into (after _unnamed)
        self._stepped: deque[Message | IncomingStream] = deque()
        self._router = node.router
        self._into_task: asyncio.Task[Any] | None = None   # the task in recv_into, if any
        self._waiting = 0                               # recv calls waiting for an item now
        self._drive = node.drive   # a receiver waiting for a reply steps MPI itself
        self._try_send = node.router.try_send  # hot path: one call, no coroutine, when nothing waits
        # arrays this large take send_owned (MPI_Send ownership); smaller ones the copy path
        self._owned_min = node.owned_min if node.owned_min is not None else sys.maxsize

    def __repr__(self) -> str:
        return f"<GP {self.name!r} pid={self.pid} {self.ptype.name} on node {self.node.rank}>"

    @property
    def pipe(self) -> Pipe[Any] | None:
        """The bound private pipe (``None`` before ``apply_pipe``)."""
        return self._pipe

    def _check(self) -> None:
        if self._freed:
            raise ClosedResourceError(f"GP {self.name!r} was freed")

    def bound(self, pipe: Pipe[Any] | None) -> None:
        """The node bound (or, with None, released) this GP's private pipe."""
        self._pipe = pipe

    def mark_freed(self) -> None:
        """The node freed this GP (its node closed)."""
        self._pipe = None
        self._freed = True

    # -- CPI: pipes --------------------------------------------------------------
    async def apply_pipe(self, timeout: float | None = None) -> None:
        """Bind a private pipe from the pool (the paper's prcsApplyPipe).

        Idempotent.  Waits up to ``timeout`` seconds when the pool is exhausted.

        Cancellation: a cancelled apply binds no pipe.
        """
        self._check()
        if self._pipe is None:
            await self.node.apply_pipe(self, timeout)

    async def release_pipe(self, *, reason: BaseException | None = None) -> None:
        """Return the private pipe to the pool (prcsReleasePipe).

        Items still queued in it are discarded; later local senders get
        ``NoPipeError`` until a pipe is applied again.  Idempotent.
        ``reason``: the exception the GP gives up with; the senders of the
        streams it was receiving see it in their ``BrokenResourceError``.

        Cancellation: the release completes before the first suspension, so
        a cancelled call has released the pipe.
        """
        if self._pipe is not None:
            await self.node.release_pipe(self, reason)

    async def free(self, *, reason: BaseException | None = None) -> None:
        """Unregister the GP (prcsFree); releases its pipe first, then closes
        what it still owns (a :class:`~aiopdbp.sync.Barrier` or
        :class:`~aiopdbp.sync.Neighbours` not closed: see :meth:`own`).
        Idempotent.  With ``reason`` (the GP leaves with an exception) it
        waits for nobody: the table updates are sent without waiting for
        rank 0, and closing what it owns is bounded by
        :data:`FAILED_CLOSE_TIMEOUT` -- the failure must be reported even
        when a peer's event loop is blocked.

        Cancellation: as for ``release_pipe``; a cancelled close of what it
        owns still frees the GP.
        """
        if self._freed:
            return
        await self.release_pipe(reason=reason)
        try:
            if reason is None:
                await self.aclose_owned()
            else:
                with contextlib.suppress(TimeoutError):
                    async with asyncio.timeout(FAILED_CLOSE_TIMEOUT):
                        await self.aclose_owned()
        finally:
            self._freed = True
            await self.node.free(self, wait=reason is None)

    def own(self, resource: Any) -> None:
        """Close ``resource`` (anything with an ``async aclose()``) when this
        GP is freed, if it is still open then: a program that returns
        without closing its Barrier still ends cleanly.  Barriers and
        Neighbours call this when they open; ``resource.aclose()`` must be
        idempotent and call :meth:`disown`."""
        if resource not in self._owned:
            self._owned.append(resource)

    def disown(self, resource: Any) -> None:
        """``resource`` was closed by its user: the GP no longer closes it."""
        if resource in self._owned:
            self._owned.remove(resource)

    async def aclose_owned(self) -> None:
        """Close everything this GP still owns, concurrently (a barrier's
        close waits for its peers' closes).  Errors of peers that went away
        meanwhile (:class:`~aiopdbp.errors.PDBPError`) are ignored: this is
        cleanup, the GP is leaving anyway.

        Cancellation: the closes are cancelled; what they hold is freed when
        the node closes.
        """
        owned, self._owned = self._owned[::-1], []
        if not owned:
            return
        results = await asyncio.gather(*(r.aclose() for r in owned), return_exceptions=True)
        for r in results:
            if isinstance(r, BaseException) and not isinstance(r, PDBPError):
                raise r

    async def __aenter__(self) -> GP:
        """``async with gp``: apply a pipe on entry.

        Cancellation: as for :meth:`apply_pipe`.
        """
        await self.apply_pipe()
        return self

    async def __aexit__(self, exc_type: object, exc: BaseException | None, tb: object) -> None:
        """Free the GP on exit (:meth:`free`), whatever the exit.

        Cancellation: as for :meth:`free`.
        """
        await self.free(reason=exc)

    # -- CPI: sending -----------------------------------------------------------
    def send(self, dest: str | Iterable[str], data: Any = None, *, com: int = 0, kind: Kind = Kind.SHORT,
             timeout: float | None = None, copy: bool = True, stream: Any = None) -> Coroutine[Any, Any, None]:
        """Send a short or command message (the patent's INFO); returns once queued.

        ``dest`` is a GP name or an iterable of names (multicast: one CDU with a
        set of destinations, copied per host only at the last hop).  A name
        that is not registered yet is waited for by the name rule (the node's
        ``name_timeout``, 30 s by default, or ``timeout``), then
        :class:`~aiopdbp.errors.UnknownProcessError`.  A full destination
        (its pipe, or its credit on its host) makes the call wait
        (backpressure): forever without ``timeout``, else up to ``timeout``
        seconds, then ``TimeoutError`` saying what it waited for.

        A device array (CuPy, ``__cuda_array_interface__``, CUDA DLPack, a
        simulated one) takes the device path and the call returns once
        aiopdbp no longer reads it (see :mod:`aiopdbp.streams.devicepath`);
        ``copy=False`` hands it to an SGP of this node on its device by
        reference: the sender must not touch it again.  ``send`` is a plain
        function returning the awaitable: the producer's pending work is
        captured at the call, on ``stream`` (default: the current stream).

        Buffer ownership (as ``MPI_Send``): a writable numeric array of
        ``RemoteConfig.large`` bytes or more (32 KiB) sent to a GP on another
        host is not copied: it travels from its own memory as one MPI message,
        and the call returns once MPI no longer reads it -- then the caller
        may reuse it.  Everything else is snapshot (:func:`snapshot`) and the
        call returns once queued.

        Cancellation: a cancelled send has queued nothing (reservations already
        taken are given back) -- except a large array whose payload was
        already handed to MPI: that message is sent, and the call waits until
        MPI no longer reads the array before it raises ``CancelledError``
        (:meth:`~aiopdbp.routing.router.Router.send_owned`).
        """
        if data is not None and type(data) is not bytes and type(data) is not np.ndarray:
            try:
                if (arr := cpu_tensor_array(data)) is not None:
                    data = arr  # its memory as an ndarray, before the (slower) device checks
                elif is_device_array(data):
                    data = self.node.devices.capture(self, data, stream)  # now: the caller's stream is current now
                    stream = None
            except Exception as exc:
                return _raising(exc)
        if stream is not None:
            return _raising(TypeError("stream= is for device arrays"))
        return self._send(dest, data, com, kind, timeout, copy)

    async def _send(self, dest: str | Iterable[str], data: Any, com: int, kind: Kind, timeout: float | None,
                    copy: bool) -> None:
        """Body of :meth:`send` (``data`` a :class:`Captured` device array or host data).

        Cancellation: as for :meth:`send`.
        """
        if self._freed:
            raise ClosedResourceError(f"GP {self.name!r} was freed")
        if type(com) is not int or not 0 <= com <= 0xFFFFFFFF:
            _check_com(com)
        if kind is not _SHORT and kind is not _COMMAND:
            raise ValueError(f"send() carries Kind.SHORT or Kind.COMMAND messages, not {kind!r} "
                             "(streams go with send_stream)")
        if timeout is not None:
            _check_timeout(timeout)
        if not isinstance(dest, str):
            _check_dest(dest)
            names = list(dest)
            for n in names:
                if not isinstance(n, str):
                    raise TypeError(f"dest: GP names are strings, not {type(n).__name__} ({n!r})")
            await self._multicast(names, data, com, kind, timeout)
            return
        # Snapshot first: a refused payload must not hold a reservation.
        if type(data) is bytes:
            cost = len(data) + CREDIT_OVERHEAD
        else:
            if data is not None:
                if type(data) is not np.ndarray and (arr := host_array(data)) is not None:
                    data = arr  # a tensor's memory as an ndarray (no copy): the paths numpy takes
                if type(data) is np.ndarray and data.nbytes >= self._owned_min and _ownable(data):
                    # large: sent from this very buffer, the call returns once it may be reused
                    await self._router.send_owned(dest, (self.name, kind, com, data, self.pid),
                                                  data.nbytes + CREDIT_OVERHEAD, timeout,
                                                  lambda d: snapshot(d, self.node.allow_pickle, False))
                    return
                if type(data) is Captured:
                    await self.node.devices.send(self, self.node.streams, dest, data, com=com, kind=kind,
                                                 timeout=timeout, copy=copy)
                    return
                data = snapshot(data, self.node.allow_pickle, False)
            cost = credit_cost(data)
        fields = (self.name, kind, com, data, self.pid)
        if not self._try_send(dest, fields, cost):  # the router routed it: nothing to wait for
            await self._router.send_waiting(dest, fields, cost, timeout)

    async def _multicast(self, names: list[str], data: Any, com: int, kind: Kind,
                         timeout: float | None) -> None:
        node = self.node
        router = self._router
        if not names:
            raise ValueError("multicast to an empty set of names")
        if type(data) is Captured:  # one device transfer per receiver
            for name in dict.fromkeys(names):
                await node.devices.send(self, node.streams, name, data, com=com, kind=kind, timeout=timeout, copy=True)
            return
        pids = tuple(dict.fromkeys([await router.resolve(n, timeout) for n in names]))
        data = snapshot(data, node.allow_pickle, len(pids) > 1)
        await router.multicast(f"the multicast group {names!r}", pids, (self.name, kind, com, data, self.pid),
                               credit_cost(data), timeout)

    def send_nowait(self, dest: str, data: Any = None, *, com: int = 0, kind: Kind = Kind.SHORT) -> None:
        """Send to one GP without waiting; raises ``WouldBlock`` when it is
        full, ``UnknownProcessError`` for a name not registered (now).

        The payload is always snapshot (a writable array is copied, large or
        not): without a wait there is no moment at which MPI is known to be
        done with the caller's buffer.  ``await send`` avoids the copy."""
        self._check()
        _check_com(com)
        if kind is not Kind.SHORT and kind is not Kind.COMMAND:
            raise ValueError(f"send_nowait() carries Kind.SHORT or Kind.COMMAND messages, not {kind!r}")
        data = snapshot(data, self.node.allow_pickle, False)
        self._router.send_nowait(dest, (self.name, kind, com, data, self.pid), credit_cost(data))

    async def command(self, dest: str | Iterable[str], com: int, data: Any = None, *,
                      timeout: float | None = None) -> None:
        """Send a command message (``Kind.COMMAND``) with code ``com``.

        Cancellation: as for :meth:`send`.
        """
        await self.send(dest, data, com=com, kind=Kind.COMMAND, timeout=timeout)

    def send_stream(self, dest: str, data: Any, *, segment_size: int | None = None, com: int = 0,
                    timeout: float | None = None, copy: bool = True, stream: Any = None) -> Coroutine[Any, Any, int]:
        """Send a data stream (the patent's SINFO); returns once delivered.

        ``data`` is one buffer/array (cut into ``segment_size``-byte segments,
        default 1 MiB; arrays along their first axis) or an iterable / async
        iterable of buffers or arrays produced over time.  Returns the number
        of bytes sent, after the receiver has taken the whole stream -- but a
        stream of one segment of at most 64 KiB travels whole in one record
        and returns once sent (a copy taken), as :meth:`send` does: what its
        receiver does with it is not reported back.  ``timeout`` bounds the
        whole call.

        A device array is staged through pinned chunks across nodes (its
        segments are the chunks: ``min(segment_size, chunk_size)`` bytes of
        whole rows, default one chunk), copied device-to-device on one node
        (``copy=False``: by reference; ``stream``: see :meth:`send`).

        Cancellation: a cancelled (or failing) sender sends an ABORT, so the
        receiver's stream ends with ``StreamError``; the binding is undone and
        the pipes return to their pools.  A short stream (one record) is sent
        or not: cancelled before its record is routed (while it waits for
        credit, or queues behind other streams' segments), nothing goes.  A larger
        stream whose last segment had left may be read in full by the
        receiver: only the wait for its delivery is cancelled -- after a
        ``TimeoutError`` too, so a retry may deliver the data twice.

        A plain function returning the awaitable (a device array's producer
        stream is captured at the call); what is wrong is raised by the await.
        """
        try:
            self._check()
            _check_com(com)
            _check_timeout(timeout)
            if not isinstance(dest, str):
                raise TypeError(f"send_stream sends to one GP: dest is its name (a str), not {type(dest).__name__}")
            if segment_size is not None and (not isinstance(segment_size, int) or isinstance(segment_size, bool)):
                raise TypeError(f"segment_size is a number of bytes (an int), not {segment_size!r}")
            if type(data) is not np.ndarray and (arr := host_array(data)) is not None:
                data = arr  # a tensor's memory as an ndarray: one buffer, not an iterable of rows
            if type(data) is not np.ndarray and is_device_array(data):  # a plain host array is the commonest
                cap = self.node.devices.capture(self, data, stream)  # now: the caller's stream is current now
                return self.node.devices.send_stream(self, self.node.streams, dest, cap, segment_size=segment_size,
                                                     com=com, timeout=timeout, copy=copy)
            if stream is not None:
                raise TypeError("stream= is for device arrays")
        except Exception as exc:
            return _raising(exc)
        return send_stream(self.node.streams, self.pid, self._router.resolve, dest, data, com=com, timeout=timeout,
                           segment_size=DEFAULT_SEGMENT if segment_size is None else segment_size)

    # -- CPI: receiving ------------------------------------------------------------
    def _inbox(self) -> Pipe[Any]:
        self._check()
        pipe = self._pipe
        if pipe is None:
            raise NoPipeError(f"GP {self.name!r} has no private pipe: call apply_pipe() first")
        return pipe

    async def recv(self, timeout: float | None = None, *,
                   arrays: str | None = None) -> Message | IncomingStream:
        """The next item in arrival order: a :class:`Message` or an
        :class:`~aiopdbp.streams.receiver.IncomingStream` (the paper's recvData).

        Raises ``TimeoutError`` after ``timeout`` seconds with nothing.
        ``arrays`` picks what an array arrives as, for this call: ``"auto"``
        (as sent: a tensor as a tensor where torch imports), ``"numpy"`` or
        ``"torch"``; default: the node's ``arrays`` option.

        Cancellation: a cancelled receive takes nothing from the pipe.
        """
        if arrays is not None and arrays not in KINDS:
            raise ValueError(f"arrays is one of {KINDS}, not {arrays!r}")
        pipe = self._pipe
        item: Message | IncomingStream
        if pipe is None or self._freed or self._unnamed is not None or self._into_task is not None:
            if self._into_task is not None and self._into_task is not asyncio.current_task():
                raise RuntimeError(f"GP {self.name!r}: recv while recv_into waits: the message "
                                   "meant for its buffer could go to either (one receiver at a time)")
            if self._unnamed is not None:
                item = self._take_held()
                return _arrive(await self._named(item), arrays or self.node.arrays)
            pipe = self._inbox()
        if len(pipe):  # the common case under load: no coroutine, no exception
            item = pipe.receive_nowait()
        else:
            self._waiting += 1
            try:
                if timeout is None:
                    if self._drive is not None:
                        await self._drive(pipe.ready)
                    # (the driver usually ends with an item there: no coroutine for it)
                    item = pipe.receive_nowait() if len(pipe) else await pipe.receive()
                else:
                    _check_timeout(timeout)
                    try:
                        async with asyncio.timeout(timeout):
                            if self._drive is not None:
                                await self._drive(pipe.ready)
                            item = await pipe.receive()
                    except TimeoutError:
                        raise TimeoutError(f"GP {self.name!r} received nothing within {timeout:g} s") from None
            finally:
                self._waiting -= 1
        kind = arrays or self.node.arrays
        if type(item) is Message:
            if type(item[0]) is str:
                data = item[3]
                if type(data) is not np.ndarray or (kind == "auto" and data.dtype.metadata is None):
                    return item  # the commonest
                return _arrived(item, kind)
        elif type(item.source) is str:
            return _arrive(item, kind)
        return _arrive(await self._named(item), kind)

    async def _named(self, item: Message | IncomingStream) -> Message | IncomingStream:
        """``item`` with its sender's name: its data overtook the table update
        that registers the sender (:class:`~aiopdbp.hosts.tables.PendingName`)."""
        try:
            name = await self._router.source_name(item.source_pid)
        except asyncio.CancelledError:
            self._hold(item, front=True)  # the next recv returns it: nothing is lost
            raise
        if type(item) is Message:
            return Message((name, item[1], item[2], item[3], item[4]))
        item.source = name
        return item

    def recv_nowait(self) -> Message | IncomingStream:
        """The next item, or ``WouldBlock`` when the pipe is empty.  (An item
        whose sender's registration has not reached this host yet names it
        ``"<pid N>"``; :meth:`recv` waits for the name.)"""
        if self._unnamed is not None:
            return _arrive(self._take_held(), self.node.arrays)
        item: Message | IncomingStream = self._inbox().receive_nowait()
        return _arrive(item, self.node.arrays)

    def _take_held(self) -> Message | IncomingStream:
        item = self._unnamed
        assert item is not None
        self._unnamed = self._stepped.popleft() if self._stepped else None
        return item

    def _hold(self, item: Message | IncomingStream, *, front: bool = False) -> None:
        """Keep ``item`` for the next receive (``front``: before those held)."""
        if self._unnamed is None:
            self._unnamed = item
        elif front:
            self._stepped.appendleft(self._unnamed)
            self._unnamed = item
        else:
            self._stepped.append(item)

    async def recv_into(self, out: Any, timeout: float | None = None) -> Message:
        """Receive the next message into ``out``, a writable C-contiguous
        buffer (a numpy array, ``bytearray``, ...), as ``comm.Recv(buf)`` does.

        The next item must be a message whose payload is bytes or a numeric
        numpy array of at most ``out``'s size; its bytes go to the start of
        ``out`` and the returned :class:`Message`'s ``data`` views ``out``
        (an array of the sent dtype and shape, or a ``memoryview`` for bytes).
        A large payload from another host for which this call is already
        waiting lands in ``out`` straight from the network (no copy, see
        :mod:`aiopdbp.hosts.inbound`, "Bulk payloads"); any other is copied
        into ``out`` from where it landed.

        One receiver at a time: ``RuntimeError`` when another ``recv`` or
        ``recv_into`` already waits on this GP, and for a ``recv`` that
        starts while this call waits.

        Errors: ``ValueError`` when the next message does not fit in ``out``,
        ``TypeError`` when it is not bytes or an array (a stream, ``None``,
        a pickled object) -- the item then stays first, for :meth:`recv`.
        ``TimeoutError`` after ``timeout`` seconds with nothing.

        Cancellation: a cancelled call takes nothing (items it had to step
        over are kept, in order, for the next receive).  If a payload had
        already begun landing in ``out``, it still lands there -- MPI writes
        it, so do not use ``out`` for anything else until that message was
        received -- and its message reaches the pipe as usual, its data a
        view of ``out``.
        """
        flat = _flat_writable(out)
        _check_timeout(timeout)
        router = self._router
        if self._unnamed is not None:
            return _arrived(self._into(flat, await self.recv(timeout)), self.node.arrays)
        pipe = self._inbox()
        try:
            item = pipe.receive_nowait()
        except WouldBlock:
            pass
        else:
            return _arrived(self._into(flat, item if _named_now(item) else await self._named(item)),
                            self.node.arrays)
        if self._into_task is not None or self._waiting:
            # Another receiver could take the message that lands in ``out``
            # (and this call would wait for it forever).
            raise RuntimeError(f"GP {self.name!r}: recv_into while another receive waits on this GP "
                               "(one receiver at a time)")
        self._into_task = asyncio.current_task()
        router.landings.post(self.pid, flat)
        taken = False
        try:
            async with asyncio.timeout(timeout):
                item = await self.recv()
                taken = router.landings.withdraw(self.pid)
                if taken:
                    # Our buffer was chosen for a payload whose header came
                    # while the pipe was empty: that message is ours, even if
                    # other items got into the pipe before its bytes landed.
                    while not _views(item, flat):
                        self._hold(item)
                        item = await pipe.receive()
        except BaseException as exc:
            if not taken:
                router.landings.withdraw(self.pid)
            if type(exc) is TimeoutError and not exc.args:
                raise TimeoutError(f"GP {self.name!r} received nothing into its buffer within "
                                   f"{timeout:g} s") from None
            raise
        finally:
            self._into_task = None
        return _arrived(self._into(flat, item if _named_now(item) else await self._named(item)), self.node.arrays)

    def _into(self, flat: memoryview, item: Message | IncomingStream) -> Message:
        """``item``'s payload in ``flat`` (copied unless it landed there)."""
        data: Any = _host_data(item.data) if type(item) is Message else None
        err: Exception | None = None
        if type(item) is not Message:
            err = TypeError("recv_into: the next item is a stream, not a message")
        elif data is None or not (type(data) is bytes or (isinstance(data, np.ndarray)
                                                          and not data.dtype.hasobject)):
            err = TypeError(f"recv_into: the next message carries {type(data).__name__}, "
                            "not bytes or a numeric array")
        elif _size(data) > flat.nbytes:
            err = ValueError(f"recv_into: the next message ({_size(data)} bytes) does not fit "
                             f"in the buffer ({flat.nbytes} bytes)")
        if err is not None:
            self._hold(item, front=True)
            raise err
        assert type(item) is Message
        if type(data) is bytes:
            n = len(data)
            flat[:n] = data
            return Message((item[0], item[1], item[2], flat[:n], item[4]))
        if _views(item, flat):
            return item
        view = np.frombuffer(flat, dtype=data.dtype, count=data.size).reshape(data.shape)
        view[...] = data
        return Message((item[0], item[1], item[2], view, item[4]))

    def __aiter__(self) -> GP:
        return self

    async def __anext__(self) -> Message | IncomingStream:
        """``async for item in gp`` receives until the pipe is released.

        Cancellation: as for :meth:`recv`.
        """
        try:
            return await self.recv()
        except (ClosedResourceError, NoPipeError):
            raise StopAsyncIteration from None
