"""Where a large message's one-way hop goes: stamps along the split-frame path, and counts.

    aiopdbp launch -n 2 benchmarks/large_hops.py [--sizes 64K,1M] [--iters 400] [--profile]

Rank 0 sends a writable numpy array to rank 1's GP, which echoes what it got
(what ``aiopdbp bench pingpong``'s ``aiopdbp`` row does).  The engine and the
inbound side are wrapped for this run (``time.perf_counter_ns``, one clock
for both ranks of a host), and each one-way hop is cut at:

* ``send``: ``gp.send`` called -> the link's ``put_to`` that posted the
  split frame returned (routing, credit, the cached split header, both
  ``Isend``\ s: in one call since the ninth session, the lane's
  ``post_pair``; before, ``post_bulk_send`` with the header); since the
  tenth session the link's ``owned`` (credit and both posts in one call);
* ``payload post``: 0 (it is in ``send``: one cut for both forms of the post);
* ``to header``: -> the receiver's step that received the header began
  (MPI transit plus the receiver's polling);
* ``header in``: -> the payload's receive called (the inbound's
  ``recv_bulk_now``, from ``ArraysIn.take`` since the tenth session; before the ninth session the engine's
  ``post_bulk_recv``; probe, receive, inbound, admission);
* ``payload recv``: -> it returned (the receive cache, ``Irecv``, ``Test``:
  the single-copy rendezvous copies there);
* ``deliver``: -> the step ended (landed callback, ``Message``, pipe, credit marks);
* ``wake``: -> ``gp.recv`` returned;
* ``sender done``: the sender's ``gp.send`` returned, after its ``gp.send`` began
  (the owned send: returns once MPI no longer reads the buffer).

Then the same round trips again, counted per round trip and rank: data MPI
messages (split headers + bulk payloads), control messages by kind, and
(``--profile``) the Python calls under ``cProfile``, the most frequent first,
and the calls into aiopdbp without the polling loop's (the functions
``bench pingpong --hops`` leaves out: their count is waiting, not work).
"""

from __future__ import annotations

import argparse
import asyncio
import bisect
import cProfile
import os
import pstats
import time
from typing import Any

import numpy as np

import aiopdbp
from aiopdbp.bench.hops import _POLLING as _HOPS_POLLING
from aiopdbp.bench.plan import parse_sizes

#: functions that run while a rank polls (steps of the engine's own task too):
#: their count is waiting, not work
_POLLING = _HOPS_POLLING | {("sends.py", "complete"), ("progress.py", "pending"),
                            ("progress.py", "_run"), ("progress.py", "<listcomp>"), ("backoff.py", "reset"),
                            ("receives.py", "complete_bulk"), ("pipes.py", "__len__")}
CUTS = ("send", "payload post", "to header", "header in", "payload recv", "deliver", "wake", "one way",
        "sender done")


def _counts(node: Any) -> tuple[int, dict[str, int]]:
    st = node.stats()
    data = sum(link.messages for link in st.links.values()) + int(st.transport.get("bulk_sends", 0))
    kinds: dict[str, int] = {}
    for per_host in st.messages_sent.values():
        for kind, n in per_host.items():
            if kind != "data":
                kinds[kind] = kinds.get(kind, 0) + n
    return data, kinds


class Stamps:
    """Wraps the engine and the inbound side; lists of perf_counter_ns stamps."""

    def __init__(self, node: Any) -> None:
        from aiopdbp.hosts.link import HostLink
        from aiopdbp.transport.progress import ProgressEngine
        self.hdr: list[int] = []      # the put_to that posted a split frame returned
        self.bulk: list[int] = []     # the same (both posts are in it)
        self.steps: list[tuple[int, int]] = []   # steps that received something: (begin, end)
        self.rin: list[tuple[int, int]] = []     # the payload's receive (called, returned)
        ns = time.perf_counter_ns
        E, L = ProgressEngine, HostLink
        o_put, o_rbulk, o_step = L.put_to, getattr(E, "post_bulk_recv", None), E.step
        st = self

        def put_to(self: Any, pid: int, item: Any) -> Any:
            n = self.sender.splits
            out = o_put(self, pid, item)
            if self.sender.splits != n:
                st.bulk.append(ns())
                st.hdr.append(st.bulk[-1])
            return out

        def post_bulk_recv(self: Any, *a: Any) -> Any:
            t = ns()
            out = o_rbulk(self, *a)  # type: ignore[misc]
            st.rin.append((t, ns()))
            return out

        inbound = node._remote.inbound
        fast = getattr(inbound, "_in", None)     # the tenth session's ArraysIn holds the receive
        o_now = getattr(inbound, "_now", None) if fast is None else fast.post   # (ninth session: _now)

        def now(*a: Any) -> Any:
            t = ns()
            out = o_now(*a)  # type: ignore[misc]
            st.rin.append((t, ns()))
            return out

        def step(self: Any) -> bool:
            n, t = self.n_recvs, ns()
            busy = o_step(self)
            if self.n_recvs != n:
                st.steps.append((t, ns()))
            return busy

        self._patches: list[tuple[Any, str, Any, Any]] = [(L, "put_to", put_to, o_put), (E, "step", step, o_step)]
        if o_rbulk is not None:   # (before the ninth session)
            self._patches.append((E, "post_bulk_recv", post_bulk_recv, o_rbulk))
        if o_now is not None:
            self._patches.append((inbound, "_now", now, o_now) if fast is None else (fast, "post", now, o_now))
        # the tenth session's owned-send entry: the link's `owned`, an instance attribute
        credit = node._remote.credit
        for link in [credit.link(h) for h in (0, 1) if h != node.rank]:   # (made now if need be)
            o_owned = getattr(link, "owned", None)
            if o_owned is not None:
                def owned(pid: int, nbytes: int, fields: Any, _o: Any = o_owned, _l: Any = link) -> Any:
                    n = _l.sender.splits
                    out = _o(pid, nbytes, fields)
                    if _l.sender.splits != n:
                        st.bulk.append(ns())
                        st.hdr.append(st.bulk[-1])
                    return out
                self._patches.append((link, "owned", owned, o_owned))

    def __enter__(self) -> "Stamps":
        for obj, name, new, _ in self._patches:
            setattr(obj, name, new)
        return self

    def __exit__(self, *exc: Any) -> None:
        for obj, name, _, old in self._patches:
            setattr(obj, name, old)


def _after(xs: list[int], t: int) -> int | None:
    i = bisect.bisect_left(xs, t)
    return xs[i] if i < len(xs) else None


def hops(snd: dict[str, Any], rcv: dict[str, Any], warm: int) -> dict[str, float]:
    """Median of each cut (us) over one direction's messages."""
    rows = []
    step_ends = [e for _, e in rcv["steps"]]
    rin0 = [a for a, _ in rcv["rin"]]
    for i in range(warm, min(len(snd["sends"]), len(rcv["recvs"]))):
        a0 = snd["sends"][i]
        a1 = _after(snd["hdr"], a0)
        a2 = _after(snd["bulk"], a0)
        done = snd["done"][i]
        b3 = rcv["recvs"][i]
        if a1 is None or a2 is None:
            continue
        j = bisect.bisect_left(rin0, a1)
        if j >= len(rin0):
            continue
        r0, r1 = rcv["rin"][j]
        k = bisect.bisect_left(step_ends, r1)
        if k >= len(step_ends):
            continue
        b0, b1 = rcv["steps"][k]
        if not b0 <= r0 <= b1 <= b3:
            continue
        b0 = max(b0, a2)
        rows.append((a1 - a0, a2 - a1, b0 - a2, r0 - b0, r1 - r0, b1 - r1, b3 - b1, b3 - a0, done - a0))
    if not rows:
        return {c: float("nan") for c in CUTS}
    med = np.median(np.array(rows, dtype=np.float64), axis=0) / 1e3
    return dict(zip(CUTS, (float(x) for x in med)))


async def main(ns: argparse.Namespace) -> None:
    async with aiopdbp.open_node() as node:
        me = node.rank
        if me > 1:
            return
        async with node.process(f"lh-{me}") as gp:
            peer = f"lh-{1 - me}"
            await node.lookup(peer, timeout=30)
            for size in ns.sizes:
                payloads = [np.full(size, k + 1, np.uint8) for k in range(2)]
                n = ns.iters if size < (1 << 20) else max(100, ns.iters // 4)
                warm = max(20, n // 10)
                sends: list[int] = []
                recvs: list[int] = []
                done: list[int] = []
                pc = time.perf_counter_ns

                async def rts(count: int) -> None:
                    for i in range(count):
                        if me == 0:
                            sends.append(pc())
                            await gp.send(peer, payloads[i & 1])
                            done.append(pc())
                            msg = await gp.recv()
                            recvs.append(pc())
                            assert msg.data[0] == (i & 1) + 1
                        else:
                            msg = await gp.recv()
                            recvs.append(pc())
                            sends.append(pc())
                            await gp.send(peer, msg.data)
                            done.append(pc())

                with Stamps(node) as st:
                    await rts(warm + n)
                mine = {"sends": sends, "recvs": recvs, "done": done, "hdr": st.hdr, "bulk": st.bulk,
                        "steps": st.steps, "rin": st.rin}
                theirs = await _swap(gp, peer, me, mine)
                if me == 0:
                    fwd = hops(mine, theirs, warm)
                    back = hops(theirs, mine, warm)
                    print(f"\n{size} B one-way hop, medians of {n} round trips (us); load {os.getloadavg()}")
                    print("| cut | rank 0 -> 1 | rank 1 -> 0 |\n|---|---|---|")
                    for c in CUTS:
                        print(f"| {c} | {fwd[c]:.2f} | {back[c]:.2f} |")
                # counted, unpatched
                sends.clear(), recvs.clear(), done.clear()
                before = _counts(node)
                prof = cProfile.Profile() if ns.profile else None
                if prof is not None:
                    prof.enable()
                await rts(n)
                if prof is not None:
                    prof.disable()
                after = _counts(node)
                kinds = {k: round((v - before[1].get(k, 0)) / n, 3) for k, v in after[1].items()
                         if v != before[1].get(k, 0)}
                line = (f"rank {me} {size} B per round trip: data MPI messages {(after[0] - before[0]) / n:.3f}, "
                        f"control {kinds}")
                if prof is not None:
                    ps = pstats.Stats(prof)
                    rows = sorted(ps.stats.items(), key=lambda kv: -kv[1][1])  # type: ignore[attr-defined]
                    ours = sum(r[1] for (f, _, fn), r in rows if f"{os.sep}aiopdbp{os.sep}" in f)
                    work = sum(r[1] for (f, _, fn), r in rows if f"{os.sep}aiopdbp{os.sep}" in f
                               and (os.path.basename(f), fn) not in _POLLING)
                    line += (f"\n  Python calls per RT: all {ps.total_calls / n:.1f}, aiopdbp {ours / n:.1f}, "  # type: ignore[attr-defined]
                             f"aiopdbp without the polling loop's {work / n:.1f}")
                    for (f, ln, fn), r in rows[:ns.top]:
                        line += f"\n    {r[1] / n:7.2f}  {os.path.basename(f)}:{ln} {fn}  tot {r[2] / r[1] * 1e6:.2f} us/call"
                theirs_line = await _swap(gp, peer, me, line)
                if me == 0:
                    print(line)
                    print(theirs_line)


async def _swap(gp: Any, peer: str, me: int, obj: Any) -> Any:
    """Exchange one picklable object with the peer (a blocking MPI call between runs)."""
    from mpi4py import MPI
    return MPI.COMM_WORLD.allgather(obj)[1 - me]


if __name__ == "__main__":
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--sizes", type=parse_sizes, default=parse_sizes("64K,1M"))
    ap.add_argument("--iters", type=int, default=400)
    ap.add_argument("--profile", action="store_true")
    ap.add_argument("--top", type=int, default=45)
    aiopdbp.run(main(ap.parse_args()))
