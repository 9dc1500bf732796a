"""Liveness at scale (issue 31 item 4): heartbeats per rank, and how a dead or
frozen rank ends a large oversubscribed job.

Not a test: it measures and prints.  Run from the repository root::

    nice -n 10 .venv/bin/python benchmarks/liveness_scale.py -n 16,32 --signals KILL,STOP [--timeout 4]

For each rank count and signal: ``aiopdbp launch -n N tests/mpi_scripts/watch_job.py``
(every rank's ``host_timeout`` is ``--timeout``); once every rank said
``ready``, each rank counts its heartbeats for ``--beats`` s (``beats`` lines);
then rank ``N // 2 + 1`` gets the signal.  Figures per run:

* ``beats/s``: heartbeat messages a rank sent per second (median and max over
  the ranks);
* ``end_s``: from the signal to the launcher's exit (every rank gone);
* ``naming``: how many ranks printed ``LOST <victim>`` (learned of the loss
  through ``node.host_lost()``), and whether the launcher's or a rank's
  abort line names the victim.

``--json PATH`` keeps every run's record.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
SCRIPT = ROOT / "tests" / "mpi_scripts" / "watch_job.py"
_LAUNCHER_VARS = ("PMI_FD", "PMI_RANK", "PMI_SIZE", "PMI_PORT", "MPI_LOCALNRANKS", "MPI_LOCALRANKID")


class Job:
    """``aiopdbp launch`` in its own session; its output lines as they come."""

    def __init__(self, n: int, timeout: float, beats: float) -> None:
        env = {k: v for k, v in os.environ.items() if k not in _LAUNCHER_VARS}
        env["PYTHONUNBUFFERED"] = "1"
        self.proc = subprocess.Popen([sys.executable, "-m", "aiopdbp", "launch", "-n", str(n), str(SCRIPT),
                                      str(timeout), str(beats)], stdout=subprocess.PIPE,
                                     stderr=subprocess.STDOUT, text=True, env=env, cwd=ROOT,
                                     start_new_session=True)
        self.lines: list[str] = []
        self.ended = 0.0
        self._t = threading.Thread(target=self._read, daemon=True)
        self._t.start()

    def _read(self) -> None:
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            self.lines.append(line.rstrip("\n"))

    def wait_lines(self, pattern: str, count: int, timeout: float) -> list[str]:
        rx = re.compile(pattern)
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            found = [line for line in list(self.lines) if rx.search(line)]
            if len(found) >= count:
                return found
            if self.proc.poll() is not None:
                break
            time.sleep(0.01)
        self.kill()
        raise RuntimeError(f"no {count} lines like {pattern!r}:\n" + "\n".join(self.lines[-60:]))

    def finish(self, timeout: float) -> int:
        try:
            rc = self.proc.wait(timeout)
        except subprocess.TimeoutExpired:
            self.kill()
            return -1
        self.ended = time.monotonic()
        self._t.join(5)
        return rc

    def kill(self) -> None:
        try:
            os.killpg(self.proc.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        self.proc.wait(10)


def _ranked(lines: list[str]) -> list[tuple[int, str]]:
    out = []
    for line in lines:
        m = re.match(r"^\[(\d+)\] (.*)$", line)
        if m:
            out.append((int(m.group(1)), m.group(2)))
    return out


def one(n: int, sig: signal.Signals, timeout: float, beats: float) -> dict[str, Any]:
    job = Job(n, timeout, beats)
    victim = n // 2 + 1
    try:
        job.wait_lines(r"^\[\d+\] ready \d+$", n, 300)
        pids = {r: int(text.split()[1]) for r, text in _ranked(job.lines) if text.startswith("ready ")}
        beat_lines = [(r, text) for r, text in _ranked(job.wait_lines(r"^\[\d+\] beats ", n, 120 + beats))]
        t0 = time.monotonic()
        os.kill(pids[victim], sig)
        rc = job.finish(10 * timeout + 60)
    finally:
        for pid in locals().get("pids", {}).values():
            for s in (signal.SIGKILL,):
                try:
                    os.kill(pid, s)
                except ProcessLookupError:
                    pass
        job.kill()
    rates = sorted(int(t.split()[1]) / float(t.split()[2]) for _, t in beat_lines)
    ranked = _ranked(job.lines)
    named = sorted({r for r, t in ranked if t.startswith(f"LOST {victim} ")})
    wrong = sorted({r for r, t in ranked if t.startswith("LOST ") and not t.startswith(f"LOST {victim} ")})
    first = next((line for line in job.lines if line.startswith("aiopdbp launch:")), "")
    aborts = [t for _, t in ranked if t.startswith("aiopdbp: rank ") and f"rank {victim} " in t]
    return {"n": n, "signal": sig.name, "timeout": timeout, "victim": victim, "rc": rc,
            "end_s": (job.ended - t0) if rc != -1 else None,
            "beats_per_s_median": rates[len(rates) // 2], "beats_per_s_max": rates[-1],
            "ranks_naming_victim": len(named), "ranks_naming_other": wrong,
            "launcher_line": first, "abort_lines_naming_victim": len(aborts),
            "tail": job.lines[-8:], "lines": job.lines}


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("-n", default="16,32", help="rank counts, comma-separated")
    p.add_argument("--signals", default="KILL,STOP")
    p.add_argument("--timeout", type=float, default=4.0, help="host_timeout of every rank (s)")
    p.add_argument("--beats", type=float, default=3.0, help="seconds over which heartbeats are counted")
    p.add_argument("--repeat", type=int, default=1)
    p.add_argument("--json", type=Path)
    args = p.parse_args()
    rows = []
    print(f"# {time.strftime('%H:%M:%S', time.gmtime())} UTC, {os.getloadavg()[0]:.1f} load")
    print("| ranks | signal | heartbeats/rank/s (median, max) | signal -> job end (s) | "
          "ranks that named it | rc | launcher's first line |")
    print("|---:|---|---|---:|---:|---:|---|")
    for _ in range(args.repeat):
        for n in (int(x) for x in args.n.split(",")):
            for name in args.signals.split(","):
                row = one(n, signal.Signals[f"SIG{name}"], args.timeout, args.beats)
                row["load"] = os.getloadavg()[0]
                rows.append(row)
                end = f"{row['end_s']:.2f}" if row["end_s"] is not None else "did not end"
                print(f"| {n} | {name} | {row['beats_per_s_median']:.1f}, {row['beats_per_s_max']:.1f} | {end} | "
                      f"{row['ranks_naming_victim']} of {n - 1} | {row['rc']} | {row['launcher_line'][:90]} |",
                      flush=True)
    if args.json:
        args.json.write_text(json.dumps(rows, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
