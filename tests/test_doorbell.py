"""The progress engine's doorbell (aiopdbp.transport.doorbell), without MPI."""

from __future__ import annotations

import pytest

from aiopdbp.transport.doorbell import ADDRESS_BYTES, Doorbell

pytestmark = pytest.mark.timeout(10)


def _pair() -> tuple[Doorbell, Doorbell]:
    a, b = Doorbell(0, 2), Doorbell(1, 2)
    packed = a.packed_address() + b.packed_address()
    a.set_peers(packed)
    b.set_peers(packed)
    return a, b


def test_doorbell_hello_proves_every_peer_can_ring() -> None:
    a, b = _pair()
    try:
        assert not a.everyone_rings
        assert a.drain() and b.drain()
        assert a.everyone_rings and b.everyone_rings
    finally:
        a.close()
        b.close()


def test_doorbell_ring_is_read_once() -> None:
    a, b = _pair()
    try:
        b.drain()
        a.ring(1)
        assert b.drain()
        assert not b.drain()
    finally:
        a.close()
        b.close()


def test_doorbell_unreachable_peer_is_dropped_without_error() -> None:
    a = Doorbell(0, 2)
    try:
        a.set_peers(a.packed_address() + b"\0aiopdbp.nobody".ljust(ADDRESS_BYTES, b"\xff"))
        a.ring(1)
        assert a.ring_failures == 1 and not a.everyone_rings
    finally:
        a.close()


def test_doorbell_peer_without_address_is_never_rung() -> None:
    a = Doorbell(0, 2)
    try:
        a.set_peers(a.packed_address() + b"\xff" * ADDRESS_BYTES)
        a.ring(1)
        assert a.rung == 0 and a.ring_failures == 0
    finally:
        a.close()
