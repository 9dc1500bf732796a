"""A peer that breaks the protocol fails the job instead of hanging it (issue 28).

Each test runs ``tests/mpi_scripts/hostile.py`` under ``aiopdbp launch``:
rank 1 posts one bad frame to rank 0, then a valid message, and leaves its
GP (a table request to rank 0); rank 0 receives until the job stops.  The
job must end (a hang is a failure after ``_BOUND`` seconds) with rank 0
naming rank 1 and its ``ProtocolError`` first.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys

import pytest

from tests.mpirun import REPO_ROOT, SCRIPTS_DIR, rank_lines, requires_mpi

pytestmark = [pytest.mark.mpi, requires_mpi, pytest.mark.timeout(120)]

HOSTILE = SCRIPTS_DIR / "hostile.py"
#: seconds a job may take, start to end, on a loaded 2-core machine (about 3 s alone)
_BOUND = 45
_LAUNCHER_VARS = ("PMI_FD", "PMI_RANK", "PMI_SIZE", "PMI_PORT", "MPI_LOCALNRANKS", "MPI_LOCALRANKID")


#: mode -> (exit status, output) of its job: the tests that read the same job run it once
_RUNS: dict[str, tuple[int, str]] = {}


def _run(mode: str) -> tuple[int, str]:
    if mode not in _RUNS:
        _RUNS[mode] = _launch(mode)
    return _RUNS[mode]


def _launch(mode: str) -> tuple[int, str]:
    env = {k: v for k, v in os.environ.items() if k not in _LAUNCHER_VARS}
    env["PYTHONPATH"] = os.pathsep.join([str(REPO_ROOT), *filter(None, [env.get("PYTHONPATH")])])
    env["PYTHONUNBUFFERED"] = "1"
    proc = subprocess.Popen([sys.executable, "-m", "aiopdbp", "launch", "-n", "2", str(HOSTILE), mode],
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=env,
                            cwd=str(REPO_ROOT), start_new_session=True)
    try:
        out, _ = proc.communicate(timeout=_BOUND)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        out, _ = proc.communicate()
        pytest.fail(f"the job hung on a bad frame ({mode}) for {_BOUND} s:\n{out}", pytrace=False)
    return proc.returncode, out


@pytest.mark.parametrize(("mode", "said"), [
    ("version", "malformed data message from host 1: unsupported protocol version 2"),
    ("length", "malformed data message from host 1: frame holds"),
    ("shorts", "malformed data message from host 1: truncated short record"),
    ("dims", "malformed data message from host 1: bad ndarray shape (4611686018427387904, 0)"),
    ("split", "malformed data message from host 1: split frame header announces 69632 payload bytes"),
    ("pickle", "malformed data message from host 1: pickle payload refused"),
    ("random", "malformed control message from host 1: "),
    ("bye", "malformed data message from host 1: data message 1 after a BYE that said 0"),
    ("memory", "malformed data message from host 1: no memory for the 1073737728-byte payload"),
])
def test_bad_frame_fails_the_job_naming_the_sender(mode: str, said: str) -> None:
    rc, out = _run(mode)
    assert rc == 1, out
    # the blamed rank answers with a line of its own (below), in its own output stream
    reports = [(r, line) for r, line in rank_lines(out) if line.startswith("aiopdbp") and r != 1]
    assert reports and reports[0][0] == 0, out
    assert reports[0][1].startswith(f"aiopdbp: rank 1 failed: ProtocolError: {said}"), out
    for noise in ("Traceback", "deliver callback raised", "Task was destroyed", "never retrieved"):
        assert noise not in out, out


@pytest.mark.parametrize(("mode", "said"), [
    ("version", "malformed data message from host 1: unsupported protocol version 2"),
    ("random", "malformed control message from host 1: "),
])
def test_blamed_rank_says_which_host_failed_it_and_why(mode: str, said: str) -> None:
    """The rank that sent the bad frame has no traceback of its own: it
    prints one line naming the host that failed it and the protocol error."""
    rc, out = _run(mode)
    assert rc == 1, out
    lines = [line for r, line in rank_lines(out) if r == 1 and line.startswith("aiopdbp")]
    assert len(lines) == 1, out
    assert lines[0].startswith("aiopdbp: rank 1 was failed by host 0 for a protocol error: "
                               f"ProtocolError: {said}"), out
