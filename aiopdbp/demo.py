"""The demo pipeline of ``aiopdbp demo``: producer -> transformers -> consumer.

Short messages, multicast commands and data streams between named GPs, every
result checked; it runs unchanged on one rank or several (``aiopdbp launch -n 2
-m aiopdbp demo``).  Built on the public API only, and kept out of
:mod:`aiopdbp.cli` so that the command line starts without loading the runtime
(``aiopdbp launch`` needs none of it).
"""

from __future__ import annotations

import asyncio
import dataclasses
import json
import time
import zlib
from collections.abc import Callable
from enum import IntEnum
from typing import TYPE_CHECKING, Any

import numpy as np

from aiopdbp.errors import PDBPError
from aiopdbp.runtime.node import open_node, run
from aiopdbp.streams.receiver import IncomingStream

if TYPE_CHECKING:
    from aiopdbp.runtime.node import Node
    from aiopdbp.runtime.process import GP
    from aiopdbp.wire.message import Message

__all__ = ["Com", "DemoConfig", "DemoFailure", "demo_main", "run_demo"]

class Com(IntEnum):
    """Command codes used by the demo pipeline."""

    CONFIG = 1    # multicast producer -> transformers: offsets and counts
    READY = 2     # transformer -> producer: config taken
    WORK = 3      # producer -> transformer: one 64-byte work item (short message)
    ACK = 4       # transformer -> producer: all work items counted
    FRAMES = 5    # producer -> transformer: data stream of frames
    RESULT = 6    # transformer -> consumer: data stream of transformed frames
    STOP = 7      # multicast producer -> transformers + consumer: end of work + expected checksums
    REPORT = 8    # transformer -> consumer: what the transformer verified
    VERDICT = 9   # consumer -> producer: the final result


@dataclasses.dataclass
class DemoConfig:
    transformers: int = 3
    frames: int = 64
    height: int = 480
    width: int = 640
    messages: int = 30_000
    seed: int = 2024
    timeout: float = 60.0
    inject_fault: bool = False

    def names(self) -> list[str]:
        """GP names in placement order: GP i lives on rank i % size."""
        return ["producer", *(f"xform-{k}" for k in range(self.transformers)), "consumer"]


def _js(obj: Any) -> bytes:
    return json.dumps(obj, separators=(",", ":")).encode()


def _unjs(msg: Message) -> Any:
    return json.loads(bytes(msg.data))


class DemoFailure(Exception):
    """A check of the demo failed."""


async def _expect(gp: GP, com: Com, timeout: float) -> Message:
    item = await gp.recv(timeout=timeout)
    if isinstance(item, IncomingStream):
        await item.aclose()
        raise DemoFailure(f"{gp.name}: expected {com.name}, got a data stream")
    if item.com != com:
        raise DemoFailure(f"{gp.name}: expected {com.name}, got command {item.com} from {item.source}")
    return item


def _crc(buf: Any, start: int = 0) -> int:
    """CRC32 of an array's bytes (or any buffer), continuing from ``start``."""
    if isinstance(buf, np.ndarray):
        buf = np.ascontiguousarray(buf).data
    return zlib.crc32(buf, start)


def _frames(cfg: DemoConfig, k: int) -> np.ndarray[Any, np.dtype[np.uint8]]:
    rng = np.random.default_rng(cfg.seed + k)
    return rng.integers(0, 256, (cfg.frames, cfg.height, cfg.width), dtype=np.uint8)


def _offset(cfg: DemoConfig, k: int) -> int:
    return (cfg.seed + 17 * (k + 1)) % 251 + 1


async def _producer(gp: GP, cfg: DemoConfig, say: Callable[[str], None]) -> bool:
    xf = cfg.names()[1:-1]
    t = cfg.timeout
    for name in cfg.names():
        await gp.node.lookup(name, timeout=t)      # wait for GPs on other ranks
    per = [len(range(k, cfg.messages, len(xf))) for k in range(len(xf))]
    offsets = {name: _offset(cfg, k) for k, name in enumerate(xf)}
    await gp.command(xf, Com.CONFIG, _js({"offsets": offsets, "messages": dict(zip(xf, per))}), timeout=t)
    say(f"producer: multicast CONFIG to {len(xf)} transformers (offsets {', '.join(map(str, offsets.values()))})")
    for _ in xf:
        await _expect(gp, Com.READY, t)
    say(f"producer: all {len(xf)} transformers READY")

    # -- short messages: 64-byte work items, round-robin ---------------------
    pad = bytes(56)
    t0 = time.perf_counter()
    for i in range(cfg.messages):
        await gp.send(xf[i % len(xf)], i.to_bytes(8, "little") + pad, com=Com.WORK, timeout=t)
    ok = True
    for _ in xf:
        ack = _unjs(await _expect(gp, Com.ACK, t))
        k = xf.index(ack["name"])
        want = sum(range(k, cfg.messages, len(xf)))
        if ack["count"] != per[k] or ack["sum"] != want:
            say(f"producer: FAIL {ack['name']} counted {ack['count']} items / sum {ack['sum']}, "
                f"expected {per[k]} / {want}")
            ok = False
    t_msgs = time.perf_counter() - t0
    say(f"producer: {cfg.messages:,} short messages (64 B) sent and acknowledged, "
        f"counts and sums {'match' if ok else 'DO NOT match'}")

    # -- data streams: one array of frames per transformer ------------------
    frames = [_frames(cfg, k) for k in range(len(xf))]
    expect = {name: {"in": _crc(f), "out": _crc(f + np.uint8(offsets[name]))}
              for name, f in zip(xf, frames)}
    nbytes = sum(f.nbytes for f in frames)
    say(f"producer: streaming {cfg.frames} frames {cfg.height}x{cfg.width} u8 "
        f"({frames[0].nbytes / 1e6:.1f} MB) to each transformer")
    t0 = time.perf_counter()
    sent = await asyncio.gather(*(gp.send_stream(name, f, com=Com.FRAMES, timeout=t)
                                  for name, f in zip(xf, frames)))
    t_stream = time.perf_counter() - t0
    if sum(sent) != nbytes:
        say(f"producer: FAIL streams delivered {sum(sent)} bytes, expected {nbytes}")
        ok = False
    say(f"producer: {len(xf)} streams delivered ({nbytes / 1e6:.1f} MB)")

    # -- end of work: one multicast to every other GP --------------------------
    await gp.command([*xf, "consumer"], Com.STOP, _js({"expect": expect}), timeout=t)
    say(f"producer: multicast STOP (+ expected CRC32s) to {len(xf)} transformers and consumer")
    verdict = _unjs(await _expect(gp, Com.VERDICT, t))
    ok = ok and bool(verdict["ok"])
    say(f"producer: consumer's verdict: {'OK' if verdict['ok'] else 'FAILED'}")
    say(f"throughput: {cfg.messages / t_msgs:,.0f} msg/s (64 B work items, until all ACKs)")
    say(f"            {nbytes / t_stream / 1e9:.2f} GB/s (frame streams, until delivered)")
    say("  (a cold process: first-touch page faults and the pipeline's own work included;")
    say("   routing alone: benchmarks/bench_local.py)")
    return ok


async def _transformer(gp: GP, cfg: DemoConfig, say: Callable[[str], None]) -> bool:
    t = cfg.timeout
    config = _unjs(await _expect(gp, Com.CONFIG, t))
    offset = np.uint8(config["offsets"][gp.name])
    quota = config["messages"][gp.name]
    await gp.send("producer", com=Com.READY, timeout=t)
    count = total = 0
    crc_in: int | None = None
    while True:
        item = await gp.recv(timeout=t)
        if isinstance(item, IncomingStream):
            frames = await item.read()                # one ndarray, sender's dtype and shape
            crc_in = _crc(frames)
            out = frames + offset                      # the "computation"
            if cfg.inject_fault and gp.name == "xform-0":
                out[0, 0, 0] ^= 1
            await gp.send_stream("consumer", out, com=Com.RESULT, timeout=t)
            say(f"{gp.name}: stream of {frames.shape[0]} frames in, +{offset} mod 256, forwarded to consumer")
        elif item.com == Com.WORK:
            count += 1
            total += int.from_bytes(item.data[:8], "little")
            if count == quota:
                await gp.send("producer", _js({"name": gp.name, "count": count, "sum": total}),
                              com=Com.ACK, timeout=t)
        elif item.com == Com.STOP:
            want = _unjs(item)["expect"][gp.name]["in"]
            ok = bool(crc_in == want)
            await gp.send("consumer", _js({"name": gp.name, "ok": ok, "crc_in": crc_in}),
                          com=Com.REPORT, timeout=t)
            say(f"{gp.name}: STOP; input CRC32 {'ok' if ok else 'MISMATCH'}, {count:,} work items")
            return ok
        else:
            raise DemoFailure(f"{gp.name}: unexpected command {item.com} from {item.source}")


async def _consumer(gp: GP, cfg: DemoConfig, say: Callable[[str], None]) -> bool:
    t = cfg.timeout
    n = cfg.transformers
    got: dict[str, int] = {}            # transformer -> CRC32 of the stream received
    reports: dict[str, bool] = {}
    expect: dict[str, dict[str, int]] | None = None
    while len(got) < n or len(reports) < n or expect is None:
        item = await gp.recv(timeout=t)
        if isinstance(item, IncomingStream):
            crc, nbytes, nseg = 0, 0, 0
            async for seg in item:                       # segments in order, as they arrive
                crc = _crc(seg, crc)
                nbytes += seg.nbytes
                nseg += 1
            got[item.source] = crc
            say(f"consumer: stream from {item.source}: {nseg} segments, {nbytes / 1e6:.1f} MB")
        elif item.com == Com.REPORT:
            r = _unjs(item)
            reports[r["name"]] = bool(r["ok"])
        elif item.com == Com.STOP:
            expect = _unjs(item)["expect"]
        else:
            raise DemoFailure(f"consumer: unexpected command {item.com} from {item.source}")
    assert expect is not None
    bad = [name for name in expect if got.get(name) != expect[name]["out"] or not reports.get(name)]
    ok = not bad
    say(f"consumer: {n} result streams, CRC32 {'all match' if ok else 'MISMATCH at ' + ', '.join(bad)}")
    await gp.send("producer", _js({"ok": ok}), com=Com.VERDICT, timeout=t)
    return ok


_ROLES = {"producer": _producer, "consumer": _consumer}


async def demo_main(node: Node, cfg: DemoConfig | None = None, *,
                    rank: int | None = None, size: int | None = None,
                    say: Callable[[str], None] | None = None) -> bool:
    """Run this rank's part of the demo pipeline on ``node``; True if every check passed.

    GP ``i`` of ``cfg.names()`` lives on rank ``i % size`` and only that rank
    creates it; names on other ranks are found with ``lookup(..., timeout=)``.
    ``rank``/``size`` default to the node's.
    """
    cfg = cfg or DemoConfig()
    rank = node.rank if rank is None else rank
    size = node.size if size is None else size
    if cfg.transformers < 1 or cfg.frames < 1 or cfg.messages < cfg.transformers:
        raise ValueError("need >= 1 transformer, >= 1 frame and >= 1 message per transformer")
    if say is None:
        prefix = f"[demo {rank}/{size}]" if size > 1 else "[demo]"

        def say(line: str) -> None:
            print(f"{prefix} {line}", flush=True)

    mine = [name for i, name in enumerate(cfg.names()) if i % size == rank]
    if not mine:
        say("no GP placed on this rank")
        return True
    say(f"node {rank}/{size}: starting GPs {', '.join(mine)}")

    async def role(name: str) -> bool:
        fn = _ROLES.get(name, _transformer)
        async with node.process(name) as gp:
            return await fn(gp, cfg, say)

    failed = False
    try:
        async with asyncio.timeout(cfg.timeout), asyncio.TaskGroup() as tg:
            tasks = [tg.create_task(role(name)) for name in mine]
    except* (DemoFailure, TimeoutError, PDBPError) as eg:
        for exc in eg.exceptions:
            why = str(exc) or f"nothing arrived within --timeout {cfg.timeout:g} s"
            say(f"FAIL: {type(exc).__name__}: {why}")
        failed = True
    return not failed and all(task.result() for task in tasks)


async def _demo_node(cfg: DemoConfig) -> tuple[bool, str]:
    async with open_node() as node:
        ok = await demo_main(node, cfg)
        return ok, (f"[demo {node.rank}/{node.size}]" if node.size > 1 else "[demo]")


def run_demo(cfg: DemoConfig, use_uvloop: bool | None = None) -> int:
    """Run the demo on this rank's node and print one verdict line; the exit code (0: every check passed)."""
    t0 = time.perf_counter()
    ok, prefix = run(_demo_node(cfg), use_uvloop=use_uvloop)
    status = "OK" if ok else "FAILED"
    print(f"{prefix} {status} in {time.perf_counter() - t0:.2f} s", flush=True)
    return 0 if ok else 1
