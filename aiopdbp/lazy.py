"""Names a package exports but loads on first use (PEP 562): the one
``__getattr__`` the packages that re-export lazily share.

A package's door re-exports what its modules define without importing them
all at its own import -- a rank of an MPI job imports only what it runs
(no in-process transport, no simulated device, no benchmark command line).
It maps each name to its module and makes its module ``__getattr__``
here::

    _EXPORTS = {"Backoff": "aiopdbp.transport.backoff", ...}
    __getattr__ = lazy_exports(globals(), _EXPORTS)

and names them again under ``if TYPE_CHECKING:`` for type checkers.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING

if TYPE_CHECKING:   # (at run time this module imports nothing more: every package loads it)
    from collections.abc import Callable, Mapping
    from typing import Any

__all__ = ["lazy_exports"]


def lazy_exports(namespace: dict[str, Any], exports: Mapping[str, str]) -> Callable[[str], Any]:
    """The module ``__getattr__`` of the module whose ``globals()`` are
    ``namespace``: a name of ``exports`` (name -> the module defining it) is
    imported from its module on first use and bound in ``namespace``, so
    that later look-ups find it there; any other name is an ``AttributeError``."""
    package = namespace["__name__"]

    def __getattr__(name: str) -> Any:
        module = exports.get(name)
        if module is None:
            raise AttributeError(f"module {package!r} has no attribute {name!r}")
        value = getattr(importlib.import_module(module), name)
        namespace[name] = value
        return value

    return __getattr__
