"""Control messages by kind, every rank of the all-to-all job: register+barrier,
pattern+barrier (first contact), close.  Usage (under aiopdbp launch):
    python -m aiopdbp launch -n 32 kinds.py OUTDIR
writes OUTDIR/kinds-RANK.json; `python kinds.py --sum OUTDIR` totals them."""
import asyncio, collections, json, sys
from pathlib import Path


def diff(a, b):
    k = collections.Counter()
    for host, per in b.items():
        for kind, n in per.items():
            d = n - a.get(host, {}).get(kind, 0)
            if d:
                k[kind] += d
    return dict(k)


async def main(out: Path) -> None:
    from aiopdbp.bench.scale_job import _Inbox, _barrier, _pattern
    from aiopdbp.runtime.node import open_node
    async with open_node() as node:
        rank, size = node.rank, node.size
        names = [f"scale-{r}" for r in range(size)]
        s = [node.stats()]
        async with node.process(names[rank]) as gp:
            inbox = _Inbox(gp)
            await _barrier(inbox, rank, names, 0)
            s.append(node.stats())
            await _pattern(inbox, rank, names, "alltoall", 20, bytes(256))
            await _barrier(inbox, rank, names, 1)
            s.append(node.stats())
        s.append(node.stats())
    rec = {}
    for i, phase in enumerate(("register", "pattern", "close")):
        rec[phase] = {"sent": diff(s[i].messages_sent, s[i + 1].messages_sent),
                      "recv": diff(s[i].messages_received, s[i + 1].messages_received)}
    (out / f"kinds-{rank}.json").write_text(json.dumps(rec))


def total(out: Path) -> None:
    recs = [json.loads(p.read_text()) for p in sorted(out.glob("kinds-*.json"))]
    print(f"{len(recs)} ranks")
    for phase in ("register", "pattern", "close"):
        sent = collections.Counter()
        per_rank = []
        for r in recs:
            sent.update(r[phase]["sent"])
            per_rank.append(sum(n for k, n in r[phase]["sent"].items() if k != "data"))
        ctrl = sum(n for k, n in sent.items() if k != "data")
        print(f"{phase:9s} control sent, all ranks: {ctrl:5d}  per rank median {sorted(per_rank)[len(per_rank)//2]} "
              f"max {max(per_rank)}  by kind {dict(sorted(sent.items()))}")


if __name__ == "__main__":
    if sys.argv[1] == "--sum":
        total(Path(sys.argv[2]))
    else:
        import aiopdbp
        aiopdbp.run(main(Path(sys.argv[1])))
