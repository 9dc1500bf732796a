"""A GP's receive path as this process runs it: the compiled twin of
:mod:`aiopdbp.runtime.recvpath` where it is built and current, else the
Python source (:func:`aiopdbp.ext.choose` decides and records why).  Each GP
makes its :class:`RecvPath` from here."""

from __future__ import annotations

from types import ModuleType

from aiopdbp import ext
from aiopdbp.runtime import recvpath as _pure

#: the module that runs: ``aiopdbp.runtime.crecvpath`` or ``aiopdbp.runtime.recvpath``
recvpath: ModuleType = ext.twin("recvpath", _pure, "aiopdbp.runtime.crecvpath")
RecvPath: type[_pure.RecvPath] = recvpath.RecvPath
#: whether the compiled form runs
COMPILED: bool = recvpath is not _pure

__all__ = ["COMPILED", "RecvPath", "recvpath"]
