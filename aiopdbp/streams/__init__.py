"""Streams: data cut into segments, sent in order under credit, reassembled.

Theory of operation
-------------------
A stream (the patent's SINFO) is one sender GP, one receiver GP and a
numbered run of segments.  :mod:`~aiopdbp.streams.protocol` is the whole
protocol of one stream, sans-I/O (events in, actions out: open, segment,
credit, end, done, abort).  The rest is its I/O:

* :mod:`~aiopdbp.streams.sender` -- THE sender loop (:func:`run_sender`): it
  pulls segments from a chunk source (host buffers and iterables, or the
  device path's staging) and obeys the protocol;
* :mod:`~aiopdbp.streams.receiver` -- :class:`IncomingStream`, the one
  receiver: reorder window, END check, errors instead of hangs;
* :mod:`~aiopdbp.streams.table` -- the host's stream table (the MTA rows):
  opens streams by their two hosts, binds PipeA/PipeB, routes control;
* :mod:`~aiopdbp.streams.devicepath` and :mod:`~aiopdbp.streams.devicestreams`
  -- device arrays: same-node device copies, pinned staging across nodes.

Imports: routing, hosts (its tables), wire, device, transport and the
foundation -- never runtime or above.  What it needs of a GP or a node is
a Protocol here (:class:`~aiopdbp.streams.devicebind.Sender`), handed in.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from aiopdbp.lazy import lazy_exports

# Loaded on first use (PEP 562): the sans-I/O protocol module can be imported
# without the I/O layers (asyncio, numpy) that the rest of the package needs.
_EXPORTS: dict[str, str] = {
    "DeviceConfig": "aiopdbp.streams.devicebind",
    "DevicePath": "aiopdbp.streams.devicepath",
    "StreamState": "aiopdbp.streams.protocol",
    **dict.fromkeys(["DEFAULT_SEGMENT", "EAGER_LIMIT", "IncomingStream", "StreamMeta"], "aiopdbp.streams.receiver"),
    **dict.fromkeys(["ChunkSource", "GenSource", "HostSource", "Staged", "run_sender", "send_stream"],
                    "aiopdbp.streams.sender"),
    "OutgoingStream": "aiopdbp.streams.outgoing",
    "StreamTable": "aiopdbp.streams.table",
}

__all__ = sorted(_EXPORTS)


__getattr__ = lazy_exports(globals(), _EXPORTS)


if TYPE_CHECKING:
    from aiopdbp.streams.devicebind import DeviceConfig as DeviceConfig
    from aiopdbp.streams.devicepath import DevicePath as DevicePath
    from aiopdbp.streams.protocol import StreamState as StreamState
    from aiopdbp.streams.receiver import DEFAULT_SEGMENT as DEFAULT_SEGMENT
    from aiopdbp.streams.receiver import EAGER_LIMIT as EAGER_LIMIT
    from aiopdbp.streams.receiver import IncomingStream as IncomingStream
    from aiopdbp.streams.receiver import StreamMeta as StreamMeta
    from aiopdbp.streams.sender import ChunkSource as ChunkSource
    from aiopdbp.streams.sender import GenSource as GenSource
    from aiopdbp.streams.sender import HostSource as HostSource
    from aiopdbp.streams.sender import Staged as Staged
    from aiopdbp.streams.sender import run_sender as run_sender
    from aiopdbp.streams.sender import send_stream as send_stream
    from aiopdbp.streams.outgoing import OutgoingStream as OutgoingStream
    from aiopdbp.streams.table import StreamTable as StreamTable
