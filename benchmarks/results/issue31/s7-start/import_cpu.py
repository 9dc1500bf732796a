"""CPU seconds (user + sys) of a fresh interpreter importing each set of modules:
the median of --repeats runs, each set run in turn (load disturbs CPU time less
than wall time).  python import_cpu.py [--repeats K] [--python PY]"""
import argparse, resource, statistics, subprocess, sys

SETS = {
    "pass": "pass",
    "numpy": "import numpy",
    "raw: numpy + mpi4py.MPI (MPI_Init)": "import numpy; from mpi4py import MPI",
    "import aiopdbp": "import aiopdbp",
    "aiopdbp.runtime.node": "import aiopdbp.runtime.node",
    "rankout + scale_job": "import aiopdbp.rankout, aiopdbp.bench.scale_job",
    "scale_job + transport.mpi (MPI_Init)": "import aiopdbp.bench.scale_job, aiopdbp.transport.mpi, aiopdbp.hosts.liveness",
    "rankout + scale_job + bench.cli (its import before the lazy bench package)": "import aiopdbp.rankout, aiopdbp.bench.scale_job, aiopdbp.bench.cli",
    "floor: numpy asyncio msgpack uvloop": "import numpy, asyncio, msgpack, uvloop",
    "floor + aiopdbp.bench (cli, plan, workload)": "import numpy, asyncio, msgpack, uvloop, aiopdbp.bench",
    "floor + aiopdbp.device.backend": "import numpy, asyncio, msgpack, uvloop, aiopdbp.device.backend",
    "floor + aiopdbp.wire.codec": "import numpy, asyncio, msgpack, uvloop, aiopdbp.wire.codec",
    "floor + aiopdbp.hosts": "import numpy, asyncio, msgpack, uvloop, aiopdbp.hosts",
    "floor + aiopdbp.streams.devicepath": "import numpy, asyncio, msgpack, uvloop, aiopdbp.streams.devicepath",
}
import os
if os.environ.get("SETS"):
    SETS = {k: v for k, v in SETS.items() if any(w in k for w in os.environ["SETS"].split(";"))}

def cpu(py, code):
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    subprocess.run([py, "-c", code], check=True)
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    return (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)

p = argparse.ArgumentParser()
p.add_argument("--repeats", type=int, default=5)
p.add_argument("--python", default=sys.executable)
a = p.parse_args()
res = {k: [] for k in SETS}
for _ in range(a.repeats):
    for k, code in SETS.items():
        res[k].append(cpu(a.python, code))
for k, v in res.items():
    print(f"{statistics.median(v) * 1e3:7.0f} ms  (min {min(v) * 1e3:.0f})  {k}")
