"""What a GP does to a payload at the call: check the arguments, take the
snapshot the receiver will see, and turn what arrives into what the caller
asked for (:class:`~aiopdbp.runtime.process.GP`'s helpers, kept apart so
that the GP's module holds the GP)."""

from __future__ import annotations

import pickle
from typing import Any

import numpy as np

from aiopdbp.device.backend import is_device_array
from aiopdbp.wire.message import Message
from aiopdbp.wire.mesp import DEFAULT_LIMITS
from aiopdbp.wire.payload import travels_raw
from aiopdbp.arrays import arrival, frozen, host_array, ownable, plain_snapshot
from aiopdbp.streams.receiver import IncomingStream

#: the most dimensions an array may have to travel (the wire's default limit)
MAX_NDIM = DEFAULT_LIMITS.max_ndim

__all__ = ["MAX_NDIM", "arrive", "arrived", "check_com", "check_dest", "check_timeout", "flat_writable", "frozen", "host_data", "named_now", "ownable", "payload_size", "pickle_copy", "raising", "snapshot", "views_start"]


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
    if type(data) is np.ndarray and not shared and (plain := plain_snapshot(data, MAX_NDIM)) is not None:
        return plain  # the commonest array: a plain dtype (the same rule as below, in one call)
    if isinstance(data, np.generic):
        data = np.asarray(data)  # numpy scalars travel as 0-d arrays
    elif not isinstance(data, np.ndarray) and (arr := host_array(data)) is not None:
        data = arr  # a tensor (or any host array by DLPack): an ndarray over its memory
    if isinstance(data, np.ndarray):
        # the wire's rule, here too: one host refuses what many would
        if not travels_raw(data, allow_pickle):
            return pickle_copy(data)
        if frozen(data):
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
                        f"{_HINTS.get(type(data), '')}open the node with allow_pickle=True to send "
                        "Python objects (pickle: trusted clusters only)")
    return pickle_copy(data)


#: what a user most likely meant, for the payloads people try first
_HINTS: dict[type, str] = {
    str: "encode it first (text.encode()), or ",
    list: "make it an array first (np.asarray(values)), or ",
    tuple: "make it an array first (np.asarray(values)), or ",
}


async def raising(exc: Exception) -> Any:
    """An awaitable that raises ``exc``: what a plain function returning an
    awaitable hands back for an error found at the call, so that it is raised
    where the caller awaits, as an ``async def`` would."""
    raise exc


def check_timeout(timeout: float | None) -> None:
    """``timeout`` is None or a number >= 0 (as ``queue.Queue.get`` wants)."""
    if timeout is not None and not timeout >= 0:  # (NaN too)
        raise ValueError(f"timeout must be None or a number >= 0, not {timeout!r}")


def check_dest(dest: Any) -> None:
    """A multicast's names are strings (bytes would iterate as ints)."""
    if isinstance(dest, (bytes, bytearray, memoryview)) or not hasattr(dest, "__iter__"):
        raise TypeError(f"dest must be a GP name (str) or an iterable of names, not {type(dest).__name__}")


def named_now(item: Message | IncomingStream) -> bool:
    """Whether ``item`` names its sender already (else :meth:`~aiopdbp.runtime.receiving.GPReceiver.named` waits for it)."""
    return type(item[0] if type(item) is Message else item.source) is str


def flat_writable(out: Any) -> memoryview:
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


def payload_size(data: Any) -> int:
    return len(data) if type(data) is bytes else int(data.nbytes)


def views_start(item: Any, flat: memoryview) -> bool:
    """Whether ``item`` is a message whose array payload lies at the start of ``flat``."""
    data = host_data(item.data) if type(item) is Message else None
    if not isinstance(data, np.ndarray) or not flat.nbytes:
        return False
    start = np.frombuffer(flat, dtype=np.uint8, count=1).ctypes.data
    return bool(data.ctypes.data == start)


def arrive(item: Message | IncomingStream, kind: str) -> Message | IncomingStream:
    """``item`` with its array as the receiver asked (:func:`aiopdbp.arrays.arrival`)."""
    if type(item) is Message:
        return arrived(item, kind)
    if kind != "auto" and isinstance(item, IncomingStream):
        item.arrays = kind
    return item


def arrived(msg: Message, kind: str) -> Message:
    data = msg[3]
    if type(data) is np.ndarray and (kind != "auto" or data.dtype.metadata is not None):
        return Message((msg[0], msg[1], msg[2], arrival(data, kind), msg[4]))
    return msg


def host_data(data: Any) -> Any:
    """A received tensor as the ndarray over its memory (recv_into's checks)."""
    if data is None or type(data) is bytes or type(data) is np.ndarray:
        return data
    arr = host_array(data)
    return data if arr is None else arr


def check_com(com: int) -> None:
    if type(com) is not int and not isinstance(com, int) or not 0 <= com <= 0xFFFFFFFF:
        raise ValueError(f"com must be an int in [0, 2**32), got {com!r}")


def pickle_copy(obj: Any) -> Any:
    buffers: list[pickle.PickleBuffer] = []
    payload = pickle.dumps(obj, protocol=5, buffer_callback=buffers.append)
    return pickle.loads(payload, buffers=[b.raw() for b in buffers])
