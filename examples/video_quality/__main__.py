"""Command line of the video-quality example (run from the repository root).

::

    python -m examples.video_quality generate --streams 16 --out clips [--seed 4]
    python -m examples.video_quality analyse clips --out results.csv [--check]
    python -m examples.video_quality live --streams 1000 --fps 25 --duration 2
    python -m examples.video_quality tune                 # how the thresholds were chosen
    aiopdbp launch -n 2 -m examples.video_quality analyse clips --out results.csv

``analyse`` and ``live`` run the GP pipeline (one process, or every rank under
``aiopdbp launch`` / ``mpiexec``); only rank 0 prints.  Exit status: 0, or 1 with
``--check`` when a verdict differs from the ground truth.  The ground truth is
read only from ``--truth FILE`` (the ``truth.csv`` that ``generate`` wrote),
never from a file found next to the clips; a generated live bank knows its own.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import sys
import time
from pathlib import Path
from typing import Any

import aiopdbp

from . import scenes
from .ingest import common_size, demux, file_table, find_clips, live_table, require_av
from .pipeline import Config, RunResult, run_pipeline
from .report import timing_report
from .schedule import PLACEMENTS


def launcher_rank() -> int:
    """This process's rank when started by an MPI launcher (0 otherwise), without MPI."""
    for var in ("PMI_RANK", "OMPI_COMM_WORLD_RANK", "PMIX_RANK", "SLURM_PROCID"):
        if os.environ.get(var, "").isdigit():
            return int(os.environ[var])
    return 0


def _pipeline_args(p: argparse.ArgumentParser) -> None:
    g = p.add_argument_group("pipeline")
    g.add_argument("--analysers", type=int, default=1, metavar="A", help="analyser GPs per rank (default 1)")
    g.add_argument("--placement", choices=PLACEMENTS, default="spread",
                   help="spread: round-robin over all analysers (frames cross ranks); "
                        "local: analysers on the stream's ingest rank (default spread)")
    g.add_argument("--batch", type=int, default=256, help="frames per send_stream, at most (default 256)")
    g.add_argument("--threads", type=int, default=1,
                   help="decode and analyse in a pool of this many threads per rank, off the event loop "
                        "(default 1; 0: inline; 2+ uses more cores in one process)")
    g.add_argument("--device", choices=("auto", "cpu", "gpu"), default="auto",
                   help="analysers on CuPy/GPU when present (auto), or force one")
    g.add_argument("--timeout", type=float, default=120.0, help="seconds any one wait may take")
    g.add_argument("--details", action="store_true", help="add a blockiness column to the CSV")
    g.add_argument("--check", action="store_true", help="exit 1 if a verdict differs from the ground truth")
    g.add_argument("--truth", type=Path, metavar="FILE",
                   help="the ground truth to compare with: the truth.csv that `generate` wrote "
                        "(read only when given)")


def build_parser() -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(prog="python -m examples.video_quality",
                                 description="Quality analysis of H.264 video streams over aiopdbp.")
    sub = ap.add_subparsers(dest="command", required=True)

    g = sub.add_parser("generate", help="encode procedural QCIF test clips with known degradations")
    g.add_argument("--streams", type=int, required=True, help="number of clips")
    g.add_argument("--out", type=Path, required=True, help="output directory")
    g.add_argument("--seed", type=int, default=1)
    g.add_argument("--frames", type=int, default=scenes.DEFAULT_FRAMES, help="frames per clip (>= 40)")
    g.add_argument("--format", choices=("mp4", "mkv", "h264"), default="mp4")
    g.add_argument("--crf", type=int, default=18,
                   help="libx264 quality: 18 (default, ~290 kbit/s, the thresholds' tuning) .. 28 (~90 kbit/s, 3G-like)")
    g.add_argument("--jobs", type=int, default=os.cpu_count() or 1, help="encoding processes")

    a = sub.add_parser("analyse", help="analyse clip files (or directories of clips) once")
    a.add_argument("paths", nargs="+", type=Path, metavar="PATH")
    a.add_argument("--out", type=Path, required=True, help="CSV file to write")
    _pipeline_args(a)

    lv = sub.add_parser("live", help="analyse N synthetic live streams tick by tick")
    lv.add_argument("--streams", type=int, required=True)
    lv.add_argument("--fps", type=float, default=25.0, help="tick rate; 0 = as fast as possible (default 25)")
    lv.add_argument("--duration", type=float, default=2.0, help="seconds of stream time (default 2)")
    lv.add_argument("--ticks", type=int, default=0, help="timed ticks (overrides --duration; needed with --fps 0)")
    lv.add_argument("--warmup", type=int, default=0, help="untimed ticks first (decoder start-up)")
    lv.add_argument("--inflight", type=int, default=1, help="ticks in the pipeline at once (default 1)")
    lv.add_argument("--phased", action="store_true",
                    help="decode all, then transfer all, then analyse all, to time each stage apart")
    lv.add_argument("--clips", type=Path, help="replay the clips of this directory (default: generate a bank)")
    lv.add_argument("--bank", type=int, default=24, help="clips to generate for the replay bank (default 24)")
    lv.add_argument("--bank-frames", type=int, default=100, help="frames per bank clip (default 100)")
    lv.add_argument("--seed", type=int, default=101, help="seed of the generated bank")
    lv.add_argument("--out", type=Path, help="CSV file to write (default: none)")
    lv.add_argument("--json", type=Path, help="write the timing report here (rank 0)")
    _pipeline_args(lv)

    t = sub.add_parser("tune", help="show the measures on the tuning seeds against the thresholds")
    t.add_argument("--seeds", default="1,2,3")
    t.add_argument("--clips", type=int, default=24, help="clips per seed")
    return ap


def _config(args: argparse.Namespace, mode: str, width: int, height: int) -> Config:
    for name in ("analysers", "batch"):
        if getattr(args, name) < 1:
            raise SystemExit(f"--{name} must be >= 1")
    return Config(mode=mode, width=width, height=height, out=args.out, details=args.details,
                  analysers=args.analysers, placement=args.placement, batch=args.batch,
                  timeout=args.timeout, threads=args.threads, device=args.device)


def _finish(res: RunResult | None, truth: list[str] | None, names: list[str], check: bool,
            elapsed: float) -> int:
    if res is None:               # not rank 0
        return 0
    frames = int(res.summary.frames.sum())
    print(f"{len(names)} streams, {frames} frames analysed on {res.ranks} rank(s) by "
          f"{res.analysers} analyser GP(s) [{res.device}] in {elapsed:.2f} s "
          f"({res.cross_rank_share:.0%} of the streams cross ranks)", flush=True)
    mismatches = res.summary.print(names, truth)
    sys.stdout.flush()
    return 1 if check and (truth is None or mismatches) else 0


def cmd_generate(args: argparse.Namespace) -> int:
    require_av()
    if launcher_rank() != 0:
        return 0                  # under a launcher, rank 0 writes the files
    t0 = time.perf_counter()
    paths = scenes.generate(args.out, args.streams, args.seed, args.frames, args.format, jobs=args.jobs,
                           crf=args.crf)
    print(f"wrote {len(paths)} clips ({args.frames} frames of {scenes.WIDTH}x{scenes.HEIGHT}) and "
          f"truth.json/truth.csv to {args.out} in {time.perf_counter() - t0:.1f} s")
    return 0


def cmd_analyse(args: argparse.Namespace) -> int:
    require_av()
    if args.check and args.truth is None:
        raise SystemExit("--check needs --truth FILE: the truth.csv that `generate` wrote for these clips")
    paths = find_clips(args.paths)
    width, height = common_size(paths)
    truth_by_name = _truth(args.truth, [p.name for p in paths]) if args.truth is not None else None
    table = file_table(paths, width, height, truth_by_name)
    cfg = _config(args, "analyse", width, height)
    t0 = time.perf_counter()
    res = aiopdbp.run(run_pipeline(cfg, table))
    code = _finish(res, table.truth, table.names, args.check, time.perf_counter() - t0)
    if res is not None:
        print(f"wrote {res.rows} rows to {args.out}")
    return code


def _truth(path: Path, names: list[str]) -> dict[str, str]:
    """The ground truth of the clips ``names`` from ``--truth`` (a clear exit
    when the file is not one ``generate`` wrote, or misses some clips)."""
    try:
        truth = scenes.read_truth_file(path)
    except (OSError, ValueError) as exc:
        raise SystemExit(f"--truth {path}: {exc}") from None
    missing = [n for n in names if n not in truth]
    if missing:
        raise SystemExit(f"--truth {path} has no verdict for {len(missing)} of the {len(names)} clips "
                         f"(e.g. {', '.join(missing[:3])})")
    return truth


def load_bank(args: argparse.Namespace) -> list[Any]:
    """The clips live streams replay: a directory's clips, or a generated bank."""
    if args.clips is None and args.truth is not None:
        raise SystemExit("--truth goes with --clips (a generated bank knows its own truth)")
    if args.clips is not None:
        if args.check and args.truth is None:
            raise SystemExit("--check with --clips needs --truth FILE: the truth.csv that `generate` wrote")
        paths = find_clips([args.clips])
        truth = _truth(args.truth, [p.name for p in paths]) if args.truth is not None else {}
        common_size(paths)
        bank = [demux(p, p.name) for p in paths]
        for c in bank:
            c.flags = truth.get(c.name, "")
        return bank
    specs = scenes.plan_set(args.bank, args.seed, args.bank_frames)
    # under a launcher every rank makes the same bank; alone, use the machine's cores
    jobs = 1 if launcher_rank() or os.environ.get("PMI_SIZE", "1") != "1" else (os.cpu_count() or 1)
    return scenes.encode_bank(specs, jobs)


def cmd_live(args: argparse.Namespace) -> int:
    require_av()
    if args.streams < 1:
        raise SystemExit("--streams must be >= 1")
    if args.ticks < 0 or args.warmup < 0 or args.inflight < 1:
        raise SystemExit("--ticks/--warmup must be >= 0 and --inflight >= 1")
    if args.fps < 0 or (args.fps == 0 and args.ticks == 0):
        raise SystemExit("--fps must be > 0, or 0 together with --ticks N")
    ticks = args.ticks or max(1, math.ceil(args.duration * args.fps))
    t0 = time.perf_counter()
    bank = load_bank(args)
    width, height = scenes.WIDTH, scenes.HEIGHT
    if args.clips is not None:
        width, height = common_size(find_clips([args.clips]))
    table = live_table(args.streams, bank)
    cfg = _config(args, "live", width, height)
    cfg.fps, cfg.ticks, cfg.warmup = args.fps, ticks + args.warmup, args.warmup
    cfg.inflight, cfg.phased = args.inflight, args.phased
    t_bank = time.perf_counter() - t0
    longest = max(len(c.packets) for c in bank)
    if table.truth is not None and cfg.ticks < longest:
        # a stream's verdict covers what it has played; the clip's truth needs the whole clip
        print(f"(ground truth not checked: {cfg.ticks} ticks < {longest} frames of the longest clip)")
        table.truth = None
    t0 = time.perf_counter()
    res = aiopdbp.run(run_pipeline(cfg, table))
    if res is None:
        return 0
    code = _finish(res, table.truth, table.names, args.check, time.perf_counter() - t0)
    report = timing_report(res, cfg)
    report["bank"] = {"clips": len(bank), "seconds_to_prepare": round(t_bank, 2)}
    for line in report["lines"]:
        print(line)
    if args.json is not None:
        args.json.write_text(json.dumps(report, indent=1) + "\n", encoding="utf-8")
    return code


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        if args.command == "generate":
            return cmd_generate(args)
        if args.command == "analyse":
            return cmd_analyse(args)
        if args.command == "live":
            return cmd_live(args)
        from .tune import main as tune_main

        return tune_main([int(s) for s in args.seeds.split(",")], args.clips)
    except (ValueError, OSError) as exc:      # bad input (av's errors are ValueErrors): say so
        print(f"error: {exc}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
