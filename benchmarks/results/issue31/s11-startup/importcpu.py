"""User + system CPU of fresh interpreters running ``python -c CODE``, alternated between
variants: ``python importcpu.py N NAME=DIR:CODE ...`` (DIR first on sys.path, empty cwd).
Prints per variant the median and quartiles of the CPU ms (getrusage of the children)."""
import os, resource, statistics, subprocess, sys, tempfile

n = int(sys.argv[1])
variants = [(a.split("=", 1)[0], *a.split("=", 1)[1].split(":", 1)) for a in sys.argv[2:]]
cwd = tempfile.mkdtemp(prefix="importcpu-")
res = {name: [] for name, _, _ in variants}
for k in range(n):
    for name, d, code in (variants if k % 2 == 0 else variants[::-1]):
        before = resource.getrusage(resource.RUSAGE_CHILDREN)
        subprocess.run([os.environ.get("PY", sys.executable), "-c", code], cwd=cwd, check=True,
                       env=dict(os.environ, PYTHONPATH=d, OPENBLAS_NUM_THREADS="1"))
        after = resource.getrusage(resource.RUSAGE_CHILDREN)
        res[name].append(1e3 * (after.ru_utime - before.ru_utime + after.ru_stime - before.ru_stime))
os.rmdir(cwd)
for name, v in res.items():
    q = statistics.quantiles(v, n=4)
    print(f"{name:10} CPU ms median {statistics.median(v):6.1f}  quartiles {q[0]:6.1f} .. {q[2]:6.1f}  ({n} runs)")
