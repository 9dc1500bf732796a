"""A job whose ranks are still starting: every rank reports "ready <pid>",
then sleeps (a slow import, say) before it would call aiopdbp.run."""
import os
import time

import aiopdbp

print(f"ready {os.getpid()}", flush=True)
time.sleep(60)


async def main() -> None:
    async with aiopdbp.open_node():
        pass


aiopdbp.run(main())
