"""``benchmarks/paper.py``: the sweeps it runs and how it judges the issue's
targets in ``paper.md`` (from made-up rows; the measuring is ``aiopdbp bench``'s)."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest

ROOT = Path(__file__).resolve().parent.parent


@pytest.fixture(scope="module")
def paper() -> ModuleType:
    spec = importlib.util.spec_from_file_location("paper_bench", ROOT / "benchmarks" / "paper.py")
    assert spec is not None and spec.loader is not None
    mod = importlib.util.module_from_spec(spec)
    sys.modules["paper_bench"] = mod
    spec.loader.exec_module(mod)
    return mod


def _row(test: str, ranks: int, size: int, impl: str, mbit: float) -> dict[str, Any]:
    mb = mbit / 8  # rows hold MB/s
    return {"test": test, "ranks": ranks, "size": size, "impl": impl, "trimmed_mean": mb,
            "median": mb, "min": mb, "max": mb, "unit": "MB/s", "gps_per_rank": 1}


def _report(paper: ModuleType, tmp_path: Path, rows: list[dict[str, Any]], line: float = 1e9) -> str:
    meta = {"line_rate_bps": line, "machine": {}, "transport": "t",
            "paper_run": {"env": "emulated-1gbit", "commands": ["aiopdbp bench ..."]}}
    return paper.write_report(tmp_path, {"meta": meta, "rows": rows}).read_text()


def test_full_sweeps_cover_the_papers_points(paper: ModuleType) -> None:
    s = paper.sweeps(False, ["aiopdbp-msg", "raw"])
    pat, ntn = s["patterns"], s["ntn"]
    assert pat[pat.index("-n") + 1] == "3,4,5"          # 1-to-N, N-to-1 at N = 2..4
    assert pat[pat.index("--tests") + 1] == "1toN,Nto1"
    assert {"64", "291", "1K", "4K", "64K"} <= set(pat[pat.index("--sizes") + 1].split(","))
    assert ntn[ntn.index("-n") + 1] == "2,3,4"
    assert ntn[ntn.index("--sizes") + 1] == "64,291,1K,4K"
    assert ntn[ntn.index("--impls") + 1] == "aiopdbp-msg,raw,alltoall"


def test_emulated_env_asks_bench_for_the_emulated_link(paper: ModuleType) -> None:
    assert paper.env_args("emulated", "1gbit") == ("emulated-1gbit", ["--emulate", "--link", "1gbit"])
    assert paper.env_args("tcp", "1gbit") == ("tcp", ["--tcp"])


def test_ntn_target_met_by_ratio_or_by_line_rate(paper: ModuleType, tmp_path: Path) -> None:
    rows = [_row("NtoN", 3, 64, "aiopdbp-msg", 90), _row("NtoN", 3, 64, "alltoall", 20),    # 4.5x
            _row("NtoN", 3, 4096, "aiopdbp-msg", 900), _row("NtoN", 3, 4096, "alltoall", 600)]  # 90 %
    md = _report(paper, tmp_path, rows)
    assert "NtoN 3x3 gp.send >= 3x Alltoall or >= 85 % of line rate at units <= 4 KiB: **met**" in md
    assert "3x3 gp.send: 3.00x" in md   # mean of the per-size ratios (4.5 and 1.5)


def test_ntn_target_missed_below_both_names_the_point(paper: ModuleType, tmp_path: Path) -> None:
    rows = [_row("NtoN", 4, 4096, "aiopdbp-msg", 500), _row("NtoN", 4, 4096, "alltoall", 250)]
    md = _report(paper, tmp_path, rows)
    assert "NtoN 4x4 gp.send" in md and "**missed** at 1 of 1: 4 KiB (2.00x, 50.0 %)" in md


def test_ntn_target_ignores_two_hosts(paper: ModuleType, tmp_path: Path) -> None:
    rows = [_row("NtoN", 2, 64, "aiopdbp-msg", 10), _row("NtoN", 2, 64, "alltoall", 10)]
    assert "NtoN 2x2 gp.send >=" not in _report(paper, tmp_path, rows)


def test_pattern_target_judges_only_units_of_64k_and_more(paper: ModuleType, tmp_path: Path) -> None:
    rows = [_row("1toN", 5, 4096, "aiopdbp-stream", 100),      # below 64 KiB: not judged
            _row("1toN", 5, 65536, "aiopdbp-stream", 900),
            _row("1toN", 5, 1 << 20, "aiopdbp-stream", 800)]
    md = _report(paper, tmp_path, rows)
    assert ("1toN send_stream >= 85 % of line rate at units >= 64 KiB: **missed** at 1 of 2: "
            "1-to-4 1 MiB (80.0 %)") in md
    assert "Ours, peak: 900 Mbit/s = 90.0 % of line rate (1-to-4, 64 KiB, send_stream)" in md


def test_figure_above_the_tbf_ceiling_is_flagged(paper: ModuleType, tmp_path: Path) -> None:
    md = _report(paper, tmp_path, [_row("Nto1", 3, 65536, "aiopdbp-msg", 990)])
    assert "990 (99.0 %) ⚠" in md


def test_without_line_rate_no_target_is_judged(paper: ModuleType, tmp_path: Path) -> None:
    rows = [_row("NtoN", 3, 64, "aiopdbp-msg", 10), _row("NtoN", 3, 64, "alltoall", 10)]
    md = _report(paper, tmp_path, rows, line=0.0)
    assert "**met**" not in md and "**missed**" not in md and "see paper-emulated" in md
