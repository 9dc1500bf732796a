"""Which peers a rank exchanged control messages with during open_node (and 2 s after)."""
import asyncio
import aiopdbp


async def main() -> None:
    async with aiopdbp.open_node() as node:
        await asyncio.sleep(2)
        sent, recv = node._remote.message_counts()
        print(f"PEERS {node.rank} sent_to={sorted(sent)} recv_from={sorted(recv)} "
              f"kinds={sorted({k for d in sent.values() for k in d})}", flush=True)


aiopdbp.run(main())
