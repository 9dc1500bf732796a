import json, sys, collections
rows = [json.loads(l) for l in open(sys.argv[1])]
n = int(sys.argv[2]) if len(sys.argv) > 2 else 40
per = collections.defaultdict(float)
files = collections.defaultdict(float)
for r in rows:
    per[r["id"]] += r["dur"]
    files[r["id"].split("::")[0]] += r["dur"]
tot = sum(per.values())
print(f"tests {len(per)}  sum {tot:.0f}s  last t {rows[-1]['t']}")
print("--- files")
for f, d in sorted(files.items(), key=lambda x: -x[1])[:30]:
    print(f"{d:8.1f} {100*d/tot:5.1f}% {f}")
print("--- tests")
for t, d in sorted(per.items(), key=lambda x: -x[1])[:n]:
    print(f"{d:8.1f} {t}")
fails = [r for r in rows if r["outcome"] == "failed"]
for r in fails: print("FAILED", r["id"], r["when"])
