"""Fault figures: how fast a job ends, and what a soak loses.

Not a test: it measures, repeats and prints medians (the machine is shared
and noisy).  Run from the repository root::

    .venv/bin/python benchmarks/faults.py [--repeat 5] [--soak-cdus 1000000] [--json PATH]

Figures (each the median of ``--repeat`` runs, min-max beside it):

* **SIGINT → job end**: ``aiopdbp launch -n 2`` of a job whose ranks wait in
  ``recv()``; SIGINT to the launcher (what Ctrl-C does); time until the
  launcher has exited, i.e. every rank and mpiexec are gone.
* **SIGTERM to every rank → job end**: the same job under a plain
  ``mpiexec``, SIGTERM to each rank (what Slurm's ``srun`` does).
* **raise → job end**: rank 1 raises inside its node while rank 0 waits;
  from the raise (a timestamp rank 1 prints) to the launcher's exit.
* **GP raise → job end, 3 ranks** (``gp_failure.py``, issue 19): rank 1's GP
  raises KeyError while rank 0 sends to it (``consumer``), is blocked in
  ``send`` to it (``blocked``), streams both ways with it (``bidi``) or
  waits in a Barrier with it (``barrier``); rank 2 is a bystander.  From the
  raise to the launcher's exit.  ``--only gp-failure`` measures just these.
* **cancelled remote stream → receiver error**: rank 0 cancels a 1 GiB
  ``send_stream`` once rank 1 has read 50 segments; from the cancel to the
  receiver's ``StreamError``, and the segments that still arrived.
* **soak**: ``benchmarks/soak.py`` on 3 ranks (see its docstring): sent,
  received, lost, duplicated, peak RSS per rank.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import signal
import statistics
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
SCRIPTS = ROOT / "tests" / "mpi_scripts"
PY = sys.executable


def _env() -> dict[str, str]:
    env = {k: v for k, v in os.environ.items()
           if k not in ("PMI_FD", "PMI_RANK", "PMI_SIZE", "PMI_PORT", "MPI_LOCALNRANKS", "MPI_LOCALRANKID")}
    env["PYTHONPATH"] = str(ROOT)
    env["PYTHONUNBUFFERED"] = "1"
    return env


class Job:
    """A subprocess whose output lines are collected as they come."""

    def __init__(self, cmd: list[str]) -> None:
        self.proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                                     env=_env(), cwd=ROOT, start_new_session=True)
        self.lines: list[str] = []
        self.ended = 0.0
        self._t = threading.Thread(target=self._read, daemon=True)
        self._t.start()

    def _read(self) -> None:
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            self.lines.append(line.rstrip("\n"))

    def wait_lines(self, pattern: str, count: int, timeout: float = 60) -> list[str]:
        rx = re.compile(pattern)
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            found = [line for line in list(self.lines) if rx.search(line)]
            if len(found) >= count:
                return found
            time.sleep(0.005)
        raise RuntimeError(f"no {count} lines like {pattern!r}:\n" + "\n".join(self.lines))

    def finish(self, timeout: float = 120) -> int:
        rc = self.proc.wait(timeout)
        self.ended = time.time()
        self._t.join(5)
        return rc


def _launch(*argv: str) -> Job:
    return Job([PY, "-m", "aiopdbp", "launch", *argv])


def signal_to_end(sig: int, every_rank: bool) -> float:
    if every_rank:
        from aiopdbp.launch.launcher import find_mpiexec
        job = Job([find_mpiexec(), "-n", "2", PY, str(SCRIPTS / "stop_job.py")])
    else:
        job = _launch("-n", "2", str(SCRIPTS / "stop_job.py"))
    pids = [int(line.split()[-1]) for line in job.wait_lines(r"ready \d+$", 2)]
    t0 = time.time()
    for pid in (pids if every_rank else [job.proc.pid]):
        os.kill(pid, sig)
    rc = job.finish()
    expect = 128 + sig
    if rc != expect:
        raise RuntimeError(f"exit status {rc}, expected {expect}:\n" + "\n".join(job.lines))
    return job.ended - t0


def raise_to_end(mode: str, script: str = "fail_job.py", n: int = 2) -> float:
    job = _launch("-n", str(n), str(SCRIPTS / script), mode)
    rc = job.finish()
    stamp = [line for line in job.lines if "raising at" in line]
    if rc == 0 or not stamp:
        raise RuntimeError(f"exit status {rc}:\n" + "\n".join(job.lines))
    return job.ended - float(stamp[0].split()[-1])


def cancel_to_error() -> tuple[float, int]:
    job = _launch("-n", "2", str(ROOT / "benchmarks" / "cancel_stream.py"), "50")
    rc = job.finish()
    cancel = [line for line in job.lines if "CANCEL" in line]
    error = [line for line in job.lines if "ERROR" in line]
    if rc != 0 or not cancel or not error:
        raise RuntimeError(f"exit status {rc}:\n" + "\n".join(job.lines))
    t_cancel = float(cancel[0].split()[-1])
    parts = error[0].split()
    t_error = float(parts[2])
    after = int(re.search(r"(\d+) after the cancel", error[0]).group(1))  # type: ignore[union-attr]
    return t_error - t_cancel, after


def soak(cdus: int) -> list[dict[str, Any]]:
    job = _launch("-n", "3", str(ROOT / "benchmarks" / "soak.py"), "--cdus", str(cdus))
    rc = job.finish(timeout=1800)
    rows = [json.loads(line.split("SOAK ", 1)[1]) for line in job.lines if "SOAK " in line]
    if rc != 0 or len(rows) != 3:
        raise RuntimeError(f"exit status {rc}:\n" + "\n".join(job.lines[-40:]))
    return sorted(rows, key=lambda r: r["rank"])


def _stat(values: list[float]) -> dict[str, float]:
    return {"median": statistics.median(values), "min": min(values), "max": max(values), "n": len(values)}


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--repeat", type=int, default=5)
    p.add_argument("--soak-cdus", type=int, default=1_000_000)
    p.add_argument("--json", type=Path, default=ROOT / "benchmarks" / "results" / "faults.json")
    p.add_argument("--only", choices=("gp-failure",), help="measure only these figures (no JSON written)")
    args = p.parse_args()
    out: dict[str, Any] = {}
    r = args.repeat
    gp_modes = ("consumer", "blocked", "bidi", "barrier")
    if args.only == "gp-failure":
        print("| figure | median | min | max |\n|---|---:|---:|---:|")
        for mode in gp_modes:
            v = _stat([raise_to_end(mode, "gp_failure.py", 3) for _ in range(r)])
            print(f"| gp_failure_{mode}_s | {v['median']:.3f} | {v['min']:.3f} | {v['max']:.3f} |")
        return 0
    out["sigint_launcher_s"] = _stat([signal_to_end(signal.SIGINT, False) for _ in range(r)])
    out["sigterm_every_rank_s"] = _stat([signal_to_end(signal.SIGTERM, True) for _ in range(r)])
    out["raise_s"] = _stat([raise_to_end("raise") for _ in range(r)])
    out["raise_midstream_s"] = _stat([raise_to_end("midstream") for _ in range(r)])
    for mode in gp_modes:
        out[f"gp_failure_{mode}_s"] = _stat([raise_to_end(mode, "gp_failure.py", 3) for _ in range(r)])
    cancels = [cancel_to_error() for _ in range(r)]
    out["cancel_to_error_s"] = _stat([c[0] for c in cancels])
    out["segments_after_cancel"] = _stat([float(c[1]) for c in cancels])
    out["soak"] = soak(args.soak_cdus)
    args.json.parent.mkdir(parents=True, exist_ok=True)
    args.json.write_text(json.dumps(out, indent=2) + "\n")
    print("| figure | median | min | max |\n|---|---:|---:|---:|")
    for key, v in out.items():
        if isinstance(v, dict):
            print(f"| {key} | {v['median']:.3f} | {v['min']:.3f} | {v['max']:.3f} |")
    print("\n| rank | CDUs sent | received | cancel attempts | msgs cancelled | streams cancelled | "
          "streams aborted at receiver | lost | duplicated | phantom | corrupt | peak RSS MiB | s |")
    print("|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
    for row in out["soak"]:
        print(f"| {row['rank']} | {row['cdus_sent']} | {row['cdus_received']} | {row['cancel_attempts']} | "
              f"{row['msgs_cancelled']} | "
              f"{row['streams_cancelled']} | {row['streams_aborted']} | {row['lost']} | {row['duplicated']} | "
              f"{row['phantom']} | {row['corrupt']} | {row['peak_rss_kib'] / 1024:.0f} | {row['seconds']} |")
    bad = sum(row["lost"] + row["duplicated"] + row["phantom"] + row["corrupt"] for row in out["soak"])
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
