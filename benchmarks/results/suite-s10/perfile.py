"""perfile.py BASE.jsonl AFTER.jsonl FILE...: per-file top-20 (setup+call+teardown per test), before and after."""
import json, sys, collections
def load(p):
    per = collections.defaultdict(float)
    for l in open(p):
        r = json.loads(l); per[r["id"]] += r["dur"]
    return per
b, a = load(sys.argv[1]), load(sys.argv[2])
for f in sys.argv[3:]:
    for name, d in (("before", b), ("after", a)):
        rows = sorted(((v, k) for k, v in d.items() if k.startswith(f + "::")), reverse=True)
        print(f"### {f} -- {name}: {len(rows)} tests, {sum(v for v, _ in rows):.1f} s in all\n")
        print("| s | test |\n|---:|---|")
        for v, k in rows[:20]:
            print(f"| {v:.1f} | {k.split('::', 1)[1][:110]} |")
        print()
