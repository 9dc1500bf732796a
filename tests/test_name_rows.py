"""The GP's host keeps the hosts it told a GP's row current (aiopdbp.hosts.namerows):
no lookup at the name's home per host and name, and the name rule unchanged."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from tests.test_scale import _hold_carries, _homed_name, _until


def _kinds(node: Any, host: int) -> dict[str, int]:
    return dict(node.stats().messages_sent.get(host, {}))


@pytest.mark.timeout(60)
async def test_a_name_freed_by_its_gps_hosts_word_is_asked_of_its_home_again_and_found_registered_elsewhere() -> None:
    from aiopdbp.errors import UnknownProcessError
    from aiopdbp.runtime.cluster import open_cluster

    n, sender, owner, other, home = 8, 5, 6, 2, 3
    name = _homed_name("moved", home, n)
    async with open_cluster(n) as nodes:
        async with nodes[sender].process("moved-src") as a:
            async with nodes[owner].process(name) as b:
                await a.send(name, b"one", timeout=10)   # carried; the owner answers with its row
                assert (await b.recv(timeout=10)).data == b"one"  # type: ignore[union-attr]
                assert "LookupMsg" not in _kinds(nodes[sender], home)
            # the owner's word frees it here (the home never subscribed this host)
            await _until(lambda: name not in nodes[sender].router.pids, "the free from the GP's host")
            with pytest.raises(UnknownProcessError) as err:
                await a.send(name, b"gone", timeout=10)
            assert err.value.waited is None          # the home said gone: no wait for the timeout
            assert _kinds(nodes[sender], home).get("LookupMsg") == 1
            async with nodes[other].process(name) as c:   # registered again, elsewhere
                await a.send(name, b"two", timeout=10)
                msg = await c.recv(timeout=10)
                assert (msg.source, msg.data) == ("moved-src", b"two")  # type: ignore[union-attr]


@pytest.mark.timeout(60)
async def test_an_update_of_a_sending_gp_reaches_the_host_its_carried_row_went_to_after_that_row() -> None:
    from aiopdbp.runtime.cluster import open_cluster

    # the row goes by way of the name's home; an update sent straight to the
    # GP's host would overtake it, and the stale row would stand there
    n, sender, receiver, home = 8, 5, 6, 3
    dst_name = _homed_name("held-dst", home, n)
    async with open_cluster(n) as nodes:
        async with nodes[sender].process("held-src") as a, nodes[receiver].process(dst_name) as b:
            _, arrived, release = _hold_carries(nodes[receiver])
            send = asyncio.create_task(a.send(dst_name, b"first", timeout=20))
            await asyncio.wait_for(arrived.wait(), 10)
            await a.release_pipe()                    # while its row is on the way
            release()
            await asyncio.wait_for(send, 10)
            assert (await b.recv(timeout=10)).data == b"first"  # type: ignore[union-attr]
            pta = nodes[receiver].tables.pta
            await _until(lambda: a.pid in pta and pta[a.pid].pipe is None, "the release after the row")
            sent = nodes[receiver].stats().messages_sent
            assert not any("LookupMsg" in kinds for kinds in sent.values())   # nothing asked of a home
            await a.apply_pipe()                      # and the next update follows the same way
            await _until(lambda: pta[a.pid].pipe is not None, "the bind after the release")


@pytest.mark.timeout(60)
async def test_a_gp_leaving_its_block_cleanly_costs_each_host_holding_its_name_one_update() -> None:
    from aiopdbp.errors import UnknownProcessError
    from aiopdbp.runtime.cluster import open_cluster

    # before: its pipe's release, then its free, each a table update to every
    # host that held the name (and a request to its home each)
    n, sender, owner = 8, 5, 6
    async with open_cluster(n) as nodes:
        async with nodes[sender].process("leave-src") as a:
            async with nodes[owner].process("leave-dst") as b:
                await a.send("leave-dst", b"hi", timeout=10)
                assert (await b.recv(timeout=10)).data == b"hi"  # type: ignore[union-attr]
                got = sum(k.get("TableMsg", 0) for k in nodes[sender].stats().messages_received.values())
            await _until(lambda: "leave-dst" not in nodes[sender].router.pids, "the free")
            after = sum(k.get("TableMsg", 0) for k in nodes[sender].stats().messages_received.values())
            assert after - got == 1
            with pytest.raises(UnknownProcessError):
                await a.send("leave-dst", b"late", timeout=10)
