"""Heat distribution on a plate by Jacobi iteration, one GP per strip (SPEC section 10).

The lecture notes' synchronous computation: a square room whose walls are at
20 degrees, with a fireplace (100 degrees) in the middle of the top wall.
The interior is cut into P horizontal strips, one GP each.  Every iteration:

* **local synchronisation** -- each GP exchanges its edge rows (halos) with
  the strips above and below only (:class:`aiopdbp.sync.Neighbours`);
* one Jacobi sweep over the strip;
* every ``--check`` iterations a **convergence test**: a barrier round that
  also reduces the largest change (``Barrier.allreduce(delta, "max")``).

At the end GP 0 gathers the strips and compares the plate with the same
computation done by plain numpy in one process (difference <= 1e-10; it is
in fact 0: every point is computed with the same operations in the same
order).  Exit code 0 when it matches::

    python examples/jacobi_heat.py 4                       # 4 strips, one process
    aiopdbp launch -n 2 examples/jacobi_heat.py 4          # strip GPs on 2 ranks
    python examples/jacobi_heat.py 4 --size 96 --iters 2000 --barrier dissemination
"""

from __future__ import annotations

import argparse
import asyncio
import sys
import time
from typing import Any

import numpy as np

import aiopdbp
from aiopdbp.sync import Barrier, Neighbours

WALL, FIRE = 20.0, 100.0


def initial_plate(n: int) -> np.ndarray[Any, np.dtype[np.float64]]:
    """(n + 2) x (n + 2) points: boundary values and an interior at WALL."""
    u = np.full((n + 2, n + 2), WALL)
    lo, hi = int(0.3 * (n + 2)), int(0.7 * (n + 2))
    u[0, lo:hi] = FIRE                    # the fireplace, in the top wall
    return u


def sweep(u: np.ndarray[Any, Any], out: np.ndarray[Any, Any]) -> float:
    """One Jacobi sweep of the interior of ``u`` (with its halo/boundary
    rows and columns) into ``out``; returns the largest change."""
    out[1:-1, 1:-1] = 0.25 * (u[:-2, 1:-1] + u[2:, 1:-1] + u[1:-1, :-2] + u[1:-1, 2:])
    return float(np.max(np.abs(out[1:-1, 1:-1] - u[1:-1, 1:-1]))) if out.shape[0] > 2 else 0.0


def reference(n: int, iters: int, tol: float, check: int) -> tuple[np.ndarray[Any, Any], int]:
    """The whole plate in one process, with the same stopping rule."""
    u = initial_plate(n)
    v = u.copy()
    it = 0
    while it < iters:
        delta = sweep(u, v)
        u, v = v, u
        it += 1
        if it % check == 0 and delta < tol:
            break
    return u, it


def strip_rows(n: int, p: int, k: int) -> tuple[int, int]:
    """Interior rows [lo, hi) (1-based plate rows) of strip k."""
    base, extra = divmod(n, p)
    lo = 1 + k * base + min(k, extra)
    return lo, lo + base + (1 if k < extra else 0)


async def strip(node: aiopdbp.Node, k: int, cfg: argparse.Namespace) -> dict[str, Any] | None:
    n, p = cfg.size, cfg.strips
    names = [f"heat-{j}" for j in range(p)]
    lo, hi = strip_rows(n, p, k)
    plate = initial_plate(n)
    u = plate[lo - 1:hi + 1].copy()       # my rows plus one halo row above and below
    v = u.copy()
    up = names[k - 1] if k > 0 else None
    down = names[k + 1] if k < p - 1 else None
    nbrs = [x for x in (up, down) if x is not None]
    async with node.process(names[k]) as gp:
        async with Neighbours(gp, "heat", nbrs, timeout=cfg.timeout) as halo, \
                Barrier(gp, "heat", names, algorithm=cfg.barrier, timeout=cfg.timeout) as bar:
            it, delta = 0, float("inf")
            while it < cfg.iters:
                out = {}
                if up is not None:
                    out[up] = u[1]             # my first row is the halo of the strip above
                if down is not None:
                    out[down] = u[-2]
                got = await halo.exchange(out)  # local synchronisation with two neighbours
                if up is not None:
                    u[0] = got[up]
                if down is not None:
                    u[-1] = got[down]
                local = sweep(u, v)
                v[0], v[-1] = u[0], u[-1]
                u, v = v, u
                it += 1
                if it % cfg.check == 0:        # global convergence test: one barrier round
                    delta = await bar.allreduce(local, "max")
                    if delta < cfg.tol:
                        break
            result = u[1:-1]
            if k != 0:
                await gp.send_stream("heat-0", result, com=k, timeout=cfg.timeout)
                return None
            plate_out = plate.copy()
            plate_out[lo:hi] = result
            for _ in range(p - 1):
                s = await gp.recv(timeout=cfg.timeout)
                assert isinstance(s, aiopdbp.IncomingStream)
                a, b = strip_rows(n, p, s.com)
                plate_out[a:b] = await s.read()
            return {"plate": plate_out, "iters": it, "delta": delta,
                    "messages": bar.stats.sent, "halos": halo.stats.sent}


async def main(cfg: argparse.Namespace) -> int:
    async with aiopdbp.open_node() as node:
        rank, size = node.rank, node.size
        t0 = time.perf_counter()
        mine = [k for k in range(cfg.strips) if k % size == rank]   # strip k on rank k % size
        results = await asyncio.gather(*(strip(node, k, cfg) for k in mine))
        elapsed = time.perf_counter() - t0
        if rank != 0:
            return 0
        res = results[0]
        assert res is not None
        ref, ref_iters = reference(cfg.size, cfg.iters, cfg.tol, cfg.check)
        err = float(np.max(np.abs(res["plate"] - ref)))
        ok = err <= 1e-10 and ref_iters == res["iters"]
        print(f"jacobi_heat: {cfg.size}x{cfg.size} plate, {cfg.strips} strips on {size} host(s), "
              f"{res['iters']} iterations (last max change {res['delta']:.3g}), "
              f"{cfg.barrier} barrier, {elapsed:.2f} s", flush=True)
        print(f"centre temperature {ref[cfg.size // 2 + 1, cfg.size // 2 + 1]:.6f}; "
              f"max |parallel - numpy reference| = {err:.3g} "
              f"(reference: {ref_iters} iterations): {'OK' if ok else 'MISMATCH'}", flush=True)
        return 0 if ok else 1


def parse(argv: list[str]) -> argparse.Namespace:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("strips", type=int, nargs="?", default=4, help="number of strip GPs (default 4)")
    ap.add_argument("--size", type=int, default=48, help="interior points per side (default 48)")
    ap.add_argument("--iters", type=int, default=2000, help="at most this many iterations")
    ap.add_argument("--tol", type=float, default=1e-2, help="stop when the largest change is below")
    ap.add_argument("--check", type=int, default=10, help="convergence test every N iterations")
    ap.add_argument("--barrier", default="tree", choices=["counter", "tree", "dissemination"])
    ap.add_argument("--timeout", type=float, default=60.0, help="seconds for any one wait")
    cfg = ap.parse_args(argv)
    if not 1 <= cfg.strips <= cfg.size:
        ap.error("need 1 <= strips <= size")
    if cfg.check < 1 or cfg.iters < 1:
        ap.error("--check and --iters must be >= 1")
    return cfg


if __name__ == "__main__":
    sys.exit(aiopdbp.run(main(parse(sys.argv[1:]))))
