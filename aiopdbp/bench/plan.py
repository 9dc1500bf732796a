"""What a benchmark job runs: options, the cases of each test, their impls.

No MPI here: the command line is parsed (and checked) before any job starts.

A *case* is one (test, unit size) point with its volume; every case runs
each of its implementations ``warmup`` times unmeasured, then ``repeat``
times measured, the implementations interleaved (their order rotates with
the repeat) so machine noise hits them alike.
"""

from __future__ import annotations

import argparse
import re
from dataclasses import dataclass, field

from aiopdbp.bench.workload import IMPLS, PATTERNS, TESTS, window_for
from aiopdbp.env import RANK_PREFIX

__all__ = ["BENCH_ENV", 
    "DEFAULT_SIZES",
    "QUICK_SIZES",
    "Case",
    "Options",
    "cases",
    "impls_for",
    "parse_rate",
    "parse_size",
    "parse_sizes",
]

#: the environment of every benchmark job: rank 0 prints the tables, so its
#: lines carry no ``[rank]`` prefix (a benchmark's ranks run their own loop,
#: which a node adopts as it would aiopdbp.run's)
BENCH_ENV = {RANK_PREFIX: "0"}

MiB = 1 << 20
#: the paper's unit packet sizes: 64 B .. 4 MiB, with its 291 B
DEFAULT_SIZES = (64, 291, 1024, 4096, 16384, 65536, 262144, 1 << 20, 4 << 20)
QUICK_SIZES = (64, 291, 4096, 65536)

_UNITS = {"": 1, "b": 1, "k": 1 << 10, "kb": 1 << 10, "kib": 1 << 10, "m": MiB, "mb": MiB,
          "mib": MiB, "g": 1 << 30, "gb": 1 << 30, "gib": 1 << 30}


def parse_size(text: str) -> int:
    """``"291"`` -> 291, ``"4K"``/``"4KiB"`` -> 4096, ``"4M"`` -> 4194304 (binary units)."""
    m = re.fullmatch(r"\s*(\d+(?:\.\d+)?)\s*([a-zA-Z]*)\s*", text)
    if not m or m.group(2).lower() not in _UNITS:
        raise ValueError(f"not a size: {text!r} (examples: 291, 4K, 64KiB, 4M)")
    n = int(float(m.group(1)) * _UNITS[m.group(2).lower()])
    if n < 1:
        raise ValueError(f"size must be >= 1 byte: {text!r}")
    return n


def parse_sizes(text: str) -> tuple[int, ...]:
    """A comma-separated list of sizes, in the given order, without repeats."""
    out: list[int] = []
    for part in text.split(","):
        if part.strip():
            n = parse_size(part)
            if n not in out:
                out.append(n)
    if not out:
        raise ValueError("empty size list")
    return tuple(out)


def parse_ranks(text: str) -> list[int]:
    """``-n``: one rank count or a list ``2,3,4`` (each at least 2)."""
    try:
        out = [int(x) for x in text.split(",") if x.strip()]
    except ValueError:
        raise argparse.ArgumentTypeError(f"-n wants N or a list N1,N2,... (got {text!r})") from None
    if not out or min(out) < 2:
        raise argparse.ArgumentTypeError("every rank count must be >= 2")
    return out


def parse_rate(text: str) -> float:
    """A line rate in bit/s: ``"1gbit"``, ``"100mbit"``, ``"10G"``, ``"1e9"``."""
    m = re.fullmatch(r"\s*(\d+(?:\.\d+)?(?:e\d+)?)\s*([kmgt]?)(?:bit|b|bps|bit/s)?\s*", text.lower())
    if not m:
        raise ValueError(f"not a line rate: {text!r} (examples: 1gbit, 100mbit, 10G)")
    return float(m.group(1)) * {"": 1, "k": 1e3, "m": 1e6, "g": 1e9, "t": 1e12}[m.group(2)]


@dataclass
class Options:
    """Everything a job needs from the command line (see ``aiopdbp bench -h``)."""

    tests: tuple[str, ...] = TESTS
    sizes: tuple[int, ...] = DEFAULT_SIZES      #: patterns and bw
    lat_sizes: tuple[int, ...] = (8,)          #: `--tests latency`: pingpong sizes
    rate_sizes: tuple[int, ...] = (64,)
    bw_sizes: tuple[int, ...] = (65536, 1 << 20, 4 << 20)
    impls: tuple[str, ...] = IMPLS
    gps_per_rank: int = 1
    repeat: int = 5
    warmup: int = 1
    bytes_per_flow: int = 32 * MiB
    min_units: int = 8
    max_units: int = 20000
    lat_iters: int = 2000
    rate_units: int = 100000
    window: int = 64
    stream_recv: str = "iter"                   #: "iter" (async for) or "read"
    timeout: float = 300.0
    out: str = ""
    plots: bool = True
    profile: bool = False
    profile_impls: tuple[str, ...] = ("aiopdbp-msg", "aiopdbp-stream")
    inject_fault: str = ""
    link: str = ""
    line_rate: float = 0.0                      #: bit/s, 0 = unknown
    seed: int = 291
    uvloop: bool = True
    quick: bool = False
    command: list[str] = field(default_factory=list)

    def apply_quick(self) -> None:
        """The quick suite: every test, few sizes, small volumes, 3 repeats."""
        self.quick = True
        self.sizes, self.bw_sizes = QUICK_SIZES, (65536,)
        self.repeat, self.warmup = 3, 1
        self.bytes_per_flow, self.max_units, self.min_units = MiB, 2000, 8
        self.lat_iters, self.rate_units = 300, 4000

    def check(self) -> None:
        """Refuse inconsistent options with a clear ``ValueError``."""
        bad = [t for t in self.tests if t not in TESTS]
        if bad:
            raise ValueError(f"unknown test(s) {', '.join(bad)}; choose from {', '.join(TESTS)}")
        bad = [i for i in (*self.impls, *self.profile_impls) if i not in IMPLS]
        if bad:
            raise ValueError(f"unknown implementation(s) {', '.join(bad)}; choose from {', '.join(IMPLS)}")
        if self.inject_fault and self.inject_fault not in IMPLS:
            raise ValueError(f"--inject-fault wants one of {', '.join(IMPLS)}")
        if self.inject_fault and self.inject_fault not in self.impls:
            raise ValueError(f"--inject-fault {self.inject_fault}: that implementation is not selected")
        if self.stream_recv not in ("iter", "read"):
            raise ValueError("--stream-recv is 'iter' or 'read'")
        for name in ("gps_per_rank", "repeat", "min_units", "max_units", "lat_iters",
                     "rate_units", "window", "bytes_per_flow"):
            if getattr(self, name) < 1:
                raise ValueError(f"--{name.replace('_', '-')} must be >= 1")
        if self.warmup < 0 or self.timeout <= 0:
            raise ValueError("--warmup must be >= 0 and --timeout > 0")
        if self.min_units > self.max_units:
            raise ValueError("--min-units must not exceed --max-units")


@dataclass(frozen=True)
class Case:
    """One point of a sweep: a test at one unit size with its volume."""

    test: str
    size: int
    units: int   #: bw: windows; rate/patterns: units per flow
    window: int  #: units per raw window (and per bw window)

    @property
    def key(self) -> str:
        return f"{self.test} {self.size} B"


def impls_for(test: str, selected: tuple[str, ...]) -> list[str]:
    """The implementations that run ``test``, in :data:`IMPLS` order."""
    ok = {"aiopdbp-msg", "raw", "floor", "floor64k"}
    if test in PATTERNS:
        ok.add("aiopdbp-stream")
    if test == "NtoN":
        ok.add("alltoall")
    return [i for i in IMPLS if i in ok and i in selected]


def cases(opts: Options) -> list[Case]:
    """Every case of the job, test by test, sizes in the given order."""
    out: list[Case] = []
    for test in opts.tests:
        if not impls_for(test, opts.impls):
            continue
        if test == "rate":
            out += [Case(test, s, opts.rate_units, window_for(s, opts.window)) for s in opts.rate_sizes]
        elif test == "bw":
            for s in opts.bw_sizes:
                w = window_for(s, opts.window)
                out.append(Case(test, s, max(2, opts.bytes_per_flow // (w * s)), w))
        else:
            for s in opts.sizes:
                units = max(opts.min_units, min(opts.max_units, opts.bytes_per_flow // s))
                out.append(Case(test, s, units, window_for(s, opts.window)))
    return out
