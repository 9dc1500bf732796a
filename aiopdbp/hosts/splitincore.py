"""The large message's receive fast path as this process runs it: the
compiled twin of :mod:`aiopdbp.hosts.splitin` where it is built and current,
else the Python source (:func:`aiopdbp.ext.choose` decides and records why).
The inbound side makes its :class:`~aiopdbp.hosts.splitin.ArraysIn` from here."""

from __future__ import annotations

from types import ModuleType

from aiopdbp import ext
from aiopdbp.hosts import splitin as _pure

#: the module that runs: ``aiopdbp.hosts.csplitin`` or ``aiopdbp.hosts.splitin``
splitin: ModuleType = ext.twin("splitin", _pure, "aiopdbp.hosts.csplitin")
ArraysIn: type[_pure.ArraysIn] = splitin.ArraysIn
#: whether the compiled form runs
COMPILED: bool = splitin is not _pure

__all__ = ["ArraysIn", "COMPILED", "splitin"]
