"""The device-path scenarios and checks over CuPy on a real GPU.

Marked ``gpu``; skipped as a whole without CuPy or a CUDA device.  On a GPU
machine::

    python3 tools/dev.py test tests/test_devicepath_cupy.py -m gpu -v

* every device scenario of ``tests/devicepath_scenarios.py`` that needs no
  simulator control, over one and two in-process hosts with CuPy arrays;
* the same under ``mpiexec`` with 2 ranks (both on the one GPU of a lent
  machine: default device = local rank modulo the visible devices);
* ordering after a kernel still running on the producer's stream (held by a
  spinning kernel, released by the test), foreign ``__cuda_array_interface__``
  and DLPack sources, ``gp.stream`` is a CuPy stream.
"""

from __future__ import annotations

import asyncio
import dataclasses
from collections.abc import Iterator
from typing import Any

import numpy as np
import pytest

pytestmark = [pytest.mark.gpu, pytest.mark.timeout(60, method="thread")]  # a CUDA call blocked behind a held kernel ignores signals

from tests.cuda_guard import cupy_or_skip

cp, _NDEV = cupy_or_skip()

import aiopdbp  # noqa: E402
from aiopdbp import Message, PType  # noqa: E402
from aiopdbp.streams.devicebind import DeviceConfig  # noqa: E402

from tests import devicepath_scenarios as dsc
from tests.mpirun import SCRIPTS_DIR, requires_mpi, run_mpi

CUPY = DeviceConfig(backend="cupy", pool_bytes=4 << 20, chunk_size=dsc.CHUNK, max_in_flight=4)
NAMES = [n for n in dsc.SCENARIOS if n not in dsc.SIM_ONLY]


def _over_cupy(name: str) -> dsc.Scenario:
    sc = dsc.SCENARIOS[name]
    return dataclasses.replace(sc, options={"device": dataclasses.replace(CUPY)})


@pytest.fixture(autouse=True)
def _cupy_scenarios(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    monkeypatch.setattr(dsc, "BACKEND", "cupy")
    yield
    cp.cuda.runtime.deviceSynchronize()  # teardown only


@pytest.mark.parametrize("hosts", [1, 2])
@pytest.mark.parametrize("name", NAMES)
@pytest.mark.timeout(120, method="thread")
async def test_device_scenario_over_cupy(name: str, hosts: int) -> None:
    if hosts == 1 and name in dsc.REMOTE_ONLY:
        pytest.skip("needs two hosts")
    await dsc.run_inproc(_over_cupy(name), hosts)


@requires_mpi
@pytest.mark.mpi
@pytest.mark.timeout(300, method="thread")
def test_device_scenarios_over_cupy_mpi_2ranks() -> None:
    proc = run_mpi(SCRIPTS_DIR / "run_scenarios.py", 2, args=["--registry", "tests.devicepath_scenarios", *NAMES],
                   timeout=240, env={"AIOPDBP_TEST_DEVICE": "cupy"})
    ok = proc.stdout.count(" OK ")
    assert proc.returncode == 0 and ok == 2 * len(NAMES), proc.stdout[-3000:] + proc.stderr[-3000:]


# ------------------------------------------------------------------ holds
_GATE_SRC = r"""
extern "C" __global__ void aiopdbp_gate(const volatile int* flag) {
    while (*flag == 0) { __nanosleep(1000); }
}
"""


class _Hold:
    """A one-thread kernel spinning on a pinned flag: "the producer's work is
    still pending" without timing."""

    def __init__(self, stream: Any) -> None:
        self._memory = cp.cuda.alloc_pinned_memory(4)
        self._flag = np.frombuffer(self._memory, np.int32, 1)
        self._flag[0] = 0
        with stream:
            cp.RawKernel(_GATE_SRC, "aiopdbp_gate")((1,), (1,), (np.uint64(self._flag.ctypes.data),))

    def release(self) -> None:
        self._flag[0] = 1


class _ForeignCAI:
    def __init__(self, arr: Any) -> None:
        self._arr = arr
        self.__cuda_array_interface__ = arr.__cuda_array_interface__


class _ForeignDLPack:
    def __init__(self, arr: Any) -> None:
        self._arr = arr

    def __dlpack__(self, **kwargs: Any) -> Any:
        return self._arr.__dlpack__(**kwargs)

    def __dlpack_device__(self) -> Any:
        return self._arr.__dlpack_device__()


async def test_gp_stream_is_a_cupy_stream() -> None:
    async with aiopdbp.open_node(device=CUPY) as node, node.process("g", PType.GPU) as gp:
        assert isinstance(gp.stream, cp.cuda.Stream) and gp.stream.is_non_blocking
        assert gp.device == 0


@pytest.mark.parametrize("hosts", [1, 2])
async def test_send_waits_for_kernel_on_producer_stream(hosts: int) -> None:
    async with aiopdbp.open_cluster(hosts, device=CUPY) as nodes:
        async with nodes[0].process("a", PType.GPU) as a, nodes[-1].process("b", PType.GPU) as b:
            s = cp.cuda.Stream(non_blocking=True)
            with s:
                x = cp.zeros(1 << 20, dtype=cp.float32)
                hold = _Hold(s)
                x += 7  # queued behind the hold
                task = asyncio.create_task(a.send("b", x))  # s is the current stream here
            for _ in range(200):  # give a wrong implementation every chance to copy early
                await asyncio.sleep(0.001)
            assert not task.done()
            hold.release()
            await task
            m = await b.recv(timeout=30)
            assert isinstance(m, Message) and float(m.data.min()) == 7.0 == float(m.data.max())


@pytest.mark.parametrize("wrap", [_ForeignCAI, _ForeignDLPack])
@pytest.mark.parametrize("hosts", [1, 2])
async def test_foreign_device_arrays_are_sent(hosts: int, wrap: Any) -> None:
    host = np.arange(600 * 500, dtype=np.float32).reshape(600, 500)
    async with aiopdbp.open_cluster(hosts, device=CUPY) as nodes:
        async with nodes[0].process("a", PType.GPU) as a, nodes[-1].process("b", PType.GPU) as b:
            await a.send("b", wrap(cp.asarray(host)))
            m = await b.recv(timeout=30)
            assert isinstance(m, Message) and isinstance(m.data, cp.ndarray)
            np.testing.assert_array_equal(cp.asnumpy(m.data), host)


@pytest.mark.parametrize("hosts", [1, 2])
async def test_cuda_tensors_arrive_as_cuda_tensors(hosts: int) -> None:
    """A CUDA torch tensor sent by send and send_stream arrives at an SGP as
    a CUDA torch tensor on its device (torch.from_dlpack of the received
    CuPy array), equal to what was sent; at an NGP as a CPU tensor."""
    torch = pytest.importorskip("torch")
    if not torch.cuda.is_available():
        pytest.skip("torch without CUDA")
    t = torch.arange(600 * 500, dtype=torch.float32, device="cuda:0").reshape(600, 500)
    async with aiopdbp.open_cluster(hosts, device=CUPY) as nodes:
        async with nodes[0].process("a", PType.GPU) as a, nodes[-1].process("b", PType.GPU) as b, \
                nodes[-1].process("n") as n:
            await a.send("b", t)
            await a.send_stream("b", t)
            m = await b.recv(timeout=30)
            s = await b.recv(timeout=30)
            assert isinstance(m, Message) and isinstance(s, aiopdbp.IncomingStream)
            for what, got in (("message", m.data), ("read()", await s.read())):
                assert type(got) is torch.Tensor and got.is_cuda and got.device.index == b.device, f"{what}: {got!r:.80}"
                assert torch.equal(got, t), what
            await a.send("n", t)
            m = await n.recv(timeout=30)
            assert isinstance(m, Message)
            assert type(m.data) is torch.Tensor and not m.data.is_cuda and torch.equal(m.data, t.cpu())
