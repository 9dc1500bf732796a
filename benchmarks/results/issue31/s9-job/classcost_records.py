from __future__ import annotations
import dataclasses, sys
from typing import NamedTuple, Any
import asyncio, numpy, uvloop
N, KIND = int(sys.argv[1]), sys.argv[2]
class Base:
    __slots__ = ()
    def __setattr__(self, name: str, value: Any) -> None:
        raise dataclasses.FrozenInstanceError(name)
_set = object.__setattr__
for _ in range(N):
    if KIND == "plain":
        class A(Base):
            """doc"""
            __slots__ = ("a", "b", "c", "d")
            a: int
            b: str
            c: int
            d: int
            def __init__(self, a: int, b: str, c: int, d: int) -> None:
                _set(self, "a", a); _set(self, "b", b); _set(self, "c", c); _set(self, "d", d)
    elif KIND == "frozen_slots_noeq":
        @dataclasses.dataclass(frozen=True, slots=True, repr=False, eq=False)
        class A:
            """doc"""
            a: int
            b: str
            c: int
            d: int
