"""``aiopdbp bench scale``: its arithmetic, its in-process cluster and a 2-rank run."""

from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from aiopdbp.bench.scale import compile_sources, median_summary, phase_rows, slope, summarise_job
from aiopdbp.bench.scale_job import cluster_main, registration_messages
from tests.mpirun import REPO_ROOT, requires_mpi


def test_slope_of_a_line_is_its_gradient() -> None:
    assert slope([3, 7, 15, 31], [10 + 0.5 * x for x in (3, 7, 15, 31)]) == pytest.approx(0.5)


def test_slope_of_one_point_is_zero() -> None:
    assert slope([3], [10]) == 0.0


def test_summarise_job_gives_rank_0_and_the_maximum_over_the_others() -> None:
    recs = [{"rank": r, "open_s": o, "rss_peak_kib": m} for r, o, m in
            ((0, 1.0, 500), (1, 0.5, 300), (2, 0.7, 200))]
    row = summarise_job(recs, wall=2.0)
    assert row["open_s"] == (1.0, 0.7)
    assert row["rss_peak_kib"] == (500, 300)
    assert row["wall_s"] == 2.0


def test_summarise_job_keeps_the_idle_round_trip_beside_the_cold_and_warm_ones() -> None:
    recs = [{"rank": 0, "first_rtt_s": 0.004, "warm_rtt_s": 0.0004, "idle_rtt_s": 0.002},
            {"rank": 1, "first_rtt_s": 0.0, "warm_rtt_s": 0.0}]
    row = summarise_job(recs, wall=2.0)
    assert (row["first_rtt_s"], row["warm_rtt_s"], row["idle_rtt_s"]) == (0.004, 0.0004, 0.002)


def test_median_summary_takes_each_figures_median_over_the_repeats() -> None:
    rows = [{"wall_s": w, "rss_peak_kib": (r0, mx)} for w, r0, mx in
            ((3.0, 500, 310), (1.0, 900, 300), (2.0, 510, 400))]
    assert median_summary(rows) == {"wall_s": 2.0, "rss_peak_kib": (510, 310)}


def test_phase_rows_give_rank_0_and_the_latest_other_end_and_the_cpu_of_each_phase() -> None:
    recs = [{"rank": 0, "phases": {"main": [1.0, 0.2], "init": [2.0, 0.25]}},
            {"rank": 1, "phases": {"main": [1.5, 0.3], "init": [2.5, 0.4]}},
            {"rank": 2, "phases": {"main": [1.2, 0.1], "init": [3.0, 0.3]}}]
    (main, e0, em, c0, cm), (init, i0, im, d0, dm) = phase_rows(recs)
    assert (main, e0, em, c0, cm) == ("main", 1.0, 1.5, 0.2, 0.3)
    assert (init, i0, im) == ("init", 2.0, 3.0)
    assert (d0, dm) == (pytest.approx(0.05), pytest.approx(0.2))


def test_compile_sources_writes_missing_and_stale_bytecode_once(tmp_path: Path) -> None:
    src = tmp_path / "pkg" / "mod.py"
    src.parent.mkdir()
    src.write_text("X = 1\n", encoding="utf-8")
    cached = Path(importlib.util.cache_from_source(str(src)))
    assert compile_sources(tmp_path) == (1, 0) and cached.exists()
    assert compile_sources(tmp_path) == (0, 0)          # up to date: left alone
    later = cached.stat().st_mtime + 10
    os.utime(src, (later, later))                       # the source edited since
    assert compile_sources(tmp_path) == (1, 0)


def test_registration_messages_count_only_the_table_kinds() -> None:
    sent = {1: {"TableMsg": 3, "CreditMsg": 9}, 2: {"ARMsg": 1, "data": 40}}
    assert registration_messages(sent) == 4


async def test_cluster_program_registers_every_node_and_passes_the_ring(tmp_path: Path) -> None:
    out = tmp_path / "c.json"
    await cluster_main(4, out)
    rec = json.loads(out.read_text(encoding="utf-8"))
    assert rec["size"] == 4 and rec["ring_s"] > 0
    # every registration costs messages; the master sends only those of the names it is home of
    assert rec["registration_msgs"] >= 1 and rec["master_registration_msgs"] < rec["registration_msgs"]


@requires_mpi
@pytest.mark.timeout(120)
def test_bench_scale_runs_aiopdbp_and_the_raw_twin_in_the_same_run(tmp_path: Path) -> None:
    r = subprocess.run([sys.executable, "-m", "aiopdbp", "bench", "scale", "-n", "2",
                        "--patterns", "ring", "--cluster", "", "--out", str(tmp_path)],
                       cwd=REPO_ROOT, capture_output=True, text=True, timeout=110)
    assert r.returncode == 0, r.stdout + r.stderr
    doc = json.loads((tmp_path / "scale.json").read_text(encoding="utf-8"))
    (row,) = doc["mpi"]
    assert len(row["ranks"]["aiopdbp"]) == 2 and len(row["ranks"]["raw"]) == 2
    assert row["aiopdbp"]["rss_peak_kib"][0] > 0 and row["raw"]["rss_peak_kib"][0] > 0
    assert "slopes per peer, ring" in r.stdout
    # every rank stamped its phases, in order, from the launch
    for impl, first, last in (("aiopdbp", "main", "closed"), ("raw", "main", "pattern")):
        for rec in row["ranks"][impl]:
            ends = [end for end, _ in rec["phases"].values()]
            assert list(rec["phases"])[0] == first and list(rec["phases"])[-1] == last
            assert 0 < ends[0] and ends == sorted(ends), rec["phases"]


@requires_mpi
@pytest.mark.timeout(120)
def test_bench_scale_idle_times_the_pairs_round_trip_after_silence_beside_cold_and_warm(tmp_path: Path) -> None:
    r = subprocess.run([sys.executable, "-m", "aiopdbp", "bench", "scale", "-n", "2", "--idle", "0.05",
                        "--patterns", "ring", "--cluster", "", "--out", str(tmp_path)],
                       cwd=REPO_ROOT, capture_output=True, text=True, timeout=110)
    assert r.returncode == 0, r.stdout + r.stderr
    (row,) = json.loads((tmp_path / "scale.json").read_text(encoding="utf-8"))["mpi"]
    assert row["aiopdbp"]["idle_rtt_s"] > 0 and "x idle)" in r.stdout
    assert "idle" in row["ranks"]["aiopdbp"][0]["phases"]
