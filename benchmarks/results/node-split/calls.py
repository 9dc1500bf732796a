"""Python calls per round trip, 2 in-process nodes, pure form: counts by function name."""
import asyncio, collections, sys
import aiopdbp

N = 5000

async def main() -> None:
    async with aiopdbp.open_cluster(2) as nodes:
        async with nodes[0].process("a") as a, nodes[1].process("b") as b:
            async def echo() -> None:
                for _ in range(N + 50):
                    m = await b.recv()
                    await b.send("a", b"y" * 64)
            t = asyncio.create_task(echo())
            for _ in range(50):
                await a.send("b", b"x" * 64); await a.recv()
            counts: collections.Counter[str] = collections.Counter()
            def prof(frame, event, arg):
                if event == "call":
                    c = frame.f_code
                    counts[f"{c.co_filename.split('aiopdbp/')[-1]}:{c.co_name}"] += 1
            sys.setprofile(prof)
            for _ in range(N):
                await a.send("b", b"x" * 64); await a.recv()
            sys.setprofile(None)
            await t
    total = sum(counts.values())
    print(f"calls/rt {total / N:.3f}")
    for k, v in sorted(counts.items()):
        if any(s in k for s in ("grant", "remoteside", "node.py", "localgps", "carry", "want", "link")):
            print(f"  {k} {v / N:.4f}")

asyncio.run(asyncio.wait_for(main(), 400))
