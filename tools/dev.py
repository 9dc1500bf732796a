#!/usr/bin/env python3
"""Developer entry point for aiopdbp: one command from a bare clone to a result.

Needs only a Python >= 3.11 interpreter: no make, no system MPI.  The MPI library
and ``mpiexec`` come from the ``mpich`` wheel that ``pip`` installs into the
project's virtual environment ``.venv``.

Usage::

    python3 tools/dev.py [--reinstall] [--extras test,gpu] [-v] COMMAND [ARGS...]

Commands:

    setup                 create/refresh .venv and install the project, nothing else
    demo  [ARGS...]       run ``aiopdbp demo ARGS`` from .venv
    test  [PYTEST ARGS]   run ``python -m pytest`` (the whole suite) from .venv;
                          exits with pytest's exit code
    docs  [SPHINX ARGS]   build the documentation site into docs/_build/html
                          (Sphinx; a warning fails the build)
    bench [-n N] [ARGS...]
                          run ``aiopdbp bench -n N ARGS`` (the benchmark harness;
                          N defaults to 2, a list 2,3,4 sweeps rank counts)
    bench [-n N] NAME [ARGS...]
                          run ``mpiexec -n N python benchmarks/NAME.py ARGS``
                          (bench_local, bench_barrier)

``.venv`` is created with the interpreter that runs this script.  The project is
installed editable with what the command needs (``demo``: aiopdbp alone, its
compiled core built on the way; ``bench``: the bench extra; ``setup``, ``test``
and ``docs``: ``.[test,bench,video,docs]``), and a stamp file records what was
installed; while ``pyproject.toml`` and the core's sources are unchanged and the
extras a command needs are installed, pip is not run again, so a second call
starts at once.  ``--extras`` names the extras instead; ``--reinstall`` forces
the install step.
"""

from __future__ import annotations

import hashlib
import importlib.util
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path
from typing import NoReturn, Sequence

ROOT = Path(__file__).resolve().parent.parent
VENV = ROOT / ".venv"
PYPROJECT = ROOT / "pyproject.toml"
STAMP = VENV / ".aiopdbp-install-stamp"
# what the compiled core is built from: a change to one of them means pip
# must run again (it rebuilds the extension)
BUILD_INPUTS = (ROOT / "setup.py", ROOT / "aiopdbp" / "wire" / "blocks.py", ROOT / "aiopdbp" / "wire" / "cblocks.pyx",
                ROOT / "aiopdbp" / "transport" / "kernel.py", ROOT / "aiopdbp" / "transport" / "ckernel.pyx",
                ROOT / "aiopdbp" / "hosts" / "gate.py", ROOT / "aiopdbp" / "hosts" / "cgate.pyx",
                ROOT / "aiopdbp" / "hosts" / "cgate.pxd", ROOT / "aiopdbp" / "wire" / "cblocks.pxd",
                ROOT / "aiopdbp" / "hosts" / "sender.py", ROOT / "aiopdbp" / "hosts" / "csender.pyx",
                ROOT / "aiopdbp" / "hosts" / "csender.pxd",
                ROOT / "aiopdbp" / "hosts" / "splitin.py", ROOT / "aiopdbp" / "hosts" / "csplitin.pyx",
                ROOT / "aiopdbp" / "tensormem" / "view.py", ROOT / "aiopdbp" / "tensormem" / "cview.pyx",
                ROOT / "aiopdbp" / "runtime" / "sendpath.py", ROOT / "aiopdbp" / "runtime" / "csendpath.pyx",
                ROOT / "aiopdbp" / "runtime" / "recvpath.py", ROOT / "aiopdbp" / "runtime" / "crecvpath.pyx",
                ROOT / "aiopdbp" / "runtime" / "coshell.pxd", ROOT / "aiopdbp" / "runtime" / "cslots.pxd",
                ROOT / "aiopdbp" / "wire" / "fields.py", ROOT / "aiopdbp" / "wire" / "cfields.pyx")
WINDOWS = os.name == "nt"
BIN = VENV / ("Scripts" if WINDOWS else "bin")
EXE = ".exe" if WINDOWS else ""
VENV_PY = BIN / f"python{EXE}"
# bench: plots/progress; video: PyAV for the video example; docs: Sphinx for the site
DEFAULT_EXTRAS = "test,bench,video,docs"
# what each command needs installed: the demo needs aiopdbp alone (its
# first run is then mostly the core's build), the rest everything
COMMAND_EXTRAS = {"demo": "", "setup": DEFAULT_EXTRAS, "test": DEFAULT_EXTRAS, "docs": DEFAULT_EXTRAS,
                  "bench": "bench"}
COMMANDS = ("setup", "demo", "test", "bench", "docs")
DOCS_OUT = ROOT / "docs" / "_build" / "html"


def say(msg: str) -> None:
    """Print one progress line (stderr, so command output stays clean)."""
    print(f"[dev] {msg}", file=sys.stderr, flush=True)


def die(msg: str, code: int = 2) -> NoReturn:
    """Print an error and exit."""
    print(f"[dev] error: {msg}", file=sys.stderr, flush=True)
    raise SystemExit(code)


def usage() -> str:
    """The module docstring, i.e. the help text."""
    return __doc__ or ""


# --------------------------------------------------------------------- venv --

def venv_python_works() -> bool:
    """True if ``.venv``'s interpreter exists, runs and has pip."""
    if not VENV_PY.exists():
        return False
    try:
        r = subprocess.run(
            [str(VENV_PY), "-c", "import sys, pip; print(sys.version_info[:2])"],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            timeout=60,
        )
    except (OSError, subprocess.TimeoutExpired):
        return False
    return r.returncode == 0


def host_has_pip() -> bool:
    """True if the interpreter running this script can run ``-m pip``."""
    return importlib.util.find_spec("pip") is not None


def venv_help() -> str:
    """How to get a working ``venv``/``ensurepip`` on common systems."""
    v = f"{sys.version_info.major}.{sys.version_info.minor}"
    return (
        "Python's 'venv' module cannot create an environment with pip here "
        "(ensurepip is missing).\n"
        f"    Debian/Ubuntu:  sudo apt-get install python3-venv   (or python{v}-venv)\n"
        "    Fedora/RHEL:    sudo dnf install python3 (venv and ensurepip are included)\n"
        "    other systems:  install a full CPython build (python.org, pyenv, conda)\n"
        f"then run this command again (interpreter used: {sys.executable})."
    )


def create_venv() -> None:
    """Create ``.venv`` with ``sys.executable``, bootstrapping pip."""
    try:
        import venv  # noqa: F401  (only to check it is there)
    except ImportError:
        die(venv_help())
    if VENV.exists():
        say(f"removing broken virtual environment {VENV}")
        shutil.rmtree(VENV)
    say(f"creating virtual environment {VENV} with {sys.executable}")
    if importlib.util.find_spec("ensurepip") is not None:
        r = subprocess.run([sys.executable, "-m", "venv", str(VENV)])
        if r.returncode == 0 and venv_python_works():
            return
        say("'python -m venv' failed")
        shutil.rmtree(VENV, ignore_errors=True)
    # No ensurepip (e.g. Debian without python3-venv): make the venv without pip
    # and let the host's pip (>= 22.3 has --python) put pip into it.
    if host_has_pip():
        say("ensurepip is unavailable; bootstrapping pip with the host's pip")
        r = subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(VENV)])
        if r.returncode == 0:
            r = subprocess.run(
                [sys.executable, "-m", "pip", "--python", str(VENV_PY),
                 "install", "--disable-pip-version-check", "-q", "pip"]
            )
            if r.returncode == 0 and venv_python_works():
                return
        shutil.rmtree(VENV, ignore_errors=True)
    die(venv_help())


def _extras(spec: str) -> set[str]:
    return {e.strip() for e in spec.split(",") if e.strip()}


def install_key() -> str:
    """What the stamp's first line records: pyproject.toml's content, the
    compiled core's sources, the venv's Python (its second line: the extras
    installed)."""
    h = hashlib.sha256()
    h.update(PYPROJECT.read_bytes())
    for path in BUILD_INPUTS:
        if path.exists():
            h.update(path.read_bytes())
    cfg = VENV / "pyvenv.cfg"  # names the venv's Python version
    if cfg.exists():
        h.update(cfg.read_bytes())
    return h.hexdigest()


def installed_extras() -> set[str] | None:
    """The extras of the last install while it is still valid, else None."""
    if not STAMP.exists() or not (BIN / f"aiopdbp{EXE}").exists():
        return None
    lines = STAMP.read_text(encoding="utf-8").splitlines()
    if not lines or lines[0].strip() != install_key():
        return None
    return _extras(lines[1]) if len(lines) > 1 else set()


def stamp_is_fresh(extras: str) -> bool:
    """True if the last install is still valid and has ``extras`` (so pip can be skipped)."""
    have = installed_extras()
    if have is None or not _extras(extras) <= have:
        return False
    if PYPROJECT.stat().st_mtime > STAMP.stat().st_mtime:
        # Touched (e.g. by a checkout) but the same content: still fresh.
        STAMP.touch()
    return True


def install(extras: str, verbose: bool) -> None:
    """``pip install -e .[extras]`` into ``.venv`` and write the stamp."""
    target = f".[{extras}]" if extras else "."
    say(f"installing aiopdbp (editable) with {target!r} into .venv ...")
    STAMP.unlink(missing_ok=True)
    cmd = [str(VENV_PY), "-m", "pip", "install", "--disable-pip-version-check",
           "--progress-bar", "off"]
    if not verbose:
        cmd.append("-q")
    cmd += ["-e", target]
    t0 = time.monotonic()
    r = subprocess.run(cmd, cwd=ROOT, env=venv_env())
    if r.returncode != 0:
        die(f"pip install failed (exit {r.returncode}); see the output above", r.returncode)
    STAMP.write_text(f"{install_key()}\n{','.join(sorted(_extras(extras)))}\n", encoding="utf-8")
    say(f"installed in {time.monotonic() - t0:.1f} s")


def ensure_env(extras: str, reinstall: bool, verbose: bool) -> None:
    """Make ``.venv`` exist, work, and hold an up-to-date install of the project."""
    if sys.version_info < (3, 11):
        die(f"aiopdbp needs Python >= 3.11; {sys.executable} is "
            f"{sys.version.split()[0]}")
    if not PYPROJECT.exists():
        die(f"{PYPROJECT} not found: run this script from an aiopdbp checkout")
    if not venv_python_works():
        create_venv()
    if reinstall or not stamp_is_fresh(extras):
        # what was installed and is still valid stays installed
        install(",".join(sorted(_extras(extras) | (installed_extras() or set()))), verbose)
    else:
        say(".venv is up to date (pyproject.toml and the core's sources unchanged since the last install)")


def venv_env() -> dict[str, str]:
    """The environment for commands run from ``.venv`` (its bin/ first on PATH,
    so ``mpiexec`` is the one from the ``mpich`` wheel unless told otherwise)."""
    env = dict(os.environ)
    env.pop("PYTHONHOME", None)
    env["VIRTUAL_ENV"] = str(VENV)
    env["PATH"] = str(BIN) + os.pathsep + env.get("PATH", "")
    return env


def run(cmd: Sequence[str]) -> int:
    """Run ``cmd`` in the project root with the venv environment; return its exit code."""
    say("running: " + " ".join(cmd))
    try:
        return subprocess.run(list(cmd), cwd=ROOT, env=venv_env()).returncode
    except FileNotFoundError as e:
        die(f"cannot run {cmd[0]}: {e}")
    except KeyboardInterrupt:
        return 130


# ----------------------------------------------------------------- commands --

def cmd_demo(args: list[str]) -> int:
    """``aiopdbp demo ARGS`` from the venv."""
    return run([str(BIN / f"aiopdbp{EXE}"), "demo", *args])


def cmd_test(args: list[str]) -> int:
    """The whole test suite (pytest reads its settings from pyproject.toml)."""
    return run([str(VENV_PY), "-m", "pytest", *args])


def cmd_docs(args: list[str]) -> int:
    """Build the documentation site (Sphinx, warnings are errors) into docs/_build/html.

    Always from scratch (``-E``): a page read from an old build's cache keeps
    objects that moved to another page, and Sphinx then warns of duplicates
    that are not there."""
    rc = run([str(VENV_PY), "-m", "sphinx", "-E", "-W", "--keep-going", "-q", "-b", "html", *args,
              str(ROOT / "docs"), str(DOCS_OUT)])
    if rc == 0:
        say(f"docs built: open {DOCS_OUT / 'index.html'}")
    return rc


def cmd_bench(args: list[str]) -> int:
    """``aiopdbp bench ARGS``, or ``mpiexec -n N python benchmarks/NAME.py ARGS``."""
    nprocs, rest = "2", list(args)
    if rest[:1] == ["-n"] and len(rest) >= 2:
        nprocs, rest = rest[1], rest[2:]
    elif rest and rest[0].startswith("-n") and rest[0][2:].lstrip("=").replace(",", "").isdigit():
        nprocs, rest = rest[0][2:].lstrip("="), rest[1:]
    if not rest or rest[0].startswith("-"):
        return run([str(BIN / f"aiopdbp{EXE}"), "bench", "-n", nprocs, *rest])
    name, rest = rest[0], rest[1:]
    script = ROOT / "benchmarks" / (name if name.endswith(".py") else f"{name}.py")
    if not script.exists():
        found = sorted(p.stem for p in (ROOT / "benchmarks").glob("*.py")
                       if not p.stem.startswith("_"))
        die(f"no benchmark {script.name}; available: {', '.join(found) or 'none'} "
            "(or no NAME: the aiopdbp bench harness)")
    mpiexec = BIN / f"mpiexec{EXE}"
    launcher = str(mpiexec) if mpiexec.exists() else (shutil.which("mpiexec") or "mpiexec")
    return run([launcher, "-n", nprocs, str(VENV_PY), str(script), *rest])


def main(argv: Sequence[str] | None = None) -> int:
    """Parse ``[options] COMMAND [ARGS...]`` (ARGS go through verbatim)."""
    rest = list(sys.argv[1:] if argv is None else argv)
    extras, reinstall, verbose = None, False, False
    while rest and rest[0].startswith("-"):
        opt = rest.pop(0)
        if opt in ("-h", "--help"):
            print(usage())
            return 0
        if opt == "--reinstall":
            reinstall = True
        elif opt in ("-v", "--verbose"):
            verbose = True
        elif opt == "--extras":
            if not rest:
                die("--extras needs a value, e.g. --extras test,gpu")
            extras = rest.pop(0)
        elif opt.startswith("--extras="):
            extras = opt.split("=", 1)[1]
        else:
            die(f"unknown option {opt!r}\n{usage()}")
    if not rest or rest[0] not in COMMANDS:
        print(usage(), file=sys.stderr)
        return 2
    command, args = rest[0], rest[1:]
    ensure_env(COMMAND_EXTRAS[command] if extras is None else extras, reinstall, verbose)
    if command == "setup":
        return 0
    if command == "demo":
        return cmd_demo(args)
    if command == "test":
        return cmd_test(args)
    if command == "docs":
        return cmd_docs(args)
    return cmd_bench(args)


if __name__ == "__main__":
    sys.exit(main())
