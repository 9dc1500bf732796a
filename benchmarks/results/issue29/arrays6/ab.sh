# usage: ab.sh SIZE REPEATS NB -- REPEATS processes of ab3.py SIZE NB numpy,torch,numpy+calls (this checkout, main 5b60995)
cd "$(dirname "$0")"; uptime
for i in $(seq $2); do echo "== branch $i"; PYTHONPATH=../../../.. nice -n 5 ../../../../.venv/bin/python ab3.py $1 ${3:-40} numpy,torch,numpy+calls; done; uptime
