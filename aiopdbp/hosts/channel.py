"""The control channel to the other hosts: typed messages out, typed messages in.

Theory of operation
-------------------
Everything that is not data travels on the transport's control channel as a
typed message (:mod:`aiopdbp.wire.control`, one class per kind).
:class:`ControlChannel` is the one door for both directions: :meth:`send`
encodes and posts a message (counting it per destination and kind), and
:meth:`decode` turns an arrived frame back into its class (counting it per
source and kind; a malformed frame raises
:class:`~aiopdbp.errors.ProtocolError`).

Each kind has one handler, a method named by the class's ``HANDLER`` on the
part of ``hosts/`` that owns that job (the sequencer, inbound delivery,
credit, failure handling).  :class:`Dispatch` collects them from those parts
once, at construction, and checks that every kind of
:class:`~aiopdbp.wire.control.ControlHandler` has exactly one owner: a kind
without a handler, or with two, is a programming error that shows at once,
not when the first such message arrives.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Any

from aiopdbp.errors import ProtocolError
from aiopdbp.transport.base import Channel, Transport
from aiopdbp.wire.control import ControlHandler, CtrlMsg, decode_control

log = logging.getLogger("aiopdbp.hosts.channel")

__all__ = ["ControlChannel", "Dispatch", "HANDLER_NAMES"]

#: the handler method names of every control kind (``on_reg``, ``on_table``, ...)
HANDLER_NAMES = tuple(sorted(n for n in vars(ControlHandler) if n.startswith("on_")))

_CTRL = Channel.CONTROL


class ControlChannel:
    """Typed control messages to and from the other hosts (counted per kind)."""

    def __init__(self, transport: Transport) -> None:
        self._transport = transport
        self._sent: dict[int, dict[str, int]] = {}   # host -> control kind -> messages
        self._recv: dict[int, dict[str, int]] = {}
        self.protocol_errors = 0   # malformed control frames

    def send(self, dest: int, msg: CtrlMsg,
             on_fail: Callable[[BaseException], None] | None = None) -> None:
        """Post one control message to ``dest``.  If it cannot be sent,
        ``on_fail(exc)`` is called (a wait for its answer fails instead of
        hanging); otherwise the failure is only logged."""
        kinds = self._sent.setdefault(dest, {})
        kind = type(msg).__name__
        kinds[kind] = kinds.get(kind, 0) + 1
        try:
            fut = self._transport.post_nowait(dest, _CTRL, [msg.encode()])
        except Exception as exc:  # transport already closed
            _unreachable(dest, exc, on_fail)
            return
        if fut is not None:
            fut.add_done_callback(
                lambda f: None if f.cancelled() or f.exception() is None
                else _unreachable(dest, f.exception(), on_fail))  # type: ignore[arg-type]

    def decode(self, src: int, buf: memoryview) -> CtrlMsg:
        """The message a control frame from ``src`` carries (raises
        :class:`~aiopdbp.errors.ProtocolError` for a malformed one)."""
        try:
            msg = decode_control(buf)
        except ProtocolError:
            self.protocol_errors += 1
            raise
        kinds = self._recv.setdefault(src, {})
        kind = type(msg).__name__
        kinds[kind] = kinds.get(kind, 0) + 1
        return msg

    def counts(self) -> tuple[dict[int, dict[str, int]], dict[int, dict[str, int]]]:
        """Control messages sent to and received from each host, per class name (copies)."""
        return ({h: dict(k) for h, k in self._sent.items()},
                {h: dict(k) for h, k in self._recv.items()})


def _unreachable(dest: int, exc: BaseException, on_fail: Callable[[BaseException], None] | None) -> None:
    log.debug("control message to host %d failed: %s", dest, exc)
    if on_fail is not None:
        on_fail(exc)


class Dispatch:
    """Each control kind to the one method that handles it.

    ``owners``: the parts of ``hosts/`` that own a job; a part handles the
    kinds whose ``HANDLER`` method it defines.
    """

    def __init__(self, *owners: object) -> None:
        self._handlers: dict[str, Callable[[int, Any], None]] = {}
        for name in HANDLER_NAMES:
            found = [getattr(o, name) for o in owners if callable(getattr(o, name, None))]
            if len(found) != 1:
                raise TypeError(f"control handler {name}: {len(found)} owners, expected one")
            self._handlers[name] = found[0]

    def __call__(self, src: int, msg: CtrlMsg) -> None:
        """Hand ``msg`` from host ``src`` to its handler."""
        self._handlers[msg.HANDLER](src, msg)
