"""Trapezoid rule over P GPs: the MPI device-layer paper's check (SPEC section 9).

Area under y = x**2 on [0, 3], the interval cut into 1024 slices, the slices
split evenly over P GPs; every GP integrates its share and GP 0 collects::

    python examples/trapezoid.py 64                  # 64 GPs in one process
    aiopdbp launch -n 4 examples/trapezoid.py 128    # 128 GPs spread over 4 ranks

Every run prints ``9.000004291534424``, as the paper's runs with 8, 64 and
128 processes did.

Why exactly these digits, for every P: h = 3/1024 = 3 * 2**-10 is a binary
fraction, so every abscissa x_i = i*h is exact in float64, and so is
x_i**2 = 9 * i**2 * 2**-20 (an integer below 2**24 times a power of two).
Every partial sum is a multiple of 2**-21 far below 2**53 * 2**-21, hence
exact, and so is the final product by h.  So *any* slicing and *any*
summation order give the exact trapezoid value
    9 + (b - a) * h**2 / 12 * f'' = 9 + 9 * 2**-21 = 9.000004291534423828125,
whose shortest float64 repr is 9.000004291534424 (the paper printed it with
``%.15e``: 9.000004291534424e+00).  The value is not a float32 artefact:
float32 (24-bit significand) gives 9.000003814697266.
"""

from __future__ import annotations

import asyncio
import sys
import time

import numpy as np

import aiopdbp

A, B, SLICES = 0.0, 3.0, 1024


def f(x: float) -> float:
    return x * x


def local_trapezoid(k: int, p: int) -> float:
    """GP k's part: slices [lo, hi) of SLICES (the first SLICES % p GPs get one more)."""
    h = (B - A) / SLICES
    base, extra = divmod(SLICES, p)
    lo = k * base + min(k, extra)
    hi = lo + base + (1 if k < extra else 0)
    if hi == lo:
        return 0.0
    s = (f(A + lo * h) + f(A + hi * h)) / 2.0
    for i in range(lo + 1, hi):
        s += f(A + i * h)
    return s * h


async def gp_main(node: aiopdbp.Node, k: int, p: int) -> float | None:
    """GP k: integrate its slices; GP 0 also collects everybody's part."""
    async with node.process(f"trap-{k}") as gp:
        part = local_trapezoid(k, p)
        if k != 0:
            # the partial result as a 1-element float64 array; com says whose it is
            await gp.send("trap-0", np.array([part]), com=k, timeout=60)
            return None
        parts = [0.0] * p
        parts[0] = part
        for _ in range(p - 1):
            msg = await gp.recv(timeout=60)
            assert isinstance(msg, aiopdbp.Message)
            parts[msg.com] = float(msg.data[0])
        return sum(parts)          # in GP order (exact anyway, see the module doc)


async def main(p: int) -> int:
    async with aiopdbp.open_node() as node:
        rank, size = node.rank, node.size
        t0 = time.perf_counter()
        mine = [k for k in range(p) if k % size == rank]       # GP k lives on rank k % size
        results = await asyncio.gather(*(gp_main(node, k, p) for k in mine))
        if rank == 0:
            total = results[0]
            assert total is not None
            ms = (time.perf_counter() - t0) * 1e3
            print(f"trapezoid: y = x^2 on [{A:g}, {B:g}], {SLICES} slices, {p} GPs on "
                  f"{size} host(s), {ms:.1f} ms", flush=True)
            print(repr(total), flush=True)
    return 0


if __name__ == "__main__":
    P = int(sys.argv[1]) if len(sys.argv) > 1 else 8
    if P < 1:
        sys.exit("usage: trapezoid.py [P >= 1]")
    sys.exit(aiopdbp.run(main(P)))
