# usage: pp.sh PAIRS -- numpy and torch runs of bench pingpong alternated (2 ranks), this checkout's venv
cd "$(dirname "$0")"
for i in $(seq $1); do for p in numpy torch; do
  f=pp_r${i}_$p.txt; uptime > $f
  nice -n 5 aiopdbp bench pingpong --sizes 8,64K --impls aiopdbp,mpi4py --repeat 3 --hops --payload $p >> $f 2>&1
  uptime >> $f
done; done
