"""The link sender as this process runs it: the compiled twin of
:mod:`aiopdbp.hosts.sender` where it is built and current, else the Python
source (:func:`aiopdbp.ext.choose` decides and records why).  The host
links make their senders from here."""

from __future__ import annotations

from types import ModuleType

from aiopdbp import ext
from aiopdbp.hosts import sender as _pure

_compiled: ModuleType | None
_error: BaseException | None = None
try:
    import aiopdbp.hosts.csender as _compiled  # type: ignore[import-not-found, no-redef, unused-ignore]
except ModuleNotFoundError as exc:  # not built (or, if another module is missing, broken)
    _compiled = None
    _error = exc if exc.name != "aiopdbp.hosts.csender" else None
except ImportError as exc:  # built for another interpreter, or damaged
    _compiled = None
    _error = exc

#: the module that runs: ``aiopdbp.hosts.csender`` or ``aiopdbp.hosts.sender``
sender: ModuleType = ext.choose("sender", _pure, _compiled, _error)
LinkSender: type[_pure.LinkSender] = sender.LinkSender
#: whether the compiled form runs
COMPILED: bool = sender is not _pure

__all__ = ["COMPILED", "LinkSender", "sender"]
