"""Where open_node's time goes, per rank: `aiopdbp launch -n N python init_split.py OUT LAUNCHED [inside]`
(LAUNCHED: the launcher's time.time()).  Stamps (wall since launch, CPU s) after the
imports, MPI_Init (load_mpi), the rest of MPITransport(), Node(), Node.start(), the
close, and writes OUT/init-RANK.json; `python init_split.py --sum OUT` summarises."""
import json, sys, time
from pathlib import Path

if sys.argv[1] == "--sum":
    recs = [json.loads(p.read_text()) for p in sorted(Path(sys.argv[2]).glob("init-*.json"))]
    names = list(recs[0]["st"])
    print(f"{len(recs)} ranks; stage: end s since launch min/median/max, CPU s in stage median/max")
    prev = None
    for k in names:
        ends = sorted(r["st"][k][0] for r in recs)
        cpu = sorted(r["st"][k][1] - (r["st"][prev][1] if prev else 0.0) for r in recs)
        print(f"  {k:10} {ends[0]:6.2f} {ends[len(ends)//2]:6.2f} {ends[-1]:6.2f}   cpu {cpu[len(cpu)//2]:.3f} {cpu[-1]:.3f}")
        prev = k
    raise SystemExit(0)

out, launched = Path(sys.argv[1]), float(sys.argv[2])
st = {}
def stamp(k):
    st[k] = (time.time() - launched, time.process_time())

import atexit, os

def _last():   # registered before mpi4py's: runs after MPI_Finalize, at the interpreter's end
    stamp("finalized")
    Path(out, f"init-{RANK}.json").write_text(json.dumps({"st": st}))

atexit.register(_last)

import asyncio
import aiopdbp
from aiopdbp.runtime.node import Node
from aiopdbp.hosts.sequencer import Sequencer
from aiopdbp.transport.mpi import MPITransport as _T


def _stamped(cls, meth, name):   # stamp the end of one step of Node.start()
    orig = getattr(cls, meth)

    async def wrapped(self, *a, **k):
        r = await orig(self, *a, **k)
        stamp(name)
        return r
    setattr(cls, meth, wrapped)


_stamped(_T, "_join", "s.idup_join")
_stamped(_T, "start", "s.engine")
_stamped(Sequencer, "handshake", "s.handshake")
stamp("imports")
INSIDE = len(sys.argv) > 3 and sys.argv[3] == "inside"   # MPI_Init inside aiopdbp.run, as open_node()

def transport():
    from aiopdbp.transport.mpiload import load_mpi
    global MPI
    MPI = load_mpi(60)
    stamp("mpi_init")
    from aiopdbp.transport.mpi import MPITransport
    tr = MPITransport(join_timeout=60)
    stamp("transport")
    return tr

if not INSIDE:
    tr = transport()

async def main():
    node = Node(tr if not INSIDE else transport())
    stamp("node")
    async with node:
        stamp("start")
    stamp("close")
    return node.rank

RANK = aiopdbp.run(main())
stamp("run_returned")
