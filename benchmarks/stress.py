"""Seeded, replayable stress over MPI (issue 15 item 4).

    python benchmarks/stress.py --seconds 600 --seed 7            # 2-4 ranks, shm or TCP: from the seed
    python benchmarks/stress.py --seconds 30 --seed 7 --ranks 3 --tcp

The launcher starts ``mpiexec`` on this same file (``--worker``).  The run is
a sequence of rounds, each planned from ``(seed, round)`` alike on every
rank: 1-3 GPs per rank, each with 1 to 256 concurrent sender tasks that send
messages (16 B .. 1 MiB, mostly small) and streams to random GPs of the
round (local and remote), some sends cancelled after a random delay, and
some GPs ("victims") freed mid-traffic -- while other GPs still send to them
and while their own senders are still sending.  A small per-GP credit window
and small pipes (from the seed) make senders wait.

The oracle, checked every round:

* every payload is intact (a header naming its sender task and sequence
  number, a body derived from them) and no GP gets any item twice;
* a GP that stays gets **exactly** the messages and streams whose ``send`` /
  ``send_stream`` returned; a cancelled message never arrives (a cancelled
  send queues nothing); a cancelled stream arrives whole or ends in
  ``StreamError`` (counted apart);
* a victim gets nothing it was not sent, and what was sent to it but still
  in its pipe when it closed is discarded (the documented
  ``release_pipe``); every send that failed failed with a named
  :class:`~aiopdbp.errors.PDBPError` (``UnknownProcessError`` for a GP that
  closed, ``ClosedResourceError`` for a sender that was freed,
  ``BrokenResourceError`` for a stream whose receiver went away), and every
  send that started ``GRACE`` s after its destination closed raised;
* nothing hangs: every round finishes within ``ROUND_TIMEOUT``;
* no credit is left behind: once the round is over, the credit every host
  has out towards the others (``stats().links[h].credit_out``) equals the
  credit the others owe it (``stats().credit_owed``), summed over the job.

At the end the run asserts it exercised cancellations, closes, sends that
raised for a closed GP, and credit waits (an idle seed cannot pass).  Each
rank prints ``STRESS {json}``; a failure prints the command that replays the
seed and fails the job.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import random
import resource
import struct
import sys
import tempfile
import time
import traceback
from collections import Counter
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

HEAD = struct.Struct("<HHHIIxx")   # rank, gp, task, seq, size (16 bytes)
GRACE = 2.0                        # s for a close to reach every host
ROUND_TIMEOUT = 60.0
WINDOWS = (16 << 10, 64 << 10, 256 << 10)


def plan_job(seed: int) -> dict[str, Any]:
    """What the seed fixes for the whole job."""
    rng = random.Random(f"job:{seed}")
    return {"ranks": rng.choice((2, 3, 4)), "tcp": rng.random() < 0.35,
            "window": rng.choice(WINDOWS), "pipe_capacity": rng.choice((16, 64, 1024))}


def replay_command(args: argparse.Namespace, ranks: int, tcp: bool) -> str:
    return (f"python benchmarks/stress.py --seconds {args.seconds:g} --seed {args.seed} "
            f"--ranks {ranks}{' --tcp' if tcp else ''}")


# ====================================================================== worker
def where(task: asyncio.Task[Any]) -> str:
    """The await chain of a suspended task, innermost last (a hang's report)."""
    out = []
    coro: Any = task.get_coro()
    while coro is not None:
        frame = getattr(coro, "cr_frame", None) or getattr(coro, "gi_frame", None)
        if frame is not None:
            out.append(f"    {frame.f_code.co_filename}:{frame.f_lineno} {frame.f_code.co_name}\n")
        coro = getattr(coro, "cr_await", None) or getattr(coro, "gi_yieldfrom", None)
    return "".join(out) or "    (no frames)\n"


def worker(args: argparse.Namespace) -> int:
    import numpy as np

    import aiopdbp
    from aiopdbp.hosts.remote import RemoteConfig
    from aiopdbp.transport.mpi import load_mpi

    import faulthandler
    import logging
    import signal

    faulthandler.register(signal.SIGUSR1)   # a hang's stacks: kill -USR1 <rank pid>

    logging.basicConfig(level=logging.WARNING,
                        format=f"%(asctime)s rank{os.environ.get('PMI_RANK', '?')} %(name)s %(message)s")
    MPI = load_mpi()
    world = MPI.COMM_WORLD
    comm = world.Dup()
    rank, size = comm.Get_rank(), comm.Get_size()
    job = plan_job(args.seed)
    base = np.random.default_rng(args.seed).integers(0, 256, (2 << 20) + 64, dtype=np.uint8)
    replay = replay_command(args, size, args.tcp)
    totals: Counter[str] = Counter()

    def payload(g: int, task: int, seq: int, n: int) -> bytes:
        off = (rank * 7919 + g * 104729 + task * 31 + seq * 131) % (1 << 20)
        return HEAD.pack(rank, g, task, seq, n) + base[off:off + n - HEAD.size].tobytes()

    def check(buf: Any) -> tuple[int, int, int, int]:
        view = memoryview(buf).cast("B")
        r, g, task, seq, n = HEAD.unpack_from(view)
        if n != len(view):
            raise AssertionError(f"item of {len(view)} B says {n} B")
        off = (r * 7919 + g * 104729 + task * 31 + seq * 131) % (1 << 20)
        if not np.array_equal(np.frombuffer(view, np.uint8, offset=HEAD.size), base[off:off + n - HEAD.size]):
            raise AssertionError(f"corrupt item from rank {r} GP {g} task {task} seq {seq}")
        return r, g, task, seq

    async def poll(req: Any, what: str, timeout: float = 120.0) -> None:
        deadline = time.monotonic() + timeout
        while not req.Test():
            if time.monotonic() > deadline:
                raise AssertionError(f"peers did not reach {what} within {timeout:g} s")
            await asyncio.sleep(0.002)

    async def allreduce(values: list[int], op: Any = None) -> list[int]:
        send = np.array(values, np.int64)
        recv = np.zeros_like(send)
        await poll(comm.Iallreduce(send, recv, op=op or MPI.SUM), "a collective")
        return [int(v) for v in recv]

    async def one_round(node: aiopdbp.Node, rnd: int) -> None:
        rng = random.Random(f"{args.seed}:{rnd}")
        per_rank = [rng.randint(1, 3) for _ in range(size)]
        names = {(r, g): f"s{rnd}.{r}.{g}" for r in range(size) for g in range(per_rank[r])}
        everyone = list(names.values())
        victims = {key: rng.uniform(0.02, 0.4) for key in names if rng.random() < 0.25}
        if not victims and rng.random() < 0.7:
            victims[rng.choice(list(names))] = rng.uniform(0.02, 0.4)
        gps_plan = {key: (int(2 ** rng.uniform(0, 8)), rng.randint(100, 600), rng.random() * 0.15 + 0.02)
                    for key in names}  # senders, ops, cancel probability
        mine = list(range(per_rank[rank]))

        received: dict[int, Counter[tuple[int, int, int, int]]] = {g: Counter() for g in mine}
        aborted: Counter[int] = Counter()
        # sender bookkeeping: per destination name, ids by outcome
        accepted: dict[str, list[tuple[int, int, int, int]]] = {n: [] for n in everyone}
        cancelled_msgs: dict[str, list[tuple[int, int, int, int]]] = {n: [] for n in everyone}
        cancelled_streams: dict[str, list[tuple[int, int, int, int]]] = {n: [] for n in everyone}
        # sends that raised a PDBPError: what they were and what they raised (a diagnosis
        # when such an item arrives all the same)
        errored: dict[str, dict[tuple[int, int, int, int], str]] = {n: {} for n in everyone}
        late_sends: list[tuple[str, float, str]] = []   # (dest, started at, outcome) of every send
        closed_at: dict[str, float] = {}
        counts: Counter[str] = Counter()
        current: dict[tuple[int, int], str] = {}   # what each sender task is doing (a hang's report)
        ops_now: dict[tuple[int, int], asyncio.Future[Any]] = {}
        reading: dict[int, str] = {}
        phase = ["sending"]
        missing: dict[str, list[Any]] = {}

        async with contextlib.AsyncExitStack() as stack:
            gps = {g: await stack.enter_async_context(node.process(names[(rank, g)])) for g in mine}
            for n in everyone:
                await node.lookup(n, timeout=30)
            await poll(comm.Ibarrier(), "the round's start")
            t0 = time.time()

            async def receiver(g: int) -> None:
                gp = gps[g]
                while True:
                    item = await gp.recv()
                    if isinstance(item, aiopdbp.IncomingStream):
                        reading[g] = f"reading a stream from {item.source}"
                        try:
                            buf = await item.read()
                        except aiopdbp.StreamError:
                            aborted[g] += 1
                            continue
                        except asyncio.CancelledError:
                            await item.aclose()
                            raise
                        finally:
                            reading.pop(g, None)
                    else:
                        buf = item.data
                    received[g][check(buf)] += 1

            async def sender(g: int, task: int, ops: int, p_cancel: float) -> None:
                gp = gps[g]
                trng = random.Random(f"{args.seed}:{rnd}:{rank}:{g}:{task}")
                for seq in range(ops):
                    dest = trng.choice(everyone)
                    u = trng.random()
                    n = int(2 ** trng.uniform(5, 12 if u < 0.7 else 16 if u < 0.95 else 20))
                    n = max(HEAD.size, min(n, 1 << 20))
                    stream = trng.random() < 0.15
                    cancel = trng.random() < p_cancel
                    delay = trng.choice((0.0, 0.0, trng.uniform(0, 0.003)))
                    ident = (rank, g, task, seq)
                    data = payload(g, task, seq, n)
                    op = gp.send_stream(dest, data) if stream else gp.send(dest, data)
                    current[(g, task)] = (f"GP {names[(rank, g)]} task {task} seq {seq}: "
                                          f"{'send_stream' if stream else 'send'} of {n} B to {dest}"
                                          f"{' (cancelled after %.4f s)' % delay if cancel else ''}")
                    started = time.time()
                    t = asyncio.ensure_future(op)
                    ops_now[(g, task)] = t
                    if cancel:
                        await asyncio.sleep(delay)
                        t.cancel()
                    try:
                        await t
                        outcome = "ok"
                        accepted[dest].append(ident)
                    except asyncio.CancelledError:
                        me = asyncio.current_task()
                        if not t.cancelled() or (me is not None and me.cancelling()):
                            raise                       # this task itself was cancelled
                        outcome = "cancelled"
                        counts["cancelled"] += 1
                        (cancelled_streams if stream else cancelled_msgs)[dest].append(ident)
                    except aiopdbp.PDBPError as exc:
                        outcome = type(exc).__name__
                        counts["error " + outcome] += 1
                        errored[dest][ident] = (f"{'send_stream' if stream else 'send'} of {n} B raised "
                                                f"{outcome}: {exc}")
                    except TimeoutError:
                        raise
                    counts["ops"] += 1
                    counts["streams" if stream else "messages"] += 1
                    late_sends.append((dest, started, outcome))
                    current.pop((g, task), None)
                    if outcome == "ClosedResourceError":
                        return                          # our own GP was freed

            async def victim(g: int, after: float) -> None:
                await asyncio.sleep(after)
                closed_at[names[(rank, g)]] = time.time()
                rx = receivers[g]
                rx.cancel()
                with contextlib.suppress(asyncio.CancelledError):
                    await rx
                await gps[g].free()
                counts["closes"] += 1

            async def verify_round() -> None:
                async with asyncio.TaskGroup() as tg:
                    for g in mine:
                        senders, ops, p_cancel = gps_plan[(rank, g)]
                        per_task = max(1, ops // senders)
                        for task in range(senders):
                            tg.create_task(sender(g, task, per_task, p_cancel))
                        if (rank, g) in victims:
                            tg.create_task(victim(g, victims[(rank, g)]))
                phase[0] = "waiting for the other ranks' senders"
                await poll(comm.Ibarrier(), "the end of the sends", ROUND_TIMEOUT)
                phase[0] = "waiting for accepted items to arrive"
                # every rank: what was accepted / cancelled for each destination, and close times
                # (blocking, with the node open: safe only because every rank passed the
                # Ibarrier above after its last await on a peer and goes straight here)
                shared = comm.allgather((accepted, cancelled_msgs, cancelled_streams, closed_at, errored))
                closes = {k: v for part in shared for k, v in part[3].items()}
                for g in mine:
                    name = names[(rank, g)]
                    want = Counter(i for part in shared for i in part[0][name])
                    never = {i for part in shared for i in part[1][name]}
                    maybe = {i for part in shared for i in part[2][name]}
                    got = received[g]
                    if name not in closes:      # it stays: exactly what was accepted
                        while not all(got[i] for i in want):
                            missing[name] = [i for i in want if not got[i]][:5]
                            rx = receivers[g]
                            if rx.done():
                                rx.result()     # its failure, if any
                            await asyncio.sleep(0.005)
                        receivers[g].cancel()
                        with contextlib.suppress(asyncio.CancelledError):
                            await receivers[g]
                    dup = [i for i, c in got.items() if c > 1]
                    if dup:
                        raise AssertionError(f"{name} got {len(dup)} item(s) twice, e.g. {dup[0]}")
                    stray = [i for i in got if i not in want and i not in maybe]
                    if stray:
                        kind = "cancelled message(s)" if any(i in never for i in stray) else "unsent item(s)"
                        why = next((part[4][name][stray[0]] for part in shared
                                    if stray[0] in part[4][name]), "no outcome recorded")
                        raise AssertionError(f"{name} got {len(stray)} {kind}, e.g. {stray[0]} ({why})")
                    counts["phantom_streams"] += sum(1 for i in got if i in maybe)
                    counts["delivered"] += len(got)
                    counts["discarded_by_close"] += sum(1 for i in want if i not in got)
                counts["streams_aborted"] += sum(aborted.values())
                for dest, started, outcome in late_sends:
                    if dest in closes and started > closes[dest] + GRACE:
                        if outcome == "ok":
                            raise AssertionError(f"a send to {dest} started {started - closes[dest]:.1f} s "
                                                 "after it closed and was accepted")
                        counts["raised_after_close"] += 1
                    elif dest in closes and started > closes[dest] and outcome != "ok":
                        counts["raised_after_close"] += 1

            receivers = {g: asyncio.create_task(receiver(g)) for g in mine}
            async def watchdog() -> None:
                """Just before the round times out: where the stuck tasks are."""
                await asyncio.sleep(ROUND_TIMEOUT - 5)
                for g, what in reading.items():
                    sys.stderr.write(f"rank {rank}: receiver of {names[(rank, g)]} is {what}\n")
                    sys.stderr.write(where(receivers[g]))
                for key in list(current)[:3]:
                    sys.stderr.write(f"rank {rank}: stuck: {current[key]}\n")
                    op_task = ops_now.get(key)
                    if isinstance(op_task, asyncio.Task):
                        sys.stderr.write(where(op_task))

            dog = asyncio.create_task(watchdog())
            try:
                async with asyncio.timeout(ROUND_TIMEOUT):
                    await verify_round()
            except TimeoutError:
                st = node.stats()
                sys.stderr.write(f"rank {rank}: round {rnd} timed out, {phase[0]}; sends waiting: "
                                 f"{sorted(current.values())[:8]}\n")
                raise AssertionError(
                    f"round {rnd} did not finish within {ROUND_TIMEOUT:g} s, {phase[0]}; missing {missing}; "
                    f"{len(current)} send(s) still waiting: {sorted(current.values())[:8]}; "
                    f"received {[sum(c.values()) for c in received.values()]}; victims closed here: "
                    f"{sorted(closed_at)}; stall {st.stall}; links "
                    f"{ {h: (l.credit_parked, l.credit_out) for h, l in st.links.items()} }") from None
            finally:
                dog.cancel()
        totals.update(counts)
        # no credit left behind: what hosts have out equals what is owed to them
        for attempt in range(200):
            st = node.stats()
            out = sum(link.credit_out for link in st.links.values())
            res = await allreduce([out, st.credit_owed])
            if res[0] == res[1]:
                break
            await asyncio.sleep(0.02)
        else:
            raise AssertionError(f"credit left behind: {res[0]} B out, {res[1]} B owed, summed over the job")

    async def main() -> int:
        t_end = time.monotonic() + args.seconds
        node = aiopdbp.open_node(remote=RemoteConfig(gp_window=job["window"]),
                                 pipe_capacity=job["pipe_capacity"], close_timeout=10.0,
                                 stall_timeout=10.0)
        await node.start()
        rnd = 0
        try:
            while True:
                # rank 0's clock decides, so every rank runs the same rounds
                stop = (await allreduce([int(rank == 0 and time.monotonic() > t_end)], MPI.MAX))[0]
                if stop:
                    break
                await one_round(node, rnd)
                rnd += 1
        except BaseException as exc:  # noqa: BLE001 - reported with the replay command
            while isinstance(exc, BaseExceptionGroup) and len(exc.exceptions) == 1:
                exc = exc.exceptions[0]
            traceback.print_exception(exc, file=sys.stderr)
            sys.stderr.write(f"rank {rank}: round {rnd} failed: {type(exc).__name__}: {exc}\n"
                             f"replay: {replay}\n")
            sys.stderr.flush()
            os.write(1, f"STRESS {json.dumps({'rank': rank, 'ok': False, 'round': rnd, 'error': str(exc)[:500], 'replay': replay})}\n".encode())
            time.sleep(2.0)    # let the other ranks report too
            world.Abort(1)
        links = node.stats().links
        totals["credit_waits"] = sum(link.credit_waits for link in links.values())
        await node.aclose()
        keys = ["ops", "cancelled", "closes", "raised_after_close", "credit_waits", "delivered"]
        summed = await allreduce([totals[k] for k in keys])
        row = {"rank": rank, "ok": True, "rounds": rnd, "seed": args.seed, **dict(totals),
               "rss_kib": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss}
        if rank == 0:
            job_totals = dict(zip(keys, summed))
            row["job"] = job_totals
            idle = [k for k in keys if not job_totals[k]]
            if idle or rnd == 0:
                row["ok"] = False
                row["error"] = f"the seed exercised no {', '.join(idle) or 'round'}: an idle run proves nothing"
                row["replay"] = replay
        os.write(1, f"STRESS {json.dumps(row)}\n".encode())
        return 0 if row["ok"] else 1

    rc = aiopdbp.run(main())
    comm.Free()
    return rc


# ==================================================================== launcher
def launch(args: argparse.Namespace) -> int:
    from aiopdbp.launch.launcher import TCP_ENV, find_mpiexec, run_job

    job = plan_job(args.seed)
    ranks = args.ranks or job["ranks"]
    tcp = args.tcp or (job["tcp"] and not args.ranks)
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join([str(ROOT)] + ([env["PYTHONPATH"]] if env.get("PYTHONPATH") else []))
    if tcp:
        env.update(TCP_ENV)
    cmd = [find_mpiexec(), "-n", str(ranks), sys.executable, __file__, "--worker",
           "--seconds", str(args.seconds), "--seed", str(args.seed)] + (["--tcp"] if tcp else [])
    print(f"stress: seed {args.seed}, {ranks} ranks, {'tcp' if tcp else 'shm'}, window {job['window']} B, "
          f"pipe_capacity {job['pipe_capacity']}, {args.seconds:g} s", flush=True)
    budget = args.seconds + ROUND_TIMEOUT + 120
    # run_job, as `aiopdbp launch` does: signals, a time limit, and the shared
    # memory of ranks that a failing job left behind removed
    with tempfile.TemporaryFile("w+") as fo, tempfile.TemporaryFile("w+") as fe:
        rc = run_job(cmd, env, timeout=budget, stdout=fo, stderr=fe)
        fo.seek(0)
        fe.seek(0)
        out, err = fo.read(), fe.read()
    if rc == 124:
        err += f"\nkilled after {budget:.0f} s"
    rows = [json.loads(line.split("STRESS ", 1)[1]) for line in out.splitlines() if "STRESS " in line]
    for row in sorted(rows, key=lambda r: r["rank"]):
        print(json.dumps(row), flush=True)
    if rc != 0 or not rows or not all(r["ok"] for r in rows):
        sys.stderr.write(err[-6000:])
        print(f"FAILED (exit {rc}); replay with:\n  {replay_command(args, ranks, tcp)}", flush=True)
        return 1
    print("OK", flush=True)
    return 0


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--seconds", type=float, default=60.0)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--ranks", type=int, choices=(2, 3, 4), help="default: from the seed")
    ap.add_argument("--tcp", action="store_true", help="force TCP (default: from the seed)")
    ap.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    args = ap.parse_args()
    return worker(args) if args.worker else launch(args)


if __name__ == "__main__":
    sys.exit(main())
