"""Typed records that cost little to define: :class:`Record` and :class:`FrozenRecord`.

A record is a plain class whose ``__slots__`` name its fields, in order, and
whose ``__init__`` is written out; equality, ``repr``, copying, ``replace`` and
(frozen) hashing and immutability over those fields are written once here.  What a
dataclass generates (``__init__``, ``__eq__``, ``__repr__``, a frozen one's
``__setattr__`` ...) is compiled with ``exec`` when its class is made, and
``slots=True`` makes the class twice; every rank of a job makes all of its
record classes at import, so that was paid once per rank before its first
message.  Here defining a record costs what defining a class costs.

Semantics are a dataclass's with ``slots=True``: ``a == b`` when both are of
the same class and their fields are equal; ``repr`` is ``Name(f=v, ...)``;
a :class:`FrozenRecord` is hashable over its fields and refuses assignment
(``dataclasses.FrozenInstanceError``) -- its ``__init__`` sets the fields
with :data:`init_field` (``object.__setattr__``), as a frozen dataclass's
does -- while a plain :class:`Record` is mutable and unhashable.  Type
checkers see both as dataclasses (``dataclass_transform``): the hand
``__init__`` is checked at every call, and a frozen record's fields are
read-only.  Fields come from ``__slots__`` (a base's first), so a record's
annotations, ``__slots__`` and ``__init__`` parameters must name the same
fields in the same order (``tests/test_records.py`` checks every record).

Imports: the standard library only (a bottom layer, beside the exceptions).
"""

from __future__ import annotations

from dataclasses import FrozenInstanceError
from typing import Any, Self, dataclass_transform

__all__ = ["FrozenRecord", "Record", "init_field"]

#: how a frozen record's ``__init__`` sets a field (its own ``__setattr__`` refuses)
init_field = object.__setattr__

_FIELDS: dict[type, tuple[str, ...]] = {}


class _Fields:
    """What both kinds share: the fields, equality, repr, copying."""

    __slots__ = ()

    @classmethod
    def field_names(cls) -> tuple[str, ...]:
        """The fields, in order: every class's ``__slots__``, the bases' first."""
        names = _FIELDS.get(cls)
        if names is None:
            found: list[str] = []
            for klass in reversed(cls.__mro__):
                slots = klass.__dict__.get("__slots__", ())
                found.extend((slots,) if isinstance(slots, str) else slots)
            names = _FIELDS[cls] = tuple(found)
        return names

    def _values(self) -> tuple[Any, ...]:
        return tuple([getattr(self, name) for name in self.field_names()])

    def replace(self, **changes: Any) -> Self:
        """A new record with ``changes`` (as ``dataclasses.replace``)."""
        return type(self)(**{**dict(zip(self.field_names(), self._values())), **changes})

    def __eq__(self, other: object) -> bool:
        if other.__class__ is not self.__class__:
            return NotImplemented
        return self._values() == other._values()

    def __repr__(self) -> str:
        fields = ", ".join(f"{name}={getattr(self, name)!r}" for name in self.field_names())
        return f"{type(self).__qualname__}({fields})"

    def __reduce__(self) -> tuple[Any, ...]:
        # copy and pickle through __init__ (a frozen record refuses setattr)
        return type(self), self._values()


@dataclass_transform(eq_default=False)
class Record(_Fields):
    """A mutable record: eq and repr over its fields, unhashable (see the module docstring)."""

    __slots__ = ()
    __hash__ = None  # type: ignore[assignment]  # mutable, as a dataclass with eq


@dataclass_transform(eq_default=False, frozen_default=True)
class FrozenRecord(_Fields):
    """An immutable, hashable record (see the module docstring)."""

    __slots__ = ()

    def __hash__(self) -> int:
        return hash(self._values())

    def __setattr__(self, name: str, value: Any) -> None:
        raise FrozenInstanceError(f"cannot assign to field {name!r}")

    def __delattr__(self, name: str) -> None:
        raise FrozenInstanceError(f"cannot delete field {name!r}")
