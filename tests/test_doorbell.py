"""The progress engine's doorbell (aiopdbp.transport.doorbell), without MPI."""

from __future__ import annotations

import pytest

from aiopdbp.transport.doorbell import ADDRESS_BYTES, KEY_BYTES, Doorbell

NO_KEY = b"\xff" * KEY_BYTES

pytestmark = pytest.mark.timeout(10)


def _pair() -> tuple[Doorbell, Doorbell]:
    a, b = Doorbell(0, 2), Doorbell(1, 2)
    packed = a.packed_address() + b.packed_address()
    a.set_peers(packed)
    b.set_peers(packed)
    return a, b


def test_peers_of_our_namespace_can_ring_without_a_hello() -> None:
    a, b = _pair()
    try:
        assert a.everyone_rings and b.everyone_rings
        assert a.rung == b.rung == 0 and not a.drain() and not b.drain()
    finally:
        a.close()
        b.close()


def test_every_peer_of_a_crowded_host_can_ring_once_the_addresses_are_in() -> None:
    # 24 ranks start together: hellos to every peer overflowed each socket's
    # queue of 10 datagrams (net.unix.max_dgram_qlen) and most were lost
    bells = [Doorbell(r, 24) for r in range(24)]
    try:
        packed = b"".join(b.packed_address() for b in bells)
        for b in bells:
            b.set_peers(packed)
        for b in bells:
            b.drain()
        assert [b.everyone_rings for b in bells] == [True] * 24
    finally:
        for b in bells:
            b.close()


def test_a_peer_whose_namespace_is_unknown_is_counted_on_after_its_hello() -> None:
    a, b = Doorbell(0, 2), Doorbell(1, 2)
    b.key = NO_KEY   # no /proc there, say
    try:
        packed = a.packed_address() + b.packed_address()
        a.set_peers(packed)
        b.set_peers(packed)
        assert a.rung == b.rung == 1 and not a.everyone_rings and not b.everyone_rings
        assert a.drain() and b.drain()
        assert a.everyone_rings and b.everyone_rings
    finally:
        a.close()
        b.close()


def test_a_peer_in_another_namespace_is_never_rung_nor_counted_on() -> None:
    a = Doorbell(0, 2)
    try:
        other = bytes(x ^ 1 for x in a.key)
        a.set_peers(a.packed_address() + (other + b"\0aiopdbp.elsewhere").ljust(ADDRESS_BYTES, b"\xff"))
        a.ring(1)
        assert a.rung == 0 and a.ring_failures == 0 and not a.everyone_rings
    finally:
        a.close()


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
        a.set_peers(a.packed_address() + (NO_KEY + b"\0aiopdbp.nobody").ljust(ADDRESS_BYTES, b"\xff"))
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
