"""The command line starts light: ``aiopdbp launch`` loads neither numpy,
asyncio nor the runtime in the launcher's own process, and a Ctrl-C while it
starts the job is one line and exit code 130, never a traceback."""

from __future__ import annotations

import subprocess
import sys
import textwrap

import pytest

from tests.mpirun import REPO_ROOT

pytestmark = pytest.mark.timeout(60)


def _python(code: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-c", textwrap.dedent(code)], capture_output=True, text=True,
                          timeout=50, cwd=str(REPO_ROOT))


def test_the_command_line_module_loads_no_runtime_numpy_or_asyncio() -> None:
    proc = _python("""
        import sys
        import aiopdbp.cli
        heavy = ("numpy", "asyncio", "aiopdbp.runtime", "aiopdbp.routing", "aiopdbp.transport", "mpi4py")
        print(sorted(m for m in sys.modules if m.split(".")[0] in heavy or m.startswith(heavy)))
    """)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip() == "[]", proc.stdout


def test_ctrl_c_while_launch_starts_is_one_line_and_130() -> None:
    # SIGINT arrives while the command still checks what it will launch,
    # before the launcher took the signal over.
    proc = _python("""
        import os, signal, sys, time
        import aiopdbp.cli as cli

        def interrupted(argv):
            os.kill(os.getpid(), signal.SIGINT)
            time.sleep(5)
            return None

        cli._unrunnable = interrupted
        # as at a terminal: a test runner's process may have left SIGINT ignored
        signal.signal(signal.SIGINT, signal.default_int_handler)
        sys.exit(cli.main(["launch", "-n", "2", "prog.py"]))
    """)
    assert proc.returncode == 130, proc.stderr
    assert "Traceback" not in proc.stderr, proc.stderr
    assert proc.stderr.splitlines() == ["aiopdbp launch: interrupted while starting the job"], proc.stderr
    assert proc.stdout == ""
