"""Rank memory by phase (VmRSS, RssAnon, RssShmem in KiB) of an aiopdbp job, issue 31 (scale5).

``nice -n 10 aiopdbp launch -n N python mem_phases.py ring|alltoall``: start, after
``open_node``, after registration, after 20 x 256 B to each peer of the pattern (and from
each), after the GP is freed, after the node closed; ranks 0, 1 and N/2 print a JSON line.
"""
import asyncio, sys, json, os
from aiopdbp.runtime.node import open_node
from aiopdbp.runtime.job import run
PAT=sys.argv[1]
def mem():
    d={}
    for line in open("/proc/self/status"):
        if line.startswith(("VmRSS","RssAnon","RssShmem","VmHWM")):
            k,v=line.split(":"); d[k]=int(v.split()[0])
    return d
async def main():
    ph={}
    ph["start"]=mem()
    async with open_node() as node:
        N=node.size; r=node.rank
        names=[f"g{i}" for i in range(N)]
        ph["open"]=mem()
        async with node.process(names[r]) as gp:
            ph["reg"]=mem()
            peers=[names[(r-1)%N],names[(r+1)%N]] if PAT=="ring" else [names[(r+k)%N] for k in range(1,N)]
            async def s():
                for _ in range(20):
                    for p in peers: await gp.send(p, bytes(256), timeout=120)
            t=asyncio.create_task(s())
            for _ in range(20*len(peers)): await gp.recv(timeout=120)
            await t
            ph["traffic"]=mem()
            await asyncio.sleep(0.3)
        ph["free"]=mem()
    ph["closed"]=mem()
    if r in (0,1,N//2):
        print(json.dumps({"rank":r,"N":N,**{k:(v["VmRSS"],v["RssAnon"],v["RssShmem"]) for k,v in ph.items()}}),flush=True)
run(main())
