"""``aiopdbp demo`` as a newcomer runs it: it passes and its lines fit a terminal."""

from __future__ import annotations

import subprocess
import sys

import pytest


@pytest.mark.timeout(120)
def test_demo_passes_and_no_line_is_wider_than_100_columns() -> None:
    r = subprocess.run([sys.executable, "-m", "aiopdbp", "demo"], capture_output=True, text=True, timeout=100,
                       env={**__import__("os").environ, "AIOPDBP_TRANSPORT": "local"})
    out = r.stdout + r.stderr
    assert r.returncode == 0, out
    assert "OK in" in out, out
    wide = [line for line in out.splitlines() if len(line) > 100]
    assert not wide, wide
