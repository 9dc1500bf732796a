"""Exception hierarchy of aiopdbp.

Every error the library raises on purpose derives from :class:`PDBPError`, so a
program can catch "anything aiopdbp said" in one place.  The channel errors
follow trio's vocabulary: *Closed* means **you** closed the object and then used
it; *Broken* means the **other side** went away.
"""

from __future__ import annotations


class PDBPError(Exception):
    """Base class of every error raised by aiopdbp."""


class ProtocolError(PDBPError):
    """Bytes that are not a valid CDU/MESP frame (truncated, oversized, wrong
    version, unknown kind, inconsistent lengths, forbidden payload)."""


class UnknownProcessError(PDBPError, LookupError):
    """A generalized process name that is registered on no host."""

    def __init__(self, name: str) -> None:
        super().__init__(f"no generalized process named {name!r} is registered")
        self.name = name


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
    """The initialisation sequence (paper Fig. 6) did not complete in time."""


class BarrierError(BrokenResourceError):
    """A barrier could not complete: a member failed or left, or it timed out."""


class TransportError(BrokenResourceError):
    """The transport to another host failed (peer left, MPI error)."""


class DeviceError(PDBPError):
    """A device (CUDA or simulated) operation failed: an allocation, an async
    copy, an event or stream call.  The backend's own exception (e.g. CuPy's
    ``CUDARuntimeError``) is attached as ``__cause__``.  A transfer that hits
    one fails; a stream sender's failure reaches the receiver as
    :class:`StreamError`."""
