# usage: baba.sh SIZE PAIRS NB KINDS -- as abab.sh, the branch first in each pair (order check)
cd "$(dirname "$0")"; uptime
for i in $(seq $2); do
  for side in branch base; do
    d=/tmp/arrays5-base; [ $side = branch ] && d=/work/wt/arrays5
    echo "== $side $i"; PYTHONPATH=$d nice -n 5 /work/wt/arrays5/.venv/bin/python ab3.py $1 ${3:-60} ${4:-numpy,torch,numpy+calls}
  done
done; uptime
