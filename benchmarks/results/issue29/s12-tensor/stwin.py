"""stwin.py STRACE_FILE N: syscalls per round trip per pid inside pp2.py's measured loop
(between its /MARK-start and /MARK-stop stats; strace -f output)."""
import collections, re, sys
f, n = sys.argv[1], int(sys.argv[2])
inside, counts = {}, collections.defaultdict(collections.Counter)
for line in open(f):
    m = re.match(r"(\d+)\s+(?:<\.\.\. )?(\w+)", line)
    if not m:
        continue
    pid, call = m.group(1), m.group(2)
    if "MARK-start" in line:
        inside[pid] = True; continue
    if "MARK-stop" in line:
        inside[pid] = False; continue
    if inside.get(pid) and "resumed" not in line:
        counts[pid][call] += 1
for pid, c in sorted(counts.items()):
    print(pid, " ".join(f"{k}={v / n:.3f}" for k, v in sorted(c.items())))
