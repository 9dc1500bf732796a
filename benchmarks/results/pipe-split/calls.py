"""Python calls per 8 B round trip, in process, counted with sys.setprofile (deterministic):
WHERE=remote: GPs "a" and "b" on two nodes (the in-process fabric: the arrival's put_many, the
receive); WHERE=local: both on one node (the pipe's offer).  Prints the total and the calls into
aiopdbp/routing/ by function.  Run with AIOPDBP_NO_EXTENSIONS=1 for the pure form."""
import asyncio, collections, os, sys
import aiopdbp

N = int(os.environ.get("N", "5000"))
WHERE = os.environ.get("WHERE", "remote")


async def main() -> None:
    async with aiopdbp.open_cluster(2) as nodes:
        nb = nodes[1] if WHERE == "remote" else nodes[0]
        async with nodes[0].process("a") as a, nb.process("b") as b:
            async def echo() -> None:
                for _ in range(N + 50):
                    m = await b.recv()
                    await b.send("a", m.data)
            t = asyncio.create_task(echo())
            for _ in range(50):
                await a.send("b", b"x" * 8); await a.recv()
            counts: collections.Counter[str] = collections.Counter()
            def prof(frame, event, arg):
                if event == "call":
                    c = frame.f_code
                    counts[f"{c.co_filename.split('aiopdbp/')[-1]}:{c.co_name}"] += 1
            sys.setprofile(prof)
            for _ in range(N):
                await a.send("b", b"x" * 8); await a.recv()
            sys.setprofile(None)
            await t
    total = sum(counts.values())
    print(f"{WHERE} calls/rt {total / N:.3f}")
    for k, v in sorted(counts.items()):
        if "routing/" in k:
            print(f"  {k} {v / N:.4f}")

asyncio.run(asyncio.wait_for(main(), 400))
