"""``aiopdbp bench``: its statistics, payload checks, outputs and failure modes.

The unit tests need no MPI.  The MPI tests run the real harness (``aiopdbp
bench --quick`` launching itself on 2 ranks, and jobs under ``mpiexec``) and
check what it wrote and that a corrupted byte fails the run -- never its speed.
"""

from __future__ import annotations

import csv
import json
import math
import os
import re
import shutil
import signal
import subprocess
import sys
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from aiopdbp.bench import cli as bench_cli
from aiopdbp.bench.plan import Options, cases, impls_for, parse_rate, parse_size, parse_sizes
from aiopdbp.bench.report import build_rows, build_summary, write_csv, write_json
from aiopdbp.bench.stats import mean_of_ratios, merge_results, speed_ratio, summarize, trimmed_mean
from aiopdbp.bench.workload import Checker, Flow, Ring, flows, matches
from aiopdbp.launch.emulate import STATE_DIR, requirements_problems

from tests.mpirun import REPO_ROOT, requires_mpi, run_mpi

_LAUNCHER_VARS = ("AIOPDBP_TRANSPORT", "PMI_FD", "PMI_RANK", "PMI_SIZE", "PMI_PORT",
                  "MPI_LOCALNRANKS", "MPI_LOCALRANKID", "OMPI_COMM_WORLD_SIZE", "PMIX_RANK")


# ================================================================= statistics
def test_trimmed_mean_drops_one_largest_and_one_smallest_run() -> None:
    assert trimmed_mean([10.0, 1.0, 3.0, 2.0, 100.0]) == pytest.approx(5.0)


def test_trimmed_mean_of_two_runs_is_their_mean() -> None:
    assert trimmed_mean([1.0, 4.0]) == 2.5


def test_trimmed_mean_refuses_no_runs() -> None:
    with pytest.raises(ValueError):
        trimmed_mean([])


def test_summarize_gives_median_quartiles_and_spread() -> None:
    s = summarize([4.0, 1.0, 3.0, 2.0, 5.0])
    assert (s.n, s.median, s.min, s.max, s.q1, s.q3) == (5, 3.0, 1.0, 5.0, 2.0, 4.0)
    assert s.trimmed_mean == 3.0 and s.iqr == 2.0 and s.spread == pytest.approx(4 / 3)


def test_speed_ratio_inverts_latencies() -> None:
    assert speed_ratio(20.0, 10.0, lower_is_better=False) == 2.0
    assert speed_ratio(20.0, 10.0, lower_is_better=True) == 0.5
    assert math.isnan(speed_ratio(1.0, 0.0, lower_is_better=False))


def test_mean_of_ratios_averages_the_per_size_ratios() -> None:
    # the paper's Fig. 11 summary: ratio per packet size, then their mean
    assert mean_of_ratios([(10.0, 1.0), (4.0, 2.0), (3.0, 3.0)]) == pytest.approx((10 + 2 + 1) / 3)


# ==================================================================== parsing
@pytest.mark.parametrize("text, n", [("291", 291), ("4K", 4096), ("64KiB", 65536), ("4M", 4 << 20)])
def test_parse_size_reads_binary_units(text: str, n: int) -> None:
    assert parse_size(text) == n


def test_parse_size_refuses_garbage() -> None:
    with pytest.raises(ValueError, match="not a size"):
        parse_size("lots")


def test_parse_sizes_keeps_order_and_drops_repeats() -> None:
    assert parse_sizes("4K,64,4096,291") == (4096, 64, 291)


def test_parse_rate_reads_gigabit() -> None:
    assert parse_rate("1gbit") == 1e9 and parse_rate("100mbit") == 1e8


def test_cli_rejects_an_unknown_test_with_exit_2(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exc:
        bench_cli.main(["--tests", "NtoM"])
    assert exc.value.code == 2
    assert "choose from" in capsys.readouterr().err


def test_cli_rejects_a_fault_in_an_unselected_impl(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exc:
        bench_cli.main(["--impls", "raw", "--inject-fault", "floor"])
    assert exc.value.code == 2
    assert "not selected" in capsys.readouterr().err


def test_main_cli_hands_bench_arguments_to_the_harness(capsys: pytest.CaptureFixture[str]) -> None:
    from aiopdbp.cli import main

    with pytest.raises(SystemExit) as exc:
        main(["bench", "--sizes", "lots"])
    assert exc.value.code == 2
    assert "aiopdbp bench" in capsys.readouterr().err


def test_child_argv_drops_only_the_launch_options() -> None:
    argv = ["-n", "2,3", "--tcp", "--quick", "--out", "x", "-n4", "--ranks=2", "--sizes", "64"]
    assert bench_cli.child_argv(argv) == ["--quick", "--sizes", "64"]


def test_child_argv_with_emulate_drops_the_cluster_options() -> None:
    argv = ["-n", "2,3", "--emulate", "--link", "100mbit", "--hosts", "2", "--link=1gbit",
            "--line-rate", "1gbit", "--sizes", "64"]
    assert bench_cli.child_argv(argv, emulate=True) == ["--line-rate", "1gbit", "--sizes", "64"]


def test_child_argv_without_emulate_keeps_the_link_label() -> None:
    assert bench_cli.child_argv(["--link", "25GbE", "--quick"]) == ["--link", "25GbE", "--quick"]


def test_emulated_link_labels_rows_with_the_shaped_rate() -> None:
    env = {"AIOPDBP_EMULATE_JOB": "abc123", "AIOPDBP_EMULATE_LINK_BPS": "1000000000"}
    assert bench_cli.emulated_link(env, None, 0.0) == ("emulated 1gbit (tbf, no added delay)", 1e9)


def test_emulated_link_keeps_explicit_label_and_line_rate() -> None:
    env = {"AIOPDBP_EMULATE_JOB": "abc123", "AIOPDBP_EMULATE_LINK_BPS": "100000000"}
    assert bench_cli.emulated_link(env, "lab", 2e8) == ("lab", 2e8)


def test_emulated_link_unshaped_has_no_line_rate() -> None:
    env = {"AIOPDBP_EMULATE_JOB": "abc123", "AIOPDBP_EMULATE_LINK_BPS": "0"}
    label, rate = bench_cli.emulated_link(env, None, 0.0)
    assert "unshaped" in label and rate == 0.0


def test_emulated_link_outside_emulation_is_the_label() -> None:
    assert bench_cli.emulated_link({"AIOPDBP_BENCH_LINK": "x"}, None, 0.0) == ("x", 0.0)


def test_cli_rejects_hosts_without_emulate(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exc:
        bench_cli.main(["-n", "2", "--hosts", "2"])
    assert exc.value.code == 2
    assert "--hosts needs --emulate" in capsys.readouterr().err


def test_cli_rejects_a_bad_emulated_rate(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exc:
        bench_cli.main(["-n", "2", "--emulate", "--link", "fast"])
    assert exc.value.code == 2
    assert "bad link rate 'fast'" in capsys.readouterr().err


def test_quick_plan_covers_every_test_and_baseline() -> None:
    o = Options()
    o.apply_quick()
    tests = {c.test for c in cases(o)}
    assert tests == {"bw", "rate", "1toN", "Nto1", "NtoN"}  # latency: bench pingpong
    assert impls_for("NtoN", o.impls) == ["aiopdbp-msg", "aiopdbp-stream", "raw", "floor",
                                          "floor64k", "alltoall"]
    assert "alltoall" not in impls_for("1toN", o.impls)


# ============================================================ flows, payloads
def test_flows_of_n_to_n_are_n_times_n_minus_1_per_gp() -> None:
    fl = flows("NtoN", 4, gps_per_rank=2)
    assert len(fl) == 4 * 3 * 2 and all(f.src != f.dst for f in fl)


def test_flows_of_one_to_n_leave_rank_0() -> None:
    assert flows("1toN", 3) == [Flow(0, 1, 0), Flow(0, 2, 0)]
    assert flows("Nto1", 3) == [Flow(1, 0, 0), Flow(2, 0, 0)]


def test_ring_units_are_distinct_and_match_their_window() -> None:
    ring = Ring(291, 64)
    assert ring.count % 64 == 0 and len(set(ring.units)) == ring.count
    i = 128
    assert ring.expected_window(i, 3).tobytes() == b"".join(ring.unit(i + u) for u in range(3))


def test_corrupted_ring_differs_in_one_byte_of_one_unit() -> None:
    ring = Ring(64, 64)
    bad = ring.corrupted()
    diffs = [(j, sum(a != b for a, b in zip(u, v))) for j, (u, v) in enumerate(zip(ring.units, bad.units))
             if u != v]
    assert diffs == [(0, 1)]


@pytest.mark.parametrize("size", [64, 65536])
@pytest.mark.parametrize("kind", ["bytes", "bytearray", "memoryview", "ndarray"])
def test_matches_detects_one_wrong_byte(size: int, kind: str) -> None:
    want = bytes(np.random.default_rng(size).integers(0, 256, size, dtype=np.uint8))
    wrong = bytearray(want)
    wrong[size // 3] ^= 1
    wrap = {"bytes": bytes, "bytearray": bytearray, "memoryview": lambda b: memoryview(bytearray(b)),
            "ndarray": lambda b: np.frombuffer(bytes(b), dtype=np.uint8)}[kind]
    assert matches(wrap(want), want)
    assert not matches(wrap(wrong), want)


def test_checker_reports_missing_and_wrong_units() -> None:
    ring = Ring(64, 64)
    c = Checker(ring, "raw", rank=1)
    c.check("a", ring.unit(0))
    c.check("a", ring.unit(0))          # unit 1 expected: a duplicate is wrong
    c.expect_counts({"a": 3})
    assert c.bad == 2
    assert "unit 1" in c.errors[0] and "received 2 units, expected 3" in c.errors[1]


def test_checker_check_all_takes_a_window_of_flows_and_reports_each_bad_unit() -> None:
    ring = Ring(64, 64)
    count = ring.count
    c = Checker(ring, "aiopdbp-msg", rank=1)
    c.next["a"] = count - 1             # flow a's window wraps around the ring's end
    bad = bytearray(ring.unit(1))
    bad[5] ^= 1
    keys = ["a", "b", "a", "b", "a"]
    datas = [ring.unit(count - 1), ring.unit(0), ring.unit(0), bytes(bad), ring.unit(0)]
    c.check_all(keys, datas)            # b's unit 1 corrupt, a's unit count+1 a duplicate (unit 0 again)
    assert c.next == {"a": count + 2, "b": 2}
    assert c.bad == 2
    assert sorted(e.split(" (")[0] for e in c.errors) == [
        f"aiopdbp-msg: rank 1 flow from a unit {count + 1}", "aiopdbp-msg: rank 1 flow from b unit 1"]


@pytest.mark.parametrize("kind", ["bytes", "ndarray", "memoryview"])
def test_checker_check_run_compares_every_unit_of_any_buffer(kind: str) -> None:
    ring = Ring(64, 64)
    wrap = {"bytes": bytes, "memoryview": lambda b: memoryview(bytearray(b)),
            "ndarray": lambda b: np.frombuffer(bytes(b), dtype=np.uint8)}[kind]
    c = Checker(ring, "floor")
    c.check_run(0, [wrap(ring.unit(u)) for u in range(3)])
    assert c.bad == 0 and c.next == {0: 3}
    c.check_run(0, [wrap(ring.unit(3)), wrap(ring.unit(4)[:-1]), wrap(ring.unit(3))])   # short, then out of order
    assert c.bad == 2 and "unit 4" in c.errors[0] and "unit 5" in c.errors[1]


# ===================================================================== rows
def _runs(values: dict[str, list[float]], test: str = "NtoN", size: int = 64) -> list[dict[str, Any]]:
    return [{"test": test, "impl": impl, "size": size, "ranks": 2, "gps_per_rank": 1, "rep": i,
             "value": v, "units_per_flow": 10, "window": 64, "cpu_tx_us": None, "cpu_rx_us": None,
             "cpu_txrx_us": 2.0} for impl, vs in values.items() for i, v in enumerate(vs)]


def test_rows_carry_the_paper_statistic_and_ratios_to_each_baseline() -> None:
    runs = _runs({"aiopdbp-msg": [10.0, 30.0, 20.0, 1.0, 99.0], "alltoall": [5.0, 5.0, 5.0, 5.0, 5.0],
                  "raw": [40.0] * 5})
    rows = {r["impl"]: r for r in build_rows(runs, {"transport": "shm"})}
    ours = rows["aiopdbp-msg"]
    assert ours["trimmed_mean"] == pytest.approx(20.0) and ours["median"] == 20.0
    assert ours["vs_alltoall"] == pytest.approx(4.0) and ours["vs_raw"] == pytest.approx(0.5)
    assert ours["vs_floor"] is None and ours["payload"] == "bytes" and ours["transport"] == "shm"


def test_latency_ratio_is_baseline_latency_over_ours() -> None:
    rows = {r["impl"]: r for r in build_rows(_runs({"aiopdbp-msg": [20.0] * 3, "floor": [5.0] * 3},
                                                   test="latency", size=8), {})}
    assert rows["aiopdbp-msg"]["vs_floor"] == pytest.approx(0.25)


def test_summary_is_the_mean_of_per_size_ratios() -> None:
    runs = (_runs({"aiopdbp-msg": [10.0] * 3, "alltoall": [1.0] * 3}, size=64)
            + _runs({"aiopdbp-msg": [6.0] * 3, "alltoall": [3.0] * 3}, size=4096))
    s = build_summary(build_rows(runs, {}))
    assert s["NtoN n=2 k=1 aiopdbp-msg vs alltoall"]["mean_of_ratios"] == pytest.approx(6.0)


def _doc(ranks: int, cpu: str = "cpu") -> dict[str, Any]:
    runs = _runs({"aiopdbp-msg": [1.0, 2.0, 3.0]})
    for r in runs:
        r["ranks"] = ranks
    meta = {"aiopdbp": "0.1.0", "machine": {"cpu_model": cpu}, "ranks": ranks, "transport": "shm"}
    return {"meta": meta, "rows": build_rows(runs, meta), "runs": runs}


def _full_doc() -> dict[str, Any]:
    """Every test, every implementation, wide numbers, two rank counts."""
    runs = []
    for test, sizes in (("latency", [8]), ("bw", [65536]), ("rate", [64]), ("1toN", [64, 4194304]),
                        ("Nto1", [291]), ("NtoN", [64, 4096])):
        impls = ["aiopdbp-msg", "aiopdbp-stream", "raw", "floor", "floor64k"] + (["alltoall"] if test == "NtoN" else [])
        for size in sizes:
            for ranks in (2, 4):
                for r in _runs({i: [123456.789, 0.00123456, 98765.4321] for i in impls}, test=test, size=size):
                    r |= {"ranks": ranks, "cpu_txrx_us": None, "cpu_tx_us": 1234.5678, "cpu_rx_us": 0.0012345}
                    runs.append(r)
    meta = {"ranks": [2, 4], "transport": "tcp (UCX_TLS=tcp,self MPIR_CVAR_NOLOCAL=1)", "event_loop": "uvloop",
            "machine": {"mpi_library": "MPICH Version: 5.0.2 MPICH Release date: Fri Sep 25 20:45:26 2026",
                        "cpu_model": "AMD EPYC 9654 96-Core Processor", "cpu_usable": 192,
                        "kernel": "6.18.44-fc-v595"}}
    rows = build_rows(runs, meta)
    return {"meta": meta, "rows": rows, "summary": build_summary(rows)}


@pytest.mark.parametrize("rich", [True, False])
def test_printed_report_fits_100_columns(rich: bool, capsys: pytest.CaptureFixture[str],
                                         monkeypatch: pytest.MonkeyPatch) -> None:
    from aiopdbp.bench.report import print_report

    if rich:
        pytest.importorskip("rich")
    else:
        monkeypatch.setitem(sys.modules, "rich", None)     # the plain tables
    doc = _full_doc()
    print_report(doc, ["results: /a/rather/long/output/directory/bench.json, /a/rather/long/output/directory/"
                       "bench.csv", "plots: " + ", ".join(f"/out/dir/fig{i}_something.png" for i in range(6))])
    out = capsys.readouterr().out
    assert max(len(line) for line in out.splitlines()) <= 100, out
    for impl in ("aiopdbp-msg", "aiopdbp-stream", "floor64k", "alltoall"):
        assert impl in out
    assert "98,765" in out and "xa2a" in out and "bench.csv" in out


def test_merge_results_joins_jobs_of_a_rank_sweep() -> None:
    merged = merge_results([_doc(2), _doc(3)])
    assert [r["ranks"] for r in merged["rows"]] == [2, 3]
    assert merged["meta"]["ranks"] == [2, 3] and len(merged["meta"]["jobs"]) == 2
    assert len(merged["runs"]) == 6


def test_merge_results_refuses_two_machines() -> None:
    with pytest.raises(ValueError, match="machine"):
        merge_results([_doc(2), _doc(3, cpu="other")])


def test_merge_results_refuses_the_same_point_twice() -> None:
    with pytest.raises(ValueError, match="more than one job"):
        merge_results([_doc(2), _doc(2)])


def test_json_and_csv_hold_every_row(tmp_path: Path) -> None:
    doc = _doc(2)
    doc["rows"][0]["vs_raw"] = math.nan
    write_json(tmp_path / "b.json", doc)
    write_csv(tmp_path / "b.csv", doc["rows"], doc["meta"])
    back = json.loads((tmp_path / "b.json").read_text())
    assert back["rows"][0]["vs_raw"] is None              # NaN is not valid JSON
    with open(tmp_path / "b.csv", newline="") as f:
        rows = list(csv.DictReader(f))
    assert len(rows) == 1 and rows[0]["impl"] == "aiopdbp-msg" and rows[0]["cpu_model"] == "cpu"


def test_plots_are_skipped_with_a_note_without_matplotlib(tmp_path: Path,
                                                          monkeypatch: pytest.MonkeyPatch) -> None:
    from aiopdbp.bench.plots import write_plots

    monkeypatch.setitem(sys.modules, "matplotlib", None)   # import fails
    made, note = write_plots(tmp_path, _doc(2)["rows"], {})
    assert made == [] and "matplotlib is not installed" in note


# ======================================================================= MPI
def _env() -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k not in _LAUNCHER_VARS}
    env["PYTHONPATH"] = os.pathsep.join([str(REPO_ROOT), *filter(None, [env.get("PYTHONPATH")])])
    env["PYTHONUNBUFFERED"] = "1"
    return env


def _run_cli(args: list[str], timeout: float) -> subprocess.CompletedProcess[str]:
    """``python -m aiopdbp bench ARGS`` as a user runs it (it launches mpiexec
    itself); the whole process group is killed if it outlives ``timeout``."""
    cmd = [sys.executable, "-m", "aiopdbp", "bench", *args]
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            env=_env(), cwd=str(REPO_ROOT), start_new_session=True)
    try:
        out, err = proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        out, err = proc.communicate()
        pytest.fail(f"{' '.join(cmd)} timed out after {timeout} s\n{out}\n{err}", pytrace=False)
    return subprocess.CompletedProcess(cmd, proc.returncode, out, err)


QUICK_SMALL = ["--bytes-per-flow", "64K", "--max-units", "200", "--rate-units", "400"]


@pytest.fixture(scope="module")
def quick_run(tmp_path_factory: pytest.TempPathFactory) -> tuple[subprocess.CompletedProcess[str], Path]:
    out = tmp_path_factory.mktemp("bench-quick")
    # --quick's plan (every test, its sizes, impls, warm-up and 3 repeats) at a tenth of its
    # volumes: the tests check the rows, statistics, units and files, not the speed
    return _run_cli(["-n", "2", "--quick", *QUICK_SMALL, "--out", str(out)], timeout=240), out


@requires_mpi
@pytest.mark.mpi
@pytest.mark.timeout(300)
def test_quick_suite_runs_on_two_ranks_and_writes_results(quick_run: Any) -> None:
    r, out = quick_run
    assert r.returncode == 0, r.stdout + r.stderr
    doc = json.loads((out / "bench.json").read_text())
    meta = doc["meta"]
    assert meta["ranks"] == 2 and meta["transport"] == "shm"
    for key in ("cpu_model", "kernel", "cpu_count", "mpi_library", "mpi4py", "numpy", "aiopdbp"):
        assert meta["machine"].get(key), key
    got = {(r["test"], r["impl"], r["size"]) for r in doc["rows"]}
    want = {(c.test, i, c.size) for c in cases(_quick()) for i in impls_for(c.test, _quick().impls)}
    assert got == want


@requires_mpi
@pytest.mark.mpi
@pytest.mark.timeout(300)
def test_quick_suite_rows_are_the_statistics_of_their_runs(quick_run: Any) -> None:
    r, out = quick_run
    assert r.returncode == 0, r.stdout + r.stderr
    doc = json.loads((out / "bench.json").read_text())
    for row in doc["rows"]:
        vals = [x["value"] for x in doc["runs"] if (x["test"], x["impl"], x["size"])
                == (row["test"], row["impl"], row["size"])]
        assert len(vals) == 3 == row["n"]
        assert row["trimmed_mean"] == pytest.approx(trimmed_mean(vals))
        assert row["min"] <= row["median"] <= row["max"]


@requires_mpi
@pytest.mark.mpi
@pytest.mark.timeout(300)
def test_quick_suite_receivers_got_every_unit(quick_run: Any) -> None:
    r, out = quick_run
    assert r.returncode == 0, r.stdout + r.stderr
    doc = json.loads((out / "bench.json").read_text())
    for x in doc["runs"]:
        if x["test"] in ("1toN", "Nto1", "NtoN") and x["impl"] != "alltoall":
            nflows = len(flows(x["test"], 2))
            assert x["units_received"] == x["units_per_flow"] * nflows, x


@requires_mpi
@pytest.mark.mpi
@pytest.mark.timeout(300)
def test_quick_suite_writes_csv_and_plots(quick_run: Any) -> None:
    r, out = quick_run
    assert r.returncode == 0, r.stdout + r.stderr
    doc = json.loads((out / "bench.json").read_text())
    with open(out / "bench.csv", newline="") as f:
        rows = list(csv.DictReader(f))
    assert len(rows) == len(doc["rows"]) and {"transport", "mpi_library", "buffers"} <= set(rows[0])
    try:
        import matplotlib  # noqa: F401
    except ImportError:
        assert "plots skipped" in r.stdout
        return
    for name in ("fig8_1toN.png", "fig9_Nto1.png", "fig10_NtoN.png", "fig11_NtoN_vs_alltoall.png"):
        assert (out / name).read_bytes()[:8] == b"\x89PNG\r\n\x1a\n", name


def _quick() -> Options:
    o = Options()
    o.apply_quick()
    return o


@requires_mpi
@pytest.mark.mpi
@pytest.mark.timeout(120)
@pytest.mark.parametrize("impl", ["aiopdbp-msg", "aiopdbp-stream", "raw", "floor64k", "alltoall"])
def test_a_corrupted_byte_fails_the_run(impl: str, tmp_path: Path) -> None:
    r = run_mpi("-m", n=2, timeout=100, args=[
        "aiopdbp.bench", "--tests", "NtoN", "--sizes", "291", "--bytes-per-flow", "64K",
        "--repeat", "1", "--warmup", "0", "--inject-fault", impl, "--out", str(tmp_path)])
    assert r.returncode != 0
    assert "VERIFICATION FAILED" in r.stderr and impl in r.stderr
    assert not (tmp_path / "bench.json").exists()


@requires_mpi
@pytest.mark.mpi
@pytest.mark.timeout(200)
def test_a_rank_sweep_merges_one_job_per_rank_count(tmp_path: Path) -> None:
    r = _run_cli(["-n", "2,3", "--tests", "NtoN", "--sizes", "64", "--impls", "aiopdbp-msg,alltoall",
                  "--repeat", "1", "--warmup", "0", "--bytes-per-flow", "4K", "--no-plots",
                  "--out", str(tmp_path)], timeout=180)
    assert r.returncode == 0, r.stdout + r.stderr
    doc = json.loads((tmp_path / "bench.json").read_text())
    assert sorted({row["ranks"] for row in doc["rows"]}) == [2, 3]
    assert (tmp_path / "n2" / "bench.json").exists() and (tmp_path / "n3" / "bench.json").exists()
    assert "NtoN n=3 k=1 aiopdbp-msg vs alltoall" in doc["summary"]


# ========================================================== emulated cluster
_EMU_PROBLEMS = requirements_problems()
requires_emulation = pytest.mark.skipif(
    bool(_EMU_PROBLEMS), reason="emulated cluster unavailable: " + "; ".join(_EMU_PROBLEMS))


def _sh(*argv: str) -> str:
    return subprocess.run(argv, capture_output=True, text=True, check=True, timeout=30).stdout


def _leftovers(job: str) -> list[str]:
    """What the emulated job ``job`` left on the machine, read with ip/tc."""
    left = [n for n in _sh("ip", "netns", "list").split() if job in n]
    left += [d["ifname"] for d in json.loads(_sh("ip", "-j", "link", "show")) if job in d["ifname"]]
    left += [ln for ln in _sh("tc", "qdisc", "show").splitlines() if job in ln]
    left += [str(p) for p in STATE_DIR.glob(f"{job}.*")]
    return left


@requires_emulation
@requires_mpi
@pytest.mark.mpi
@pytest.mark.timeout(240)
def test_bench_on_emulated_cluster_labels_rows_and_leaves_nothing(tmp_path: Path) -> None:
    r = _run_cli(["-n", "2,3", "--emulate", "--tests", "1toN,NtoN", "--sizes", "4K",
                  "--impls", "aiopdbp-msg,raw", "--repeat", "1", "--warmup", "0",
                  "--bytes-per-flow", "256K", "--no-plots", "--out", str(tmp_path)], timeout=200)
    assert r.returncode == 0, r.stdout + r.stderr
    jobs = re.findall(r"emulated cluster (\w+): (\d) host\(s\)", r.stderr)
    assert [h for _, h in jobs] == ["2", "3"], r.stderr   # one cluster per rank count
    doc = json.loads((tmp_path / "bench.json").read_text())
    assert {(r["test"], r["ranks"]) for r in doc["rows"]} == {(t, n) for t in ("1toN", "NtoN")
                                                            for n in (2, 3)}
    for row in doc["rows"]:
        assert row["line_fraction"] == pytest.approx(row["median"] * 8e6 / 1e9)
        assert row["transport"].startswith(f"network ({row['ranks']} hosts)"), row["transport"]
        assert row["transport"].endswith("emulated 1gbit (tbf, no added delay)")
    for n in (2, 3):
        meta = json.loads((tmp_path / f"n{n}" / "bench.json").read_text())["meta"]
        assert meta["line_rate_bps"] == 1e9 and len(set(meta["hosts"])) == n
    for job, _ in jobs:
        assert _leftovers(job) == [], job


@pytest.mark.skipif(os.geteuid() != 0 or shutil.which("setpriv") is None,
                    reason="needs root and setpriv to drop capabilities")
def test_bench_emulate_without_capability_exits_2(tmp_path: Path) -> None:
    cmd = ["setpriv", "--bounding-set", "-net_admin,-sys_admin", "--", sys.executable, "-m",
           "aiopdbp", "bench", "-n", "2", "--emulate", "--quick", "--out", str(tmp_path)]
    r = subprocess.run(cmd, capture_output=True, text=True, env=_env(), cwd=str(REPO_ROOT),
                       timeout=60)
    assert r.returncode == 2, r.stdout + r.stderr
    assert "--emulate cannot run here" in r.stderr and "CAP_NET_ADMIN" in r.stderr
    assert not (tmp_path / "bench.json").exists()


# ------------------------------------------------- aiopdbp bench streams
@requires_mpi
@pytest.mark.mpi
@pytest.mark.timeout(180)
def test_bench_streams_quick_checks_every_unit_and_writes_rows(tmp_path: Path) -> None:
    r = _run_cli(["streams", "--quick", "--out", str(tmp_path)], timeout=150)
    assert r.returncode == 0, r.stdout + r.stderr
    doc = json.loads((tmp_path / "streams.json").read_text())
    got = {(row["n"], row["size"], row["inflight"]) for row in doc["rows"]}
    assert got == {(2, s, k) for s in (4096, 65536, 1 << 20) for k in (1, 16)}
    for row in doc["rows"]:
        assert row["streams_per_s"] > 0 and row["msgs_per_s"] > 0
        assert row["ratio"] == pytest.approx(row["streams_per_s"] / row["msgs_per_s"])
    assert (tmp_path / "streams.csv").read_text().count("\n") == 1 + len(doc["rows"])


@requires_mpi
@pytest.mark.mpi
@pytest.mark.timeout(180)
@pytest.mark.parametrize("kind", ["stream", "msg"])
def test_bench_streams_fails_on_a_corrupted_unit(tmp_path: Path, kind: str) -> None:
    r = _run_cli(["streams", "--quick", "--sizes", "4K", "--inflight", "1", "--inject-fault", kind,
                  "--out", str(tmp_path)], timeout=150)
    assert r.returncode != 0
    assert f"VERIFICATION FAILED: {kind} unit 1" in r.stdout + r.stderr
    assert not (tmp_path / "streams.json").exists()


@requires_mpi
@pytest.mark.mpi
@pytest.mark.timeout(180)
def test_bench_streams_torch_rows_beside_numpy(tmp_path: Path) -> None:
    pytest.importorskip("torch")
    r = _run_cli(["streams", "--quick", "--sizes", "4K", "--inflight", "1", "--payload", "numpy,torch",
                  "--out", str(tmp_path)], timeout=150)
    assert r.returncode == 0, r.stdout + r.stderr
    rows = json.loads((tmp_path / "streams.json").read_text())["rows"]
    assert sorted(row["payload"] for row in rows) == ["numpy", "torch"]
    assert "torch / numpy units/s" in r.stdout


@requires_mpi
@pytest.mark.mpi
@pytest.mark.timeout(180)
def test_bench_streams_torch_fails_on_a_corrupted_tensor(tmp_path: Path) -> None:
    pytest.importorskip("torch")
    r = _run_cli(["streams", "--quick", "--sizes", "4K", "--inflight", "1", "--payload", "torch",
                  "--inject-fault", "stream", "--out", str(tmp_path)], timeout=150)
    assert r.returncode != 0
    assert "VERIFICATION FAILED: stream unit 1" in r.stdout + r.stderr


def test_bench_streams_torch_receiver_refuses_a_tensor_that_arrived_as_numpy() -> None:
    from aiopdbp.bench.streams import VerificationError, _host

    with pytest.raises(VerificationError, match="not a tensor"):
        _host(np.zeros(4, np.uint8), "torch", "stream")


# ================================================================= pingpong
def test_pingpong_echo_check_detects_one_wrong_byte() -> None:
    from aiopdbp.bench.pingpong import Payloads

    for size in (8, 64 << 10):
        pl = Payloads(size)
        bad = bytearray(pl.raw[1])
        bad[size // 2] ^= 1
        assert pl.check(memoryview(pl.raw[1]), 1) and pl.check(pl.writable[0], 0)
        assert not pl.check(bad, 1) and not pl.check(pl.raw[0], 1)


def test_pingpong_summary_halves_the_median_round_trip() -> None:
    from aiopdbp.bench.pingpong import Result, summarize_runs

    runs = []
    for base in (1000, 2000, 3000):
        r0, r1 = Result(), Result()
        r0.rtt_ns = [base, base, 10 * base]
        r0.cpu_s = r1.cpu_s = 3e-6
        runs.append([r0, r1])
    row = summarize_runs(8, runs)
    assert row["latency_us"] == pytest.approx(1.0) and row["bandwidth_GBps"] == pytest.approx(16 / 2000)
    assert row["cpu_us_per_rt"] == pytest.approx(2.0)


def test_cli_hands_pingpong_to_its_own_parser(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as ei:
        bench_cli.main(["pingpong", "--impls", "nope"])
    assert ei.value.code == 2 and "floor-lib" in capsys.readouterr().err


@requires_mpi
@pytest.mark.mpi
@pytest.mark.timeout(200)
def test_pingpong_quick_checks_the_echo_of_every_impl() -> None:
    r = _run_cli(["pingpong", "--quick"], timeout=180)
    assert r.returncode == 0, r.stdout + r.stderr
    assert "echo checked for aiopdbp, aiopdbp-ro, mpi4py, floor, floor-lib" in r.stdout


@requires_mpi
@pytest.mark.mpi
@pytest.mark.timeout(200)
def test_pingpong_hops_times_every_hop_of_the_running_core() -> None:
    # the hop table wraps the data path's entry points; a path that moves
    # (a compiled placer reading the block, say) must not leave it unstamped
    r = _run_cli(["pingpong", "--sizes", "8", "--impls", "aiopdbp", "--iters", "300", "--repeat", "1",
                  "--hops"], timeout=180)
    assert r.returncode == 0, r.stdout + r.stderr
    rows = [line for line in r.stdout.splitlines() if line.startswith("| ") and "->" not in line
            and line.split("|")[1].strip() in {"send path", "encoding", "decoding", "delivery", "one way"}]
    assert len(rows) == 5, r.stdout
    assert "nan" not in "".join(rows), r.stdout


def test_tests_latency_is_an_alias_of_pingpong() -> None:
    got = bench_cli.latency_alias(["-n", "2", "--tests", "latency", "--lat-sizes", "8,64", "--tcp"])
    assert got == ["-n", "2", "--sizes", "8,64", "--tcp"]
    assert bench_cli.latency_alias(["--tests=latency"]) == ["--sizes", "8"]


def test_tests_latency_mixed_with_other_tests_is_refused(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as ei:
        bench_cli.main(["--tests", "latency,bw"])
    assert ei.value.code == 2 and "bench pingpong" in capsys.readouterr().err


def test_hop_table_splits_each_hop_at_its_stamps() -> None:
    from aiopdbp.bench.hops import HOPS, hop_medians

    # two messages, in ns: send 0, link takes it 1000, post begins 3000, posted 4000;
    # the receiving step 4500..9000 decodes 5000..6000; recv returns 9500
    base = [0, 100_000]
    sends = [b for b in base]
    posts = [b + 4000 for b in base]
    steps = [(b + 4500, b + 9000) for b in base]
    recvs = [b + 9500 for b in base]
    encs = [(b + 1000, b + 3000) for b in base]
    decs = [(b + 5000, b + 6000) for b in base]
    got = hop_medians(sends, posts, steps, recvs, encs, decs, warm=0)
    assert list(got) == list(HOPS)
    assert got == {"send path": 4.0, "  before encoding": 1.0, "  encoding": 2.0, "  posting": 1.0,
                   "MPI": 0.5, "receive path": 4.5, "  probe and receive": 0.5, "  decoding": 1.0,
                   "  delivery": 3.0, "wake-up": 0.5, "one way": 9.5}
