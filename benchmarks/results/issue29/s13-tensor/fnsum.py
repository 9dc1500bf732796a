"""fnsum.py N PATTERN... -- FILES: inclusive instructions per round trip of the functions whose
name matches each pattern (regex), summed over FILES (a 2-rank run's two outputs)."""
import re, subprocess, sys
i = sys.argv.index("--")
n, pats, files = int(sys.argv[1]), sys.argv[2:i], sys.argv[i + 1:]
tot = {p: 0 for p in pats}
for f in files:
    out = subprocess.run(["callgrind_annotate", "--auto=no", "--inclusive=yes", "--threshold=100", f],
                         capture_output=True, text=True).stdout
    for line in out.splitlines():
        m = re.match(r"\s*([\d,]+) \([ \d.]+%\)\s+(.*)", line)
        if not m:
            continue
        for p in pats:
            if re.search(p, m.group(2)):
                tot[p] += int(m.group(1).replace(",", ""))
for p in pats:
    print(f"{tot[p] / n:10.0f}  {p}")
