"""``aiopdbp launch`` of a script with a syntax error says so once, before
any rank starts -- not once per rank, with the ranks' lines interleaved
(issue 30's newcomer round)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from tests.mpirun import REPO_ROOT

pytestmark = pytest.mark.timeout(60)


def test_a_script_that_does_not_compile_is_reported_once_and_no_rank_starts(tmp_path: Path) -> None:
    prog = tmp_path / "typo.py"
    prog.write_text("import aiopdbp\n\nx = (\n")
    proc = subprocess.run([sys.executable, "-m", "aiopdbp", "launch", "-n", "3", str(prog)],
                          capture_output=True, text=True, timeout=50, cwd=str(REPO_ROOT))
    out = proc.stdout + proc.stderr
    assert proc.returncode == 2, out
    first = out.splitlines()[0]
    assert first.startswith("aiopdbp launch: error: ") and "does not compile" in first, out
    assert "SyntaxError: '(' was never closed" in first and "no rank was started" in first, out
    assert out.count("SyntaxError") == 2 and "[0]" not in out, out   # the line above, python's once
