"""The data path's core in both forms: the Python source (aiopdbp.wire.blocks)
and its compiled twin (aiopdbp.wire.cblocks) write the same bytes, read the
same records and refuse bad input with the same ProtocolError; and the
choice between them (aiopdbp.ext) is the documented one."""

from __future__ import annotations

import importlib
import os
import shutil
import subprocess
import sys
import types
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from aiopdbp import ext
from aiopdbp.errors import ProtocolError
from aiopdbp.wire import blocks as pure
from aiopdbp.wire.mesp import DEFAULT_LIMITS, Kind, MsgType
from aiopdbp.wire.message import Message
from aiopdbp.wire.payload import encode_payload

REPO = Path(__file__).resolve().parent.parent
BPS, BP = int(MsgType.BPS), int(MsgType.BP)

try:
    compiled: types.ModuleType | None = importlib.import_module("aiopdbp.wire.cblocks")
except ImportError:
    compiled = None

FORMS = [pytest.param(pure, id="pure"),
         pytest.param(compiled, id="compiled",
                      marks=pytest.mark.skipif(compiled is None, reason="the compiled core is not built"))]


@pytest.fixture(params=FORMS)
def core(request: pytest.FixtureRequest) -> types.ModuleType:
    return request.param  # type: ignore[no-any-return]


def _records(runs: list[Any]) -> list[Any]:
    """Runs as comparable values (arrays by dtype, shape and bytes)."""
    out = []
    for dest, run, nbytes in runs:
        items = [tuple((x.dtype.str, x.shape, x.tobytes()) if isinstance(x, np.ndarray) else x for x in rec)
                 for rec in run]
        out.append((dest, items, nbytes))
    return out


def _write(core: types.ModuleType, records: list[tuple[int, int, int, int, Any]], size: int = 1 << 16) -> bytes:
    w = core.BlockWriter(1 << 15)
    block = memoryview(bytearray(size))
    w.open(block, BPS)
    for dest, src, kind, com, data in records:
        if isinstance(data, np.ndarray):  # its meta is checked (and cached) by the full encoder first
            encode_payload(data, False, DEFAULT_LIMITS)
        assert w.put_short(dest, src, com, kind, data, b"", False) is True
    n = w.close()
    return bytes(block[:n])


# ------------------------------------------------------------------ writer
def test_a_lone_frame_is_the_block_of_one(core: types.ModuleType) -> None:
    w = core.BlockWriter(1 << 15)
    lone = w.put_short(7, 3, 9, int(Kind.SHORT), b"hello", b"", True)
    assert type(lone) is bytes
    assert lone == _write(core, [(7, 3, int(Kind.SHORT), 9, b"hello")])


def test_put_short_says_no_room_without_a_block_and_none_for_what_is_not_short(core: types.ModuleType) -> None:
    w = core.BlockWriter(1 << 15)
    assert w.put_short(1, 2, 0, int(Kind.SHORT), b"x", b"", False) is False
    assert w.put_short(1, 2, 0, int(Kind.SHORT), bytes(1 << 15), b"", False) is None
    assert w.put_short(1, 2, 0, int(Kind.SHORT), bytearray(b"x"), b"", False) is None
    assert w.kind == 0 and w.close() == 0


def _arrays_in_turn() -> list[np.ndarray[Any, Any]]:
    """Arrays a writer meets one after another: the same dtype and shape
    with new contents, then what differs from the one before in one way
    only (dtype, an equal dtype object, shape, rank, memory layout, size)."""
    wide = np.arange(16, dtype=np.uint8).reshape(2, 8)
    return [np.arange(8, dtype=np.uint8), np.arange(8, 16, dtype=np.uint8), np.arange(16, dtype=np.uint8)[::2],
            np.arange(8, dtype=np.int8), np.arange(8, dtype=np.uint8).astype(np.dtype(np.uint8, metadata={"t": 1})),
            np.arange(4, dtype=np.uint8), np.arange(8, dtype=np.uint8).reshape(2, 4),
            wide[:, ::2], np.arange(8, dtype=np.uint8).reshape(2, 4) + 1,
            np.array(5, np.int64), np.array(6, np.int64), np.zeros((1, 1, 1, 1, 2), np.float32),
            np.zeros((1, 1, 1, 1, 2), np.float32) + 1, np.zeros(0, np.uint8), np.zeros(1 << 14, np.uint16),
            np.arange(8, dtype=np.uint8)]


@pytest.mark.parametrize("lone", [True, False], ids=["lone", "in a block"])
def test_a_writer_that_met_arrays_before_writes_what_a_new_one_writes(core: types.ModuleType, lone: bool) -> None:
    # a writer may remember the meta of the last array it wrote: the next
    # one must be written as if it had not (or refused as if it had not)
    arrays = _arrays_in_turn()
    for a in arrays:
        if a.flags.c_contiguous:
            encode_payload(a, False, DEFAULT_LIMITS)  # the full encoder checks each dtype and shape first
    w = core.BlockWriter(1 << 15)
    for i, a in enumerate(arrays):
        fresh = core.BlockWriter(1 << 15)
        blocks = [bytearray(1 << 16), bytearray(1 << 16)]
        if not lone:
            w.open(memoryview(blocks[0]), BPS)
            fresh.open(memoryview(blocks[1]), BPS)
        want = fresh.put_short(i, 1, 2, int(Kind.SHORT), a, b"", lone)
        assert w.put_short(i, 1, 2, int(Kind.SHORT), a, b"", lone) == want, (i, a.dtype, a.shape)
        assert (want is None) == (not a.flags.c_contiguous or a.nbytes >= 1 << 15)
        if not lone:
            assert w.close() == fresh.close()
            assert blocks[0] == blocks[1]


def test_a_full_block_refuses_the_next_record_and_keeps_what_it_holds(core: types.ModuleType) -> None:
    w = core.BlockWriter(1 << 15)
    block = memoryview(bytearray(8 + 2 * (15 + 10)))
    w.open(block, BPS)
    assert w.put_short(1, 2, 0, int(Kind.SHORT), bytes(10), b"", False) is True
    assert w.put_short(1, 2, 0, int(Kind.SHORT), bytes(10), b"", False) is True
    assert w.put_short(1, 2, 0, int(Kind.SHORT), bytes(10), b"", False) is False
    n = w.close()
    runs = core.BlockReader().read(block[:n])
    assert [len(run) for _, run, _ in runs] == [2]


def test_a_bp_block_takes_full_records_only(core: types.ModuleType) -> None:
    w = core.BlockWriter(1 << 15)
    block = memoryview(bytearray(64))
    w.open(block, BP)
    assert w.put_short(1, 2, 0, int(Kind.SHORT), b"x", b"", False) is False
    assert w.offset(BP) == 8 and w.offset(BPS) == 8
    assert w.put_record([b"abc", memoryview(b"de")], 5) is True
    assert w.offset(BP) == 13
    assert w.close() == 13
    assert bytes(block[8:13]) == b"abcde"


def test_an_empty_block_closes_to_nothing(core: types.ModuleType) -> None:
    w = core.BlockWriter(1 << 15)
    w.open(memoryview(bytearray(64)), BPS)
    assert w.kind == BPS
    assert w.close() == 0
    assert w.kind == 0


# ------------------------------------------------------------------ reader
def test_records_arrive_named_in_runs_per_destination(core: types.ModuleType) -> None:
    frame = _write(core, [(5, 2, int(Kind.SHORT), 1, b"a"), (5, 2, int(Kind.COMMAND), 2, None),
                          (6, 3, int(Kind.SHORT), 3, np.arange(3, dtype=np.int16))])
    runs = core.BlockReader({2: "two"}, Message, lambda pid: f"?{pid}").read(frame)
    assert [(d, n) for d, _, n in runs] == [(5, 1), (6, 6)]
    (m1, m2), (m3,) = runs[0][1], runs[1][1]
    assert (m1.source, m1.kind, m1.com, m1.data) == ("two", Kind.SHORT, 1, b"a")
    assert (m2.kind, m2.data) == (Kind.COMMAND, None)
    assert m3.source == "?3" and m3.data.tolist() == [0, 1, 2] and m3.data.flags.writeable


def test_a_short_stream_goes_to_the_stream_callback_in_its_place(core: types.ModuleType) -> None:
    w = core.BlockWriter(1 << 15)
    block = memoryview(bytearray(256))
    w.open(block, BPS)
    w.put_short(5, 2, 0, int(Kind.SHORT), b"before", b"", False)
    w.put_short(5, 2, 4, int(Kind.STREAM), memoryview(b"seg"), pure.STREAM_HEAD.pack(7, 16), False)
    n = w.close()
    seen = []

    def opened(*args: Any) -> str:
        seen.append(args)
        return "stream"

    runs = core.BlockReader().read(block[:n], opened)
    assert runs[0][1][1] == "stream"
    assert seen == [(5, 2, 2, 4, 7, 16, bytearray(b"seg"))]
    with pytest.raises(ProtocolError, match="no stream may come"):
        core.BlockReader().read(block[:n])


@pytest.mark.parametrize("frame, message", [
    (bytes([1, BPS, 1, 0]), "shorter than its header"),
    (bytes([2, BPS, 1, 0, 0, 0, 0, 0]), "unsupported version"),
    (bytes([1, BP, 1, 0, 0, 0, 0, 0]), "not a BPS frame"),
    (bytes([1, BPS, 1, 0, 5, 0, 0, 0]), "body bytes, header says"),
    (bytes([1, BPS, 0, 0, 0, 0, 0, 0]), "at least one record"),
    (bytes([1, BPS, 1, 0, 3, 0, 0, 0]) + b"abc", "truncated short record"),
    (bytes([1, BPS, 1, 0, 15, 0, 0, 0]) + bytes(12) + bytes([0x07, 0, 0]), "bad short record flags 0x07"),
    (bytes([1, BPS, 1, 0, 15, 0, 0, 0]) + bytes(12) + bytes([0x83, 1, 0]), "None payload with a length"),
    (bytes([1, BPS, 1, 0, 16, 0, 0, 0]) + bytes(12) + bytes([0x83, 0, 0]) + b"x", "1 trailing bytes"),
])
def test_bad_frames_are_protocol_errors(core: types.ModuleType, frame: bytes, message: str) -> None:
    with pytest.raises(ProtocolError, match=message):
        core.BlockReader().read(frame)


def test_a_lone_message_is_read_in_one_step_as_its_run(core: types.ModuleType) -> None:
    reader = core.BlockReader({2: "two"}, Message)
    arr = np.arange(6, dtype=np.int16).reshape(2, 3)
    encode_payload(arr, False, DEFAULT_LIMITS)  # (its meta is checked, and cached, by the full encoder first)
    for kind, data in ((Kind.SHORT, b"hello"), (Kind.COMMAND, None), (Kind.SHORT, b""), (Kind.SHORT, arr)):
        frame = core.BlockWriter(1 << 15).put_short(7, 2, 9, int(kind), data, b"", True)
        dest, msg, nbytes = reader.read_one(memoryview(bytearray(frame)))
        ((want_dest, (want,), want_nbytes),) = reader.read(frame)
        assert _records([(dest, [msg], nbytes)]) == _records([(want_dest, [want], want_nbytes)])
        assert type(msg) is Message and (msg.source, msg.kind) == ("two", kind)
        assert msg.data.tolist() == arr.tolist() if data is arr else msg.data == data
    again = reader.read_one(frame)[1].data     # the array's meta read before: filled in one copy
    assert again.tolist() == arr.tolist() and again.dtype == arr.dtype and again.flags.writeable
    assert again.flags.owndata and again.flags.aligned and again.flags.c_contiguous


def _cut(frame: bytes) -> bytes:
    """A lone frame one payload byte shorter, its lengths adjusted to match."""
    out = bytearray(frame[:-1])
    out[4] -= 1    # the frame's body length (low byte)
    out[21] -= 1   # the record's payload length (low byte)
    return bytes(out)


def test_read_one_leaves_every_other_frame_to_read(core: types.ModuleType) -> None:
    w = core.BlockWriter(1 << 15)
    arr = _write(core, [(5, 2, int(Kind.SHORT), 1, np.arange(3, dtype=np.int16))])
    others = [_write(core, [(5, 2, int(Kind.SHORT), 1, b"a"), (5, 2, int(Kind.SHORT), 2, b"b")]),
              _cut(arr),   # an array whose bytes its meta does not match
              w.put_short(5, 2, 0, int(Kind.STREAM), memoryview(b"seg"), pure.STREAM_HEAD.pack(7, 16), True)]
    good = w.put_short(5, 2, 0, int(Kind.SHORT), b"abc", b"", True)
    others += [good[:-1], good + b"x", bytes([2]) + good[1:], good[:20] + bytes([0x83]) + good[21:]]
    reader = core.BlockReader()
    for frame in others:
        assert reader.read_one(frame) is None
    with pytest.raises(ProtocolError, match="does not match"):
        reader.read(_cut(arr))
    assert reader.read_one(good) is not None


# ------------------------------------------------- both forms, the same
_payloads = st.one_of(st.none(), st.binary(max_size=40),
                      st.lists(st.integers(-2**31, 2**31 - 1), max_size=6).map(lambda v: np.array(v, np.int32)))
_record = st.tuples(st.integers(0, 2**32 - 1), st.integers(0, 2**32 - 1),
                    st.sampled_from([int(Kind.SHORT), int(Kind.COMMAND)]), st.integers(0, 2**32 - 1), _payloads)


@pytest.mark.skipif(compiled is None, reason="the compiled core is not built")
@settings(max_examples=200, deadline=None)
@given(st.lists(_record, min_size=1, max_size=12))
def test_both_forms_write_the_same_bytes_and_read_the_same_records(records: list[Any]) -> None:
    assert compiled is not None
    frame = _write(pure, records)
    assert _write(compiled, records) == frame
    names = {r[1]: f"gp{r[1]}" for r in records[::2]}
    want = _records(pure.BlockReader(names, tuple).read(frame))
    assert _records(compiled.BlockReader(names, tuple).read(frame)) == want
    assert sum(len(run) for _, run, _ in want) == len(records)


def _outcome(core: types.ModuleType, frame: bytes) -> Any:
    try:
        return ("ok", _records(core.BlockReader().read(frame, lambda *a: a)))
    except ProtocolError as exc:
        return ("ProtocolError", str(exc))


def _mutated(data: st.DataObject, frame: bytearray, least: int, most: int) -> bytes:
    """``frame`` with ``least``..``most`` bytes overwritten, maybe cut short."""
    for _ in range(data.draw(st.integers(least, most))):
        i = data.draw(st.integers(0, len(frame) - 1))
        frame[i] = data.draw(st.integers(0, 255))
    cut = data.draw(st.integers(0, len(frame)))
    return bytes(frame[:cut]) if data.draw(st.booleans()) else bytes(frame)


@pytest.mark.skipif(compiled is None, reason="the compiled core is not built")
@settings(max_examples=400, deadline=None)
@given(st.data())
def test_both_forms_refuse_mutated_frames_alike(data: st.DataObject) -> None:
    assert compiled is not None
    frame = bytearray(_write(pure, [(1, 2, int(Kind.SHORT), 3, b"payload"), (1, 2, int(Kind.COMMAND), 0, None),
                                    (4, 2, int(Kind.SHORT), 0, np.arange(3, dtype=np.int32))]))
    mutated = _mutated(data, frame, 1, 4)
    assert _outcome(compiled, mutated) == _outcome(pure, mutated)


@pytest.mark.skipif(compiled is None, reason="the compiled core is not built")
@settings(max_examples=300, deadline=None)
@given(st.binary(min_size=0, max_size=80))
def test_both_forms_refuse_random_bodies_alike(body: bytes) -> None:
    assert compiled is not None
    frame = bytes([1, BPS, 3, 0]) + len(body).to_bytes(4, "little") + body
    assert _outcome(compiled, frame) == _outcome(pure, frame)


#: one reader per form for every example: what it read before (an array's
#: meta) must not change what it reads next
_READERS: dict[str, Any] = {}


def _one(core: types.ModuleType, frame: bytes) -> Any:
    """``read_one``'s answer, checked against ``read`` in the same form."""
    reader = _READERS.setdefault(core.__name__, core.BlockReader())
    got = reader.read_one(frame)
    if got is not None:
        dest, rec, nbytes = got
        got = _records([(dest, [rec], nbytes)])
        assert _records(core.BlockReader().read(frame)) == got
    return got


@pytest.mark.skipif(compiled is None, reason="the compiled core is not built")
@settings(max_examples=400, deadline=None)
@given(st.data())
def test_both_forms_read_mutated_lone_frames_alike(data: st.DataObject) -> None:
    assert compiled is not None
    payload = data.draw(_payloads)
    kind = data.draw(st.sampled_from([int(Kind.SHORT), int(Kind.COMMAND)]))
    frame = bytearray(_write(pure, [(1, 2, kind, 3, payload)]))
    mutated = _mutated(data, frame, 0, 3)
    assert _one(compiled, mutated) == _one(pure, mutated)


# --------------------------------------------------------- which form runs
def test_no_extensions_forces_the_pure_form(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("AIOPDBP_NO_EXTENSIONS", "1")
    fake = types.ModuleType("aiopdbp.wire.fake")
    assert ext.choose("test-forced", pure, fake) is pure
    assert "AIOPDBP_NO_EXTENSIONS" in ext.core()["test-forced"]


def test_a_missing_twin_leaves_the_pure_form_and_says_why(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("AIOPDBP_NO_EXTENSIONS", raising=False)
    assert ext.choose("test-missing", pure, None, ImportError("undefined symbol: MPI_Foo")) is pure
    assert "undefined symbol: MPI_Foo" in ext.core()["test-missing"]


def test_a_twin_older_than_its_sources_is_refused_with_a_rebuild_hint(
        monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.delenv("AIOPDBP_NO_EXTENSIONS", raising=False)
    (tmp_path / "src.py").write_text("x = 1\n")
    stale = types.ModuleType("stale")
    stale.__file__ = str(tmp_path / "stale.so")
    stale.__sources__ = ("src.py",)  # type: ignore[attr-defined]
    stale.__source_hash__ = ext.source_hash(tmp_path, ("src.py",))  # type: ignore[attr-defined]
    assert ext.choose("test-current", pure, stale) is stale
    (tmp_path / "src.py").write_text("x = 2\n")
    with pytest.warns(ext.StaleExtensionWarning, match="rebuild with pip install -e"):
        assert ext.choose("test-stale", pure, stale) is pure


@pytest.mark.skipif(compiled is None, reason="the compiled core is not built")
def test_the_built_twin_is_current_and_chosen() -> None:
    from aiopdbp.wire import core as chosen

    assert compiled is not None
    here = Path(compiled.__file__).parent  # type: ignore[arg-type]
    assert compiled.__source_hash__ == ext.source_hash(here, compiled.__sources__)
    if os.environ.get("AIOPDBP_NO_EXTENSIONS", "") in ("", "0"):
        assert chosen.COMPILED and chosen.BlockReader is compiled.BlockReader


@pytest.mark.timeout(360)   # Cython still translates the .pyx: over 100 s at load 25-30
def test_a_build_without_a_compiler_succeeds_with_the_pure_core(tmp_path: Path) -> None:
    for rel in ("setup.py", "pyproject.toml", "README.md", "aiopdbp/ext.py", "aiopdbp/wire/blocks.py",
                "aiopdbp/wire/cblocks.pyx", "aiopdbp/wire/cblocks.pxd", "aiopdbp/transport/kernel.py",
                "aiopdbp/transport/ckernel.pyx"):
        (tmp_path / rel).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy(REPO / rel, tmp_path / rel)
    env = {**os.environ, "CC": "/bin/false", "LDSHARED": "/bin/false"}
    proc = subprocess.run([sys.executable, "setup.py", "build_ext", "--inplace"], cwd=tmp_path, env=env,
                          capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert "the pure-Python core will run" in proc.stderr
    assert not list((tmp_path / "aiopdbp").glob("*/c*.so"))


# ------------------------------------------------------ over MPI, both forms
MIXED = ["messages_in_order", "message_payload_types", "small_arrays_arrive_writable", "command_messages",
         "short_streams_carried_whole", "short_streams_of_signed_bytes_arrive", "n_to_n",
         "whole_streams_take_their_bytes_of_credit", "stream_ndarray"]


def _scenarios_over_mpi(env: dict[str, str]) -> str:
    from tests.mpirun import SCRIPTS_DIR, run_mpi

    proc = run_mpi(SCRIPTS_DIR / "run_scenarios.py", 2, args=MIXED, timeout=150, env=env)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    assert proc.stdout.count(" OK ") == 2 * len(MIXED), proc.stdout[-3000:]
    return proc.stdout


@pytest.mark.mpi
@pytest.mark.timeout(180)
@pytest.mark.skipif(compiled is None, reason="the compiled core is not built")
def test_a_job_with_one_rank_compiled_and_one_pure_carries_every_message_kind() -> None:
    from tests.mpirun import mpi_available

    if not mpi_available():
        pytest.skip("needs mpiexec and mpi4py")
    out = _scenarios_over_mpi({"AIOPDBP_SCENARIO_PURE_RANKS": "1", "AIOPDBP_NO_EXTENSIONS": "0"})
    assert "CORE rank 0 compiled (Cython)" in out
    assert "CORE rank 1 pure Python (AIOPDBP_NO_EXTENSIONS is set)" in out


@pytest.mark.mpi
@pytest.mark.timeout(180)
def test_the_message_scenarios_pass_over_mpi_with_the_pure_core_everywhere() -> None:
    from tests.mpirun import mpi_available

    if not mpi_available():
        pytest.skip("needs mpiexec and mpi4py")
    out = _scenarios_over_mpi({"AIOPDBP_NO_EXTENSIONS": "1"})
    assert "CORE rank 0 pure Python" in out and "CORE rank 1 pure Python" in out
