"""Run scale_job's rank (or scale_raw with --raw), writing PID->rank to $PIDDIR/pid-RANK."""
import os, sys
d = os.environ.get("PIDDIR")
if d:
    with open(os.path.join(d, f"pid-{os.environ.get('PMI_RANK','x')}"), "w") as f:
        f.write(str(os.getpid()))
if "--raw" in sys.argv:
    import importlib.util, runpy
    spec = importlib.util.find_spec("aiopdbp")
    sys.argv = [sys.argv[0], *(a for a in sys.argv[1:] if a != "--raw")]
    runpy.run_path(os.path.join(os.path.dirname(spec.origin), "bench", "scale_raw.py"), run_name="__main__")
else:
    import aiopdbp.bench.scale_job as job
    raise SystemExit(job.main(["rank", *sys.argv[1:]]))
