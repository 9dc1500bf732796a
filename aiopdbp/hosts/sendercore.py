"""The link sender as this process runs it: the compiled twin of
:mod:`aiopdbp.hosts.sender` where it is built and current, else the Python
source (:func:`aiopdbp.ext.choose` decides and records why).  The host
links make their senders from here."""

from __future__ import annotations

from types import ModuleType

from aiopdbp import ext
from aiopdbp.hosts import sender as _pure

#: the module that runs: ``aiopdbp.hosts.csender`` or ``aiopdbp.hosts.sender``
sender: ModuleType = ext.twin("sender", _pure, "aiopdbp.hosts.csender")
LinkSender: type[_pure.LinkSender] = sender.LinkSender
#: whether the compiled form runs
COMPILED: bool = sender is not _pure

__all__ = ["COMPILED", "LinkSender", "sender"]
