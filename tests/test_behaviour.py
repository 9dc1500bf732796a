"""The same behaviour scenarios over the in-process fabric and over MPI.

Every scenario of ``tests/scenarios.py`` becomes ``test_<scenario>`` with one
parametrization per transport:

* ``inproc-1``, ``inproc-2``, ``inproc-4`` -- 1, 2 or 4 hosts in the test's
  event loop (``open_cluster``), every host running the scenario concurrently;
* ``mpi-2-shm``, ``mpi-2-tcp``, ``mpi-4-shm`` -- one host per MPI rank under
  ``mpiexec`` (MPICH's shared-memory path, or its network path forced with
  ``UCX_TLS=tcp,self MPIR_CVAR_NOLOCAL=1``).  Marked ``mpi``; skipped when
  mpiexec or mpi4py is missing.  Each configuration is launched **once** per
  session (``tests/mpi_scripts/run_scenarios.py`` with every scenario name,
  run on the first test that needs it); each test then checks its own
  ``SCENARIO <name> rank <r> OK`` line on every rank.
"""

from __future__ import annotations

import asyncio
import importlib.util
import re
import subprocess
import threading
from typing import Any

import pytest

from tests import scenarios as _scenarios
from tests.mpirun import SCRIPTS_DIR, requires_mpi, run_mpi

SCENARIOS = _scenarios.SCENARIOS
run_inproc = _scenarios.run_inproc

INPROC = ["inproc-1", "inproc-2", "inproc-4"]
#: transport id -> (ranks, tcp)
MPI_CONFIGS: dict[str, tuple[int, bool]] = {
    "mpi-2-shm": (2, False),
    "mpi-2-tcp": (2, True),
    "mpi-4-shm": (4, False),
}
TRANSPORTS = INPROC + list(MPI_CONFIGS)

MPI_JOB_TIMEOUT = 300.0      # one launch runs every scenario
MPI_TEST_TIMEOUT = MPI_JOB_TIMEOUT + 60


def _params(name: str) -> list[Any]:
    sc = SCENARIOS[name]
    out = []
    for t in TRANSPORTS:
        if t in MPI_CONFIGS:
            marks: list[Any] = [pytest.mark.mpi, requires_mpi, pytest.mark.timeout(MPI_TEST_TIMEOUT)]
        else:
            marks = [pytest.mark.timeout(sc.timeout + 40)]
        for mod in sc.requires:
            marks.append(pytest.mark.skipif(importlib.util.find_spec(mod) is None, reason=f"needs {mod}"))
        out.append(pytest.param(t, id=t, marks=marks))
    return out


# ------------------------------------------------------------------ MPI runs
_LINE = re.compile(r"SCENARIO (\S+) rank (\d+) (OK|FAIL)\b ?([^\n]*?)(?=SCENARIO |\n|$)")


class MpiRun:
    """The outcome of one launch of run_scenarios.py."""

    def __init__(self, transport: str, proc: subprocess.CompletedProcess[str] | None, error: str = "") -> None:
        self.transport = transport
        self.proc = proc
        self.error = error
        self.results: dict[str, dict[int, tuple[str, str]]] = {}
        if proc is not None:
            for name, rank, status, detail in _LINE.findall(proc.stdout):
                self.results.setdefault(name, {})[int(rank)] = (status, detail)

    def tail(self, n: int = 4000) -> str:
        if self.proc is None:
            return self.error
        return (f"exit code {self.proc.returncode}\n--- stderr (tail) ---\n{self.proc.stderr[-n:]}"
                f"\n--- stdout (tail) ---\n{self.proc.stdout[-n // 2:]}")


class MpiRuns:
    """Session cache: launch each MPI configuration once, on first use."""

    def __init__(self) -> None:
        self._runs: dict[str, MpiRun] = {}
        self._lock = threading.Lock()

    def get(self, transport: str) -> MpiRun:
        with self._lock:
            run = self._runs.get(transport)
            if run is None:
                run = self._runs[transport] = self._launch(transport)
            return run

    @staticmethod
    def _launch(transport: str) -> MpiRun:
        n, tcp = MPI_CONFIGS[transport]
        try:
            proc = run_mpi(SCRIPTS_DIR / "run_scenarios.py", n, tcp=tcp, args=list(SCENARIOS),
                           timeout=MPI_JOB_TIMEOUT)
        except pytest.fail.Exception as exc:   # the job hung and was killed: remember that
            return MpiRun(transport, None, str(exc))
        return MpiRun(transport, proc)


@pytest.fixture(scope="session")
def behaviour_mpi_runs() -> MpiRuns:
    return MpiRuns()


def _check_mpi(name: str, transport: str, runs: MpiRuns) -> None:
    run = runs.get(transport)
    n = MPI_CONFIGS[transport][0]
    got = run.results.get(name, {})
    missing = [r for r in range(n) if r not in got]
    if missing:
        pytest.fail(f"{transport}: no result for {name} from rank(s) {missing} (job aborted or hung?)\n"
                    f"{run.tail()}", pytrace=False)
    bad = {r: d for r, (status, d) in sorted(got.items()) if status != "OK"}
    if bad:
        lines = "\n".join(f"  rank {r}: {d}" for r, d in bad.items())
        pytest.fail(f"{transport}: {name} failed\n{lines}\n{run.tail(2500)}", pytrace=False)


# --------------------------------------------------------------- the tests
def _make_test(name: str) -> Any:
    @pytest.mark.parametrize("transport", _params(name))
    async def test(transport: str, request: pytest.FixtureRequest) -> None:
        if transport in MPI_CONFIGS:
            runs = request.getfixturevalue("behaviour_mpi_runs")
            # the first test of a configuration waits for the whole MPI job
            await asyncio.to_thread(_check_mpi, name, transport, runs)
        else:
            await run_inproc(name, int(transport.split("-")[1]))

    test.__name__ = test.__qualname__ = f"test_{name}"
    test.__doc__ = SCENARIOS[name].doc
    return test


for _name in SCENARIOS:
    globals()[f"test_{_name}"] = _make_test(_name)
del _name
