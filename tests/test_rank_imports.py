"""A rank starts light: what ``aiopdbp.run``/``open_node`` and ``bench scale``'s
rank program import at start leaves out what a job may never use (the
simulated device, the device path, the bench CLI, difflib's hints, the in-process cluster,
SGPs, the stats types), since every rank of a job
pays for its imports before its first message."""

from __future__ import annotations

import ast
import subprocess
import sys
import textwrap

import pytest

from tests.mpirun import REPO_ROOT

pytestmark = pytest.mark.timeout(60)


def _loaded_after(imports: str, watched: tuple[str, ...]) -> list[str]:
    code = textwrap.dedent(f"""
        import sys
        {imports}
        print(sorted(m for m in sys.modules if m in {watched!r}))
    """)
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=50,
                          cwd=str(REPO_ROOT))
    assert proc.returncode == 0, proc.stderr
    loaded: list[str] = ast.literal_eval(proc.stdout)
    return loaded


def test_the_runtime_loads_no_device_simulator_difflib_or_uuid() -> None:
    assert _loaded_after("import aiopdbp.runtime.node",
                         ("aiopdbp.device.sim", "aiopdbp.device.simmem", "difflib", "uuid")) == []


def test_the_runtime_loads_no_cluster_sgp_or_stats() -> None:
    assert _loaded_after("import aiopdbp.runtime.job, aiopdbp.runtime.node",
                         ("aiopdbp.runtime.cluster", "aiopdbp.runtime.sgp", "aiopdbp.runtime.stats")) == []


def test_the_runtime_package_still_gives_its_names_on_first_use() -> None:
    assert _loaded_after("import aiopdbp.runtime as r; r.SGP, r.NodeStats, r.open_cluster",
                         ("aiopdbp.runtime.cluster", "aiopdbp.runtime.sgp", "aiopdbp.runtime.stats")) == [
        "aiopdbp.runtime.cluster", "aiopdbp.runtime.sgp", "aiopdbp.runtime.stats"]


def test_the_scale_rank_program_loads_no_bench_cli() -> None:
    assert _loaded_after("import aiopdbp.bench.scale_job",
                         ("aiopdbp.bench.cli", "aiopdbp.bench.plan", "aiopdbp.bench.workload",
                          "statistics")) == []


def test_a_rank_loads_no_numpy_typing_its_annotations_name() -> None:
    assert _loaded_after("import aiopdbp.rankout, aiopdbp.bench.scale_job, aiopdbp.runtime.job",
                         ("numpy.typing",)) == []


def test_the_lazy_names_still_load_on_first_use() -> None:
    assert _loaded_after("import aiopdbp.device, aiopdbp.bench; aiopdbp.device.SimBackend; aiopdbp.bench.main",
                         ("aiopdbp.device.sim", "aiopdbp.bench.cli")) == ["aiopdbp.bench.cli", "aiopdbp.device.sim"]


def test_a_rank_loads_neither_the_link_counters_nor_the_in_process_transport() -> None:
    assert _loaded_after("import aiopdbp.rankout, aiopdbp.bench.scale_job; import aiopdbp; aiopdbp.run, aiopdbp.open_node",
                         ("aiopdbp.hosts.linkstats", "aiopdbp.transport.inproc")) == []


def test_every_public_name_still_loads_from_its_package() -> None:
    code = ("import aiopdbp, aiopdbp.hosts, aiopdbp.hosts.link, aiopdbp.transport, aiopdbp.transport.inproc; "
            "[getattr(p, n) for p in (aiopdbp, aiopdbp.hosts, aiopdbp.transport) for n in p.__all__]; "
            "assert aiopdbp.LinkStats is aiopdbp.hosts.LinkStats is aiopdbp.hosts.link.LinkStats")
    assert _loaded_after(code, ("aiopdbp.hosts.linkstats", "aiopdbp.transport.inproc")) == [
        "aiopdbp.hosts.linkstats", "aiopdbp.transport.inproc"]


def test_a_rank_loads_no_device_path_until_it_needs_one() -> None:
    code = ("import aiopdbp.rankout, aiopdbp.bench.scale_job; import aiopdbp; aiopdbp.run, aiopdbp.open_node; "
            "from aiopdbp.runtime.node import Node; n = Node(); n.stats()")
    assert _loaded_after(code, ("aiopdbp.streams.devicebind", "aiopdbp.streams.devicepath",
                                "aiopdbp.device.staging", "aiopdbp.device.chunks")) == []


def test_the_device_path_is_made_when_asked_for() -> None:
    code = ("from aiopdbp.runtime.node import Node; from aiopdbp.streams.devicepath import DevicePath; "
            "n = Node(); assert type(n.devices) is DevicePath and n.devices is n.devices; "
            "assert n.stats().devices == n.devices.stats()")
    assert _loaded_after(code, ("aiopdbp.device.staging",)) == ["aiopdbp.device.staging"]


def test_a_named_device_backend_or_a_bad_one_is_met_when_the_node_is_made() -> None:
    code = ("import pytest; from aiopdbp.runtime.node import Node; "
            "pytest.raises(ValueError, Node, device='no-such-backend'); Node(device='sim')")
    assert _loaded_after(code, ("aiopdbp.streams.devicepath",)) == ["aiopdbp.streams.devicepath"]
