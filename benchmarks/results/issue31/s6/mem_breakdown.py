"""Per-peer memory breakdown of the all-to-all (issue 31, sixth session).

``nice -n 10 aiopdbp launch -n N python mem_breakdown.py`` (``TM=1``: with a tracemalloc
diff around the traffic): every rank sends 20 x 256 B to every other and receives as many;
ranks 0, 1 and N/2 print one JSON line: (VmRSS, RssAnon, RssShmem, VmHWM) KiB at each
phase (start, open, reg, traffic, free, closed), MPI messages sent/received by kind,
/proc/self/smaps Rss by mapping kind at the traffic phase ([anon-arena]: the pool's
arena, an anonymous mapping of 60 MiB or more; /dev/shm/*: MPICH's shared segments).
"""
import asyncio, sys, json, os, tracemalloc, collections
TM = os.environ.get("TM") == "1"
if TM: tracemalloc.start(1)
from aiopdbp.runtime.node import open_node
from aiopdbp.runtime.job import run
def smaps():
    out=[];cur=None
    for line in open("/proc/self/smaps"):
        f=line.split()
        if "-" in f[0] and not line[0].isupper():
            cur=[f[5] if len(f)>5 else "[anon]",0,0,0]; out.append(cur)
        elif f[0]=="Size:": cur[1]=int(f[1])
        elif f[0]=="Rss:": cur[2]=int(f[1])
        elif f[0]=="Anonymous:": cur[3]=int(f[1])
    agg={}
    for n,sz,rss,an in out:
        key=n if n!="[anon]" else ("[anon-arena]" if sz>=60000 else "[anon]")
        if "mpich_shm" in key or key.startswith("/dev/shm"): key="/dev/shm/*"
        if key.endswith(".so") or ".so." in key: key="[.so]"
        a=agg.setdefault(key,[0,0,0]); a[0]+=sz;a[1]+=rss;a[2]+=an
    return {k:v for k,v in agg.items() if v[1]>200}
def mem():
    d={}
    for line in open("/proc/self/status"):
        if line.startswith(("VmRSS","RssAnon","RssShmem","VmHWM")):
            k,v=line.split(":"); d[k]=int(v.split()[0])
    return d
async def main():
    ph={"start":mem()}
    async with open_node() as node:
        N=node.size; r=node.rank
        names=[f"g{i}" for i in range(N)]
        ph["open"]=mem()
        async with node.process(names[r]) as gp:
            ph["reg"]=mem()
            await asyncio.sleep(0.5)
            if TM: s0=tracemalloc.take_snapshot()
            peers=[names[(r+k)%N] for k in range(1,N)]
            async def s():
                for _ in range(20):
                    for p in peers: await gp.send(p, bytes(256), timeout=120)
            t=asyncio.create_task(s())
            for _ in range(20*len(peers)): await gp.recv(timeout=120)
            await t
            ph["traffic"]=mem()
            maps=smaps()
            st=node.stats()
            if TM:
                s1=tracemalloc.take_snapshot()
                top=[(str(x.traceback[0]),x.size_diff,x.count_diff) for x in s1.compare_to(s0,"lineno")[:12]]
                heap=sum(x.size_diff for x in s1.compare_to(s0,"lineno"))
            await asyncio.sleep(1.0)
        ph["free"]=mem()
    ph["closed"]=mem()
    sent=collections.Counter(); recv=collections.Counter()
    for h,kinds in st.messages_sent.items():
        for k,v in kinds.items(): sent[k]+=v
    for h,kinds in st.messages_received.items():
        for k,v in kinds.items(): recv[k]+=v
    if r in (0,1,N//2):
        rec={"rank":r,"N":N,**{k:(v["VmRSS"],v["RssAnon"],v["RssShmem"],v["VmHWM"]) for k,v in ph.items()},
             "sent":dict(sent),"recv":dict(recv),"pool":repr(st.pool)[:200],"maps":maps}
        if TM: rec["heap"]=heap; rec["top"]=top
        print(json.dumps(rec),flush=True)
run(main())
