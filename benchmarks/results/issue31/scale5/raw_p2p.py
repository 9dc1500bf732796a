"""Raw mpi4py: memory (VmRSS, RssAnon, RssShmem in KiB) of a point-to-point all-to-all
(MSGS rounds of one 1500 B Isend/Irecv with every peer: about what aiopdbp's blocks are in
the 20 x 256 B all-to-all), then of 20 MPI_Alltoall, issue 31 (scale5).

``nice -n 10 mpiexec -n N python raw_p2p.py 6``; ranks 0, 1 and N/2 print a JSON line.
"""
import sys, json
from mpi4py import MPI
import numpy as np
def mem():
    d={}
    for line in open("/proc/self/status"):
        if line.startswith(("VmRSS","RssAnon","RssShmem")):
            k,v=line.split(":"); d[k]=int(v.split()[0])
    return (d["VmRSS"],d["RssAnon"],d["RssShmem"])
comm=MPI.COMM_WORLD; r=comm.rank; N=comm.size
MSGS=int(sys.argv[1]) if len(sys.argv)>1 else 6
comm.Barrier(); m0=mem()
buf=np.zeros(1500,dtype=np.uint8); rb=[np.zeros(1500,dtype=np.uint8) for _ in range(N)]
for _ in range(MSGS):
    reqs=[comm.Irecv(rb[(r-k)%N], source=(r-k)%N, tag=1) for k in range(1,N)]
    reqs+=[comm.Isend(buf, dest=(r+k)%N, tag=1) for k in range(1,N)]
    MPI.Request.Waitall(reqs)
m1=mem(); comm.Barrier()
a=np.zeros(N*64,dtype=np.uint8); b=np.zeros(N*64,dtype=np.uint8)
for _ in range(20): comm.Alltoall(a,b)
comm.Barrier(); m2=mem()
if r in (0,1,N//2): print(json.dumps({"rank":r,"N":N,"start":m0,"p2p":m1,"alltoall":m2}),flush=True)
