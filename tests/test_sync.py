"""Tests of barriers and local synchronisation (aiopdbp.sync, SPEC section 10).

Every algorithm runs on one node and over the in-process fabric
(``open_cluster(2)``/``open_cluster(4)``: GP i on host i % hosts), at group
sizes that are and are not powers of two.  Ordering is shown with events,
task states and the members' public ``stats`` (polled with a deadline), never
with sleeps that a slow machine could outrun; ``sleep(0)`` only skews the
members' arrival order, and one short sleep is a "nothing may happen
meanwhile" window (an absence cannot be awaited).
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any

import numpy as np
import pytest

import aiopdbp
from aiopdbp import BarrierError, ClosedResourceError, PType
from aiopdbp.runtime.cluster import open_cluster
from aiopdbp.sync import (
    Barrier,
    BarrierStats,
    BarrierTimeoutError,
    Neighbours,
    aggregate_stats,
    messages_for,
    steps_for,
)

pytestmark = pytest.mark.timeout(30)

SIZES = (1, 2, 3, 5, 8)
ALGS = ("counter", "tree", "dissemination")


def _log2c(n: int) -> int:
    return (n - 1).bit_length()


@contextlib.asynccontextmanager
async def _hosts(k: int) -> AsyncIterator[list[aiopdbp.Node]]:
    """One plain node (k == 1) or k nodes over the in-process fabric."""
    if k == 1:
        async with aiopdbp.open_node() as node:
            yield [node]
    else:
        async with open_cluster(k) as nodes:
            yield nodes


Body = Callable[[int, Barrier], Awaitable[Any]]


async def _group(nodes: list[aiopdbp.Node], n: int, alg: str, body: Body, *, group: str = "g",
                 **kw: Any) -> list[Any]:
    """Run ``body(i, barrier)`` for members m0..m{n-1}, member i on host i % hosts."""
    names = [f"m{i}" for i in range(n)]

    async def one(i: int) -> Any:
        async with nodes[i % len(nodes)].process(names[i]) as gp:
            async with Barrier(gp, group, names, algorithm=alg, **kw) as bar:
                return await body(i, bar)

    return list(await asyncio.gather(*(one(i) for i in range(n))))


async def _until(cond: Callable[[], bool], what: str, timeout: float = 10.0) -> None:
    """Poll ``cond`` (public state) until it holds; fail after ``timeout`` s."""
    deadline = time.monotonic() + timeout
    while not cond():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting until {what}")
        await asyncio.sleep(0.001)


def _check_phases(log: list[tuple[int, str, int]], n: int, rounds: int) -> None:
    """Barrier property: in every round, all n arrivals precede every departure."""
    for r in range(rounds):
        enters = [k for k, (rr, what, _) in enumerate(log) if rr == r and what == "in"]
        exits = [k for k, (rr, what, _) in enumerate(log) if rr == r and what == "out"]
        assert len(enters) == n and len(exits) == n
        assert max(enters) < min(exits), f"round {r}: a member left before all arrived"


# ------------------------------------------------------- rounds and counts
@pytest.mark.parametrize("hosts", [1, 2, 4])
@pytest.mark.parametrize("n", SIZES)
@pytest.mark.parametrize("alg", ALGS)
async def test_barrier_rounds_and_message_counts(alg: str, n: int, hosts: int) -> None:
    rounds = 6
    log: list[tuple[int, str, int]] = []

    async def body(i: int, bar: Barrier) -> BarrierStats:
        for r in range(rounds):
            for _ in range((i * 7 + r * 3) % 4):   # skew: members arrive in varying order
                await asyncio.sleep(0)
            log.append((r, "in", i))
            assert await bar.wait(timeout=10) == r
            log.append((r, "out", i))
        return bar.stats

    async with _hosts(hosts) as nodes:
        stats = await _group(nodes, n, alg, body)
    _check_phases(log, n, rounds)
    summ = aggregate_stats(stats)
    L = _log2c(n)
    expect_msgs = {"counter": 2 * (n - 1), "tree": 2 * (n - 1), "dissemination": n * L}[alg]
    expect_steps = 0 if n == 1 else {"counter": 2, "tree": 2 * L, "dissemination": L}[alg]
    assert messages_for(alg, n) == expect_msgs and steps_for(alg, n) == expect_steps
    assert summ.rounds == rounds
    assert summ.messages == expect_msgs * rounds
    assert summ.messages_per_round == expect_msgs
    assert summ.steps == expect_steps
    assert summ.steps_used == expect_steps          # every step carries traffic
    assert sum(summ.step_messages) == expect_msgs
    assert sum(s.received for s in stats) == summ.messages
    if alg == "counter" and n > 1:                  # every message to or from the master
        master = stats[0]
        assert master.sent_to == {f"m{j}": rounds for j in range(1, n)}
        assert master.received_from == {f"m{j}": rounds for j in range(1, n)}
        for s in stats[1:]:
            assert s.sent_to == {"m0": rounds} and s.received_from == {"m0": rounds}
        assert summ.hot_member == "m0" and summ.max_load == 2 * (n - 1)
        assert summ.step_messages == (n - 1, n - 1)
    if alg == "dissemination":                      # no hot spot: everyone sends L per round
        assert all(s.sent == L * rounds and s.received == L * rounds for s in stats)
        assert summ.max_load == 2 * L
        assert summ.step_messages == (n,) * L
    if alg == "tree" and n > 1:                     # up and down the same edges
        assert summ.step_messages == tuple(reversed(summ.step_messages))
        assert all(s.sent == s.received for s in stats)
    if n > 1:
        assert [sum(c) for c in zip(*(s.last_round_sent for s in stats))] == list(summ.step_messages)


@pytest.mark.parametrize("hosts", [1, 2])
@pytest.mark.parametrize("n", [1, 2, 4, 8])
async def test_butterfly_power_of_two(n: int, hosts: int) -> None:
    async def body(i: int, bar: Barrier) -> tuple[BarrierStats, list[float]]:
        sums = [await bar.allreduce(float(r * n + i), "sum", timeout=10) for r in range(5)]
        return bar.stats, sums

    async with _hosts(hosts) as nodes:
        res = await _group(nodes, n, "butterfly", body)
    summ = aggregate_stats(s for s, _ in res)
    assert summ.messages_per_round == n * _log2c(n) and summ.steps_used == _log2c(n)
    expect = [float(sum(r * n + i for i in range(n))) for r in range(5)]
    assert all(sums == expect for _, sums in res)


@pytest.mark.parametrize("hosts", [1, 2])
@pytest.mark.parametrize("n", [3, 5, 6, 7, 11])
async def test_dissemination_sum_counts_every_member_once_for_any_n(n: int, hosts: int) -> None:
    # integers make any double count visible; an array reduces element-wise
    async def body(i: int, bar: Barrier) -> tuple[BarrierStats, list[Any]]:
        got: list[Any] = [await bar.allreduce(10 ** i + r, "sum", timeout=10) for r in range(3)]
        got.append((await bar.allreduce(np.array([i, 2 * i], dtype=np.int64), "sum", timeout=10)).tolist())
        return bar.stats, got

    async with _hosts(hosts) as nodes:
        res = await _group(nodes, n, "dissemination", body)
    total = sum(10 ** i for i in range(n))
    expect = [total + r * n for r in range(3)] + [[n * (n - 1) // 2, n * (n - 1)]]
    assert all(got == expect for _, got in res)
    L = _log2c(n)
    assert all(s.sent == 4 * L for s, _ in res)   # still L messages per member and round


# ------------------------------------------------------------ no mixing
@pytest.mark.parametrize("hosts", [1, 2])
@pytest.mark.parametrize("alg", ["counter", "tree", "dissemination"])
async def test_many_rounds_never_mix_reductions(alg: str, hosts: int) -> None:
    """150 back-to-back rounds (more than the 128 round tags) with
    round-dependent values: a message used in the wrong round would change
    the result."""
    n, rounds = 5, 150
    op = "max" if alg == "dissemination" else "sum"

    async def body(i: int, bar: Barrier) -> list[Any]:
        out = []
        for r in range(rounds):
            if r % 3 == 2:
                out.append(await bar.wait(timeout=10))
            else:
                out.append(await bar.allreduce(r * 1000 + i, op, timeout=10))
        arr = await bar.allreduce(np.arange(3.0) + i, "max", timeout=10)
        out.append(arr.tolist())
        return out

    async with _hosts(hosts) as nodes:
        res = await _group(nodes, n, alg, body)
    expect = []
    for r in range(rounds):
        if r % 3 == 2:
            expect.append(r)
        else:
            expect.append(sum(r * 1000 + i for i in range(n)) if op == "sum" else r * 1000 + n - 1)
    expect.append([4.0, 5.0, 6.0])
    assert all(got == expect for got in res)
    assert all(type(v) is int for v in res[0][:2])          # scalars come back as Python scalars


@pytest.mark.parametrize("hosts", [1, 2])
@pytest.mark.parametrize("alg", ALGS)
async def test_slow_member_holds_everyone(alg: str, hosts: int) -> None:
    n = 5
    go = asyncio.Event()
    passed: list[list[int]] = [[] for _ in range(n)]
    at_round_2 = [asyncio.Event() for _ in range(n)]

    async def body(i: int, bar: Barrier) -> None:
        for r in range(4):
            if r == 2:
                at_round_2[i].set()
                if i == 3:
                    await go.wait()
            await bar.wait(timeout=10)
            passed[i].append(r)

    async with _hosts(hosts) as nodes:
        task = asyncio.ensure_future(_group(nodes, n, alg, body))
        for ev in at_round_2:
            await ev.wait()
        # A window in which nothing may happen: with a correct barrier nobody
        # passes round 2 without m3, and there is no event to await for that.
        await asyncio.sleep(0.05)
        assert all(p == [0, 1] for p in passed), passed   # nobody passed without m3
        assert not task.done()
        go.set()
        await asyncio.wait_for(task, 10)
    assert all(p == [0, 1, 2, 3] for p in passed)


async def test_barrier_traffic_stays_out_of_the_gp_inbox() -> None:
    async with _hosts(2) as nodes:
        names = ["a", "b", "c"]

        async def one(i: int) -> list[Any]:
            async with nodes[i % 2].process(names[i]) as gp:
                async with Barrier(gp, "team", names, algorithm="dissemination", timeout=10) as bar:
                    comp = bar.companion
                    assert comp is not None and comp.name == f"team/{names[i]}#sync"
                    assert gp.node.tables.pta[comp.pid].ptype is PType.COMM
                    got = []
                    for r in range(5):
                        await gp.send(names[(i + 1) % 3], f"{names[i]}:{r}".encode(), timeout=5)
                        await bar.wait()
                        got.append(bytes((await gp.recv(timeout=5)).data))
                    assert gp.pipe is not None and len(gp.pipe) == 0
                    return got
        res = await asyncio.gather(*(one(i) for i in range(3)))
        assert res[1] == [f"a:{r}".encode() for r in range(5)]
        for node in nodes:                  # companions freed on close
            assert not [p for p in node.tables.pta.values() if p.name.startswith("team/")]


# -------------------------------------------------------------- failures
@pytest.mark.parametrize("hosts", [1, 2])
@pytest.mark.parametrize("alg", ALGS)
async def test_member_that_never_arrives_times_out(alg: str, hosts: int) -> None:
    n = 4
    errors: dict[int, BaseException] = {}
    all_failed = asyncio.Event()

    async def body(i: int, bar: Barrier) -> None:
        await bar.wait()
        if i == 3:                 # still there, but never arrives at round 1
            await all_failed.wait()
            return
        t0 = time.monotonic()
        with pytest.raises(BarrierError) as ei:
            await bar.wait(timeout=0.3)
        assert time.monotonic() - t0 < 3
        errors[i] = ei.value
        if len(errors) == 3:
            all_failed.set()
        with pytest.raises(BarrierError, match="broken"):   # stays broken
            await bar.wait()

    async with _hosts(hosts) as nodes:
        await _group(nodes, n, alg, body, timeout=10, linger=0.05)
    assert set(errors) == {0, 1, 2}
    # at least one member saw its own timeout; the others may have been told (ABORT)
    assert any(isinstance(e, BarrierTimeoutError) and isinstance(e, TimeoutError)
               for e in errors.values())
    if alg == "counter":
        assert isinstance(errors[0], BarrierTimeoutError)
        assert "m3" in str(errors[0]) and "did not arrive" in str(errors[0])


async def test_member_that_never_joins_times_out_naming_it() -> None:
    async with aiopdbp.open_node() as node:
        async with node.process("x") as gp:
            bar = Barrier(gp, "lonely", ["x", "ghost"], algorithm="tree")
            with pytest.raises(BarrierTimeoutError, match="ghost"):
                await bar.wait(timeout=0.2)
            await bar.aclose()
            with pytest.raises(ClosedResourceError):
                await bar.wait()


@pytest.mark.parametrize("hosts", [1, 2])
@pytest.mark.parametrize("alg", ALGS)
async def test_member_that_leaves_makes_the_others_fail_promptly(alg: str, hosts: int) -> None:
    n = 4
    errors: dict[int, str] = {}

    async def body(i: int, bar: Barrier) -> None:
        for _ in range(3):
            await bar.wait()
        if i == 2:
            await bar.aclose()
            return
        t0 = time.monotonic()
        with pytest.raises(BarrierError) as ei:
            await bar.wait()          # timeout 30: must not be what ends it
        assert time.monotonic() - t0 < 5
        errors[i] = str(ei.value)

    async with _hosts(hosts) as nodes:
        await _group(nodes, n, alg, body, timeout=30, linger=0.05)
    assert set(errors) == {0, 1, 3}
    assert any("'m2' left the group" in e for e in errors.values()), errors


@pytest.mark.timeout(60)
async def test_every_member_hears_a_leave_even_from_a_member_it_never_exchanged_with() -> None:
    """Names are learnt from their home host on demand: a member's LEAVE must
    still reach the members its rounds never paired it with."""
    n, leaver = 8, 5
    errors: dict[int, str] = {}

    async def body(i: int, bar: Barrier) -> None:
        await bar.wait()              # dissemination: 3 partners of 7 each way
        if i == leaver:
            await bar.aclose()
            return
        with pytest.raises(BarrierError) as ei:
            await bar.wait()
        errors[i] = str(ei.value)

    async with _hosts(n) as nodes:   # one member per host: a host knows only its member's partners
        await _group(nodes, n, "dissemination", body, timeout=30, linger=0.05)
    assert set(errors) == set(range(n)) - {leaver}
    # each heard it from the leaver itself, not second-hand from a partner that failed
    assert all(f"at 'm{i}': member 'm{leaver}' left the group" in e for i, e in errors.items()), errors


@pytest.mark.parametrize("hosts", [1, 2])
async def test_member_leaving_while_others_wait_fails_them(hosts: int) -> None:
    n = 3
    bars: dict[int, Barrier] = {}
    errors: list[str] = []

    async def body(i: int, bar: Barrier) -> None:
        bars[i] = bar
        await bar.wait()
        if i == 0:                 # the master/root leaves while the others wait in round 1
            # a member's 2nd counted message is its round-1 arrival: it now waits for the release
            await _until(lambda: all(bars[j].stats.sent == 2 for j in (1, 2)),
                         "m1 and m2 wait in round 1")
            await bar.aclose()
            return
        with pytest.raises(BarrierError) as ei:
            await bar.wait()
        errors.append(str(ei.value))

    async with _hosts(hosts) as nodes:
        await asyncio.wait_for(_group(nodes, n, "counter", body, timeout=30, linger=0.05), 10)
    assert len(errors) == 2 and all("'m0' left" in e for e in errors)


@pytest.mark.parametrize("hosts", [1, 2])
async def test_companion_freed_without_leave_fails_others_after_grace(hosts: int) -> None:
    """A member whose companion disappears without a LEAVE (its host died):
    the member waiting on it fails after ``grace``; the others are told."""
    n = 4
    errors: list[str] = []

    async def body(i: int, bar: Barrier) -> None:
        await bar.wait()
        if i == 1:
            comp = bar.companion
            assert comp is not None
            await comp.free()          # vanish: no LEAVE, no ABORT
            return
        t0 = time.monotonic()
        with pytest.raises(BarrierError) as ei:
            await bar.wait()
        assert time.monotonic() - t0 < 5
        errors.append(str(ei.value))

    async with _hosts(hosts) as nodes:
        await _group(nodes, n, "tree", body, timeout=30, grace=0.2, linger=0.05)
    assert len(errors) == 3
    assert any("'m1' is gone" in e for e in errors), errors


async def test_gp_freed_without_closing_its_barrier_leaves_the_group() -> None:
    async with open_cluster(2) as nodes:
        names = ["p", "q", "r"]
        gps = [await nodes[i % 2].register(nm) for i, nm in enumerate(names)]
        for gp in gps:
            await gp.apply_pipe()
        bars = [Barrier(gp, "crash", names, algorithm="dissemination", linger=0.05) for gp in gps]
        await asyncio.gather(*(b.wait(timeout=10) for b in bars))
        await gps[2].free()            # its task "crashed"; nobody closed bars[2]
        t0 = time.monotonic()
        res = await asyncio.gather(*(b.wait(timeout=30) for b in bars[:2]), return_exceptions=True)
        assert time.monotonic() - t0 < 5
        assert all(isinstance(e, BarrierError) and "'r'" in str(e) for e in res), res
        for b in bars:
            await b.aclose()
        for gp in gps[:2]:
            await gp.free()


@pytest.mark.parametrize("hosts", [1, 2])
async def test_cancelled_wait_breaks_the_barrier_for_everyone(hosts: int) -> None:
    n = 3
    errors: list[BaseException] = []
    cancelled = asyncio.Event()

    async def body(i: int, bar: Barrier) -> None:
        await bar.wait()
        if i == 2:                 # waits in round 1 (m1 has not arrived), then is cancelled
            task = asyncio.ensure_future(bar.wait())
            # its 2nd counted message is its round-1 arrival at m0: it now waits for the release
            await _until(lambda: bar.stats.sent == 2, "m2 waits in round 1")
            assert not task.done()
            task.cancel()
            with pytest.raises(asyncio.CancelledError):
                await task
            assert bar.broken
            cancelled.set()
            return
        if i == 1:
            await cancelled.wait()
        with pytest.raises(BarrierError) as ei:
            await bar.wait()
        errors.append(ei.value)

    async with _hosts(hosts) as nodes:
        await _group(nodes, n, "tree", body, timeout=30, linger=0.05)
    assert len(errors) == 2 and all("cancelled" in str(e) for e in errors)


async def test_concurrent_waits_on_one_member_are_refused() -> None:
    async with aiopdbp.open_node() as node:
        async with node.process("a") as a, node.process("b") as b:
            ba = Barrier(a, "c", ["a", "b"])
            bb = Barrier(b, "c", ["a", "b"])
            t = asyncio.ensure_future(ba.wait(timeout=5))
            await asyncio.sleep(0)     # one loop turn: t's first step marks a round in progress
            with pytest.raises(RuntimeError, match="in progress"):
                await ba.wait()
            await bb.wait()
            assert await t == 0
            await ba.aclose()
            await bb.aclose()


async def test_argument_checks() -> None:
    async with aiopdbp.open_node() as node:
        async with node.process("a") as a:
            with pytest.raises(ValueError, match="algorithm"):
                Barrier(a, "g", ["a"], algorithm="ring")
            with pytest.raises(ValueError, match="power-of-two"):
                Barrier(a, "g", ["a", "b", "c"], algorithm="butterfly")
            with pytest.raises(ValueError, match="not one of"):
                Barrier(a, "g", ["b", "c"])
            with pytest.raises(ValueError, match="unique"):
                Barrier(a, "g", ["a", "a"])
            with pytest.raises(ValueError, match="own neighbour"):
                Neighbours(a, "g", ["a"])
            bar = Barrier(a, "g", ["a", "b", "c"], algorithm="dissemination")
            with pytest.raises(ValueError, match="reduction"):
                await bar.allreduce(1.0, "prod")
            nb = Neighbours(a, "g", ["b"])
            with pytest.raises(ValueError, match="one item per neighbour"):
                await nb.exchange({"c": b"x"})
            solo = Barrier(a, "solo", ["a"])
            assert [await solo.wait() for _ in range(3)] == [0, 1, 2]
            assert await solo.allreduce(2.5, "max") == 2.5
            assert solo.companion is None           # a group of one needs no traffic
            await solo.aclose()
    s1 = BarrierStats("tree", 2, "a", 2, rounds=1, step_sent=[0, 1])
    s2 = BarrierStats("tree", 2, "b", 2, rounds=2, step_sent=[1, 0])
    with pytest.raises(ValueError, match="different numbers of rounds"):
        aggregate_stats([s1, s2])


# ----------------------------------------------------- local synchronisation
async def _chain(nodes: list[aiopdbp.Node], n: int, iters: int,
                 hold: asyncio.Event | None = None,
                 progress: list[list[int]] | None = None) -> list[list[dict[str, Any]]]:
    names = [f"s{i}" for i in range(n)]

    async def one(i: int) -> list[dict[str, Any]]:
        nbrs = [names[j] for j in (i - 1, i + 1) if 0 <= j < n]
        async with nodes[i % len(nodes)].process(names[i]) as gp:
            async with Neighbours(gp, "halo", nbrs, timeout=10, linger=0.05) as nb:
                seen = []
                for it in range(iters):
                    if hold is not None and i == 0 and it == 1:
                        await hold.wait()
                    for _ in range((i + it) % 3):
                        await asyncio.sleep(0)
                    out = {m: np.full(4, 100 * i + it, dtype=np.int64) for m in nbrs}
                    got = await nb.exchange(out)
                    for arr in out.values():
                        arr[:] = -1          # the halo was copied at the call
                    seen.append({k: v.tolist() for k, v in got.items()})
                    if progress is not None:
                        progress[i].append(it)
                assert nb.stats.exchanges == iters
                assert nb.stats.sent == nb.stats.received == iters * len(nbrs)
                return seen

    return list(await asyncio.gather(*(one(i) for i in range(n))))


@pytest.mark.parametrize("hosts", [1, 2, 4])
async def test_neighbours_exchange_halos_each_iteration(hosts: int) -> None:
    n, iters = 5, 12
    async with _hosts(hosts) as nodes:
        seen = await _chain(nodes, n, iters)
    for i in range(n):
        for it in range(iters):
            expect = {f"s{j}": [100 * j + it] * 4 for j in (i - 1, i + 1) if 0 <= j < n}
            assert seen[i][it] == expect


@pytest.mark.parametrize("hosts", [1, 2])
async def test_neighbours_synchronise_locally_not_globally(hosts: int) -> None:
    """Hold s0 before its 2nd exchange: s1 must wait for it, but s3 and s4
    (not its neighbours) go on to later exchanges -- no global barrier."""
    n = 5
    hold = asyncio.Event()
    progress: list[list[int]] = [[] for _ in range(n)]
    async with _hosts(hosts) as nodes:
        task = asyncio.ensure_future(_chain(nodes, n, 4, hold, progress))
        # s3 and s4 are not s0's neighbours: both get past their 2nd exchange
        await _until(lambda: len(progress[3]) >= 2 and len(progress[4]) >= 2,
                     "s3 and s4 have done two exchanges")
        assert progress[0] == [0] and progress[1] == [0]     # s1 waits for s0
        assert progress[4][:2] == [0, 1] and progress[3][:2] == [0, 1]
        hold.set()
        await asyncio.wait_for(task, 10)
    assert all(p == [0, 1, 2, 3] for p in progress)


@pytest.mark.parametrize("hosts", [1, 2])
async def test_neighbour_that_leaves_fails_only_its_neighbours(hosts: int) -> None:
    names = ["a", "b", "c"]            # a - b - c
    out: dict[str, str] = {}

    async def one(i: int, nodes: list[aiopdbp.Node]) -> None:
        nbrs = [names[j] for j in (i - 1, i + 1) if 0 <= j < 3]
        async with nodes[i % len(nodes)].process(names[i]) as gp:
            nb = Neighbours(gp, "line", nbrs, timeout=30, linger=0.05)
            await nb.exchange({m: b"x" for m in nbrs})
            if i == 0:
                await nb.aclose()
                return
            try:
                await nb.exchange({m: b"y" for m in nbrs})
                out[names[i]] = "ok"
            except BarrierError as exc:
                out[names[i]] = str(exc)
            await nb.aclose()

    async with _hosts(hosts) as nodes:
        await asyncio.wait_for(asyncio.gather(*(one(i, nodes) for i in range(3))), 10)
    assert "'a' left the group" in out["b"]
    # c's only neighbour is b, which failed (and told c) or still sent its halo
    assert out["c"] == "ok" or "b" in out["c"]


async def test_neighbours_timeout_names_the_missing_neighbour() -> None:
    async with aiopdbp.open_node() as node:
        async with node.process("a") as a, node.process("b") as b:
            na = Neighbours(a, "t", ["b"], linger=0.05)
            nb = Neighbours(b, "t", ["a"], linger=0.05)
            assert (await asyncio.gather(na.exchange({"b": b"1"}), nb.exchange({"a": b"2"}))) == [
                {"b": b"2"}, {"a": b"1"}]
            with pytest.raises(BarrierTimeoutError, match="'b'"):
                await na.exchange({"b": b"3"}, timeout=0.2)
            await na.aclose()
            await nb.aclose()


# ------------------------------------------------------------------ MPI
_MPI_SCRIPT = r'''
import asyncio, sys
import aiopdbp
from aiopdbp.errors import BarrierError
from aiopdbp.sync import Barrier, messages_for, steps_for

G = 3                                   # GPs per rank: 6 members on 2 ranks, 12 on 4

async def member(node, names, i, alg, rounds):
    async with node.process(names[i]) as gp:
        async with Barrier(gp, f"mpi-{alg}", names, algorithm=alg, timeout=30) as bar, \
                Barrier(gp, f"ctl-{alg}", names, algorithm="tree", timeout=30) as ctl:
            op = "max" if alg == "dissemination" else "sum"
            for r in range(rounds):
                got = await bar.allreduce(r * 100 + i, op)
                want = sum(r * 100 + j for j in range(len(names))) if op == "sum" \
                    else r * 100 + len(names) - 1
                assert got == want, (alg, r, got, want)
            sent, steps = bar.stats.sent, sum(1 for c in bar.stats.step_sent if c)
            total = await ctl.allreduce(sent, "sum")
            used = await ctl.allreduce([1 if c else 0 for c in bar.stats.step_sent], "max")
            return total, int(sum(used))

async def leaver(node, names, i):
    async with node.process(names[i]) as gp:
        bar = Barrier(gp, "leave", names, algorithm="tree", timeout=30, linger=0.1)
        await bar.wait()
        if i == len(names) - 1:
            await bar.aclose()
            return "left"
        try:
            await bar.wait()
            return "passed?!"
        except BarrierError as exc:
            return "failed" if "left the group" in str(exc) else repr(exc)
        finally:
            await bar.aclose()

async def main():
    async with aiopdbp.open_node() as node:
        rank, size = node.rank, node.size
        names = [f"m{i}" for i in range(G * size)]
        mine = [i for i in range(len(names)) if i % size == rank]
        n = len(names)
        for alg in ("counter", "tree", "dissemination"):
            rounds = 140
            res = await asyncio.gather(*(member(node, names, i, alg, rounds) for i in mine))
            total, used = res[0]
            assert total == messages_for(alg, n) * rounds, (alg, total)
            assert used == steps_for(alg, n), (alg, used)
            if rank == 0:
                print(f"{alg}: {n} members on {size} ranks, {total // rounds} msgs/round, "
                      f"{used} steps: OK", flush=True)
        res = await asyncio.gather(*(leaver(node, names, i) for i in mine))
        assert all(r in ("left", "failed") for r in res), res
        if rank == 0:
            print("leave: OK", flush=True)

aiopdbp.run(main())
'''


@pytest.mark.mpi
@pytest.mark.timeout(120)
@pytest.mark.parametrize("ranks", [2, 4])
def test_barriers_under_mpiexec(ranks: int, tmp_path: Any) -> None:
    from tests.mpirun import check_mpi, mpi_available, run_mpi
    if not mpi_available():
        pytest.skip("needs mpiexec and mpi4py")
    script = tmp_path / "barrier_mpi.py"
    script.write_text(_MPI_SCRIPT)
    out = check_mpi(run_mpi(script, n=ranks, timeout=100))
    n = 3 * ranks
    L = _log2c(n)
    assert f"counter: {n} members on {ranks} ranks, {2 * (n - 1)} msgs/round, 2 steps: OK" in out
    assert f"tree: {n} members on {ranks} ranks, {2 * (n - 1)} msgs/round, {2 * L} steps: OK" in out
    assert f"dissemination: {n} members on {ranks} ranks, {n * L} msgs/round, {L} steps: OK" in out
    assert "leave: OK" in out
