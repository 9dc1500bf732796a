"""One benchmark job under MPI: every case, every implementation, interleaved.

Theory of operation.  All ranks run the same plan (:func:`aiopdbp.bench.plan.cases`)
in the same order.  Each run is: ``gc.collect()``; a barrier on the harness's
own communicator; the implementation's driver (raw mpi4py blocks in MPI; the
floor runs in its own event loop; aiopdbp runs in the node's loop, see
:class:`~aiopdbp.bench.aio.AioSide`); ``allgather`` of every rank's
:class:`~aiopdbp.bench.workload.Measure`.  Each implementation uses its own
duplicated communicator, so no message of one can match a receive of another.

A wrong byte (or a missing unit) does not raise where it is found: the run
completes, the gathered errors reach every rank, and every rank raises
:class:`VerificationError` at the same point, closes its node and exits 1.
Any other exception on one rank prints its traceback and aborts the job
(``MPI_Abort``), so no rank is left waiting.
"""

from __future__ import annotations

import asyncio
import cProfile
import gc
import io
import os
import pstats
import socket
import sys
import time
import traceback
from pathlib import Path
from typing import Any

from aiopdbp.bench import raw
from aiopdbp.bench.aio import AioSide, loop_factory
from aiopdbp.bench.floor import Floor, run_bandwidth, run_flows
from aiopdbp.bench.plan import Case, Options, cases, impls_for
from aiopdbp.bench.report import Progress, collect_meta, write_outputs
from aiopdbp.bench.workload import Checker, Measure, Ring, flows

__all__ = ["VerificationError", "abort_job", "run_job"]


class VerificationError(Exception):
    """A receiver got a wrong, missing or extra unit (the run is void)."""


class Job:
    """This rank's part of one job (see the module doc)."""

    def __init__(self, opts: Options) -> None:
        from aiopdbp.transport.mpi import load_mpi

        MPI = load_mpi()
        world = MPI.COMM_WORLD
        self.opts = opts
        self.rank, self.size = world.Get_rank(), world.Get_size()
        # Collective, same order on every rank; aiopdbp's node Dup()s its own later.
        self.ctl = world.Dup()
        self.raw_comm = world.Dup()
        self.floor_comm = {False: world.Dup(), True: world.Dup()}
        self.aio = AioSide(self.rank, self.size, opts.gps_per_rank, opts.timeout, opts.uvloop)
        self.floor_runner = asyncio.Runner(loop_factory=loop_factory(opts.uvloop))
        self._ring: Ring | None = None
        self._faulted: set[str] = set()
        self.profiler = cProfile.Profile() if opts.profile else None
        self.runs: list[dict[str, Any]] = []
        self.hosts: list[str] = self.ctl.allgather(socket.gethostname())

    def ring(self, case: Case) -> Ring:
        """The ring of ``case``'s unit size (one at a time: they can be 64 MiB)."""
        r = self._ring
        if r is None or r.size != case.size or r.window != case.window:
            self._ring = None
            r = self._ring = Ring(case.size, case.window, self.opts.seed)
        return r

    # ------------------------------------------------------------------ one run
    def run_one(self, case: Case, impl: str) -> list[Measure]:
        """One run of ``impl`` on ``case``; every rank's measure (same list everywhere)."""
        ring = self.ring(case)
        send_ring = ring
        if self.opts.inject_fault == impl and impl not in self._faulted:
            self._faulted.add(impl)
            send_ring = ring.corrupted()
        checker = Checker(ring, impl, self.rank)
        fl = flows(case.test, self.size, self.opts.gps_per_rank)
        gc.collect()
        self.ctl.Barrier()
        prof = self.profiler if impl in self.opts.profile_impls else None
        if prof is not None:
            prof.enable()
        try:
            m = self._dispatch(case, impl, fl, ring, send_ring, checker)
        finally:
            if prof is not None:
                prof.disable()
        ms: list[Measure] = self.ctl.allgather(m)
        errors = [e for x in ms for e in x.errors]
        if errors:
            raise VerificationError(f"{case.key}: " + "; ".join(errors[:5]))
        return ms

    def _dispatch(self, case: Case, impl: str, fl: Any, ring: Ring, send_ring: Ring,
                  checker: Checker) -> Measure:
        t, u = case.test, case.units
        if impl == "raw":
            if t == "bw":
                return raw.bandwidth(self.raw_comm, ring, u, 1, send_ring, checker)
            return raw.flows(self.raw_comm, fl, ring, u, send_ring, checker)
        if impl == "alltoall":
            return raw.alltoall(self.raw_comm, ring, u * self.opts.gps_per_rank, send_ring, checker)
        if impl in ("floor", "floor64k"):
            return self.floor_runner.run(self._floor(case, impl == "floor64k", fl, ring, send_ring,
                                                     checker))
        aio = self.aio
        if t == "bw":
            return aio.measure(lambda: aio.bandwidth(ring, u, 1, send_ring, checker))
        return aio.measure(lambda: aio.flows(fl, ring, u, send_ring, checker,
                                             stream=impl == "aiopdbp-stream",
                                             read=self.opts.stream_recv == "read"))

    async def _floor(self, case: Case, coalesce: bool, fl: Any, ring: Ring, send_ring: Ring,
                     checker: Checker) -> Measure:
        f = Floor(self.floor_comm[coalesce], coalesce=coalesce, max_inflight=case.window)
        await f.start()
        try:
            async with asyncio.timeout(self.opts.timeout):
                if case.test == "bw":
                    return await run_bandwidth(f, ring, case.units, 1, send_ring, checker)
                return await run_flows(f, fl, ring, case.units, send_ring, checker)
        finally:
            await f.aclose()

    # ---------------------------------------------------------------- the plan
    def run(self) -> None:
        """Every case: warm-ups, then ``repeat`` interleaved rounds of its impls."""
        opts = self.opts
        plan = [(c, impls_for(c.test, opts.impls)) for c in cases(opts)]
        total = sum(len(im) * (opts.warmup + opts.repeat) for _, im in plan)
        bar = Progress(total, enabled=self.rank == 0)
        try:
            for case, impls in plan:
                for rep in range(-opts.warmup, opts.repeat):
                    k = rep % len(impls)
                    for impl in impls[k:] + impls[:k]:
                        bar.step(f"n={self.size} {case.key}",
                                 f"{impl}{' (warm-up)' if rep < 0 else ''}")
                        ms = self.run_one(case, impl)
                        if rep >= 0 and self.rank == 0:
                            self.runs.append(_run_record(case, impl, rep, ms, self.size,
                                                         opts.gps_per_rank))
        finally:
            bar.close()

    def close(self) -> None:
        """Close the node (collective) and the floor's loop; free the communicators."""
        try:
            self.aio.close()
        finally:
            self.floor_runner.close()
            for c in (self.ctl, self.raw_comm, *self.floor_comm.values()):
                c.Free()

    def dump_profile(self, out: Path) -> None:
        """Write this rank's profile (``.pstats`` and the top 40 as text)."""
        if self.profiler is None:
            return
        out.mkdir(parents=True, exist_ok=True)
        path = out / f"profile-rank{self.rank}.pstats"
        self.profiler.dump_stats(str(path))
        text = io.StringIO()
        pstats.Stats(self.profiler, stream=text).sort_stats("tottime").print_stats(40)
        (out / f"profile-rank{self.rank}.txt").write_text(text.getvalue(), encoding="utf-8")


def _run_record(case: Case, impl: str, rep: int, ms: list[Measure], n: int, k: int) -> dict[str, Any]:
    """One measured run as stored in the JSON (value in the test's unit)."""
    el = max(m.elapsed for m in ms)
    recvd = sum(m.recvd for m in ms)
    if case.test == "bw":
        value = ms[1].recvd * case.size / ms[0].elapsed / 1e6
    elif case.test == "rate":
        value = recvd / el
    else:
        hosts = n if case.test == "NtoN" else 1
        value = recvd * case.size / hosts / el / 1e6

    def cpu(pick: Any) -> float | None:
        vals = [m.cpu / u * 1e6 for m in ms if (u := pick(m))]
        return max(vals) if vals else None

    return {
        "test": case.test, "impl": impl, "size": case.size, "ranks": n, "gps_per_rank": k,
        "rep": rep, "value": value, "elapsed_s": el, "units_per_flow": case.units,
        "window": case.window, "units_received": recvd,
        "cpu_tx_us": cpu(lambda m: m.sent if m.sent and not m.recvd else 0),
        "cpu_rx_us": cpu(lambda m: m.recvd if m.recvd and not m.sent else 0),
        "cpu_txrx_us": cpu(lambda m: m.sent + m.recvd if m.sent and m.recvd else 0),
        "per_rank": [{"elapsed_s": m.elapsed, "cpu_s": m.cpu, "sent": m.sent, "recvd": m.recvd}
                     for m in ms],
    }


def run_job(opts: Options) -> int:
    """Run the whole job on this rank; the exit code (0 ok, 1 verification failed)."""
    started = time.time()
    try:
        job = Job(opts)
    except BaseException:
        abort_job()
        raise
    out = Path(job.ctl.bcast(opts.out or time.strftime("aiopdbp-bench-%Y%m%d-%H%M%S"), root=0))
    failed: VerificationError | None = None
    try:
        job.aio.open()
        try:
            job.run()
        except VerificationError as exc:
            failed = exc
        finally:
            job.dump_profile(out)
            job.close()
    except BaseException:
        abort_job()
        raise
    if job.rank != 0:
        return 1 if failed else 0
    if failed is not None:
        print(f"aiopdbp bench: VERIFICATION FAILED: {failed}", file=sys.stderr, flush=True)
        print("aiopdbp bench: no results written (a run that moved wrong data has no figure)",
              file=sys.stderr, flush=True)
        return 1
    meta = collect_meta(opts, job.size, job.hosts, started)
    write_outputs(out, meta, job.runs, plots=opts.plots, profile=opts.profile)
    return 0


def abort_job() -> None:
    """Print the traceback and abort the whole job (never leave peers waiting)."""
    rank = os.environ.get("PMI_RANK", os.environ.get("OMPI_COMM_WORLD_RANK", "?"))
    print(f"aiopdbp bench: rank {rank} failed:\n{traceback.format_exc()}", file=sys.stderr, flush=True)
    try:
        from mpi4py import MPI

        MPI.COMM_WORLD.Abort(1)
    except Exception:
        pass
