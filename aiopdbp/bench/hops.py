"""Where a one-way hop's time goes (``aiopdbp bench pingpong --hops [SIZE]``, 8 B by default).

A diagnostic run, separate from the timed ones: the ``aiopdbp-ro`` ping-pong
with ``time.perf_counter_ns`` timestamps (``CLOCK_MONOTONIC``, one clock for
every process of a host, so stamps of the two ranks compare directly):

* ``a0`` the sender calls ``gp.send``; ``a1`` the link's sender has
  posted the ``Isend`` (its ``stamp`` hook);
* ``b0``/``b1`` the receiver's progress step that received it began/ended
  (``Improbe``, ``Mrecv``, decode, routing, the pipe, the waiter woken);
* ``b2`` the receiver's ``gp.recv`` returned.

Hops: send path ``a1 - a0``; MPI ``b0 - a1`` (transit plus the polling
granularity: the receiver's step must come round); receive path ``b1 - b0``;
wake-up ``b2 - b1`` (the loop switching to the task that awaits ``recv``).
The send path is split where the host link takes the message
(its ``offer``) and where its sender begins to post, and the
receive path at its decoding (the arrivals' block reader (``Arrivals.reader``) for
short records, ``decode`` as the inbound side calls it for full frames), so
each hop also shows: before encoding (snapshot, routing), encoding (credit,
the record or frame), posting (transport, ``Isend``, ``Test``); probe and
receive (``Improbe``, ``Mrecv``, buffer, dispatch), decoding, and delivery
(the ``Message``, routing, credit marks, the pipe, the waiter's future).
The engine methods and the two module functions are wrapped for this run
only and restored after it, so the timed runs carry no instrumentation.

The same round trips then run once more, unpatched, to count what each rank
does per round trip: Python calls into aiopdbp under ``cProfile`` (the
functions that run while a rank polls for the next message are left out:
their count is waiting, not work), all Python calls, and the data and
control messages it posts (:data:`PER_RT`).
"""

from __future__ import annotations

import asyncio
import bisect
import cProfile
import os
import pstats
import time
from collections.abc import Callable
from typing import Any

import numpy as np

from aiopdbp.bench.aio import AioSide, gp_name

__all__ = ["HOPS", "PER_RT", "format_hops", "hop_medians", "hop_table"]

HOPS = ("send path", "  before encoding", "  encoding", "  posting", "MPI", "receive path",
        "  probe and receive", "  decoding", "  delivery", "wake-up", "one way")


class _TimedReader:
    """Stands in for a router's block reader while its reads are timed."""

    def __init__(self, read: Callable[..., Any], read_one: Callable[..., Any]) -> None:
        self.read = read
        self.read_one = read_one


def hop_table(side: AioSide, ctl: Any, rank: int, pl: Any, iters: int) -> dict[str, Any] | None:
    """Run the diagnostic ping-pong; rank 0 gets ``{hop: [0->1 us, 1->0 us]}``, others None."""
    from aiopdbp.hosts import inbound
    from aiopdbp.transport.progress import ProgressEngine

    ns = time.perf_counter_ns
    posts: list[int] = []
    steps: list[tuple[int, int]] = []
    orig_step: Callable[..., bool] = ProgressEngine.step

    def post_send(done: bool) -> None:
        t = ns()
        if done:
            posts.append(t)
        elif offered:  # paired with the offer it posts (a block's later frames post without one)
            encs.append((offered.pop(), t))

    def step(self: ProgressEngine) -> bool:
        n, t = self.n_recvs, ns()
        busy = orig_step(self)
        if self.n_recvs != n:
            steps.append((t, ns()))
        return busy

    offered: list[int] = []   # the last offer not yet posted
    encs: list[tuple[int, int]] = []  # (the link took it, the engine posts it)
    decs: list[tuple[int, int]] = []
    orig_dec: Callable[..., Any] = getattr(inbound, "decode")  # the name inbound.py calls
    assert side.node is not None
    rt = side.node.arrivals
    orig_reader = rt.reader

    # the link to the other rank takes the message (its offer, an attribute: the sender's)
    remote = side.node._remote
    link: Any = remote.link(1 - rank) if remote is not None and rank <= 1 else None
    orig_offer: Callable[..., bool] | None = link.offer if link is not None else None

    def offer(*a: Any) -> bool:
        offered[:] = [ns()]
        return orig_offer(*a)  # type: ignore[misc]

    def timed(orig: Callable[..., Any]) -> Callable[..., Any]:
        def decode(*a: Any, **k: Any) -> Any:
            t = ns()
            out = orig(*a, **k)
            decs.append((t, ns()))
            return out
        return decode

    sends: list[int] = []
    recvs: list[int] = []
    warm = max(2, iters // 10)

    async def body() -> Any:
        if rank > 1:
            return None
        gp = side.gps[0]
        peer = gp_name(1 - rank, 0)
        async with asyncio.timeout(side.timeout):
            for i in range(warm + iters):
                if rank == 0:
                    sends.append(ns())
                    await gp.send(peer, pl.aio_readonly[i & 1])
                    msg = await gp.recv()
                    recvs.append(ns())
                else:
                    msg = await gp.recv()
                    recvs.append(ns())
                    sends.append(ns())
                    await gp.send(peer, msg.data)  # type: ignore[union-attr]
        return None

    # the link's sender stamps its posts itself (its compiled form cannot be wrapped)
    sender = link.sender if link is not None else None
    patches = [(sender, "stamp", post_send, None), (ProgressEngine, "step", step, orig_step),
               (link, "offer", offer, orig_offer), (inbound, "decode", timed(orig_dec), orig_dec),
               (rt, "reader", _TimedReader(timed(orig_reader.read), timed(orig_reader.read_one)),
                orig_reader)]
    placer = getattr(rt, "placer", None)   # a lone message's read is the placer's own call
    if placer is not None:
        patches.append((placer, "reader", patches[-1][2], orig_reader))
    patches = [p for p in patches if p[0] is not None]
    for obj, name, new, _ in patches:
        setattr(obj, name, new)
    try:
        side.measure(body)
    finally:
        for obj, name, _, old in patches:
            setattr(obj, name, old)
    got = ctl.gather((sends, recvs, posts, steps, encs, decs), root=0)
    # The same round trips again, unpatched, counted: Python calls (cProfile)
    # and the messages each rank posts.
    sends.clear()
    recvs.clear()
    before = _message_counts(side)
    prof = cProfile.Profile()
    prof.enable()
    try:
        side.measure(body)
    finally:
        prof.disable()
    counts = {k: (v - before[k]) / (warm + iters) for k, v in _message_counts(side).items()}
    counts.update(_call_counts(prof, warm + iters))
    per_rank = ctl.gather(counts, root=0)
    if rank != 0:
        return None
    (s0, r0, p0, st0, e0, d0), (s1, r1, p1, st1, e1, d1) = got[0], got[1]
    fwd = hop_medians(s0, p0, st1, r1, e0, d1, warm)
    back = hop_medians(s1, p1, st0, r0, e1, d0, warm)
    return {"iters": iters, "size": int(pl.readonly[0].nbytes), "hops": {h: [fwd[h], back[h]] for h in HOPS},
            "per_round_trip": {k: [per_rank[0][k], per_rank[1][k]] for k in PER_RT}}


#: what :func:`hop_table` counts per round trip on each rank
PER_RT = {"calls": "Python calls into aiopdbp (progress polling excluded)",
          "calls_all": "Python calls, all (polling, builtins, asyncio included)",
          "data_msgs": "data MPI messages sent (blocks, lone frames, split headers and payloads)",
          "ctl_msgs": "control messages sent (credit grants and asks, table updates)"}
#: functions that run while a rank polls for its next message: their calls
#: count waiting, not work per message
_POLLING = {("progress.py", "step"), ("receives.py", "receive"), ("kernel.py", "probe"),
            ("progress.py", "drive"), ("mpi.py", "drive"), ("pipes.py", "ready")}


def _message_counts(side: AioSide) -> dict[str, int]:
    assert side.node is not None
    st = side.node.stats()
    data = sum(link.messages for link in st.links.values()) + int(st.transport.get("bulk_sends", 0))
    ctl = sum(v for kinds in st.messages_sent.values() for k, v in kinds.items() if k != "data")
    return {"data_msgs": data, "ctl_msgs": ctl}


def _call_counts(prof: cProfile.Profile, rts: int) -> dict[str, float]:
    stats = pstats.Stats(prof)
    ours = 0
    for (file, _, func), row in stats.stats.items():  # type: ignore[attr-defined]
        if f"{os.sep}aiopdbp{os.sep}" in file and (os.path.basename(file), func) not in _POLLING:
            ours += row[1]   # primitive + recursive calls
    return {"calls": ours / rts, "calls_all": stats.total_calls / rts}  # type: ignore[attr-defined]


def _first(stamps: list[tuple[int, int]], starts: list[int], lo: int, hi: int) -> tuple[int, int] | None:
    """The first (entry, exit) stamp entered in [lo, hi]."""
    i = bisect.bisect_left(starts, lo)
    if i < len(stamps) and stamps[i][1] <= hi:
        return stamps[i]
    return None


def hop_medians(sends: list[int], posts: list[int], steps: list[tuple[int, int]], recvs: list[int],
          encs: list[tuple[int, int]], decs: list[tuple[int, int]], warm: int) -> dict[str, float]:
    """Median of each hop (us) over the measured messages of one direction."""
    ends = [e for _, e in steps]
    enc_in = [a for a, _ in encs]
    dec_in = [a for a, _ in decs]
    rows: list[tuple[float, ...]] = []
    for i in range(warm, min(len(sends), len(recvs))):
        a0 = sends[i]
        j = bisect.bisect_left(posts, a0)
        if j == len(posts):
            continue
        a1 = posts[j]
        k = bisect.bisect_left(ends, a1)
        if k == len(steps):
            continue
        b0, b1 = steps[k]
        b2 = recvs[i]
        b0 = max(b0, a1)
        enc = _first(encs, enc_in, a0, a1)
        dec = _first(decs, dec_in, b0, b1)
        if enc is None or dec is None:
            continue
        rows.append((a1 - a0, enc[0] - a0, enc[1] - enc[0], a1 - enc[1], b0 - a1, b1 - b0,
                     dec[0] - b0, dec[1] - dec[0], b1 - dec[1], b2 - b1, b2 - a0))
    if not rows:
        return {h: float("nan") for h in HOPS}
    med = np.median(np.array(rows, dtype=np.float64), axis=0) / 1e3
    return dict(zip(HOPS, (float(x) for x in med)))


def format_hops(doc: dict[str, Any]) -> str:
    """Markdown table of :func:`hop_table`'s result."""
    lines = [f"{doc.get('size', 8)} B one-way hops, aiopdbp-ro, medians of {doc['iters']} round trips (us)",
             "| hop | rank 0 -> 1 | rank 1 -> 0 |", "|---|---|---|"]
    for h, (a, b) in doc["hops"].items():
        lines.append(f"| {h} | {a:.2f} | {b:.2f} |")
    lines.append("(the hops' medians need not add up to the one-way median)")
    per = doc.get("per_round_trip")
    if per:
        lines += ["", f"per round trip at {doc.get('size', 8)} B (the same round trips again, counted)",
                  "| per round trip | rank 0 | rank 1 |", "|---|---|---|"]
        for key, label in PER_RT.items():
            a, b = per[key]
            lines.append(f"| {label} | {a:.1f} | {b:.1f} |" if key.startswith("calls")
                         else f"| {label} | {a:.3f} | {b:.3f} |")
    return "\n".join(lines)
