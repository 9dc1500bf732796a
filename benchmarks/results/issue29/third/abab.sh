# usage: abab.sh SIZE PAIRS -- base and branch processes alternated, ab3.py numpy,torch in each
cd /tmp/arrays3; uptime
for i in $(seq $2); do
  for side in base branch; do
    d=/tmp/arrays3-base; [ $side = branch ] && d=/work/wt/arrays3
    echo "== $side $i"; PYTHONPATH=$d nice -n 5 /work/wt/arrays3/.venv/bin/python ab3.py $1 60 numpy,torch,numpy+calls
  done
done; uptime
