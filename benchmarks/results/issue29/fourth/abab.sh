# usage: abab.sh SIZE PAIRS NB -- base and branch processes alternated, ab3.py numpy,torch,numpy+calls in each
# base: main d4cdde2 (git worktree add --detach /tmp/arrays5-base d4cdde2, with the branch's
# compiled cblocks/ckernel/cgate/csender copied in: their sources are main's); branch: wt/arrays5
cd "$(dirname "$0")"; uptime
for i in $(seq $2); do
  for side in base branch; do
    d=/tmp/arrays5-base; [ $side = branch ] && d=/work/wt/arrays5
    echo "== $side $i"; PYTHONPATH=$d nice -n 5 /work/wt/arrays5/.venv/bin/python ab3.py $1 ${3:-60} numpy,torch,numpy+calls
  done
done; uptime
