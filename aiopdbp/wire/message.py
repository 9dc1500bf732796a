"""What a GP receives: :class:`Message` (the stream counterpart lives in
:mod:`aiopdbp.streams.receiver`), and what a message costs in flow-control credit."""

from __future__ import annotations

from typing import Any

import numpy as np

from aiopdbp import ext
from aiopdbp.wire import fields as _pure_fields
from aiopdbp.wire.mesp import Kind

__all__ = ["CREDIT_OVERHEAD", "Message", "credit_cost"]

#: bytes of flow-control credit a message costs on top of its payload: about
#: what one queued message costs the receiving host besides its payload.
CREDIT_OVERHEAD = 64

# the getters of Message's fields: compiled where built and current, else
# properties (aiopdbp.ext.choose decides and records why)
_field = ext.twin("fields", _pure_fields, "aiopdbp.wire.cfields").field


def credit_cost(data: Any) -> int:
    """Credit a message with payload ``data`` takes from its destination's
    window (the same rule on the sending and on the receiving host)."""
    if data is None:
        return CREDIT_OVERHEAD
    if type(data) is bytes:
        return len(data) + CREDIT_OVERHEAD
    n = getattr(data, "nbytes", None)
    return (int(n) if n is not None else 0) + CREDIT_OVERHEAD


class Message(tuple):  # type: ignore[type-arg]
    """A message, as the receiving GP's ``recv()`` returns it.

    ``source`` is the sender's name (reply to it), ``kind`` its
    :class:`~aiopdbp.wire.mesp.Kind` (``SHORT``, or ``COMMAND`` from
    ``command``), ``com`` the number the sender gave ``com=``, ``data`` the
    payload: ``bytes`` for bytes-like data, a ``numpy.ndarray`` (same dtype
    and shape) for arrays -- a tensor for one sent as a tensor, where torch
    imports (the node's ``arrays`` option), a device array at a GPU GP --,
    the object itself for pickled payloads, or ``None``; ``source_pid`` the
    number the job gave the sender's name.

    A tuple underneath, built from one tuple of those five fields --
    ``Message((source, kind, com, data, source_pid))`` -- because the receive
    path builds one per message and a tuple subclass without a Python-level
    ``__new__`` is the cheapest object with named fields Python makes; its
    fields are read by getters in C where the core is compiled
    (:mod:`aiopdbp.wire.fields`).
    """

    __slots__ = ()

    source: str = _field(0)
    kind: Kind = _field(1)
    com: int = _field(2)
    data: Any = _field(3)
    source_pid: int = _field(4)

    def __repr__(self) -> str:
        d = self.data
        desc = f"{type(d).__name__}[{len(d)}]" if isinstance(d, (bytes, bytearray, memoryview)) else \
            (f"ndarray{d.shape}:{d.dtype}" if isinstance(d, np.ndarray) else type(d).__name__)
        return f"<Message from {self.source!r} {self.kind.name} com={self.com} {desc}>"

    # A message is a value, not a sequence: equality and hashing by identity
    # would surprise less than tuple semantics on payloads like ndarrays.
    __eq__ = object.__eq__
    __ne__ = object.__ne__
    __hash__ = object.__hash__
