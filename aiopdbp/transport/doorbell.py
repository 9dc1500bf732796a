"""A doorbell per progress engine: a sender on the same host wakes an idle receiver.

Theory of operation
===================

MPI gives asyncio nothing to wait on, so an idle progress engine used to wake
on a loop timer every millisecond to probe: a quiet rank spent ~50 us of CPU
per wake-up (0.5 CPU-s per 10 s idle), and a message landing just after the
engine went to sleep waited up to a millisecond.  The doorbell gives the
engine a file descriptor after all, for the peers on its host:

* every engine binds a ``SOCK_DGRAM`` Unix socket with an abstract name
  (nothing on disk to clean up, gone with the process) and the transport
  exchanges the names at start (an ``Iallgather``);
* the loop watches the socket (``add_reader``): a datagram resolves the
  engine's idle wait at once -- the kernel wakes the process, which on a
  busy host is also the fastest way back to a core;
* a sender rings a destination when its *previous* send to that destination
  was more than :data:`RING_AFTER_S` ago.  Why that is enough: an engine only
  sleeps after ``spin_window`` (5 ms, > :data:`RING_AFTER_S`) without any
  progress, and receiving our previous message was progress; so an engine
  that may be asleep is always rung, and a stream of messages rings once;
* a ring is sent after the ``Isend``, so the engine it wakes finds the
  message; an engine decides to sleep on the time taken *before* its last
  probe, so a preemption between probe and decision cannot make it sleep
  past a message whose sender did not ring;
* only when *every* peer can ring us, and nothing happened for a second,
  does the engine sleep long (``AIOPDBP_IDLE_MAX_US``, 50 ms) when idle;
  otherwise (a conversation going on, or a peer on another host or in
  another network namespace, where the abstract name does not reach) it
  keeps the 1 ms timer.  Who can ring us comes with the addresses: each
  carries a key of the kernel and network namespace it was bound in (the
  boot id and the namespace's inode, hashed), and an abstract name reaches
  exactly the sockets of its namespace.  So no engine rings anyone at start;
  a peer in another namespace is never rung (it cannot be).  Only where a
  key is unknown (no ``/proc``) does the engine ring that peer once at start
  (a hello, its rank in the datagram) and count on it once it heard its
  hello.  Hellos to every peer were n - 1 datagrams per rank, and a socket
  queues 10 (``net.unix.max_dgram_qlen``): with more than 11 ranks on a host
  the hellos of ranks that start together overflowed it and were lost, and
  their engines never slept long.

A lost or refused ring costs latency, never a message: the idle timer still
fires.  A full socket buffer means rings are already pending: dropped.
"""

from __future__ import annotations

import hashlib
import os
import socket
from typing import Any, Final

__all__ = ["ADDRESS_BYTES", "Doorbell", "DoorbellJoin", "KEY_BYTES", "RING_AFTER_S", "namespace_key"]

#: a send rings its destination when the previous send to it is older than this
RING_AFTER_S: Final = 2e-3
#: bytes of an address in the exchange: the namespace key, then the abstract name
ADDRESS_BYTES: Final = 104
#: bytes of the namespace key at the head of an address (all 0xff: not known)
KEY_BYTES: Final = 8
_NO_KEY: Final = b"\xff" * KEY_BYTES


def namespace_key() -> bytes:
    """:data:`KEY_BYTES` bytes naming this kernel's network namespace (equal
    keys: each other's abstract socket names reach); all 0xff when unknown."""
    try:
        with open("/proc/sys/kernel/random/boot_id", "rb") as f:
            boot = f.read().strip()
        ino = os.stat("/proc/self/ns/net").st_ino
    except OSError:
        return _NO_KEY
    key = hashlib.blake2b(boot + b":" + str(ino).encode(), digest_size=KEY_BYTES).digest()
    return key if key != _NO_KEY else key[:-1] + b"\0"


class Doorbell:
    """This engine's socket, the peers' addresses, and who has rung us."""

    def __init__(self, rank: int, size: int) -> None:
        self.rank, self.size = rank, size
        self.sock = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
        self.sock.setblocking(False)
        name = f"\0aiopdbp.{os.getpid()}.{os.urandom(16).hex()}".encode()   # (uuid4 is os.urandom(16))
        self.sock.bind(name)
        self.address = name
        self.key = namespace_key()
        self._me = rank.to_bytes(4, "little")
        self._peers: list[bytes | None] = [None] * size
        self._heard = {rank}
        self.rung = self.ring_failures = self.heard = 0

    def packed_address(self) -> bytes:
        """This doorbell's key and address, padded to :data:`ADDRESS_BYTES` for the exchange."""
        return (self.key + self.address).ljust(ADDRESS_BYTES, b"\xff")

    def set_peers(self, packed: bytes) -> None:
        """The exchanged addresses (rank order): a peer in our namespace can
        ring us, one in another is never rung; a hello only where a key is
        unknown (see the module docstring)."""
        hello = []
        for r in range(self.size):
            entry = packed[r * ADDRESS_BYTES:(r + 1) * ADDRESS_BYTES]
            key, raw = entry[:KEY_BYTES], entry[KEY_BYTES:].rstrip(b"\xff")
            if r == self.rank or not raw:
                self._peers[r] = None
            elif _NO_KEY in (key, self.key):
                self._peers[r] = raw
                hello.append(r)
            elif key == self.key:
                self._peers[r] = raw
                self._heard.add(r)
            else:
                self._peers[r] = None
        for r in hello:
            self.ring(r)

    def ring(self, dest: int) -> None:
        """Wake ``dest``'s engine should it sleep (no-op for a peer we cannot reach)."""
        addr = self._peers[dest]
        if addr is None:
            return
        try:
            self.sock.sendto(self._me, addr)
            self.rung += 1
        except BlockingIOError:
            pass  # its buffer is full of rings: it will wake anyway
        except OSError:  # not on this host (or gone): its idle timer covers it
            self._peers[dest] = None
            self.ring_failures += 1

    def drain(self) -> bool:
        """Read every pending ring; True if there was one."""
        got = False
        while True:
            try:
                data = self.sock.recv(64)
            except (BlockingIOError, InterruptedError):
                return got
            except OSError:
                return got
            got = True
            self.heard += 1
            if len(data) == 4:
                self._heard.add(int.from_bytes(data, "little"))

    @property
    def everyone_rings(self) -> bool:
        """True once every peer has rung us (so none relies on our idle timer)."""
        return len(self._heard) >= self.size

    def fileno(self) -> int:
        return self.sock.fileno()

    def close(self) -> None:
        self.sock.close()


class DoorbellJoin:
    """The address exchange in flight: this rank's doorbell (None: none here),
    the ``Iallgather`` request and its buffers (kept alive until it completes)."""

    __slots__ = ("bell", "req", "mine", "every")

    def __init__(self, bell: Doorbell | None, req: Any, mine: bytearray, every: bytearray) -> None:
        self.bell, self.req, self.mine, self.every = bell, req, mine, every

    def done(self) -> bool:
        """True once every address is here (the doorbell's peers are then set)."""
        if not self.req.Test():
            return False
        if self.bell is not None:
            self.bell.set_peers(bytes(self.every))
        return True
