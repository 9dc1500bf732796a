import json, sys, collections
per = collections.defaultdict(float); files = collections.defaultdict(float)
for l in open(sys.argv[1]):
    r = json.loads(l); per[r["id"]] += r["dur"]; files[r["id"].split("::")[0]] += r["dur"]
for f, tot in sorted(files.items(), key=lambda x: -x[1])[:int(sys.argv[2])]:
    rows = sorted(((v, k) for k, v in per.items() if k.startswith(f + "::")), reverse=True)
    print(f"### {f}: {len(rows)} tests, {tot:.1f} s\n\n| s | test |\n|---:|---|")
    for v, k in rows[:20]:
        print(f"| {v:.1f} | {k.split('::', 1)[1][:110]} |")
    print()
