"""What every implementation moves and how receivers check it.

Shared by the aiopdbp, raw mpi4py and asyncio-floor drivers, so that all of
them send the same bytes over the same flows and pay the same checks.

* A :class:`Flow` is one logical stream: ``src`` rank -> ``dst`` rank, GP
  (channel) ``chan``.  :func:`flows` lists the flows of each test (the
  paper's 1-to-N, N-to-1 and N-to-N, and the OSU-style point-to-point tests).
* A :class:`Ring` holds the payloads of one unit packet size: ``count``
  distinct, seeded pseudo-random ``bytes`` objects.  Unit ``i`` of every flow
  is ``ring.unit(i) = units[i % count]``; every sender reuses them (the
  benchmark's buffer policy: prebuilt, reused, immutable), and every receiver
  compares what it got, byte for byte, with the unit it expected next --
  which also catches loss, duplication and reordering within a ring period.
  Every receiver of a window test checks a window's units at once: raw MPI
  its window buffer (:meth:`Checker.check_window`), aiopdbp and the floor
  the units they received in it (:meth:`Checker.check_all`, one list compare
  of ``bytes``), so that none pays a Python call per unit for its check
  that another does not.
* A :class:`Checker` counts what a rank received per flow and records the
  first few mismatches.  A mismatch never raises inside a timed loop: the
  run completes (so no peer hangs), the errors are gathered, and the harness
  fails the whole run with their text.
* A :class:`Measure` is one rank's part of one run.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from collections.abc import Sequence
from typing import Any

import numpy as np

__all__ = [
    "IMPLS",
    "PATTERNS",
    "TESTS",
    "Checker",
    "Flow",
    "Measure",
    "Ring",
    "flows",
    "matches",
    "window_for",
]

#: point-to-point (OSU-style) tests and the paper's patterns
#: (the ping-pong latency test is ``aiopdbp bench pingpong``: :mod:`aiopdbp.bench.pingpong`)
TESTS = ("bw", "rate", "1toN", "Nto1", "NtoN")
PATTERNS = ("1toN", "Nto1", "NtoN")
#: implementations, in the order rows are shown
IMPLS = ("aiopdbp-msg", "aiopdbp-stream", "raw", "floor", "floor64k", "alltoall")

#: a window of raw Isends (and the floor's in-flight limit) holds at most this much
WINDOW_BYTES = 16 << 20
#: default window (osu_bw / osu_mbw_mr use 64)
WINDOW = 64
#: memory for one ring of distinct payloads
RING_BYTES = 32 << 20
#: a small unit is checked with ``bytes ==`` (one memcmp), a large one with numpy
_NP_CHECK = 4096
_BYTES = {bytes}


@dataclass(frozen=True, order=True)
class Flow:
    """One logical stream: rank ``src`` -> rank ``dst`` on channel (GP index) ``chan``."""

    src: int
    dst: int
    chan: int = 0

    def label(self) -> str:
        return f"{self.src}->{self.dst}#{self.chan}"


def flows(test: str, nranks: int, gps_per_rank: int = 1) -> list[Flow]:
    """The flows of ``test`` on ``nranks`` ranks with ``gps_per_rank`` GPs per rank.

    ``latency``/``bw``: rank 0 -> rank 1.  ``rate``: pairs ``i -> i + n//2``
    (osu_mbw_mr).  Patterns: GP ``j`` of a sender rank sends to GP ``j`` of
    each receiver rank, so every flow crosses ranks: ``1toN`` rank 0 -> all
    others, ``Nto1`` all others -> rank 0, ``NtoN`` every rank -> every other
    (``n*(n-1)*gps_per_rank`` flows).
    """
    if nranks < 2:
        raise ValueError(f"{test} needs at least 2 ranks, got {nranks}")
    k = range(gps_per_rank if test in PATTERNS else 1)
    if test == "bw":
        return [Flow(0, 1, 0)]
    if test == "rate":
        h = nranks // 2
        return [Flow(i, i + h, 0) for i in range(h)]
    if test == "1toN":
        return [Flow(0, d, j) for d in range(1, nranks) for j in k]
    if test == "Nto1":
        return [Flow(s, 0, j) for s in range(1, nranks) for j in k]
    if test == "NtoN":
        return [Flow(s, d, j) for s in range(nranks) for d in range(nranks) if s != d for j in k]
    raise ValueError(f"unknown test {test!r}; choose from {', '.join(TESTS)}")


def window_for(size: int, window: int = WINDOW) -> int:
    """Units per raw window: ``window``, or fewer so a window stays <= 16 MiB."""
    return max(1, min(window, WINDOW_BYTES // max(1, size)))


class Ring:
    """``count`` distinct payloads of ``size`` bytes (seeded), reused by every sender.

    ``count`` is a multiple of ``window`` (so a raw receive window that
    starts at a multiple of ``window`` matches one contiguous slice of
    :attr:`concat`) and the ring stays near :data:`RING_BYTES`.
    """

    def __init__(self, size: int, window: int, seed: int = 291) -> None:
        if size < 1:
            raise ValueError("unit size must be >= 1 byte")
        self.size = size
        self.window = window
        self.count = window * max(1, min(16, RING_BYTES // (window * size)))
        rng = np.random.default_rng([seed, size])
        #: all payloads back to back (receivers compare raw windows against it)
        self.concat: np.ndarray[Any, np.dtype[np.uint8]] = rng.integers(
            0, 256, self.count * size, dtype=np.uint8)
        c = self.concat
        #: the payloads as immutable ``bytes`` (what senders send)
        self.units: list[bytes] = [c[j * size:(j + 1) * size].tobytes() for j in range(self.count)]

    def unit(self, i: int) -> bytes:
        """Unit ``i`` of a flow."""
        return self.units[i % self.count]

    def expected_window(self, i: int, k: int) -> np.ndarray[Any, np.dtype[np.uint8]]:
        """Units ``i .. i+k-1`` back to back (``i`` a multiple of the window, ``k <= window``)."""
        j = i % self.count
        if j + k > self.count:
            raise ValueError("window crosses the end of the ring")
        return self.concat[j * self.size:(j + k) * self.size]

    def corrupted(self) -> Ring:
        """A copy whose unit 0 (sent first, then once per ring period) has one
        byte flipped: fault injection that every run, however short, sends."""
        bad = object.__new__(Ring)
        bad.size, bad.window, bad.count = self.size, self.window, self.count
        bad.concat = self.concat.copy()
        j = 0
        bad.concat[self.size // 2] ^= 0x5A
        bad.units = list(self.units)
        bad.units[j] = bad.concat[j * self.size:(j + 1) * self.size].tobytes()
        return bad


def matches(data: Any, expected: bytes) -> bool:
    """True if the buffer ``data`` holds exactly ``expected``.

    ``bytes``/``bytearray`` compare with one memcmp; other buffers
    (memoryview, ndarray) through a copy when small, numpy when large.
    """
    if type(data) is bytes or type(data) is bytearray:
        return data == expected
    if isinstance(data, np.ndarray):
        if data.nbytes != len(expected):
            return False
        if data.nbytes < _NP_CHECK:
            return data.tobytes() == expected
        flat = data.reshape(-1).view(np.uint8)
    else:
        mv = memoryview(data)
        if mv.nbytes != len(expected):
            return False
        if mv.nbytes < _NP_CHECK:
            return mv.tobytes() == expected
        flat = np.frombuffer(mv.cast("B") if mv.format != "B" else mv, dtype=np.uint8)
    return bool(np.array_equal(flat, np.frombuffer(expected, dtype=np.uint8)))


@dataclass
class Measure:
    """One rank's part of one run (what the harness gathers)."""

    elapsed: float = 0.0     #: seconds from this rank's start to its end (0: not taking part)
    cpu: float = 0.0         #: process CPU seconds over the same interval
    sent: int = 0            #: units this rank sent
    recvd: int = 0           #: units this rank received and checked
    errors: list[str] = field(default_factory=list)


class Checker:
    """Per-rank verification state of one run: next unit expected per flow."""

    MAX_ERRORS = 5

    def __init__(self, ring: Ring, impl: str, rank: int = 0) -> None:
        self.ring = ring
        self.impl = impl
        self.rank = rank
        self.next: dict[Any, int] = {}
        self.errors: list[str] = []
        self.bad = 0

    def check(self, key: Any, data: Any) -> None:
        """Check the next unit of flow ``key``."""
        i = self.next.get(key, 0)
        self.next[key] = i + 1
        if not matches(data, self.ring.units[i % self.ring.count]):
            self.fail(key, i, "payload differs from the expected unit")

    def check_all(self, keys: Sequence[Any], datas: Sequence[Any]) -> None:
        """Check units received in this order, ``datas[u]`` from flow
        ``keys[u]``: per flow, its next units, byte for byte -- what
        :meth:`check` does for each pair, in one call per window of a
        receiver, as :meth:`check_window` checks a raw receiver's window (the
        per-unit work is then C: one list compare of ``bytes``)."""
        if not keys:
            return
        if keys.count(keys[0]) == len(keys):   # one flow (the OSU-style tests)
            self.check_run(keys[0], datas)
            return
        runs: dict[Any, list[Any]] = {}
        for key, data in zip(keys, datas):
            runs.setdefault(key, []).append(data)
        for key, run in runs.items():
            self.check_run(key, run)

    def check_run(self, key: Any, datas: Sequence[Any]) -> None:
        """Check the next ``len(datas)`` units of flow ``key``: ``datas``, in order."""
        i = self.next.get(key, 0)
        k = len(datas)
        self.next[key] = i + k
        units, count = self.ring.units, self.ring.count
        j = i % count
        want = units[j:j + k] if j + k <= count else [units[(i + u) % count] for u in range(k)]
        # bytes compare by value (a memcmp each); anything else unit by unit (matches)
        if set(map(type, datas)) == _BYTES and list(datas) == want:
            return
        for u in range(k):
            if not matches(datas[u], want[u]):
                self.fail(key, i + u, "payload differs from the expected unit")

    def check_window(self, key: Any, i: int, buf: np.ndarray[Any, np.dtype[np.uint8]], k: int) -> None:
        """Check ``k`` units ``i ..`` that a raw receiver got back to back in ``buf``."""
        self.next[key] = i + k
        want = self.ring.expected_window(i, k)
        if not np.array_equal(buf[:want.size], want):
            size = self.ring.size
            for u in range(k):
                if not np.array_equal(buf[u * size:(u + 1) * size], want[u * size:(u + 1) * size]):
                    self.fail(key, i + u, "payload differs from the expected unit")

    def fail(self, key: Any, i: int, why: str) -> None:
        self.bad += 1
        if len(self.errors) < self.MAX_ERRORS:
            self.errors.append(f"{self.impl}: rank {self.rank} flow from {_label(key)} "
                               f"unit {i} ({self.ring.size} B): {why}")

    def expect_counts(self, want: dict[Any, int]) -> None:
        """Record an error for every flow that did not deliver ``want[key]`` units."""
        for key, n in want.items():
            got = self.next.get(key, 0)
            if got != n:
                self.fail(key, got, f"received {got} units, expected {n}")

    @property
    def received(self) -> int:
        return sum(self.next.values())


def _label(key: Any) -> str:
    """How a flow key reads in an error: a GP name, ``rank R`` or ``rank R chan C``."""
    if isinstance(key, Flow):
        return f"rank {key.src} chan {key.chan}"
    if isinstance(key, tuple) and len(key) == 2:
        return f"rank {key[0]} chan {key[1]}"
    if isinstance(key, int):
        return f"rank {key}"
    return str(key)
