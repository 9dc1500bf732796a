"""The ``aiopdbp demo`` pipeline as a script you can copy and launch.

    python examples/demo_pipeline.py                       # one host, one process
    aiopdbp launch -n 2 examples/demo_pipeline.py          # 2 ranks: GP i on rank i % 2

producer -> xform-0..K-1 -> consumer: a multicast CONFIG, 64-byte work
messages, one frame stream per transformer, a multicast STOP carrying the
expected CRC32s; the consumer checks every result stream.  The pipeline
itself is :func:`aiopdbp.demo.demo_main`; this file shows how a program opens
a node and hands it over.  Exit code 0 when every check passed.
"""

from __future__ import annotations

import sys

import aiopdbp
from aiopdbp.demo import DemoConfig, demo_main


async def main() -> bool:
    cfg = DemoConfig(transformers=3, frames=32, messages=20_000, timeout=60.0)
    async with aiopdbp.open_node() as node:      # single host, or one node per MPI rank
        return await demo_main(node, cfg)


if __name__ == "__main__":
    sys.exit(0 if aiopdbp.run(main()) else 1)
