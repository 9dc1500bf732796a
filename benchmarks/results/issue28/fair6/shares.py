"""Shares of fair per 5 s window from a FAIR line with --bucket B: fixed windows and every sliding window."""
import json, sys
b = float(sys.argv[1]) if len(sys.argv) > 1 else 0.5
r = json.loads(sys.stdin.read().split("FAIR ", 1)[1].splitlines()[0])
names = list(r["counts"]); bk = [[x[n] for n in names] for x in r["buckets"]]
k = int(round(5 / b))
def shares(rows):
    tot = [sum(c) for c in zip(*rows)]; fair = sum(tot) / len(tot)
    return tot, [round(c / fair, 2) for c in tot]
print("counts", r["counts"])
for i in range(0, len(bk) - k + 1, k):
    print("window", i * b, *shares(bk[i:i + k]))
lo = min(min(shares(bk[i:i + k])[1]) for i in range(len(bk) - k + 1))
hi = max(max(shares(bk[i:i + k])[1]) for i in range(len(bk) - k + 1))
print(f"any sliding 5 s window (step {b} s): {lo}-{hi}")
