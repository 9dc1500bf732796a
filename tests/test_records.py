"""Typed records (aiopdbp.records): a frozen record behaves as a frozen slots
dataclass, a mutable one as a slots dataclass with eq, and every record class
on a rank's path names the same fields, in the same order, in its
annotations, its ``__slots__`` and its ``__init__``."""

from __future__ import annotations

import copy
import dataclasses
import inspect
import pickle
import typing

import pytest

import aiopdbp.runtime.node  # noqa: F401  (a rank's modules: their record classes exist)
from aiopdbp.records import FrozenRecord, Record, init_field

pytestmark = pytest.mark.timeout(60)


class _Point(FrozenRecord):
    __slots__ = ("x", "y")
    x: int
    y: list[int] | int

    def __init__(self, x: int, y: list[int] | int = 0) -> None:
        init_field(self, "x", x)
        init_field(self, "y", y)


class _Point3(_Point):
    __slots__ = ("z",)
    z: str

    def __init__(self, x: int, y: list[int] | int, z: str) -> None:
        super().__init__(x, y)
        init_field(self, "z", z)


class _Cell(Record):
    __slots__ = ("v",)
    v: int

    def __init__(self, v: int) -> None:
        self.v = v


def _subclasses(cls: type) -> list[type]:
    out = []
    for sub in cls.__subclasses__():
        out += [sub, *_subclasses(sub)]
    return out


def test_a_frozen_record_compares_hashes_prints_and_copies_as_a_frozen_dataclass() -> None:
    p = _Point(1, 2)
    assert p == _Point(1, 2) and p != _Point(1, 3) and p != (1, 2) and p != _Point3(1, 2, "")
    assert hash(p) == hash((1, 2)) and repr(p) == "_Point(x=1, y=2)"
    assert copy.copy(p) == p and copy.deepcopy(p) == p and pickle.loads(pickle.dumps(p)) == p
    assert repr(_Point3(1, 2, "a")) == "_Point3(x=1, y=2, z='a')"
    with pytest.raises(TypeError):
        hash(_Point(1, [2]))   # a list field: unhashable, as the dataclass was


def test_replace_makes_a_new_record_with_the_changes() -> None:
    p = _Point3(1, 2, "a")
    assert p.replace(z="b") == _Point3(1, 2, "b") and p == _Point3(1, 2, "a")
    with pytest.raises(TypeError):
        p.replace(w=1)


def test_a_frozen_record_refuses_assignment_and_deletion() -> None:
    p = _Point(1)
    with pytest.raises(dataclasses.FrozenInstanceError):
        p.x = 2  # type: ignore[misc]
    with pytest.raises(dataclasses.FrozenInstanceError):
        del p.x  # type: ignore[misc]
    with pytest.raises(dataclasses.FrozenInstanceError):
        p.other = 1  # type: ignore[attr-defined]
    assert p.x == 1


def test_a_mutable_record_compares_and_prints_but_is_unhashable() -> None:
    c = _Cell(1)
    c.v = 2
    assert c == _Cell(2) and c != _Cell(1) and repr(c) == "_Cell(v=2)" and copy.copy(c) == c
    with pytest.raises(TypeError):
        hash(c)
    with pytest.raises(AttributeError):
        c.w = 1  # type: ignore[attr-defined]


@pytest.mark.parametrize("cls", [c for c in _subclasses(Record) + _subclasses(FrozenRecord)
                                 if c.__module__.startswith("aiopdbp.")], ids=lambda c: c.__qualname__)
def test_every_record_names_its_fields_alike_in_annotations_slots_and_init(cls: type) -> None:
    hints = {}
    for klass in reversed(cls.__mro__):
        for name, hint in klass.__dict__.get("__annotations__", {}).items():
            if not str(hint).startswith(("ClassVar", "typing.ClassVar")) and hint is not typing.ClassVar:
                hints[name] = hint
    fields = cls.field_names()  # type: ignore[attr-defined]
    assert list(hints) == list(fields)
    if fields:
        params = list(inspect.signature(cls.__init__).parameters)[1:]
        assert params == list(fields)
