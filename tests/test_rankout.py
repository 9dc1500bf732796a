"""A rank's program under ``aiopdbp launch`` runs through ``aiopdbp.rankout``
(its output prefixed from the start): everything else must be as under
``python prog.py`` -- the names, argv, path, exit status and traceback."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from tests.mpirun import REPO_ROOT

pytestmark = pytest.mark.timeout(60)

_SHOW = """
import sys, pickle
class Point:
    pass
print(__name__, sys.argv, sys.path[0], __file__)
print(type(pickle.loads(pickle.dumps(Point()))).__qualname__)
"""


def _run(*argv: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, *argv], capture_output=True, text=True, timeout=30,
                          cwd=str(REPO_ROOT), env=env)


def test_a_script_sees_what_python_script_would_show_it(tmp_path: Path) -> None:
    prog = tmp_path / "show.py"
    prog.write_text(_SHOW)
    plain = _run(str(prog), "a", "--b")
    wrapped = _run("-m", "aiopdbp.rankout", str(prog), "a", "--b")
    assert plain.returncode == wrapped.returncode == 0, (plain.stderr, wrapped.stderr)
    assert wrapped.stdout == plain.stdout


def test_an_uncaught_error_shows_the_programs_frames_only_and_exits_1(tmp_path: Path) -> None:
    prog = tmp_path / "boom.py"
    prog.write_text("def f():\n    raise KeyError('x')\nf()\n")
    plain = _run(str(prog))
    wrapped = _run("-m", "aiopdbp.rankout", str(prog))
    assert plain.returncode == wrapped.returncode == 1
    assert wrapped.stderr == plain.stderr


def test_a_syntax_error_is_shown_as_python_shows_it(tmp_path: Path) -> None:
    prog = tmp_path / "syn.py"
    prog.write_text("x = (\n")
    plain = _run(str(prog))
    wrapped = _run("-m", "aiopdbp.rankout", str(prog))
    assert plain.returncode == wrapped.returncode == 1
    assert wrapped.stderr == plain.stderr


def test_a_module_runs_as_python_m_runs_it() -> None:
    plain = _run("-m", "json.tool", "--help")
    wrapped = _run("-m", "aiopdbp.rankout", "-m", "json.tool", "--help")
    assert plain.returncode == wrapped.returncode == 0
    assert wrapped.stdout == plain.stdout


_END = """
import atexit, gc, weakref
class Thing:
    pass
thing = Thing()
weakref.finalize(thing, print, "finalized")
atexit.register(lambda: print("frozen at exit:", gc.get_freeze_count() > 0))
print("a last partial line", end="")
"""


def test_the_objects_a_program_leaves_are_frozen_for_the_interpreters_end(tmp_path: Path) -> None:
    prog = tmp_path / "end.py"
    prog.write_text(_END, encoding="utf-8")
    r = _run("-m", "aiopdbp.rankout", str(prog))
    assert r.returncode == 0, r.stderr
    # frozen (the end's collections skip them), and the end is otherwise as always:
    # atexit handlers, weakref finalizers and the streams' last bytes
    assert "frozen at exit: True" in r.stdout, r.stdout
    assert "finalized" in r.stdout and r.stdout.startswith("a last partial line"), r.stdout
