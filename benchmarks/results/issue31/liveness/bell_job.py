"""Whether each rank's doorbell heard every peer's hello (everyone_rings) 3 s after open_node."""
import asyncio
import aiopdbp


async def main() -> None:
    async with aiopdbp.open_node() as node:
        await asyncio.sleep(3)
        t = node.stats().transport
        print(f"BELL {node.rank} everyone={t.get('doorbell')} heard={t.get('rings_heard')} sent={t.get('rings_sent')} "
              f"idle_sleeps={t.get('idle_sleeps', '?')}", flush=True)


aiopdbp.run(main())
