"""Per-segment table of a diag_job.py run: ``python diag_table.py DIR``.

Segments between consecutive stamps of every rank (same names on every rank):
wall of the segment's end (rank 0 / latest rank), per rank the CPU, context
switches and engine counters in the segment (median and max over ranks, and the
sum of CPU over all ranks)."""
import json
import statistics
import sys
from pathlib import Path


def main(d):
    recs = {int(p.stem.split("-")[1]): json.loads(p.read_text()) for p in Path(d).glob("diag-*.json")}
    n = len(recs)
    names = [m["name"] for m in recs[0]]
    print(f"{d}: {n} ranks")
    hdr = f"{'segment':22} {'end r0':>7} {'end max':>7} {'wall max':>8} {'cpu sum':>7} {'cpu med':>7} {'cpu max':>7} " \
          f"{'vcsw med':>8} {'ivcsw med':>9} {'steps med':>9} {'idle med':>8} {'wake med':>8} {'sends med':>9} {'recvs med':>9} {'rings':>6}"
    print(hdr)
    for i in range(1, len(names)):
        seg = f"{names[i-1]}->{names[i]}"
        rows = []
        for r, ms in recs.items():
            a, b = ms[i - 1], ms[i]
            e = {k: b["eng"].get(k, 0) - a["eng"].get(k, 0) for k in b["eng"]} if a["eng"] else {}
            rows.append((r, b["wall"], b["wall"] - a["wall"], b["cpu"] - a["cpu"], b["nvcsw"] - a["nvcsw"],
                         b["nivcsw"] - a["nivcsw"], e))
        med = lambda j: statistics.median(x[j] for x in rows)
        emed = lambda k: statistics.median(x[6].get(k, 0) for x in rows)
        print(f"{seg:22} {rows[0][1] if rows[0][0]==0 else recs[0][i]['wall']:7.3f} {max(x[1] for x in rows):7.3f} "
              f"{max(x[2] for x in rows):8.3f} {sum(x[3] for x in rows):7.3f} {med(3):7.4f} {max(x[3] for x in rows):7.4f} "
              f"{med(4):8.0f} {med(5):9.0f} {emed('steps'):9.0f} {emed('idle_sleeps'):8.0f} {emed('wakeups'):8.0f} "
              f"{emed('sends'):9.0f} {emed('recvs'):9.0f} {emed('rings_sent'):6.0f}")


for d in sys.argv[1:]:
    main(d)
