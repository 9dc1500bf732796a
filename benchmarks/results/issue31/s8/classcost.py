"""Instructions to make N classes of one kind after numpy/asyncio/uvloop are imported:
valgrind --tool=cachegrind --cache-sim=no python classcost.py N KIND, against N=0.
KIND: frozen_slots, slots, nt (NamedTuple), frozen_slots_noeq (repr=False, eq=False),
slots_noeq (repr=False, eq=False).  4 fields, a docstring, string annotations."""
from __future__ import annotations

import dataclasses
import sys
from typing import NamedTuple

import asyncio, numpy, uvloop  # noqa: E401,F401  (the floor a rank has imported before)

N, KIND = int(sys.argv[1]), sys.argv[2]
OPTS = {"frozen_slots": dict(frozen=True, slots=True), "slots": dict(slots=True),
        "frozen_slots_noeq": dict(frozen=True, slots=True, repr=False, eq=False),
        "slots_noeq": dict(slots=True, repr=False, eq=False)}
for _ in range(N):
    if KIND == "nt":
        class B(NamedTuple):
            """doc"""
            a: int
            b: str
            c: int
            d: int
    else:
        @dataclasses.dataclass(**OPTS[KIND])  # type: ignore[call-overload]
        class A:
            """doc"""
            a: int
            b: str
            c: int
            d: int
