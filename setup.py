"""Builds the compiled core (Cython) beside the pure-Python package.

Everything else about the package is in pyproject.toml.  The extension is
optional: without a C compiler (or Cython) ``pip install .`` still succeeds,
prints why, and the pure-Python core runs (``aiopdbp info`` says which).
"""

from __future__ import annotations

import sys
from pathlib import Path

from setuptools import Extension, setup
from setuptools.command.build_ext import build_ext

ROOT = Path(__file__).resolve().parent
# the one hash function the runtime check (aiopdbp/ext.py) uses too; loaded
# by path so that the build needs none of aiopdbp's dependencies
import importlib.util  # noqa: E402

_spec = importlib.util.spec_from_file_location("_aiopdbp_ext", ROOT / "aiopdbp" / "ext.py")
assert _spec is not None and _spec.loader is not None
_hash = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(_hash)

#: (module, its .pyx, the sources whose hash it records, whether it calls MPI's C API)
TWINS = [("aiopdbp.wire.cblocks", "aiopdbp/wire/cblocks.pyx", ("blocks.py", "cblocks.pyx", "cblocks.pxd"), False),
         ("aiopdbp.transport.ckernel", "aiopdbp/transport/ckernel.pyx", ("kernel.py", "ckernel.pyx"), True),
         ("aiopdbp.hosts.cgate", "aiopdbp/hosts/cgate.pyx", ("gate.py", "cgate.pyx", "cgate.pxd"), False),
         ("aiopdbp.hosts.csender", "aiopdbp/hosts/csender.pyx",
          ("sender.py", "csender.pyx", "csender.pxd", "cgate.pxd", "../wire/cblocks.pxd"), False),
         ("aiopdbp.hosts.csplitin", "aiopdbp/hosts/csplitin.pyx", ("splitin.py", "csplitin.pyx"), False),
         ("aiopdbp.tensormem.cview", "aiopdbp/tensormem/cview.pyx", ("view.py", "cview.pyx"), False),
         ("aiopdbp.runtime.csendpath", "aiopdbp/runtime/csendpath.pyx",
          ("sendpath.py", "csendpath.pyx", "coshell.pxd", "cslots.pxd", "../hosts/csender.pxd", "../hosts/cgate.pxd"), False),
         ("aiopdbp.runtime.crecvpath", "aiopdbp/runtime/crecvpath.pyx", ("recvpath.py", "crecvpath.pyx", "coshell.pxd", "cslots.pxd"),
          False),
         ("aiopdbp.wire.cfields", "aiopdbp/wire/cfields.pyx", ("fields.py", "cfields.pyx"), False)]
#: the twins that call numpy's C API (its headers: numpy is a build requirement)
NUMPY_TWINS = {"aiopdbp.tensormem.cview", "aiopdbp.wire.cblocks", "aiopdbp.hosts.csender"}


def _numpy_include() -> list[str] | None:
    try:
        import numpy
    except ImportError:
        return None
    return [numpy.get_include()]


def _mpich() -> dict[str, list[str]] | None:
    """Where to compile and link a twin that calls MPI: MPICH's ``mpi.h`` and
    ``libmpi`` from the ``mpich`` wheel (a build requirement) and mpi4py's
    Cython declarations; None when they are not here.  The twin links
    ``libmpi.so.12`` by soname, without a run path: at run time it binds to the
    MPICH-ABI library mpi4py has loaded, and does not import under another
    MPI (the pure form runs then)."""
    try:
        import mpi4py
    except ImportError:
        return None
    for entry in map(Path, sys.path):
        prefix = entry.parent.parent.parent  # <prefix>/lib/pythonX.Y/site-packages
        if entry.name == "site-packages" and (prefix / "include" / "mpi.h").is_file() \
                and list((prefix / "lib").glob("libmpi.so*")):
            return {"include_dirs": [str(prefix / "include"), mpi4py.get_include()],
                    "library_dirs": [str(prefix / "lib")], "libraries": ["mpi"]}
    return None


def extensions() -> list[Extension]:
    exts = []
    mpi = _mpich()
    for name, pyx, sources, calls_mpi in TWINS:
        if calls_mpi and mpi is None:
            print(f"aiopdbp: {name} needs MPICH's mpi.h and mpi4py at build time: "
                  "its pure-Python form will run", file=sys.stderr)
            continue
        extra = dict(mpi) if calls_mpi and mpi else {}
        if name in NUMPY_TWINS:
            if (include := _numpy_include()) is None:
                print(f"aiopdbp: {name} needs numpy's headers at build time: its pure-Python form will run",
                      file=sys.stderr)
                continue
            extra["include_dirs"] = extra.get("include_dirs", []) + include
        digest = _hash.source_hash(ROOT / Path(pyx).parent, sources)
        exts.append(Extension(name, [pyx], optional=True,
                              define_macros=[("AIOPDBP_SOURCE_HASH", f'"{digest}"'),
                                             ("NPY_NO_DEPRECATED_API", "NPY_1_7_API_VERSION")],
                              extra_compile_args=["-O2"], **extra))
    return exts


class OptionalBuildExt(build_ext):
    """Cythonizes the twins when Cython is present; any failure leaves the
    pure-Python core, said once on stderr."""

    def run(self) -> None:
        try:
            import Cython  # noqa: F401  (setuptools compiles the .pyx with it)
        except ImportError:
            print("aiopdbp: Cython is not installed: the pure-Python core will run", file=sys.stderr)
            self.extensions = []
            return
        try:
            super().run()
        except Exception as exc:  # no compiler, no headers: the package works without it
            print(f"aiopdbp: the compiled core was not built ({exc}): the pure-Python core will run",
                  file=sys.stderr)

    def build_extension(self, ext: Extension) -> None:
        try:
            super().build_extension(ext)
        except Exception as exc:
            print(f"aiopdbp: {ext.name} was not built ({exc}): the pure-Python core will run",
                  file=sys.stderr)


setup(ext_modules=extensions(), cmdclass={"build_ext": OptionalBuildExt})
