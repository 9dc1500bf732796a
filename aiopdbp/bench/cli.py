"""``aiopdbp bench``: the command line, self-launching and sweeps over rank counts.

* Inside an MPI job (``mpiexec -n N python -m aiopdbp bench ...`` or
  ``aiopdbp launch -n N -m aiopdbp bench ...``) every rank runs the job
  (:func:`aiopdbp.bench.runner.run_job`); rank 0 prints and writes the results.
* Outside one, ``aiopdbp bench -n N ...`` launches itself with
  :func:`aiopdbp.launch.launcher.launch` (``-n 2`` when not given); ``-n 2,3,4`` runs
  one job per rank count, each into ``OUT/nN/``, then merges their results
  into ``OUT/`` (JSON, CSV, plots with one line per rank count).
* ``--emulate [--link RATE] [--hosts H]`` runs each of those jobs on an
  emulated cluster (:func:`aiopdbp.launch.launcher.launch_emulated`: one network
  namespace per host, ``tbf``-shaped links, needs root).  The ranks find the
  link in ``AIOPDBP_EMULATE_LINK_BPS`` and label their rows with it
  (``emulated 1gbit (tbf, no added delay)``, ``--line-rate`` from it unless
  given), also when started as ``aiopdbp launch --emulate -m aiopdbp bench``.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

from aiopdbp.bench.plan import BENCH_ENV, DEFAULT_SIZES, Options, parse_ranks, parse_rate, parse_sizes
from aiopdbp.bench.workload import IMPLS, TESTS
from aiopdbp.env import bench_link, emulated_link_bps, in_mpi_job, inherited

__all__ = ["build_parser", "child_argv", "latency_alias", "main", "register"]

HELP = "benchmarks: aiopdbp vs raw mpi4py, MPI_Alltoall and an asyncio floor (aiopdbp bench -h)"


def _csv(kind: tuple[str, ...]) -> Any:
    def parse(text: str) -> tuple[str, ...]:
        items = tuple(x.strip() for x in text.split(",") if x.strip())
        bad = [x for x in items if x not in kind]
        if bad or not items:
            raise argparse.ArgumentTypeError(f"choose from {', '.join(kind)} (got {text!r})")
        return items
    return parse


def _type(fn: Any) -> Any:
    def parse(text: str) -> Any:
        try:
            return fn(text)
        except ValueError as exc:
            raise argparse.ArgumentTypeError(str(exc)) from None
    return parse


def build_parser() -> argparse.ArgumentParser:
    """The parser of ``aiopdbp bench`` (its own: the main CLI hands over raw arguments)."""
    d = Options()
    p = argparse.ArgumentParser(
        prog="aiopdbp bench", allow_abbrev=False,
        description="Reproduce the PDBP paper's experiments (1-to-N, N-to-1, N-to-N) and the "
        "OSU-style point-to-point tests with aiopdbp, side by side with raw mpi4py, "
        "MPI_Alltoall and an asyncio floor, in the same job. Results: table, JSON, CSV, PNG.",
        epilog="examples: aiopdbp bench --quick | aiopdbp bench -n 2,3,4 --tests NtoN --tcp | "
        "aiopdbp bench streams --help | aiopdbp bench scale --help | "
        "mpiexec -n 4 python -m aiopdbp bench --tests 1toN,Nto1 --sizes 4K,64K,1M")
    a = p.add_argument
    a("-n", "--ranks", type=parse_ranks, default=None, metavar="N[,N...]",
      help="launch N ranks with mpiexec (a list: one job per rank count, results merged); "
      "default 2, or the size of the MPI job this runs in")
    a("--tcp", action="store_true", help="force MPICH's TCP path between local ranks (when launching)")
    a("--emulate", action="store_true",
      help="launch on an emulated cluster (one network namespace per host, links shaped with "
      "tc tbf, no added delay; needs root): --link is then its rate (default 1gbit)")
    a("--hosts", type=int, default=None, metavar="H",
      help="with --emulate: emulated hosts (default one per rank)")
    a("--quick", action="store_true", help="every test, 4 sizes, small volumes, 3 repeats (< 1 min, 2 ranks)")
    a("--tests", type=_csv(TESTS), default=d.tests, help=f"comma list of {', '.join(TESTS)} (default all)")
    a("--impls", type=_csv(IMPLS), default=d.impls, help=f"comma list of {', '.join(IMPLS)} (default all)")
    a("--sizes", type=_type(parse_sizes), default=None,
      help="unit sizes of the patterns, e.g. 64,291,4K,1M (default "
      f"{','.join(map(str, DEFAULT_SIZES))})")
    a("--bw-sizes", type=_type(parse_sizes), default=None, help="sizes of the bw test (64K,1M,4M)")
    a("--lat-sizes", type=_type(parse_sizes), default=None, help="sizes of the latency test (8)")
    a("--rate-sizes", type=_type(parse_sizes), default=None, help="sizes of the rate test (64)")
    a("--gps-per-rank", type=int, default=d.gps_per_rank, metavar="K",
      help="GPs per rank in the patterns: GP j sends to GP j of every peer (default 1)")
    a("--repeat", type=int, default=None, metavar="R", help="measured runs per point (default 5)")
    a("--warmup", type=int, default=None, help="unmeasured runs per point and impl (default 1)")
    a("--bytes-per-flow", type=_type(lambda t: int(parse_sizes(t)[0])), default=None,
      help="volume of each flow in a pattern (default 32M, quick 1M)")
    a("--min-units", type=int, default=None, help="fewest units per flow (default 8)")
    a("--max-units", type=int, default=None, help="most units per flow (default 20000, quick 2000)")
    a("--lat-iters", type=int, default=None, help="round trips per latency run (default 2000)")
    a("--rate-units", type=int, default=None, help="messages per pair per rate run (default 100000)")
    a("--window", type=int, default=d.window, help="raw Isend window / floor in-flight limit (64)")
    a("--stream-recv", choices=("iter", "read"), default=d.stream_recv,
      help="stream receivers: 'iter' (async for seg in stream) or 'read' (await stream.read())")
    a("--timeout", type=float, default=d.timeout, help="seconds any one run may take (300)")
    a("--out", default="", help="output folder (default ./aiopdbp-bench-YYYYmmdd-HHMMSS)")
    a("--no-plots", dest="plots", action="store_false", help="no PNG plots")
    a("--profile", action="store_true", help="cProfile every rank during the --profile-impls runs")
    a("--profile-impls", type=_csv(IMPLS), default=d.profile_impls, help="(aiopdbp-msg,aiopdbp-stream)")
    a("--inject-fault", choices=IMPLS, default="",
      help="self-test: corrupt one byte of one unit sent by IMPL; the run must fail (exit 1)")
    a("--link", default=None,
      help="label of the link, e.g. '25GbE' (env AIOPDBP_BENCH_LINK); with --emulate the "
      "emulated link's rate each way (1gbit, 100mbit, none; default 1gbit), and the rows are "
      "labelled with it")
    a("--line-rate", type=_type(parse_rate), default=0.0,
      help="configured line rate (1gbit, 100mbit): rows get the fraction of it")
    a("--seed", type=int, default=d.seed, help="seed of the payloads")
    a("--no-uvloop", dest="uvloop", action="store_false", help="asyncio's default loop")
    return p


def to_options(ns: argparse.Namespace, argv: Sequence[str]) -> Options:
    """Options of a job from parsed arguments (quick presets first, explicit values win)."""
    o = Options()
    if ns.quick:
        o.apply_quick()
    o.tests, o.impls, o.gps_per_rank, o.window = ns.tests, ns.impls, ns.gps_per_rank, ns.window
    o.stream_recv, o.timeout, o.out, o.plots = ns.stream_recv, ns.timeout, ns.out, ns.plots
    o.profile, o.profile_impls, o.inject_fault = ns.profile, ns.profile_impls, ns.inject_fault
    # with --emulate, --link is the rate of the cluster to build, not a label
    o.link, o.line_rate = emulated_link(inherited(), None if ns.emulate else ns.link, ns.line_rate)
    o.seed, o.uvloop = ns.seed, ns.uvloop
    for name in ("sizes", "bw_sizes", "lat_sizes", "rate_sizes", "repeat", "warmup", "bytes_per_flow",
                 "min_units", "max_units", "lat_iters", "rate_units"):
        v = getattr(ns, name)
        if v is not None:
            setattr(o, name, v)
    o.command = ["aiopdbp", "bench", *argv]
    o.check()
    return o


def emulated_link(env: Mapping[str, str], link: str | None, line_rate: float) -> tuple[str, float]:
    """The link label and line rate (bit/s) of a job.

    On an emulated cluster (``AIOPDBP_EMULATE_JOB`` is set) the default label
    says what the link is -- ``emulated 1gbit (tbf, no added delay)`` -- and
    the line rate defaults to the shaped rate; explicit values win.  Elsewhere
    the label is ``link``, else ``AIOPDBP_BENCH_LINK``.
    """
    bps = emulated_link_bps(env)
    if bps is None:
        return (link if link is not None else bench_link(env)), line_rate
    from aiopdbp.launch.emulate import format_rate

    label = (f"emulated {format_rate(bps)} (tbf, no added delay)" if bps > 0
             else "emulated, unshaped (no tbf, no added delay)")
    return (link if link is not None else label), (line_rate or float(bps))


def _in_mpi_job() -> bool:
    return in_mpi_job()


def _world_size() -> int:
    from aiopdbp.transport.mpi import mpi_world_size

    return mpi_world_size()


def child_argv(argv: Sequence[str], *, emulate: bool = False) -> list[str]:
    """``argv`` without the options that only the launching process uses
    (with ``emulate``, ``--link`` is the emulated rate: the ranks get the
    link from the environment instead)."""
    valued = ("-n", "--ranks", "--out", "--hosts") + (("--link",) if emulate else ())
    out: list[str] = []
    skip = False
    for tok in argv:
        if skip:
            skip = False
        elif tok in valued:
            skip = True
        elif tok.startswith(tuple(f"{v}=" for v in valued if v.startswith("--"))) or (
                tok.startswith("-n") and not tok.startswith("--")):
            pass  # -nN, -n=N, --out=X
        elif tok not in ("--tcp", "--emulate"):
            out.append(tok)
    return out


def latency_alias(argv: Sequence[str]) -> list[str] | str | None:
    """``--tests latency`` is ``aiopdbp bench pingpong`` now (one latency test,
    one floor): its arguments (``--lat-sizes`` as ``--sizes``, ``--lat-iters``
    as ``--iters``), an error text when mixed with other tests, else None."""
    args = list(argv)
    tests: list[str] = []
    for i, tok in enumerate(args):
        if tok == "--tests" and i + 1 < len(args):
            tests = args[i + 1].split(",")
        elif tok.startswith("--tests="):
            tests = tok.split("=", 1)[1].split(",")
    if "latency" not in tests:
        return None
    if len(set(tests)) > 1:
        return ("the latency test is `aiopdbp bench pingpong` (--tests latency alone is its alias); "
                "run it apart from " + ",".join(t for t in tests if t != "latency"))
    rename = {"--lat-sizes": "--sizes", "--lat-iters": "--iters"}
    keep = {"-n", "--ranks", "--repeat", "--out", "--timeout", *rename}
    out: list[str] = []
    i = 0
    while i < len(args):
        tok, val = args[i], args[i + 1] if i + 1 < len(args) else ""
        if tok in keep and val:
            if tok in ("-n", "--ranks") and "," in val:
                return "--tests latency (pingpong) runs one rank count"
            out += [rename.get(tok, tok), val]
            i += 2
            continue
        if tok in ("--tcp", "--quick"):
            out.append(tok)
        elif tok == "--no-uvloop":
            out.append(tok)
        i += 1
    return out if "--sizes" in out else ["--sizes", "8", *out]


def main(argv: Sequence[str] | None = None) -> int:
    """``aiopdbp bench [options]``; returns the exit code."""
    args = list(sys.argv[1:] if argv is None else argv)
    if args[:1] == ["streams"]:  # its own command: streams vs messages of the same bytes
        from aiopdbp.bench.streams import main as streams_main

        return streams_main(args[1:])
    if args[:1] == ["scale"]:  # per-peer costs over rank counts (issue 31): its own command
        from aiopdbp.bench.scale import main as scale_main

        return scale_main(args[1:])
    if args[:1] == ["pingpong"]:  # request/response (issue 18): its own parser
        from aiopdbp.bench.pingpong import main as pingpong_main

        return pingpong_main(args[1:])
    parser = build_parser()
    alias = latency_alias(args)
    if alias is not None:
        if isinstance(alias, str):
            parser.error(alias)
        from aiopdbp.bench.pingpong import main as pingpong_main

        return pingpong_main(alias)
    ns = parser.parse_args(args)
    if ns.hosts is not None and not ns.emulate:
        parser.error("--hosts needs --emulate")
    try:
        if ns.emulate:
            from aiopdbp.launch.emulate import EmulateConfig

            EmulateConfig(link=ns.link if ns.link is not None else "1gbit", hosts=ns.hosts)
        opts = to_options(ns, args)
    except ValueError as exc:
        parser.error(str(exc))
    if _in_mpi_job():
        size = _world_size()
        if size < 2:
            print("aiopdbp bench: needs at least 2 ranks (mpiexec -n 2 ...)", file=sys.stderr)
            return 2
        if ns.emulate or ns.hosts is not None:
            print("aiopdbp bench: --emulate/--hosts start an emulated cluster, which a job "
                  "cannot do from inside; run `aiopdbp bench -n N --emulate` outside mpiexec "
                  "(or `aiopdbp launch -n N --emulate -m aiopdbp bench`)", file=sys.stderr)
            return 2
        if ns.ranks is not None and ns.ranks != [size]:
            print(f"aiopdbp bench: -n {ns.ranks} inside an MPI job of {size} ranks; run it "
                  "outside mpiexec to launch other rank counts", file=sys.stderr)
            return 2
        from aiopdbp.bench.runner import run_job

        return run_job(opts)
    return _launch(ns, opts, args)


def _launcher(ns: argparse.Namespace) -> Callable[[int, list[str]], int] | int:
    """How to start one job (``launch(n, argv) -> exit code``), or an exit code
    when it cannot be started (the reason printed)."""
    from aiopdbp.launch.launcher import launch

    if not ns.emulate:
        return lambda n, argv: launch(n, argv, tcp=ns.tcp, extra_env=BENCH_ENV)
    from aiopdbp.launch.emulate import EmulateConfig, requirements_problems

    problems = requirements_problems()  # the clearest error first: privilege and tools
    if problems:
        print("aiopdbp bench: --emulate cannot run here: " + "; ".join(problems), file=sys.stderr)
        return 2
    config = EmulateConfig(link=ns.link if ns.link is not None else "1gbit", hosts=ns.hosts)
    return lambda n, argv: launch(n, argv, tcp=ns.tcp, emulate=config, extra_env=BENCH_ENV)


def _run_one(start: Callable[[int, list[str]], int], n: int, argv: list[str]) -> int:
    """``start(n, argv)`` with launcher failures turned into a message and an exit code."""
    from aiopdbp.launch.launcher import reporting_failures

    return reporting_failures("aiopdbp bench", lambda: start(n, argv))


def _launch(ns: argparse.Namespace, opts: Options, argv: Sequence[str]) -> int:
    start = _launcher(ns)
    if isinstance(start, int):
        return start
    ranks = ns.ranks or [2]
    out = Path(opts.out or time.strftime("aiopdbp-bench-%Y%m%d-%H%M%S")).resolve()
    base = ["-m", "aiopdbp.bench", *child_argv(argv, emulate=ns.emulate)]
    if len(ranks) == 1:
        return _run_one(start, ranks[0], [*base, "--out", str(out)])
    docs: list[dict[str, Any]] = []
    for n in ranks:
        sub = out / f"n{n}"
        print(f"aiopdbp bench: job {len(docs) + 1}/{len(ranks)}: {n} ranks -> {sub}", flush=True)
        rc = _run_one(start, n, [*base, "--out", str(sub), "--no-plots"])
        if rc != 0:
            print(f"aiopdbp bench: the {n}-rank job failed (exit {rc}); nothing merged",
                  file=sys.stderr)
            return rc
        docs.append(json.loads((sub / "bench.json").read_text(encoding="utf-8")))
    from aiopdbp.bench.report import build_summary, finish
    from aiopdbp.bench.stats import merge_results

    merged = merge_results(docs)
    merged["summary"] = build_summary(merged["rows"])
    merged["meta"]["command"] = " ".join(opts.command)
    finish(out, merged, plots=opts.plots)
    return 0


def register(sub: Any) -> None:
    """Add ``bench`` to the main CLI's subcommands (for ``aiopdbp -h``); the main
    CLI hands ``aiopdbp bench ...`` arguments to :func:`main` unparsed."""
    sub.add_parser("bench", help=HELP, add_help=False)
