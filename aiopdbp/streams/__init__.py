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
a Protocol here (:class:`~aiopdbp.streams.devicepath.Sender`), handed in.
"""

from aiopdbp.streams.devicepath import DeviceConfig, DevicePath
from aiopdbp.streams.protocol import StreamState
from aiopdbp.streams.receiver import DEFAULT_SEGMENT, EAGER_LIMIT, IncomingStream, StreamMeta
from aiopdbp.streams.sender import ChunkSource, GenSource, HostSource, Staged, run_sender, send_stream
from aiopdbp.streams.table import OutgoingStream, StreamTable

__all__ = ["DEFAULT_SEGMENT", "EAGER_LIMIT", "ChunkSource", "DeviceConfig", "DevicePath", "GenSource",
           "HostSource", "IncomingStream", "OutgoingStream", "Staged", "StreamMeta", "StreamState",
           "StreamTable", "run_sender", "send_stream"]
