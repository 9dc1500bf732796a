"""Which form of the data-path core runs: its compiled twin or its Python source.

The per-message work of the data path (the block writer and reader,
:mod:`aiopdbp.wire.blocks`) has two forms with one interface, as msgpack
and aiohttp have: the plain Python source, always present, and a twin
compiled by Cython when the package is built (``pip install .`` with a C
compiler).  A layer that owns such a pair imports both and asks
:func:`choose` which one to use; :func:`core` says what was chosen and why
(``aiopdbp info`` prints it).  The compiled form is refused -- the Python
one runs -- when:

* ``AIOPDBP_NO_EXTENSIONS=1`` (:func:`aiopdbp.env.extensions_wanted`);
* it was not built (no compiler at install time, or an interpreter other
  than the one it was built for);
* it is older than its sources: it records a hash of the files it was built
  from (``__sources__``, ``__source_hash__``), and a checkout edited since
  gets a warning with the rebuild command instead of stale code.

This module imports only the standard library at its top: ``setup.py``
loads it alone, by path, to hash the sources the same way when it builds
the twins (the build has none of aiopdbp's dependencies).
"""

from __future__ import annotations

import hashlib
import importlib
import warnings
from pathlib import Path
from types import ModuleType

__all__ = ["REBUILD", "StaleExtensionWarning", "choose", "core", "source_hash", "twin"]

#: how to rebuild the compiled core from a checkout
REBUILD = "pip install -e . (or python3 tools/dev.py --reinstall setup)"

_chosen: dict[str, str] = {}


class StaleExtensionWarning(RuntimeWarning):
    """A compiled twin is older than its sources: the Python form runs instead."""


def source_hash(folder: Path, names: tuple[str, ...]) -> str | None:
    """The hash a twin records of the files ``names`` in ``folder`` (None
    when one of them is absent, as in an installed wheel without sources)."""
    h = hashlib.sha256()
    for name in names:
        try:
            h.update((folder / name).read_bytes())
        except OSError:
            return None
    return h.hexdigest()[:16]


def choose(name: str, pure: ModuleType, compiled: ModuleType | None,
           error: BaseException | None = None) -> ModuleType:
    """The form of core module ``name`` to use: ``compiled`` unless it is
    refused (see the module docstring), else ``pure``; ``error`` is why the
    compiled one could not be imported, if it could not."""
    from aiopdbp.env import NO_EXTENSIONS, extensions_wanted  # (see the module docstring)

    if not extensions_wanted():
        _chosen[name] = f"pure Python ({NO_EXTENSIONS} is set)"
        return pure
    if compiled is None:
        why = "not built" if error is None else f"built but cannot load here: {error}"
        _chosen[name] = f"pure Python (the compiled core is {why})"
        return pure
    file = getattr(compiled, "__file__", None)
    sources: tuple[str, ...] = getattr(compiled, "__sources__", ())
    if file is not None and sources:
        now = source_hash(Path(file).parent, sources)
        if now is not None and now != getattr(compiled, "__source_hash__", None):
            _chosen[name] = "pure Python (the compiled core is older than its sources: rebuild)"
            warnings.warn(f"aiopdbp's compiled core {compiled.__name__} is older than {', '.join(sources)}: "
                          f"the pure-Python core runs; rebuild with {REBUILD}",
                          StaleExtensionWarning, stacklevel=3)
            return pure
    _chosen[name] = "compiled (Cython)"
    return compiled



def twin(name: str, pure: ModuleType, compiled: str) -> ModuleType:
    """:func:`choose` for core module ``name``, importing its compiled twin
    by its dotted name ``compiled`` here: a twin that is not built is
    simply absent; one that is built but cannot load (another interpreter,
    an MPI or numpy of another ABI, a damaged file) is absent with the
    reason, which :func:`core` reports."""
    module: ModuleType | None
    error: BaseException | None = None
    try:
        module = importlib.import_module(compiled)
    except ModuleNotFoundError as exc:  # not built (or, if another module is missing, broken)
        module = None
        error = exc if exc.name != compiled else None
    except ImportError as exc:
        module = None
        error = exc
    return choose(name, pure, module, error)

def core() -> dict[str, str]:
    """Each core module chosen so far and the form that runs, with why."""
    return dict(_chosen)
