"""Single-host routing benchmark: GP -> GP through one node's PipeManager.

Not a test.  Measures, in one process and one event loop:

(a) short messages: 64-byte ``gp.send`` -> ``gp.recv``, messages/s, with 1
    producer -> 1 consumer and 4 producers -> 1 consumer (each producer is its
    own GP and task; the consumer receives them all);
(b) one 256 MiB data stream (``send_stream`` of a writable uint8 array, 1 MiB
    segments), GB/s from the call to ``send_stream`` until both sides are
    done, with three receive modes:

    * ``read()``          -- gather into a fresh array (allocated by the library)
    * ``read(out=buf)``   -- gather into one preallocated, already-touched buffer
    * ``async for``       -- iterate the segments; the consumer reads only the
      first byte of each segment (``acc += int(seg[0])``).  The source is
      writable, so the library hands out a private copy of each 1 MiB segment
      (one memcpy into a small, recycled, cache-warm buffer).
    * ``async for (ro)``  -- as above with a read-only source: segments are
      views of the sender's array, no byte is copied (routing cost only).

    and, in the same run, the reference: a plain numpy copy of 256 MiB into a
    fresh array (``np.empty`` + ``np.copyto``) and into a reused buffer.
    Each aiopdbp figure is also given as a ratio to its reference.

Every figure is the median of ``--repeat`` runs (after one warm-up run); the
runs of all variants are interleaved so machine noise hits them alike.

    python benchmarks/bench_local.py                # uvloop (default)
    python benchmarks/bench_local.py --no-uvloop    # plain asyncio
    python benchmarks/bench_local.py --profile      # + cProfile of one run each
"""

from __future__ import annotations

import argparse
import asyncio
import cProfile
import functools
import gc
import io
import pstats
import statistics
import sys
import time
from collections.abc import Awaitable, Callable
from typing import Any

import numpy as np

try:
    from _common import machine_info, print_table, write_json
except ImportError:  # python -m benchmarks.bench_local
    from benchmarks._common import machine_info, print_table, write_json  # type: ignore[no-redef]

import aiopdbp
from aiopdbp import GP, Node

MiB = 1 << 20
PAYLOAD = bytes(range(64))
TARGET_MSGS = 300_000.0
TARGET_GBS = 5.0
TARGET_VS_QUEUE = 0.5   # issue 8: GP -> GP at least half a bare asyncio.Queue


# ------------------------------------------------------------------ messages
async def msg_run(prods: list[GP], cons: GP, n: int) -> float:
    """``n`` 64-byte messages from ``prods`` (n/len each) to ``cons``; msgs/s."""
    per = n // len(prods)
    total = per * len(prods)
    name = cons.name

    async def produce(gp: GP) -> None:
        send = gp.send
        for _ in range(per):
            await send(name, PAYLOAD)

    async def consume() -> None:
        recv = cons.recv
        for _ in range(total):
            await recv()

    t0 = time.perf_counter()
    await asyncio.gather(consume(), *(produce(p) for p in prods))
    return total / (time.perf_counter() - t0)


async def queue_run(k: int, n: int, maxsize: int) -> float:
    """The baseline of (a): the same pattern over a bare ``asyncio.Queue``
    (bounded like a private pipe) between ``k`` producer tasks and one
    consumer task; msgs/s."""
    per = n // k
    total = per * k
    q: asyncio.Queue[bytes] = asyncio.Queue(maxsize)

    async def produce() -> None:
        put = q.put
        for _ in range(per):
            await put(PAYLOAD)

    async def consume() -> None:
        get = q.get
        for _ in range(total):
            await get()

    t0 = time.perf_counter()
    await asyncio.gather(consume(), *(produce() for _ in range(k)))
    return total / (time.perf_counter() - t0)


# ------------------------------------------------------------------- streams
def make_source(nbytes: int) -> np.ndarray[Any, np.dtype[np.uint8]]:
    words = np.arange(nbytes // 8, dtype=np.uint64) * np.uint64(0x9E3779B97F4A7C15)
    return words.view(np.uint8)


async def stream_run(src_gp: GP, dst_gp: GP, src: np.ndarray[Any, Any], mode: str,
                     out: np.ndarray[Any, Any], check: bool = False) -> float:
    """One stream of ``src`` received in ``mode``; GB/s."""

    async def receive() -> Any:
        stream = await dst_gp.recv()
        assert isinstance(stream, aiopdbp.IncomingStream)
        if mode == "read()":
            return await stream.read()
        if mode == "read(out=buf)":
            return await stream.read(out=out)
        acc = 0
        async for seg in stream:       # touch one byte per segment
            acc += int(seg[0])
        return acc

    t0 = time.perf_counter()
    _, got = await asyncio.gather(src_gp.send_stream(dst_gp.name, src), receive())
    dt = time.perf_counter() - t0
    if check:
        if isinstance(got, int):
            want = int(src[::MiB].astype(np.int64).sum())
            assert got == want, (mode, got, want)
        else:
            assert np.array_equal(got, src), mode
    del got
    return src.nbytes / dt / 1e9


def memcpy_fresh(src: np.ndarray[Any, Any]) -> float:
    t0 = time.perf_counter()
    dst = np.empty_like(src)
    np.copyto(dst, src)
    dt = time.perf_counter() - t0
    del dst
    return src.nbytes / dt / 1e9


def memcpy_reused(src: np.ndarray[Any, Any], buf: np.ndarray[Any, Any]) -> float:
    t0 = time.perf_counter()
    np.copyto(buf, src)
    return src.nbytes / (time.perf_counter() - t0) / 1e9


# ---------------------------------------------------------------------- main
async def interleaved(variants: dict[str, Callable[[], Awaitable[float]]], repeat: int) -> dict[str, list[float]]:
    """Warm up every variant once, then ``repeat`` rounds, each running every variant once."""
    for fn in variants.values():
        gc.collect()
        await fn()
    samples: dict[str, list[float]] = {k: [] for k in variants}
    for _ in range(repeat):
        for key, fn in variants.items():
            gc.collect()              # collect between runs, never inside one
            samples[key].append(await fn())
    return samples


def _profile(label: str, coro_fn: Callable[[], Awaitable[float]]) -> Awaitable[None]:
    async def go() -> None:
        gc.collect()
        prof = cProfile.Profile()
        prof.enable()
        await coro_fn()
        prof.disable()
        s = io.StringIO()
        pstats.Stats(prof, stream=s).sort_stats("tottime").print_stats(12)
        print(f"\n--- cProfile: {label} (sorted by own time) ---")
        print("\n".join(line for line in s.getvalue().splitlines()[5:] if line.strip()))
    return go()


async def bench(args: argparse.Namespace, loop_name: str) -> dict[str, Any]:
    results: dict[str, Any] = {"loop": loop_name, "messages": [], "stream": []}
    async with aiopdbp.open_node() as node:
        assert isinstance(node, Node)
        cons = await node.register("consumer")
        await cons.apply_pipe()
        prods = [await node.register(f"producer-{i}") for i in range(max(args.producers))]
        for p in prods:
            await p.apply_pipe()

        # (a) short messages
        if args.messages > 0:
            variants: dict[str, Callable[[], Awaitable[float]]] = {}
            for k in args.producers:
                variants[f"{k} -> 1"] = functools.partial(msg_run, prods[:k], cons, args.messages)
                variants[f"{k} -> 1 asyncio.Queue"] = functools.partial(
                    queue_run, k, args.messages, node.pps.pipe_capacity)
            samples = await interleaved(variants, args.repeat)
            rows: list[dict[str, Any]] = []
            for key, vals in samples.items():
                med = statistics.median(vals)
                if key.endswith("asyncio.Queue"):
                    rows.append({"pattern": key, "msgs/s (median)": med, "min": min(vals), "max": max(vals),
                                 "target": "-", "ok": "-", "x Queue": "1"})
                    continue
                q = statistics.median(samples[key + " asyncio.Queue"])
                rows.append({"pattern": key, "msgs/s (median)": med, "min": min(vals), "max": max(vals),
                             "target": TARGET_MSGS, "ok": "yes" if med >= TARGET_MSGS else "NO",
                             "x Queue": f"{med / q:.2f} (target >= {TARGET_VS_QUEUE})"})
            print(f"\n(a) 64-byte short messages, {args.messages:,} per run, {args.repeat} runs, {loop_name}")
            print_table(rows)
            results["messages"] = [dict(r, samples=samples[r["pattern"]]) for r in rows]
            if args.profile:
                await _profile("1 -> 1 messages", lambda: msg_run(prods[:1], cons, args.messages))

        # (b) one big stream
        if args.stream_mib > 0:
            src = make_source(args.stream_mib * MiB)
            ro = src.view()
            ro.flags.writeable = False
            out = np.empty_like(src)
            out[:] = 0                              # touch it once: reused, not fresh
            ref_buf = np.empty_like(src)
            ref_buf[:] = 0
            a, b = prods[0], cons
            for mode in ("read()", "read(out=buf)", "async for"):   # correctness, untimed
                await stream_run(a, b, src, mode, out, check=True)

            async def ref_fresh() -> float:
                return memcpy_fresh(src)

            async def ref_reused() -> float:
                return memcpy_reused(src, ref_buf)

            svariants: dict[str, Callable[[], Awaitable[float]]] = {
                "read()": lambda: stream_run(a, b, src, "read()", out),
                "memcpy fresh": ref_fresh,
                "read(out=buf)": lambda: stream_run(a, b, src, "read(out=buf)", out),
                "memcpy reused": ref_reused,
                "async for": lambda: stream_run(a, b, src, "async for", out),
                "async for (ro)": lambda: stream_run(a, b, ro, "async for", out),
            }
            ssamples = await interleaved(svariants, args.repeat)
            smed = {k: statistics.median(v) for k, v in ssamples.items()}
            refs = {"read()": "memcpy fresh", "read(out=buf)": "memcpy reused",
                    "async for": "memcpy reused", "async for (ro)": "memcpy reused"}
            srows: list[dict[str, Any]] = []
            for key in ("read()", "read(out=buf)", "async for", "async for (ro)", "memcpy fresh", "memcpy reused"):
                row: dict[str, Any] = {"receive mode": key, "GB/s (median)": smed[key],
                                       "min": min(ssamples[key]), "max": max(ssamples[key])}
                if key in refs:
                    row["vs"] = refs[key]
                    row["ratio"] = smed[key] / smed[refs[key]]
                    row["target 5 GB/s"] = "yes" if smed[key] >= TARGET_GBS else "NO"
                srows.append(row)
            print(f"\n(b) one {args.stream_mib} MiB stream (1 MiB segments), {args.repeat} runs, {loop_name}")
            print_table(srows)
            results["stream"] = [dict(r, samples=ssamples[r["receive mode"]]) for r in srows]
            if args.profile:
                await _profile("read() of one stream", lambda: stream_run(a, b, src, "read()", out))
                await _profile("read(out=buf) of one stream",
                               lambda: stream_run(a, b, src, "read(out=buf)", out))
        results["node_stats"] = {"routed": node.stats().routed, "dropped": node.stats().dropped}
    return results


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--messages", type=int, default=200_000, help="messages per run (0: skip)")
    p.add_argument("--producers", type=lambda s: [int(x) for x in s.split(",")], default=[1, 4],
                   help="producer counts, comma separated (default 1,4)")
    p.add_argument("--stream-mib", type=int, default=256, help="stream size in MiB (0: skip)")
    p.add_argument("--repeat", type=int, default=5, help="runs per figure (median)")
    p.add_argument("--no-uvloop", action="store_true", help="plain asyncio event loop")
    p.add_argument("--profile", action="store_true", help="cProfile one extra run of each kind")
    p.add_argument("--json", metavar="PATH", help="also write the results as JSON")
    args = p.parse_args(argv)

    use_uvloop = not args.no_uvloop
    if use_uvloop:
        try:
            import uvloop  # noqa: F401
        except ImportError:
            print("uvloop is not installed; using asyncio", file=sys.stderr)
            use_uvloop = False
    loop_name = "uvloop" if use_uvloop else "asyncio"
    m = machine_info()
    print(f"machine: {m['host']}, {m['cpu_model']}, {m['cpu_usable']}/{m['cpu_count']} cores usable, "
          f"{m['platform']}, Python {m['python']}, numpy {m['numpy']}, uvloop {m['uvloop']}, "
          f"aiopdbp {m['aiopdbp']}; loop: {loop_name}")
    results = aiopdbp.run(bench(args, loop_name), use_uvloop=use_uvloop)
    if args.json:
        write_json(args.json, {"machine": m, "args": vars(args), **results})
    return 0


if __name__ == "__main__":
    sys.exit(main())
