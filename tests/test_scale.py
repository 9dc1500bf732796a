"""Many ranks on few cores (issue 31): a 16-rank oversubscribed job, per-peer state on demand."""

from __future__ import annotations

import asyncio
import contextlib
import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from tests.mpirun import REPO_ROOT, requires_mpi, run_mpi

PROGRAM = REPO_ROOT / "benchmarks" / "scale_alltoall.py"


def _records(folder: Path, n: int) -> dict[int, dict[str, object]]:
    recs = {}
    for path in folder.glob("aiopdbp-*.json"):
        rec = json.loads(path.read_text(encoding="utf-8"))
        recs[rec["rank"]] = rec
    assert sorted(recs) == list(range(n)), f"ranks that wrote: {sorted(recs)}"
    return recs


@requires_mpi
@pytest.mark.timeout(180)
def test_16_rank_oversubscribed_ring_job_links_only_the_peers_it_talks_to(tmp_path: Path) -> None:
    r = run_mpi(PROGRAM, n=16, args=["--pattern", "ring", "--units", "5", "--out", str(tmp_path)],
                timeout=170, max_ranks=16)
    assert r.returncode == 0, r.stdout + r.stderr
    recs = _records(tmp_path, 16)
    for rank in range(16):   # ring neighbours, the dissemination barrier's r + 2^k, 0 <-> 3's pings
        talked = {(rank - 1) % 16, (rank + 1) % 16} | {(rank + (1 << k)) % 16 for k in range(4)}
        talked |= {3} if rank == 0 else {0} if rank == 3 else set()
        assert set(recs[rank]["links"]) <= talked, (rank, recs[rank]["links"])  # type: ignore[arg-type]


@pytest.mark.timeout(60)
async def test_all_to_all_within_a_pool_budget_smaller_than_one_row_set_per_peer() -> None:
    from aiopdbp.hosts.remote import RemoteConfig
    from aiopdbp.runtime.cluster import open_cluster

    n, count = 4, 60
    names = [f"a2a-{r}" for r in range(n)]
    cfg = RemoteConfig(pool_blocks=6)   # rows of 3 peers x 2 directions would want 24 blocks
    async with open_cluster(n, remote=cfg) as nodes:

        async def member(r: int) -> dict[str, list[int]]:
            async with nodes[r].process(names[r]) as gp:
                for name in names:
                    await nodes[r].lookup(name, timeout=20)

                async def send_all() -> None:
                    for i in range(count):
                        for peer in names:
                            if peer != names[r]:
                                await gp.send(peer, i.to_bytes(4, "little"), timeout=20)

                sender = asyncio.create_task(send_all())
                got: dict[str, list[int]] = {}
                for _ in range(count * (n - 1)):
                    msg = await gp.recv(timeout=20)
                    got.setdefault(msg.source, []).append(int.from_bytes(msg.data, "little"))  # type: ignore[union-attr]
                await sender
                return got

        results = await asyncio.gather(*(member(r) for r in range(n)))
        for r, got in enumerate(results):
            assert got == {name: list(range(count)) for name in names if name != names[r]}
        assert all(node.stats().pool["umb"]["nblocks"] == 6 for node in nodes)  # type: ignore[index]


def test_the_hosts_tree_reaches_every_host_once_and_routes_down_along_parents() -> None:
    from aiopdbp.hosts.sequencer import children, next_hop, parent

    for size in range(1, 70):
        reached = [0]
        for host in reached:                     # the broadcast: each host to its children
            reached += children(host, size)
        assert sorted(reached) == list(range(size)), size
        assert all(parent(c) == h for h in range(size) for c in children(h, size))
        for dest in range(1, size):              # an answer: rank 0 down to dest
            hop, path = 0, []
            while hop != dest:
                hop = next_hop(hop, dest)
                path.append(hop)
            assert all(parent(b) == a for a, b in zip([0, *path], path)), (size, dest, path)
        assert len(children(0, size)) == (size - 1).bit_length()


def _control(stats: dict[int, dict[str, int]]) -> int:
    return sum(n for kinds in stats.values() for kind, n in kinds.items() if kind != "data")


def _homed_name(prefix: str, home: int, size: int, avoid: str = "") -> str:
    from aiopdbp.hosts.names import home_of

    return next(f"{prefix}-{i}" for i in range(10_000)
                if home_of(f"{prefix}-{i}", size) == home and f"{prefix}-{i}" != avoid)


@pytest.mark.timeout(60)
async def test_a_registration_reaches_only_its_home_and_the_hosts_that_look_it_up() -> None:
    from aiopdbp.errors import UnknownProcessError
    from aiopdbp.runtime.cluster import open_cluster

    n, owner, home, looker = 8, 5, 3, 6
    name = _homed_name("named", home, n)
    async with open_cluster(n) as nodes:
        before = [(node.stats().messages_sent, node.stats().messages_received) for node in nodes]
        gp = await nodes[owner].register(name, bind=True)
        pid = await nodes[looker].lookup(name, timeout=10)
        assert pid == gp.pid
        # a first lookup: one message to the name's home, one back (the registration)
        assert nodes[looker].stats().messages_sent[home] == {"LookupMsg": 1}
        assert nodes[looker].stats().messages_received[home] == {"TableMsg": 1}
        await gp.free()
        with pytest.raises(UnknownProcessError) as err:   # the free reached the host that looked
            await nodes[looker].lookup(name, timeout=10)
        assert err.value.waited is None
        for r, node in enumerate(nodes):
            sent, received = node.stats().messages_sent, node.stats().messages_received
            talked = {h for h in sent if sent[h] != before[r][0].get(h)}
            heard = {h for h in received if received[h] != before[r][1].get(h)}
            expected = {owner: {home}, looker: {home}, home: {owner, looker}}.get(r, set())
            assert talked == heard == expected, (r, talked, heard)   # rank 0 is not its home: nothing


@pytest.mark.timeout(120)
@pytest.mark.parametrize("n", [4, 16, 32])
async def test_registrations_cost_the_master_only_those_of_the_names_it_is_home_of(n: int) -> None:
    from aiopdbp.hosts.names import home_of
    from aiopdbp.runtime.cluster import open_cluster

    names = [f"reg-{r}" for r in range(n)]
    async with open_cluster(n) as nodes:
        base = [(_control(node.stats().messages_sent), _control(node.stats().messages_received))
                for node in nodes]
        gps = await asyncio.gather(*(nodes[r].register(names[r], bind=True) for r in range(n)))
        counts = [(_control(node.stats().messages_sent) - base[r][0],
                   _control(node.stats().messages_received) - base[r][1]) for r, node in enumerate(nodes)]
        homed_at = [sum(home_of(x, n) == r for x in names) for r in range(n)]
        for r in range(n):
            mine = int(home_of(names[r], n) != r)   # its own: a request out, an update and an answer in
            # as a home: a request in, an update and an answer out, for each name that is not its own
            remote_homed = homed_at[r] - int(home_of(names[r], n) == r)
            assert counts[r] == (mine + 2 * remote_homed, 2 * mine + remote_homed), (r, counts[r])
        for gp in gps:
            await gp.free()


@pytest.mark.timeout(60)
async def test_a_closing_host_talks_only_to_the_peers_it_talked_to() -> None:
    from aiopdbp.runtime.cluster import open_cluster

    n = 6
    names = [f"c-{r}" for r in range(n)]
    async with open_cluster(n) as nodes:
        async with contextlib.AsyncExitStack() as stack:
            gps = [await stack.enter_async_context(nodes[r].process(names[r])) for r in range(n)]
            for r in range(n):   # twice: a first message may travel by way of its name's home
                await gps[r].send(names[(r + 1) % n], b"hop", timeout=20)
                await gps[r].send(names[(r + 1) % n], b"hop", timeout=20)
            for r in range(n):
                for _ in range(2):
                    assert (await gps[r].recv(timeout=20)).data == b"hop"  # type: ignore[union-attr]
        before = [node.stats().messages_sent for node in nodes]
    told = _TALLY                  # a close's O(1) word to rank 0, and rank 0's to the last open rank
    for r, node in enumerate(nodes):
        sent = node.stats().messages_sent
        closing = {h for h, kinds in sent.items()
                   if {k: v for k, v in kinds.items() if k not in told} !=
                   {k: v for k, v in before[r].get(h, {}).items() if k not in told}}
        # nothing to the hosts it never talked to (a BYE to every host, before)
        assert closing <= {(r - 1) % n, (r + 1) % n}, (r, closing, sent)
        assert "data" in sent[(r + 1) % n]
        tally = {h: {k: v for k, v in kinds.items() if k in told} for h, kinds in sent.items()}
        tally = {h: kinds for h, kinds in tally.items() if kinds}
        if r:
            assert tally == {0: {"ClosingMsg": 1}}, (r, sent)
        else:
            assert sum(kinds.get("LastOpenMsg", 0) for kinds in tally.values()) <= 1, sent


_TALLY = ("ClosingMsg", "LastOpenMsg")


#: the behaviour scenarios of the name rule (tests/scenarios.py), run again at more hosts
NAME_SCENARIOS = ["table_consistency", "unknown_name_error", "send_before_bind",
                  "source_name_after_sender_left", "multicast_across_hosts", "first_messages_carried_keep_order"]


@pytest.mark.timeout(300)   # at 16 hosts the scenario's own bound is 4x its 30 s (run_inproc)
@pytest.mark.parametrize("n", [8, 16])
@pytest.mark.parametrize("name", NAME_SCENARIOS)
async def test_the_name_rule_holds_at_more_hosts(name: str, n: int) -> None:
    from tests.scenarios import run_inproc

    await run_inproc(name, n)


@pytest.mark.timeout(60)
async def test_a_name_update_from_a_host_that_is_not_its_home_fails_that_host() -> None:
    from aiopdbp.runtime.cluster import open_cluster
    from aiopdbp.transport.base import Channel
    from aiopdbp.wire.control import TableMsg

    n = 4
    name = _homed_name("forged", 2, n)
    async with open_cluster(n) as nodes:
        transport = nodes[1].transport
        assert transport is not None   # host 2 is its home, not host 1
        await transport.send(3, Channel.CONTROL, [TableMsg(0, "proc_reg", [name, 0, 1, None, 99]).encode()])
        for _ in range(200):
            if nodes[3].stats().failed_hosts:
                break
            await asyncio.sleep(0.01)
        assert 1 in nodes[3].stats().failed_hosts
        with pytest.raises(Exception):
            await nodes[3].lookup(name, timeout=0)


@pytest.mark.timeout(60)
async def test_a_name_freed_before_a_host_asks_reaches_it_in_one_update() -> None:
    from aiopdbp.errors import UnknownProcessError
    from aiopdbp.runtime.cluster import open_cluster

    # registration and free in two updates would let a reader on the late
    # host run between them and find the freed name (seen over MPI)
    n, owner, home, late = 8, 5, 3, 6
    name = _homed_name("late", home, n)
    async with open_cluster(n) as nodes:
        gp = await nodes[owner].register(name, bind=True)
        await gp.free()
        with pytest.raises(UnknownProcessError) as err:
            await nodes[late].lookup(name, timeout=10)
        assert err.value.waited is None and err.value.origin_rank == owner
        assert nodes[late].stats().messages_received[home] == {"TableMsg": 1}


@pytest.mark.timeout(60)
async def test_a_first_message_is_named_without_asking_the_senders_home() -> None:
    from aiopdbp.runtime.cluster import open_cluster

    # the sender's name is homed on a third host: before, the receiver asked
    # it for the sender's name (a round trip) before its recv returned
    n, sender, receiver, home = 8, 5, 6, 3
    src_name, dst_name = _homed_name("cold-src", home, n), _homed_name("cold-dst", receiver, n)
    async with open_cluster(n) as nodes:
        async with nodes[sender].process(src_name) as a, nodes[receiver].process(dst_name) as b:
            before = _lookups(nodes[receiver].stats().messages_sent)
            await a.send(dst_name, b"first", timeout=10)
            msg = await b.recv(timeout=10)
            assert (msg.source, msg.data) == (src_name, b"first")
            assert _lookups(nodes[receiver].stats().messages_sent) == before   # no LookupMsg to the home


def _lookups(sent: dict[int, dict[str, int]]) -> int:
    return sum(kinds.get("LookupMsg", 0) for kinds in sent.values())



@pytest.mark.timeout(60)
async def test_an_answer_to_a_first_message_does_not_wait_for_the_senders_home() -> None:
    from aiopdbp.errors import UnknownProcessError
    from aiopdbp.runtime.cluster import open_cluster

    # the receiver sends back to a name it has never looked up: the row the
    # first message carried is used at once, and the sender's host keeps it
    # current (before, the receiver also subscribed at the home: a lookup
    # and its answer per host and name)
    n, sender, receiver, home = 8, 5, 6, 3
    src_name, dst_name = _homed_name("ask-src", home, n), _homed_name("ask-dst", receiver, n)
    async with open_cluster(n) as nodes:
        async with nodes[sender].process(src_name) as a, nodes[receiver].process(dst_name) as b:
            await a.send(dst_name, b"ping", timeout=10)
            assert (await b.recv(timeout=10)).source == src_name   # type: ignore[union-attr]
            await b.send(src_name, b"pong", timeout=10)
            # the send did not wait for the home's answer: none has come yet
            assert nodes[receiver].stats().messages_received.get(home, {}).get("TableMsg", 0) == 0
            msg = await a.recv(timeout=10)
            assert (msg.source, msg.data) == (dst_name, b"pong")   # type: ignore[union-attr]
            # it asked the home nothing: the sender's host sends it the free
            assert home not in nodes[receiver].stats().messages_sent
        await _until(lambda: src_name not in nodes[receiver].router.pids, "the free from the sender's host")
        with pytest.raises(UnknownProcessError) as err:
            await nodes[receiver].lookup(src_name, timeout=10)
        assert err.value.waited is None   # failed without waiting out the timeout: the home says gone


async def _until(cond: Callable[[], bool], what: str, timeout: float = 10.0) -> None:
    """Wait (polling the loop, bounded) until ``cond()``; there is no event for it."""
    loop = asyncio.get_running_loop()
    end = loop.time() + timeout
    while not cond():
        if loop.time() > end:
            raise AssertionError(f"timed out waiting for {what}")
        await asyncio.sleep(0.005)


@pytest.mark.timeout(60)
async def test_a_peers_pool_rows_given_back_after_idle_are_made_again_in_order_and_credit() -> None:
    from aiopdbp.hosts.remote import RemoteConfig
    from aiopdbp.runtime.cluster import open_cluster

    count, window = 60, 2048   # 60 x 256 B: the sender waits for credit several times a round
    cfg = RemoteConfig(reclaim_after=0.005, gp_window=window)
    async with open_cluster(2, remote=cfg) as nodes:
        async with nodes[0].process("idle-a") as a, nodes[1].process("idle-b") as b:

            async def send_all(first: int) -> None:
                for i in range(first, first + count):
                    await a.send("idle-b", i.to_bytes(4, "little") + bytes(252), timeout=20)

            for rnd in range(3):
                sender = asyncio.create_task(send_all(rnd * count))
                got = [int.from_bytes((await b.recv(timeout=20)).data[:4], "little")  # type: ignore[union-attr]
                       for _ in range(count)]
                await sender
                assert got == list(range(rnd * count, (rnd + 1) * count))   # per-pair order
                # idle: the row for host 1 goes (and is made again by the next round)
                await _until(lambda: 1 not in nodes[0].stats().pool["send"]["hosts"],  # type: ignore[index]
                             "host 0's send row for host 1 to be given back")
            assert nodes[0].stats().pool["umb"]["used_blocks"] == 0   # type: ignore[index]


@pytest.mark.timeout(60)
@pytest.mark.parametrize("n", [5, 16])
async def test_start_up_gathers_the_hosts_info_up_the_tree_one_message_per_host(n: int) -> None:
    from aiopdbp.hosts.sequencer import children, parent
    from aiopdbp.runtime.cluster import open_cluster

    async with open_cluster(n) as nodes:
        stats = [node.stats() for node in nodes]
    for r in range(n):
        sent = {h: kinds.get("HInfoMsg", 0) + kinds.get("RelayMsg", 0)
                for h, kinds in stats[r].messages_sent.items()}
        up = {} if r == 0 else {parent(r): 1}   # its subtree's info, once (a relay per host before)
        assert sent == {**up, **dict.fromkeys(children(r, n), 1)}, (r, sent)
    # rank 0 hears from its children only: log2(n) messages, not n - 1
    got = stats[0].messages_received
    assert {h: kinds.get("HInfoMsg", 0) + kinds.get("RelayMsg", 0) for h, kinds in got.items()} \
        == dict.fromkeys(children(0, n), 1)


def _carries(sent: dict[int, dict[str, int]]) -> dict[int, int]:
    return {h: kinds["CarryMsg"] for h, kinds in sent.items() if kinds.get("CarryMsg")}


@pytest.mark.timeout(60)
async def test_a_first_message_goes_with_the_lookup_of_its_name_and_is_passed_on_by_its_home() -> None:
    from aiopdbp.runtime.cluster import open_cluster

    # before: a lookup to the home and back, then the message (and an
    # announcement) to the GP's host -- three hops; now two, and nothing else
    # (the home's answer to the sender too went: the GP's host answers with its row)
    n, sender, receiver, home = 8, 5, 6, 3
    src_name, dst_name = _homed_name("two-src", 2, n), _homed_name("two-dst", home, n)
    async with open_cluster(n) as nodes:
        async with nodes[sender].process(src_name) as a, nodes[receiver].process(dst_name) as b:
            before = [node.stats().messages_sent for node in nodes]
            await a.send(dst_name, b"first", timeout=10)
            msg = await b.recv(timeout=10)
            assert (msg.source, msg.data) == (src_name, b"first")  # type: ignore[union-attr]
            sent = [{h: {k: v - before[r].get(h, {}).get(k, 0) for k, v in kinds.items()
                         if v != before[r].get(h, {}).get(k, 0)}
                     for h, kinds in node.stats().messages_sent.items()} for r, node in enumerate(nodes)]
            sent = [{h: kinds for h, kinds in s.items() if kinds} for s in sent]
            assert sent[sender] == {home: {"CarryMsg": 1}}
            assert sent[home] == {receiver: {"CarryMsg": 1}}
            assert sent[receiver] == {sender: {"CarriedMsg": 1}}


@pytest.mark.timeout(60)
async def test_a_first_message_to_a_name_not_registered_yet_arrives_once_after_its_registration() -> None:
    from aiopdbp.errors import WouldBlock
    from aiopdbp.runtime.cluster import open_cluster

    n, sender, receiver, home = 8, 5, 6, 3
    dst_name = _homed_name("late-dst", home, n)
    async with open_cluster(n) as nodes:
        async with nodes[sender].process("late-src") as a:
            send = asyncio.create_task(a.send(dst_name, b"once", timeout=20))
            # the home said no (nothing to pass it on to): the send waits for the name
            await _until(lambda: nodes[sender].stats().messages_received.get(home, {}).get("CarriedMsg") == 1,
                         "the home's answer to the carried lookup")
            assert not send.done()
            async with nodes[receiver].process(dst_name) as b:
                await send
                assert (await b.recv(timeout=10)).data == b"once"  # type: ignore[union-attr]
                assert _carries(nodes[sender].stats().messages_sent) == {home: 1}
                await a.send(dst_name, b"next", timeout=10)
                assert (await b.recv(timeout=10)).data == b"next"  # not a second "once" first
                with pytest.raises(WouldBlock):
                    b.recv_nowait()


@pytest.mark.timeout(60)
@pytest.mark.parametrize("dies", ["home", "owner"])
async def test_a_first_message_whose_home_or_gp_host_is_lost_on_the_way_fails_the_send(dies: str) -> None:
    from aiopdbp.errors import HostLostError
    from aiopdbp.runtime.cluster import open_cluster

    n, sender, receiver, home = 8, 5, 6, 3
    lost = home if dies == "home" else receiver
    dst_name = _homed_name("lost-dst", home, n)
    async with open_cluster(n) as nodes:
        async with nodes[sender].process("lost-src") as a, nodes[receiver].process(dst_name):
            held = asyncio.Event()
            remote = nodes[lost]._remote
            assert remote is not None
            remote._dispatch._handlers["on_carry"] = lambda src, msg: held.set()  # it dies holding it
            send = asyncio.create_task(a.send(dst_name, b"lost", timeout=20))
            await asyncio.wait_for(held.wait(), 10)
            assert not send.done()
            sender_remote = nodes[sender]._remote
            assert sender_remote is not None
            sender_remote.failures.host_lost(lost)   # its heartbeat would say so
            with pytest.raises(HostLostError):
                await asyncio.wait_for(send, 10)


def _hold_carries(node: Any) -> tuple[list[tuple[int, Any]], asyncio.Event, Callable[[], None]]:
    """Hold the carried messages reaching ``node``; returns what it holds, an
    event set on the first, and a function that hands them on as they would
    have gone."""
    remote = node._remote
    assert remote is not None
    handlers = remote._dispatch._handlers
    take = handlers["on_carry"]
    held: list[tuple[int, Any]] = []
    arrived = asyncio.Event()

    def hold(src: int, msg: Any) -> None:
        held.append((src, msg))
        arrived.set()

    def release() -> None:
        handlers["on_carry"] = take
        for src, msg in held:
            take(src, msg)

    handlers["on_carry"] = hold
    return held, arrived, release


async def _cancel_delivered(task: asyncio.Task[Any]) -> None:
    """Cancel ``task`` and let the cancel reach the send it waits in."""
    task.cancel()
    for _ in range(3):
        await asyncio.sleep(0)


@pytest.mark.timeout(60)
async def test_a_carried_first_message_cancelled_on_the_way_but_delivered_ends_its_send_normally() -> None:
    from aiopdbp.errors import WouldBlock
    from aiopdbp.runtime.cluster import open_cluster

    n, sender, receiver, home = 8, 5, 6, 3
    dst_name = _homed_name("cancelled-dst", home, n)
    async with open_cluster(n) as nodes:
        async with nodes[sender].process("cancelled-src") as a, nodes[receiver].process(dst_name) as b:
            _, arrived, release = _hold_carries(nodes[receiver])
            send = asyncio.create_task(a.send(dst_name, b"carried", timeout=20))
            await asyncio.wait_for(arrived.wait(), 10)
            await _cancel_delivered(send)
            assert not send.done()       # it cannot say "nothing sent": it waits for the answer
            release()
            await asyncio.wait_for(send, 10)   # the message went: the send is not cancelled
            assert (await b.recv(timeout=10)).data == b"carried"  # type: ignore[union-attr]
            with pytest.raises(WouldBlock):
                b.recv_nowait()


@pytest.mark.timeout(60)
async def test_a_task_cancelled_in_a_carried_send_that_was_delivered_is_cancelled_at_its_next_await() -> None:
    from aiopdbp.runtime.cluster import open_cluster

    n, sender, receiver, home = 8, 5, 6, 3
    dst_name = _homed_name("next-await-dst", home, n)
    sent = asyncio.Event()

    async def sending(a: Any) -> None:
        await a.send(dst_name, b"carried", timeout=20)
        sent.set()
        await asyncio.Event().wait()   # only the cancel ends this

    async with open_cluster(n) as nodes:
        async with nodes[sender].process("next-await-src") as a, nodes[receiver].process(dst_name) as b:
            _, arrived, release = _hold_carries(nodes[receiver])
            task = asyncio.create_task(sending(a))
            await asyncio.wait_for(arrived.wait(), 10)
            await _cancel_delivered(task)
            release()
            with pytest.raises(asyncio.CancelledError):
                await asyncio.wait_for(task, 10)
            assert sent.is_set() and task.cancelled()
            assert (await b.recv(timeout=10)).data == b"carried"  # type: ignore[union-attr]


@pytest.mark.timeout(60)
async def test_a_carried_send_delivered_after_its_timeout_expired_leaves_its_task_uncancelled() -> None:
    from aiopdbp.runtime.cluster import open_cluster

    # The scope's cancel came during the carried send, which was delivered:
    # the send returns, the scope ends (withdrawing its cancel) and nothing
    # cancels the task afterwards.  (The cancel used to be raised again at
    # the task's next await regardless.)
    n, sender, receiver, home = 8, 5, 6, 3
    dst_name = _homed_name("scope-dst", home, n)
    scope = asyncio.timeout(None)

    async def sending(a: Any) -> bool:
        async with scope:
            await a.send(dst_name, b"carried", timeout=20)
        await asyncio.sleep(0)   # a stray cancel would be raised here
        return scope.expired()

    async with open_cluster(n) as nodes:
        async with nodes[sender].process("scope-src") as a, nodes[receiver].process(dst_name) as b:
            _, arrived, release = _hold_carries(nodes[receiver])
            task = asyncio.create_task(sending(a))
            await asyncio.wait_for(arrived.wait(), 10)
            scope.reschedule(asyncio.get_running_loop().time())   # it expires now
            for _ in range(3):
                await asyncio.sleep(0)
            assert not task.done()
            release()
            assert await asyncio.wait_for(task, 10) is True
            assert (await b.recv(timeout=10)).data == b"carried"  # type: ignore[union-attr]


@pytest.mark.timeout(60)
async def test_a_carried_first_message_cancelled_on_the_way_and_not_delivered_is_never_sent() -> None:
    from aiopdbp.errors import WouldBlock
    from aiopdbp.runtime.cluster import open_cluster

    n, sender, receiver, home = 8, 5, 6, 3
    dst_name = _homed_name("never-dst", home, n)
    async with open_cluster(n) as nodes:
        async with nodes[sender].process("never-src") as a:
            _, arrived, release = _hold_carries(nodes[home])   # the name is not registered yet
            send = asyncio.create_task(a.send(dst_name, b"never", timeout=20))
            await asyncio.wait_for(arrived.wait(), 10)
            await _cancel_delivered(send)
            release()                    # the home answers no: nothing was queued
            with pytest.raises(asyncio.CancelledError):
                await asyncio.wait_for(send, 10)
            async with nodes[receiver].process(dst_name) as b:
                await a.send(dst_name, b"next", timeout=10)
                assert (await b.recv(timeout=10)).data == b"next"  # type: ignore[union-attr]
                with pytest.raises(WouldBlock):
                    b.recv_nowait()
