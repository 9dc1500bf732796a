"""Per-module instructions of a fresh interpreter's imports, deterministic (callgrind).

``python modirefs.py [--top 60] CODE DIR [DIR...]``: runs ``python -c CODE`` under
``valgrind --tool=callgrind`` once per checkout DIR (first on ``sys.path``, empty cwd,
``PYTHONHASHSEED=0``), with a hook on ``importlib._bootstrap._find_and_load`` that asks
callgrind to dump its counts (``CALLGRIND_DUMP_STATS_AT``, through ``cgmark.so``, built
from ``cgmark.c``) at every import's start and end, labelled with the module then on top of
the import stack -- so each segment's instructions are that module's *self* cost (its own
top-level code, unmarshalling, class creation, the garbage collections it triggers), the
segment before the first import is ``<start>``, after the last ``<main>`` (CODE itself).
Prints each module's self instructions (millions) per DIR, side by side, and the totals.
The hook's own cost (a ctypes call per import edge, ~360 imports) is in every column alike.
"""
import argparse, collections, glob, os, re, subprocess, sys, tempfile
from pathlib import Path

HOOK = r'''
import ctypes as _c, importlib._bootstrap as _b
_m = _c.CDLL(__SO__).mark
_m.argtypes = [_c.c_char_p]
_orig = _b._find_and_load
_stack = [b"<main>"]
def _fl(name, import_):
    _m(_stack[-1])
    _stack.append(name.encode())
    try:
        return _orig(name, import_)
    finally:
        _m(_stack.pop())
_m(b"<start>")
_b._find_and_load = _fl
'''

SO = os.environ.get("CGMARK", "/tmp/import13-cgmark.so")


def once(py: str, d: str, code: str) -> dict[str, int]:
    out = tempfile.mkdtemp(prefix="modirefs-")
    cwd = tempfile.mkdtemp(prefix="modirefs-cwd-")
    env = dict(os.environ, PYTHONPATH=d, PYTHONHASHSEED="0", OPENBLAS_NUM_THREADS="1")
    hook = HOOK.replace("__SO__", repr(SO))
    subprocess.run(["valgrind", "--tool=callgrind", f"--callgrind-out-file={out}/cg.%p",
                    "--dump-line=no", "--compress-strings=no", py, "-c", hook + "\n" + code],
                   env=env, cwd=cwd, check=True, capture_output=True)
    per: dict[str, int] = collections.Counter()
    for f in glob.glob(f"{out}/cg.*"):
        text = Path(f).read_text(errors="replace")
        m = re.search(r"^desc: Trigger: Client Request: (.*)$", text, re.M)
        label = m.group(1) if m else "<end>"
        t = re.search(r"^(?:summary|totals): (\d+)", text, re.M)
        per[label] += int(t.group(1)) if t else 0
        os.unlink(f)
    os.rmdir(out)
    os.rmdir(cwd)
    return per


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--top", type=int, default=60)
    p.add_argument("--python", default=sys.executable)
    p.add_argument("--only", default="", help="print only modules starting with this")
    p.add_argument("--nogc", action="store_true", help="gc.disable() first: each module's cost without the collections")
    p.add_argument("code")
    p.add_argument("dirs", nargs="+")
    a = p.parse_args()
    code = ("import gc; gc.disable()\n" if a.nogc else "") + a.code
    res = {d: once(a.python, d, code) for d in a.dirs}
    print(f"code: {a.code}")
    for d, per in res.items():
        own = sum(v for k, v in per.items() if k.startswith("aiopdbp"))
        print(f"{d}: total {sum(per.values()) / 1e6:.1f} M, aiopdbp modules' self {own / 1e6:.1f} M, "
              f"modules {len(per)}")
    names = sorted(set().union(*res.values()), key=lambda k: -max(r.get(k, 0) for r in res.values()))
    names = [n for n in names if n.startswith(a.only)][:a.top]
    print("self M instructions: " + " | ".join(a.dirs))
    for n in names:
        print("  ".join(f"{res[d].get(n, 0) / 1e6:8.2f}" for d in a.dirs) + f"  {n}")


main()
