"""The credit rule as this process runs it: the compiled twin of
:mod:`aiopdbp.hosts.gate` where it is built and current, else the Python
source (:func:`aiopdbp.ext.choose` decides and records why).  The link and
the router make their gate and book from here."""

from __future__ import annotations

from types import ModuleType

from aiopdbp import ext
from aiopdbp.hosts import gate as _pure

#: the module that runs: ``aiopdbp.hosts.cgate`` or ``aiopdbp.hosts.gate``
gate: ModuleType = ext.twin("gate", _pure, "aiopdbp.hosts.cgate")
CreditGate: type[_pure.CreditGate] = gate.CreditGate
CreditBook: type[_pure.CreditBook] = gate.CreditBook
CreditAccount: type[_pure.CreditAccount] = gate.CreditAccount
PipeMarks: type[_pure.PipeMarks] = gate.PipeMarks
Placer: type[_pure.Placer] = gate.Placer
#: whether the compiled form runs
COMPILED: bool = gate is not _pure

__all__ = ["COMPILED", "CreditAccount", "CreditBook", "CreditGate", "PipeMarks", "Placer", "gate"]
