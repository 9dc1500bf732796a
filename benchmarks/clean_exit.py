"""Clean exits, repeated: a 3-rank program that passes a Barrier 3 times,
exchanges halos with Neighbours and returns without closing anything
(``tests/mpi_scripts/clean_exit.py``), launched again and again.

Not a test (CI runs it 5 times, ``tests/test_mpi_failures.py``): this runs it
``--repeat`` times (50 by default) and counts the runs that exited non-zero
or printed anything but their ``done`` lines (a warning, a traceback, "Task
exception was never retrieved", "replica diverged").  Run from the
repository root::

    .venv/bin/python benchmarks/clean_exit.py [--repeat 50] [--mode process|register] [-n 3]
"""

from __future__ import annotations

import argparse
import os
import re
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
SCRIPT = ROOT / "tests" / "mpi_scripts" / "clean_exit.py"
DONE = re.compile(r"^\[\d+\] done$")


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--repeat", type=int, default=50)
    p.add_argument("--mode", choices=("process", "register"), default="process")
    p.add_argument("-n", type=int, default=3, help="ranks (default %(default)s)")
    args = p.parse_args()
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PMI_", "MPI_LOCAL"))}
    env["PYTHONPATH"] = str(ROOT)
    bad: list[tuple[int, int, str]] = []
    times = []
    for i in range(args.repeat):
        t0 = time.monotonic()
        proc = subprocess.run([sys.executable, "-m", "aiopdbp", "launch", "-n", str(args.n), str(SCRIPT),
                               args.mode], capture_output=True, text=True, env=env, cwd=ROOT, timeout=120)
        times.append(time.monotonic() - t0)
        out = proc.stdout + proc.stderr
        noise = [line for line in out.splitlines() if line.strip() and not DONE.match(line)]
        dones = sum(1 for line in out.splitlines() if DONE.match(line))
        if proc.returncode != 0 or noise or dones != args.n:
            bad.append((i, proc.returncode, out))
    times.sort()
    print(f"clean_exit: {args.repeat} runs of {args.n} ranks ({args.mode}): {args.repeat - len(bad)} clean, "
          f"{len(bad)} not; run time median {times[len(times) // 2]:.2f} s")
    for i, rc, out in bad[:3]:
        print(f"--- run {i}: exit {rc}\n{out}")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
