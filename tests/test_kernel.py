"""The per-message MPI calls in both forms (aiopdbp.transport.kernel and its
compiled twin aiopdbp.transport.ckernel): over real MPI they post the same
bytes, hand the same messages to the same sinks and leave the same
ones matched; and the progress engine runs the form aiopdbp.ext chose."""

from __future__ import annotations

import ast
import functools
import importlib
import os
import subprocess
import sys
import textwrap
import types
import zlib
from pathlib import Path

import pytest

from tests.mpirun import SCRIPTS_DIR, mpi_available, run_mpi

from aiopdbp import ext

pytestmark = pytest.mark.mpi

try:
    from mpi4py import MPI  # noqa: F401  (the twin binds to the MPI library it loads)

    compiled: types.ModuleType | None = importlib.import_module("aiopdbp.transport.ckernel")
except ImportError:
    compiled = None


SIZES = [0, 1, 8, 100, 3, 4095, 4096, 9, 70000, 7]  # (the script's batch)


def _d(i: int, n: int) -> tuple[int, str, int, int]:
    """Message ``i`` of the batch (``n`` bytes of value i) as the script prints a delivery."""
    return (0, "CH", n, zlib.crc32(bytes([i]) * n))


@functools.cache
def _forms() -> dict[tuple[str, str], list[object]]:
    """What each form received in each case (one MPI job for the module)."""
    if not mpi_available():
        pytest.skip("needs mpiexec and mpi4py")
    proc = run_mpi(SCRIPTS_DIR / "kernel_forms.py", 2, timeout=60)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    assert "rank 0 OK" in proc.stdout and "rank 1 OK" in proc.stdout
    out: dict[tuple[str, str], list[object]] = {}
    for line in proc.stdout.splitlines():
        if line.startswith("FORM "):
            _, name, case, rest = line.split(" ", 3)
            out[(name, case)] = ast.literal_eval(rest)
    return out


@pytest.mark.timeout(90)
def test_the_pure_kernel_receives_small_messages_in_order_and_leaves_the_rest_matched() -> None:
    got = _forms()[("pure", "batch")]
    # 0, 1, 8, 100, 3 B received in one call; 4095 B too; 4096 B (not small) matched
    assert got[0] == ("got", 6, 0 + 1 + 8 + 100 + 3 + 4095,
                      [_d(i, n) for i, n in enumerate([0, 1, 8, 100, 3, 4095])], [])
    assert got[1] == ("matched", 1, 0, 4096, bytes([6, 6]))
    assert got[2] == ("got", 1, 9, [_d(7, 9)], [])
    assert got[3] == ("matched", 1, 0, 70000, bytes([8, 8]))
    assert got[4] == ("got", 1, 7, [_d(9, 7)], [])


@pytest.mark.timeout(90)
def test_a_sink_that_raises_is_reported_and_the_probe_goes_on() -> None:
    got = _forms()[("pure", "raise")]
    # the data sink raised at the 8 B message: fail() was told, every message was received and handed on
    assert got[0] == ("got", 6, 0 + 1 + 8 + 100 + 3 + 4095,
                      [_d(i, n) for i, n in enumerate([0, 1, 8, 100, 3, 4095])], ["ValueError('sink refuses 8 B')"])
    assert got[1] == ("matched", 1, 0, 4096, bytes([6, 6]))


@pytest.mark.timeout(90)
def test_the_pure_kernel_leaves_a_message_behind_a_landing_one_matched() -> None:
    got = _forms()[("pure", "fifo")]
    assert got[0] == ("got", 0, 0, [], [])
    assert got[1] == ("matched", 1, 0, 0, b"")


@pytest.mark.timeout(90)
def test_the_pure_kernel_stops_at_its_byte_budget() -> None:
    got = _forms()[("pure", "budget")]
    # budget 10: 0 + 1 + 8 B leave it unspent, the 100 B message spends it
    assert got[0] == ("got", 4, 109, [_d(i, n) for i, n in enumerate([0, 1, 8, 100])], [])
    assert got[1] == ("got", 2, 4098, [_d(4, 3), _d(5, 4095)], [])


@pytest.mark.timeout(90)
def test_the_pure_post_completes_eager_sends_at_once_and_returns_a_request_for_the_rest() -> None:
    forms = _forms()
    # eager up to MPICH's shared-memory threshold; 70000 B waits for its receiver
    assert forms[("pure", "post")] == ["NoneType"] * 8 + ["Request", "NoneType"]
    assert forms[("pure", "posted")] == [(n, zlib.crc32(bytes([i]) * n)) for i, n in enumerate(SIZES)]


@pytest.mark.timeout(90)
def test_the_pure_recv_one_lands_the_message_and_writes_nothing_past_it() -> None:
    got = _forms()[("pure", "received")]
    assert got == [(n, zlib.crc32(bytes([i]) * n), bytes(5)) for i, n in enumerate(SIZES)]


@pytest.mark.timeout(90)
def test_the_pure_send_lane_posts_counts_rings_once_and_refuses_once_shut() -> None:
    forms = _forms()
    outs, sends, fast, nbytes, rings, stamped = forms[("pure", "lane")]
    # eager sends complete at once; the 70000 B one is handed to ``pending``
    assert outs == [None] * 8 + ["pending 70000", None, "lane shut"]
    assert (sends, fast, nbytes) == (len(SIZES), len(SIZES) - 1, sum(SIZES))
    assert rings == [1] and stamped  # the first send to a quiet peer rings it; the rest are recent
    assert forms[("pure", "laned")] == [(n, zlib.crc32(bytes([i]) * n)) for i, n in enumerate(SIZES)]


@pytest.mark.timeout(90)
def test_the_pure_send_lane_posts_a_header_and_its_payload_in_one_call() -> None:
    forms = _forms()
    outs, sends, fast, bulk_sends, nbytes, rings, stamped = forms[("pure", "pair")]
    # eager payloads complete at once; the 70000 B one is handed to ``pending_bulk`` with its ``done``
    assert outs == [None] * 8 + ["pending 70000 done8", None, "lane shut"]
    heads = [i + 1 for i in range(len(SIZES))]
    assert (sends, fast, bulk_sends, nbytes) == (len(SIZES), len(SIZES), len(SIZES), sum(SIZES) + sum(heads))
    assert rings == [1] and stamped
    got_heads, payloads = forms[("pure", "paired")]
    assert got_heads == [(n, zlib.crc32(bytes([i]) * n)) for i, n in enumerate(heads)]
    assert payloads == [(n, zlib.crc32(bytes([i]) * n)) for i, n in enumerate(SIZES)]


@pytest.mark.timeout(90)
def test_the_pure_bulk_receiver_lands_each_payload_in_the_buffer_of_the_caches_rule() -> None:
    outs, made, recvs, user, nbytes = _forms()[("pure", "bulkin")]
    assert outs[:2] == ["refused 0", "refused 2"]    # shut until opened; a source outside the job
    landed = [o for o in outs[2:] if type(o) is tuple]
    assert landed == [(n, zlib.crc32(bytes([i % 251]) * n), i == 2) for i, n in enumerate(SIZES)]
    # 4096 <= n < 65536 from empty(), the rest from alloc(); the third into the caller's own buffer
    assert made == [f"{'empty' if 4096 <= n < 65536 else 'alloc'} {n}" for i, n in enumerate(SIZES) if i != 2]
    assert (recvs, user, nbytes) == (len(SIZES), 1, sum(SIZES))


@pytest.mark.timeout(90)
@pytest.mark.skipif(compiled is None, reason="the compiled kernel is not built")
def test_both_forms_post_receive_and_match_alike_over_mpi() -> None:
    forms = _forms()
    for case in ("batch", "fifo", "budget", "raise", "post", "posted", "received", "lane", "laned", "pair",
                 "paired", "bulkin"):
        assert forms[("compiled", case)] == forms[("pure", case)], case


@pytest.mark.skipif(compiled is None, reason="the compiled kernel is not built")
def test_the_built_kernel_is_current_and_chosen() -> None:
    from aiopdbp.transport import core

    assert compiled is not None
    here = Path(compiled.__file__).parent  # type: ignore[arg-type]
    assert compiled.__source_hash__ == ext.source_hash(here, compiled.__sources__)
    if os.environ.get("AIOPDBP_NO_EXTENSIONS", "") in ("", "0"):
        assert core.kernel_core is compiled
        assert ext.core()["kernel"] == "compiled (Cython)"


@pytest.mark.timeout(60)
def test_a_kernel_that_cannot_load_under_this_mpi_leaves_the_pure_form_and_says_why() -> None:
    # What an MPI of another ABI (Open MPI: no libmpi.so.12) does to the twin's import.
    code = textwrap.dedent("""
        import importlib.abc, sys

        class OtherABI(importlib.abc.MetaPathFinder):
            def find_spec(self, name, path, target=None):
                if name == "aiopdbp.transport.ckernel":
                    raise ImportError("libmpi.so.12: cannot open shared object file: No such file or directory")
                return None

        sys.meta_path.insert(0, OtherABI())
        from aiopdbp import cli
        from aiopdbp.transport import core, kernel
        assert core.kernel_core is kernel, core.kernel_core
        print(cli._core_info())
    """)
    env = {**os.environ, "AIOPDBP_NO_EXTENSIONS": "0"}
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=50, env=env)
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert "kernel: pure Python (the compiled core is built but cannot load here: libmpi.so.12: cannot open" in proc.stdout
