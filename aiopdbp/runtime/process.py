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

Where each part of a GP lives: this module holds its name, its pipe and its
lifecycle (apply, release, free, what it owns: :class:`Owned`), and the
CPI's methods.  Those do at the call what cannot wait, and the whole of
``recv``, ``recv_nowait`` and ``send_nowait``: every message passes there,
and a call more would cost each one.  What an awaited ``send`` does is the
sending side's (:class:`~aiopdbp.runtime.sending.GPSender`); what a receive
holds back, a sender's name awaited and ``recv_into``'s buffer are the
receiving side's (:class:`~aiopdbp.runtime.receiving.GPReceiver`).
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Awaitable, Callable, Coroutine, Iterable
from typing import Any, Protocol

import numpy as np

from aiopdbp.wire.mesp import Kind
from aiopdbp.device.backend import is_device_array
from aiopdbp.errors import ClosedResourceError, NoPipeError, PDBPError, WouldBlock
from aiopdbp.wire.message import Message, credit_cost
from aiopdbp.arrays import KINDS, cpu_tensor_array, host_array, landed_arrival
from aiopdbp.routing.pipes import Pipe
from aiopdbp.streams.receiver import DEFAULT_SEGMENT, IncomingStream
from aiopdbp.streams.sender import send_stream
from aiopdbp.hosts.tables import PType, Tables
from aiopdbp.runtime.payloads import (
    arrive, arrived, check_com, check_timeout, flat_writable, named_now, raising, snapshot)
from aiopdbp.runtime.receiving import GPReceiver
from aiopdbp.runtime.recvcore import COMPILED as RECV_COMPILED, RecvPath
from aiopdbp.runtime.sendcore import COMPILED as SEND_COMPILED
from aiopdbp.runtime.sending import BURST_BYTES, GPSender, SenderHost

__all__ = ["FAILED_CLOSE_TIMEOUT", "GP", "GPHost", "Owned"]

#: how long a GP leaving with an exception tries to close what it owns
FAILED_CLOSE_TIMEOUT = 1.0


class GPHost(SenderHost, Protocol):
    """What a GP needs of its node (:class:`aiopdbp.runtime.node.Node`, whose
    :class:`~aiopdbp.runtime.localgps.LocalGPs` creates it): what its
    sending side needs (:class:`SenderHost`), the node's other parts, and
    the table operations it carries out."""

    @property
    def rank(self) -> int: ...
    @property
    def arrays(self) -> str: ...
    @property
    def tables(self) -> Tables: ...
    @property
    def drive(self) -> Callable[[Callable[[], bool]], Awaitable[None]] | None: ...
    async def register(self, name: str, ptype: PType = PType.CPU, *, bind: bool = False,
                       device: int | None = None, to_device: bool = False) -> GP: ...
    async def lookup(self, name: str, timeout: float | None = None) -> int: ...
    async def apply_pipe(self, gp: GP, timeout: float | None) -> None: ...
    async def release_pipe(self, gp: GP, reason: BaseException | None = None, *, tell: bool = True) -> None: ...
    async def free(self, gp: GP, *, wait: bool = True) -> None: ...


class Closable(Protocol):
    """What a GP can own: anything with an idempotent ``async aclose()``."""

    def aclose(self) -> Awaitable[None]: ...


class Owned:
    """What a GP closes when it is freed, if still open then (a Barrier or
    Neighbours its program did not close): :meth:`GP.own` and
    :meth:`GP.disown` keep the list, :meth:`GP.free` closes it."""

    __slots__ = ("_items",)

    def __init__(self) -> None:
        self._items: list[Closable] = []

    def add(self, resource: Closable) -> None:
        if resource not in self._items:
            self._items.append(resource)

    def discard(self, resource: Closable) -> None:
        if resource in self._items:
            self._items.remove(resource)

    async def aclose(self) -> None:
        """Close everything still owned, concurrently, the last owned first;
        :class:`~aiopdbp.errors.PDBPError` of peers that went away is ignored.

        Cancellation: the closes are cancelled.
        """
        owned, self._items = self._items[::-1], []
        if not owned:
            return
        results = await asyncio.gather(*(r.aclose() for r in owned), return_exceptions=True)
        for r in results:
            if isinstance(r, BaseException) and not isinstance(r, PDBPError):
                raise r


class GP:
    """A generalized process: a name unique in the job, an inbox (its
    private pipe), send and receive.

    Get one with ``async with node.process(name) as gp`` (or
    :meth:`Node.register`), never by calling the class.  ``async for item in
    gp`` receives until the GP's pipe is released.
    """

    def __init__(self, node: GPHost, name: str, pid: int, ptype: PType) -> None:
        #: the node (host) this GP lives on
        self.node = node
        #: the GP's name, unique in the whole job (what senders address)
        self.name = name
        #: the number the job gave the name (senders' ``Message.source_pid``)
        self.pid = pid
        #: ``PType.CPU``, or ``PType.GPU`` for an :class:`SGP`
        self.ptype = ptype
        self._pipe: Pipe[Any] | None = None
        self._freed = False   # set with self._path.freed: mark_freed() and free() only
        self._owned = Owned()
        self._tx = GPSender(node, name, pid)              # what an awaited send does
        self._rx = GPReceiver(node.router, name, pid)     # what a receive holds back; recv_into's buffer
        self._router = node.router
        #: ``recv`` (and ``recv_into``) calls of this GP waiting for an item now
        self.receiving = 0
        self._drive = node.drive   # a receiver waiting for a reply steps MPI itself
        self._path = self._tx.path   # send's common case in one step (the rest is the sender's)
        if type(self).send is GP.send:
            # ``gp.send()`` is the compiled path's own call: no frame between; it
            # hands what it does not take to this class's send.  The pure form
            # keeps the GP's send (the pure call would be the same one frame)
            self._path.whole = GP.send.__get__(self)
            if SEND_COMPILED:
                self.send = self._path.call  # type: ignore[method-assign]
        if type(self).send_stream is GP.send_stream:
            # ``gp.send_stream()`` likewise: a short stream to another host is the
            # compiled path's coroutine, the rest this class's send_stream
            self._path.streams = node.streams
            self._path.whole_stream = GP.send_stream.__get__(self)
            if SEND_COMPILED:
                self.send_stream = self._path.call_stream  # type: ignore[method-assign]
        #: receive's common case in one step (the rest is :meth:`_recv`); its pipe is
        #: this GP's while it has one and is not freed
        self._in = RecvPath(self._rx, node, self._recv, landed_arrival)  # (a pipe's arrays are their messages' own)
        if type(self).recv is GP.recv:
            # ``gp.recv()`` is the compiled path's own call: no frame between.  The
            # pure form runs the GP's coroutine alone (one coroutine, as before:
            # the pure path would add one to a receive that waits; it stays the
            # twin the compiled one is tested against)
            self.recv = self._in.recv if RECV_COMPILED else self._recv  # type: ignore[method-assign]
            # its wait without a timeout: the compiled path's own (this GP's
            # ``receiving``, send run and driver; the rest of ``_recv``'s wait)
            self._in.gp = self

    def __repr__(self) -> str:
        return f"<GP {self.name!r} pid={self.pid} {self.ptype.name} on node {self.node.rank}>"

    @property
    def pipe(self) -> Pipe[Any] | None:
        """The GP's inbox, a :class:`~aiopdbp.routing.pipes.Pipe` (``None``
        before :meth:`apply_pipe` and after :meth:`release_pipe`)."""
        return self._pipe

    def _check(self) -> None:
        if self._freed:
            raise ClosedResourceError(f"GP {self.name!r} was freed")

    def bound(self, pipe: Pipe[Any] | None) -> None:
        """The node bound (or, with None, released) this GP's private pipe.
        Internal: the node calls it; a program calls :meth:`apply_pipe`."""
        self._pipe = pipe
        self._in.pipe = None if self._freed else pipe

    def mark_freed(self) -> None:
        """The node freed this GP (its node closed).  Internal: the node
        calls it; a program calls :meth:`free`."""
        self._pipe = self._in.pipe = None
        self._freed = self._path.freed = True

    # -- CPI: pipes --------------------------------------------------------------
    async def apply_pipe(self, timeout: float | None = None) -> None:
        """Give the GP its inbox, a private pipe from this host's pool.

        Only for a GP made with :meth:`Node.register` (``bind=False``):
        ``node.process()`` does it for you.  Idempotent.

        Args:
            timeout: seconds to wait when every pipe of the host is taken
                (``Node``'s ``max_pipes``), then ``NoPipeError``; ``None``:
                wait as long as it takes.

        Cancellation: a cancelled apply binds no pipe.
        """
        self._check()
        if self._pipe is None:
            await self.node.apply_pipe(self, timeout)

    async def release_pipe(self, *, reason: BaseException | None = None) -> None:
        """Give the GP's inbox back to the host's pool: the GP receives
        nothing more until :meth:`apply_pipe`.

        Items still queued in it are discarded; later local senders get
        ``NoPipeError`` until a pipe is applied again.  Idempotent.
        ``node.process()`` does it for you on exit.

        Args:
            reason: the exception the GP gives up with, if any: the senders of
                the streams it was receiving see it in their
                ``BrokenResourceError``.

        Cancellation: the release completes before the first suspension, so
        a cancelled call has released the pipe.
        """
        if self._pipe is not None:
            await self.node.release_pipe(self, reason)

    async def free(self, *, reason: BaseException | None = None) -> None:
        """Unregister the GP: its name is free again in the whole job.

        Releases its pipe first (:meth:`release_pipe`), then closes what it
        still owns (a :class:`~aiopdbp.sync.Barrier` or
        :class:`~aiopdbp.sync.Neighbours` not closed).  Idempotent.
        ``node.process()`` does it for you on exit.

        Args:
            reason: the exception the GP leaves with, if any.  Then it waits
                for nobody: the other hosts are told without waiting for their
                answer, and closing what it owns is bounded by
                :data:`FAILED_CLOSE_TIMEOUT` -- the failure must be reported
                even when a peer's event loop is blocked.

        Cancellation: as for ``release_pipe``; a cancelled close of what it
        owns still frees the GP.
        """
        if self._freed:
            return
        if self._pipe is not None:   # a clean exit owning nothing: its free says the pipe went too
            await self.node.release_pipe(self, reason, tell=reason is not None or bool(self._owned._items))
        try:
            if reason is None:
                await self.aclose_owned()
            else:
                with contextlib.suppress(TimeoutError):
                    async with asyncio.timeout(FAILED_CLOSE_TIMEOUT):
                        await self.aclose_owned()
        finally:
            self._freed = self._path.freed = True
            self._in.pipe = None
            await self.node.free(self, wait=reason is None)

    def own(self, resource: Any) -> None:
        """Close ``resource`` (anything with an ``async aclose()``) when this
        GP is freed, if it is still open then: a program that returns
        without closing its Barrier still ends cleanly.  Barriers and
        Neighbours call this when they open; ``resource.aclose()`` must be
        idempotent and call :meth:`disown`.  Internal."""
        self._owned.add(resource)

    def disown(self, resource: Any) -> None:
        """``resource`` was closed by its user: the GP no longer closes it.
        Internal (see :meth:`own`)."""
        self._owned.discard(resource)

    async def aclose_owned(self) -> None:
        """Close everything this GP still owns, concurrently (a barrier's
        close waits for its peers' closes); :meth:`free` calls it.  Errors of peers that went away
        meanwhile (:class:`~aiopdbp.errors.PDBPError`) are ignored: this is
        cleanup, the GP is leaving anyway.

        Cancellation: the closes are cancelled; what they hold is freed when
        the node closes.
        """
        await self._owned.aclose()

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
        """Send a message to the GP named ``dest``, wherever it lives;
        returns once it is queued (the receiver need not have read it).

        The receiver gets a :class:`~aiopdbp.wire.message.Message` from
        :meth:`recv`, with ``data``, ``com`` and ``kind`` as sent here.

        Args:
            dest: the receiver's name, or an iterable of names (a multicast:
                every receiver gets the message; a host receives it once and
                copies it to its GPs).  A name not registered yet is waited
                for (another rank may still be starting): up to the node's
                ``name_timeout`` (30 s), or ``timeout``; then
                :class:`~aiopdbp.errors.UnknownProcessError`.
            data: the payload.  ``None``; anything bytes-like (``bytes``,
                ``bytearray``, ``memoryview``, any buffer), which arrives as
                ``bytes``; a numpy array (or a numpy scalar, as a 0-d array)
                of a plain dtype -- numbers, ``bool``, fixed-size bytes and
                strings, datetimes, ``bfloat16`` and the other ``ml_dtypes``
                -- of at most 32 dimensions, which arrives with the same dtype
                and shape; a PyTorch tensor or any array by DLPack in host
                memory, which arrives as a tensor where torch imports (see the
                node's ``arrays``); a device array (CuPy,
                ``__cuda_array_interface__``, CUDA DLPack, the simulated
                device), which arrives on the device of a GPU GP (``SGP``) and
                as numpy at a CPU one.  Anything else -- a ``str`` (send
                ``text.encode()``), a ``dict``, a number, an array of Python
                objects -- needs the node's ``allow_pickle=True`` (pickled:
                trusted clusters only), else ``TypeError`` at once.
            com: a number of your choice in ``[0, 2**32)`` that travels with
                the message (``Message.com``): a tag or a command code that
                tells the receiver what the message is.
            kind: ``Kind.SHORT`` (the default) or ``Kind.COMMAND``: a label
                the receiver sees as ``Message.kind``; both travel alike
                (:meth:`command` sends the second).
            timeout: seconds to wait for the name and for room at the
                receiver, then ``TimeoutError`` (or ``UnknownProcessError``
                for the name) saying what it waited for; ``None``: the name
                waits ``name_timeout``, the room as long as it takes.
            copy: for a device array sent to a GPU GP on the same device:
                ``False`` hands the array over by reference (the sender must
                not touch it again); ``True`` copies it.
            stream: for a device array: the stream its producer's work is
                queued on (default: the current one); the send waits for that
                work, never for the whole device.

        A full receiver (its inbox, or what its host lets this host have in
        flight) makes the call wait: backpressure.  Senders waiting on one
        receiver share it fairly; so that they do from the first message, a
        run of sends that never wait yields the event loop once every
        ``BURST_BYTES`` (16 KiB) of them (:mod:`aiopdbp.hosts.link`).

        Buffer ownership (as ``MPI_Send``): a writable numeric array of
        ``RemoteConfig.large`` bytes or more (32 KiB) sent to a GP on another
        host is not copied: it travels from its own memory as one MPI message,
        and the call returns once MPI no longer reads it -- then the caller
        may reuse it.  Everything else is copied at the call (read-only
        arrays and ``bytes`` are shared), so the caller may change its data
        as soon as ``send`` returns.  A device array takes the device path,
        and the call returns once aiopdbp no longer reads it
        (:mod:`aiopdbp.streams.devicepath`).

        ``send`` is a plain function returning the awaitable: a device
        array's pending work is captured at the call; a wrong argument is
        raised by the ``await``.

        Cancellation: a cancelled send that raises ``CancelledError`` has
        queued nothing (reservations already taken are given back).  Two
        sends cannot be recalled once started, and a cancel then waits for
        their outcome: a large array whose payload was already handed to MPI
        (the wait lasts until MPI no longer reads the array:
        :meth:`~aiopdbp.routing.router.Router.send_owned`), and a first
        message to a name this host has not looked up yet, which travels
        with the lookup (one round trip).  Sent (delivered), the send returns
        normally and the cancel is raised at the caller's next ``await`` --
        unless it is no longer wanted then (an ``asyncio.timeout`` that
        ended meanwhile); not sent (the host lost), ``CancelledError``.
        """
        if data is not None and type(data) is not bytes and type(data) is not np.ndarray:
            try:
                if (arr := cpu_tensor_array(data)) is not None:
                    data = arr  # its memory as an ndarray, before the (slower) device checks
                elif is_device_array(data):
                    data = self.node.devices.capture(self, data, stream)  # now: the caller's stream is current now
                    stream = None
            except Exception as exc:
                return raising(exc)
        if stream is not None:
            return raising(TypeError("stream= is for device arrays"))
        return self._path.send(dest, data, com, kind, timeout, copy)

    def send_nowait(self, dest: str, data: Any = None, *, com: int = 0, kind: Kind = Kind.SHORT) -> None:
        """Send a message to one GP without waiting: ``WouldBlock`` when
        its inbox is full, ``UnknownProcessError`` for a name not registered
        now.  ``data``, ``com`` and ``kind`` as for :meth:`send` (no device
        arrays).

        The payload is always copied (a writable array too, large or not):
        without a wait there is no moment at which MPI is known to be done
        with the caller's buffer.  ``await send`` avoids the copy."""
        self._check()
        check_com(com)
        if kind is not Kind.SHORT and kind is not Kind.COMMAND:
            raise ValueError(f"send_nowait() carries Kind.SHORT or Kind.COMMAND messages, not {kind!r}")
        data = snapshot(data, self.node.allow_pickle, False)
        self._router.send_nowait(dest, (self.name, kind, com, data, self.pid), credit_cost(data))

    async def command(self, dest: str | Iterable[str], com: int, data: Any = None, *,
                      timeout: float | None = None) -> None:
        """Send a message with ``kind=Kind.COMMAND`` and the code ``com``:
        ``send(dest, data, com=com, kind=Kind.COMMAND)``.

        Cancellation: as for :meth:`send`.
        """
        await self.send(dest, data, com=com, kind=Kind.COMMAND, timeout=timeout)

    def send_stream(self, dest: str, data: Any, *, segment_size: int | None = None, com: int = 0,
                    timeout: float | None = None, copy: bool = True, stream: Any = None) -> Coroutine[Any, Any, int]:
        """Send a large array or a sequence of buffers to the GP named
        ``dest`` as a stream: cut into segments, paced by the receiver,
        reassembled in order.  Returns the number of bytes sent, once the
        receiver has taken the whole stream.

        The receiver gets an :class:`~aiopdbp.streams.receiver.IncomingStream`
        from :meth:`recv` and reads it whole (``await stream.read()``) or
        segment by segment (``async for``).  A stream of one buffer of at most
        64 KiB travels whole in one record and returns once sent (a copy
        taken), as :meth:`send` does: what its receiver does with it is not
        reported back.

        Args:
            dest: the receiver's name (one GP); waited for as in :meth:`send`.
            data: one buffer or array (bytes-like, a numpy array, a tensor or
                array by DLPack, a device array: as for :meth:`send`, no
                pickled objects), or an iterable or async iterable of them
                produced over time (ordered: a ``set`` or ``dict`` is
                refused).  An array arrives with its dtype and shape.
            segment_size: bytes per segment, default 1 MiB; an array is cut
                along its first axis, in whole rows.  A device array between
                hosts travels in pinned chunks of ``min(segment_size,
                chunk_size)`` bytes of whole rows.
            com: a number of your choice in ``[0, 2**32)`` that the receiver
                sees as ``stream.com``: what the stream is.
            timeout: seconds for the whole call, then ``TimeoutError``;
                ``None``: no limit.
            copy: for a device array sent to a GPU GP on the same device:
                ``False`` hands it over by reference, ``True`` copies it.
            stream: for a device array: as for :meth:`send`.

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
            if self._freed:  # (as send does: the checks inline, a short stream feels each call)
                raise ClosedResourceError(f"GP {self.name!r} was freed")
            if type(com) is not int or not 0 <= com <= 0xFFFFFFFF:
                check_com(com)
            if timeout is not None:
                check_timeout(timeout)
            if type(dest) is not str and not isinstance(dest, str):
                raise TypeError(f"send_stream sends to one GP: dest is its name (a str), not {type(dest).__name__}")
            if segment_size is not None and type(segment_size) is not int and (
                    not isinstance(segment_size, int) or isinstance(segment_size, bool)):
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
            return raising(exc)
        return send_stream(self.node.streams, self.pid, self._router.resolve, dest, data, com=com, timeout=timeout,
                           segment_size=DEFAULT_SEGMENT if segment_size is None else segment_size)

    # -- CPI: receiving ------------------------------------------------------------
    def _inbox(self) -> Pipe[Any]:
        self._check()
        pipe = self._pipe
        if pipe is None:
            raise NoPipeError(f"GP {self.name!r} has no private pipe: call apply_pipe() first")
        return pipe

    def recv(self, timeout: float | None = None, *,
             arrays: str | None = None) -> Coroutine[Any, Any, Message | IncomingStream]:
        """The next item in arrival order: a :class:`Message` (what
        :meth:`send` sent) or an
        :class:`~aiopdbp.streams.receiver.IncomingStream` (what
        :meth:`send_stream` sent: read it, or ``aclose()`` it).

        Args:
            timeout: seconds to wait for an item, then ``TimeoutError``;
                ``None``: as long as it takes.
            arrays: what an array arrives as, for this call: ``"auto"`` (as
                sent: a tensor as a tensor where torch imports), ``"numpy"``
                or ``"torch"``; default: the node's ``arrays`` option.

        Cancellation: a cancelled receive takes nothing from the pipe.
        """
        # (the GP's own class: ``gp.recv`` is this call itself; see __init__)
        return self._in.recv(timeout, arrays=arrays) if RECV_COMPILED else self._recv(timeout, arrays)

    async def _recv(self, timeout: float | None = None, arrays: str | None = None,
                    taken: Message | IncomingStream | None = None) -> Message | IncomingStream:
        """:meth:`recv` but for its common case (:mod:`aiopdbp.runtime.recvpath`);
        ``taken``: the item the path took from the pipe (None: none)."""
        if arrays is not None and arrays not in KINDS:
            raise ValueError(f"arrays is one of {KINDS}, not {arrays!r}")
        pipe = self._pipe
        rx = self._rx
        item: Message | IncomingStream
        if taken is not None:
            item = taken
        else:
            if pipe is None or self._freed or rx.held is not None or rx.into_task is not None:
                if rx.into_task is not None and rx.into_task is not asyncio.current_task():
                    raise RuntimeError(f"GP {self.name!r}: recv while recv_into waits: the message "
                                       "meant for its buffer could go to either (one receiver at a time)")
                if rx.held is not None:
                    item = rx.take()
                    return arrive(await rx.named(item), arrays or self.node.arrays)
                pipe = self._inbox()
            if len(pipe):  # the common case under load: no coroutine, no exception
                item = pipe.receive_nowait()
            else:
                self.receiving += 1
                self._path.burst = BURST_BYTES   # this task suspends: a send run starts afresh
                try:
                    if timeout is None:
                        if self._drive is not None:
                            await self._drive(pipe.ready)
                        # (the driver usually ends with an item there: no coroutine for it)
                        item = pipe.receive_nowait() if len(pipe) else await pipe.receive()
                    else:
                        check_timeout(timeout)
                        try:
                            async with asyncio.timeout(timeout):
                                if self._drive is not None:
                                    await self._drive(pipe.ready)
                                item = await pipe.receive()
                        except TimeoutError:
                            raise TimeoutError(f"GP {self.name!r} received nothing within {timeout:g} s") from None
                finally:
                    self.receiving -= 1
        kind = arrays or self.node.arrays
        if type(item) is Message:
            if type(item[0]) is str:
                data = item[3]
                if type(data) is not np.ndarray or (kind == "auto" and data.dtype.metadata is None):
                    return item  # the commonest
                # a tensor's array (or a kind asked for): the path's conversion (compiled: one C call)
                return self._in.arrive(item, kind)
        elif type(item.source) is str and isinstance(item, IncomingStream):
            if kind != "auto":  # (arrive's, for a stream, without the call)
                item.arrays = kind
            return item
        if rx.into_task is not None:
            # recv_into's own wait: it names the item once its buffer is no
            # longer offered -- waiting for the name here would let the next
            # payload land in that buffer and be taken ahead of this item
            return item
        return arrive(await rx.named(item), kind)

    def recv_nowait(self) -> Message | IncomingStream:
        """The next item, or ``WouldBlock`` when the pipe is empty.  (An item
        whose sender's registration has not reached this host yet names it
        ``"<pid N>"``; :meth:`recv` waits for the name.)"""
        rx = self._rx
        if rx.held is not None:
            return arrive(rx.take(), self.node.arrays)
        item: Message | IncomingStream = self._inbox().receive_nowait()
        return arrive(item, self.node.arrays)

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
        flat = flat_writable(out)
        check_timeout(timeout)
        rx = self._rx
        if rx.held is not None:
            return arrived(rx.into(flat, await self.recv(timeout)), self.node.arrays)
        pipe = self._inbox()
        try:
            item = pipe.receive_nowait()
        except WouldBlock:
            pass
        else:
            return arrived(rx.into(flat, item if named_now(item) else await rx.named(item)), self.node.arrays)
        if rx.into_task is not None or self.receiving:
            # Another receiver could take the message that lands in ``out``
            # (and this call would wait for it forever).
            raise RuntimeError(f"GP {self.name!r}: recv_into while another receive waits on this GP "
                               "(one receiver at a time)")
        item = await rx.landing(pipe, flat, timeout, self.recv)
        return arrived(rx.into(flat, item if named_now(item) else await rx.named(item)), self.node.arrays)

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
