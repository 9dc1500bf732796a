"""``aiopdbp bench streams``: streams against messages of the same bytes.

Each rank's GP sends to the next rank's GP (a ring), ``count`` units of
``size`` bytes with ``inflight`` calls outstanding, once as ``send_stream``
(one stream per unit; the receiver ``read()``s it) and once as ``gp.send``
(one message per unit), the two interleaved repeat by repeat in the same
job.  Every unit is a numpy ``uint8`` array filled with its sequence number
(mod 251) -- with ``--payload torch`` a CPU tensor over those bytes, which
must arrive as a tensor -- and the receiver checks every byte of it and the
count, so a corrupt, lost or duplicated unit fails the run.  ``--payload
numpy,torch`` runs both, alternated repeat by repeat in the same job.  A run's time is the slowest
rank's, from a barrier until its sends returned and its receives are
checked.  Rows: units/s of each kind and their ratio (streams / messages),
medians of the repeats.  ``--quick`` checks the data and times nothing
worth reading.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import statistics
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from aiopdbp.bench.plan import BENCH_ENV, parse_ranks, parse_sizes

__all__ = ["VerificationError", "main"]

KiB, MiB = 1 << 10, 1 << 20


class VerificationError(Exception):
    """A receiver got a wrong, missing or extra unit (the run is void)."""


def _sizes(text: str) -> list[int]:
    return [int(s) for s in parse_sizes(text)]


def _payloads(text: str) -> list[str]:
    kinds = [t for t in text.split(",") if t]
    for k in kinds:
        if k not in ("numpy", "torch"):
            raise argparse.ArgumentTypeError(f"payload is numpy or torch, not {k!r}")
    return kinds or ["numpy"]


def _ints(text: str) -> list[int]:
    return [int(t) for t in text.split(",") if t]


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="aiopdbp bench streams", allow_abbrev=False,
        description="Streams/s against messages/s of the same bytes: each rank's GP sends to the "
        "next rank's, send_stream per unit vs gp.send per unit, interleaved in one job.")
    a = p.add_argument
    a("-n", "--ranks", type=parse_ranks, default=[2], metavar="N[,N...]", help="rank counts (default 2)")
    a("--sizes", type=_sizes, default=[4 * KiB, 64 * KiB, MiB, 16 * MiB], help="4K,64K,1M,16M")
    a("--inflight", type=_ints, default=[1, 16], help="calls outstanding per sender (1,16)")
    a("--volume", type=_sizes, default=[64 * MiB], help="bytes per sender per run (64M)")
    a("--max-units", type=int, default=2000, help="most units per run (2000)")
    a("--repeat", type=int, default=3, help="measured runs per point and kind (3)")
    a("--payload", type=_payloads, default=["numpy"], metavar="numpy[,torch]",
      help="what a unit is: numpy arrays, CPU torch tensors over the same bytes, or both "
           "(alternated in one job)")
    a("--quick", action="store_true", help="small volumes, 1 repeat: checks the data")
    a("--tcp", action="store_true", help="force MPICH's TCP path between local ranks")
    a("--out", default="", help="folder for streams.json / streams.csv / streams.png")
    a("--inject-fault", choices=("stream", "msg"), default=None,
      help="rank 0 corrupts one byte of one unit of this kind (shows that the check fails)")
    return p


def main(argv: Sequence[str]) -> int:
    ns = build_parser().parse_args(list(argv))
    if ns.quick:
        ns.volume, ns.max_units, ns.repeat = [256 * KiB], 64, 1
        ns.sizes = [s for s in ns.sizes if s <= MiB] or ns.sizes[:1]
    from aiopdbp.transport.mpi import mpi_world_size

    if mpi_world_size() > 1:
        return _job(ns)
    from aiopdbp.launch.launcher import launch, reporting_failures

    out = Path(ns.out or time.strftime("aiopdbp-bench-streams-%Y%m%d-%H%M%S")).resolve()
    out.mkdir(parents=True, exist_ok=True)
    rows: list[dict[str, Any]] = []
    for n in ns.ranks:
        part = out / f"n{n}.json"
        argv_n = ["-m", "aiopdbp.bench", "streams", "--sizes", ",".join(map(str, ns.sizes)),
                  "--inflight", ",".join(map(str, ns.inflight)), "--volume", str(ns.volume[0]),
                  "--max-units", str(ns.max_units), "--repeat", str(ns.repeat), "--out", str(part),
                  "--payload", ",".join(ns.payload)]
        if ns.inject_fault:
            argv_n += ["--inject-fault", ns.inject_fault]
        rc = reporting_failures("aiopdbp bench streams", lambda: launch(n, argv_n, tcp=ns.tcp, extra_env=BENCH_ENV))
        if rc != 0:
            return rc
        rows += json.loads(part.read_text())["rows"]
    notes = _write(out, rows, ns, list(argv))
    print(_table(rows))
    for note in notes:
        print(note)
    return 0


def _write(out: Path, rows: list[dict[str, Any]], ns: argparse.Namespace, argv: Sequence[str]
           ) -> list[str]:
    """streams.json, streams.csv and streams.png (when matplotlib is there);
    returns notes for the user."""
    from aiopdbp.bench.report import machine_info, write_csv, write_json

    meta = {"command": " ".join(["aiopdbp", "bench", "streams", *argv]),
            "transport": "tcp" if ns.tcp else "shm", "machine": machine_info(),
            "date": time.strftime("%Y-%m-%d %H:%M:%S")}
    write_json(out / "streams.json", {"meta": meta, "rows": rows})
    write_csv(out / "streams.csv", [{k: v for k, v in r.items() if k not in ("stream_s", "msg_s")}
                                   for r in rows], meta)
    notes = [f"results: {out / 'streams.json'}, {out / 'streams.csv'}"]
    made = _plot(out / "streams.png", rows, meta)
    notes.append(f"plot: {made}" if made else
                 "plot skipped: matplotlib is not installed (pip install 'aiopdbp[bench]')")
    return notes


def _plot(path: Path, rows: Sequence[dict[str, Any]], meta: dict[str, Any]) -> Path | None:
    """Units/s of streams (solid) and messages (dashed) against the unit size,
    one colour per (ranks, in flight, payload); beside it the ratio."""
    try:
        import matplotlib
    except ImportError:
        return None
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, (ax, axr) = plt.subplots(1, 2, figsize=(11, 4.2))
    colours = plt.rcParams["axes.prop_cycle"].by_key()["color"]
    keys = sorted({(r["n"], r["inflight"], r.get("payload", "numpy")) for r in rows})
    for c, (n, k, pl) in enumerate(keys):
        sel = sorted((r for r in rows if (r["n"], r["inflight"], r.get("payload", "numpy")) == (n, k, pl)),
                     key=lambda r: r["size"])
        x = [r["size"] for r in sel]
        col = colours[c % len(colours)]
        what = f"{n} ranks, {k} in flight" + (f", {pl}" if len(_payload_kinds(rows)) > 1 else "")
        ax.plot(x, [r["streams_per_s"] for r in sel], "o-", color=col, label=f"send_stream, {what}")
        ax.plot(x, [r["msgs_per_s"] for r in sel], "s--", color=col, label=f"gp.send, {what}")
        axr.plot(x, [r["ratio"] for r in sel], "o-", color=col, label=what)
    for a in (ax, axr):
        a.set_xscale("log", base=2)
        a.set_xlabel("unit size (bytes)")
        a.grid(True, which="both", alpha=0.3)
    ax.set_yscale("log")
    ax.set_ylabel("units/s per sending rank (median)")
    ax.set_title("streams vs messages of the same bytes", fontsize=10)
    ax.legend(fontsize=6)
    axr.axhline(0.5, color="grey", ls=":", lw=0.8, label="0.5x (issue 17 target at 4 KiB)")
    axr.set_ylabel("streams/s / messages/s")
    axr.set_title("ratio", fontsize=10)
    axr.legend(fontsize=6)
    fig.suptitle(f"{meta['transport']}, {meta['machine'].get('cpu_model', '')}", fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path


def _payload_kinds(rows: Sequence[dict[str, Any]]) -> set[str]:
    """The payload kinds the rows hold."""
    return {r.get("payload", "numpy") for r in rows}


def _table(rows: list[dict[str, Any]]) -> str:
    head = f"{'n':>2} {'size':>7} {'infl':>4} {'payload':>7} {'units':>5} {'streams/s':>10} {'msgs/s':>10} " \
           f"{'ratio':>6} {'stream MB/s':>11} {'msg MB/s':>9}"
    out = [head, "-" * len(head)]
    for r in rows:
        out.append(f"{r['n']:>2} {_fmt(r['size']):>7} {r['inflight']:>4} {r.get('payload', 'numpy'):>7} {r['units']:>5} "
                   f"{r['streams_per_s']:>10.0f} {r['msgs_per_s']:>10.0f} {r['ratio']:>6.2f} "
                   f"{r['stream_MBps']:>11.0f} {r['msg_MBps']:>9.0f}")
    twins = {(r["n"], r["size"], r["inflight"]): r for r in rows if r.get("payload") == "numpy"}
    pairs = [(r, twins[r["n"], r["size"], r["inflight"]]) for r in rows
             if r.get("payload") == "torch" and (r["n"], r["size"], r["inflight"]) in twins]
    if pairs:
        out += ["", "torch / numpy units/s, same job (1.00 = tensors cost what arrays cost)",
                f"{'n':>2} {'size':>7} {'infl':>4} {'streams':>8} {'msgs':>8}"]
        for t, a in pairs:
            out.append(f"{t['n']:>2} {_fmt(t['size']):>7} {t['inflight']:>4} "
                       f"{t['streams_per_s'] / a['streams_per_s']:>8.2f} {t['msgs_per_s'] / a['msgs_per_s']:>8.2f}")
    return "\n".join(out)


def _fmt(n: int) -> str:
    return f"{n // MiB}M" if n >= MiB and n % MiB == 0 else f"{n // KiB}K" if n % KiB == 0 else str(n)


# ------------------------------------------------------------- in the job
def _job(ns: argparse.Namespace) -> int:
    from aiopdbp.runtime import open_node, run
    from aiopdbp.transport.mpi import load_mpi

    comm = load_mpi().COMM_WORLD.Dup()   # the harness's barrier and gathers, before the node's

    async def body() -> list[dict[str, Any]]:
        async with open_node() as node:
            n, r = node.size, node.rank
            async with node.process(f"bench-{r}") as gp:
                nxt = f"bench-{(r + 1) % n}"
                # Every GP, not only the neighbours: rank 0 (which registers
                # GPs) must not block in the harness's Barrier below while a
                # slower rank's registration still waits for it.
                for i in range(n):
                    await node.lookup(f"bench-{i}", timeout=60)
                # A name's home answers lookups only while its loop runs: no
                # rank blocks in the harness's Barrier before every rank has
                # all the names (a barrier that leaves the loop running).
                done = comm.Ibarrier()
                while not done.Test():
                    await asyncio.sleep(0.001)
                rows = []
                for size in ns.sizes:
                    units = max(4, min(ns.max_units, ns.volume[0] // size))
                    arrays = [np.full(size, i % 251, dtype=np.uint8) for i in range(min(units, 251))]
                    bad = arrays[1].copy() if ns.inject_fault and r == 0 else None
                    if bad is not None:
                        bad[size // 2] ^= 0xFF
                    units_of = {pl: _units(pl, arrays, bad) for pl in ns.payload}
                    for k in ns.inflight:
                        times: dict[tuple[str, str], list[float]] = {
                            (pl, kind): [] for pl in ns.payload for kind in ("stream", "msg")}
                        for rep in range(ns.repeat + 1):        # the first is a warm-up
                            for pl, kind in times:
                                await node.flush()
                                comm.Barrier()
                                payloads, faulty = units_of[pl]
                                t = await _run(gp, nxt, kind, payloads, units, k,
                                               faulty if kind == ns.inject_fault else None)
                                # What this rank sent must be on the wire before
                                # the loop blocks in the harness's collective.
                                await node.flush()
                                slowest = max(comm.allgather(t))
                                if rep:
                                    times[pl, kind].append(slowest)
                        for pl in ns.payload:
                            st, mt = times[pl, "stream"], times[pl, "msg"]
                            ts, tm = statistics.median(st), statistics.median(mt)
                            rows.append({"n": n, "size": size, "inflight": k, "units": units, "payload": pl,
                                         "streams_per_s": units / ts, "msgs_per_s": units / tm,
                                         "ratio": tm / ts, "stream_MBps": units * size / ts / 1e6,
                                         "msg_MBps": units * size / tm / 1e6,
                                         "stream_s": st, "msg_s": mt})
                await node.flush()
                comm.Barrier()
                return rows

    rows = run(body())
    if comm.Get_rank() == 0:
        out = Path(ns.out) if ns.out else None
        if out is not None and out.suffix == ".json":
            out.write_text(json.dumps({"rows": rows}))
        else:
            print(_table(rows))
    comm.Free()
    return 0


def _units(payload: str, arrays: list[np.ndarray[Any, Any]], bad: np.ndarray[Any, Any] | None
           ) -> tuple[list[Any], Any]:
    """The units (and the corrupted one) as ``payload`` says: the arrays, or
    CPU tensors over their bytes."""
    if payload == "numpy":
        return list(arrays), bad
    import torch

    return [torch.from_numpy(a) for a in arrays], None if bad is None else torch.from_numpy(bad)


def _host(got: Any, payload: str, what: str) -> np.ndarray[Any, Any]:
    """A received unit as numpy (no copy), after checking it arrived as the
    kind sent (a tensor as a tensor)."""
    if payload == "torch":
        if type(got).__module__ != "torch" or type(got).__name__ != "Tensor":
            raise VerificationError(f"VERIFICATION FAILED: {what} arrived as {type(got).__name__}, not a tensor")
        arr: np.ndarray[Any, Any] = got.numpy()
        return arr
    return np.frombuffer(got, np.uint8) if not isinstance(got, np.ndarray) else got


async def _run(gp: Any, dest: str, kind: str, payloads: list[Any], units: int,
               inflight: int, faulty: Any = None) -> float:
    """One run: ``units`` units to ``dest`` (``inflight`` outstanding) while
    receiving and checking as many; this rank's seconds.  ``faulty`` replaces
    unit 1 (``--inject-fault``)."""
    it = iter(range(units))
    payload = "numpy" if isinstance(payloads[0], np.ndarray) else "torch"

    async def sender() -> None:
        for i in it:
            data = faulty if i == 1 and faulty is not None else payloads[i % len(payloads)]
            if kind == "stream":
                await gp.send_stream(dest, data, segment_size=max(data.nbytes, 1))
            else:
                await gp.send(dest, data)

    size = payloads[0].nbytes

    async def receiver() -> None:
        got = []
        for _ in range(units):
            item = await gp.recv()
            data = _host(await item.read() if kind == "stream" else item.data, payload, kind)
            v = int(data[0])
            if data.size != size or not (data == v).all():
                raise VerificationError(f"VERIFICATION FAILED: {kind} unit {v} from {item.source}: "
                                        f"wrong bytes or size ({data.size} B)")
            got.append(v)
        want = sorted(i % 251 for i in range(units))
        if sorted(got) != want:
            raise VerificationError(f"VERIFICATION FAILED: {kind}: units lost or duplicated")

    t0 = time.perf_counter()
    await asyncio.gather(receiver(), *(sender() for _ in range(inflight)))
    return time.perf_counter() - t0


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main(sys.argv[1:]))
