"""Profile short streams against messages of the same bytes, on every rank.

    aiopdbp launch -n 2 benchmarks/profile_streams.py [--kind stream|msg|chunks] [--units 2000]
        [--size 4096] [--inflight 16] [--cpu-clock] [--out DIR]

Each rank's GP sends ``units`` units of ``size`` bytes to the next rank's GP
(a ring, ``inflight`` calls outstanding), as ``send_stream`` (the receiver
``read()``s each stream) or as ``gp.send``, like ``aiopdbp bench streams``;
after a warm-up of 200 units the measured run is wrapped in ``cProfile``
(the whole event loop: sending, receiving, the progress engine).
``--kind chunks`` sends the units as the segments of *one* stream per
sender (``segment_size`` = ``size``; ``inflight`` streams, each taking units
from the same count), as the N-to-N benchmark's ``aiopdbp-stream`` row does;
the receiver iterates each stream.  ``--cpu-clock`` profiles with the process
CPU clock (``time.process_time``) instead of the wall clock, so that on a
shared machine the time other processes run is not charged to whatever
function was running.  Each rank
prints its units/s, its CPU seconds, the MPI messages its link posted and
the control messages it sent, and writes ``DIR/<kind>_<rank>.prof``
(``python -m pstats`` reads it).  Written for issue 17 (where does a short
stream's time go).
"""

from __future__ import annotations

import argparse
import asyncio
import collections
import cProfile
import pstats
import time
from pathlib import Path
from typing import Any

import numpy as np

from aiopdbp.runtime import open_node, run


def _groups(prof: cProfile.Profile, units: int) -> str:
    """Own time and calls per unit, by aiopdbp package (streams by module)."""
    own: collections.Counter[str] = collections.Counter()
    calls: collections.Counter[str] = collections.Counter()
    for (file, _line, _fn), (_cc, nc, tt, _ct, _callers) in pstats.Stats(prof).stats.items():  # type: ignore[attr-defined]
        if "aiopdbp/" in file:
            part = file.split("aiopdbp/", 1)[1]
            key = part if part.startswith(("streams/", "transport/progress")) else part.split("/")[0]
        else:
            key = "asyncio" if "asyncio" in file else "C calls" if file == "~" else "other"
        own[key] += tt
        calls[key] += nc
    total = sum(own.values())
    return "\n".join(f"    {k:30} {v:6.3f} s {100 * v / total:5.1f} %  {calls[k] / units:6.1f} calls/unit"
                     for k, v in own.most_common())


async def _main(ns: argparse.Namespace) -> None:
    async with open_node() as node:
        n, r = node.size, node.rank
        async with node.process(f"prof-{r}") as gp:
            for i in range(n):  # every GP known before anyone sends
                await node.lookup(f"prof-{i}", timeout=60)
            nxt = f"prof-{(r + 1) % n}"
            data = np.full(ns.size, 7, dtype=np.uint8)

            async def once(units: int) -> None:
                it = iter(range(units))

                if ns.kind == "chunks":
                    seg = bytes(data)

                    async def chunk_sender() -> None:
                        await gp.send_stream(nxt, (seg for _ in it), segment_size=ns.size)

                    async def chunk_reader(stream: Any) -> int:
                        n = 0
                        async for got in stream:
                            if len(got) != ns.size or got[0] != 7:
                                raise AssertionError(f"rank {r}: wrong segment from {stream.source}")
                            n += 1
                        return n

                    async def chunk_receiver() -> None:
                        readers = [asyncio.ensure_future(chunk_reader(await gp.recv()))
                                   for _ in range(ns.inflight)]
                        if sum(await asyncio.gather(*readers)) != units:
                            raise AssertionError(f"rank {r}: segments lost or duplicated")

                    await asyncio.gather(chunk_receiver(), *(chunk_sender() for _ in range(ns.inflight)))
                    return

                async def sender() -> None:
                    for _ in it:
                        if ns.kind == "stream":
                            await gp.send_stream(nxt, data, segment_size=ns.size)
                        else:
                            await gp.send(nxt, data)

                async def receiver() -> None:
                    for _ in range(units):
                        item = await gp.recv()
                        got = await item.read() if ns.kind == "stream" else np.frombuffer(item.data, np.uint8)
                        if got.size != ns.size or not (got == 7).all():
                            raise AssertionError(f"rank {r}: wrong data from {item.source}")

                await asyncio.gather(receiver(), *(sender() for _ in range(ns.inflight)))

            await once(200)
            await node.flush()
            prof = cProfile.Profile(time.process_time) if ns.cpu_clock else cProfile.Profile()
            t0, c0 = time.perf_counter(), time.process_time()
            if not ns.no_profile:
                prof.enable()
            await once(ns.units)
            prof.disable()
            wall, cpu = time.perf_counter() - t0, time.process_time() - c0
            st = node.stats()
            links = {h: (s.cdus, s.lone, s.blocks, s.messages) for h, s in st.links.items()}
            print(f"rank {r} {ns.kind}: {ns.units / wall:.0f} units/s, wall {wall:.3f} s, cpu {cpu:.3f} s "
                  f"({1e6 * cpu / ns.units:.1f} us/unit); "
                  f"link (cdus, lone, blocks, MPI messages) incl. warm-up {links}; "
                  f"sent {st.messages_sent}" + ("" if ns.no_profile else f"\n{_groups(prof, ns.units)}"),
                  flush=True)
            if ns.no_profile:
                await node.flush()
                return
            out = Path(ns.out)
            out.mkdir(parents=True, exist_ok=True)
            prof.dump_stats(str(out / f"{ns.kind}_{r}.prof"))
            await node.flush()


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--kind", choices=("stream", "msg", "chunks"), default="stream")
    ap.add_argument("--units", type=int, default=2000)
    ap.add_argument("--size", type=int, default=4096)
    ap.add_argument("--inflight", type=int, default=16)
    ap.add_argument("--no-profile", action="store_true", help="time only (no cProfile, no groups)")
    ap.add_argument("--cpu-clock", action="store_true", help="profile with the process CPU clock")
    ap.add_argument("--out", default="profile-streams")
    run(_main(ap.parse_args()))


if __name__ == "__main__":
    main()
