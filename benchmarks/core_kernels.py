"""The compiled core against its pure-Python twin, kernel by kernel, in one process.

    python benchmarks/core_kernels.py [--repeat 7]

Times what the data path does per message in the core (aiopdbp.wire.blocks
and its compiled twin aiopdbp.wire.cblocks): reading a BPS frame of one
8-byte record, of 64 records, and of one small array; putting a short
record into a block; making a lone frame.  Best of ``--repeat`` runs of
many calls each, microseconds per call, and the ratio pure / compiled.
Both forms decode the same frames (checked before timing).
"""

from __future__ import annotations

import argparse
import importlib
import timeit
from types import ModuleType
from typing import Any, Callable

import numpy as np

from aiopdbp.wire import blocks as pure
from aiopdbp.wire.message import Message
from aiopdbp.wire.mesp import DEFAULT_LIMITS, Kind, MsgType
from aiopdbp.wire.payload import encode_payload
from aiopdbp.wire.shorts import encode_shorts

BPS = int(MsgType.BPS)


def kernels(core: ModuleType) -> dict[str, tuple[Callable[[], Any], int]]:
    one = memoryview(encode_shorts([(1, 2, Kind.SHORT, 0, b"x" * 8)]))
    many = memoryview(encode_shorts([(1 + i % 3, 2, Kind.SHORT, 0, b"x" * 64) for i in range(64)]))
    arr = np.arange(4, dtype=np.float32)
    encode_payload(arr, False, DEFAULT_LIMITS)
    small = memoryview(encode_shorts([(1, 2, Kind.SHORT, 0, arr)]))
    reader = core.BlockReader({2: "src"}, Message)
    writer = core.BlockWriter(32 << 10)
    block = memoryview(bytearray(64 << 10))
    data = b"x" * 8
    short = int(Kind.SHORT)

    def put64() -> None:
        writer.open(block, BPS)
        for _ in range(64):
            writer.put_short(1, 2, 0, short, data, b"", False)
        writer.close()

    return {
        "read 1 record of 8 B": (lambda: reader.read(one), 20000),
        "read 64 records of 64 B": (lambda: reader.read(many), 1000),
        "read 1 small array": (lambda: reader.read(small), 20000),
        "put 64 short records (per record)": (put64, 500),
        "lone frame of 8 B": (lambda: writer.put_short(1, 2, 0, short, data, b"", True), 20000),
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--repeat", type=int, default=7)
    ns = ap.parse_args()
    try:
        compiled: ModuleType | None = importlib.import_module("aiopdbp.wire.cblocks")
    except ImportError:
        compiled = None
        print("the compiled core is not built: pure-Python figures only")
    forms = {"pure": pure, **({"compiled": compiled} if compiled is not None else {})}
    results: dict[str, dict[str, float]] = {}
    for form, core in forms.items():
        for name, (fn, number) in kernels(core).items():
            per = 64 if name.startswith("put 64") else 1
            best = min(timeit.repeat(fn, number=number, repeat=ns.repeat)) / number / per
            results.setdefault(name, {})[form] = best * 1e6
    print("| kernel | pure (us) | compiled (us) | pure / compiled |")
    print("|---|---|---|---|")
    for name, row in results.items():
        p, c = row["pure"], row.get("compiled")
        cs = "-" if c is None else f"{c:.3f}"
        ratio = "-" if c is None else f"{p / c:.1f}x"
        print(f"| {name} | {p:.3f} | {cs} | {ratio} |")


if __name__ == "__main__":
    main()
