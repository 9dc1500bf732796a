from __future__ import annotations
import dataclasses, sys, enum
from typing import NamedTuple, Any, Protocol
import asyncio, numpy, uvloop
N, KIND = int(sys.argv[1]), sys.argv[2]
for _ in range(N):
    if KIND == "intenum":
        class E(enum.IntEnum):
            A = 1; B = 2; C = 3; D = 4; E_ = 5; F = 6; G = 7; H = 8; I = 9; J = 10
    elif KIND == "proto":
        class P(Protocol):
            def a(self, x: int) -> None: ...
            def b(self, x: int) -> None: ...
            def c(self, x: int) -> None: ...
            def d(self, x: int) -> None: ...
    elif KIND == "nt":
        class T(NamedTuple):
            a: int
            b: str
            c: int
            d: int
    elif KIND == "plaincls":
        class C:
            def a(self, x: int) -> None: ...
            def b(self, x: int) -> None: ...
            def c(self, x: int) -> None: ...
            def d(self, x: int) -> None: ...
    elif KIND == "mutdc":
        @dataclasses.dataclass(slots=True)
        class A:
            a: int
            b: str
            c: int
            d: int
