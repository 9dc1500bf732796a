"""Large payloads (issue 18 item 3): the split header's announcement, buffer
ownership in the router and the link, the bulk path's memory bound over
MPI.  (End to end, MPI_Send ownership and ``recv_into`` are behaviour
scenarios: ``tests/scenarios.py``, run in-process and over MPI.)"""

from __future__ import annotations

import asyncio
import json
from typing import Any

import numpy as np
import pytest

from aiopdbp.errors import BrokenResourceError, ProtocolError
from aiopdbp.hosts.link import HostLink
from aiopdbp.hosts.owned import OwnedDone, OwnedSend
from aiopdbp.hosts.tables import Tables
from aiopdbp.routing.pipes import PipePool
from aiopdbp.routing.router import Router
from aiopdbp.wire.message import CREDIT_OVERHEAD, Message
from aiopdbp.wire.codec import (decode_split, encode_cdu, encode_split, encode_split_array, split_array,
                                split_stream_key, split_target)
from aiopdbp.wire.mesp import CDU, Kind

from tests.mpirun import SCRIPTS_DIR, requires_mpi, run_mpi


def test_split_target_announces_size_and_destination_of_an_array() -> None:
    arr = np.arange(10_000, dtype=np.float32).reshape(100, 100)
    head, payload = encode_split(CDU(Kind.SHORT, 7, (42,), arr, 3))
    assert split_target(head) == (arr.nbytes, 42, False)
    cdu = decode_split(head, bytearray(memoryview(payload).cast("B")))
    assert cdu.dest_ps == (42,) and (cdu.data == arr).all() and cdu.data.shape == (100, 100)


def test_split_target_announces_a_stream_segment() -> None:
    head, _ = encode_split(CDU(Kind.STREAM, 7, (0,), b"x" * 50_000, 0))
    nbytes, _, stream = split_target(head)
    assert (nbytes, stream) == (50_000, True)


def test_split_stream_key_names_the_stream_of_a_segment_header() -> None:
    head, _ = encode_split(CDU(Kind.STREAM, 7, (0,), b"x" * 50_000, 0, sno=41, segno=3, source_n=2))
    assert split_target(head)[2] and split_stream_key(head) == (2, 41)


def test_split_target_names_no_gp_for_a_bytes_payload() -> None:
    # bytes arrive as a bytes object of their own: they never stay in a GP's buffer
    head, _ = encode_split(CDU(Kind.SHORT, 7, (42,), b"x" * 50_000, 0))
    assert split_target(head) == (50_000, 0, False)


def test_split_target_names_no_gp_for_a_multicast() -> None:
    head, _ = encode_split(CDU(Kind.SHORT, 7, (42, 43), np.zeros(10_000), 0))
    assert split_target(head) == (80_000, 0, False)   # shared by both: no GP's own buffer


def test_split_target_refuses_a_whole_frame() -> None:
    whole = b"".join(bytes(p) for p in encode_cdu(CDU(Kind.SHORT, 1, (2,), b"abc", 0)))
    with pytest.raises(ProtocolError, match="announces"):
        split_target(whole)


def test_split_target_refuses_garbage() -> None:
    with pytest.raises(ProtocolError):
        split_target(b"\x01\x07\x01\x00" + bytes(4))


# -------------------------------------- the split header of one GP's array, cached
@pytest.mark.parametrize("dtype", ["u1", "f8", "c16", "M8[s]"])
def test_cached_split_header_is_the_encoders_and_payload_the_arrays_bytes(dtype: str) -> None:
    arr = np.arange(12_000).astype(dtype).reshape(40, 300)
    want_head, want_payload = encode_split(CDU(Kind.COMMAND, 7, (42,), arr, 9))
    for _ in range(2):  # the first call fills the cache, the second hits it
        head, payload = encode_split_array(Kind.COMMAND, 7, 42, 9, arr)
        assert head == bytes(want_head)
        assert bytes(memoryview(payload).cast("B")) == bytes(memoryview(want_payload).cast("B"))


def test_cached_split_header_differs_by_shape_and_destination() -> None:
    a, b = np.zeros(8192), np.zeros((2, 4096))
    heads = {encode_split_array(Kind.SHORT, 7, pid, 0, x)[0] for pid in (42, 43) for x in (a, b)}
    assert len(heads) == 4


def test_cached_split_header_differs_by_the_dtypes_tag() -> None:
    # a tagged dtype (a tensor's, aiopdbp.arrays) equals its base: only the tag tells their headers apart
    base = np.dtype("<f4")
    tagged = [np.dtype("<f4", metadata={"aiopdbp": ("torch", "<f4")}), np.dtype("<f4", metadata={"other": 1})]
    arrs = [np.zeros(8192, dtype=dt) for dt in (base, *tagged)]
    heads = [encode_split_array(Kind.SHORT, 7, 42, 0, x)[0] for x in arrs + arrs]  # each twice: the cache's answer too
    assert heads[:3] == heads[3:] and heads[0] != heads[1] and heads[0] == heads[2]  # (other metadata: no tag)
    assert split_array(heads[1]).dtype.metadata == {"aiopdbp": ("torch", "<f4")}  # type: ignore[union-attr]
    assert split_array(heads[0]).dtype.metadata is None  # type: ignore[union-attr]


def test_split_array_says_what_decode_split_decodes() -> None:
    arr = np.arange(10_000, dtype=np.float32).reshape(100, 100)
    head, payload = encode_split(CDU(Kind.COMMAND, 7, (42,), arr, 3))
    info = split_array(head)
    assert info is not None
    buf = bytearray(memoryview(payload).cast("B"))
    cdu = decode_split(head, buf)
    got = info.array(buf)
    assert (info.nbytes, info.pid, info.kind, info.source_p, info.com) == (arr.nbytes, 42, Kind.COMMAND, 7, 3)
    assert got.dtype == cdu.data.dtype and got.shape == cdu.data.shape and (got == arr).all()


@pytest.mark.parametrize("cdu", [
    CDU(Kind.STREAM, 7, (0,), np.zeros(8192), 0),        # a stream segment
    CDU(Kind.SHORT, 7, (42,), b"x" * 50_000, 0),          # bytes
    CDU(Kind.SHORT, 7, (42, 43), np.zeros(8192), 0),      # a multicast
], ids=["stream", "bytes", "multicast"])
def test_split_array_is_none_for_other_split_frames(cdu: CDU) -> None:
    assert split_array(encode_split(cdu)[0]) is None


def test_split_array_refuses_a_header_with_stray_bytes() -> None:
    head, _ = encode_split(CDU(Kind.SHORT, 7, (42,), np.zeros(8192), 0))
    bad = bytearray(head + bytes(8))
    bad[4:8] = (int.from_bytes(head[4:8], "little") + 8).to_bytes(4, "little")  # body_len covers them
    with pytest.raises(ProtocolError, match="stray"):
        split_array(bytes(bad))


@requires_mpi
@pytest.mark.timeout(150)
def test_three_senders_of_16mib_to_a_slow_receiver_stay_under_the_rss_bound_4ranks() -> None:
    r = run_mpi(SCRIPTS_DIR / "large_rss.py", n=4, timeout=120)
    assert r.returncode == 0, r.stdout + r.stderr
    line = next(x for x in r.stdout.splitlines() if "RSS {" in x)
    got = json.loads(line.split("RSS ", 1)[1])
    assert got["ok"] and got["peak_mib"] - got["base_mib"] <= got["bound_mib"], got


@requires_mpi
@pytest.mark.timeout(90)
def test_a_large_request_response_returns_credit_on_its_replies_not_in_control_messages() -> None:
    r = run_mpi(SCRIPTS_DIR / "carried_grants.py", n=2, timeout=60)
    assert r.returncode == 0, r.stdout + r.stderr
    got = json.loads(next(x for x in r.stdout.splitlines() if "CARRIED {" in x).split("CARRIED ", 1)[1])
    rounds = 40
    # a whole window's grant per round trip and rank, a quarter window's per 4: all carried
    assert got["pingpong"][str(1 << 20)] == [[0, rounds], [0, rounds]], got
    assert got["pingpong"][str(64 << 10)] == [[0, rounds // 4], [0, rounds // 4]], got
    assert got["oneway_s"] > 0   # the one-way flow, whose grants nothing carries, finished


# ------------------------------------------- buffer ownership (router + link)
PID = 5


class _Link:
    """A remote target that sends from the caller's buffer (``owns``) and
    keeps what it was given; the test completes the MPI send by hand."""

    remote = True

    def __init__(self) -> None:
        self.items: list[Any] = []

    def owns(self, nbytes: int) -> bool:
        return True

    def reserve_nowait(self, pid: int = 0, nbytes: int = 0) -> None:
        pass

    async def reserve(self, pid: int = 0, nbytes: int = 0) -> None:
        pass

    def unreserve(self, pid: int = 0, nbytes: int = 0) -> None:
        pass

    def put_to(self, pid: int, item: Any) -> bool:
        self.items.append(item)
        if type(item) is OwnedSend:
            item.done.hold()          # as HostLink does when it posts the payload
        return True

    def offer(self, pid: int, nbytes: int, fields: Any) -> bool:
        return False


def _router(target: Any, queued: Any = ()) -> Router:
    tables = Tables()
    router = Router(tables, PipePool(4, 4), 0, name_timeout=1.0,
                    submit=lambda tgt, pid, item: tgt.put_to(pid, item),
                    offer=lambda tgt, pid, cost, fields: tgt.offer(pid, cost, fields), queued=queued)
    router.pids["dst"] = PID          # as the table update registering "dst" makes it
    router.targets[PID] = target
    return router


def _send(router: Router, arr: np.ndarray) -> Any:
    return asyncio.ensure_future(router.send_owned(
        "dst", ("src", Kind.SHORT, 0, arr, 1), arr.nbytes + CREDIT_OVERHEAD, None, np.copy))


async def _spin(n: int = 5) -> None:
    for _ in range(n):
        await asyncio.sleep(0)


@pytest.mark.timeout(10)
async def test_owned_send_returns_only_once_the_payload_send_completed() -> None:
    link = _Link()
    arr = np.arange(1000.0)
    task = _send(_router(link), arr)
    await _spin()
    assert not task.done() and len(link.items) == 1
    owned = link.items[0]
    assert type(owned) is OwnedSend and owned.msg.data is arr   # the buffer itself, no copy
    owned.done.set_result(None)
    await asyncio.wait_for(task, 5)


@pytest.mark.timeout(10)
async def test_cancelled_owned_send_waits_until_mpi_is_done_with_the_buffer() -> None:
    link = _Link()
    task = _send(_router(link), np.arange(1000.0))
    await _spin()
    task.cancel()
    await _spin()
    assert not task.done()            # MPI still reads the buffer: the cancel waits
    link.items[0].done.set_result(None)
    await asyncio.wait_for(task, 5)   # the payload went: the send returns (it is the task alone)


@pytest.mark.timeout(10)
async def test_owned_send_fails_with_the_link_error() -> None:
    link = _Link()
    task = _send(_router(link), np.arange(1000.0))
    await _spin()
    link.items[0].done.set_exception(BrokenResourceError("host 1 is gone"))
    with pytest.raises(BrokenResourceError, match="host 1 is gone"):
        await asyncio.wait_for(task, 5)


class _OwnedLink(_Link):
    """A link with the owned-send entry (``HostLink.owned``): takes every message."""

    def __init__(self) -> None:
        super().__init__()
        self.owned_calls: list[tuple[int, int]] = []

    def owned(self, pid: int, nbytes: int, fields: Any) -> OwnedDone:
        self.owned_calls.append((pid, nbytes))
        done = OwnedDone(loop=asyncio.get_running_loop())
        done.hold()                   # posted
        return done


@pytest.mark.timeout(10)
async def test_owned_send_with_credit_at_hand_is_the_links_one_call_and_awaits_its_future() -> None:
    link = _OwnedLink()
    arr = np.arange(1000.0)
    cost = arr.nbytes + CREDIT_OVERHEAD
    got = _router(link).send_owned("dst", ("src", Kind.SHORT, 0, arr, 1), cost, None, np.copy)
    assert type(got) is OwnedDone and link.owned_calls == [(PID, cost)] and not link.items   # no coroutine

    async def sender() -> None:
        await got

    task = asyncio.ensure_future(sender())
    await _spin()
    task.cancel()
    await _spin()
    assert not task.done()            # MPI still reads the buffer: the cancel waits
    got.set_result(None)
    await asyncio.wait_for(task, 5)   # the payload went: the send returns


@pytest.mark.timeout(10)
async def test_owned_send_behind_entries_queued_in_the_public_pipes_takes_the_long_way() -> None:
    link = _OwnedLink()
    arr = np.arange(1000.0)
    task = asyncio.ensure_future(_router(link, queued=[object()]).send_owned(
        "dst", ("src", Kind.SHORT, 0, arr, 1), arr.nbytes + CREDIT_OVERHEAD, None, np.copy))
    await _spin()
    assert link.owned_calls == [] and len(link.items) == 1 and type(link.items[0]) is OwnedSend
    link.items[0].done.set_result(None)
    await asyncio.wait_for(task, 5)


@pytest.mark.timeout(10)
async def test_owned_send_to_a_local_gp_queues_a_copy() -> None:
    pps = PipePool(4, 4)
    pipe = pps.apply_nowait()
    arr = np.arange(1000.0)
    await asyncio.wait_for(_send(_router(pipe), arr), 5)
    msg = pipe.receive_nowait()
    assert msg.data is not arr and (msg.data == arr).all()


class _BulkTransport:
    """Enough of a transport with bulk payloads for one link."""

    tick = 0
    bulk_tags = 8

    def __init__(self) -> None:
        self.heads: list[Any] = []
        self.bulk: list[tuple[int, Any, asyncio.Future[None]]] = []

    def post_nowait(self, dest: int, channel: Any, blocks: list[Any]) -> None:
        self.heads.append(blocks)

    def post_bulk(self, dest: int, tag: int, buf: Any,
                  done: asyncio.Future[None] | None = None) -> asyncio.Future[None]:
        fut = asyncio.get_running_loop().create_future() if done is None else done
        self.bulk.append((tag, buf, fut))
        return fut


def _bulk_link(tr: _BulkTransport) -> HostLink:
    return HostLink(1, tr, None, window=1 << 20, block_size=4096,  # type: ignore[arg-type]
                    large=32 << 10, max_inflight=4, allow_pickle=False)


@pytest.mark.timeout(10)
async def test_link_sends_a_large_payload_as_one_bulk_message_from_the_buffer() -> None:
    tr = _BulkTransport()
    link = _bulk_link(tr)
    arrs = [np.arange(10_000.0) + i for i in range(3)]
    for a in arrs:
        link.put_to(PID, Message(("src", Kind.SHORT, 0, a, 1)))
    assert [len(h) for h in tr.heads] == [1, 1, 1]           # the header alone on the data channel
    assert [t for t, _, _ in tr.bulk] == [0, 1, 2]          # the frames' numbers
    assert all(np.shares_memory(np.frombuffer(b, np.float64), a) for (_, b, _), a in zip(tr.bulk, arrs))
    head = tr.heads[0][0]
    assert split_target(head) == (arrs[0].nbytes, PID, False)


class _SplitTransport(_BulkTransport):
    """A bulk transport that also posts a split frame's header with its payload."""

    bulk_heads = True

    def __init__(self) -> None:
        super().__init__()
        self.splits: list[tuple[bytes, int]] = []

    def post_nowait(self, dest: int, channel: Any, blocks: list[Any]) -> Any:
        super().post_nowait(dest, channel, blocks)
        return asyncio.get_running_loop().create_future()   # in flight until the test says

    def post_bulk(self, dest: int, tag: int, buf: Any, done: Any = None, head: Any = None) -> Any:
        if head is not None:
            self.splits.append((bytes(head), tag))
        return super().post_bulk(dest, tag, buf, done)


@pytest.mark.timeout(10)
async def test_link_posts_a_split_frame_in_one_transport_call_unless_its_header_must_queue() -> None:
    tr = _SplitTransport()
    link = _bulk_link(tr)
    arrs = [np.arange(10_000.0) + i for i in range(3)]
    link.put_to(PID, Message(("src", Kind.SHORT, 0, arrs[0], 1)))
    assert tr.heads == [] and [t for _, t in tr.splits] == [0]       # one call: header and payload
    assert split_target(tr.splits[0][0]) == (arrs[0].nbytes, PID, False)
    for _ in range(4):   # max_inflight lone frames, one per loop iteration, never completing
        tr.tick += 1
        link.put_to(PID, Message(("src", Kind.SHORT, 0, b"x", 1)))
    assert link.stats().inflight == 4 and len(tr.heads) == 4
    link.put_to(PID, Message(("src", Kind.SHORT, 0, arrs[1], 1)))
    assert len(tr.splits) == 1 and len(tr.heads) == 4              # queued behind them, payload posted
    assert [t for t, _, _ in tr.bulk] == [0, 1]
    assert link.stats().messages == 5 and link.stats().queued == 1


@pytest.mark.timeout(10)
async def test_link_failure_fails_an_owned_send_still_in_flight() -> None:
    tr = _BulkTransport()
    link = _bulk_link(tr)
    done = OwnedDone(loop=asyncio.get_running_loop())
    link.put_to(PID, OwnedSend(Message(("src", Kind.SHORT, 0, np.arange(10_000.0), 1)), done))
    assert not done.done()
    link.fail(BrokenResourceError("host 1 is gone"))
    with pytest.raises(BrokenResourceError):
        await done


@pytest.mark.timeout(10)
async def test_owned_send_cancelled_before_the_link_posted_it_is_dropped_with_its_credit() -> None:
    tr = _BulkTransport()
    link = _bulk_link(tr)
    arr = np.arange(10_000.0)
    link.reserve_nowait(PID, arr.nbytes + CREDIT_OVERHEAD)
    assert link.stats().credit_out == arr.nbytes + CREDIT_OVERHEAD
    done = OwnedDone(loop=asyncio.get_running_loop())
    assert done.cancel()                      # not posted yet: an ordinary future
    link.put_to(PID, OwnedSend(Message(("src", Kind.SHORT, 0, arr, 1)), done))
    assert tr.heads == [] and tr.bulk == []   # nothing sent
    assert link.stats().credit_out == 0       # the credit went back


# A cancelled owned send tells the truth, on both ways into the link: its
# one call (``HostLink.owned``, credit at hand) and the long way (queued
# behind entries in the public pipes: the router's coroutine).
_WAYS = ["owned", "long"]


def _owned_send(way: str) -> tuple[_BulkTransport, HostLink, Any]:
    """A real link over a bulk transport that completes nothing by itself, its
    router, and an awaitable send of a large array to GP ``PID`` by ``way``."""
    tr = _BulkTransport()
    link = _bulk_link(tr)
    router = _router(link, queued=[] if way == "owned" else [object()])
    arr = np.arange(10_000.0)
    return tr, link, lambda: router.send_owned("dst", ("src", Kind.SHORT, 0, arr, 1),
                                               arr.nbytes + CREDIT_OVERHEAD, None, np.copy)


@pytest.mark.timeout(10)
@pytest.mark.parametrize("way", _WAYS)
async def test_an_owned_send_cancelled_after_its_payload_went_returns_and_the_task_is_cancelled_at_its_next_await(
        way: str) -> None:
    tr, _, send = _owned_send(way)
    returned = asyncio.Event()

    async def sending() -> None:
        await send()
        returned.set()
        await asyncio.Event().wait()   # only the cancel ends this

    task = asyncio.ensure_future(sending())
    await _spin()
    assert len(tr.bulk) == 1          # the payload is posted: MPI reads the buffer
    task.cancel()
    await _spin()
    assert not task.done() and not returned.is_set()   # the cancel waits for MPI
    tr.bulk[0][2].set_result(None)    # MPI is done with the buffer: the message went
    with pytest.raises(asyncio.CancelledError):
        await asyncio.wait_for(task, 5)
    assert returned.is_set() and task.cancelled()


@pytest.mark.timeout(10)
@pytest.mark.parametrize("way", _WAYS)
async def test_an_owned_send_cancelled_whose_payload_did_not_go_raises_cancelled(way: str) -> None:
    tr, link, send = _owned_send(way)
    returned = asyncio.Event()

    async def sending() -> None:
        await send()
        returned.set()

    task = asyncio.ensure_future(sending())
    await _spin()
    assert len(tr.bulk) == 1
    task.cancel()
    await _spin()
    link.fail(BrokenResourceError("host 1 is gone"))   # the payload never completes
    with pytest.raises(asyncio.CancelledError):
        await asyncio.wait_for(task, 5)
    assert not returned.is_set()


@pytest.mark.timeout(10)
@pytest.mark.parametrize("way", _WAYS)
async def test_an_owned_send_whose_payload_went_after_its_timeout_expired_leaves_its_task_uncancelled(
        way: str) -> None:
    tr, _, send = _owned_send(way)
    scope = asyncio.timeout(None)

    async def sending() -> bool:
        async with scope:
            await send()
        await asyncio.sleep(0)   # a stray cancel would be raised here
        return scope.expired()

    task = asyncio.ensure_future(sending())
    await _spin()
    assert len(tr.bulk) == 1
    scope.reschedule(asyncio.get_running_loop().time())   # it expires now
    await _spin()
    assert not task.done()
    tr.bulk[0][2].set_result(None)
    assert await asyncio.wait_for(task, 5) is True


@pytest.mark.timeout(10)
async def test_a_refused_record_gives_back_its_credit_and_holds_no_pool_cell() -> None:
    from aiopdbp.pool import PoolMatrix, SendPool, UserMemory
    from aiopdbp.wire.shorts import ShortStream

    pool = SendPool(PoolMatrix(2, 2, UserMemory(4096, 4), 2, 0.5))
    tr = _BulkTransport()
    link = HostLink(1, tr, pool, window=1 << 20, block_size=4096,  # type: ignore[arg-type]
                    large=32 << 10, max_inflight=4, allow_pickle=False)
    link.put_to(PID, Message(("src", Kind.SHORT, 0, b"first", 1)))   # the iteration's first: alone
    bad = object()  # neither a short record nor, without allow_pickle, a full one
    link.reserve_nowait(PID, CREDIT_OVERHEAD)      # what credit_cost charges an object
    with pytest.raises(TypeError):
        link.put_to(PID, ShortStream((None, Kind.STREAM, 0, bad, 1, 7, 4, 0)))
    assert link.stats().credit_min == 1 << 20           # its credit came back
    await asyncio.sleep(0)                               # the end-of-iteration flush: nothing to send
    await asyncio.sleep(0)
    assert len(tr.heads) == 1 and pool.matrix[1].used == 0  # and its cell is free again
    tr.tick += 1                                         # a later loop iteration
    for k in range(3):                                   # the link goes on: a lone frame, then a block
        link.put_to(PID, Message(("src", Kind.SHORT, 0, b"m%d" % k, 1)))
    await asyncio.sleep(0)
    await asyncio.sleep(0)
    assert len(tr.heads) == 3 and link.stats().blocks == 1, tr.heads
