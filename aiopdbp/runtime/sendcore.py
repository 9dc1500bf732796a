"""A GP's send path as this process runs it: the compiled twin of
:mod:`aiopdbp.runtime.sendpath` where it is built and current, else the
Python source (:func:`aiopdbp.ext.choose` decides and records why).  Each GP
makes its :class:`SendPath` from here."""

from __future__ import annotations

from types import ModuleType

from aiopdbp import ext
from aiopdbp.runtime import sendpath as _pure

#: the module that runs: ``aiopdbp.runtime.csendpath`` or ``aiopdbp.runtime.sendpath``
sendpath: ModuleType = ext.twin("sendpath", _pure, "aiopdbp.runtime.csendpath")
SendPath: type[_pure.SendPath] = sendpath.SendPath
#: whether the compiled form runs
COMPILED: bool = sendpath is not _pure

__all__ = ["COMPILED", "SendPath", "sendpath"]
