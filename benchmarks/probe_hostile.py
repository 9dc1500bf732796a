"""Hostile-input probe (issue 28): mutated and random frames through every
decoder, and one MPI job per kind of bad frame, timed to its end.

    python benchmarks/probe_hostile.py --mutations 20000 --random 2000 --out DIR

Prints one JSON object per part and writes ``DIR/fuzz.json`` and
``DIR/jobs.json``.  Fuzz: for each decoder, how many inputs decoded, raised
``ProtocolError``, or raised anything else (must be 0), the slowest input,
and whether a decoded unicode array failed later (``tolist()``, must be 0).
Jobs: ``tests/mpi_scripts/hostile.py`` under ``aiopdbp launch -n 2``: exit
status and seconds to the job's end (a hang is cut at ``--job-timeout``).
"""

from __future__ import annotations

import argparse
import json
import random
import subprocess
import sys
import time
from collections import Counter
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

from aiopdbp.errors import ProtocolError
from aiopdbp.wire import blocks as pure_blocks
from aiopdbp.wire.codec import decode, decode_split, encode_cdu, encode_split, split_array, split_target
from aiopdbp.wire.control import decode_control
from aiopdbp.wire.mesp import CDU, Kind
from aiopdbp.wire.shorts import encode_shorts

ROOT = Path(__file__).resolve().parent.parent
MODES = ("version", "length", "shorts", "dims", "split", "pickle", "random", "bye", "memory")


def _seeds() -> dict[str, list[bytes]]:
    arrays = [np.arange(12, dtype="<i4").reshape(3, 4), np.array(["ab", "\U0001F600"]), np.zeros((0, 3)),
              np.array(3.5), np.array([1 + 2j], dtype=">c16")]
    cdus = [CDU(Kind.SHORT, 1, (2,), b"hello"), CDU(Kind.SHORT, 1, (2, 3), None)] + \
           [CDU(Kind.SHORT, 1, (2,), a) for a in arrays]
    frames = [b"".join(bytes(p) for p in encode_cdu(c)) for c in cdus]
    shorts = [encode_shorts([(2, 1, Kind.SHORT, 0, b"x" * 10), (3, 1, Kind.SHORT, 7, np.array(["zz"]))]),
              encode_shorts([(2, 1, Kind.SHORT, 0, np.arange(5.0))] * 3)]
    splits = [encode_split(CDU(Kind.SHORT, 1, (2,), a)) for a in (np.zeros(4096, np.uint8), np.array(["q"] * 64))]
    from aiopdbp.wire.control import ByeMsg, StopMsg, StreamCreditMsg
    control = [ByeMsg(3).encode(), StopMsg("failed", 1, 0, "boom", "g1").encode(), StreamCreditMsg(1, 2, 8).encode()]
    return {"frames": frames, "shorts": shorts, "split_heads": [bytes(h) for h, _ in splits],
            "split_payloads": [bytes(p) for _, p in splits], "control": control}


def _touch(obj: Any) -> None:
    """What a user does with a decoded value: a unicode array must not fail here."""
    for item in obj if isinstance(obj, list) else [obj]:
        data = getattr(item, "data", item)
        if isinstance(data, np.ndarray):
            data.tolist()
            repr(data)


def _decoders(seeds: dict[str, list[bytes]]) -> dict[str, tuple[list[bytes], Callable[[bytes], Any]]]:
    from aiopdbp.wire import core
    heads, payloads = seeds["split_heads"], seeds["split_payloads"]
    out: dict[str, tuple[list[bytes], Callable[[bytes], Any]]] = {
        "decode": (seeds["frames"] + seeds["shorts"], lambda b: decode(b)),
        "decode(allow_pickle)": (seeds["frames"], lambda b: decode(b, allow_pickle=True)),
        "BlockReader (pure)": (seeds["shorts"], lambda b: pure_blocks.BlockReader().read(b)),
        "decode_control": (seeds["control"], lambda b: decode_control(memoryview(b))),
        "split_target": (heads, lambda b: split_target(b)),
        "decode_split (payload mutated)": (payloads, lambda b: decode_split(heads[0], b)
                                            if len(b) == len(payloads[0]) else decode_split(heads[1], b)),
        "decode_split (head mutated)": (heads, lambda b: decode_split(b, payloads[0])),
        "split_array().array": (payloads, lambda b: (split_array(heads[1]) or split_array(heads[0])).array(b)
                                if len(b) >= 256 else None),
    }
    if core.BlockReader is not pure_blocks.BlockReader:
        out["BlockReader (compiled)"] = (seeds["shorts"], lambda b: core.BlockReader().read(b))
    return out


def _mutate(rng: random.Random, b: bytes) -> bytes:
    m = bytearray(b)
    op = rng.random()
    if op < 0.6 and m:
        for _ in range(rng.randint(1, 4)):
            m[rng.randrange(len(m))] = rng.randrange(256)
    elif op < 0.8:
        m = m[:rng.randrange(len(m) + 1)]
    else:
        m += rng.randbytes(rng.randint(1, 32))
    return bytes(m)


def fuzz(mutations: int, randoms: int, seed: int) -> dict[str, Any]:
    rng = random.Random(seed)
    result: dict[str, Any] = {}
    for name, (seeds, fn) in _decoders(_seeds()).items():
        if not seeds:
            continue
        counts: Counter[str] = Counter()
        slowest = 0.0
        for i in range(mutations + randoms):
            b = _mutate(rng, rng.choice(seeds)) if i < mutations else rng.randbytes(rng.randint(0, 512))
            t0 = time.perf_counter()
            try:
                got = fn(b)
            except ProtocolError:
                counts["ProtocolError"] += 1
            except Exception as exc:  # noqa: BLE001 -- the probe counts what escapes
                counts[f"other: {type(exc).__name__}"] += 1
            else:
                try:
                    _touch(got)
                    counts["decoded"] += 1
                except Exception as exc:  # noqa: BLE001
                    counts[f"fails later: {type(exc).__name__}"] += 1
            slowest = max(slowest, time.perf_counter() - t0)
        result[name] = {"inputs": mutations + randoms, **counts, "slowest_s": round(slowest, 4)}
    return result


def jobs(timeout: float) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for mode in MODES:
        t0 = time.monotonic()
        try:
            p = subprocess.run([sys.executable, "-m", "aiopdbp", "launch", "-n", "2",
                                str(ROOT / "tests/mpi_scripts/hostile.py"), mode],
                               capture_output=True, text=True, timeout=timeout, cwd=ROOT)
            rc, text = p.returncode, p.stdout + p.stderr
        except subprocess.TimeoutExpired as exc:
            rc, text = None, f"HUNG (cut at {timeout} s) {exc.stdout!r}"
        line = next((ln for ln in text.splitlines() if "aiopdbp: rank" in ln), text[-200:])
        out[mode] = {"rc": rc, "seconds": round(time.monotonic() - t0, 2), "report": line}
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--mutations", type=int, default=20000, help="mutated valid inputs per decoder")
    ap.add_argument("--random", type=int, default=2000, help="random inputs per decoder")
    ap.add_argument("--seed", type=int, default=28)
    ap.add_argument("--job-timeout", type=float, default=60.0)
    ap.add_argument("--no-jobs", action="store_true")
    ap.add_argument("--out", type=Path)
    a = ap.parse_args()
    parts = {"fuzz": fuzz(a.mutations, a.random, a.seed)}
    if not a.no_jobs:
        parts["jobs"] = jobs(a.job_timeout)
    for name, part in parts.items():
        print(json.dumps({name: part}, indent=1))
        if a.out is not None:
            a.out.mkdir(parents=True, exist_ok=True)
            (a.out / f"{name}.json").write_text(json.dumps(part, indent=1) + "\n")


if __name__ == "__main__":
    main()
