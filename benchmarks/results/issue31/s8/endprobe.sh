#!/bin/bash
# per-rank CPU after the node closed (bench scale's rank program under plain mpiexec, N ranks): endprobe.sh CHECKOUT [N]
here=$(cd "$(dirname "$0")" && pwd)
co=$1; n=${2:-32}
d=$(mktemp -d /tmp/job10-endp-XXXX)
cd $co && t0=$(date +%s.%N) && AIOPDBP_LAST_WORDS=0 AIOPDBP_RANK_PREFIX=0 nice -n 10 ${VENV:-.venv}/bin/mpiexec -n $n /usr/bin/time -f "TIME %e %U %S" ${VENV:-.venv}/bin/python -m aiopdbp.rankout $here/endprobe.py $d rank --pattern alltoall --out $d --launched $t0 2> $d/stderr.txt >/dev/null
t1=$(date +%s.%N)
${VENV:-.venv}/bin/python - "$d" "$t0" "$t1" <<'PY'
import json, sys, glob, statistics as st, ast
d, t0, t1 = sys.argv[1], float(sys.argv[2]), float(sys.argv[3])
tot = [float(l.split()[2]) + float(l.split()[3]) for l in open(d + "/stderr.txt") if l.startswith("TIME")]
recs = {json.load(open(f))["rank"]: json.load(open(f)) for f in glob.glob(d + "/aiopdbp-*.json")}
ends = {int(f.split("-")[-1][:-4]): ast.literal_eval(open(f).read()) for f in glob.glob(d + "/end-*.txt")}
closed = st.median(r["phases"]["closed"][1] for r in recs.values())
ret = st.median(e["main_returned"] for e in ends.values()); last = st.median(e["atexit_last"] for e in ends.values())
print(f"wall {t1-t0:.2f}; CPU medians: closed {closed:.4f}, main returned {ret:.4f} (+{ret-closed:.4f}), last atexit {last:.4f} (+{last-ret:.4f}), process total {st.median(tot):.3f} (+{st.median(tot)-last:.3f}: finalization and MPI_Finalize, 10 ms ticks)")
PY
rm -rf $d
