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

#: (module, its .pyx, the sources whose hash it records)
TWINS = [("aiopdbp.wire.cblocks", "aiopdbp/wire/cblocks.pyx", ("blocks.py", "cblocks.pyx"))]


def extensions() -> list[Extension]:
    exts = []
    for name, pyx, sources in TWINS:
        digest = _hash.source_hash(ROOT / Path(pyx).parent, sources)
        exts.append(Extension(name, [pyx], optional=True,
                              define_macros=[("AIOPDBP_SOURCE_HASH", f'"{digest}"')],
                              extra_compile_args=["-O2"]))
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
