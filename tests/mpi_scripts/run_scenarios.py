"""SPMD runner of the behaviour scenarios (``tests/scenarios.py``) under mpiexec.

    mpiexec -n 2 python tests/mpi_scripts/run_scenarios.py [--registry MODULE] NAME [NAME ...]

``--registry MODULE`` takes the scenarios from ``MODULE.SCENARIOS`` (a module
of ``tests/`` built on ``scenarios.py``, e.g. ``tests.devicepath_scenarios``)
instead of ``scenarios.SCENARIOS``.  The tests' helpers import as
``tests.X``: :func:`tests.mpirun.run_mpi` puts the repository root on
``PYTHONPATH``.

For each scenario, every rank opens its node with ``aiopdbp.open_node(**options)``
(the MPI transport, since the job has several ranks), runs the scenario,
closes the node and prints exactly one line::

    SCENARIO <name> rank <r> OK <seconds>
    SCENARIO <name> rank <r> FAIL <one-line error>

then goes on with the next scenario; the exit code is 0 if every scenario
was OK on this rank.  Tracebacks go to stderr.

Nothing can hang the job:

* every scenario has its own timeout (inside :func:`scenarios.run_on_node`);
* a rank whose scenario fails tells the others at once (a message on a
  private communicator), so they cancel theirs instead of waiting for their
  timeouts, and all ranks go on with the next scenario;
* a rank that cannot finish a scenario (node close included) within a hard
  limit, or whose peers do not reach the end-of-scenario synchronisation in
  time, prints FAIL and aborts the whole job with ``MPI_Abort``.

Caveat: a scenario whose node close handshake times out can leave messages
in flight that the next scenario's node receives (MPI recycles the freed
communicators' context ids), so put scenarios expected to fail last.

Environment: ``AIOPDBP_SCENARIO_LOG=debug`` configures logging;
``AIOPDBP_SCENARIO_VERBOSE=1`` (see scenarios.py) also dumps node, remote and
transport stats of a failing scenario to stderr.
"""

from __future__ import annotations

import asyncio
import importlib
import importlib.util
import os
import sys
import time
import traceback

# AIOPDBP_SCENARIO_PURE_RANKS=1,3: those ranks run the pure-Python core, the
# others the compiled one where it is built (a job of mixed forms); set before
# aiopdbp is imported, since the choice is made at import
if os.environ.get("PMI_RANK", "?") in os.environ.get("AIOPDBP_SCENARIO_PURE_RANKS", "").split(","):
    os.environ["AIOPDBP_NO_EXTENSIONS"] = "1"

import aiopdbp  # noqa: E402
from aiopdbp import ext  # noqa: E402
from aiopdbp.transport.mpi import load_mpi  # noqa: E402
from aiopdbp.wire import core  # noqa: E402,F401  (the core's form is chosen at its import)

from tests import scenarios  # noqa: E402

#: where the scenarios come from (``--registry``)
REGISTRY = scenarios.SCENARIOS

if os.environ.get("AIOPDBP_SCENARIO_LOG"):
    import logging

    logging.basicConfig(level=os.environ["AIOPDBP_SCENARIO_LOG"].upper(),
                        format=f"%(relativeCreated)8.0f rank{os.environ.get('PMI_RANK', '?')} %(name)s %(message)s")

MPI = load_mpi()
WORLD = MPI.COMM_WORLD
RANK = WORLD.Get_rank()
SIZE = WORLD.Get_size()
#: private communicator: failure notices and the end-of-scenario sync
COMM = WORLD.Dup()
COMM.Set_name("run_scenarios")

#: extra seconds beyond a scenario's own timeout for closing its node
CLOSE_BUDGET = 2 * scenarios.DEFAULT_NODE_OPTIONS["close_timeout"] + 10
#: seconds the ranks may drift apart at the end-of-scenario sync
SYNC_TIMEOUT = 60.0


sys.stdout.write(f"CORE rank {RANK} {ext.core().get('blocks', '?')}\n")
sys.stdout.flush()


def emit(name: str, ok: bool, detail: str) -> None:
    detail = " ".join(detail.split()) or "(no message)"
    # one write per line: mpiexec merges the ranks' output streams
    sys.stdout.write(f"SCENARIO {name} rank {RANK} {'OK' if ok else 'FAIL'} {detail}\n")
    sys.stdout.flush()


def abort(name: str, why: str) -> None:
    emit(name, False, why)
    print(f"rank {RANK}: aborting the job: {why}", file=sys.stderr, flush=True)
    sys.stderr.flush()
    WORLD.Abort(3)
    os._exit(3)


def one_line(exc: BaseException) -> str:
    while isinstance(exc, BaseExceptionGroup) and len(exc.exceptions) == 1:
        exc = exc.exceptions[0]
    return f"{type(exc).__name__}: {exc}"


def _is_handshake_failure(exc: BaseException) -> bool:
    while isinstance(exc, BaseExceptionGroup) and len(exc.exceptions) == 1:
        exc = exc.exceptions[0]
    return isinstance(exc, aiopdbp.HandshakeError)


class Run:
    """One scenario on this rank."""

    def __init__(self, idx: int, name: str) -> None:
        self.idx = idx
        self.name = name
        self.sc = REGISTRY[name]
        self.notice_reqs: list[object] = []
        self.notices_seen: set[int] = set()
        self._buf = bytearray(8)

    async def _scenario(self) -> None:
        # Not ``async with open_node()``: an error leaving that block fails
        # the whole job (aiopdbp.runtime.job), and this runner must go on with the
        # next scenario, so it closes the node itself.
        # The modules a scenario needs (torch: seconds on a loaded machine)
        # are imported before the node opens: imported inside the scenario,
        # one rank's import stalls its loop while its peers wait for its
        # answers under the scenario's short name and reply timeouts.
        for mod in self.sc.requires:
            if importlib.util.find_spec(mod) is not None:
                importlib.import_module(mod)
        node = aiopdbp.open_node(**self.sc.node_options())
        await node.start()
        try:
            if node.size != SIZE:
                raise RuntimeError(f"open_node() gave a node of size {node.size} under {SIZE} ranks "
                                   f"(transport {node.transport!r})")
            await scenarios.run_on_node(self.sc, node, self._report)
        except BaseException:
            if scenarios.VERBOSE:
                print(f"rank {RANK} node at failure: {node.stats()}\n"
                      f"  transport: {node.transport.stats() if node.transport else None}",
                      file=sys.stderr, flush=True)
            await node.aclose(graceful=False)
            raise
        await node.aclose()

    async def _watch(self) -> int:
        """Return the rank of the first peer that reports a failure."""
        status = MPI.Status()
        while True:
            if COMM.Iprobe(source=MPI.ANY_SOURCE, tag=self.idx, status=status):
                src = status.Get_source()
                COMM.Recv([self._buf, MPI.BYTE], source=src, tag=self.idx)
                self.notices_seen.add(src)
                return src
            await asyncio.sleep(0.005)

    def _report(self, exc: BaseException) -> None:
        # At once: a peer that fails in turn may have this run cancelled (and
        # this cause lost) while the scenario's GPs are being freed.
        print(f"rank {RANK}: scenario {self.name!r} failed:", file=sys.stderr)
        traceback.print_exception(exc, file=sys.stderr)
        sys.stderr.flush()

    def _notify(self) -> None:
        for r in range(SIZE):
            if r != RANK:
                self.notice_reqs.append(COMM.Isend([bytes(8), MPI.BYTE], dest=r, tag=self.idx))

    async def run(self) -> bool:
        t0 = time.monotonic()
        task = asyncio.create_task(self._scenario(), name=f"scenario-{self.name}")
        watch = asyncio.create_task(self._watch(), name="failure-watch")
        hard = self.sc.timeout + CLOSE_BUDGET
        done, _ = await asyncio.wait({task, watch}, timeout=hard, return_when=asyncio.FIRST_COMPLETED)
        ok, detail = False, ""
        if task in done:
            watch.cancel()
            exc = task.exception()
            if exc is None:
                ok, detail = True, f"{time.monotonic() - t0:.2f}"
            else:
                traceback.print_exception(exc, file=sys.stderr)
                detail = one_line(exc)
                if _is_handshake_failure(exc):
                    # The node's Idup collectives may be left unmatched: every
                    # later node in this job would pair with the wrong ones.
                    abort(self.name, f"{detail} -- a failed handshake leaves MPI collectives "
                                     "unmatched, so no later scenario of this job can start")
                self._notify()
        elif watch in done:
            peer = watch.result()
            task.cancel()
            finished, _ = await asyncio.wait({task}, timeout=CLOSE_BUDGET)
            if not finished:
                abort(self.name, f"cancelled after rank {peer} failed, but did not stop within {CLOSE_BUDGET} s")
            exc = None if task.cancelled() else task.exception()
            if exc is not None and not isinstance(exc, asyncio.CancelledError):
                traceback.print_exception(exc, file=sys.stderr)
                detail = f"{one_line(exc)} (rank {peer} failed too)"
            else:
                detail = f"cancelled: rank {peer} failed"
        else:
            task.print_stack(file=sys.stderr)
            abort(self.name, f"hard timeout: not finished (node closed) within {hard:.0f} s")
        emit(self.name, ok, detail)
        await self._sync(failed_primary=bool(self.notice_reqs))
        return ok

    async def _sync(self, failed_primary: bool) -> None:
        """End-of-scenario barrier that also collects every failure notice."""
        send = bytearray((1 << RANK if failed_primary else 0).to_bytes(8, "little"))
        recv = bytearray(8)
        req = COMM.Iallreduce([send, MPI.INT64_T], [recv, MPI.INT64_T], op=MPI.BOR)
        deadline = time.monotonic() + SYNC_TIMEOUT
        while not req.Test():
            if time.monotonic() > deadline:
                abort(self.name, f"peers did not finish the scenario within {SYNC_TIMEOUT} s of this rank")
            await asyncio.sleep(0.002)
        mask = int.from_bytes(recv, "little")
        for r in range(SIZE):
            if r != RANK and mask >> r & 1 and r not in self.notices_seen:
                COMM.Recv([self._buf, MPI.BYTE], source=r, tag=self.idx)
        MPI.Request.Waitall(self.notice_reqs)  # type: ignore[arg-type]


async def main(names: list[str]) -> int:
    unknown = [n for n in names if n not in REGISTRY]
    if unknown:
        print(f"unknown scenarios: {unknown}; known: {sorted(REGISTRY)}", file=sys.stderr)
        return 2
    failed = 0
    for idx, name in enumerate(names):
        if not await Run(idx, name).run():
            failed += 1
    return 1 if failed else 0


if __name__ == "__main__":
    args = sys.argv[1:]
    if args[:1] == ["--registry"]:
        REGISTRY = importlib.import_module(args[1]).SCENARIOS
        args = args[2:]
    args = args or list(REGISTRY)
    rc = aiopdbp.run(main(args))
    COMM.Free()
    sys.exit(rc)
