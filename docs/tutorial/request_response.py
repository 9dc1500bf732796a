"""Request/response: a server GP answers the requests of several clients.
The request id travels in ``com``; the answer goes back to ``msg.source``.
Clients live on the first rank, the server on the last one."""
import asyncio

import numpy as np

import aiopdbp

CLIENTS, REQUESTS = 3, 5


async def server(node: aiopdbp.Node) -> None:
    async with node.process("server") as gp:
        for _ in range(CLIENTS * REQUESTS):
            req = await gp.recv()                    # from any client, in arrival order
            x = np.frombuffer(req.data, dtype=np.float64)
            await gp.send(req.source, x * 2, com=req.com)  # the answer carries the id
        print("server answered", CLIENTS * REQUESTS, "requests")


async def client(node: aiopdbp.Node, i: int) -> None:
    async with node.process(f"client-{i}") as gp:
        total = 0.0
        for req_id in range(REQUESTS):
            await gp.send("server", np.full(4, float(i + req_id)), com=req_id)
            answer = await gp.recv(timeout=30)  # TimeoutError rather than a silent hang
            assert answer.com == req_id and answer.source == "server"
            total += float(np.frombuffer(answer.data, dtype=np.float64).sum())
        print(f"client-{i} total", total)


async def main() -> None:
    async with aiopdbp.open_node() as node, asyncio.TaskGroup() as tg:
        if node.rank == node.size - 1:
            tg.create_task(server(node))
        if node.rank == 0:
            for i in range(CLIENTS):
                tg.create_task(client(node, i))


aiopdbp.run(main())
