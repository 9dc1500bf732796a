import subprocess, re, sys
def load(f, inc):
    args = ["callgrind_annotate", "--threshold=100"] + (["--inclusive=yes"] if inc else [])
    out = subprocess.run(args + [f], capture_output=True, text=True).stdout
    d = {}
    for line in out.splitlines():
        m = re.match(r"\s*([\d,]+) \([^)]*\)\s+(.*)", line)
        if m and "PROGRAM TOTALS" not in line and not re.search(r"\(\d[\d,]*x\)", line):
            name = m.group(2).split(" [")[0]
            name = name.split(":")[-1] if ":" in name else name
            d[name] = max(d.get(name, 0), int(m.group(1).replace(",", ""))) if inc else d.get(name, 0) + int(m.group(1).replace(",", ""))
    return d
inc = len(sys.argv) > 5
a, b = load(sys.argv[1], inc), load(sys.argv[2], inc); n = int(sys.argv[3])
diff = sorted(((b.get(k, 0) - a.get(k, 0)) / n, k) for k in set(a) | set(b))
diff.reverse()
if not inc: print("total", sum(x for x, _ in diff))
for x, k in diff[:int(sys.argv[4])]:
    if inc and "'" in k: continue
    print("%8.0f %s" % (x, k))
