"""The GP pipeline over aiopdbp: ingest GPs -> analyser GPs -> collector GP.

Theory of operation
-------------------
Every rank runs the same program; each builds the same :class:`~.schedule.Plan`
and creates only the GPs that live on it: ``ingest-{rank}``, ``analyser-{rank}-{k}``
and, on rank 0, ``collector``.  Names may be registered later on another rank,
so every send to another GP carries a ``timeout``.

The work goes in *rounds*: in round ``r`` each stream's frame ``r`` is decoded and
analysed (in ``live`` mode a round is a tick of the stream clock, driven by the
collector's ``TICK`` commands; in ``analyse`` mode the ingests run rounds as
fast as the pipeline takes them, until every clip has ended).

* **ingest** (NGP): for each analyser it feeds, decodes the round's frames of
  that analyser's streams into a stacked ``(B, H*3/2, W)`` I420 array, ``B`` <=
  ``--batch``, and sends it as ONE ``send_stream`` preceded by a short message
  with the batch's ``(stream, frame, restart)`` table; both carry the same
  ``com`` (a per-ingest batch number) so the analyser can pair them in any
  order.  One sender task per destination with a small queue keeps decoding
  ahead of the transfers without unbounded memory.  At the end it sends ``END``
  to every analyser and its per-round statistics to the collector.
* **analyser** (NGP with numpy; SGP with CuPy when a GPU is present): pairs each
  batch with its table, moves it to its device (:func:`to_device`, the one
  place where host memory becomes device memory), analyses the whole batch with
  array operations (:class:`~.kernels.StreamStates`) and sends the result
  table (one row per frame) to the collector.  After an ``END`` from every
  ingest it sends its statistics with its own ``END``.
* **collector**: writes the CSV, keeps the per-stream summary, and in ``live``
  mode drives the ticks and times them: a tick starts when ``TICK`` is sent
  (every stream's next frame is already in memory as compressed packets) and
  ends when the result of every stream's frame for that tick has arrived.

Timestamps of different ranks are compared (``time.perf_counter``, which is
CLOCK_MONOTONIC on Linux and so shared by the processes of one machine); on a
real cluster only the per-GP busy times would be meaningful.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

import aiopdbp
from aiopdbp import GP, IncomingStream, Kind, Message, PType

from .ingest import Source, StreamTable
from .kernels import StreamStates, result_rows
from .report import CsvSink, StreamSummary
from .schedule import COLLECTOR, Plan, analyser_name, ingest_name

END = 1        # command to an analyser / the collector: this sender is done (data: statistics)
TICK = 2       # command to the ingests (live): decode and send round `data[0]`
STOP = 3       # command to the ingests (live): no more ticks
CPU_CHUNK = 32  # frames per array operation on the CPU (keeps temporaries in cache)

Array = np.ndarray[Any, Any]


@dataclass
class Config:
    """How to run the pipeline (the CLI fills it in; see ``__main__``)."""

    mode: str = "analyse"                    # "analyse" (files, once) or "live" (ticks)
    width: int = 176
    height: int = 144
    out: Path | None = None                  # CSV path (collector)
    details: bool = False                    # add the blockiness column
    analysers: int = 1                       # analyser GPs per rank
    placement: str = "spread"
    batch: int = 256                         # frames per send_stream, at most
    segment: int = 4 << 20                   # send_stream segment size
    queue: int = 4                           # batches queued per destination
    timeout: float = 120.0
    threads: int = 1                         # decode/analyse in a thread pool of this size (0: inline)
    device: str = "auto"                     # "auto", "cpu" or "gpu"
    fps: float = 25.0                        # live: tick rate (0: as fast as possible)
    ticks: int = 0                           # live: ticks in all (warm-up included)
    warmup: int = 0                          # live: untimed ticks first
    inflight: int = 1                        # live: ticks in the pipeline at once
    phased: bool = False                     # live: decode all, then send all, then analyse all
    quiet: bool = False


@dataclass
class RunResult:
    """What the collector (rank 0) returns."""

    summary: StreamSummary
    rows: int
    ranks: int
    analysers: int
    device: str
    wall: float
    tick_start: Array = field(default_factory=lambda: np.zeros(0))
    tick_lag: Array = field(default_factory=lambda: np.zeros(0))    # start - schedule (fps > 0)
    tick_done: Array = field(default_factory=lambda: np.zeros(0))
    collect_busy: Array = field(default_factory=lambda: np.zeros(0))
    ingest_stats: dict[str, Array] = field(default_factory=dict)      # name -> (rounds + 1, 7)
    analyser_stats: dict[str, Array] = field(default_factory=dict)    # name -> (batches, 7)
    cross_rank_share: float = 0.0


# ------------------------------------------------------------------ device --
def pick_xp(device: str) -> tuple[Any, PType]:
    """(array module, GP type) for the analysers: CuPy + PType.GPU when asked for or
    when ``auto`` finds a CUDA device, else numpy + PType.CPU."""
    if device not in ("auto", "cpu", "gpu"):
        raise ValueError(f"device must be auto, cpu or gpu, got {device!r}")
    if device != "cpu":
        try:
            import cupy

            if cupy.cuda.runtime.getDeviceCount() > 0:
                return cupy, PType.GPU
        except Exception as exc:
            if device == "gpu":
                raise SystemExit(f"--device gpu: CuPy with a CUDA device is needed ({exc})") from exc
        if device == "gpu":
            raise SystemExit("--device gpu: no CUDA device found")
    return np, PType.CPU


def to_device(xp: Any, frames: Array) -> Any:
    """The one place a received host batch becomes an array of the analyser's device.

    Today aiopdbp delivers host ndarrays, so a GPU analyser copies the batch with
    ``cupy.asarray``; once SGPs receive device arrays directly this becomes a no-op.
    """
    return frames if xp is np else xp.asarray(frames)


# ----------------------------------------------------------------- helpers --
def decode_chunk(sources: dict[int, Source], chunk: Array, height: int, width: int
                 ) -> tuple[Array, Array, tuple[float, float]]:
    """Decode the current frame of each stream of ``chunk`` into one stacked batch.

    Returns (frames (B, H*3/2, W) read-only, meta (B, 3) [stream, frame, restart],
    (busy seconds, CPU seconds of this thread)); streams whose clip has ended are left out.
    """
    t0, c0 = time.perf_counter(), time.thread_time()
    frames = np.empty((len(chunk), height * 3 // 2, width), np.uint8)
    meta = np.empty((len(chunk), 3), np.int64)
    n = 0
    for s in chunk.tolist():
        src = sources[s]
        if src.done:
            continue
        d = src.decode_into(frames[n])
        if d is None:
            continue
        meta[n] = (s, d.frame, d.restart)
        n += 1
    out = frames[:n] if n < len(chunk) else frames
    out.flags.writeable = False          # read-only: a local receiver shares it, no copy
    return out, meta[:n].copy(), (time.perf_counter() - t0, time.thread_time() - c0)


async def _call(pool: ThreadPoolExecutor | None, fn: Callable[..., Any], *args: Any) -> Any:
    if pool is None:
        return fn(*args)
    return await asyncio.get_running_loop().run_in_executor(pool, fn, *args)


# ------------------------------------------------------------------ ingest --
async def ingest_role(gp: GP, rank: int, plan: Plan, cfg: Config, table: StreamTable,
                      pool: ThreadPoolExecutor | None) -> None:
    routes = plan.routes(rank)
    sources = {int(s): table.make_source(int(s)) for s in plan.ingest_streams(rank)}
    analysers = plan.analysers
    queues: list[asyncio.Queue[tuple[int, Array, Array] | None]] = [
        asyncio.Queue(cfg.queue if not cfg.phased else 0) for _ in analysers]
    stats: list[tuple[float, ...]] = []

    async def sender(j: int) -> None:
        dest, q = analysers[j], queues[j]
        while (item := await q.get()) is not None:
            seq, meta, frames = item
            await gp.send(dest, meta, com=seq, timeout=cfg.timeout)
            # one segment per batch: a local analyser then gets a view of this array, no copy
            await gp.send_stream(dest, frames, com=seq, segment_size=max(cfg.segment, frames.nbytes),
                                 timeout=cfg.timeout)
        await gp.command(dest, END, timeout=cfg.timeout)

    seq = 0
    chunks = [(j, ids[lo:lo + cfg.batch]) for j, ids in routes.items() for lo in range(0, len(ids), cfg.batch)]
    lanes = asyncio.Semaphore(max(1, cfg.threads))   # decode chunks in flight (threads: in parallel)

    async def one_round(r: int) -> int:
        """Decode and send round r; the number of frames decoded."""
        t_start, p_start = time.perf_counter(), time.process_time()
        busy = [0.0, 0.0]
        held: list[tuple[int, int, Array, Array]] = []

        async def one_chunk(j: int, ids: Array) -> int:
            nonlocal seq
            async with lanes:
                frames, meta, (dt, dc) = await _call(pool, decode_chunk, sources, ids, cfg.height, cfg.width)
            busy[0] += dt
            busy[1] += dc
            if len(meta):
                if cfg.phased:
                    held.append((j, seq, meta, frames))
                else:
                    await queues[j].put((seq, meta, frames))
                seq += 1
            return len(meta)

        if pool is None:
            n = sum([await one_chunk(j, ids) for j, ids in chunks])
        else:
            n = sum(await asyncio.gather(*(one_chunk(j, ids) for j, ids in chunks)))
        t_decoded = time.perf_counter()
        for j, s, meta, frames in held:
            await queues[j].put((s, meta, frames))
        stats.append((r, n, busy[0], t_start, t_decoded, busy[1], p_start))
        return n

    tasks = [asyncio.create_task(sender(j)) for j in range(len(analysers))]
    try:
        if cfg.mode == "live":
            while True:
                msg = await gp.recv(timeout=cfg.timeout)
                if not isinstance(msg, Message) or msg.kind is not Kind.COMMAND:
                    raise RuntimeError(f"{gp.name}: unexpected {msg!r}")
                if msg.com == STOP:
                    break
                if msg.com != TICK:
                    raise RuntimeError(f"{gp.name}: unexpected command {msg.com}")
                await one_round(int(msg.data[0]))
        else:
            r = 0
            while await one_round(r):
                r += 1
        for q in queues:
            await q.put(None)
        await asyncio.gather(*tasks)
    finally:
        for t in tasks:
            t.cancel()
    # the process's CPU clock at the end closes the last round (all threads of this rank)
    stats.append((-1, 0, 0.0, time.perf_counter(), 0.0, 0.0, time.process_time()))
    await gp.send(COLLECTOR, np.array(stats, np.float64).reshape(-1, 7), timeout=cfg.timeout)


# ---------------------------------------------------------------- analyser --
def segment_frames(seg: Any, stream: IncomingStream) -> Array:
    """A stream segment as (n, H*3/2, W) frames: segments are cut along axis 0, and
    a segment that arrives as raw bytes is viewed with the stream's dtype and shape."""
    if isinstance(seg, np.ndarray) and seg.ndim == len(stream.meta.shape):
        return seg
    return np.frombuffer(seg, dtype=np.dtype(stream.meta.dtype)).reshape(-1, *stream.meta.shape[1:])


async def analyser_role(gp: GP, j: int, plan: Plan, cfg: Config, xp: Any,
                        pool: ThreadPoolExecutor | None) -> None:
    members = plan.members(j)
    states = StreamStates(xp, len(members), cfg.height, cfg.width,
                          chunk=CPU_CHUNK if xp is np else None)
    slot_of = plan.slot_of
    metas: dict[tuple[str, int], Array] = {}
    early: dict[tuple[str, int], tuple[list[Array], float, float]] = {}
    held: dict[int, list[tuple[Array, list[Array], float, float]]] = {}
    stats: list[tuple[float, ...]] = []

    def analyse(meta: Array, frames: Array) -> tuple[Array, float, float]:
        t0, c0 = time.perf_counter(), time.thread_time()
        batch = to_device(xp, frames)
        res = states.analyse(batch, slot_of[meta[:, 0]], meta[:, 2].astype(bool))
        rows = result_rows(xp, meta[:, 0], meta[:, 1], res)
        return rows, time.perf_counter() - t0, time.thread_time() - c0

    async def process(meta: Array, parts: list[Array], t_r0: float, t_r1: float) -> None:
        if cfg.phased:               # hold the tick's batches until all its frames are here
            r = int(meta[0, 1])
            got = held.setdefault(r, [])
            got.append((meta, parts, t_r0, t_r1))
            if sum(len(m) for m, *_ in got) < len(members):
                return
            batches = held.pop(r)
        else:
            batches = [(meta, parts, t_r0, t_r1)]
        for meta, parts, t_r0, t_r1 in batches:
            at, busy, cpu, out = 0, 0.0, 0.0, []
            for frames in parts:     # usually one segment = the whole batch
                rows, dt, dc = await _call(pool if xp is np else None, analyse, meta[at:at + len(frames)], frames)
                at += len(frames)
                busy, cpu = busy + dt, cpu + dc
                out.append(rows)
            if at != len(meta):
                raise RuntimeError(f"{gp.name}: batch of {at} frames for a table of {len(meta)}")
            await gp.send(COLLECTOR, np.concatenate(out), timeout=cfg.timeout)
            stats.append((meta[0, 1], len(meta), t_r0, t_r1, busy, time.perf_counter(), cpu))

    ends = 0
    while ends < plan.ranks:
        item = await gp.recv(timeout=cfg.timeout)
        if isinstance(item, IncomingStream):
            key = (item.source, item.com)
            t_r0 = time.perf_counter()
            parts = [segment_frames(seg, item) async for seg in item]   # views, no gather copy
            t_r1 = time.perf_counter()
            meta = metas.pop(key, None)
            if meta is None:
                early[key] = (parts, t_r0, t_r1)
            else:
                await process(meta, parts, t_r0, t_r1)
        elif item.kind is Kind.COMMAND and item.com == END:
            ends += 1
        elif item.kind is Kind.SHORT:
            key = (item.source, item.com)
            if key in early:
                parts, t_r0, t_r1 = early.pop(key)
                await process(item.data, parts, t_r0, t_r1)
            else:
                metas[key] = item.data
        else:
            raise RuntimeError(f"{gp.name}: unexpected {item!r}")
    if metas or early or held:
        raise RuntimeError(f"{gp.name}: {len(metas)} tables without frames, {len(early)} batches "
                           f"without a table, {len(held)} incomplete ticks at the end")
    await gp.command(COLLECTOR, END, np.array(stats, np.float64).reshape(-1, 7), timeout=cfg.timeout)


# --------------------------------------------------------------- collector --
async def collector_role(gp: GP, plan: Plan, cfg: Config, table: StreamTable, device: str) -> RunResult:
    n_streams = plan.streams
    summary = StreamSummary(n_streams)
    sink = CsvSink(cfg.out, table.names, cfg.details, sort=cfg.mode == "analyse")
    res = RunResult(summary, 0, plan.ranks, len(plan.analysers), device, 0.0,
                    cross_rank_share=plan.cross_rank_share())
    ticks = cfg.ticks if cfg.mode == "live" else 0
    counts = np.zeros(ticks, np.int64)
    res.tick_start = np.full(ticks, np.nan)
    res.tick_lag = np.zeros(ticks)
    res.tick_done = np.full(ticks, np.nan)
    res.collect_busy = np.zeros(ticks)
    done_events = [asyncio.Event() for _ in range(ticks)]
    t_begin = time.perf_counter()

    async def drive() -> None:
        t0 = time.perf_counter()
        for t in range(ticks):
            if t >= cfg.inflight:
                await done_events[t - cfg.inflight].wait()
            if cfg.fps > 0:
                due = t0 + t / cfg.fps
                await asyncio.sleep(max(0.0, due - time.perf_counter()))
                res.tick_lag[t] = time.perf_counter() - due
            res.tick_start[t] = time.perf_counter()
            await gp.command(plan.ingests, TICK, np.array([t], np.int64), timeout=cfg.timeout)
        if ticks:
            await done_events[-1].wait()
        await gp.command(plan.ingests, STOP, timeout=cfg.timeout)

    driver = asyncio.create_task(drive()) if cfg.mode == "live" else None
    ends = 0
    try:
        while ends < len(plan.analysers) or len(res.ingest_stats) < plan.ranks:
            item = await gp.recv(timeout=cfg.timeout)
            if isinstance(item, IncomingStream):
                await item.aclose()
                raise RuntimeError(f"collector: unexpected stream from {item.source}")
            if item.kind is Kind.COMMAND and item.com == END:
                res.analyser_stats[item.source] = item.data
                ends += 1
            elif item.source.startswith("ingest-"):
                res.ingest_stats[item.source] = item.data
            else:
                t0 = time.perf_counter()
                rows = item.data
                sink.add(rows)
                summary.add(rows)
                if ticks:
                    f = rows[:, 1].astype(np.int64)
                    t_of = np.bincount(f[f < ticks], minlength=ticks)
                    counts += t_of
                    now = time.perf_counter()
                    for t in np.flatnonzero(t_of).tolist():
                        res.collect_busy[t] += (now - t0) * t_of[t] / len(rows)
                        if counts[t] == n_streams:
                            res.tick_done[t] = now
                            done_events[t].set()
        if driver is not None:
            await driver
    finally:
        if driver is not None and not driver.done():
            driver.cancel()
        sink.close()
    res.rows = sink.rows
    res.wall = time.perf_counter() - t_begin
    return res


# --------------------------------------------------------------------- run --
async def run_pipeline(cfg: Config, table: StreamTable) -> RunResult | None:
    """Run every GP of this rank; the collector's :class:`RunResult` on rank 0, else None."""
    xp, ptype = pick_xp(cfg.device)
    device = "cpu (numpy)" if xp is np else "gpu (cupy)"
    pool = ThreadPoolExecutor(cfg.threads, thread_name_prefix="vq") if cfg.threads else None
    try:
        async with aiopdbp.open_node() as node:
            rank = node.rank
            if xp is not np:
                xp.cuda.Device(rank % xp.cuda.runtime.getDeviceCount()).use()
            plan = Plan(len(table.names), node.size, cfg.analysers, cfg.placement)
            result: list[RunResult] = []

            async def ingest() -> None:
                async with node.process(ingest_name(rank)) as gp:
                    await ingest_role(gp, rank, plan, cfg, table, pool)

            async def analyser(k: int) -> None:
                j = rank * cfg.analysers + k
                async with node.process(analyser_name(rank, k), ptype=ptype) as gp:
                    await analyser_role(gp, j, plan, cfg, xp, pool)

            async def collector() -> None:
                async with node.process(COLLECTOR) as gp:
                    result.append(await collector_role(gp, plan, cfg, table, device))

            async with asyncio.TaskGroup() as tg:
                if rank == 0:
                    tg.create_task(collector())
                for k in range(cfg.analysers):
                    tg.create_task(analyser(k))
                tg.create_task(ingest())
            return result[0] if result else None
    finally:
        if pool is not None:
            pool.shutdown(wait=True)
