"""Rank 1 breaks the protocol once, then sends a valid message (issue 28).

Rank 0's GP ``g0`` receives forever: only the job's stop ends it.  Rank 1
posts one bad frame to rank 0 (argv[1] says which), then ``gp.send``s a
valid one and leaves its GP (``node.free``: a table request to rank 0).

  version  -- a data frame with a bad version byte
  length   -- a data frame whose header says a body longer than it has
  shorts   -- a short-message block cut short
  dims     -- an empty array of dimensions (2**62, 0)
  split    -- a split header whose record disagrees with its payload size
  pickle   -- a pickled payload (rank 0 does not allow pickle)
  random   -- random bytes on the control channel
  bye      -- a forged ByeMsg(0) on the control channel
  memory   -- a split header announcing 1 GiB while rank 0 runs under a
              memory limit (the receive cannot be allocated)
"""
import asyncio
import random
import struct
import sys
import time

import numpy as np

import aiopdbp
from aiopdbp.transport.base import Channel
from aiopdbp.wire.codec import encode_cdu, encode_split
from aiopdbp.wire.control import ByeMsg
from aiopdbp.wire.mesp import CDU, L1, Kind
from aiopdbp.wire.shorts import encode_shorts


def _join(parts: list) -> bytes:
    return b"".join(bytes(p) for p in parts)


def bad_frame(mode: str, src: int, dest: int) -> tuple[Channel, bytes]:
    if mode == "version":
        return Channel.DATA, b"\x02" + bytes(15)
    if mode == "length":
        frame = bytearray(_join(encode_cdu(CDU(Kind.SHORT, src, (dest,), b"x" * 64))))
        struct.pack_into("<I", frame, 4, len(frame) - L1.size - 16)   # 16 bytes past its body
        return Channel.DATA, bytes(frame)
    if mode == "shorts":
        block = bytearray(encode_shorts([(dest, src, Kind.SHORT, 0, b"y" * 100)] * 3)[:-40])
        (version, mt, count, _) = L1.unpack_from(block, 0)
        L1.pack_into(block, 0, version, mt, count, len(block) - L1.size)   # the header agrees
        return Channel.DATA, bytes(block)
    if mode == "dims":
        frame = _join(encode_cdu(CDU(Kind.SHORT, src, (dest,), np.empty((0x5A5A5A, 0)))))
        marker = struct.pack("<Q", 0x5A5A5A)
        assert frame.count(marker) == 1
        return Channel.DATA, frame.replace(marker, struct.pack("<Q", 2**62))
    if mode == "split":
        head, _ = encode_split(CDU(Kind.SHORT, src, (dest,), np.zeros(1 << 16, np.uint8)))
        frame = bytearray(head)
        (version, mt, count, body_len) = L1.unpack_from(frame, 0)
        L1.pack_into(frame, 0, version, mt, count, body_len + 4096)   # the record still says 64 KiB
        return Channel.DATA, bytes(frame)
    if mode == "memory":
        head, _ = encode_split(CDU(Kind.SHORT, src, (dest,), np.zeros(1 << 16, np.uint8)))
        frame = bytearray(head)
        (version, mt, count, body_len) = L1.unpack_from(frame, 0)
        announced = (1 << 30) - 4096            # within max_frame
        L1.pack_into(frame, 0, version, mt, count, body_len - (1 << 16) + announced)
        assert frame.count(struct.pack("<Q", 1 << 16)) == 2    # the record's length, the array's shape
        frame = bytearray(frame.replace(struct.pack("<Q", 1 << 16), struct.pack("<Q", announced)))
        return Channel.DATA, bytes(frame)
    if mode == "pickle":
        return Channel.DATA, _join(encode_cdu(CDU(Kind.SHORT, src, (dest,), {"a": 1}), allow_pickle=True))
    if mode == "random":
        return Channel.CONTROL, random.Random(28).randbytes(64)
    if mode == "bye":
        return Channel.CONTROL, ByeMsg(0).encode()
    raise SystemExit(f"unknown mode {mode}")


async def main(mode: str) -> None:
    async with aiopdbp.open_node() as node:
        async with node.process(f"g{node.rank}") as gp:
            if node.rank == 0:
                print(f"ready {time.time():.6f}", flush=True)
                while True:
                    await gp.recv()
            dest = await node.lookup("g0")
            channel, frame = bad_frame(mode, gp.pid, dest)
            node.transport.post_nowait(0, channel, [frame])
            await gp.send("g0", b"valid")
            print(f"sent at {time.time():.6f}", flush=True)


if sys.argv[1] == "memory" and int(__import__("os").environ.get("PMI_RANK", "-1")) == 0:
    import resource

    with open("/proc/self/status") as f:
        vm = next(int(line.split()[1]) << 10 for line in f if line.startswith("VmSize:"))
    limit = vm + (768 << 20)   # room for the job, not for a 1 GiB receive
    resource.setrlimit(resource.RLIMIT_AS, (limit, limit))

aiopdbp.run(main(sys.argv[1]))
