"""The async/await GPU pipeline: producer -> K workers -> sink, all by data streams.

* ``producer`` cuts a video-like sequence into chunks of frames (float32,
  ``frames x height x width``) and streams chunk c to ``worker-(c % K)``
  (one sending task per worker, so the workers are fed concurrently);
* each ``worker-w`` reads a chunk, transforms it -- on the GPU with CuPy when
  it is installed and a device is present, else with numpy -- and streams
  the result to ``sink`` (same chunk number in ``com``);
* ``sink`` gets the result streams of all workers interleaved, checks every
  chunk against the expected transform, puts them back into chunk order and
  checks that every chunk arrived exactly once and that each worker's
  chunks came in order.  It prints the throughput.  Exit code 0 when every
  check passed::

    python examples/pipeline.py                          # one process
    aiopdbp launch -n 2 examples/pipeline.py --workers 3 # GPs spread over 2 ranks
    python examples/pipeline.py --cpu --chunks 64        # numpy even with CuPy present
    aiopdbp launch -n 2 examples/pipeline.py --device sim   # SGPs, simulated device
    aiopdbp launch -n 2 examples/pipeline.py --device cupy  # SGPs, CuPy arrays end to end

With ``--device sim`` or ``--device cupy`` the producer and the workers are
SGPs (``PType.GPU``) and the data stays on the device: the producer uploads
each chunk and streams the *device* array; a worker's ``read()`` returns a
device array on its device, it transforms it there (queued on ``gp.stream``;
the send is ordered after it by aiopdbp, no synchronize), and streams the
device result to the sink, an NGP, which receives numpy.  Between ranks the
arrays are staged through pinned chunks; on one rank they are copied device
to device.  ``sim`` runs the same code on any machine (the "kernels" are
numpy functions queued on simulated streams).

GP i of ``[producer, worker-0, ..., worker-(K-1), sink]`` lives on rank i % N.
"""

from __future__ import annotations

import argparse
import asyncio
import heapq
import sys
import time
from typing import Any

import numpy as np

import aiopdbp
from aiopdbp import GP, IncomingStream, Kind, Message

STOP = 1          # command: no more chunks (data: how many this sender sent)


def _xp(cpu: bool) -> Any:
    """CuPy when usable (and not --cpu), else numpy."""
    if cpu:
        return np
    try:
        import cupy

        if cupy.cuda.runtime.getDeviceCount() > 0:
            return cupy
    except Exception:
        pass
    return np


def make_chunk(c: int, frames: int, h: int, w: int) -> np.ndarray[Any, np.dtype[np.float32]]:
    """Chunk c of the input sequence (deterministic, so the sink can check it)."""
    rng = np.random.default_rng(c)
    return rng.random((frames, h, w), dtype=np.float32) * 255.0


def transform(xp: Any, x: Any) -> Any:
    """What a worker does to a chunk: a 3x3 box blur of every frame, then a
    per-frame contrast stretch to [0, 1] (the kind of per-frame analysis the
    papers run on GPUs)."""
    y = x[:, :-2, :-2] + x[:, :-2, 1:-1] + x[:, :-2, 2:] \
        + x[:, 1:-1, :-2] + x[:, 1:-1, 1:-1] + x[:, 1:-1, 2:] \
        + x[:, 2:, :-2] + x[:, 2:, 1:-1] + x[:, 2:, 2:]
    y = y / 9.0
    lo = y.min(axis=(1, 2), keepdims=True)
    hi = y.max(axis=(1, 2), keepdims=True)
    return ((y - lo) / (hi - lo + 1e-6)).astype(xp.float32)


class Device:
    """The example's two device operations -- upload a host array, transform
    a device array on the GP's stream -- over CuPy or the simulated backend."""

    def __init__(self, node: aiopdbp.Node) -> None:
        self.backend = node.devices.open().backend
        self.cupy: Any = None
        if self.backend.name == "cupy":
            import cupy
            self.cupy = cupy

    def upload(self, gp: Any, host: Any) -> Any:
        if self.cupy is not None:
            with self.cupy.cuda.Device(gp.device), gp.stream:
                return self.cupy.asarray(host)
        return self.backend.asarray(host, gp.device)  # type: ignore[attr-defined]

    def transform(self, gp: Any, x: Any) -> Any:
        """``transform`` queued on ``gp.stream``: returns before it ran."""
        if self.cupy is not None:
            with self.cupy.cuda.Device(gp.device), gp.stream:
                return transform(self.cupy, x)
        be: Any = self.backend
        out = be.empty((x.shape[0], x.shape[1] - 2, x.shape[2] - 2), np.float32, "C", gp.device)
        be.launch(gp.device_stream, lambda: np.copyto(out.unsafe_host_view(),
                                                      transform(np, x.unsafe_host_view())))
        return out


async def producer(gp: GP, cfg: argparse.Namespace, dev: Device | None) -> None:
    workers = [f"worker-{w}" for w in range(cfg.workers)]

    async def feed(w: int) -> None:
        n = 0
        for c in range(w, cfg.chunks, cfg.workers):
            chunk = make_chunk(c, cfg.frames, cfg.height, cfg.width)
            await gp.send_stream(workers[w], chunk if dev is None else dev.upload(gp, chunk),
                                 com=c, timeout=cfg.timeout)
            n += 1
        await gp.command(workers[w], STOP, n.to_bytes(4, "little"), timeout=cfg.timeout)

    await asyncio.gather(*(feed(w) for w in range(cfg.workers)))


async def worker(gp: GP, cfg: argparse.Namespace, xp: Any, dev: Device | None) -> None:
    done = 0
    while True:
        item = await gp.recv(timeout=cfg.timeout)
        if isinstance(item, Message):
            assert item.kind is Kind.COMMAND and item.com == STOP
            await gp.command("sink", STOP, done.to_bytes(4, "little"), timeout=cfg.timeout)
            return
        frames = await item.read()      # numpy, or (SGP, --device) a device array on gp.device
        if dev is not None:                             # stays on the device
            out = dev.transform(gp, frames)
        elif xp is np:
            out = transform(np, frames)
        else:                                           # host -> GPU -> host
            out = xp.asnumpy(transform(xp, xp.asarray(frames)))
        await gp.send_stream("sink", out, com=item.com, timeout=cfg.timeout)
        done += 1


async def sink(gp: GP, cfg: argparse.Namespace) -> dict[str, Any]:
    stops = 0
    seen: set[int] = set()
    last_of: dict[str, int] = {}
    heap: list[int] = []
    next_c = 0
    problems: list[str] = []
    nbytes = 0
    while stops < cfg.workers:        # a STOP follows its worker's last delivered stream
        item = await gp.recv(timeout=cfg.timeout)
        if isinstance(item, Message):
            stops += 1
            continue
        assert isinstance(item, IncomingStream)
        c, src = item.com, item.source
        out = await item.read()
        nbytes += out.nbytes
        if c in seen:
            problems.append(f"chunk {c} arrived twice")
        seen.add(c)
        if last_of.get(src, -1) >= c:
            problems.append(f"{src}: chunk {c} after chunk {last_of[src]}")
        last_of[src] = c
        want = transform(np, make_chunk(c, cfg.frames, cfg.height, cfg.width))
        if out.shape != want.shape or not np.allclose(out, want, atol=1e-5):
            problems.append(f"chunk {c}: wrong content")
        heapq.heappush(heap, c)                      # put the chunks back in order
        while heap and heap[0] == next_c:
            heapq.heappop(heap)
            next_c += 1
    if next_c != cfg.chunks or len(seen) != cfg.chunks:
        problems.append(f"only chunks 0..{next_c - 1} could be put in order, {len(seen)} seen")
    return {"problems": problems, "bytes_out": nbytes}


async def main(cfg: argparse.Namespace) -> int:
    xp = _xp(cfg.cpu or cfg.device != "none")
    names = ["producer", *(f"worker-{w}" for w in range(cfg.workers)), "sink"]
    async with aiopdbp.open_node(device=cfg.device) as node:
        rank, size = node.rank, node.size
        dev = Device(node) if cfg.device != "none" else None
        sgp = aiopdbp.PType.GPU if dev is not None else aiopdbp.PType.CPU

        async def role(name: str) -> Any:
            async with node.process(name, sgp if name != "sink" else aiopdbp.PType.CPU) as gp:
                if name == "producer":
                    return await producer(gp, cfg, dev)
                if name == "sink":
                    return await sink(gp, cfg)
                return await worker(gp, cfg, xp, dev)

        mine = [nm for i, nm in enumerate(names) if i % size == rank]
        t0 = time.perf_counter()
        results = dict(zip(mine, await asyncio.gather(*(role(nm) for nm in mine))))
        elapsed = time.perf_counter() - t0
        if "sink" not in results:
            return 0
        res = results["sink"]
        mb_in = cfg.chunks * cfg.frames * cfg.height * cfg.width * 4 / 1e6
        print(f"pipeline: {cfg.chunks} chunks x {cfg.frames} frames {cfg.height}x{cfg.width} "
              f"float32 ({mb_in:.1f} MB) -> {cfg.workers} workers "
              f"({xp.__name__ if dev is None else 'SGPs, ' + dev.backend.name + ' device'}) -> sink, "
              f"{size} host(s), {elapsed:.3f} s", flush=True)
        print(f"throughput: {mb_in / elapsed:.1f} MB/s in, {cfg.chunks * cfg.frames / elapsed:.0f} "
              "frames/s (end to end, the sink's checks included)", flush=True)
        if res["problems"]:
            print("sink: FAILED: " + "; ".join(res["problems"][:5]), flush=True)
            return 1
        print(f"sink: all {cfg.chunks} chunks arrived once, in order per worker, content OK",
              flush=True)
        return 0


def parse(argv: list[str]) -> argparse.Namespace:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--workers", type=int, default=3)
    ap.add_argument("--chunks", type=int, default=24)
    ap.add_argument("--frames", type=int, default=8, help="frames per chunk")
    ap.add_argument("--height", type=int, default=120)
    ap.add_argument("--width", type=int, default=160)
    ap.add_argument("--cpu", action="store_true", help="numpy even when CuPy is present")
    ap.add_argument("--device", choices=["none", "sim", "cupy"], default="none",
                    help="SGP producer and workers with device arrays end to end: the simulated "
                         "backend (any machine) or CuPy (a GPU); default none: NGPs as above")
    ap.add_argument("--timeout", type=float, default=60.0)
    cfg = ap.parse_args(argv)
    if cfg.workers < 1 or cfg.chunks < 0 or cfg.frames < 1 or cfg.height < 3 or cfg.width < 3:
        ap.error("need workers >= 1, chunks >= 0, frames >= 1, height and width >= 3")
    return cfg


async def _main(cfg: argparse.Namespace) -> int:
    try:
        return await main(cfg)
    except aiopdbp.DeviceError as exc:  # e.g. --device cupy without CuPy or a GPU
        print(f"pipeline: --device {cfg.device}: {exc}", file=sys.stderr, flush=True)
        return 2


if __name__ == "__main__":
    sys.exit(aiopdbp.run(_main(parse(sys.argv[1:]))))
