"""Helpers shared by every aiopdbp benchmark (stdlib only; numpy/mpi4py optional).

Benchmarks in this folder are run as scripts (``mpiexec -n 2 .venv/bin/python
benchmarks/NAME.py``), which puts this folder on ``sys.path``; import with
``from _common import ...`` (or ``from benchmarks._common import ...`` when run
with ``python -m benchmarks.NAME`` from the repository root).
"""

from __future__ import annotations

import json
import math
import os
import platform
import socket
import statistics
import sys
import tempfile
from importlib import metadata
from pathlib import Path
from typing import Any, Callable, Mapping, Sequence

__all__ = [
    "median_of",
    "samples_of",
    "trimmed_mean",
    "machine_info",
    "format_table",
    "print_table",
    "write_json",
    "fmt_bytes",
]

#: Environment variables that change how MPI moves data; recorded with results.
_MPI_ENV_PREFIXES = ("UCX_", "MPIR_CVAR_", "MPICH_", "FI_", "OMPI_MCA_", "I_MPI_", "HYDRA_")


def samples_of(fn: Callable[[], float], repeat: int) -> list[float]:
    """Call ``fn()`` ``repeat`` times and return every result, in order."""
    if repeat < 1:
        raise ValueError("repeat must be >= 1")
    return [float(fn()) for _ in range(repeat)]


def median_of(fn: Callable[[], float], repeat: int) -> float:
    """Median of ``repeat`` calls of ``fn()`` (each call is one full measurement)."""
    return statistics.median(samples_of(fn, repeat))


def trimmed_mean(values: Sequence[float]) -> float:
    """Mean after dropping one max and one min run (the papers' statistic);
    plain mean when there are fewer than 3 values."""
    if not values:
        raise ValueError("no values")
    v = sorted(values)
    if len(v) >= 3:
        v = v[1:-1]
    return statistics.fmean(v)


def _dist_version(name: str) -> str | None:
    """Installed version of distribution ``name``, or None (does not import it)."""
    try:
        return metadata.version(name)
    except metadata.PackageNotFoundError:
        return None


def _cpu_model() -> str:
    """CPU model name from /proc/cpuinfo (Linux) or ``platform``."""
    try:
        with open("/proc/cpuinfo", encoding="utf-8", errors="replace") as f:
            for line in f:
                if line.lower().startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def _usable_cores() -> int | None:
    """Cores this process may run on (affinity), if the OS tells."""
    getaff = getattr(os, "sched_getaffinity", None)
    if getaff is not None:
        try:
            return len(getaff(0))
        except OSError:
            return None
    return os.cpu_count()


def machine_info() -> dict[str, Any]:
    """Describe the machine and software a result was measured with.

    The MPI library version string is included only when ``mpi4py.MPI`` has
    already been imported (importing it here would initialise MPI).
    """
    info: dict[str, Any] = {
        "host": socket.gethostname(),
        "platform": platform.platform(),
        "cpu_model": _cpu_model(),
        "cpu_count": os.cpu_count(),
        "cpu_usable": _usable_cores(),
        "python": sys.version.split()[0],
        "python_impl": platform.python_implementation(),
        "numpy": _dist_version("numpy"),
        "mpi4py": _dist_version("mpi4py"),
        "mpich_wheel": _dist_version("mpich"),
        "uvloop": _dist_version("uvloop"),
        "msgpack": _dist_version("msgpack"),
        "cupy": _dist_version("cupy-cuda12x") or _dist_version("cupy"),
        "aiopdbp": _dist_version("aiopdbp"),
    }
    mpi_mod = sys.modules.get("mpi4py.MPI")
    if mpi_mod is not None:
        try:
            info["mpi_library"] = " ".join(mpi_mod.Get_library_version().split())
            info["mpi_vendor"] = "%s %s" % (
                mpi_mod.get_vendor()[0], ".".join(map(str, mpi_mod.get_vendor()[1])))
            if mpi_mod.Is_initialized() and not mpi_mod.Is_finalized():
                info["mpi_size"] = mpi_mod.COMM_WORLD.Get_size()
        except Exception as e:  # pragma: no cover - depends on the MPI build
            info["mpi_library"] = f"unknown ({e!r})"
    info["mpi_env"] = {k: v for k, v in sorted(os.environ.items())
                       if k.startswith(_MPI_ENV_PREFIXES)}
    return info


def fmt_bytes(n: float) -> str:
    """``4194304`` -> ``'4 MiB'``; ``1536`` -> ``'1.5 KiB'``."""
    for unit in ("B", "KiB", "MiB", "GiB"):
        if abs(n) < 1024 or unit == "GiB":
            return f"{n:g} {unit}" if unit == "B" else f"{n:.4g} {unit}"
        n /= 1024
    raise AssertionError("unreachable")


def _fmt_cell(v: object) -> str:
    """Format one table cell: floats with 4 significant digits."""
    if isinstance(v, float):
        if math.isnan(v) or math.isinf(v):
            return str(v)
        if v != 0 and (abs(v) >= 1e6 or abs(v) < 1e-3):
            return f"{v:.4g}"
        return f"{v:,.4g}" if abs(v) < 1000 else f"{v:,.0f}"
    return str(v)


def format_table(rows: Sequence[Mapping[str, object]]) -> str:
    """Render rows (dicts) as an aligned text table; columns in first-seen order,
    numbers right-aligned."""
    if not rows:
        return "(no rows)"
    cols: list[str] = []
    for r in rows:
        for k in r:
            if k not in cols:
                cols.append(k)
    cells = [[_fmt_cell(r.get(c, "")) for c in cols] for r in rows]
    widths = [max(len(c), *(len(row[i]) for row in cells)) for i, c in enumerate(cols)]
    numeric = [all(isinstance(r.get(c), (int, float)) for r in rows if c in r)
               for c in cols]

    def line(vals: Sequence[str]) -> str:
        return "  ".join(v.rjust(w) if num else v.ljust(w)
                         for v, w, num in zip(vals, widths, numeric)).rstrip()

    out = [line(cols), line(["-" * w for w in widths])]
    out += [line(row) for row in cells]
    return "\n".join(out)


def print_table(rows: Sequence[Mapping[str, object]]) -> None:
    """Print :func:`format_table` of ``rows`` to stdout (flushed)."""
    print(format_table(rows), flush=True)


def _json_default(o: object) -> object:
    """JSON fallback for numpy scalars/arrays, paths and other objects."""
    tolist = getattr(o, "tolist", None)
    if callable(tolist):
        return tolist()
    if isinstance(o, Path):
        return str(o)
    return repr(o)


def write_json(path: str | os.PathLike[str], data: object) -> Path:
    """Write ``data`` as indented JSON to ``path`` atomically (parents created);
    numpy values are converted.  Returns the path."""
    p = Path(path)
    p.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=p.name + ".", suffix=".tmp", dir=p.parent)
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            json.dump(data, f, indent=2, sort_keys=False, default=_json_default)
            f.write("\n")
        os.replace(tmp, p)
    except BaseException:
        try:
            os.unlink(tmp)
        except OSError:
            pass
        raise
    return p
