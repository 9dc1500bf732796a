"""SGPs and device arrays through the data path (issue 9), over the simulated backend.

* ``test_<scenario>``: every scenario of ``tests/devicepath_scenarios.py`` over
  one in-process host (device-to-device), two in-process hosts (pinned
  staging through the fabric's raw messages) and two MPI ranks (shared
  memory and TCP; one launch per configuration for the whole session).
* focused tests below: ordering after the producer's stream, ``copy=False``,
  bad input, overlap of the pipeline stages, cancellation, refusal.

The simulated backend completes copies on worker threads, so tests that
must show that something does *not* happen early give the device a short
chance to misbehave (:func:`linger`) and then assert on the backend's
trace, never on timing.
"""

from __future__ import annotations

import asyncio
import dataclasses
import importlib.util
import re
import subprocess
import sys
import threading
from collections.abc import AsyncIterator
from typing import Any

import numpy as np
import pytest

import aiopdbp
from aiopdbp import BrokenResourceError, DeviceError, IncomingStream, Message, PType, StreamError
from aiopdbp.device import Fault, SimBackend, is_device_array
from aiopdbp.streams.devicebind import DeviceConfig

from tests import devicepath_scenarios as dsc
from tests.mpirun import SCRIPTS_DIR, requires_mpi, run_mpi

CHUNK = 256 << 10
MPI_CONFIGS = {"mpi-2-shm": False, "mpi-2-tcp": True}
MPI_JOB_TIMEOUT = 240.0


# ------------------------------------------------------------ the scenarios
_LINE = re.compile(r"SCENARIO (\S+) rank (\d+) (OK|FAIL)\b ?([^\n]*)")


class _MpiRuns:
    """Launch each MPI configuration once (all device scenarios), on first use."""

    def __init__(self) -> None:
        self._runs: dict[str, tuple[subprocess.CompletedProcess[str] | None, str]] = {}
        self._lock = threading.Lock()

    def get(self, config: str) -> tuple[subprocess.CompletedProcess[str] | None, str]:
        with self._lock:
            if config not in self._runs:
                names = [n for n in dsc.SCENARIOS if n not in dsc.SIM_ONLY or dsc.BACKEND == "sim"]
                try:
                    proc = run_mpi(SCRIPTS_DIR / "run_scenarios.py", 2, tcp=MPI_CONFIGS[config],
                                   args=["--registry", "tests.devicepath_scenarios", *names], timeout=MPI_JOB_TIMEOUT)
                    self._runs[config] = (proc, "")
                except pytest.fail.Exception as exc:
                    self._runs[config] = (None, str(exc))
            return self._runs[config]


@pytest.fixture(scope="session")
def devicepath_mpi_runs() -> _MpiRuns:
    return _MpiRuns()


def _check_mpi(name: str, config: str, runs: _MpiRuns) -> None:
    proc, error = runs.get(config)
    if proc is None:
        pytest.fail(f"{config}: the MPI job hung: {error}", pytrace=False)
    got = {int(r): (status, detail) for n, r, status, detail in _LINE.findall(proc.stdout) if n == name}
    if sorted(got) != [0, 1] or any(status != "OK" for status, _ in got.values()):
        pytest.fail(f"{config}: {name}: {got}\nexit {proc.returncode}\n{proc.stderr[-3000:]}", pytrace=False)


def _make_test(name: str) -> Any:
    params = []
    for t in ("inproc-1", "inproc-2", *MPI_CONFIGS):
        if t == "inproc-1" and name in dsc.REMOTE_ONLY:
            continue
        marks: list[Any] = [pytest.mark.timeout(MPI_JOB_TIMEOUT + 60)]
        if t in MPI_CONFIGS:
            marks += [pytest.mark.mpi, requires_mpi]
        for mod in dsc.SCENARIOS[name].requires:
            marks.append(pytest.mark.skipif(importlib.util.find_spec(mod) is None, reason=f"needs {mod}"))
        params.append(pytest.param(t, id=t, marks=marks))

    @pytest.mark.parametrize("transport", params)
    async def test(transport: str, request: pytest.FixtureRequest) -> None:
        if transport in MPI_CONFIGS:
            runs = request.getfixturevalue("devicepath_mpi_runs")
            await asyncio.to_thread(_check_mpi, name, transport, runs)
        else:
            await dsc.run_inproc(name, int(transport.split("-")[1]))

    test.__name__ = test.__qualname__ = f"test_{name}"
    test.__doc__ = dsc.SCENARIOS[name].doc
    return test


for _name in dsc.SCENARIOS:
    globals()[f"test_{_name}"] = _make_test(_name)
del _name


# ---------------------------------------- the scenarios over a fake CuPy
@pytest.fixture
def fake_cupy(monkeypatch: pytest.MonkeyPatch) -> Any:
    """A fake ``cupy`` (host memory, synchronous copies; tests/fake_cupy.py)
    in ``sys.modules`` for one test: the CuPy backend's plumbing, no GPU."""
    from tests import fake_cupy as fake
    saved = sys.modules.get("cupy")
    cp = fake.install(2)
    monkeypatch.setattr(dsc, "BACKEND", "cupy")
    yield cp
    if saved is None:
        sys.modules.pop("cupy", None)
    else:
        sys.modules["cupy"] = saved


@pytest.mark.parametrize("hosts", [1, 2])
@pytest.mark.parametrize("name", [n for n in dsc.SCENARIOS if n not in dsc.SIM_ONLY])
async def test_device_scenario_over_fake_cupy(name: str, hosts: int, fake_cupy: Any) -> None:
    """The CuPy backend's calls through the whole device path (pointers,
    offsets, streams, events) over a fake cupy; CUDA itself: the gpu tests."""
    if hosts == 1 and name in dsc.REMOTE_ONLY:
        pytest.skip("needs two hosts")
    sc = dsc.SCENARIOS[name]
    opts = DeviceConfig(backend="cupy", pool_bytes=4 << 20, chunk_size=CHUNK, max_in_flight=4)
    await dsc.run_inproc(dataclasses.replace(sc, options={"device": opts}), hosts)


# ------------------------------------------------------------------ helpers
def cfg(backend: SimBackend, **kw: Any) -> DeviceConfig:
    kw.setdefault("pool_bytes", 4 << 20)
    kw.setdefault("chunk_size", CHUNK)
    return DeviceConfig(backend=backend, **kw)


@pytest.fixture
def sim() -> Any:
    backend = SimBackend(devices=2, copy_delay=0.0002)
    yield backend
    backend.close()


@pytest.fixture
async def node(sim: SimBackend) -> AsyncIterator[aiopdbp.Node]:
    async with aiopdbp.open_node(device=cfg(sim)) as n:
        yield n


async def linger(seconds: float = 0.1) -> None:
    """Let the loop and the simulated device run a while: what must not
    happen yet gets every chance to happen (the assertion after it does not
    depend on timing when the code is right)."""
    loop = asyncio.get_running_loop()
    end = loop.time() + seconds
    while loop.time() < end:
        await asyncio.sleep(0.001)


async def pools_return(*nodes: aiopdbp.Node, timeout: float = 10.0) -> None:
    """Wait until every pinned chunk of ``nodes`` is back in its pool (none lost)."""
    loop = asyncio.get_running_loop()
    end = loop.time() + timeout
    while not all(dsc.pools_full(n) for n in nodes):
        assert loop.time() < end, [n.stats().devices for n in nodes]
        await asyncio.sleep(0.001)


def starts(backend: SimBackend, kind: str) -> list[int]:
    return [e.seq for e in backend.trace if e.phase == "start" and e.kind == kind]


# --------------------------------------------------------------- SGP basics
async def test_sgp_gets_default_device_and_own_stream(node: aiopdbp.Node, sim: SimBackend) -> None:
    async with node.process("g", PType.GPU) as gp:
        assert gp.device == 0  # no launcher: local rank 0
        assert gp.stream is not sim.current_stream(0)
        assert gp.stream.device == 0
        assert gp.ptype is PType.GPU


async def test_sgp_explicit_device_receives_there(node: aiopdbp.Node, sim: SimBackend) -> None:
    async with node.process("a", PType.GPU) as a, node.process("b", PType.GPU, device=1) as b:
        await a.send("b", sim.asarray(np.arange(10.0)))
        m = await b.recv(timeout=10)
        assert isinstance(m, Message) and b.device == 1 and m.data.device == 1
        assert np.array_equal(m.data.get(), np.arange(10.0))


async def test_sgp_invalid_device_raises_valueerror_and_registers_nothing(node: aiopdbp.Node) -> None:
    with pytest.raises(ValueError, match="device must be an int in"):
        async with node.process("g", PType.GPU, device=2):
            pass
    async with node.process("g", PType.GPU, device=1) as gp:  # the name was not taken
        assert gp.device == 1


async def test_device_option_on_ngp_raises_valueerror(node: aiopdbp.Node) -> None:
    with pytest.raises(ValueError, match="for SGPs"):
        async with node.process("c", device=0):
            pass


async def test_sgp_without_device_support_raises_deviceerror() -> None:
    async with aiopdbp.open_node(device="none") as n:
        with pytest.raises(DeviceError, match="device support is off"):
            async with n.process("g", PType.GPU):
                pass
        async with n.process("c"):  # NGPs are unaffected
            pass


@pytest.mark.skipif(importlib.util.find_spec("cupy") is not None, reason="CuPy is installed")
async def test_auto_backend_without_cupy_says_how_to_use_sim(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("AIOPDBP_DEVICE", raising=False)
    async with aiopdbp.open_node() as n:
        assert n.stats().devices["backend"] is None  # auto: nothing opened at start
        with pytest.raises(DeviceError, match="AIOPDBP_DEVICE=sim"):
            async with n.process("g", PType.GPU):
                pass


async def test_env_selects_sim_backend_and_pool_at_start(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("AIOPDBP_DEVICE", "sim")
    async with aiopdbp.open_node() as n:
        d = n.stats().devices
        assert d["backend"] == "sim" and d["chunks_free"] == d["chunks"] > 0


async def test_bad_backend_name_raises_valueerror() -> None:
    with pytest.raises(ValueError, match="device backend must be one of"):
        aiopdbp.open_node(device="opencl")


async def test_pinned_pool_allocated_once(node: aiopdbp.Node, sim: SimBackend) -> None:
    async with node.process("a", PType.GPU) as a, node.process("c") as c:
        for i in range(5):
            await a.send("c", sim.asarray(np.full(300_000, i, np.uint8)))  # staged to numpy: 2 chunks
            m = await c.recv(timeout=10)
            assert isinstance(m, Message) and m.data.sum() == 300_000 * i
    assert sim.pinned_allocations == 1


# ------------------------------------------------------------------ ordering
async def test_send_is_ordered_after_producer_stream(node: aiopdbp.Node, sim: SimBackend) -> None:
    # the receiver on another device: its allocation does not wait on the producer's stream
    async with node.process("a", PType.GPU) as a, node.process("b", PType.GPU, device=1) as b:
        x = sim.asarray(np.zeros(1000))
        hold = sim.hold(sim.current_stream(0))  # the producer's work is still pending...
        sim.launch(sim.current_stream(0), lambda: x.unsafe_host_view().fill(7.0))  # ...and writes x
        task = asyncio.create_task(a.send("b", x))
        await linger()
        assert not task.done() and starts(sim, "d2d") == []  # the copy waits on the device
        hold.release()
        await task
        m = await b.recv(timeout=10)
        assert isinstance(m, Message) and np.all(m.data.get() == 7.0)
        assert max(starts(sim, "kernel")) < min(starts(sim, "d2d"))


async def test_send_is_ordered_after_sgp_stream(node: aiopdbp.Node, sim: SimBackend) -> None:
    async with node.process("a", PType.GPU) as a, node.process("b", PType.GPU) as b:
        x = sim.asarray(np.zeros(1000))
        hold = sim.hold(a.stream)  # work queued on the sending GP's own stream
        sim.launch(a.stream, lambda: x.unsafe_host_view().fill(3.0))
        task = asyncio.create_task(a.send("b", x))
        await linger()
        assert not task.done() and starts(sim, "d2d") == []
        hold.release()
        await task
        m = await b.recv(timeout=10)
        assert isinstance(m, Message) and np.all(m.data.get() == 3.0)


async def test_staged_send_is_ordered_after_producer_stream(sim: SimBackend) -> None:
    async with aiopdbp.open_cluster(2, device=cfg(sim)) as (n0, n1):
        async with n0.process("a", PType.GPU) as a, n1.process("b", PType.GPU) as b:
            x = sim.asarray(np.zeros(100_000))
            hold = sim.hold(sim.current_stream(0))
            sim.launch(sim.current_stream(0), lambda: x.unsafe_host_view().fill(5.0))
            task = asyncio.create_task(a.send("b", x))
            await linger()
            assert not task.done() and starts(sim, "d2h") == []
            hold.release()
            await task
            m = await b.recv(timeout=10)
            assert isinstance(m, Message) and np.all(m.data.get() == 5.0)


# ------------------------------------------------------------- copy / reuse
async def test_copy_false_hands_over_the_same_array(node: aiopdbp.Node, sim: SimBackend) -> None:
    async with node.process("a", PType.GPU) as a, node.process("b", PType.GPU) as b:
        x = sim.asarray(np.arange(100))
        await a.send("b", x, copy=False)
        m = await b.recv(timeout=10)
        assert isinstance(m, Message) and m.data is x


async def test_copy_true_is_independent_of_the_source(node: aiopdbp.Node, sim: SimBackend) -> None:
    async with node.process("a", PType.GPU) as a, node.process("b", PType.GPU) as b:
        x = sim.asarray(np.arange(100))
        await a.send("b", x)
        x.unsafe_host_view()[:] = -1  # the sender reuses its array once send returned
        m = await b.recv(timeout=10)
        assert isinstance(m, Message) and m.data is not x
        assert np.array_equal(m.data.get(), np.arange(100))


async def test_copy_false_to_other_device_still_copies(node: aiopdbp.Node, sim: SimBackend) -> None:
    async with node.process("a", PType.GPU) as a, node.process("b", PType.GPU, device=1) as b:
        x = sim.asarray(np.arange(100))
        await a.send("b", x, copy=False)
        m = await b.recv(timeout=10)
        assert isinstance(m, Message) and m.data is not x and m.data.device == 1


async def test_copy_false_stream_segments_are_views_of_the_source(node: aiopdbp.Node, sim: SimBackend) -> None:
    async with node.process("a", PType.GPU) as a, node.process("b", PType.GPU) as b:
        x = sim.asarray(np.arange(200_000, dtype=np.float64))  # 1.6 MB: 7 segments
        task = asyncio.create_task(a.send_stream("b", x, copy=False))
        s = await b.recv(timeout=10)
        assert isinstance(s, IncomingStream)
        assert await s.read() is x
        assert await task == x.nbytes


# ---------------------------------------------------------------- bad input
async def test_send_nowait_device_array_raises_typeerror(node: aiopdbp.Node, sim: SimBackend) -> None:
    async with node.process("a", PType.GPU) as a, node.process("b", PType.GPU) as b:
        with pytest.raises(TypeError, match="await gp.send"):
            a.send_nowait("b", sim.asarray(np.arange(3)))
        assert b.pipe is not None and len(b.pipe) == 0


async def test_device_arrays_inside_an_iterable_raise_typeerror(node: aiopdbp.Node, sim: SimBackend) -> None:
    async with node.process("a", PType.GPU) as a, node.process("b", PType.GPU):
        with pytest.raises(TypeError, match="device array"):
            await a.send_stream("b", [sim.asarray(np.arange(3))], timeout=5)


async def test_foreign_device_object_raises_typeerror(node: aiopdbp.Node) -> None:
    class Foreign:  # a CUDA array this (simulated) backend cannot read
        __cuda_array_interface__ = {"shape": (4,), "typestr": "<f4", "data": (0, False), "version": 3}

    async with node.process("a", PType.GPU) as a, node.process("b", PType.GPU) as b:
        with pytest.raises(TypeError, match="simulated backend"):
            await a.send("b", Foreign(), timeout=5)
        assert b.pipe is not None and len(b.pipe) == 0


async def test_device_array_to_unknown_name_raises(node: aiopdbp.Node, sim: SimBackend) -> None:
    async with node.process("a", PType.GPU) as a:
        with pytest.raises(aiopdbp.UnknownProcessError):
            await a.send("nobody", sim.asarray(np.arange(3)), timeout=0)


# ---------------------------------------------------------------- delivery
async def test_multicast_device_array_reaches_every_gp(node: aiopdbp.Node, sim: SimBackend) -> None:
    async with node.process("a", PType.GPU) as a, node.process("b", PType.GPU) as b, node.process("c") as c:
        await a.send(["b", "c"], sim.asarray(np.arange(5)), com=3)
        mb, mc = await b.recv(timeout=10), await c.recv(timeout=10)
        assert isinstance(mb, Message) and isinstance(mc, Message) and mb.com == mc.com == 3
        assert is_device_array(mb.data) and isinstance(mc.data, np.ndarray)
        assert np.array_equal(mb.data.get(), mc.data)


async def test_to_device_recv_cancelled_during_copy_loses_nothing(node: aiopdbp.Node, sim: SimBackend) -> None:
    async with node.process("c") as c, node.process("g", PType.GPU, to_device=True) as g:
        gate = sim.gate("h2d", 1)
        await c.send("g", np.arange(50.0))
        task = asyncio.create_task(g.recv())
        await linger(0.02)
        assert not task.done()
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
        gate.release()
        m = await g.recv(timeout=10)
        assert isinstance(m, Message) and is_device_array(m.data)
        assert np.array_equal(m.data.get(), np.arange(50.0))


async def test_staged_stream_overlaps_device_copies_and_transfers() -> None:
    """Across hosts, chunk copies out of the sender's device overlap copies
    into the receiver's device: several chunks are in flight at once."""
    sim = SimBackend(devices=1, copy_delay=0.002)
    try:
        async with aiopdbp.open_cluster(2, device=cfg(sim, max_in_flight=4)) as (n0, n1):
            async with n0.process("a", PType.GPU) as a, n1.process("b", PType.GPU) as b:
                host = np.random.default_rng(0).random((4096, 128))  # 4 MiB: 16 chunks
                task = asyncio.create_task(a.send_stream("b", sim.asarray(host)))
                s = await b.recv(timeout=10)
                assert isinstance(s, IncomingStream)
                assert np.array_equal((await s.read()).get(), host)
                await task
                assert n0.stats().devices["chunks_high_water"] >= 2
        running: dict[str, int] = {}
        both = False
        for e in sim.trace:  # is a d2h running while an h2d runs?
            if e.kind in ("d2h", "h2d") and e.phase in ("start", "end"):
                running[e.kind] = running.get(e.kind, 0) + (1 if e.phase == "start" else -1)
                both = both or (running.get("d2h", 0) > 0 and running.get("h2d", 0) > 0)
        assert both, "no device-to-host copy ran while a host-to-device copy did"
    finally:
        sim.close()


async def test_refused_device_stream_is_drained(sim: SimBackend) -> None:
    """A receiver that cannot take a device stream (no pipe for it) still
    takes its chunks, so the sender's pinned chunks come back."""
    async with aiopdbp.open_cluster(2, device=cfg(sim), max_pipes=1) as (n0, n1):
        async with n0.process("a", PType.GPU) as a, n1.process("b", PType.GPU):
            with pytest.raises(BrokenResourceError, match="cannot receive the stream"):
                await a.send_stream("b", sim.asarray(np.zeros((1024, 256))), timeout=10)
            await pools_return(n0, n1)
            assert n1.stats().devices["drained"] == 1


async def test_remote_device_message_copy_fault_raises_at_sender() -> None:
    sim = SimBackend(devices=1, faults=[Fault("d2h", 2)])
    try:
        async with aiopdbp.open_cluster(2, device=cfg(sim)) as (n0, n1):
            async with n0.process("a", PType.GPU) as a, n1.process("b", PType.GPU) as b:
                with pytest.raises(DeviceError, match="injected failure of d2h #2"):
                    await a.send("b", sim.asarray(np.zeros(200_000)), timeout=10)  # 2 chunks
                await a.send("b", sim.asarray(np.ones(10)), com=1, timeout=10)
                m = await b.recv(timeout=10)
                assert isinstance(m, Message) and m.com == 1  # the failed one never arrived
                assert np.array_equal(m.data.get(), np.ones(10))
    finally:
        sim.close()


async def test_remote_device_message_receiver_fault_breaks_sender() -> None:
    sim = SimBackend(devices=1, faults=[Fault("h2d", 1)])
    try:
        async with aiopdbp.open_cluster(2, device=cfg(sim)) as (n0, n1):
            async with n0.process("a", PType.GPU) as a, n1.process("b", PType.GPU) as b:
                with pytest.raises(BrokenResourceError, match="injected failure of h2d #1"):
                    await a.send("b", sim.asarray(np.zeros(100)), timeout=10)
                await a.send("b", b"after", timeout=10)
                m = await b.recv(timeout=10)
                assert isinstance(m, Message) and m.data == b"after"
    finally:
        sim.close()


async def test_stream_error_on_read_after_receiver_device_fault_names_it() -> None:
    sim = SimBackend(devices=1, faults=[Fault("h2d", 1, at="submit")])
    try:
        async with aiopdbp.open_cluster(2, device=cfg(sim)) as (n0, n1):
            async with n0.process("a", PType.GPU) as a, n1.process("b", PType.GPU) as b:
                task = asyncio.create_task(a.send_stream("b", sim.asarray(np.zeros(1000))))
                s = await b.recv(timeout=10)
                assert isinstance(s, IncomingStream)
                with pytest.raises(StreamError, match="failed at the receiver: DeviceError"):
                    await s.read()
                with pytest.raises(BrokenResourceError):
                    await task
    finally:
        sim.close()


# ------------------------------------------------------ benchmarks/gpu_stream
def _gpu_stream_module() -> Any:
    spec = importlib.util.spec_from_file_location("gpu_stream", dsc._sc.__file__.replace(
        "tests/scenarios.py", "benchmarks/gpu_stream.py"))
    assert spec is not None and spec.loader is not None
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


@pytest.mark.parametrize(("d2h", "h2d", "share"), [
    ([(0.0, 1.0), (2.0, 3.0)], [(1.0, 2.0), (3.0, 4.0)], 0.0),   # strictly one after the other
    ([(0.0, 4.0)], [(1.0, 2.0), (2.5, 3.0)], 1.0),                # the shorter stage always overlapped
    ([(0.0, 2.0)], [(1.0, 3.0)], 0.5),
])
def test_gpu_stream_overlap_share_measures_concurrent_copy_time(d2h: Any, h2d: Any, share: float) -> None:
    assert _gpu_stream_module().overlap_share(d2h, h2d) == pytest.approx(share)


@pytest.mark.mpi
@requires_mpi
@pytest.mark.timeout(200)
def test_gpu_stream_benchmark_runs_with_sim_on_2_ranks() -> None:
    proc = run_mpi(SCRIPTS_DIR.parent.parent / "benchmarks" / "gpu_stream.py", 2, timeout=180,
                   args=["--device", "sim", "--size", "4M", "--chunks", "256K", "--inflight", "1,4", "--repeat", "1"])
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-3000:]
    assert "SIMULATED device: a pipeline correctness check, not a performance figure" in proc.stdout
    rows = [line.split() for line in proc.stdout.splitlines() if line.split()[1:3] == ["256", "KiB"]]
    assert [r[3] for r in rows] == ["1", "4"] and all(0.0 <= float(r[-1]) <= 1.0 for r in rows), proc.stdout
