"""Run bench scale's rank program and stamp CPU after main() returns and at the last atexit handler:
mpiexec -n N python -m aiopdbp.rankout endprobe.py OUTDIR rank --pattern alltoall --out OUTDIR --launched T"""
import atexit, os, sys, time
out = sys.argv[1]; del sys.argv[1]
stamps = {}
def last():
    stamps["atexit_last"] = time.process_time()
    with open(f"{out}/end-{os.environ.get('PMI_RANK', '0')}.txt", "w") as f:
        f.write(repr(stamps))
atexit.register(last)   # registered first: runs last
from aiopdbp.bench.scale_job import main
rc = main()
stamps["main_returned"] = time.process_time()
sys.exit(rc)
