"""The scale run of the video-quality example: N live QCIF streams, one tick timed.

Every stream replays one of a few dozen generated clips with a decoder of its
own.  A tick starts when the collector sends TICK (every stream's current frame
is in memory as compressed packets) and ends when the results of all N streams
are at the collector; the figure is the median over the timed ticks (after
``--warmup`` untimed ones, which take the decoders through their first
keyframe).  The report splits it into decode, transfer and analysis:

* pipelined (default): the stages overlap; each stage's *busy* time on the
  busiest rank and in all, the rest being communication and waiting;
* ``--phased``: the ingests decode everything, then send everything, then the
  analysers analyse everything, so each phase is timed apart.

Under MPI (``N >= 2`` ranks) the same cross-rank batches are first moved with
raw mpi4py (``Isend``/``Irecv`` of the same arrays, median of ``--repeat``) so
the transfer can be compared with what MPI itself gives in the same run.

Run from the repository root::

    .venv/bin/python -m examples.video_quality generate --streams 24 --frames 100 \\
        --seed 101 --format h264 --out /tmp/vq-bank
    .venv/bin/python benchmarks/video_scale.py --clips /tmp/vq-bank --json /tmp/vs1.json
    .venv/bin/aiopdbp launch -n 2 benchmarks/video_scale.py --clips /tmp/vq-bank --json /tmp/vs2.json
    .venv/bin/aiopdbp launch -n 2 benchmarks/video_scale.py --clips /tmp/vq-bank --phased --json /tmp/vs2p.json
    .venv/bin/python benchmarks/video_scale.py --plot benchmarks/video_scale.png /tmp/vs1.json /tmp/vs2.json /tmp/vs2p.json

The plot needs matplotlib (the ``[bench]`` extra).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
for p in (str(ROOT), str(ROOT / "benchmarks")):
    if p not in sys.path:
        sys.path.insert(0, p)

import aiopdbp  # noqa: E402
from _common import machine_info  # noqa: E402
from examples.video_quality import scenes  # noqa: E402
from examples.video_quality.ingest import common_size, demux, find_clips, live_table  # noqa: E402
from examples.video_quality.pipeline import Config, run_pipeline  # noqa: E402
from examples.video_quality.report import timing_report  # noqa: E402
from examples.video_quality.schedule import Plan  # noqa: E402


def launched_size() -> int:
    for var in ("PMI_SIZE", "OMPI_COMM_WORLD_SIZE", "PMIX_SIZE"):
        if os.environ.get(var, "").isdigit():
            return int(os.environ[var])
    return 1


def raw_mpi_transfer(plan: Plan, batch: int, frame_bytes: int, repeat: int) -> dict[str, float]:
    """Move every cross-rank batch of one tick with raw mpi4py; median seconds."""
    from mpi4py import MPI

    comm = MPI.COMM_WORLD
    rank, size = comm.Get_rank(), comm.Get_size()

    def batches(src: int, dst: int) -> list[int]:
        sizes = []
        for j, ids in plan.routes(src).items():
            if plan.analyser_rank(j) == dst:
                sizes += [min(batch, len(ids) - lo) for lo in range(0, len(ids), batch)]
        return sizes

    out_sizes = {d: batches(rank, d) for d in range(size) if d != rank}
    in_sizes = {s: batches(s, rank) for s in range(size) if s != rank}
    send = {d: [np.full(n * frame_bytes, 7, np.uint8) for n in sizes] for d, sizes in out_sizes.items()}
    nbytes = sum(a.nbytes for arrs in send.values() for a in arrs)
    times = []
    for _ in range(repeat):
        recv = {s: [np.empty(n * frame_bytes, np.uint8) for n in sizes] for s, sizes in in_sizes.items()}
        comm.Barrier()
        t0 = time.perf_counter()
        reqs = [comm.Irecv(buf, source=s, tag=7) for s, bufs in recv.items() for buf in bufs]
        reqs += [comm.Isend(buf, dest=d, tag=7) for d, bufs in send.items() for buf in bufs]
        MPI.Request.Waitall(reqs)
        comm.Barrier()
        times.append(time.perf_counter() - t0)
    total = comm.allreduce(nbytes)
    med = comm.bcast(statistics.median(times), root=0)
    return {"seconds": med, "bytes_all_ranks": float(total), "repeat": float(repeat)}


def load_bank(args: argparse.Namespace) -> tuple[list[Any], int, int]:
    if args.clips is not None:
        paths = find_clips([args.clips])
        width, height = common_size(paths)
        truth = scenes.read_truth(args.clips) if (args.clips / "truth.csv").exists() else {}
        bank = [demux(p, p.name) for p in paths]
        for c in bank:
            c.flags = truth.get(c.name, "")
        return bank, width, height
    specs = scenes.plan_set(args.bank, args.seed, args.bank_frames)
    jobs = 1 if launched_size() > 1 else (os.cpu_count() or 1)
    return scenes.encode_bank(specs, jobs), scenes.WIDTH, scenes.HEIGHT


def run(args: argparse.Namespace) -> int:
    t0 = time.perf_counter()
    bank, width, height = load_bank(args)
    t_bank = time.perf_counter() - t0
    table = live_table(args.streams, bank)
    cfg = Config(mode="live", width=width, height=height, analysers=args.analysers, placement=args.placement,
                 batch=args.batch, threads=args.threads, device=args.device, fps=0.0,
                 ticks=args.warmup + args.ticks, warmup=args.warmup, inflight=1, phased=args.phased,
                 timeout=args.timeout)
    size = launched_size()
    raw = None
    if size > 1:
        plan = Plan(args.streams, size, args.analysers, args.placement)
        raw = raw_mpi_transfer(plan, args.batch, width * height * 3 // 2, args.repeat)
    t0 = time.perf_counter()
    res = aiopdbp.run(run_pipeline(cfg, table))
    t_run = time.perf_counter() - t0
    if res is None:
        return 0
    rep = timing_report(res, cfg)
    rep["machine"] = machine_info()
    rep["load_average"] = os.getloadavg()
    rep["bank"] = {"clips": len(bank), "frames_per_clip": max(len(c.packets) for c in bank),
                   "seconds_to_prepare": round(t_bank, 2)}
    rep["run_seconds_incl_setup"] = round(t_run, 2)
    rep["command"] = " ".join(sys.argv)
    rate = 8 * np.mean([len(p) for c in bank for p in c.packets]) * 25 / 1000
    rep["bank_label"] = f"{rate:.0f} kbit/s"
    rep["bank"]["kbit_per_s_at_25fps"] = round(float(rate), 1)
    print(f"{args.streams} live QCIF streams, {res.ranks} rank(s): {res.ranks} ingest GP(s), "
          f"{res.analysers} analyser GP(s) [{res.device}], 1 collector; placement {args.placement}, "
          f"batch {args.batch}, threads {args.threads}; bank of {len(bank)} clips "
          f"(load average {os.getloadavg()[0]:.1f})")
    for line in rep["lines"]:
        print(line)
    if raw is not None:
        rep["raw_mpi_transfer"] = raw
        line = (f"raw mpi4py, same cross-rank batches ({raw['bytes_all_ranks'] / 1e6:.0f} MB): "
                f"{raw['seconds']:.3f} s median of {int(raw['repeat'])}")
        if "phase_transfer" in rep["median"]:
            ratio = rep["median"]["phase_transfer"] / raw["seconds"]
            rep["transfer_ratio_vs_raw_mpi"] = ratio
            line += f"; aiopdbp phased transfer / raw = {ratio:.2f}"
        print(line)
    target = 1.5
    verdict = "meets" if rep["median"].get("latency", 9e9) <= target else "misses"
    print(f"target <= {target} s per tick: {verdict} it")
    if args.json is not None:
        args.json.write_text(json.dumps(rep, indent=1, default=float) + "\n", encoding="utf-8")
    return 0


# -------------------------------------------------------------------- plot --
def plot(out: Path, reports: list[Path]) -> int:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    data = [json.loads(p.read_text(encoding="utf-8")) for p in reports]
    fig, ax = plt.subplots(figsize=(max(6.0, 1.4 * len(reports) + 2.5), 5))
    labels = []
    colours = {"decode": "#4477aa", "transfer / other": "#ccbb44", "analysis": "#228833", "collect": "#aa3377"}
    for i, rep in enumerate(data):
        m = rep["median"]
        if rep.get("phased") and "phase_decode" in m:
            parts = {"decode": m["phase_decode"], "transfer / other": m["phase_transfer"],
                     "analysis": m["phase_analysis"], "collect": m["phase_collect"]}
            kind = "phased"
        else:   # busy times of the busiest rank; the rest of the latency is transfer and waiting
            busy = m["decode_max"] + m["analysis_max"] + m["collect"]
            scale = min(1.0, m["latency"] / busy) if busy > 0 else 1.0   # threads > 1 overlap
            parts = {"decode": m["decode_max"] * scale, "analysis": m["analysis_max"] * scale,
                     "collect": m["collect"] * scale, "transfer / other": max(0.0, m["latency"] - busy * scale)}
            kind = "pipelined"
        bottom = 0.0
        for name, v in parts.items():
            ax.bar(i, v, bottom=bottom, color=colours[name], label=name if i == 0 else None)
            bottom += v
        ax.text(i, m["latency"] + 0.02, f"{m['latency']:.2f} s", ha="center")
        labels.append(f"{rep['ranks']} rank{'s' * (rep['ranks'] > 1)}\n{rep['threads']} thread{'s' * (rep['threads'] > 1)}\n"
                      f"{kind}\n{rep.get('bank_label', '')}")
    ax.axhline(1.5, color="red", linestyle="--", linewidth=1, label="target 1.5 s")
    ax.set_ylim(0, 1.25 * max([1.5] + [rep["median"]["latency"] for rep in data]))
    ax.set_xticks(range(len(data)), labels)
    ax.set_ylabel("seconds per tick (median)")
    ax.set_title(f"{data[0]['streams']} QCIF streams: one tick, split by stage")
    ax.legend(loc="upper left", bbox_to_anchor=(1.01, 1.0), fontsize=8)
    fig.tight_layout()
    fig.savefig(out, dpi=110)
    print(f"wrote {out}")
    return 0


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--streams", type=int, default=10080)
    ap.add_argument("--ticks", type=int, default=5, help="timed ticks (default 5)")
    ap.add_argument("--warmup", type=int, default=2, help="untimed ticks first (default 2)")
    ap.add_argument("--phased", action="store_true")
    ap.add_argument("--analysers", type=int, default=1, help="analyser GPs per rank")
    ap.add_argument("--placement", choices=("spread", "local"), default="spread")
    ap.add_argument("--batch", type=int, default=256)
    ap.add_argument("--threads", type=int, default=1, help="compute threads per rank (0: on the event loop)")
    ap.add_argument("--device", choices=("auto", "cpu", "gpu"), default="auto")
    ap.add_argument("--clips", type=Path, help="replay these clips (default: generate --bank clips)")
    ap.add_argument("--bank", type=int, default=24)
    ap.add_argument("--bank-frames", type=int, default=100)
    ap.add_argument("--seed", type=int, default=101)
    ap.add_argument("--repeat", type=int, default=5, help="raw mpi4py repeats")
    ap.add_argument("--timeout", type=float, default=300.0)
    ap.add_argument("--json", type=Path)
    ap.add_argument("--plot", type=Path, help="draw the given JSON reports into this PNG and exit")
    ap.add_argument("reports", nargs="*", type=Path)
    args = ap.parse_args()
    if args.plot is not None:
        return plot(args.plot, args.reports)
    return run(args)


if __name__ == "__main__":
    sys.exit(main())
