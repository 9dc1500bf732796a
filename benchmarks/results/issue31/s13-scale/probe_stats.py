"""scale_job's rank with node.stats() timed (thread CPU) on every rank; prints rank 0's and writes STATS-RANK."""
import os, sys, time, json
import aiopdbp.runtime.node as nodemod
import aiopdbp.bench.scale_job as job
orig = nodemod.Node.stats
spent = []
def stats(self, *a, **k):
    t = time.thread_time()
    try:
        return orig(self, *a, **k)
    finally:
        spent.append(time.thread_time() - t)
nodemod.Node.stats = stats
rc = job.main(["rank", *sys.argv[1:]])
with open(os.path.join(os.environ["STATSDIR"], f"stats-{os.environ['PMI_RANK']}"), "w") as f:
    json.dump(spent, f)
raise SystemExit(rc)
