"""Behaviour scenarios run unchanged over the in-process fabric and over MPI.

A *scenario* is an SPMD coroutine: every host (rank) runs it at the same
time with its own :class:`~aiopdbp.runtime.node.Node`, wrapped in a :class:`Ctx`.  A
host creates only the GPs it owns (GP ``i`` lives on ``ctx.owner(i)``), finds
the others by name (``lookup``/``send`` with a timeout), and checks what it
received with plain ``assert`` -- a failure on any host fails the scenario.
Every scenario works for 1, 2 and 4 hosts (with one host everything is local).

Two runners use this registry:

* :func:`run_inproc` -- ``n`` hosts in one event loop (``open_cluster``),
  used by ``tests/test_behaviour.py`` directly;
* ``tests/mpi_scripts/run_scenarios.py`` -- one host per MPI rank, started by
  ``mpiexec`` (``open_node`` picks the MPI transport), which calls
  :func:`run_on_node`.

Scenarios that need particular node options (small pipes, a small credit
window, ``allow_pickle``) declare them in :func:`scenario`; both runners open
the nodes with :meth:`Scenario.node_options`.  Payloads are deterministic
functions of a tag (:func:`pattern`), so a receiver checks every byte against
what the sender must have sent, and streams are also checked with a sha256
the sender computes and sends after the stream.

Environment: ``AIOPDBP_SCENARIO_TIMEOUT_SCALE`` multiplies every timeout
(slow machines); ``AIOPDBP_SCENARIO_VERBOSE=1`` prints diagnostics
(``Ctx.log``) and every task's stack just before a scenario times out.
"""

from __future__ import annotations

import asyncio
import contextlib
import copy
import dataclasses
import functools
import hashlib
import importlib.util
import json
import os
import time
from collections import defaultdict, deque
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from typing import Any

import numpy as np
import pytest

import aiopdbp
from aiopdbp import (
    GP,
    BrokenResourceError,
    DuplicateProcessError,
    IncomingStream,
    Kind,
    Message,
    NoPipeError,
    PType,
    StreamError,
    UnknownProcessError,
    WouldBlock,
)
from aiopdbp.runtime.cluster import open_cluster
from aiopdbp.hosts.remote import RemoteConfig
from aiopdbp.streams.table import SMALL_SEGMENT

__all__ = ["SCENARIOS", "Scenario", "Ctx", "scenario", "run_on_node", "run_inproc", "pattern"]

VERBOSE = bool(os.environ.get("AIOPDBP_SCENARIO_VERBOSE"))
TIMEOUT_SCALE = float(os.environ.get("AIOPDBP_SCENARIO_TIMEOUT_SCALE", "1") or 1)

#: options every scenario's nodes get unless the scenario overrides them:
#: a failing scenario must not wait a minute in the close handshake.
DEFAULT_NODE_OPTIONS: dict[str, Any] = {"close_timeout": 10.0, "handshake_timeout": 30.0}


# ============================================================== registry
@dataclasses.dataclass
class Scenario:
    """One registered scenario: the coroutine function plus how to run it."""

    name: str
    fn: Callable[[Ctx], Awaitable[None]]
    options: dict[str, Any]
    timeout: float
    doc: str = ""
    #: modules the scenario needs (its tests skip without them)
    requires: tuple[str, ...] = ()

    def __call__(self, ctx: Ctx) -> Awaitable[None]:
        return self.fn(ctx)

    def node_options(self) -> dict[str, Any]:
        """Fresh keyword arguments for ``Node``/``open_node``/``open_cluster``
        (deep-copied: a node may modify its RemoteConfig)."""
        opts = dict(DEFAULT_NODE_OPTIONS)
        opts.update(copy.deepcopy(self.options))
        return opts

    @property
    def op_timeout(self) -> float:
        """Timeout of one blocking operation inside the scenario: well below
        the scenario's, so a stuck step reports itself precisely."""
        return self.timeout * 0.6


SCENARIOS: dict[str, Scenario] = {}


async def on_ranks(ctx: Ctx, *parts: tuple[int, Callable[[], Awaitable[None]]]) -> None:
    """Run each ``(rank, coroutine function)`` part on its rank, concurrently
    (a sender and a receiver on the same rank run side by side)."""
    async with asyncio.TaskGroup() as tg:
        for rank, part in parts:
            if ctx.rank == rank:
                tg.create_task(part())


def scenario(*, timeout: float = 30.0, requires: tuple[str, ...] = (),
             **options: Any) -> Callable[[Callable[[Ctx], Awaitable[None]]], Scenario]:
    """Register ``async def name(ctx)`` as a scenario; ``options`` go to the Node;
    ``requires``: modules without which it is skipped."""

    def deco(fn: Callable[[Ctx], Awaitable[None]]) -> Scenario:
        name = fn.__name__
        if name in SCENARIOS:
            raise ValueError(f"scenario {name!r} registered twice")
        sc = Scenario(name, fn, options, timeout * TIMEOUT_SCALE, (fn.__doc__ or "").strip(), requires)
        SCENARIOS[name] = sc
        return sc

    return deco


# ============================================================== context
class Ctx:
    """What a scenario sees on one host."""

    def __init__(self, node: aiopdbp.Node, sc: Scenario) -> None:
        self.node = node
        self.rank = node.rank
        self.size = node.size
        self.scenario = sc.name
        self.timeout = sc.op_timeout
        self._stack = contextlib.AsyncExitStack()
        self._sync: GP | None = None
        self._stash: dict[str, deque[Any]] = defaultdict(deque)

    async def __aenter__(self) -> Ctx:
        return self

    async def __aexit__(self, exc_type: Any, *exc: object) -> None:
        if exc_type is None:
            await self._stack.aclose()
            return
        # The scenario failed or was cancelled: freeing its GPs needs rank 0,
        # which may be gone -- do not let the cleanup hide the failure.
        with contextlib.suppress(TimeoutError):
            async with asyncio.timeout(2.0):
                await self._stack.aclose()

    # -- naming and placement --------------------------------------------
    def owner(self, i: int) -> int:
        """The rank on which GP number ``i`` lives."""
        return i % self.size

    def name(self, *parts: Any) -> str:
        """A GP name unique to this scenario."""
        return ".".join((self.scenario, *map(str, parts)))

    async def process(self, *parts: Any, ptype: PType = PType.CPU) -> GP:
        """Register + bind the GP ``name(*parts)``; freed when the scenario ends."""
        return await self._stack.enter_async_context(self.node.process(self.name(*parts), ptype))

    async def lookup(self, name: str) -> int:
        return await self.node.lookup(name, timeout=self.timeout)

    def log(self, *args: Any) -> None:
        """Diagnostics, printed when AIOPDBP_SCENARIO_VERBOSE is set."""
        if VERBOSE:
            print(f"[{self.scenario} rank {self.rank}/{self.size}]", *args, flush=True)

    async def wait_until(self, cond: Callable[[], bool], what: str, timeout: float | None = None) -> None:
        """Poll ``cond`` (every ms) until true; AssertionError after ``timeout``."""
        deadline = time.monotonic() + (self.timeout if timeout is None else timeout)
        while not cond():
            if time.monotonic() > deadline:
                raise AssertionError(f"rank {self.rank}: timed out waiting for {what}")
            await asyncio.sleep(0.001)

    # -- collective helpers, built on GPs and messages -------------------
    async def _sync_gp(self) -> GP:
        if self._sync is None:
            self._sync = await self.process("_sync", self.rank)
        return self._sync

    async def _recv_tagged(self, gp: GP, tag: str) -> Any:
        q = self._stash[tag]
        while not q:
            msg = await gp.recv(timeout=self.timeout)
            assert isinstance(msg, Message), f"sync GP got {msg!r}"
            t, value = json.loads(bytes(msg.data))
            self._stash[t].append(value)
        return q.popleft()

    async def allgather(self, tag: str, value: Any) -> list[Any]:
        """Every host contributes a JSON-able ``value``; every host gets the
        list indexed by rank.  Also a barrier.  The first call registers one
        helper GP per host (a table update); later calls update no table."""
        value = json.loads(json.dumps(value))
        if self.size == 1:
            return [value]
        gp = await self._sync_gp()
        if self.rank != 0:
            await gp.send(self.name("_sync", 0), json.dumps([tag, [self.rank, value]]).encode(),
                          timeout=self.timeout)
            return list(await self._recv_tagged(gp, tag + "/result"))
        got = {0: value}
        while len(got) < self.size:
            r, v = await self._recv_tagged(gp, tag)
            assert r not in got, f"allgather {tag!r}: rank {r} contributed twice"
            got[r] = v
        result = [got[r] for r in range(self.size)]
        for r in range(1, self.size):
            await gp.send(self.name("_sync", r), json.dumps([tag + "/result", result]).encode(),
                          timeout=self.timeout)
        return result

    async def gather_to_root(self, tag: str, value: Any) -> list[Any] | None:
        """Like :meth:`allgather`, but only rank 0 gets the list."""
        result = await self.allgather(tag, value)
        return result if self.rank == 0 else None

    async def barrier(self, tag: str) -> None:
        await self.allgather(tag, None)


# ============================================================== runners
def dump_tasks(title: str) -> None:
    """Print every task's stack to stderr (diagnosing a hang)."""
    import sys

    print(f"===== {title}: {len(asyncio.all_tasks())} tasks", file=sys.stderr, flush=True)
    for task in asyncio.all_tasks():
        task.print_stack(limit=6, file=sys.stderr)
    sys.stderr.flush()


async def run_on_node(sc: Scenario | str, node: aiopdbp.Node,
                      on_failure: Callable[[BaseException], None] | None = None) -> None:
    """Run one scenario on one (started) node, bounded by its timeout;
    ``on_failure(exc)`` hears of the scenario's own error at once, before
    its GPs are freed (a peer failing in turn may cancel that cleanup)."""
    sc = SCENARIOS[sc] if isinstance(sc, str) else sc
    try:
        watchdog = None
        if VERBOSE:  # show where every task is just before the timeout hits
            async def dump_later() -> None:
                await asyncio.sleep(max(0.0, sc.timeout - 0.5))
                dump_tasks(f"rank {node.rank}: {sc.name} about to time out")
            watchdog = asyncio.create_task(dump_later())
        try:
            async with asyncio.timeout(sc.timeout) as deadline:
                async with Ctx(node, sc) as ctx:
                    if not all(importlib.util.find_spec(m) for m in sc.requires):
                        return  # (its pytest test is skipped)
                    try:
                        await sc.fn(ctx)
                    except Exception as exc:
                        if on_failure is not None:  # before the cleanup, which may be cancelled
                            on_failure(exc)
                        raise
        except TimeoutError as exc:
            if deadline.expired():
                raise TimeoutError(f"scenario {sc.name!r} did not finish within {sc.timeout:g} s") from exc
            raise
        finally:
            if watchdog is not None:
                watchdog.cancel()
    except BaseException as exc:
        if isinstance(exc, Exception):
            exc.add_note(f"scenario {sc.name!r} on rank {node.rank}/{node.size}")
        raise


#: hosts in one process that a scenario's timeout is sized for (run_inproc)
INPROC_HOSTS = 4


async def run_inproc(name: str | Scenario, n: int) -> None:
    """Run scenario ``name`` (or a :class:`Scenario` of another registry) on
    ``n`` in-process hosts, all concurrently.

    Like one MPI rank each, every host closes its own node as soon as its
    part of the scenario is done (a closing node waits for the others' BYE).
    The first host that fails cancels the others (TaskGroup); the failure is
    re-raised (an ExceptionGroup holding the host's exception).

    The scenarios' timeouts are sized for a host per process (at most
    :data:`INPROC_HOSTS` here); more hosts share this one process, so its
    timeouts grow with them -- they bound a hang, not the speed."""
    sc = SCENARIOS[name] if isinstance(name, str) else name
    if n > INPROC_HOSTS:
        sc = dataclasses.replace(sc, timeout=sc.timeout * n / INPROC_HOSTS)
    close_timeout = DEFAULT_NODE_OPTIONS["close_timeout"]

    async def host(node: aiopdbp.Node) -> None:
        try:
            await run_on_node(sc, node)
        except BaseException:
            # do not wait for a clean close handshake the others may never answer
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(1.0):
                    await node.aclose()
            raise
        await node.aclose()

    async with asyncio.timeout(sc.timeout + 2 * close_timeout + 5):
        async with open_cluster(n, **sc.node_options()) as nodes:
            async with asyncio.TaskGroup() as tg:
                for node in nodes:
                    tg.create_task(host(node), name=f"scenario-{sc.name}-rank{node.rank}")


# ============================================================== data helpers
def _seed(tag: str) -> int:
    return int.from_bytes(hashlib.blake2b(tag.encode(), digest_size=8).digest(), "little")


def rng_for(tag: str) -> np.random.Generator:
    return np.random.default_rng(_seed(tag))


def pattern(tag: str, n: int) -> bytes:
    """``n`` deterministic pseudo-random bytes named by ``tag``."""
    return rng_for(tag).integers(0, 256, n, dtype=np.uint8).tobytes()


def sha(data: Any) -> str:
    """sha256 of every byte of a buffer or array (C order), plus dtype/shape for arrays."""
    h = hashlib.sha256()
    if isinstance(data, np.ndarray):
        h.update(f"{data.dtype.str}{data.shape}".encode())
        data = np.ascontiguousarray(data).reshape(-1).view(np.uint8)
    h.update(memoryview(data).cast("B"))
    return h.hexdigest()


def assert_same(got: Any, exp: Any, what: str, *, exact_type: bool = True) -> None:
    """``got`` is what a receiver must see for the payload ``exp``: None,
    an ndarray of the same dtype/shape/content, or ``bytes`` (any bytes-like
    object with ``exact_type=False``) with the same content."""
    if exp is None:
        assert got is None, f"{what}: expected None, got {type(got).__name__}"
    elif isinstance(exp, np.ndarray):
        assert isinstance(got, np.ndarray), f"{what}: expected ndarray, got {type(got).__name__}"
        assert got.dtype == exp.dtype and got.dtype.str == exp.dtype.str, \
            f"{what}: dtype {got.dtype.str} != {exp.dtype.str}"
        assert got.shape == exp.shape, f"{what}: shape {got.shape} != {exp.shape}"
        assert np.array_equal(got, exp), f"{what}: array content differs"
    else:
        if exact_type:
            assert type(got) is bytes, f"{what}: bytes-like payload arrived as {type(got).__name__}"
        else:
            assert isinstance(got, (bytes, bytearray, memoryview)), f"{what}: got {type(got).__name__}"
            got = bytes(got)
        exp_b = bytes(exp)
        assert len(got) == len(exp_b), f"{what}: {len(got)} bytes instead of {len(exp_b)}"
        assert got == exp_b, f"{what}: content differs (sha {sha(got)[:12]} != {sha(exp_b)[:12]})"


def rank_of(name: str) -> int:
    return int(name.rsplit(".", 1)[1])


def header(src: int, seq: int) -> bytes:
    return f"{src}:{seq}:".encode()


def parse_header(data: bytes) -> tuple[int, int, bytes]:
    src, seq, rest = bytes(data).split(b":", 2)
    return int(src), int(seq), rest


async def receive_messages(gp: GP, n: int, timeout: float) -> list[Message]:
    out = []
    for _ in range(n):
        item = await gp.recv(timeout=timeout)
        assert isinstance(item, Message), f"{gp.name}: expected a message, got {item!r}"
        out.append(item)
    return out


def assert_empty(gp: GP) -> None:
    try:
        item = gp.recv_nowait()
    except WouldBlock:
        return
    raise AssertionError(f"{gp.name}: unexpected extra item {item!r}")


# ============================================================== scenarios
# ---------------------------------------------------------------- messages
def msg_payload(src: int, dst: str, seq: int) -> Any:
    """The seq-th message from rank ``src`` to ``dst``: every payload kind."""
    tag = f"{src}>{dst}#{seq}"
    rng = rng_for(tag)
    if seq == 13:
        return pattern(tag, 300_000)            # larger than a pool block: a frame of its own
    k = seq % 12
    if k == 0:
        return pattern(tag, int(rng.integers(1, 2000)))
    if k == 1:
        return bytearray(pattern(tag, 5000))     # mutable: snapshotted by send
    if k == 2:
        return memoryview(pattern(tag, 41_000))[7:-3]  # above RemoteConfig.large
    if k == 3:
        return rng.standard_normal((3, 5))
    if k == 4:
        return rng.integers(-2**15, 2**15, seq * 7, dtype=np.int16)
    if k == 5:
        return np.empty((0,), np.uint8)
    if k == 6:
        return rng.standard_normal((6, 8)).astype(np.float32)[::2, 1:]  # non-contiguous view
    if k == 7:
        return None
    if k == 8:
        return rng.integers(0, 1000, (4, 3)).astype(">i4")  # big-endian
    if k == 9:
        return rng.random(17) > 0.5
    if k == 10:
        return (rng.standard_normal(9) + 1j * rng.standard_normal(9)).astype(np.complex64)
    return b""


def _clobber(payload: Any) -> None:
    """Change a payload after ``send`` returned: the receiver must not see it."""
    if isinstance(payload, bytearray):
        payload[:] = b"\xff" * len(payload)
    elif isinstance(payload, np.ndarray) and payload.flags.writeable and payload.size:
        payload[...] = 0


@scenario()
async def messages_in_order(ctx: Ctx) -> None:
    """Every host's GP sends 40 messages of every payload kind to every GP
    (itself included): per-source order, exact content, dtype and shape.
    (The exact Python type of bytes payloads is message_payload_types' job.)"""
    n = 40
    me = await ctx.process("gp", ctx.rank)
    dests = [ctx.name("gp", r) for r in range(ctx.size)]

    async def produce() -> None:
        for d in dests:
            await ctx.lookup(d)
        for seq in range(n):
            for d in dests:
                payload = msg_payload(ctx.rank, d, seq)
                await me.send(d, payload, timeout=ctx.timeout)
                _clobber(payload)

    async def consume() -> None:
        nxt = dict.fromkeys(range(ctx.size), 0)
        for _ in range(n * ctx.size):
            msg = await me.recv(timeout=ctx.timeout)
            assert isinstance(msg, Message), msg
            assert msg.kind is Kind.SHORT and msg.com == 0, msg
            src = rank_of(msg.source)
            seq = nxt[src]
            assert seq < n, f"{me.name}: more than {n} messages from {msg.source}"
            assert_same(msg.data, msg_payload(src, me.name, seq), f"{msg.source}->{me.name} #{seq}",
                        exact_type=False)
            nxt[src] += 1
        assert all(v == n for v in nxt.values()), nxt

    async with asyncio.TaskGroup() as tg:
        tg.create_task(produce())
        tg.create_task(consume())
    await ctx.barrier("done")
    assert_empty(me)


@scenario()
async def first_messages_carried_keep_order(ctx: Ctx) -> None:
    """Every host's GP sends 30 messages to the next host's GP without looking
    it up first: the first travels with the lookup of its name (by way of the
    name's home, which passes it on), the others directly to the GP's host;
    they arrive in order, each once."""
    from aiopdbp.hosts.names import home_of

    n = 30
    # two barriers: the second makes the links to rank 0 (a first message goes
    # with its lookup), which announce the GPs there were -- not these
    await ctx.barrier("start")
    await ctx.barrier("links")
    me = await ctx.process("first", ctx.rank)
    await ctx.barrier("registered")
    dest = ctx.name("first", (ctx.rank + 1) % ctx.size)

    def carried() -> int:
        return sum(kinds.get("CarryMsg", 0) for kinds in ctx.node.stats().messages_sent.values())

    before = carried()

    async def produce() -> None:
        for seq in range(n):
            await me.send(dest, header(ctx.rank, seq), timeout=ctx.timeout)

    async def consume() -> None:
        src = (ctx.rank - 1) % ctx.size
        for seq in range(n):
            msg = await me.recv(timeout=ctx.timeout)
            assert isinstance(msg, Message), msg
            assert msg.source == ctx.name("first", src), msg
            assert parse_header(msg.data)[:2] == (src, seq), (msg.data, seq)

    async with asyncio.TaskGroup() as tg:
        tg.create_task(produce())
        tg.create_task(consume())
    # only the first message went with the lookup (none when its home is here),
    # and a home passed it on unless it is the GP's host
    size = ctx.size
    homes = [home_of(ctx.name("first", (r + 1) % size), size) for r in range(size)]
    mine = int(homes[ctx.rank] != ctx.rank)
    passed = sum(homes[r] == ctx.rank not in (r, (r + 1) % size) for r in range(size))
    assert carried() - before == (mine + passed if size > 1 else 0), (carried() - before, mine, passed)
    await ctx.barrier("done")
    assert_empty(me)


@scenario(remote=RemoteConfig(reclaim_after=0.005, gp_window=2048))
async def pool_rows_given_back_after_idle_keep_order_and_credit(ctx: Ctx) -> None:
    """Each host's GP sends 3 rounds of 60 x 256 B to the next host's, with
    2 KiB of credit (the sender waits for grants) and pool rows given back
    after 5 ms idle: between rounds this host's rows for those peers go, and
    each round, on rows made again, arrives whole and in order."""
    n, rounds = 60, 3
    me = await ctx.process("gp", ctx.rank)
    nxt, prv = (ctx.rank + 1) % ctx.size, (ctx.rank - 1) % ctx.size
    await ctx.lookup(ctx.name("gp", nxt))

    def idle() -> bool:
        pool: Any = ctx.node.stats().pool
        return nxt not in pool["send"]["hosts"] and prv not in pool["recv"]["hosts"]

    for rnd in range(rounds):
        async def produce() -> None:
            for seq in range(rnd * n, (rnd + 1) * n):
                await me.send(ctx.name("gp", nxt), header(ctx.rank, seq) + bytes(240), timeout=ctx.timeout)

        async def consume() -> None:
            for seq in range(rnd * n, (rnd + 1) * n):
                msg = await me.recv(timeout=ctx.timeout)
                assert isinstance(msg, Message), msg
                assert parse_header(bytes(msg.data))[:2] == (prv, seq), (msg.source, seq)

        async with asyncio.TaskGroup() as tg:
            tg.create_task(produce())
            tg.create_task(consume())
        if ctx.size > 1:
            await ctx.wait_until(idle, "idle rows given back")
    await ctx.barrier("done")


@scenario(pipe_capacity=16, remote=RemoteConfig(block_size=64 << 10, row_capacity=2, initial=1,
                                                gp_window=8 << 20))
async def message_payload_types(ctx: Ctx) -> None:
    """A bytes-like payload arrives as ``bytes`` (Message docs) and an array
    as an ndarray, whatever its size (below/above a pool block) and whether
    or not the receive pool had room (a burst to a GP that reads late)."""
    me = await ctx.process("gp", ctx.rank)
    dest = ctx.name("gp", (ctx.rank + 1) % ctx.size)
    prev = (ctx.rank - 1) % ctx.size
    sizes = [0, 1, 1000, 40_000, (64 << 10) - 200, 100_000, 1 << 20] + [3000] * 300

    def payload(src: int, i: int) -> Any:
        n = sizes[i]
        if i % 3 == 2:
            return rng_for(f"mpt{src}.{i}").integers(0, 9, max(1, n // 8), dtype=np.int64)
        return (bytearray, bytes, memoryview)[i % 3](pattern(f"mpt{src}.{i}", n))

    async def produce() -> None:
        await ctx.lookup(dest)
        for i in range(len(sizes)):
            await me.send(dest, payload(ctx.rank, i), timeout=ctx.timeout)
        await ctx.node.register(ctx.name("sent", ctx.rank))

    wrong = []

    async def consume() -> None:
        if ctx.size > 1:  # let the burst pile up at this host (the local pipe would stop it)
            await ctx.node.lookup(ctx.name("sent", prev), timeout=ctx.timeout)
        for i in range(len(sizes)):
            msg = await me.recv(timeout=ctx.timeout)
            assert isinstance(msg, Message), msg
            exp = payload(prev, i)
            assert_same(msg.data, exp, f"message {i}", exact_type=False)
            if type(msg.data) is not (np.ndarray if isinstance(exp, np.ndarray) else bytes):
                wrong.append(f"#{i} ({sizes[i]} B {type(exp).__name__}) as {type(msg.data).__name__}")

    async with asyncio.TaskGroup() as tg:
        tg.create_task(produce())
        tg.create_task(consume())
    ctx.log("fallback allocs", ctx.node.stats().fallback_allocs)
    assert not wrong, f"{len(wrong)} payloads arrived with the wrong type: {', '.join(wrong[:5])}"
    await ctx.barrier("done")


@scenario()
async def short_streams_of_signed_bytes_arrive(ctx: Ctx) -> None:
    """Short streams whose data is a signed-byte or char buffer
    (``array('b')``, a ``'c'`` memoryview), several in one loop iteration,
    arrive whole (the block's records are written as unsigned bytes)."""
    import array
    me = await ctx.process("gp", ctx.rank)
    dest = ctx.name("gp", (ctx.rank + 1) % ctx.size)
    await ctx.lookup(dest)
    datas = [array.array("b", bytes([ctx.rank + i]) * (100 + i)) for i in range(3)]
    datas += [memoryview(bytearray(bytes([ctx.rank + 7]) * 50)).cast("c")]
    # (sent concurrently: several short stream records in one loop iteration)
    sending = asyncio.gather(*(me.send_stream(dest, d, timeout=ctx.timeout) for d in datas))
    prev = (ctx.rank - 1) % ctx.size
    want = sorted([bytes([prev + i]) * (100 + i) for i in range(3)] + [bytes([prev + 7]) * 50])
    got = []
    for _ in range(4):
        item = await me.recv(timeout=ctx.timeout)
        assert isinstance(item, IncomingStream), item
        got.append(bytes(await item.read()))
    assert sorted(got) == want
    assert await sending == [100, 101, 102, 50]
    await ctx.barrier("done")
    assert_empty(me)


class _ArraySubclass(np.ndarray):  # e.g. np.memmap: an ndarray all the same
    pass


@scenario()
async def short_streams_of_an_ndarray_subclass_arrive_as_arrays(ctx: Ctx) -> None:
    """A short stream (carried whole by its OPEN) of an ndarray subclass, below
    and at or above ``RemoteConfig.large`` (where the sender takes a private
    copy), arrives as an array of the sender's dtype and shape, to a GP of
    this host or of another."""
    me = await ctx.process("gp", ctx.rank)
    dest = ctx.name("gp", (ctx.rank + 1) % ctx.size)
    await ctx.lookup(dest)
    rows = (256, 2500)  # 4 KiB and 40000 bytes of (rows, 4) int32
    for n in rows:
        await me.send_stream(dest, np.arange(n * 4, dtype=np.int32).reshape(n, 4).view(_ArraySubclass),
                             timeout=ctx.timeout)
    for n in rows:
        item = await me.recv(timeout=ctx.timeout)
        assert isinstance(item, IncomingStream), item
        got = await item.read()
        assert isinstance(got, np.ndarray), f"a stream of {n * 16} bytes of an ndarray subclass read as {got!r:.60}"
        assert (got.dtype, got.shape) == (np.dtype(np.int32), (n, 4)), (got.dtype, got.shape)
        assert (got.reshape(-1) == np.arange(n * 4)).all()
    await ctx.barrier("done")
    assert_empty(me)


@scenario(remote=RemoteConfig(gp_window=64 << 10))
async def refused_payloads_hold_no_credit(ctx: Ctx) -> None:
    """Arrays the wire cannot carry raw (a structured dtype, more than 32
    dimensions) are refused at the sender with the same error on one host
    and on many, to one GP and to several, and keep nothing reserved: a
    payload of a whole credit window sent after many refusals arrives."""
    me = await ctx.process("gp", ctx.rank)
    dest = ctx.name("gp", (ctx.rank + 1) % ctx.size)
    await ctx.lookup(dest)
    structured = np.zeros(4, dtype=[("a", "<i4"), ("b", "<f8")])
    deep = np.zeros((1,) * 33, np.uint8)
    for _ in range(200):
        try:
            await me.send(dest, structured, timeout=ctx.timeout)
            raise AssertionError("a structured array was sent without allow_pickle")
        except TypeError as exc:
            assert "allow_pickle" in str(exc), exc
        try:
            await me.send(dest, deep, timeout=ctx.timeout)
            raise AssertionError("an array of 33 dimensions was sent")
        except ValueError as exc:
            assert "dimensions" in str(exc), exc
        try:
            await me.send([dest], structured, timeout=ctx.timeout)
            raise AssertionError("a structured array was multicast without allow_pickle")
        except TypeError:
            pass
    whole = np.arange(64 << 10, dtype=np.uint8)  # its credit needs the whole window
    await me.send(dest, whole, timeout=ctx.timeout)
    msg = await me.recv(timeout=ctx.timeout)
    assert isinstance(msg, Message), msg
    assert_same(msg.data, whole, "the window-sized array")
    await ctx.barrier("done")
    assert_empty(me)


@scenario()
async def small_arrays_arrive_writable(ctx: Ctx) -> None:
    """Small arrays sent again and again (the compact short record once their
    dtype and shape were seen), alone and in bursts, in several dtypes and
    shapes: each arrives equal, with its dtype and shape, writable, and
    owning memory no other message shares."""
    me = await ctx.process("gp", ctx.rank)
    dest = ctx.name("gp", (ctx.rank + 1) % ctx.size)
    prev = (ctx.rank - 1) % ctx.size
    kinds = [np.arange(8, dtype=np.uint8), np.arange(6, dtype=">i4").reshape(2, 3),
             np.array([True, False, True]), np.array(2.5), np.zeros((0, 4), np.float32),
             np.arange(256, dtype=np.float64), np.arange(2048, dtype=np.float64)]  # 2 KiB, 16 KiB
    n = 24

    def item(src: int, i: int) -> Any:
        base = kinds[i % len(kinds)]
        if base.dtype == bool:
            return base ^ bool((src + i) % 2)
        return np.asarray(base + base.dtype.type(src + i))  # a 0-d array stays one

    await ctx.lookup(dest)
    for i in range(n):  # lone sends: each leaves in a frame of its own
        await me.send(dest, item(ctx.rank, i), timeout=ctx.timeout)
    for i in range(n, 2 * n):  # a burst: coalesced into a block
        me.send_nowait(dest, item(ctx.rank, i))
    got = []
    for i in range(2 * n):
        msg = await me.recv(timeout=ctx.timeout)
        assert isinstance(msg, Message), msg
        exp = item(prev, i)
        assert_same(msg.data, exp, f"array #{i}")
        assert msg.data.flags.writeable, f"array #{i} arrived read-only"
        got.append(msg.data)
    for a in got:  # each owns its memory: changing one changes no other
        if a.size:
            a[...] = 0
    for i, a in enumerate(got):
        if a.size and item(prev, i).any():
            assert not np.array_equal(a, item(prev, i)), f"array #{i}"
    for i in range(len(got)):
        for j in range(i + 1, len(got)):
            assert not np.shares_memory(got[i], got[j]), f"arrays #{i} and #{j} share memory"
    await ctx.barrier("done")
    assert_empty(me)


@scenario()
async def command_messages(ctx: Ctx) -> None:
    """Command messages (kind/com) and short messages with a command code,
    unicast and multicast, keep kind, com and data."""
    me = await ctx.process("gp", ctx.rank)
    nxt = ctx.name("gp", (ctx.rank + 1) % ctx.size)
    everyone = [ctx.name("gp", r) for r in range(ctx.size)]
    n = 30

    def item(src: int, i: int) -> tuple[Kind, int, Any]:
        kind = Kind.COMMAND if i % 3 else Kind.SHORT
        data: Any = None if i % 4 == 0 else (pattern(f"cmd{src}.{i}", i * 11) if i % 4 != 3
                                              else np.arange(i, dtype=np.int32))
        return kind, 1000 + 7 * i + src, data

    await ctx.lookup(nxt)
    for i in range(n):
        kind, com, data = item(ctx.rank, i)
        if kind is Kind.COMMAND and i % 2:
            await me.command(nxt, com, data, timeout=ctx.timeout)
        else:
            await me.send(nxt, data, com=com, kind=kind, timeout=ctx.timeout)
    for d in everyone:
        await ctx.lookup(d)
    await me.command(everyone, 424242 + ctx.rank, b"to-all", timeout=ctx.timeout)

    prev = (ctx.rank - 1) % ctx.size
    seen_mc: set[str] = set()
    i = 0
    for _ in range(n + ctx.size):
        msg = await me.recv(timeout=ctx.timeout)
        assert isinstance(msg, Message), msg
        if msg.com >= 424242:
            assert msg.kind is Kind.COMMAND and msg.data == b"to-all", msg
            assert msg.com == 424242 + rank_of(msg.source), msg
            assert msg.source not in seen_mc, f"multicast command from {msg.source} twice"
            seen_mc.add(msg.source)
            continue
        assert msg.source == ctx.name("gp", prev), msg
        kind, com, data = item(prev, i)
        assert (msg.kind, msg.com) == (kind, com), f"#{i}: got {msg.kind!r}/{msg.com}, want {kind!r}/{com}"
        assert_same(msg.data, data, f"command #{i}")
        i += 1
    assert i == n and seen_mc == set(everyone), (i, seen_mc)
    await ctx.barrier("done")
    assert_empty(me)


@scenario()
async def out_of_range_com(ctx: Ctx) -> None:
    """A command code outside the wire's u32 (-1, 2**32) is either refused by
    send() at once or delivered as given -- never silently lost."""
    me = await ctx.process("gp", ctx.rank)
    dest = ctx.name("gp", (ctx.rank + 1) % ctx.size)
    await ctx.lookup(dest)
    sent = []
    for com in (-1, 1 << 32, 7):
        try:
            await me.command(dest, com, b"c%d" % com, timeout=ctx.timeout)
        except (ValueError, OverflowError):
            assert com != 7
        else:
            sent.append(com)
    got = []
    for _ in range(len(sent)):
        try:
            msg = await me.recv(timeout=2.0)
        except TimeoutError:
            break
        assert isinstance(msg, Message), msg
        got.append(msg.com)
    assert got == sent, f"send() accepted command codes {sent}, the receiver got {got}"
    await ctx.barrier("done")


END_COM = 0xFFFF_FFFF


@scenario()
async def multicast_across_hosts(ctx: Ctx) -> None:
    """One CDU addressed to GPs on every host (two per host, names repeated)
    arrives exactly once at each GP, in order; a host link carries one CDU
    per multicast, not one per destination GP."""
    k = 25
    a = await ctx.process("a", ctx.rank)
    b = await ctx.process("b", ctx.rank)
    targets = [ctx.name(x, r) for r in range(ctx.size) for x in ("a", "b")]
    for t in targets:
        await ctx.lookup(t)
    before = {h: link.cdus for h, link in ctx.node.stats().links.items()}

    def payload(src: int, i: int) -> Any:
        return pattern(f"mc{src}.{i}", 10 + 997 * i) if i % 2 else \
            rng_for(f"mc{src}.{i}").standard_normal((i + 1, 3))

    async def send_all() -> None:
        dest = targets + targets[::3]          # duplicates: still once per GP
        for i in range(k):
            await a.send(dest, payload(ctx.rank, i), com=i, timeout=ctx.timeout)
        for t in targets:
            await a.send(t, b"END", com=END_COM, timeout=ctx.timeout)

    async def receive_all(gp: GP) -> None:
        nxt = dict.fromkeys(range(ctx.size), 0)
        ended: set[int] = set()
        while len(ended) < ctx.size:
            msg = await gp.recv(timeout=ctx.timeout)
            assert isinstance(msg, Message), msg
            src = rank_of(msg.source)
            assert src not in ended, f"{gp.name}: message from {msg.source} after its END"
            if msg.com == END_COM:
                assert msg.data == b"END"
                assert nxt[src] == k, f"{gp.name}: {nxt[src]} of {k} multicasts from {msg.source}"
                ended.add(src)
                continue
            assert msg.com == nxt[src], f"{gp.name}: multicast {msg.com} from {msg.source}, expected {nxt[src]}"
            assert_same(msg.data, payload(src, msg.com), f"multicast {msg.com} {msg.source}->{gp.name}")
            nxt[src] += 1

    async with asyncio.TaskGroup() as tg:
        tg.create_task(send_all())
        tg.create_task(receive_all(a))
        tg.create_task(receive_all(b))
    await ctx.barrier("done")
    assert_empty(a)
    assert_empty(b)
    for h, link in ctx.node.stats().links.items():
        sent = link.cdus - before.get(h, 0)
        # k multicasts + 2 ENDs, + at most 1 barrier message to/from rank 0
        assert k + 2 <= sent <= k + 3, f"rank {ctx.rank}: link to host {h} carried {sent} CDUs " \
                                       f"for {k} multicasts + 2 messages (multicast not one CDU per host?)"


# ---------------------------------------------------------------- streams
@scenario()
async def stream_bytes_reassembly(ctx: Ctx) -> None:
    """Multi-MiB byte streams with segment sizes that do not divide the data
    (split frames and coalesced records), read(), read(out=), async for,
    an empty stream; sha256 of every byte; com and source preserved."""
    me = await ctx.process("gp", ctx.rank)
    dest = ctx.name("gp", (ctx.rank + 1) % ctx.size)
    prev = (ctx.rank - 1) % ctx.size

    def streams(src: int) -> list[tuple[Any, int]]:
        t = f"sbr{src}"
        return [
            (pattern(t + "a", (3 << 20) + 123), (64 << 10) + 7),      # split zero-copy frames
            (bytearray(pattern(t + "b", 1 << 20)), 4099),             # coalesced small records
            (memoryview(pattern(t + "c", 512 << 10)), 100_000),       # read(out=)
            (b"", 1000),                                              # empty stream
            (pattern(t + "d", 77_777), 1 << 20),                      # one segment
        ]

    async def send() -> None:
        await ctx.lookup(dest)
        h = hashlib.sha256()
        for i, (data, seg) in enumerate(streams(ctx.rank)):
            n = await me.send_stream(dest, data, segment_size=seg, com=100 + i, timeout=ctx.timeout)
            assert n == len(data), f"send_stream returned {n} for {len(data)} bytes"
            h.update(data)
        await me.send(dest, h.hexdigest().encode(), timeout=ctx.timeout)

    async def receive() -> None:
        h = hashlib.sha256()
        for i, (exp, seg) in enumerate(streams(prev)):
            st = await me.recv(timeout=ctx.timeout)
            assert isinstance(st, IncomingStream), f"stream {i}: got {st!r}"
            assert st.source == ctx.name("gp", prev) and st.com == 100 + i, (st.source, st.com)
            if i == 1:
                parts = []
                async for part in st:
                    parts.append(bytes(part))
                assert all(len(p) == seg for p in parts[:-1]) and 0 < len(parts[-1]) <= seg, \
                    f"segment sizes {sorted(set(map(len, parts)))} for segment_size {seg}"
                got: Any = b"".join(parts)
            elif i == 2:
                buf = bytearray(len(exp) + 4096)
                view = await st.read(out=buf)
                assert memoryview(view).nbytes == len(exp), memoryview(view).nbytes
                assert np.shares_memory(np.frombuffer(view, np.uint8), np.frombuffer(buf, np.uint8)), \
                    "read(out=) did not return a view of out"
                assert bytes(buf[:len(exp)]) == bytes(exp)
                got = bytes(view)
            else:
                view = await st.read()
                got = bytes(view)
            assert st.finished
            assert len(got) == len(exp) and sha(got) == sha(exp), f"stream {i}: {len(got)} bytes, content differs"
            h.update(got)
        msg = await me.recv(timeout=ctx.timeout)
        assert isinstance(msg, Message) and msg.data == h.hexdigest().encode(), "sender's sha256 differs"

    async with asyncio.TaskGroup() as tg:
        tg.create_task(send())
        tg.create_task(receive())
    assert not (ctx.node.stats().streams_in or ctx.node.stats().streams_out)


def _arrays(src: int) -> list[tuple[np.ndarray, int]]:
    rng = rng_for(f"snd{src}")
    ro = rng.integers(0, 255, (300, 7), dtype=np.uint8)
    ro.flags.writeable = False
    return [
        (rng.standard_normal((500, 37, 3)).astype(np.float32), 10_000),   # 22 rows / segment
        (rng.integers(-2**40, 2**40, 200_000, dtype=np.int64), 64 << 10),
        (np.asfortranarray(rng.standard_normal((300, 40)) + 1j), 5000),  # non-contiguous source
        (rng.integers(0, 60000, (1000, 3)).astype(">u2"), 999),          # big-endian
        (np.zeros((0, 5)), 4096),                                          # empty
        (ro, 1000),                                                        # read-only: zero copy
        (np.array(3.25), 64),                                              # 0-d
    ]


@scenario()
async def large_stream_lands_in_place(ctx: Ctx) -> None:
    """A stream of known size in large segments is read back whole, right
    dtype, shape and bytes -- also when a large message to another GP just
    before it makes its OPEN wait behind that payload; over a transport with
    a bulk path (MPI) its segments land straight in the array ``read()``
    returns (``segments_landed``)."""
    me = await ctx.process("gp", ctx.rank)
    side = await ctx.process("side", ctx.rank)
    dest = ctx.name("gp", (ctx.rank + 1) % ctx.size)
    side_dest = ctx.name("side", (ctx.rank + 1) % ctx.size)
    prev = (ctx.rank - 1) % ctx.size

    def arrays(src: int) -> list[np.ndarray]:
        rng = rng_for(f"lsl{src}")
        return [rng.standard_normal((40, 1000)),                        # 320 KB in 64 KiB segments
                rng.integers(0, 255, 3 * (1 << 20) + 77, dtype=np.uint8)]  # 3 MiB + 77 B in 1 MiB

    await ctx.lookup(dest)
    await ctx.lookup(side_dest)
    before = ctx.node.stats().segments_landed

    async def produce() -> None:
        for a, seg in zip(arrays(ctx.rank), (64 << 10, 1 << 20)):
            await me.send(side_dest, np.ones(100_000), timeout=ctx.timeout)  # a large payload ahead
            await me.send_stream(dest, a, segment_size=seg, timeout=ctx.timeout)

    async def consume() -> None:
        for exp in arrays(prev):
            st = await me.recv(timeout=ctx.timeout)
            assert isinstance(st, IncomingStream), st
            got = await st.read()
            assert got.dtype == exp.dtype and got.shape == exp.shape and np.array_equal(got, exp)
            assert got.flags.writeable

    async def consume_side() -> None:
        for _ in range(2):
            msg = await side.recv(timeout=ctx.timeout)
            assert isinstance(msg, Message) and msg.data.shape == (100_000,)

    async with asyncio.TaskGroup() as tg:
        tg.create_task(produce())
        tg.create_task(consume())
        tg.create_task(consume_side())
    landed = ctx.node.stats().segments_landed - before
    if ctx.size > 1 and getattr(ctx.node.transport, "bulk_tags", 0):
        assert landed > 0, "no segment landed in place over a bulk transport"
    elif ctx.size == 1:
        assert landed == 0, landed
    await ctx.barrier("done")
    assert_empty(me)


@scenario()
async def stream_ndarray(ctx: Ctx) -> None:
    """Array streams keep dtype (incl. byte order) and shape; segments are
    whole rows along axis 0; read(), read(out=) and async for."""
    me = await ctx.process("gp", ctx.rank)
    dest = ctx.name("gp", (ctx.rank + 1) % ctx.size)
    prev = (ctx.rank - 1) % ctx.size

    async def send() -> None:
        await ctx.lookup(dest)
        for i, (arr, seg) in enumerate(_arrays(ctx.rank)):
            n = await me.send_stream(dest, arr, segment_size=seg, com=i, timeout=ctx.timeout)
            assert n == arr.nbytes, (i, n, arr.nbytes)

    async def receive() -> None:
        for i, (exp, seg) in enumerate(_arrays(prev)):
            st = await me.recv(timeout=ctx.timeout)
            assert isinstance(st, IncomingStream) and st.com == i, st
            what = f"array stream {i} {exp.dtype.str}{exp.shape}"
            if i == 0:
                rows = max(1, seg // (exp.nbytes // exp.shape[0]))
                pos = 0
                async for part in st:
                    assert isinstance(part, np.ndarray) and part.dtype == exp.dtype, (what, type(part))
                    assert part.shape[1:] == exp.shape[1:], f"{what}: segment shape {part.shape}"
                    assert part.shape[0] == min(rows, exp.shape[0] - pos), f"{what}: {part.shape[0]} rows at {pos}"
                    assert np.array_equal(part, exp[pos:pos + part.shape[0]]), f"{what}: rows at {pos} differ"
                    pos += part.shape[0]
                assert pos == exp.shape[0], f"{what}: {pos} rows"
                continue
            if i == 1:
                out = np.empty_like(exp)
                got = await st.read(out=out)
                assert np.shares_memory(got, out), f"{what}: read(out=) did not fill out"
            else:
                got = await st.read()
            assert_same(got, exp, what)

    async with asyncio.TaskGroup() as tg:
        tg.create_task(send())
        tg.create_task(receive())


@scenario()
async def stream_async_iterable(ctx: Ctx) -> None:
    """Streams whose chunks are produced over time (total unknown): an async
    generator of bytes, a generator of arrays, an empty generator; read()
    and async for; sha256 of every byte."""
    me = await ctx.process("gp", ctx.rank)
    dest = ctx.name("gp", (ctx.rank + 1) % ctx.size)
    prev = (ctx.rank - 1) % ctx.size

    def chunk_sizes(src: int) -> list[int]:
        return [int(x) for x in rng_for(f"sai{src}").integers(1, 50_000, 40)]

    async def byte_chunks(src: int) -> AsyncIterator[bytes]:
        for j, n in enumerate(chunk_sizes(src)):
            # the behaviour under test: chunks that come over time (pacing, not ordering)
            if j % 5 == 0:
                await asyncio.sleep(0.001)
            else:
                await asyncio.sleep(0)
            yield pattern(f"sai{src}.{j}", n)

    def array_chunks(src: int) -> Iterator[np.ndarray]:
        rng = rng_for(f"saia{src}")
        for j in range(12):
            yield rng.standard_normal((j * 37 % 100, 4))

    async def nothing() -> AsyncIterator[bytes]:
        empty: list[bytes] = []
        for chunk in empty:
            yield chunk

    def all_bytes(src: int) -> bytes:
        return b"".join(pattern(f"sai{src}.{j}", n) for j, n in enumerate(chunk_sizes(src)))

    async def send() -> None:
        await ctx.lookup(dest)
        total = sum(chunk_sizes(ctx.rank))
        for com in (0, 1):
            n = await me.send_stream(dest, byte_chunks(ctx.rank), segment_size=16 << 10, com=com,
                                     timeout=ctx.timeout)
            assert n == total, (n, total)
        n = await me.send_stream(dest, array_chunks(ctx.rank), segment_size=1000, com=2, timeout=ctx.timeout)
        assert n == sum(a.nbytes for a in array_chunks(ctx.rank))
        assert await me.send_stream(dest, nothing(), com=3, timeout=ctx.timeout) == 0
        await me.send(dest, sha(all_bytes(ctx.rank)).encode(), timeout=ctx.timeout)

    async def receive() -> None:
        exp = all_bytes(prev)
        st = await me.recv(timeout=ctx.timeout)
        assert isinstance(st, IncomingStream) and st.com == 0, st
        got = bytes(await st.read())
        assert len(got) == len(exp) and sha(got) == sha(exp), f"read(): {len(got)} bytes, content differs"
        st = await me.recv(timeout=ctx.timeout)
        assert isinstance(st, IncomingStream) and st.com == 1, st
        parts = [bytes(p) async for p in st]
        assert all(0 < len(p) <= 16 << 10 for p in parts), sorted(set(map(len, parts)))
        assert sha(b"".join(parts)) == sha(exp), "async for: content differs"
        st = await me.recv(timeout=ctx.timeout)
        assert isinstance(st, IncomingStream) and st.com == 2, st
        arr = await st.read()
        assert_same(arr, np.concatenate(list(array_chunks(prev))), "array chunks")
        st = await me.recv(timeout=ctx.timeout)
        assert isinstance(st, IncomingStream) and st.com == 3, st
        empty = await st.read()
        assert len(bytes(empty)) == 0, empty
        msg = await me.recv(timeout=ctx.timeout)
        assert isinstance(msg, Message) and msg.data == sha(exp).encode(), "sender's sha256 differs"

    async with asyncio.TaskGroup() as tg:
        tg.create_task(send())
        tg.create_task(receive())


# --------------------------------------------------------- traffic patterns
NPAT = 4  # GPs in the 1-to-N / N-to-1 / N-to-N patterns (spread over the hosts)


async def _send_checked(gp: GP, dest: str, tag: str, nbytes: int, seg: int, timeout: float) -> None:
    data = pattern(tag, nbytes)
    n = await gp.send_stream(dest, data, segment_size=seg, com=_seed(tag) & 0x7FFFFFFF, timeout=timeout)
    assert n == nbytes
    await gp.send(dest, json.dumps({"tag": tag, "sha": sha(data), "n": nbytes}).encode(), timeout=timeout)


async def _receive_checked(gp: GP, nstreams: int, tag_of: Callable[[str], str], sizes: Callable[[str], int],
                           timeout: float, messages: int = 0) -> dict[str, list[bytes]]:
    """Receive ``nstreams`` streams (each read concurrently) and their sha
    messages, plus ``messages`` other messages; check every byte."""
    got: dict[str, str] = {}
    claimed: dict[str, dict[str, Any]] = {}
    other: dict[str, list[bytes]] = defaultdict(list)

    async def read(st: IncomingStream) -> None:
        data = bytes(await st.read())
        tag = tag_of(st.source)
        assert st.com == _seed(tag) & 0x7FFFFFFF, f"{gp.name}: stream from {st.source} has com {st.com}"
        assert len(data) == sizes(st.source), f"{gp.name}: {len(data)} bytes from {st.source}"
        assert sha(data) == sha(pattern(tag, len(data))), f"{gp.name}: stream from {st.source} corrupted"
        assert st.source not in got, f"{gp.name}: second stream from {st.source}"
        got[st.source] = sha(data)

    async with asyncio.TaskGroup() as tg:
        nmsg = nst = 0
        while nst < nstreams or nmsg < nstreams + messages:
            item = await gp.recv(timeout=timeout)
            if isinstance(item, IncomingStream):
                nst += 1
                assert nst <= nstreams, f"{gp.name}: unexpected stream from {item.source}"
                tg.create_task(read(item))
                continue
            nmsg += 1
            if item.data[:1] == b"{":
                claimed[item.source] = json.loads(bytes(item.data))
            else:
                other[item.source].append(bytes(item.data))
    assert len(got) == nstreams and set(claimed) == set(got), (sorted(got), sorted(claimed))
    for src, c in claimed.items():
        assert c["sha"] == got[src] and c["tag"] == tag_of(src), f"{gp.name}: sha mismatch for {src}"
    return other


@scenario()
async def one_to_n(ctx: Ctx) -> None:
    """One GP streams to NPAT GPs spread over the hosts, concurrently;
    every byte checked with sha256."""
    size = 768 << 10
    if ctx.rank == 0:
        src = await ctx.process("src")
    mine = [i for i in range(NPAT) if ctx.owner(i) == ctx.rank]
    dsts = {i: await ctx.process("dst", i) for i in mine}

    async with asyncio.TaskGroup() as tg:
        if ctx.rank == 0:
            async def send(i: int) -> None:
                d = ctx.name("dst", i)
                await ctx.lookup(d)
                await _send_checked(src, d, f"1n.{i}", size + i, 32 << 10 if i % 2 else 8 << 10, ctx.timeout)
            for i in range(NPAT):
                tg.create_task(send(i))
        for i, gp in dsts.items():
            tg.create_task(_receive_checked(gp, 1, functools.partial(lambda i, s: f"1n.{i}", i),
                                            functools.partial(lambda i, s: size + i, i), ctx.timeout))


@scenario()
async def split_segments_outlive_their_pool_block(ctx: Ctx) -> None:
    """Stream segments big enough to travel as split frames (header and
    payload as two transport messages) are read only after the receive
    pool's blocks were reused by other traffic from the same host: every
    byte is still the sender's (the payload half may land in a pool block,
    as the transport allocates it before the header half is delivered)."""
    owner = ctx.size - 1
    seg = 32 << 10
    nbytes = 6 * seg
    nside = 3000
    if ctx.rank == owner:
        dst = await ctx.process("dst")
        side = await ctx.process("side")
    if ctx.rank == 0:
        src = await ctx.process("src")
    await ctx.barrier("registered")

    async def send_side() -> None:
        for i in range(nside):  # ~3 MB coalesced: cycles every block of the pool row
            await src.send(ctx.name("side"), pattern(f"side{i}", 1000), timeout=ctx.timeout)

    async def receive() -> None:
        for i in range(nside):
            msg = await side.recv(timeout=ctx.timeout)
            assert isinstance(msg, Message) and msg.data == pattern(f"side{i}", 1000), f"side message {i}"
        st = await dst.recv(timeout=ctx.timeout)
        assert isinstance(st, IncomingStream), st
        data = bytes(await st.read())
        assert len(data) == nbytes and sha(data) == sha(pattern("split", nbytes)), "stream corrupted"

    async with asyncio.TaskGroup() as tg:
        if ctx.rank == 0:
            tg.create_task(src.send_stream(ctx.name("dst"), pattern("split", nbytes), segment_size=seg,
                                           timeout=ctx.timeout))
            tg.create_task(send_side())
        if ctx.rank == owner:
            tg.create_task(receive())


@scenario()
async def n_to_one(ctx: Ctx) -> None:
    """NPAT GPs spread over the hosts stream to one GP at the same time;
    the receiver reads all streams concurrently; sha256 of every byte."""
    size = 640 << 10
    dst_name = ctx.name("dst")
    mine = [i for i in range(NPAT) if ctx.owner(i) == ctx.rank]
    srcs = {i: await ctx.process("src", i) for i in mine}
    dst = await ctx.process("dst") if ctx.owner(1) == ctx.rank else None

    async with asyncio.TaskGroup() as tg:
        for i, gp in srcs.items():
            async def send(i: int = i, gp: GP = gp) -> None:
                await ctx.lookup(dst_name)
                await _send_checked(gp, dst_name, f"n1.{i}", size + 3 * i, 16 << 10, ctx.timeout)
            tg.create_task(send())
        if dst is not None:
            tg.create_task(_receive_checked(dst, NPAT, lambda s: f"n1.{rank_of(s)}",
                                            lambda s: size + 3 * rank_of(s), ctx.timeout))


@scenario(timeout=45.0)
async def n_to_n(ctx: Ctx) -> None:
    """NPAT*(NPAT-1) concurrent streams between GPs on all hosts, plus
    interleaved short messages; sha256 of every byte, per-source order."""
    size = 256 << 10
    nmsg = 20
    mine = [i for i in range(NPAT) if ctx.owner(i) == ctx.rank]
    gps = {i: await ctx.process("gp", i) for i in mine}

    async with asyncio.TaskGroup() as tg:
        for i, gp in gps.items():
            for j in range(NPAT):
                if j == i:
                    continue

                async def stream(i: int = i, j: int = j, gp: GP = gp) -> None:
                    d = ctx.name("gp", j)
                    await ctx.lookup(d)
                    await _send_checked(gp, d, f"nn.{i}.{j}", size + 101 * i + j, 24 << 10, ctx.timeout)
                tg.create_task(stream())

            async def chatter(i: int = i, gp: GP = gp) -> None:
                names = [ctx.name("gp", j) for j in range(NPAT) if j != i]
                for d in names:
                    await ctx.lookup(d)
                for s in range(nmsg):
                    for d in names:
                        await gp.send(d, header(i, s) + pattern(f"nnm.{i}.{d}.{s}", 50 * s), timeout=ctx.timeout)
                        await asyncio.sleep(0)
            tg.create_task(chatter())

            async def receive(i: int = i, gp: GP = gp) -> None:
                other = await _receive_checked(
                    gp, NPAT - 1, lambda s: f"nn.{rank_of(s)}.{i}",
                    lambda s: size + 101 * rank_of(s) + i, ctx.timeout, messages=nmsg * (NPAT - 1))
                assert len(other) == NPAT - 1, sorted(other)
                for src, msgs in other.items():
                    assert len(msgs) == nmsg, (src, len(msgs))
                    for s, data in enumerate(msgs):
                        r, seq, body = parse_header(data)
                        assert (r, seq) == (rank_of(src), s), f"{gp.name}: message {seq} from {src} at {s}"
                        assert body == pattern(f"nnm.{r}.{gp.name}.{s}", 50 * s), f"message {s} from {src}"
            tg.create_task(receive())


# ---------------------------------------------------------- flow control
STALL_MSG = 2048
STALL_PIPE = 8
STALL_CFG = RemoteConfig(block_size=16 << 10, row_capacity=4, initial=2, gp_window=64 << 10,
                         max_inflight=4)
#: messages a remote producer may have outstanding towards one GP: its credit
#: window over what one message costs (the payload + CREDIT_OVERHEAD)
STALL_REMOTE_BOUND = STALL_CFG.gp_window // (STALL_MSG + aiopdbp.wire.message.CREDIT_OVERHEAD) + 1


@scenario(pipe_capacity=STALL_PIPE, stream_window=4, remote=STALL_CFG)
async def stalled_consumer(ctx: Ctx) -> None:
    """A consumer that does not receive stops its producer within a bounded
    number of messages (send(timeout=) raises TimeoutError saying what it
    waited for); what the consumer host holds for it stays within the
    per-destination credit window; then the consumer drains and gets every
    message exactly once, in order."""
    prod_rank, cons_rank = ctx.owner(0), ctx.owner(1)
    cons_name, blocked_name = ctx.name("cons"), ctx.name("blocked")
    extra = 150
    remote = prod_rank != cons_rank
    stop = asyncio.Event()
    peak = {"queued": 0, "min_credit": 1 << 60}
    cons_gp: list[GP] = []

    async def monitor() -> None:
        # Sample, through public state, the memory held for this traffic:
        # messages queued for the consumer, credit left on the producer host.
        while not stop.is_set():
            if cons_gp and cons_gp[0].pipe is not None:
                peak["queued"] = max(peak["queued"], len(cons_gp[0].pipe))
            link = ctx.node.stats().links.get(cons_rank)
            if link is not None:
                peak["min_credit"] = min(peak["min_credit"], link.credit_min)
            await asyncio.sleep(0.0005)

    def payload(seq: int) -> bytes:
        return header(0, seq) + pattern(f"st{seq}", STALL_MSG - 16)

    async def produce() -> None:
        prod = await ctx.process("prod")
        await ctx.lookup(cons_name)
        await prod.send(cons_name, payload(0), timeout=ctx.timeout)  # waits for the binding
        sent = 1
        limit = 2000
        while True:
            try:
                await prod.send(cons_name, payload(sent), timeout=0.25)
            except TimeoutError as exc:
                # the error says what it waited for, not just "timed out"
                what = "waiting for credit from host" if remote else "waiting for room in its pipe"
                assert what in str(exc) and repr(cons_name) in str(exc), exc
                break
            sent += 1
            assert sent < limit, f"producer never blocked ({sent} messages queued for a stalled consumer)"
        blocked_at = sent
        ctx.log(f"producer blocked after {blocked_at} messages")
        # Tell the consumer over the control channel (a table update), which
        # a full data path cannot hold up.
        await ctx.node.register(blocked_name)
        if not remote:
            assert blocked_at == STALL_PIPE, f"local producer blocked after {blocked_at}, pipe holds {STALL_PIPE}"
        else:
            assert 2 <= blocked_at <= STALL_REMOTE_BOUND, \
                f"producer blocked after {blocked_at} messages; bound {STALL_REMOTE_BOUND}"
        for seq in range(blocked_at, blocked_at + extra):
            await prod.send(cons_name, payload(seq), timeout=ctx.timeout)
        await prod.send(cons_name, b"END", com=1, timeout=ctx.timeout)

    async def consume() -> None:
        cons = await ctx.process("cons")
        cons_gp.append(cons)
        await ctx.node.lookup(blocked_name, timeout=ctx.timeout)
        seq = 0
        while True:
            msg = await cons.recv(timeout=ctx.timeout)
            assert isinstance(msg, Message), msg
            if msg.com == 1:
                break
            assert msg.data == payload(seq), f"message {seq}: got {parse_header(msg.data)[:2]}"
            seq += 1
        assert seq >= 2 + extra, f"consumer got only {seq} messages"
        assert_empty(cons)

    mon = asyncio.create_task(monitor())
    try:
        async with asyncio.TaskGroup() as tg:
            if ctx.rank == prod_rank:
                tg.create_task(produce())
            if ctx.rank == cons_rank:
                tg.create_task(consume())
    finally:
        stop.set()
        await mon
    ctx.log("peaks", peak)
    if remote:
        if ctx.rank == cons_rank:
            assert 0 < peak["queued"] <= STALL_REMOTE_BOUND, \
                f"the consumer host held {peak['queued']} messages for it; credit allows {STALL_REMOTE_BOUND}"
        if ctx.rank == prod_rank:
            assert peak["min_credit"] >= 0, f"producer overdrew its credit: {peak['min_credit']}"
    await ctx.barrier("done")


# --------------------------------------------------------------- tables
@scenario()
async def table_consistency(ctx: Ctx) -> None:
    """Every host registers (and frees some) GPs concurrently and races for one
    name; exactly one racer wins, and every host then sees the same GPs under
    the same names and pids (each learnt from the name's home host), the same
    bound pipes, and the freed names fail at once everywhere."""
    await ctx.barrier("start")
    k = 6
    gps = []
    for j in range(k):
        gp = await ctx.node.register(ctx.name("t", ctx.rank, j), PType.COMM if j % 3 == 0 else PType.CPU)
        if j % 2 == 0:
            await gp.apply_pipe()
        gps.append(gp)
    for j, gp in enumerate(gps):
        if j % 3 == 1:
            await gp.free()
    won = 0
    try:
        dup = await ctx.node.register(ctx.name("dup"))
        won = 1
    except DuplicateProcessError:
        dup = None
    wins = await ctx.allgather("done", won)
    assert sum(wins) == 1, f"{sum(wins)} hosts registered the same name"
    live = sorted(ctx.name("t", r, j) for r in range(ctx.size) for j in range(k) if j % 3 != 1)
    live.append(ctx.name("dup"))
    view = []
    for name in live:
        entry = ctx.node.tables.process(await ctx.node.lookup(name, timeout=ctx.timeout))
        view.append([entry.pid, entry.name, int(entry.ptype), entry.node, entry.pipe is not None])
    assert [v[1] for v in view] == live, view
    views = await ctx.allgather("view", view)
    for r, other in enumerate(views):
        assert other == view, f"rank {r} sees {other}, rank {ctx.rank} sees {view}"
    for r in range(ctx.size):
        for j in range(1, k, 3):
            try:
                await ctx.node.lookup(ctx.name("t", r, j), timeout=ctx.timeout)
            except UnknownProcessError as exc:
                assert exc.waited is None, f"waited {exc.waited} s for a freed name"
            else:
                raise AssertionError(f"freed {ctx.name('t', r, j)!r} was found")
    await ctx.barrier("checked")  # nobody frees before everyone compared
    for gp in gps:
        await gp.free()
    if dup is not None:
        await dup.free()


# ---------------------------------------------------------------- errors
@scenario(name_timeout=0.3)
async def unknown_name_error(ctx: Ctx) -> None:
    """The name rule: a name registered nowhere is waited for (the node's
    name_timeout, or timeout=), then raises UnknownProcessError saying how long
    it waited -- on every host, for every API; a failed multicast delivers
    nothing; a freed name fails at once."""
    me = await ctx.process("gp", ctx.rank)
    ghost = ctx.name("ghost")
    peer = ctx.name("gp", (ctx.rank + 1) % ctx.size)
    await ctx.lookup(peer)
    for waited, calls in (
            (0.3, (lambda: ctx.node.lookup(ghost), lambda: me.send(ghost, b"x"),
                   lambda: me.command(ghost, 3), lambda: me.send([peer, ghost], b"mc"),
                   lambda: me.send_stream(ghost, b"stream"))),
            (0.05, (lambda: ctx.node.lookup(ghost, timeout=0.05),
                    lambda: me.send(ghost, b"x", timeout=0.05),
                    lambda: me.send_stream(ghost, b"stream", timeout=0.05)))):
        for call in calls:
            try:
                await call()
            except UnknownProcessError as exc:
                assert exc.waited == waited and f"within {waited:g} s" in str(exc), exc
            else:
                raise AssertionError(f"no UnknownProcessError for {ghost!r}")
    try:
        me.send_nowait(ghost, b"x")
    except UnknownProcessError:
        pass
    else:
        raise AssertionError("send_nowait to an unknown name did not raise")
    # a freed name is unknown everywhere once the update has reached the host
    gone = await ctx.node.register(ctx.name("gone", ctx.rank))
    await gone.free()
    await me.send(peer, b"marker", timeout=ctx.timeout)
    msg = await me.recv(timeout=ctx.timeout)
    assert isinstance(msg, Message) and msg.data == b"marker", f"first message is {msg!r} (failed multicast leaked?)"
    await ctx.barrier("freed")
    names = [ctx.name("gone", r) for r in range(ctx.size)]
    await ctx.wait_until(lambda: not any(n in ctx.node.tables.by_name for n in names), "frees to arrive")
    for n in names:
        try:
            await me.send(n, b"late")
        except UnknownProcessError as exc:
            assert exc.waited is None, f"waited {exc.waited} s for a freed name"
        else:
            raise AssertionError(f"send to freed {n!r} did not raise")
    await ctx.barrier("done")
    assert_empty(me)


class _Boom(Exception):
    pass


@scenario(timeout=8.0)
async def sender_cancel_midstream(ctx: Ctx) -> None:
    """A stream whose sender is cancelled (or whose source raises) midway ends
    with StreamError at the receiver; the sender's later messages and other
    GPs' messages still arrive, in order; no stream state is left behind."""
    snd_r, rcv_r, oth_r = ctx.owner(0), ctx.owner(1), ctx.owner(2)
    rcv_name, snd_name, oth_name = ctx.name("rcv"), ctx.name("snd"), ctx.name("oth")
    nother = 60

    async def sender() -> None:
        snd = await ctx.process("snd")
        await ctx.lookup(rcv_name)
        produced = asyncio.Event()

        async def endless() -> AsyncIterator[bytes]:
            for j in range(10**9):
                if j == 6:
                    produced.set()
                yield pattern(f"scm{j}", 16 << 10)
                await asyncio.sleep(0.002)   # a slow source: still streaming when cancelled

        task = asyncio.create_task(snd.send_stream(rcv_name, endless(), segment_size=8192))
        async with asyncio.timeout(ctx.timeout):
            await produced.wait()
        task.cancel()
        try:
            await task
        except asyncio.CancelledError:
            pass
        else:
            raise AssertionError("cancelled send_stream returned")
        await snd.send(rcv_name, b"after-cancel", timeout=ctx.timeout)

        async def failing() -> AsyncIterator[bytes]:
            for j in range(4):
                yield pattern(f"scf{j}", 20_000)
            raise _Boom("boom-in-source")

        try:
            await snd.send_stream(rcv_name, failing(), segment_size=7000, timeout=ctx.timeout)
        except _Boom:
            pass
        else:
            raise AssertionError("send_stream of a failing source did not raise")
        await snd.send(rcv_name, b"after-fail", timeout=ctx.timeout)
        # a later stream between the same GPs works
        await snd.send_stream(rcv_name, pattern("scm-ok", 200_000), segment_size=30_000, timeout=ctx.timeout)
        assert not ctx.node.stats().streams_out, ctx.node.stats()

    async def other() -> None:
        oth = await ctx.process("oth")
        await ctx.lookup(rcv_name)
        for s in range(nother):
            await oth.send(rcv_name, header(9, s), timeout=ctx.timeout)
            await asyncio.sleep(0.001)   # pacing: spread over the streams' lifetime

    async def receiver() -> None:
        rcv = await ctx.process("rcv")
        errors: list[str] = []
        from_snd: list[bytes] = []
        oth_seq = 0
        good = False
        while not (good and oth_seq == nother):
            item = await rcv.recv(timeout=ctx.timeout)
            if isinstance(item, IncomingStream):
                assert item.source == snd_name, item
                if len(errors) < 2:
                    try:
                        await item.read()
                    except StreamError as exc:
                        errors.append(str(exc))
                    else:
                        raise AssertionError(f"stream {len(errors)} of the failing sender completed")
                else:
                    assert bytes(await item.read()) == pattern("scm-ok", 200_000)
                    good = True
                continue
            if item.source == snd_name:
                from_snd.append(item.data)
            else:
                assert item.source == oth_name and item.data == header(9, oth_seq), (item.source, item.data)
                oth_seq += 1
        assert from_snd == [b"after-cancel", b"after-fail"], from_snd
        assert "boom-in-source" in errors[1], errors
        assert not ctx.node.stats().streams_in, ctx.node.stats()
        assert_empty(rcv)

    await on_ranks(ctx, (snd_r, sender), (rcv_r, receiver), (oth_r, other))
    await ctx.barrier("done")
    assert not (ctx.node.stats().streams_in or ctx.node.stats().streams_out)


@scenario()
async def receiver_abandons_stream(ctx: Ctx) -> None:
    """A receiver that aclose()s a stream midway makes the sender's
    send_stream raise BrokenResourceError; later reads raise StreamError;
    later messages and streams between the same GPs work."""
    snd_r, rcv_r = ctx.owner(0), ctx.owner(1)
    rcv_name = ctx.name("rcv")
    big = pattern("ras", 4 << 20)

    async def sender() -> None:
        snd = await ctx.process("snd")
        await ctx.lookup(rcv_name)
        try:
            await snd.send_stream(rcv_name, big, segment_size=16 << 10, timeout=ctx.timeout)
        except BrokenResourceError:
            pass
        else:
            raise AssertionError("send_stream to a receiver that abandoned the stream completed")
        await snd.send(rcv_name, b"after", timeout=ctx.timeout)
        assert await snd.send_stream(rcv_name, big[:300_000], segment_size=50_000, timeout=ctx.timeout) == 300_000
        assert not ctx.node.stats().streams_out

    async def receiver() -> None:
        rcv = await ctx.process("rcv")
        st = await rcv.recv(timeout=ctx.timeout)
        assert isinstance(st, IncomingStream), st
        seen = 0
        async for part in st:
            assert bytes(part) == big[seen:seen + len(part)]
            seen += len(part)
            if seen >= 3 * (16 << 10):
                break
        await st.aclose()
        try:
            await st.read()
        except StreamError:
            pass
        else:
            raise AssertionError("read() after aclose() did not raise StreamError")
        msg = await rcv.recv(timeout=ctx.timeout)
        assert isinstance(msg, Message) and msg.data == b"after", msg
        st2 = await rcv.recv(timeout=ctx.timeout)
        assert isinstance(st2, IncomingStream), st2
        assert bytes(await st2.read()) == big[:300_000]
        assert not ctx.node.stats().streams_in
        assert_empty(rcv)

    await on_ranks(ctx, (snd_r, sender), (rcv_r, receiver))
    await ctx.barrier("done")
    assert not (ctx.node.stats().streams_in or ctx.node.stats().streams_out)


@scenario()
async def short_streams_carried_whole(ctx: Ctx) -> None:
    """Streams whose OPEN carries them whole (one segment of at most 64 KiB)
    return once sent, as a message's send does: before anyone reads them, the
    sender's buffer free to reuse at once (below and above ``large``), and no
    DONE comes back; they keep their kind, dtype and shape; one its receiver
    aclose()s unread is dropped there (later reads raise StreamError);
    nothing stays bound on either side."""
    snd_r, rcv_r = ctx.owner(0), ctx.owner(1)
    rcv_name = ctx.name("rcv")
    arr = np.arange(24, dtype=">i4").reshape(4, 6)  # a big-endian dtype must stay exactly that
    blob = pattern("scw", 64 << 10)
    dones = ("StreamDoneMsg", "StreamDonesMsg")

    def dones_sent() -> int:
        return sum(n for kind, n in ctx.node.stats().messages_sent.get(snd_r, {}).items() if kind in dones)

    async def sender() -> None:
        snd = await ctx.process("snd")
        await ctx.lookup(rcv_name)
        small, big = bytearray(blob[:4096]), bytearray(blob)
        assert await snd.send_stream(rcv_name, small, timeout=ctx.timeout) == 4096
        assert await snd.send_stream(rcv_name, big, timeout=ctx.timeout) == len(blob)
        small[:] = bytes(len(small))   # free to reuse once send_stream returned
        big[:] = bytes(len(big))
        assert await snd.send_stream(rcv_name, arr, timeout=ctx.timeout) == arr.nbytes
        # nobody has read anything yet: this message goes behind three streams
        await snd.send(rcv_name, b"all sent", timeout=ctx.timeout)
        assert not ctx.node.stats().streams_out

    async def receiver() -> None:
        rcv = await ctx.process("rcv")
        before = dones_sent()
        await ctx.wait_until(lambda: len(rcv.pipe) == 4, "three streams and a message, unread")
        st = await rcv.recv(timeout=ctx.timeout)
        assert isinstance(st, IncomingStream) and st.finished, st
        await st.aclose()
        try:
            await st.read()
        except StreamError:
            pass
        else:
            raise AssertionError("read() of a short stream after aclose() did not raise StreamError")
        st = await rcv.recv(timeout=ctx.timeout)
        assert isinstance(st, IncomingStream), st
        assert bytes(await st.read()) == blob
        st = await rcv.recv(timeout=ctx.timeout)
        assert isinstance(st, IncomingStream), st
        got = await st.read()
        assert (got.dtype, got.shape) == (arr.dtype, arr.shape) and (got == arr).all(), got
        msg = await rcv.recv(timeout=ctx.timeout)
        assert isinstance(msg, Message) and msg.data == b"all sent", msg
        assert dones_sent() == before, "a DONE went back for a stream sent whole"
        assert not ctx.node.stats().streams_in
        assert_empty(rcv)

    await on_ranks(ctx, (snd_r, sender), (rcv_r, receiver))
    await ctx.barrier("done")
    assert not (ctx.node.stats().streams_in or ctx.node.stats().streams_out)


@scenario()
async def short_stream_sender_cancelled_before_it_left(ctx: Ctx) -> None:
    """A short stream whose sender is cancelled while it waits for the
    receiving GP's credit (its window full of unread messages) raises
    CancelledError and sends nothing: the receiver finds the messages and no
    stream; nothing stays bound; later streams work."""
    snd_r, rcv_r = ctx.owner(0), ctx.owner(1)
    rcv_name, gate_name = ctx.name("rcv"), ctx.name("gate")
    blob = pattern("sscb", 4096)

    async def sender() -> None:
        snd = await ctx.process("snd")
        await ctx.lookup(rcv_name)
        await ctx.lookup(gate_name)
        sent = 0
        while True:   # fill the receiving GP's window
            try:
                snd.send_nowait(rcv_name, blob)
            except WouldBlock:
                break
            sent += 1
        task = asyncio.create_task(snd.send_stream(rcv_name, blob, timeout=ctx.timeout))
        await ctx.wait_until(lambda: ctx.node.stats().stall["waiting"] > 0, "the stream to wait for credit")
        task.cancel()
        try:
            await task
        except asyncio.CancelledError:
            pass
        else:
            raise AssertionError("cancelled send_stream returned")
        assert not ctx.node.stats().streams_out
        await snd.send(gate_name, b"read now", timeout=ctx.timeout)
        await snd.send(rcv_name, sent.to_bytes(4, "little"), timeout=ctx.timeout)
        assert await snd.send_stream(rcv_name, blob[:100], timeout=ctx.timeout) == 100

    async def receiver() -> None:
        rcv = await ctx.process("rcv")
        gate = await ctx.process("gate")
        await gate.recv(timeout=ctx.timeout)   # nothing is read before the sender gave up
        n = 0
        while True:
            msg = await rcv.recv(timeout=ctx.timeout)
            assert isinstance(msg, Message), f"the cancelled stream arrived: {msg!r}"
            if len(msg.data) == 4:
                assert int.from_bytes(msg.data, "little") == n
                break
            assert msg.data == blob
            n += 1
        st = await rcv.recv(timeout=ctx.timeout)
        assert isinstance(st, IncomingStream), st
        assert bytes(await st.read()) == blob[:100]
        assert not ctx.node.stats().streams_in
        assert_empty(rcv)

    await on_ranks(ctx, (snd_r, sender), (rcv_r, receiver))
    await ctx.barrier("done")
    assert not (ctx.node.stats().streams_in or ctx.node.stats().streams_out)


@scenario()
async def short_stream_sender_cancelled_while_its_open_queues_sends_nothing(ctx: Ctx) -> None:
    """A short stream whose OPEN queues behind another stream's segments
    (the PipeManager has not routed it yet) and whose sender is cancelled
    then is not sent: the receiver gets the other stream and the message sent
    next, not the cancelled stream nor the bytes its buffer held after the
    cancel; its credit came back (a later short stream goes)."""
    snd_r, rcv_r = ctx.owner(0), ctx.owner(1)
    rcv_name = ctx.name("rcv")
    blob = pattern("sscq", 4096)

    async def sender() -> None:
        snd = await ctx.process("snd")
        bulk = await ctx.process("bulk")
        await ctx.lookup(rcv_name)
        buf = bytearray(b"A" * 100)
        # 64 segments: their sender puts a window of them in its stream pipe at once
        long = asyncio.create_task(bulk.send_stream(rcv_name, blob, segment_size=64, timeout=ctx.timeout))
        short = asyncio.create_task(snd.send_stream(rcv_name, buf, timeout=ctx.timeout))
        await asyncio.sleep(0)  # both ran up to their first wait
        if short.done():
            # on one host a segment goes straight to its reader when nothing
            # is queued ahead of it: the OPEN had nothing to queue behind
            assert snd_r == rcv_r, "the short stream's OPEN did not queue behind the segments"
            assert await short == 100
        else:
            short.cancel()
            try:
                await short
            except asyncio.CancelledError:
                pass
            else:
                raise AssertionError("cancelled send_stream returned")
        buf[:] = b"B" * 100  # the caller's again
        await snd.send(rcv_name, b"after", timeout=ctx.timeout)
        assert await long == len(blob)
        assert await snd.send_stream(rcv_name, blob[:100], timeout=ctx.timeout) == 100
        assert not ctx.node.stats().streams_out

    async def receiver() -> None:
        rcv = await ctx.process("rcv")
        st = await rcv.recv(timeout=ctx.timeout)
        assert isinstance(st, IncomingStream), st
        assert bytes(await st.read()) == blob
        msg = await rcv.recv(timeout=ctx.timeout)
        if snd_r == rcv_r and isinstance(msg, IncomingStream):  # delivered before the cancel (see above)
            assert bytes(await msg.read()) == b"A" * 100
            msg = await rcv.recv(timeout=ctx.timeout)
        assert isinstance(msg, Message), f"the cancelled stream arrived: {msg!r}"
        assert msg.data == b"after", msg
        st = await rcv.recv(timeout=ctx.timeout)
        assert isinstance(st, IncomingStream), st
        assert bytes(await st.read()) == blob[:100]
        assert_empty(rcv)

    await on_ranks(ctx, (snd_r, sender), (rcv_r, receiver))
    await ctx.barrier("done")
    assert not (ctx.node.stats().streams_in or ctx.node.stats().streams_out)


@scenario()
async def receiver_leaves_midstream(ctx: Ctx) -> None:
    """A receiving GP that frees itself while a stream to it is in flight
    makes the sender's send_stream raise BrokenResourceError (no hang); the
    receiver's stream fails (StreamError or BrokenResourceError); the name
    is then unknown."""
    snd_r, rcv_r = ctx.owner(0), ctx.owner(1)
    rcv_name = ctx.name("rcv")
    big = pattern("rlm", 4 << 20)

    async def sender() -> None:
        snd = await ctx.process("snd")
        await ctx.lookup(rcv_name)
        try:
            await snd.send_stream(rcv_name, big, segment_size=16 << 10, timeout=ctx.timeout)
        except BrokenResourceError:
            pass
        else:
            raise AssertionError("send_stream to a GP that left completed")
        await ctx.wait_until(lambda: rcv_name not in ctx.node.tables.by_name, "the free")
        try:
            await snd.send(rcv_name, b"x")
        except UnknownProcessError:
            pass
        else:
            raise AssertionError("send to a freed GP did not raise UnknownProcessError")
        assert not ctx.node.stats().streams_out, ctx.node.stats()

    async def receiver() -> None:
        rcv = await ctx.node.register(rcv_name)
        await rcv.apply_pipe()
        st = await rcv.recv(timeout=ctx.timeout)
        assert isinstance(st, IncomingStream), st
        seen = 0
        async for part in st:
            seen += len(part)
            if seen >= 2 * (16 << 10):
                break
        await rcv.free()
        try:
            async for part in st:
                pass
        except (StreamError, BrokenResourceError):
            pass
        else:
            raise AssertionError("a stream whose receiver left ended without StreamError")
        assert not ctx.node.stats().streams_in, ctx.node.stats()

    await on_ranks(ctx, (snd_r, sender), (rcv_r, receiver))
    await ctx.barrier("done")


@scenario()
async def send_before_bind(ctx: Ctx) -> None:
    """A GP that is registered but has no pipe yet: send() without a timeout
    and send_nowait() raise NoPipeError (and queue nothing); send() with a
    timeout waits for the binding and delivers -- the same on every transport."""
    snd_r, rcv_r = ctx.owner(0), ctx.owner(1)
    rcv_name, tried = ctx.name("rcv"), ctx.name("tried")

    async def sender() -> None:
        snd = await ctx.process("snd")
        await ctx.lookup(rcv_name)
        try:
            await snd.send(rcv_name, b"no-timeout")
        except NoPipeError:
            pass
        else:
            raise AssertionError("send() without timeout to an unbound GP did not raise NoPipeError")
        try:
            snd.send_nowait(rcv_name, b"nowait")
        except NoPipeError:
            pass
        else:
            raise AssertionError("send_nowait() to an unbound GP did not raise NoPipeError")
        early = asyncio.create_task(snd.send(rcv_name, b"early", timeout=ctx.timeout))
        await ctx.wait_until(lambda: ctx.node.stats().bind_waits == 1, "the early send to wait for the binding")
        await ctx.node.register(tried)   # tells the receiver: bind now
        await early

    async def receiver() -> None:
        rcv = await ctx.node.register(rcv_name)
        await ctx.node.lookup(tried, timeout=ctx.timeout)
        await rcv.apply_pipe()
        msg = await rcv.recv(timeout=ctx.timeout)
        assert isinstance(msg, Message) and msg.data == b"early", f"first message {msg!r}"
        # A window in which nothing may arrive (the refused sends queued
        # nothing): an absence cannot be awaited.
        await asyncio.sleep(0.05)
        assert_empty(rcv)
        await rcv.free()

    await on_ranks(ctx, (snd_r, sender), (rcv_r, receiver))
    await ctx.barrier("done")


# -------------------------------------------------------------- shutdown
@scenario()
async def shutdown_under_load(ctx: Ctx) -> None:
    """Producers on every host fire many messages and leave at once: on the
    consumer's host the producer GP frees itself, on every other host the
    whole node closes (while its links still hold messages).  Guarantee
    (Node.aclose / Remote.close): a closing node routes its public pipes,
    flushes its links and exchanges BYE counts, so every message queued
    before the close reaches the destination host and is delivered to a GP
    that is still receiving -- the consumer gets every message exactly once,
    in order per producer."""
    cons_r = ctx.owner(1)
    cons_name = ctx.name("cons")
    m = 400

    def payload(r: int, s: int) -> bytes:
        return header(r, s) + pattern(f"sul{r}.{s}", 1 + (s * 37) % 3000)

    async def producer() -> None:
        prod = await ctx.node.register(ctx.name("prod", ctx.rank))
        await prod.apply_pipe()
        await ctx.lookup(cons_name)
        await prod.send(cons_name, payload(ctx.rank, 0), timeout=ctx.timeout)
        for s in range(1, m):
            await prod.send(cons_name, payload(ctx.rank, s), timeout=ctx.timeout)
        if ctx.rank == cons_r:
            await prod.free()
        else:
            stats = ctx.node.stats()
            link = stats.links.get(cons_r)
            if link is not None:
                ctx.log(f"closing with {len(ctx.node.manager.public)} CDUs in the public pipe, "
                        f"{link.queued} blocks queued on the link, {link.inflight} in flight")
            ctx.log("before close: received per source", stats.received)
            t0 = time.monotonic()
            await ctx.node.aclose()
            ctx.log(f"aclose took {time.monotonic() - t0:.3f} s")
            assert ctx.node.stats().dropped == 0, ctx.node.stats()

    async def consumer() -> None:
        cons = await ctx.process("cons")
        nxt = dict.fromkeys(range(ctx.size), 0)
        for _ in range(m * ctx.size):
            msg = await cons.recv(timeout=ctx.timeout)
            assert isinstance(msg, Message), msg
            r, s, _ = parse_header(msg.data)
            assert s == nxt[r], f"from rank {r}: message {s}, expected {nxt[r]}"
            assert msg.data == payload(r, s), f"message {s} from rank {r} corrupted"
            nxt[r] += 1
        assert all(v == m for v in nxt.values()), nxt
        assert_empty(cons)

    async with asyncio.TaskGroup() as tg:
        tg.create_task(producer())
        if ctx.rank == cons_r:
            tg.create_task(consumer())


@scenario()
async def source_name_after_sender_left(ctx: Ctx) -> None:
    """Message.source is the sender's name even when the sender GP was freed
    before the message was received."""
    cons_r = ctx.owner(1)
    cons_name = ctx.name("cons")
    if ctx.rank == cons_r:
        cons = await ctx.process("cons")
    await ctx.barrier("ready")
    gp = await ctx.node.register(ctx.name("leaver", ctx.rank))
    await gp.apply_pipe()
    for s in range(5):
        await gp.send(cons_name, header(ctx.rank, s), timeout=ctx.timeout)
    await gp.free()
    if ctx.rank == cons_r:
        # every sender has left (its free reached this host) before we look
        leavers = [ctx.name("leaver", r) for r in range(ctx.size)]
        await ctx.wait_until(lambda: not any(n in ctx.node.tables.by_name for n in leavers), "the frees")
        for _ in range(5 * ctx.size):
            msg = await cons.recv(timeout=ctx.timeout)
            assert isinstance(msg, Message), msg
            r, s, _ = parse_header(msg.data)
            assert msg.source == ctx.name("leaver", r), \
                f"message {s} from rank {r}: source is {msg.source!r}, not {ctx.name('leaver', r)!r}"
    await ctx.barrier("done")


# -------------------------------------------------------------- payloads
@dataclasses.dataclass
class Point:
    """A user class sent as a pickled payload."""

    x: float
    y: float
    label: str = ""


def _objects(src: int) -> list[Any]:
    rng = rng_for(f"pk{src}")
    return [
        {"rank": src, "nested": [1, (2, 3), {"a": None}], "f": 1.5},
        Point(src, -2.5, "p"),
        {"array": rng.standard_normal((50, 3)), "bytes": pattern(f"pk{src}", 1000)},
        np.array([Point(1, 2), "s", None, 3], dtype=object),
        {"big": pattern(f"pkbig{src}", 400_000)},        # larger than a pool block
        2**100 + src,
        {1, 2, 3, src},
        ("tuple", src),
    ]


def _equal(a: Any, b: Any) -> bool:
    if isinstance(a, np.ndarray) or isinstance(b, np.ndarray):
        return isinstance(a, np.ndarray) and isinstance(b, np.ndarray) and a.dtype == b.dtype \
            and a.shape == b.shape and all(_equal(x, y) for x, y in zip(a.ravel().tolist(), b.ravel().tolist()))
    if isinstance(a, dict):
        return isinstance(b, dict) and a.keys() == b.keys() and all(_equal(a[k], b[k]) for k in a)
    if isinstance(a, (list, tuple)):
        return type(a) is type(b) and len(a) == len(b) and all(_equal(x, y) for x, y in zip(a, b))
    return bool(type(a) is type(b) and a == b)


@scenario(allow_pickle=True)
async def pickled_objects_opt_in(ctx: Ctx) -> None:
    """With allow_pickle=True Python objects (user classes, object arrays,
    arrays inside dicts, big pickles) arrive equal; the payload is taken at
    send time; an unpicklable payload fails at the sender and sends nothing;
    plain bytes/arrays are still bytes/arrays."""
    me = await ctx.process("gp", ctx.rank)
    dest = ctx.name("gp", (ctx.rank + 1) % ctx.size)
    prev = (ctx.rank - 1) % ctx.size
    everyone = [ctx.name("gp", r) for r in range(ctx.size)]
    for d in everyone:
        await ctx.lookup(d)
    mutable = {"list": [1, 2]}
    await me.send(dest, mutable, timeout=ctx.timeout)
    mutable["list"].append(3)
    for obj in _objects(ctx.rank):
        await me.send(dest, obj, timeout=ctx.timeout)
    try:
        await me.send(dest, lambda: None, timeout=ctx.timeout)
    except Exception:  # noqa: BLE001 - pickling errors vary by type
        pass
    else:
        raise AssertionError("an unpicklable payload was accepted")
    await me.send(dest, b"plain", timeout=ctx.timeout)
    await me.send(dest, np.arange(5), timeout=ctx.timeout)
    await me.send(everyone, {"mc": ctx.rank}, com=7, timeout=ctx.timeout)

    got = await receive_messages(me, 1 + len(_objects(prev)) + 2 + ctx.size, ctx.timeout)
    mcs = sorted(msg.data["mc"] for msg in got if msg.com == 7)
    assert mcs == list(range(ctx.size)), f"multicast objects from ranks {mcs}"
    got = [msg for msg in got if msg.com != 7]
    assert all(msg.source == ctx.name("gp", prev) for msg in got), [msg.source for msg in got]
    assert got[0].data == {"list": [1, 2]}, f"payload not taken at send time: {got[0].data}"
    for i, (msg, exp) in enumerate(zip(got[1:], _objects(prev))):
        assert _equal(msg.data, exp), f"object {i}: {msg.data!r:.200} != {exp!r:.200}"
    rest = got[1 + len(_objects(prev)):]
    assert type(rest[0].data) is bytes and rest[0].data == b"plain", rest[0]
    assert_same(rest[1].data, np.arange(5), "plain array")
    await ctx.barrier("done")
    assert_empty(me)


@scenario()
async def pickle_refused_by_default(ctx: Ctx) -> None:
    """Without allow_pickle, Python objects and object arrays are refused at
    the sender (TypeError), locally and to remote GPs, and nothing is sent."""
    me = await ctx.process("gp", ctx.rank)
    dest = ctx.name("gp", (ctx.rank + 1) % ctx.size)
    await ctx.lookup(dest)
    for obj in ({"a": 1}, Point(1, 2), np.array([None, 1], dtype=object), [1, 2]):
        try:
            await me.send(dest, obj, timeout=ctx.timeout)
        except TypeError:
            pass
        else:
            raise AssertionError(f"{type(obj).__name__} payload accepted without allow_pickle")
    await me.send(dest, b"marker", timeout=ctx.timeout)
    msg = await me.recv(timeout=ctx.timeout)
    assert isinstance(msg, Message) and msg.data == b"marker", msg
    await ctx.barrier("done")
    assert_empty(me)


# ================================================ failing fast and clearly
class _Refused(Exception):
    pass


@scenario(stream_window=4)
async def cancelled_big_stream_stops_within_window(ctx: Ctx) -> None:
    """A send_stream of a buffer far larger than the stream window, cancelled
    while its receiver pauses: the receiver then gets at most a window of
    segments (the window's bytes) and a StreamError -- the rest of the buffer
    never travels."""
    snd_r, rcv_r = ctx.owner(0), ctx.owner(1)
    rcv_name, snd_name = ctx.name("rcv"), ctx.name("snd")
    nseg, seg = 2000, 8192
    # the window in segments: stream_window, or to another host, for segments
    # below SMALL_SEGMENT, as many as stream_window segments of that size hold
    window = 4 if snd_r == rcv_r else max(4, 4 * SMALL_SEGMENT // seg)

    async def sender() -> None:
        snd = await ctx.process("snd")
        await ctx.lookup(rcv_name)
        data = np.frombuffer(pattern("cbs", nseg * seg), dtype=np.uint8)  # read-only
        task = asyncio.create_task(snd.send_stream(rcv_name, data, segment_size=seg))
        msg = await snd.recv(timeout=ctx.timeout)  # the receiver paused
        assert isinstance(msg, Message) and msg.data == b"paused", msg
        task.cancel()
        try:
            await task
        except asyncio.CancelledError:
            pass
        else:
            raise AssertionError("the cancelled send_stream completed")
        await snd.send(rcv_name, b"cancelled", timeout=ctx.timeout)

    async def receiver() -> None:
        rcv = await ctx.process("rcv")
        stream = await rcv.recv(timeout=ctx.timeout)
        assert isinstance(stream, IncomingStream), stream
        it = aiter(stream)
        for _ in range(5):
            await anext(it)
        await rcv.send(snd_name, b"paused", timeout=ctx.timeout)
        # Wait for the sender's word that it was cancelled: it travels
        # behind whatever the sender had in flight, which stays queued.
        await ctx.wait_until(lambda: rcv.pipe is not None and len(rcv.pipe) > 0, "the sender's word")
        after = 0
        try:
            async for _ in it:
                after += 1
        except StreamError as exc:
            assert "cancelled" in str(exc), exc
        else:
            raise AssertionError("the stream of a cancelled sender ended normally")
        assert after <= window, f"{after} segments arrived after the pause (window {window})"
        msg = await rcv.recv(timeout=ctx.timeout)
        assert isinstance(msg, Message) and msg.data == b"cancelled", msg
        assert_empty(rcv)

    await on_ranks(ctx, (snd_r, sender), (rcv_r, receiver))
    await ctx.barrier("done")


async def _agen(chunks: list[Any]) -> AsyncIterator[Any]:
    for c in chunks:
        yield c
        await asyncio.sleep(0)


@scenario()
async def bad_stream_input_refused(ctx: Ctx) -> None:
    """send_stream refuses what cannot travel before sending anything
    (TypeError/ValueError); an iterable whose chunk k is refused aborts the
    stream, and its receiver gets StreamError with the cause."""
    snd_r, rcv_r = ctx.owner(0), ctx.owner(1)
    rcv_name = ctx.name("rcv")
    whole = [(np.array([1, "x"], dtype=object), TypeError), ("text", TypeError), (42, TypeError),
             (np.zeros(3, dtype=[("a", "i4"), ("b", "f8")]), TypeError)]
    in_chunks = [([b"ok", 5], TypeError), ([np.zeros(2, "i2"), np.zeros(2, "f4")], ValueError),
                 ([np.zeros((2, 3)), np.zeros((2, 4))], ValueError),
                 ([np.ones(2), np.array([None], dtype=object)], TypeError)]

    async def sender() -> None:
        snd = await ctx.process("snd")
        await ctx.lookup(rcv_name)
        for bad, err in whole:
            try:
                await snd.send_stream(rcv_name, bad, timeout=ctx.timeout)
            except err:
                pass
            else:
                raise AssertionError(f"send_stream accepted {type(bad).__name__}")
        await snd.send(rcv_name, b"m1", timeout=ctx.timeout)
        for k, (chunks, err) in enumerate(in_chunks):
            source = iter(chunks) if k % 2 else _agen(chunks)
            try:
                await snd.send_stream(rcv_name, source, timeout=ctx.timeout)
            except err as exc:
                assert "chunk 1" in str(exc), exc
            else:
                raise AssertionError(f"send_stream accepted {chunks!r}")
        await snd.send(rcv_name, b"m2", timeout=ctx.timeout)

    async def receiver() -> None:
        rcv = await ctx.process("rcv")
        first = await rcv.recv(timeout=ctx.timeout)  # nothing was sent for the refused buffers
        assert isinstance(first, Message) and first.data == b"m1", first
        for _ in in_chunks:
            stream = await rcv.recv(timeout=ctx.timeout)
            assert isinstance(stream, IncomingStream), stream
            try:
                await stream.read()
            except StreamError as exc:
                assert "chunk 1" in str(exc) and "sender failed" in str(exc), exc
            else:
                raise AssertionError("a stream with a refused chunk ended normally")
        last = await rcv.recv(timeout=ctx.timeout)
        assert isinstance(last, Message) and last.data == b"m2", last
        assert_empty(rcv)

    await on_ranks(ctx, (snd_r, sender), (rcv_r, receiver))
    await ctx.barrier("done")


#: every kind of dtype the codec carries raw (no pickle)
STREAM_DTYPES = ["u1", "i2", "f4", "?", "i1", "u2", "i4", "u4", "i8", "u8", "f2", "f8", "c8", "c16",
                 "M8[s]", "m8[ms]", "S5", "U3", "V4", ">i4", ">f8", "g"]


def _dtype_chunks(dt: str, k: int) -> list[np.ndarray]:
    rng = rng_for(f"dt{dt}{k}")
    raw = [rng.integers(0, 256, (n, 2) + ((3,) if k % 3 == 2 else ()) , dtype=np.uint8)
           for n in (3, 0, 1, 2)]
    out = []
    for r in raw:
        size = np.dtype(dt).itemsize
        b = np.resize(r.reshape(-1), r.size * size) if r.size else np.zeros(0, np.uint8)
        a = b.view(dt).reshape(r.shape)
        if np.dtype(dt).kind == "b":
            a = a.astype(bool)
        elif np.dtype(dt).kind == "U":
            a = np.array(["ab", "c", "def"])[b[:r.size] % 3].reshape(r.shape).astype(dt)
        elif np.dtype(dt).kind in "fc":
            a = b[:r.size].astype(dt).reshape(r.shape)
        out.append(a)
    return out


@scenario(timeout=45.0)
async def iterable_streams_keep_dtype_and_shape(ctx: Ctx) -> None:
    """Iterable and async-iterable sources keep dtype and shape across hosts,
    empty chunks included, for every dtype the codec carries; read() and
    segment iteration agree."""
    snd_r, rcv_r = ctx.owner(0), ctx.owner(1)
    rcv_name = ctx.name("rcv")

    async def sender() -> None:
        snd = await ctx.process("snd")
        await ctx.lookup(rcv_name)
        for k, dt in enumerate(STREAM_DTYPES):
            chunks = _dtype_chunks(dt, k)
            source = iter(chunks) if k % 2 else _agen(chunks)
            await snd.send_stream(rcv_name, source, segment_size=48, timeout=ctx.timeout)

    async def receiver() -> None:
        rcv = await ctx.process("rcv")
        for k, dt in enumerate(STREAM_DTYPES):
            exp = np.concatenate(_dtype_chunks(dt, k), dtype=np.dtype(dt))
            stream = await rcv.recv(timeout=ctx.timeout)
            assert isinstance(stream, IncomingStream), stream
            # the announced dtype is a numpy dtype (it compares equal to its name too)
            assert stream.meta.kind == "ndarray" and isinstance(stream.meta.dtype, np.dtype), stream.meta
            assert stream.meta.dtype == exp.dtype and stream.meta.dtype == exp.dtype.str, stream.meta
            if k % 4 == 3:
                got = np.concatenate([seg async for seg in stream], dtype=np.dtype(dt))
            else:
                got = await stream.read()
            assert got.dtype == exp.dtype and got.shape == exp.shape, (dt, got.dtype, got.shape, exp.shape)
            if exp.dtype.kind in "fc":  # (long double has padding bytes: compare values)
                assert np.array_equal(got, exp, equal_nan=True), f"dtype {dt}: content differs"
            else:
                assert got.tobytes() == exp.tobytes(), f"dtype {dt}: content differs"
        assert_empty(rcv)

    await on_ranks(ctx, (snd_r, sender), (rcv_r, receiver))
    await ctx.barrier("done")


@scenario()
async def spmd_sends_without_waiting(ctx: Ctx) -> None:
    """The natural SPMD program: every host registers its GP and sends to the
    GPs of all hosts at once, without sleeps or timeouts (the name rule waits
    for names another host has not registered yet)."""
    gp = await ctx.node.register(ctx.name("spmd", ctx.rank), bind=True)
    try:
        for r in range(ctx.size):
            await gp.send(ctx.name("spmd", r), header(ctx.rank, r))
        got = []
        for _ in range(ctx.size):
            msg = await gp.recv(timeout=ctx.timeout)
            assert isinstance(msg, Message), msg
            got.append(parse_header(msg.data)[:2])
        got.sort()
        assert got == [(r, ctx.rank) for r in range(ctx.size)], got
        assert_empty(gp)
        await ctx.barrier("done")
    finally:
        await gp.free()


@scenario()
async def cancelled_recv_takes_nothing(ctx: Ctx) -> None:
    """A recv cancelled while it waits takes nothing: the message sent after
    the cancellation is the next one received -- on every transport."""
    snd_r, rcv_r = ctx.owner(0), ctx.owner(1)
    rcv_name, go = ctx.name("rcv"), ctx.name("go")

    async def sender() -> None:
        snd = await ctx.process("snd")
        await ctx.node.lookup(go, timeout=ctx.timeout)  # the receiver's recv was cancelled
        for i in range(3):
            await snd.send(rcv_name, header(0, i), timeout=ctx.timeout)

    async def receiver() -> None:
        rcv = await ctx.process("rcv")
        for _ in range(3):
            waiting = asyncio.create_task(rcv.recv())
            await ctx.wait_until(lambda: not waiting.done() and len(rcv.pipe or ()) == 0, "recv to wait")
            waiting.cancel()
            try:
                await waiting
            except asyncio.CancelledError:
                pass
            else:
                raise AssertionError("recv returned before anything was sent")
        await ctx.node.register(go)
        got = []
        for _ in range(3):
            msg = await rcv.recv(timeout=ctx.timeout)
            assert isinstance(msg, Message), msg
            got.append(parse_header(msg.data)[1])
        assert got == [0, 1, 2], got
        assert_empty(rcv)

    await on_ranks(ctx, (snd_r, sender), (rcv_r, receiver))
    await ctx.barrier("done")


@scenario()
async def remote_errors_keep_their_message(ctx: Ctx) -> None:
    """A table update refused by rank 0 comes back as the same error with the
    same message (never double-wrapped), on every host."""
    name = ctx.name("taken")
    if ctx.rank == 0:
        await ctx.process("taken")
    await ctx.barrier("registered")
    if ctx.rank != 0:
        try:
            await ctx.node.register(name)
        except DuplicateProcessError as exc:
            assert str(exc) == f"a generalized process named {name!r} is already registered", str(exc)
            assert exc.name == name
        else:
            raise AssertionError("a taken name was registered twice")
    await ctx.barrier("done")


@scenario()
async def malformed_frame_fails_the_link(ctx: Ctx) -> None:
    """A frame from a peer that fails to decode fails the link to that peer
    with a ProtocolError naming it -- the cause every later sender sees --
    never crashes the receiving host's loop, and stops the job: every
    other host, the sender included, hears of it (it fails the receiver
    too) and table requests stop waiting for answers."""
    from aiopdbp.runtime.job import current_job
    if ctx.size == 1 or current_job() is not None:
        # Under aiopdbp.run (the MPI runner) the error stops the whole job,
        # every later scenario with it: tests/test_hostile.py runs that case.
        return
    # the sequencer (rank 0) is the bad one: the victim's table updates
    # travel on the control channel, which a failed data link leaves alone
    bad_r, victim_r = 0, 1
    target = ctx.name("t", bad_r)
    if ctx.rank == bad_r:
        await ctx.process("t", bad_r)
    if ctx.rank == victim_r:  # (before the bad frame: table requests stop with it)
        me = await ctx.process("v")
    await ctx.barrier("ready")
    if ctx.rank == victim_r:
        await ctx.lookup(target)
    await ctx.barrier("looked")
    if ctx.rank == bad_r:
        from aiopdbp.transport.base import Channel
        # a well-formed level-1 header announcing a kind that does not exist
        await ctx.node.transport.send(victim_r, Channel.DATA, [bytes([1, 0x7F, 1, 0, 4, 0, 0, 0, 0, 0, 0, 0])])
    if ctx.rank == victim_r:

        async def refused() -> BaseException | None:
            try:
                await me.send(target, b"x", timeout=1.0)
            except aiopdbp.ProtocolError as exc:
                return exc
            return None

        deadline = time.monotonic() + ctx.timeout
        while (exc := await refused()) is None:
            assert time.monotonic() < deadline, "the link to the peer never failed"
            await asyncio.sleep(0.01)
        assert f"host {bad_r}" in str(exc) and "malformed" in str(exc), exc
        # the loop still runs: local work goes on
        await me.send(me.name, b"still alive")
        assert (await me.recv(timeout=ctx.timeout)).data == b"still alive"  # type: ignore[union-attr]
        # the job stops: no table request waits for the sequencer any more
        with pytest.raises(aiopdbp.RankFailedError, match="the job is stopping"):
            await ctx.node.register(ctx.name("late"))
        assert bad_r in ctx.node.stats().failed_hosts
    else:
        # the victim's stop notice reached this host: it no longer talks to the victim
        deadline = time.monotonic() + ctx.timeout
        while victim_r not in ctx.node.stats().failed_hosts:
            assert time.monotonic() < deadline, "the victim's stop notice never came"
            await asyncio.sleep(0.01)


# ================================================ per-destination flow control
SIBLING_CFG = RemoteConfig(gp_window=64 << 10)
SIBLING_MSG = 1000


@scenario(pipe_capacity=64, remote=SIBLING_CFG, timeout=45.0)
async def stalled_gp_does_not_stop_its_siblings(ctx: Ctx) -> None:
    """A GP that stops reading holds back only the traffic addressed to it:
    its sibling on the same host keeps receiving from the same sending host
    (all of it, while the stalled one still reads nothing), the stalled
    GP's sender waits (backpressure), and what its host holds for it stays
    within the per-destination window; then it drains everything in order."""
    snd_r, rcv_r = ctx.owner(0), ctx.owner(1)
    slow, fast, done = ctx.name("slow"), ctx.name("fast"), ctx.name("fast-done")
    checked = ctx.name("checked")
    n_fast = 3000
    remote = snd_r != rcv_r
    bound = (SIBLING_CFG.gp_window // (SIBLING_MSG + aiopdbp.wire.message.CREDIT_OVERHEAD) + 1 if remote
             else 64)

    async def sender() -> None:
        s1, s2 = await ctx.process("s1"), await ctx.process("s2")
        await ctx.lookup(slow)
        await ctx.lookup(fast)
        to_slow = 0

        async def stall_slow() -> None:
            nonlocal to_slow
            while True:  # until its credit (or pipe) is exhausted: it blocks
                await s1.send(slow, header(0, to_slow) + bytes(SIBLING_MSG - 16))
                to_slow += 1

        blocked = asyncio.create_task(stall_slow())
        for i in range(n_fast):
            await s2.send(fast, header(1, i) + bytes(SIBLING_MSG - 16), timeout=ctx.timeout)
        await ctx.node.lookup(done, timeout=ctx.timeout)   # fast got all of it...
        assert not blocked.done(), "the sender to the stalled GP never had to wait"
        assert to_slow <= bound, f"{to_slow} messages went to a GP that reads nothing; bound {bound}"
        await ctx.node.register(checked)
        blocked.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await blocked
        await s1.send(slow, b"END", com=1, timeout=ctx.timeout)

    async def receiver() -> None:
        g_slow, g_fast = await ctx.process("slow"), await ctx.process("fast")
        for i in range(n_fast):
            msg = await g_fast.recv(timeout=ctx.timeout)
            assert isinstance(msg, Message) and parse_header(msg.data)[:2] == (1, i), msg
        queued = len(g_slow.pipe or ())
        assert 0 < queued <= bound, f"the stalled GP's host holds {queued} messages; bound {bound}"
        await ctx.node.register(done)             # ...while slow had read nothing
        await ctx.node.lookup(checked, timeout=ctx.timeout)
        seq = 0
        while True:
            msg = await g_slow.recv(timeout=ctx.timeout)
            assert isinstance(msg, Message), msg
            if msg.com == 1:
                break
            assert parse_header(msg.data)[:2] == (0, seq), (parse_header(msg.data)[:2], seq)
            seq += 1
        assert seq >= 1

    await on_ranks(ctx, (snd_r, sender), (rcv_r, receiver))
    await ctx.barrier("done")


# ============================================ large payloads (issue 18, item 3)
_BIG = 1 << 17   # float64 elements: 1 MiB, far above RemoteConfig.large


@scenario()
async def large_send_owns_the_buffer(ctx: Ctx) -> None:
    """``await gp.send(big)`` of a writable array returns once the buffer may
    be reused (MPI_Send ownership): the sender overwrites it right after
    each send returns, and every receiver (on another host, and itself: a
    local pipe, which gets a copy) sees exactly what was in it at the send.
    ``send_nowait`` of a large writable array copies it."""
    me = await ctx.process("gp", ctx.rank)
    dest = ctx.name("gp", (ctx.rank + 1) % ctx.size)
    prev = (ctx.rank + ctx.size - 1) % ctx.size
    await ctx.lookup(dest)
    n = 5
    buf = np.empty(_BIG, dtype=np.float64)

    async def produce() -> None:
        for i in range(n):
            buf[:] = 1000 * ctx.rank + i
            await me.send(dest, buf, com=i, timeout=ctx.timeout)
            buf[:] = -1.0          # the send returned: the buffer is ours again
            await me.send(me.name, buf[:1000].copy(), com=100 + i, timeout=ctx.timeout)
        buf[:] = 1000 * ctx.rank + n

        def sent_nowait() -> bool:
            try:
                me.send_nowait(dest, buf, com=n)
            except WouldBlock:     # no credit yet: the receiver reads on
                return False
            buf[:] = -2.0
            return True

        await ctx.wait_until(sent_nowait, "credit for send_nowait")

    async def consume() -> None:
        got = 0
        for _ in range(2 * n + 1):
            msg = await me.recv(timeout=ctx.timeout)
            assert isinstance(msg, Message), msg
            if msg.com >= 100:
                assert msg.data.shape == (1000,) and (msg.data == -1.0).all()
                continue
            assert msg.com == got, (msg.com, got)
            assert msg.data.shape == (_BIG,) and msg.data.dtype == np.float64
            bad = np.flatnonzero(msg.data != 1000 * prev + got)
            assert not bad.size, f"message {got}: {bad.size} elements changed after send returned"
            got += 1
        assert got == n + 1

    async with asyncio.TaskGroup() as tg:
        tg.create_task(produce())
        tg.create_task(consume())
    await ctx.barrier("done")


@scenario()
async def cancelled_large_sends_tell_the_truth(ctx: Ctx) -> None:
    """A send of a large writable array (from its own buffer, to another
    host) cancelled at any point tells the truth: it returns only if its
    message went, raises ``CancelledError`` only if nothing was queued.
    Each send runs in a task cancelled after 0-3 loop turns (before it ran,
    while MPI reads the buffer, after it returned); then a list of the sends
    that returned follows, and the receiver gets exactly those, in order."""
    me = await ctx.process("gp", ctx.rank)
    dest = ctx.name("gp", (ctx.rank + 1) % ctx.size)
    prev = (ctx.rank + ctx.size - 1) % ctx.size
    await ctx.lookup(dest)
    n, end = 12, 1000

    async def produce() -> None:
        returned = []
        for i in range(n):
            buf = np.full(_BIG, 1000 * ctx.rank + i, dtype=np.float64)
            task = asyncio.ensure_future(me.send(dest, buf, com=i, timeout=ctx.timeout))
            for _ in range(i % 4):
                await asyncio.sleep(0)
            task.cancel()
            try:
                await task
            except asyncio.CancelledError:
                continue
            returned.append(i)
        await me.send(dest, json.dumps(returned).encode(), com=end, timeout=ctx.timeout)

    async def consume() -> None:
        got = []
        while True:
            msg = await me.recv(timeout=ctx.timeout)
            assert isinstance(msg, Message), msg
            if msg.com == end:
                break
            assert (msg.data == 1000 * prev + msg.com).all(), msg.com
            got.append(msg.com)
        assert got == json.loads(msg.data), (got, msg.data)

    async with asyncio.TaskGroup() as tg:
        tg.create_task(produce())
        tg.create_task(consume())
    await ctx.barrier("done")
    assert_empty(me)


@scenario(remote=RemoteConfig(gp_window=256 << 10))
async def whole_streams_take_their_bytes_of_credit(ctx: Ctx) -> None:
    """Short streams carried whole in their OPEN charge their bytes to the
    receiving GP's window, as messages do: 24 concurrent 60 KB streams to a
    GP that reads nothing yet make their senders wait for credit (the
    review's reproducer had 200 of them land, 11.7 MiB past a 1 MiB
    window); then every stream arrives intact."""
    me = await ctx.process("gp", ctx.rank)
    dest = ctx.name("gp", (ctx.rank + 1) % ctx.size)
    prev = (ctx.rank - 1) % ctx.size
    n = 24
    await ctx.lookup(dest)
    host = (ctx.rank + 1) % ctx.size
    senders = [asyncio.ensure_future(me.send_stream(dest, pattern(f"wst{ctx.rank}.{i}", 60_000),
                                                    com=i, timeout=ctx.timeout)) for i in range(n)]
    if ctx.size > 1:  # a remote destination: its credit makes them wait
        await ctx.wait_until(lambda: getattr(ctx.node.stats().links.get(host), "credit_waits", 0) > 0,
                             "a short-stream sender parked for credit")   # (the link: at the first send)
    await ctx.barrier("parked")
    got = {}
    for _ in range(n):
        st = await me.recv(timeout=ctx.timeout)
        assert isinstance(st, IncomingStream), st
        got[st.com] = bytes(await st.read())
    await asyncio.gather(*senders)
    assert got == {i: pattern(f"wst{prev}.{i}", 60_000) for i in range(n)}
    await ctx.barrier("done")
    assert_empty(me)


@scenario()
async def recv_into_keeps_arrival_order(ctx: Ctx) -> None:
    """A loop of ``recv_into`` gets one sender's large arrays and bytes in
    the order sent, each intact, whatever lands where (the review's
    reproducer: over TCP, a GP's buffer was offered to a payload while an
    earlier one of the same host was still landing)."""
    me = await ctx.process("gp", ctx.rank)
    dest = ctx.name("gp", (ctx.rank + 1) % ctx.size)
    prev = (ctx.rank - 1) % ctx.size
    n = 40

    def item(src: int, i: int) -> Any:
        if i % 5 == 4:  # a large bytes payload: copied into out, never landed there
            return pattern(f"rio{src}.{i}", 100_000)
        return np.full(32 * 1024, src * 1000 + i, dtype=np.float64)  # 256 KiB

    async def produce() -> None:
        await ctx.lookup(dest)
        for i in range(n):
            await me.send(dest, item(ctx.rank, i), com=i, timeout=ctx.timeout)

    async def consume() -> None:
        out = np.empty(32 * 1024, dtype=np.float64)
        for i in range(n):
            msg = await me.recv_into(out, timeout=ctx.timeout)
            assert msg.com == i, f"message {msg.com} arrived as #{i}"
            exp = item(prev, i)
            got = bytes(msg.data) if isinstance(exp, bytes) else msg.data
            assert (got == exp) if isinstance(exp, bytes) else np.array_equal(got, exp), f"#{i} content"

    async with asyncio.TaskGroup() as tg:
        tg.create_task(produce())
        tg.create_task(consume())
    await ctx.barrier("done")
    assert_empty(me)


@scenario()
async def recv_into_lands_in_the_users_buffer(ctx: Ctx) -> None:
    """``recv_into(out)`` puts the next message's bytes in the caller's
    buffer and returns a view of it; a large array from another host for
    which the call already waits lands there straight from MPI (counted by
    the transport's ``bulk_recvs_user``)."""
    src, dst = ctx.owner(0), ctx.owner(1)
    ready, go = ctx.name("ready"), ctx.name("gp", 0)

    async def receive() -> None:
        me = await ctx.process("gp", 1)
        out = np.zeros(2 * _BIG, dtype=np.float64)
        before = ctx.node.stats().transport.get("bulk_recvs_user", 0)
        task = asyncio.ensure_future(me.recv_into(out, timeout=ctx.timeout))
        await asyncio.sleep(0)            # it runs up to its wait (a yield, not a delay)
        await ctx.node.register(ready)    # ... then the sender may send
        msg = await task
        assert isinstance(msg, Message) and msg.source == go
        assert msg.data.shape == (_BIG,) and msg.data.dtype == np.float64
        assert np.shares_memory(msg.data, out)
        assert (out[:_BIG] == np.arange(_BIG)).all() and (out[_BIG:] == 0).all()
        if src != dst and ctx.node.transport is not None and ctx.node.transport.name == "mpi":
            assert ctx.node.stats().transport["bulk_recvs_user"] == before + 1, ctx.node.stats().transport
        # A message that was already waiting is copied in.
        msg = await me.recv_into(out, timeout=ctx.timeout)
        assert isinstance(msg, Message) and bytes(msg.data) == b"second"
        assert bytes(out[:1].view(np.uint8)[:6]) == b"second"

    async def send() -> None:
        me = await ctx.process("gp", 0)
        dest = ctx.name("gp", 1)
        await ctx.node.lookup(ready, timeout=ctx.timeout)
        await me.send(dest, np.arange(_BIG, dtype=np.float64), timeout=ctx.timeout)
        await me.send(dest, b"second", timeout=ctx.timeout)

    async with asyncio.TaskGroup() as tg:
        if ctx.rank == dst:
            tg.create_task(receive())
        if ctx.rank == src:
            tg.create_task(send())
    await ctx.barrier("done")


@scenario()
async def recv_into_lands_arrays_of_one_shape_in_the_users_buffer(ctx: Ctx) -> None:
    """Arrays of one shape sent again and again to a GP that waits in
    ``recv_into`` each land in its buffer (from the second on, their split
    header is the one the receiving host keeps: its cached path), intact."""
    src, dst = ctx.owner(0), ctx.owner(1)
    n = 4
    shape = (64, 1024)   # 512 KiB of float64: a bulk payload

    async def receive() -> None:
        me = await ctx.process("gp", 1)
        out = np.zeros(shape, dtype=np.float64)
        before = ctx.node.stats().transport.get("bulk_recvs_user", 0)
        for i in range(n):
            task = asyncio.ensure_future(me.recv_into(out, timeout=ctx.timeout))
            await asyncio.sleep(0)                       # it runs up to its wait ...
            await ctx.node.register(ctx.name(f"ready{i}"))  # ... then the sender may send
            msg = await task
            assert isinstance(msg, Message) and msg.com == i
            assert msg.data.shape == shape and np.shares_memory(msg.data, out)
            assert (out == i + np.arange(shape[1])).all(), f"#{i} content"
        if src != dst and ctx.node.transport is not None and ctx.node.transport.name == "mpi":
            assert ctx.node.stats().transport["bulk_recvs_user"] == before + n, ctx.node.stats().transport

    async def send() -> None:
        me = await ctx.process("gp", 0)
        dest = ctx.name("gp", 1)
        buf = np.empty(shape, dtype=np.float64)
        for i in range(n):
            await ctx.node.lookup(ctx.name(f"ready{i}"), timeout=ctx.timeout)
            buf[:] = i + np.arange(shape[1])
            await me.send(dest, buf, com=i, timeout=ctx.timeout)

    async with asyncio.TaskGroup() as tg:
        if ctx.rank == dst:
            tg.create_task(receive())
        if ctx.rank == src:
            tg.create_task(send())
    await ctx.barrier("done")


@scenario()
async def recv_into_refuses_what_does_not_fit(ctx: Ctx) -> None:
    """``recv_into`` raises ``ValueError`` for a message larger than the
    buffer and ``TypeError`` for one that is not bytes or an array; the
    message stays first, and ``recv`` returns it intact."""
    src, dst = ctx.owner(0), ctx.owner(1)

    async def receive() -> None:
        me = await ctx.process("gp", 1)
        out = np.zeros(_BIG // 2, dtype=np.float64)
        with pytest_raises(ValueError, "does not fit"):
            await me.recv_into(out, timeout=ctx.timeout)
        msg = await me.recv(timeout=ctx.timeout)
        assert isinstance(msg, Message) and (msg.data == np.arange(_BIG)).all()
        with pytest_raises(TypeError, "not bytes or a numeric array"):
            await me.recv_into(out, timeout=ctx.timeout)
        msg = await me.recv(timeout=ctx.timeout)
        assert isinstance(msg, Message) and msg.data is None and msg.com == 7
        with pytest_raises(ValueError, "read-only"):
            await me.recv_into(b"immutable", timeout=ctx.timeout)
        assert (out == 0).all()

    async def send() -> None:
        me = await ctx.process("gp", 0)
        dest = ctx.name("gp", 1)
        await ctx.lookup(dest)
        await me.send(dest, np.arange(_BIG, dtype=np.float64), timeout=ctx.timeout)
        await me.send(dest, None, com=7, timeout=ctx.timeout)

    async with asyncio.TaskGroup() as tg:
        if ctx.rank == dst:
            tg.create_task(receive())
        if ctx.rank == src:
            tg.create_task(send())
    await ctx.barrier("done")


@scenario()
async def recv_into_and_a_multicast_share_nothing(ctx: Ctx) -> None:
    """A large multicast to two GPs, one of which waits in ``recv_into``:
    both get the data, and the other's array is not a view of the first
    one's buffer (a multicast's payload never lands in a GP's own buffer)."""
    src, dst = ctx.owner(0), ctx.owner(1)
    ready = ctx.name("ready")

    async def receive() -> None:
        into, plain = await ctx.process("gp", 1), await ctx.process("gp", 2)
        out = np.zeros(_BIG, dtype=np.float64)
        task = asyncio.ensure_future(into.recv_into(out, timeout=ctx.timeout))
        await asyncio.sleep(0)            # it runs up to its wait (a yield, not a delay)
        await ctx.node.register(ready)
        got = await task
        other = await plain.recv(timeout=ctx.timeout)
        assert isinstance(got, Message) and isinstance(other, Message)
        assert (out == np.arange(_BIG)).all() and (other.data == np.arange(_BIG)).all()
        assert not np.shares_memory(other.data, out)
        out[:] = -1.0                     # the buffer is the caller's: the other copy is unaffected
        assert (other.data == np.arange(_BIG)).all()

    async def send() -> None:
        me = await ctx.process("gp", 0)
        await ctx.node.lookup(ready, timeout=ctx.timeout)
        await me.send([ctx.name("gp", 1), ctx.name("gp", 2)], np.arange(_BIG, dtype=np.float64),
                      timeout=ctx.timeout)

    async with asyncio.TaskGroup() as tg:
        if ctx.rank == dst:
            tg.create_task(receive())
        if ctx.rank == src:
            tg.create_task(send())
    await ctx.barrier("done")


@contextlib.contextmanager
def pytest_raises(exc: type[BaseException], words: str) -> Iterator[None]:
    """``pytest.raises`` without pytest (the MPI runner has none): ``exc``
    whose message says ``words``."""
    try:
        yield
    except exc as e:
        assert words in str(e), f"{exc.__name__} without {words!r}: {e}"
    else:
        raise AssertionError(f"no {exc.__name__} raised")


# ============================================================== arrays and tensors
def _ml_arrays() -> list[np.ndarray]:
    import ml_dtypes
    return [np.arange(-3, 9, dtype=ml_dtypes.bfloat16).reshape(3, 4),
            np.linspace(-2, 2, 7).astype(ml_dtypes.float8_e4m3fn),
            np.linspace(-2, 2, 5).astype(ml_dtypes.float8_e5m2),
            (np.arange(6) + 1j * np.arange(6)).astype(np.complex64).reshape(2, 3),
            np.arange(5, dtype=">f4"), np.array([True, False, True]), np.arange(4, dtype=np.uint16),
            np.arange(-4, 4, dtype=np.int8)]


async def _arrays_round(ctx: Ctx, payloads: Callable[[], list[Any]], check: Callable[[Any, Any, str], None]) -> None:
    """Rank 0's GP sends each payload to the last rank's GP by send, then by
    send_stream; the receiver checks each arrival against a fresh copy."""
    last = ctx.size - 1

    async def produce() -> None:
        me = await ctx.process("src")
        dest = ctx.name("dst")
        await ctx.lookup(dest)
        for x in payloads():
            await me.send(dest, x, timeout=ctx.timeout)
        for x in payloads():
            await me.send_stream(dest, x, timeout=ctx.timeout)

    async def consume() -> None:
        me = await ctx.process("dst")
        exp = payloads()
        for i, x in enumerate(exp):
            msg = await me.recv(timeout=ctx.timeout)
            assert isinstance(msg, Message), msg
            check(msg.data, x, f"send #{i}")
        for i, x in enumerate(exp):
            st = await me.recv(timeout=ctx.timeout)
            assert isinstance(st, IncomingStream), st
            check(await st.read(), x, f"send_stream #{i}")

    await on_ranks(ctx, (0, produce), (last, consume))
    await ctx.barrier("done")


def _same_numpy(got: Any, exp: Any, what: str) -> None:
    assert type(got) is np.ndarray, f"{what}: {type(got).__name__}"
    assert (got.dtype, got.shape) == (exp.dtype, exp.shape), f"{what}: {got.dtype}{got.shape} != {exp.dtype}{exp.shape}"
    assert got.tobytes() == exp.tobytes(), what


@scenario(requires=("ml_dtypes",))
async def arrays_arrive_with_their_dtype(ctx: Ctx) -> None:
    """bfloat16, float8 (e4m3fn, e5m2), complex64, big-endian float32, bool
    and small int numpy arrays arrive, by send and send_stream, with their
    dtype, shape and bytes (the dtype travels by name and byte order)."""
    await _arrays_round(ctx, _ml_arrays, _same_numpy)


def _tensors() -> list[Any]:
    import torch
    g = torch.Generator().manual_seed(7)
    return [torch.randn(3, 4, generator=g), torch.randn(64, generator=g).to(torch.bfloat16),
            torch.arange(-5, 7, dtype=torch.int64).reshape(3, 4),
            torch.arange(24.).reshape(4, 6)[:, ::2].T,          # a non-contiguous view
            torch.tensor(2.5), torch.zeros(0, 3), torch.tensor([True, False]),
            torch.ones(3).to(torch.float8_e4m3fn), torch.randn(1 << 18, generator=g)]


def _same_tensor(got: Any, exp: Any, what: str) -> None:
    import torch
    assert type(got) is torch.Tensor, f"{what}: {type(got).__name__}"
    assert (got.dtype, got.shape) == (exp.dtype, exp.shape), f"{what}: {got.dtype}{got.shape} != {exp.dtype}{exp.shape}"
    assert torch.equal(got.reshape(-1).view(torch.uint8), exp.reshape(-1).contiguous().view(torch.uint8)), what


@scenario(requires=("torch",))
async def tensors_arrive_as_tensors(ctx: Ctx) -> None:
    """float32, bfloat16, int64, bool and float8 tensors, a non-contiguous
    view, 0-d, empty and 1 MiB tensors arrive, by send and send_stream, as
    torch tensors equal to what was sent."""
    await _arrays_round(ctx, _tensors, _same_tensor)


@scenario(requires=("torch",))
async def tensors_and_arrays_of_one_shape_arrive_each_as_sent(ctx: Ctx) -> None:
    """A tensor, an array, a tensor again, of one dtype and shape, from one
    GP to another, small and large (the large ones by the cached split
    header, whose dtype key cannot tell a tensor from an array): each
    arrives as what was sent."""
    import torch
    last = ctx.size - 1
    kinds = [torch.Tensor, np.ndarray, torch.Tensor, np.ndarray]

    def make(kind: Any, n: int) -> Any:
        a = np.full(n, 3, np.float32)
        return torch.from_numpy(a) if kind is torch.Tensor else a

    async def produce() -> None:
        me = await ctx.process("src")
        await ctx.lookup(ctx.name("dst"))
        for n in (4, 1 << 16):
            for kind in kinds:
                await me.send(ctx.name("dst"), make(kind, n), timeout=ctx.timeout)

    async def consume() -> None:
        me = await ctx.process("dst")
        for n in (4, 1 << 16):
            for i, kind in enumerate(kinds):
                msg = await me.recv(timeout=ctx.timeout)
                assert isinstance(msg, Message)
                assert type(msg.data) is kind, f"{n} B, message {i}: a {kind.__name__} arrived as {type(msg.data).__name__}"
                assert tuple(msg.data.shape) == (n,) and bool((msg.data == 3).all())

    await on_ranks(ctx, (0, produce), (last, consume))
    await ctx.barrier("done")


@scenario(requires=("torch",))
async def a_sent_tensor_may_be_written_at_once(ctx: Ctx) -> None:
    """After ``await gp.send(t)`` writing to ``t`` does not change what
    arrives (small and large tensors), and ``arrays="numpy"`` on ``recv``
    gives numpy."""
    import torch
    last = ctx.size - 1
    sizes = [4, 1 << 20]

    async def produce() -> None:
        me = await ctx.process("src")
        await ctx.lookup(ctx.name("dst"))
        for n in sizes:
            t = torch.full((n,), 7.0)
            await me.send(ctx.name("dst"), t, timeout=ctx.timeout)
            t.fill_(-1.0)

    async def consume() -> None:
        me = await ctx.process("dst")
        for n in sizes:
            msg = await me.recv(timeout=ctx.timeout, arrays="numpy")
            assert isinstance(msg, Message)
            assert type(msg.data) is np.ndarray and msg.data.dtype == np.float32, msg.data.dtype
            assert msg.data.shape == (n,) and bool((msg.data == 7.0).all()), f"{n}: {msg.data[:4]}"

    await on_ranks(ctx, (0, produce), (last, consume))
    await ctx.barrier("done")
