"""A field of a record that is a tuple: :class:`~aiopdbp.wire.message.Message`'s
``source``, ``kind``, ``com``, ``data`` and ``source_pid`` are its items 0-4.

:func:`field` makes the class attribute that reads item ``i``.  This form is a
``property`` over ``operator.itemgetter``; its compiled twin
(``aiopdbp.wire.cfields``, chosen by :mod:`aiopdbp.wire.message`) makes a
getter in C, read without the property's call of the item getter: what
every receive loop pays per field it reads (``msg.source``, ``msg.data``).
Both read an item that is not there as ``tuple`` does (``IndexError``), and
neither can be set."""

from __future__ import annotations

from operator import itemgetter
from typing import Any

__all__ = ["DOCS", "NAMES", "field"]

#: the fields, in their items' order, and what each says
NAMES = ("source", "kind", "com", "data", "source_pid")
DOCS = ("the sender's name", "SHORT, or COMMAND", "the sender's com=", "the payload",
        "the number the job gave the sender's name")


def field(i: int) -> Any:
    """The class attribute reading item ``i`` (field ``NAMES[i]``) of a tuple."""
    if not 0 <= i < len(NAMES):
        raise ValueError(f"no field {i}")
    return property(itemgetter(i), doc=DOCS[i])
