"""Medians and spreads of the raw outputs in this folder (see README.md)."""
import re
import statistics
import sys
from pathlib import Path

HERE = Path(__file__).parent


def med_spread(xs: list[float]) -> str:
    return f"median {statistics.median(xs):.3f} (range {min(xs):.3f}-{max(xs):.3f}, n={len(xs)})"


def inprocess() -> None:
    for size in (8, 65536, 16777216):
        per: dict[str, dict[str, list[float]]] = {}
        for f in sorted((HERE / "inprocess").glob(f"s{size}_r*_*.txt")):
            code = f.stem.rsplit("_", 1)[1]
            text = f.read_text()
            d = per.setdefault(code, {"numpy": [], "torch": [], "delta": [], "ratio": []})
            for kind in ("numpy", "torch"):
                m = re.search(rf"B {kind}\s+CPU us/RT: min\s+([\d.]+)", text)
                if m:
                    d[kind].append(float(m.group(1)))
            m = re.search(r"torch-numpy us/RT: min ([+-][\d.]+).*torch/numpy: min ([\d.]+)", text)
            if m:
                d["delta"].append(float(m.group(1)))
                d["ratio"].append(float(m.group(2)))
        for code, d in per.items():
            if d["numpy"]:
                print(f"in-process {size:>8} B {code:6s}: numpy min us/RT {med_spread(d['numpy'])}; "
                      f"torch-numpy us/RT {med_spread(d['delta'])}; torch/numpy {med_spread(d['ratio'])}")


def pingpong() -> None:
    rows: dict[tuple[str, str], list[float]] = {}
    for f in sorted((HERE / "pingpong_64K_16M").glob("r*_*.txt")):
        pl = f.stem.split("_")[1]
        for line in f.read_text().splitlines():
            cells = [c.strip() for c in line.split("|")]
            if len(cells) > 9 and cells[2] == "aiopdbp":
                rows.setdefault((cells[1], pl), []).append(float(cells[9]))  # x mpi4py bw, same run
    for size in ("64 KiB", "16 MiB"):
        n, t = rows.get((size, "numpy"), []), rows.get((size, "torch"), [])
        if n and t:
            print(f"pingpong {size}: aiopdbp/mpi4py bandwidth, numpy runs {med_spread(n)}; torch runs {med_spread(t)}; "
                  f"torch/numpy of the medians {statistics.median(t) / statistics.median(n):.3f}; "
                  f"per repeat pair {med_spread([b / a for a, b in zip(n, t)])}")


inprocess() if "pingpong" not in sys.argv else None
pingpong()
