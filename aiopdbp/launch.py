"""Start an aiopdbp program on N ranks with ``mpiexec`` (``aiopdbp launch``).

``launch(4, ["prog.py", "--size", "1M"])`` runs
``mpiexec -n 4 <this python> prog.py --size 1M`` and returns its exit code.
Nothing here imports mpi4py.

``tcp=True`` makes MPICH use its network path even between ranks on one
machine, standing in for a cluster interconnect: ``MPIR_CVAR_NOLOCAL=1``
(no shared-memory fast path between local ranks) and ``UCX_TLS=tcp,self``
(the UCX netmod -- the ``mpich`` wheel's default -- uses TCP sockets only).
``FI_PROVIDER=tcp`` is set as well, which has the same effect should the OFI
netmod be selected (``MPIR_CVAR_CH4_NETMOD=ofi``).  Other MPI libraries
ignore these variables.
"""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import sysconfig
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from .emulate import EmulateConfig

__all__ = ["find_mpiexec", "launch", "launch_command", "launch_env", "TCP_ENV"]

#: environment that forces MPICH onto TCP between local ranks
TCP_ENV: Mapping[str, str] = {
    "MPIR_CVAR_NOLOCAL": "1",
    "UCX_TLS": "tcp,self",
    "FI_PROVIDER": "tcp",
}


def _executable(path: Path) -> bool:
    return path.is_file() and os.access(path, os.X_OK)


def _mpich_wheel_mpiexec() -> list[Path]:
    """Where the ``mpich`` wheel (if installed) put its ``mpiexec``."""
    from importlib.metadata import PackageNotFoundError, files

    try:
        return [Path(os.path.normpath(str(f.locate()))) for f in files("mpich") or () if f.name == "mpiexec"]
    except PackageNotFoundError:
        return []


def find_mpiexec() -> str:
    """Path of the ``mpiexec`` to use.

    Search order: env ``AIOPDBP_MPIEXEC``; the ``mpiexec`` next to
    ``sys.executable`` (a virtual environment's ``bin``); the one the
    ``mpich`` wheel installed (its scripts directory, found from the wheel's
    file list); ``mpiexec`` then ``mpirun`` on ``PATH``.  Raises
    :class:`FileNotFoundError` with a hint when there is none.
    """
    override = os.environ.get("AIOPDBP_MPIEXEC")
    if override:
        found = shutil.which(override)
        if found is None:
            raise FileNotFoundError(f"AIOPDBP_MPIEXEC={override!r} is not an executable")
        return found

    candidates: list[Path] = [Path(sys.executable).parent / "mpiexec", *_mpich_wheel_mpiexec()]
    for scheme_path in (sysconfig.get_path("scripts"), sysconfig.get_path("scripts", f"{os.name}_user")):
        if scheme_path:
            candidates.append(Path(scheme_path) / "mpiexec")
    for cand in candidates:
        if _executable(cand):
            return str(cand)
    for name in ("mpiexec", "mpirun"):
        found = shutil.which(name)
        if found is not None:
            return found
    raise FileNotFoundError(
        "no mpiexec found: install an MPI library (e.g. `pip install mpich`, which aiopdbp "
        "depends on) or put your MPI's mpiexec on PATH, or set AIOPDBP_MPIEXEC"
    )


def launch_env(
    *, tcp: bool = False, extra_env: Mapping[str, str] | None = None, base: Mapping[str, str] | None = None
) -> dict[str, str]:
    """Environment for the launched job: ``base`` (default ``os.environ``) + TCP + extra."""
    env = dict(os.environ if base is None else base)
    if tcp:
        env.update(TCP_ENV)
    if extra_env:
        env.update(extra_env)
    return env


def launch_command(
    n: int, argv: Sequence[str], *, mpiexec_args: Iterable[str] = (), python: str | None = None
) -> list[str]:
    """``[mpiexec, *mpiexec_args, -n, N, python, *argv]``."""
    if n < 1:
        raise ValueError(f"number of ranks must be >= 1, got {n}")
    if not argv:
        raise ValueError("nothing to launch: argv is empty")
    return [find_mpiexec(), *mpiexec_args, "-n", str(n), python or sys.executable, *argv]


def launch(
    n: int,
    argv: Sequence[str],
    *,
    tcp: bool = False,
    extra_env: Mapping[str, str] | None = None,
    mpiexec_args: Iterable[str] = (),
    timeout: float | None = None,
    emulate: EmulateConfig | str | None = None,
) -> int:
    """Run ``mpiexec -n N python argv...`` and return its exit code.

    ``argv`` is what would follow ``python`` (a script and its arguments, or
    ``-m module ...``).  ``tcp`` forces the network path (see module doc);
    ``extra_env`` adds variables; ``mpiexec_args`` go before ``-n``.  A
    signal death is reported as ``128 + signal`` like a shell does; on
    ``timeout`` the job is killed and 124 returned.  Ctrl-C reaches mpiexec
    (same process group), which forwards it to the ranks; we wait for it.
    ``emulate`` (an :class:`~aiopdbp.emulate.EmulateConfig` or a link rate
    such as ``"1gbit"``) runs the ranks on an emulated cluster, one host per
    rank by default (see :mod:`aiopdbp.emulate`; needs root).
    """
    if emulate is not None:
        from .emulate import launch_emulated

        return launch_emulated(n, argv, emulate, tcp=tcp, extra_env=extra_env,
                               mpiexec_args=list(mpiexec_args), timeout=timeout,
                               log=lambda line: print(f"aiopdbp launch: {line}", file=sys.stderr))
    cmd = launch_command(n, argv, mpiexec_args=mpiexec_args)
    env = launch_env(tcp=tcp, extra_env=extra_env)
    proc = subprocess.Popen(cmd, env=env)
    try:
        rc = proc.wait(timeout=timeout)
    except subprocess.TimeoutExpired:
        proc.terminate()
        try:
            proc.wait(5)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
        return 124
    except KeyboardInterrupt:
        try:
            rc = proc.wait(10)
        except (subprocess.TimeoutExpired, KeyboardInterrupt):
            proc.kill()
            proc.wait()
            return 128 + signal.SIGINT
    return 128 - rc if rc < 0 else rc
