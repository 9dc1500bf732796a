"""cluster_main of aiopdbp bench scale with a longer handshake timeout (start-up at 1024 nodes
on a loaded 2-core VM takes longer than the default 30 s)."""
import asyncio, functools, json, sys, time
from pathlib import Path
import aiopdbp.runtime.cluster as cl
from aiopdbp.bench import scale_job
orig = cl.open_cluster
cl.open_cluster = functools.partial(orig, handshake_timeout=600, name_timeout=300)
n = int(sys.argv[1]); out = Path(sys.argv[2])
t0 = time.perf_counter()
rc = asyncio.run(scale_job.cluster_main(n, out))
rec = json.loads(out.read_text())
import resource
print(json.dumps({k: rec[k] for k in rec if k != "impl"}), "wall", round(time.perf_counter() - t0, 2),
      "peak MiB", round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024, 1))
