"""Exception hierarchy of aiopdbp.

Every error the library raises on purpose derives from :class:`PDBPError`, so a
program can catch "anything aiopdbp said" in one place.  The channel errors
follow trio's vocabulary: *Closed* means **you** closed the object and then used
it; *Broken* means the **other side** went away.
"""

from __future__ import annotations

from typing import Any


class PDBPError(Exception):
    """Base class of every error raised by aiopdbp.

    ``origin_rank`` is set when the error only reflects something another
    rank did or suffered (its GP failed or left, it was interrupted or
    lost): under MPI such an error is reported as a *consequence* of that
    rank, whose own traceback is shown instead.
    """

    origin_rank: int | None = None


class ProtocolError(PDBPError):
    """Bytes from another rank that are not a valid frame of aiopdbp's wire
    format (truncated, oversized, wrong version, unknown kind, inconsistent
    lengths, forbidden payload): the sending rank is failed."""


class UnknownProcessError(PDBPError, LookupError):
    """A generalized process name that is registered on no host.

    ``waited`` is how long the caller waited for the name (see the name rule
    in the README); the message says how to wait longer.  ``suggestions``
    are registered names close to it ("did you mean"); ``freed_on`` is the
    rank of a GP of that name that was registered and freed since (then
    ``origin_rank`` is that rank when it is another one).
    """

    def __init__(self, name: str, waited: float | None = None, *,
                 suggestions: tuple[str, ...] = (), freed_on: int | None = None) -> None:
        if freed_on is not None:
            msg = (f"the generalized process named {name!r} (on rank {freed_on}) was freed: it left its "
                   "`async with node.process()` block, failed, or called free()")
        elif waited is None:
            msg = f"no generalized process named {name!r} is registered"
        else:
            msg = (f"no generalized process named {name!r} was registered within {waited:g} s "
                   "(wait longer with timeout=... or open_node(name_timeout=...))")
        if suggestions:
            msg += "; did you mean " + " or ".join(repr(s) for s in suggestions) + "?"
        super().__init__(msg)
        self.name = name
        self.waited = waited
        self.suggestions = suggestions
        self.freed_on = freed_on


class DuplicateProcessError(PDBPError, ValueError):
    """A name that is already registered (names are cluster-wide unique)."""

    def __init__(self, name: str) -> None:
        super().__init__(f"a generalized process named {name!r} is already registered")
        self.name = name


class ClosedResourceError(PDBPError):
    """The object was closed by its owner and then used again."""


class BrokenResourceError(PDBPError):
    """The peer of a channel or stream went away (closed, failed, left)."""


class WouldBlock(PDBPError):
    """A ``*_nowait`` operation would have had to wait."""


class NoPipeError(PDBPError):
    """The GP holds no private pipe (call ``apply_pipe()`` first), or the pool
    has no free pipe and the caller asked not to wait."""


class StreamError(BrokenResourceError):
    """A data stream ended abnormally: the sender failed, was cancelled, or the
    stream lost/duplicated a segment.  Raised at the receiver instead of
    returning truncated data."""


class HandshakeError(PDBPError):
    """The start-up exchange between the ranks did not complete in time
    (``handshake_timeout``): a rank did not start, or cannot be reached."""


class BarrierError(BrokenResourceError):
    """A barrier could not complete: a member failed or left, or it timed out."""


class TransportError(BrokenResourceError):
    """The transport to another host failed (peer left, MPI error)."""


class RankFailedError(BrokenResourceError):
    """Another rank of the job failed (its program raised) or was
    interrupted: what depended on it cannot complete.  ``origin_rank`` names
    it; its own traceback is printed by that rank."""

    def __init__(self, message: str, origin_rank: int) -> None:
        super().__init__(message)
        self.origin_rank = origin_rank


class HostLostError(TransportError):
    """A host stopped answering (it died, never joined, or is unreachable)
    within the liveness timeout.  ``origin_rank`` is the lost rank."""

    def __init__(self, message: str, origin_rank: int) -> None:
        super().__init__(message)
        self.origin_rank = origin_rank


class DeviceError(PDBPError):
    """A device (CUDA or simulated) operation failed: an allocation, an async
    copy, an event or stream call.  The backend's own exception (e.g. CuPy's
    ``CUDARuntimeError``) is attached as ``__cause__``.  A transfer that hits
    one fails; a stream sender's failure reaches the receiver as
    :class:`StreamError`."""


#: what a stream's sender waits for once its last segment left (its
#: receiver's DONE), as the stall watch names it (:mod:`aiopdbp.stall`)
STREAM_READING = "the reading of a stream"


class DeadlockError(PDBPError):
    """GPs wait in ``send`` for each other in a cycle and none of them reads:
    ``cycle`` is the wait-for graph, a tuple of
    :class:`~aiopdbp.stall.WaitEdge` (``gp``, ``rank``, ``waits_for``,
    ``waits_for_rank``, ``resource``, ``seconds``), in cycle order.  Raised
    by the ``send`` calls of the cycle (see :mod:`aiopdbp.stall`)."""

    def __init__(self, cycle: tuple[Any, ...]) -> None:
        self.cycle = cycle
        names = " -> ".join([*(f"{e.gp!r} (rank {e.rank})" for e in cycle), repr(cycle[0].gp)])
        if cycle[0].resource == STREAM_READING:
            why = ("a send_stream of more than 64 KiB returns once its receiver has read it all, and "
                   "each sends one to the next before receiving; receive in another task")
        else:
            why = ("each sends more than a window to the next before receiving; receive in another "
                   "task, or send less before receiving")
        super().__init__(
            f"deadlock: {names}: each GP waits in send for {cycle[0].resource} of the next, and "
            f"none of them reads ({why})")
