"""The load matrix of issue 15, outside CI: every pattern of
``tests/mpi_scripts/load.py`` x senders x sizes, on 2, 3 and 4 ranks, shared
memory and TCP, repeated; and the memory check.

    python benchmarks/load.py --repeat 3                 # the whole matrix
    python benchmarks/load.py --ranks 2 --transports shm --patterns ring,fanin
    python benchmarks/load.py --memory                   # peak RSS at 1x and 4x the messages

One ``mpiexec`` job per (ranks, transport, repeat) runs every case of the
matrix (a node per case); a job that fails goes on with the cases it did not
reach in a new job, so one failure hides nothing else.  The table has one
row per case: ``finished`` (repeats that finished with every payload checked
and credit waits on every sending link, out of ``--repeat``), ``msgs/s`` (items
received by all ranks / the slowest rank's time, median of the repeats),
``credit waits`` (all ranks' ``stats().links[h].credit_waits``, median) and
``peak RSS`` (the largest rank's ``ru_maxrss`` in MiB at the end of the case,
a process peak: cases run in order of size, so it is the peak up to that
case).  Exit code 0 iff every case finished every time.

``--memory``: the ring of 4 KiB messages from 16 senders per GP with the
default window (1 MiB) at 1x and 4x the messages, each in a job of its own
(``ru_maxrss`` is a process peak) after a 600-message warm-up case; prints
the largest rank's peak RSS, how much it grew over the warm-up's peak, the
ratio 4x/1x and the bound the link's theory of operation documents (pool +
window x peers, :mod:`aiopdbp.hosts.link`).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from _common import format_table  # noqa: E402

from aiopdbp.launch.launcher import TCP_ENV, find_mpiexec  # noqa: E402
from aiopdbp.hosts.remote import RemoteConfig  # noqa: E402

SCRIPT = ROOT / "tests" / "mpi_scripts" / "load.py"
PATTERNS = ["oneway", "ring", "alltoall", "fanin", "fanout", "reqresp", "mixed", "multicast", "shortstream"]


def run_job(n: int, tcp: bool, cases: list[str], window: int, timeout: float) -> tuple[list[dict[str, Any]], str]:
    """Run the cases in one job; return the LOAD rows and the job's stderr tail."""
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join([str(ROOT)] + ([env["PYTHONPATH"]] if env.get("PYTHONPATH") else []))
    if tcp:
        env.update(TCP_ENV)
    cmd = [find_mpiexec(), "-n", str(n), sys.executable, str(SCRIPT), "--window", str(window),
           "--timeout", str(timeout), *cases]
    budget = timeout * len(cases) + 60
    try:
        p = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=budget,
                           start_new_session=True)
        out, err = p.stdout, p.stderr
    except subprocess.TimeoutExpired as exc:  # the script aborts a stuck case itself; belt and braces
        out = exc.stdout.decode() if isinstance(exc.stdout, bytes) else exc.stdout or ""
        err = f"job killed after {budget:.0f} s"
    rows = []
    for line in out.splitlines():
        if "LOAD " in line:
            rows.append(json.loads(line.split("LOAD ", 1)[1]))
    return rows, err[-2000:]


def cases_for(patterns: list[str], senders: list[int], sizes: list[int], window: int) -> list[str]:
    """Every (pattern, senders, size); the script picks the count (just over 4
    windows), except the short-stream run, which keeps its 1000 small items."""
    def count(p: str, z: int) -> str:
        least = -(-4 * window // (z + 64)) + 1
        return f",count={max(1000, least)}" if p == "shortstream" and z <= 4096 else ""
    return [f"{p},senders={s},size={z}{count(p, z)}" for z in sizes for p in patterns for s in senders]


def matrix(args: argparse.Namespace) -> int:
    patterns = args.patterns.split(",")
    senders = [int(x) for x in args.senders.split(",")]
    sizes = [int(x) for x in args.sizes.split(",")]
    cases = cases_for(patterns, senders, sizes, args.window)
    results: dict[tuple[int, str, str], list[list[dict[str, Any]]]] = {}
    t_start = time.monotonic()
    for n in [int(x) for x in args.ranks.split(",")]:
        for transport in args.transports.split(","):
            for rep in range(args.repeat):
                todo = list(cases)
                while todo:
                    rows, err = run_job(n, transport == "tcp", todo, args.window, args.timeout)
                    by_case: dict[int, list[dict[str, Any]]] = {}
                    for row in rows:
                        by_case.setdefault(int(row["case"]), []).append(row)
                    done = 0
                    for i, case in enumerate(todo):
                        got = by_case.get(i, [])
                        if not got:
                            break
                        results.setdefault((n, transport, case), []).append(got)
                        done = i + 1
                        if not all(r["ok"] for r in got) or len(got) != n:
                            print(f"FAILED {n} ranks {transport} rep {rep}: {case}: "
                                  f"{[r.get('error') for r in got if not r['ok']]} "
                                  f"(rows {[(r['rank'], r['label']) for r in got]})\n{err}", file=sys.stderr)
                            break
                    if done == 0:      # the job did not even report its first case
                        results.setdefault((n, transport, todo[0]), []).append([])
                        print(f"FAILED {n} ranks {transport} rep {rep}: {todo[0]}: no result\n{err}",
                              file=sys.stderr)
                        done = 1
                    todo = todo[done:]
                print(f"# {n} ranks {transport} repeat {rep + 1}/{args.repeat} done "
                      f"({time.monotonic() - t_start:.0f} s)", file=sys.stderr, flush=True)
    table = []
    all_ok = True
    for (n, transport, case), reps in results.items():
        opts = dict(kv.split("=") for kv in case.split(",")[1:])
        ok_reps = [r for r in reps if len(r) == n and all(x["ok"] for x in r)]
        all_ok &= len(ok_reps) == args.repeat
        rates = [sum(x["items"] for x in r) / max(x["elapsed"] for x in r) for r in ok_reps]
        waits = [sum(sum(x["credit_waits"].values()) for x in r) for r in ok_reps]
        rss = [max(x["rss_kib"] for x in r) / 1024 for r in ok_reps]
        table.append({
            "pattern": case.split(",")[0], "ranks": n, "transport": transport,
            "senders": int(opts["senders"]), "size": int(opts["size"]),
            "finished": f"{len(ok_reps)}/{args.repeat}",
            "msgs/s": round(statistics.median(rates)) if rates else "-",
            "credit waits": round(statistics.median(waits)) if waits else "-",
            "peak RSS MiB": round(max(rss), 1) if rss else "-",
        })
    print(format_table(table))
    print(f"\n{sum(r['finished'] == f'{args.repeat}/{args.repeat}' for r in table)} of {len(table)} cases "
          f"finished {args.repeat}/{args.repeat}; {time.monotonic() - t_start:.0f} s in all")
    return 0 if all_ok else 1


def memory(args: argparse.Namespace) -> int:
    cfg = RemoteConfig()
    window = cfg.gp_window
    base = args.memory_count
    status = 0
    for n in [int(x) for x in args.ranks.split(",")]:
        others = n - 1
        pool = (cfg.pool_blocks or 2 * 32 * others) * cfg.block_size
        bound = pool + window * others
        peaks, grown = {}, {}
        for mult in (1, 4):
            # a short warm-up case first, in the same job: the growth of the
            # measured case is then what its traffic needs, not first use
            warm = f"ring,senders=16,size=4096,count=600,window={window},windows=1"
            case = f"ring,senders=16,size=4096,count={base * mult},window={window}"
            got, err = run_job(n, False, [warm, case], window, args.timeout)
            if len(got) != 2 * n or not all(r["ok"] for r in got):
                print(f"memory check failed at {mult}x on {n} ranks: {got}\n{err}", file=sys.stderr)
                return 1
            before = {r["rank"]: r["rss_kib"] for r in got if r["case"] == 0}
            after = {r["rank"]: r["rss_kib"] for r in got if r["case"] == 1}
            peaks[mult] = max(after.values())
            grown[mult] = max(after[k] - before[k] for k in after)
        ratio = peaks[4] / peaks[1]
        ok = ratio <= 1.10 and grown[4] * 1024 <= bound
        status |= 0 if ok else 1
        print(f"{n} ranks, ring 4 KiB x 16 senders, window {window >> 10} KiB: "
              f"{base} msgs: peak RSS {peaks[1] / 1024:.1f} MiB (+{grown[1] / 1024:.1f} MiB over the warm-up); "
              f"{4 * base} msgs: {peaks[4] / 1024:.1f} MiB (+{grown[4] / 1024:.1f} MiB); 4x/1x = {ratio:.3f}; "
              f"bound pool + window x peers = {pool >> 20} + {window >> 20} x {others} = {bound / 2**20:.0f} MiB: "
              f"{'OK' if ok else 'EXCEEDED'}", flush=True)
    return status


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--ranks", default="2,3,4")
    ap.add_argument("--transports", default="shm,tcp")
    ap.add_argument("--patterns", default=",".join(PATTERNS))
    ap.add_argument("--senders", default="1,4,16,64")
    ap.add_argument("--sizes", default="64,4096,65536,1048576")
    ap.add_argument("--window", type=int, default=64 << 10, help="per-GP credit window (bytes)")
    ap.add_argument("--timeout", type=float, default=60.0, help="seconds per case")
    ap.add_argument("--memory", action="store_true", help="run the memory check instead of the matrix")
    ap.add_argument("--memory-count", type=int, default=2000, help="messages per GP at 1x")
    args = ap.parse_args()
    return memory(args) if args.memory else matrix(args)


if __name__ == "__main__":
    sys.exit(main())
