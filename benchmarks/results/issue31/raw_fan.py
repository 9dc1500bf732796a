import sys, json, time
from mpi4py import MPI
def st():
    d={}
    for line in open("/proc/self/status"):
        k,_,v=line.partition(":")
        if k in ("VmRSS","RssAnon","RssShmem"): d[k]=int(v.split()[0])
    return d
comm=MPI.COMM_WORLD; r=comm.Get_rank(); n=comm.Get_size()
comm.Barrier()
a=st()
mode=sys.argv[1]
if mode=="fan":
    if r==0:
        st_=MPI.Status()
        for _ in range(n-1):
            m=comm.mprobe(MPI.ANY_SOURCE, 5, st_); m.recv()
        for k in range(int(sys.argv[2])):
            reqs=[comm.isend(b"x"*100, dest=h, tag=6) for h in range(1,n)]
            MPI.Request.Waitall(reqs)
    else:
        comm.send(b"y"*100, dest=0, tag=5)
        for k in range(int(sys.argv[2])):
            comm.recv(source=0, tag=6)
comm.Barrier()
b=st()
if r in (0,1): print(mode, n, r, "after barrier", a, "end", b, flush=True)
