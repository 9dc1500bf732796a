"""Per-destination credit (aiopdbp.hosts.link / aiopdbp.routing.router): one admission
rule, a fair FIFO hand-off, and owed credit that never strands a sender.

The link is driven directly (no transport traffic: only ``reserve``,
``offer`` and ``grant``), so each rule is checked on its own; the load suite
(tests/test_load.py) checks the same rules under real traffic.

``await asyncio.sleep(0)`` here is exactly one loop turn, and that is the
behaviour checked: a woken sender runs on the next turn, and the router sends
owed credit at the end of the loop iteration (``call_soon``, one batch), so
"right after one turn" is the promise, not an approximation of "eventually".
"""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from aiopdbp.wire.mesp import Kind
from aiopdbp.errors import BrokenResourceError, WouldBlock
from aiopdbp.hosts.link import HostLink
from aiopdbp.routing.pipes import Pipe, PipePool
from aiopdbp.hosts.tables import Tables

WINDOW = 1000
PID = 7


class _Transport:
    """Just enough transport for a link whose sends go nowhere."""

    tick = 0

    def post_nowait(self, dest: int, channel: Any, blocks: list[Any]) -> None:
        return None


def _link(asks: list[tuple[int, int]] | None = None) -> HostLink:
    return HostLink(1, _Transport(), None, window=WINDOW, block_size=4096,  # type: ignore[arg-type]
                    large=1 << 20, max_inflight=4, allow_pickle=False,
                    ask=None if asks is None else (lambda h, p: asks.append((h, p))))


async def _parked(link: HostLink, n: int) -> None:
    """Let the loop run until ``n`` senders are parked."""
    for _ in range(100):
        if link.stats().credit_parked == n:
            return
        await asyncio.sleep(0)
    raise AssertionError(f"expected {n} parked senders, have {link.stats().credit_parked}")

async def _two_parked() -> tuple[Any, asyncio.Task[None], asyncio.Task[None]]:
    """A link whose window is spent, with two senders parked for 400 bytes each."""
    link = _link()
    link.reserve_nowait(PID, WINDOW)
    first = asyncio.create_task(link.reserve(PID, 400))
    await _parked(link, 1)
    second = asyncio.create_task(link.reserve(PID, 400))
    await _parked(link, 2)
    return link, first, second



def _fields(data: bytes) -> tuple[str, Kind, int, Any, int]:
    return ("src", Kind.SHORT, 0, data, 3)


@pytest.mark.timeout(10)
async def test_grant_serves_parked_senders_in_order_for_what_it_covers() -> None:
    link = _link()
    link.reserve_nowait(PID, WINDOW)            # the whole window is out
    order: list[int] = []

    async def sender(i: int) -> None:
        await link.reserve(PID, 300)
        order.append(i)

    tasks = [asyncio.create_task(sender(i)) for i in range(4)]
    await _parked(link, 4)
    link.grant(PID, 700)                        # covers two of 300, not a third
    await asyncio.sleep(0)
    assert order == [0, 1]
    assert link.stats().credit_parked == 2
    link.grant(PID, 500)                        # 100 left + 500: two more
    await asyncio.gather(*tasks)
    assert order == [0, 1, 2, 3]


@pytest.mark.timeout(10)
async def test_newcomer_never_jumps_a_parked_sender() -> None:
    link = _link()
    link.reserve_nowait(PID, WINDOW - 100)      # 100 left
    big = asyncio.create_task(link.reserve(PID, 500))
    await _parked(link, 1)
    # 100 bytes of credit would cover a 50-byte message, but one is parked.
    with pytest.raises(WouldBlock):
        link.reserve_nowait(PID, 50)
    assert link.offer(PID, 50, _fields(b"x")) is False
    link.grant(PID, 400)
    await big
    assert link.stats().credit_parked == 0


@pytest.mark.timeout(10)
async def test_newcomer_to_another_destination_is_not_held_up() -> None:
    link = _link()
    link.reserve_nowait(PID, WINDOW)
    parked = asyncio.create_task(link.reserve(PID, 10))
    await _parked(link, 1)
    link.reserve_nowait(PID + 1, 500)           # another GP's credit: free
    parked.cancel()
    with pytest.raises(asyncio.CancelledError):
        await parked


@pytest.mark.timeout(10)
async def test_cancelled_head_passes_its_turn_on() -> None:
    link = _link()
    link.reserve_nowait(PID, WINDOW - 200)      # 200 left
    head = asyncio.create_task(link.reserve(PID, 600))
    await _parked(link, 1)
    small = asyncio.create_task(link.reserve(PID, 100))
    await _parked(link, 2)
    head.cancel()
    with pytest.raises(asyncio.CancelledError):
        await head
    await small                                 # served from the 200 the head could not use
    assert link.stats().credit_parked == 0


@pytest.mark.timeout(10)
async def test_cancel_after_grant_hands_the_credit_on() -> None:
    link, first, second = await _two_parked()
    link.grant(PID, 400)                        # reserved for `first` ...
    first.cancel()                              # ... which is cancelled before it runs
    with pytest.raises(asyncio.CancelledError):
        await first
    await second                                # got the credit `first` gave back
    with pytest.raises(WouldBlock):
        link.reserve_nowait(PID, 1)             # and nothing was created or lost


@pytest.mark.timeout(10)
async def test_message_larger_than_window_goes_once_whole_window_is_back() -> None:
    link = _link()
    link.reserve_nowait(PID, 10)
    huge = asyncio.create_task(link.reserve(PID, 3 * WINDOW))
    await _parked(link, 1)
    small = asyncio.create_task(link.reserve(PID, 10))
    await _parked(link, 2)                      # held behind the large head
    link.grant(PID, 10)                         # the whole window is back
    await huge
    assert link.stats().credit_parked == 1      # credit is negative now
    link.grant(PID, 2 * WINDOW + 10)
    await small


def test_message_larger_than_window_goes_at_once_on_an_idle_link() -> None:
    link = _link()
    link.reserve_nowait(PID, 5 * WINDOW)
    with pytest.raises(WouldBlock):
        link.reserve_nowait(PID, 1)


@pytest.mark.timeout(10)
async def test_parked_sender_asks_once_until_a_grant_comes() -> None:
    asks: list[tuple[int, int]] = []
    link = _link(asks)
    link.reserve_nowait(PID, WINDOW)
    tasks = [asyncio.create_task(link.reserve(PID, 300)) for _ in range(3)]
    await _parked(link, 3)
    assert asks == [(1, PID)]                   # one ask for the queue, not one per sender
    link.grant(PID, 300)                        # serves one, two still parked: ask again
    await _parked(link, 2)
    assert asks == [(1, PID), (1, PID)]
    link.grant(PID, 600)
    await asyncio.gather(*tasks)
    assert link.stats().credit_asks == 2


@pytest.mark.timeout(10)
async def test_failed_link_fails_every_parked_sender() -> None:
    link = _link()
    link.reserve_nowait(PID, WINDOW)
    tasks = [asyncio.create_task(link.reserve(PID, 10)) for _ in range(3)]
    await _parked(link, 3)
    link.fail(BrokenResourceError("host 1 is gone"))
    for t in tasks:
        with pytest.raises(BrokenResourceError, match="host 1 is gone"):
            await t
    with pytest.raises(BrokenResourceError):
        await link.reserve(PID, 10)


# ------------------------------------------------------------ pipe slots
@pytest.mark.timeout(10)
async def test_pipe_slots_go_to_parked_senders_in_order() -> None:
    pipe: Pipe[int] = Pipe(2)
    pipe.send_nowait(-1)
    pipe.send_nowait(-2)
    order: list[int] = []

    async def sender(i: int) -> None:
        await pipe.send(i)
        order.append(i)

    tasks = [asyncio.create_task(sender(i)) for i in range(3)]
    for _ in range(3):
        await asyncio.sleep(0)
    with pytest.raises(WouldBlock):
        pipe.send_nowait(99)                    # a newcomer waits behind them
    got = []
    while len(got) < 5:
        got.append(await pipe.receive())
    await asyncio.gather(*tasks)
    assert got == [-1, -2, 0, 1, 2]
    assert order == [0, 1, 2]


@pytest.mark.timeout(10)
async def test_pipe_slot_handed_to_a_sender_is_not_taken_by_a_newcomer() -> None:
    pipe: Pipe[int] = Pipe(1)
    pipe.send_nowait(0)
    parked = asyncio.create_task(pipe.send(1))
    await asyncio.sleep(0)
    assert pipe.receive_nowait() == 0           # frees the slot: handed to `parked`
    assert pipe.offer(0, 0, ("s", Kind.SHORT, 0, b"x", 1)) is False
    with pytest.raises(WouldBlock):
        pipe.send_nowait(2)
    await parked
    assert pipe.receive_nowait() == 1


# ------------------------------------------------ fairness (issue 28 item 3)
@pytest.mark.timeout(10)
async def test_senders_on_one_destination_share_each_grant_fairly() -> None:
    """Six senders loop on one destination whose reader returns a quarter
    window at a time: a sender that was just served and sends again must not
    spend the rest of the grant on the fast path before the others ran."""
    link = _link()
    link.reserve_nowait(PID, WINDOW)            # the whole window is out
    counts = [0] * 6

    async def sender(i: int) -> None:
        while True:
            try:                                # the router's order: fast path, then wait
                link.reserve_nowait(PID, 10)
            except WouldBlock:
                await link.reserve(PID, 10)
            counts[i] += 1

    tasks = [asyncio.create_task(sender(i)) for i in range(6)]
    await _parked(link, 6)
    for _ in range(40):
        link.grant(PID, WINDOW // 4)            # 25 messages' worth
        for _ in range(10):
            await asyncio.sleep(0)
    for t in tasks:
        t.cancel()
    await asyncio.gather(*tasks, return_exceptions=True)
    mean = sum(counts) / len(counts)
    assert sum(counts) >= 40 * 25 - 6, counts    # every grant was used
    assert all(mean / 2 <= c <= mean * 2 for c in counts), counts


@pytest.mark.timeout(10)
async def test_uncontended_destination_takes_the_fast_path() -> None:
    link = _link()
    for _ in range(WINDOW // 10):
        link.reserve_nowait(PID, 10)            # never parks, never waits a turn
    assert link.stats().credit_waits == 0


# ------------------------------- the gate itself, sans-I/O (aiopdbp.hosts.gate)
from hypothesis import given, settings, strategies as st  # noqa: E402

from aiopdbp.hosts import gate as pure_gate  # noqa: E402
from aiopdbp.hosts.gate import ParkingLot  # noqa: E402

try:
    from aiopdbp.hosts import cgate as compiled_gate  # type: ignore[attr-defined, unused-ignore]
except ImportError:
    compiled_gate = None

#: both forms of the credit rule: every gate and book test runs against each
FORMS = [pytest.param(pure_gate, id="pure"),
         pytest.param(compiled_gate, id="compiled",
                      marks=pytest.mark.skipif(compiled_gate is None, reason="the compiled gate is not built"))]

_EVENTS = st.lists(st.tuples(st.sampled_from(["send", "grant", "run", "cancel"]),
                             st.integers(1, 2 * WINDOW), st.integers(0, 10)), max_size=60)


@pytest.mark.timeout(300)   # a hang bound: 300 examples, CPU-bound (over 60 s at load 25-30)
@pytest.mark.parametrize("form", FORMS)
@settings(max_examples=300, deadline=None)
@given(_EVENTS)
def test_gate_serves_in_order_never_loses_credit_and_never_strands_a_covered_head(
        form: Any, events: list[tuple[str, int, int]]) -> None:
    """Events in any order: senders (admitted or parked), grants of what was
    taken, woken senders running, cancels.  The gate wakes in park order,
    the credit is exactly window - taken + returned, a head the credit
    covers is never left parked, and a sender parked past a grant has asked."""
    gate = form.CreditGate(WINDOW, clock=lambda: 0.0)
    out = 0                                   # bytes taken and not returned
    parked: list[tuple[object, int]] = []     # the model's FIFO
    woken: list[tuple[object, int]] = []      # served, not run yet
    order: list[object] = []
    asked = False

    def apply(wake: Any) -> None:
        nonlocal asked
        for tok in wake.tokens:
            assert parked and parked[0][0] is tok, "woken out of order"
            woken.append(parked.pop(0))
            order.append(tok)
        asked = asked or wake.ask

    for kind, n, k in events:
        if kind == "send":
            if gate.admit(PID, n):
                assert not gate.contended(PID) and not parked and not woken
                out += n
            else:
                tok = object()
                parked.append((tok, n))
                out += n                      # reserved now or when served
                apply(gate.park(PID, n, tok))
        elif kind == "grant":
            # only what was sent: not what parked or woken senders hold
            back = min(n, out - sum(m for _, m in parked) - sum(m for _, m in woken))
            if back > 0:
                out -= back
                asked = False
                apply(gate.grant(PID, back))
        elif kind == "run" and woken:
            woken.pop(k % len(woken))
            gate.resumed(PID)
        elif kind == "cancel" and (parked or woken):
            if woken and (k % 2 or not parked):
                tok, m = woken.pop(k % len(woken))
                apply(gate.cancel(PID, m, tok))
            else:
                tok, m = parked.pop(k % len(parked))
                apply(gate.cancel(PID, m, tok))
            out -= m
        waiting = sum(m for _, m in parked)
        assert gate.credit(PID) == WINDOW - (out - waiting)
        if parked:
            head = parked[0][1]
            assert gate.credit(PID) < min(head, WINDOW), "a covered head left parked"
            assert asked, "a parked sender that has not asked"
        assert gate.contended(PID) == bool(parked or woken)
        assert gate.parked() == len(parked)


@pytest.mark.parametrize("form", FORMS)
def test_failed_gate_hands_back_every_parked_token_and_is_open_again(form: Any) -> None:
    gate = form.CreditGate(WINDOW)
    assert gate.admit(PID, WINDOW)
    toks = [object(), object()]
    for t in toks:
        gate.park(PID, 10, t)
    assert gate.fail() == toks
    assert not gate.contended(PID) and gate.parked() == 0


def test_parking_lot_is_fifo_and_removes_from_anywhere() -> None:
    lot: ParkingLot[str] = ParkingLot()
    for name, need in [("a", 1), ("b", 2), ("c", 3)]:
        lot.park(name, need)
    assert lot.leave("b") and not lot.leave("b")
    assert lot.head_need() == 1 and lot.serve() == "a"
    assert lot.serve() == "c" and not lot


# ------------------------------------ the receiving side's book (CreditBook)
from aiopdbp.hosts.gate import LATER, NOW, SOON  # noqa: E402


@pytest.mark.parametrize("form", FORMS)
def test_book_returns_owed_credit_in_quarter_windows(form: Any) -> None:
    book = form.CreditBook(WINDOW)
    book.delivered(1, PID, 300)
    assert book.taken(1, PID, 100) == LATER and book.grants() == {}
    assert book.taken(1, PID, 200) == SOON
    assert book.grants() == {1: [(PID, 300)]}


@pytest.mark.parametrize("form", FORMS)
def test_book_answers_an_ask_once_the_reader_has_caught_up(form: Any) -> None:
    book = form.CreditBook(WINDOW)
    book.delivered(1, PID, 12)
    assert book.taken(1, PID, 8) == LATER
    assert book.ask(1, PID) == LATER             # 4 of ours still wait in the pipe, 8 < a 64th
    assert book.taken(1, PID, 4) == SOON
    assert book.grants() == {1: [(PID, 12)]}


@pytest.mark.parametrize("form", FORMS)
def test_book_answers_an_ask_once_a_64th_of_the_window_is_owed(form: Any) -> None:
    """A sender parked behind a host-mate's long queue (it started first)
    gets credit as the reader takes that host's messages, a 64th of the
    window at a time (``ASK_STEP``), not once the reader has caught up or a
    coarser step later."""
    book = form.CreditBook(WINDOW)
    book.delivered(1, PID, 500)
    assert book.taken(1, PID, 15) == LATER      # below a 64th, nobody asked
    assert book.ask(1, PID) == LATER             # asked, still below a 64th
    assert book.taken(1, PID, 1) == SOON        # 16 * 64 >= 1000, though 484 wait
    assert book.grants() == {1: [(PID, 16)]}
    assert book.taken(1, PID, 70) == LATER       # the grant answered the ask
    assert book.ask(1, PID) == SOON              # asked again: 70 owed goes at once
    assert book.grants() == {1: [(PID, 70)]}


@pytest.mark.parametrize("form", FORMS)
def test_book_returns_a_whole_window_at_once(form: Any) -> None:
    book = form.CreditBook(WINDOW)
    book.delivered(2, PID, 3 * WINDOW)
    assert book.taken(2, PID, 3 * WINDOW) == NOW
    assert book.grants() == {2: [(PID, 3 * WINDOW)]}


# ------------------------------------ the book's accounts (CreditAccount)
@pytest.mark.parametrize("form", FORMS)
def test_book_keeps_one_account_per_host_and_gp(form: Any) -> None:
    book = form.CreditBook(WINDOW)
    acct = book.account(1, PID)
    assert book.account(1, PID) is acct
    assert book.account(2, PID) is not acct and book.account(1, PID + 1) is not acct
    assert (acct.host, acct.pid) == (1, PID)


@pytest.mark.parametrize("form", FORMS)
def test_credit_marked_on_an_account_is_the_books(form: Any) -> None:
    """What a holder of the account marks is what the book answers for
    (host, GP): the same outstanding bytes, the same grant."""
    book = form.CreditBook(WINDOW)
    acct = book.account(1, PID)
    book.deliver(acct, 300)
    assert book.outstanding(1, PID) == 300
    assert book.take(acct, 300) == SOON
    assert book.grants() == {1: [(PID, 300)]} and book.outstanding(1, PID) == 0


@pytest.mark.parametrize("form", FORMS)
def test_account_shows_what_is_pending_owed_and_asked(form: Any) -> None:
    book = form.CreditBook(WINDOW)
    acct = book.account(1, PID)
    book.deliver(acct, 12)
    assert book.take(acct, 8) == LATER
    assert book.ask(1, PID) == LATER
    assert (acct.pending, acct.owed, acct.asked) == (4, 8, True)
    assert book.take(acct, 4) == SOON                # caught up: the ask is answered
    assert (acct.pending, acct.owed, acct.asked) == (0, 0, False)


@pytest.mark.parametrize("form", FORMS)
def test_marks_of_two_gps_from_one_host_go_to_each_gps_account(form: Any) -> None:
    """A pipe's marks hold one account per host; marks for another GP from
    the same host still owe that GP's credit (the held account follows)."""
    book, dues = form.CreditBook(WINDOW), []
    marks = form.PipeMarks(book, dues.append)
    marks.mark(1, PID, 300, 2)
    marks.mark(1, PID + 1, 260, 4)
    marks.mark(1, PID, 5, 5)
    assert (book.outstanding(1, PID), book.outstanding(1, PID + 1)) == (305, 260)
    assert marks.settle(None, 5, 1) == 1 << 62 and dues == [SOON, SOON]
    assert book.grants(everything=True) == {1: [(PID, 300), (PID + 1, 260), (PID, 5)]}


@pytest.mark.parametrize("form", FORMS)
def test_book_flushes_owed_credit_in_the_order_it_came_to_be_owed(form: Any) -> None:
    """At close, what is owed goes in the order it came to be owed: an
    account granted since owes again behind the others."""
    book = form.CreditBook(WINDOW)
    book.owe(1, PID, 10)
    book.owe(1, PID + 1, 10)
    assert book.owe(1, PID, 300) == SOON             # PID's debt is paid...
    book.owe(1, PID, 5)                              # ... and it owes again, last
    assert book.grants(everything=True) == {1: [(PID, 310), (PID + 1, 10), (PID, 5)]}


_FLOW = st.lists(st.tuples(st.sampled_from(["send", "arrive", "take", "flush", "grant", "ask"]),
                           st.integers(1, 3 * WINDOW // 2)), max_size=80)


@pytest.mark.parametrize("form", FORMS)
@settings(max_examples=300, deadline=None)
@given(_FLOW)
def test_book_admits_everything_an_honest_sender_sends(form: Any, events: list[tuple[str, int]]) -> None:
    """A sender by the gate's rule, a receiver by the book's, channels that
    delay in order: every message that arrives is within what the book says
    the sender was granted (admission by grant never refuses an honest peer),
    and the book never owes more than was delivered."""
    gate, book = form.CreditGate(WINDOW, clock=lambda: 0.0), form.CreditBook(WINDOW)
    data: list[int] = []      # in flight to the receiver
    pipe: list[int] = []      # delivered, not taken
    grants: list[int] = []    # in flight back to the sender
    for kind, n in events:
        if kind == "send" and gate.admit(PID, n):
            data.append(n)
        elif kind == "arrive" and data:
            m = data.pop(0)
            assert book.admits(1, PID, m), (book.outstanding(1, PID), m)
            book.delivered(1, PID, m)
            pipe.append(m)
        elif kind == "take" and pipe:
            book.taken(1, PID, pipe.pop(0))
        elif kind == "ask":
            book.ask(1, PID)
        elif kind == "flush":
            grants += [g for _, g in book.grants().get(1, [])]
            out = sum(data) + sum(grants) + book.outstanding(1, PID)
            assert out == WINDOW - gate.credit(PID)   # no credit made or lost
        elif kind == "grant" and grants:
            gate.grant(PID, grants.pop(0))
    assert not book.admits(1, PID, WINDOW + 1) or book.outstanding(1, PID) <= 0


@pytest.mark.parametrize("form", FORMS)
def test_book_refuses_a_size_beyond_what_it_granted(form: Any) -> None:
    book = form.CreditBook(WINDOW)
    book.delivered(1, PID, 600)
    assert book.admits(1, PID, 400)
    assert not book.admits(1, PID, 401)             # 1 byte past the window: a broken peer


_BOTH = st.lists(st.tuples(st.sampled_from(["admit", "park", "grant", "run", "cancel", "fail",
                                            "delivered", "taken", "ask", "owe", "grants", "flush"]),
                           st.integers(0, 2),
                           # sizes at the rule's edges (a quarter, a whole window) meet exactly
                           st.one_of(st.sampled_from([0, 1, 249, 250, 251, 500, 750, 999, 1000, 1001]),
                                     st.integers(0, 3 * WINDOW // 2)),
                           st.integers(0, 7)), max_size=80)


@pytest.mark.skipif(compiled_gate is None, reason="the compiled gate is not built")
@settings(max_examples=400, deadline=None)
@given(_BOTH)
def test_both_forms_of_the_gate_and_book_answer_every_event_alike(
        events: list[tuple[str, int, int, int]]) -> None:
    """Any events, honest or not, on a gate and a book of each form: every
    answer, every token woken (by its number), every query is the same."""
    def run(form: Any) -> list[object]:
        gate, book = form.CreditGate(WINDOW, clock=lambda: 1.5), form.CreditBook(WINDOW)
        toks: list[tuple[int, int, object]] = []     # (pid, need, token) parked or woken
        out: list[object] = []

        def wake(w: Any) -> tuple[list[int], bool]:
            return [next(i for i, (_, _, t) in enumerate(toks) if t is tok) for tok in w.tokens], w.ask
        for kind, pid, n, k in events:
            if kind == "admit":
                out.append(gate.admit(pid, n))
            elif kind == "park":
                tok = object()
                toks.append((pid, n, tok))
                out.append(wake(gate.park(pid, n, tok)))
            elif kind == "grant":
                out.append(wake(gate.grant(pid, n)))
            elif kind == "run":
                gate.resumed(pid)
            elif kind == "cancel" and toks:
                p, need, tok = toks[k % len(toks)]
                out.append(wake(gate.cancel(p, need, tok)))
            elif kind == "fail":
                out.append([next(i for i, (_, _, t) in enumerate(toks) if t is tok) for tok in gate.fail()])
            elif kind == "delivered":
                book.delivered(k % 3, pid, n)
            elif kind == "taken":
                out.append(book.taken(k % 3, pid, n))
            elif kind == "ask":
                out.append(book.ask(k % 3, pid))
            elif kind == "owe":
                out.append(book.owe(k % 3, pid, n))
            elif kind in ("grants", "flush"):
                out.append(book.grants(everything=kind == "flush"))
            out.append((gate.credit(pid), gate.contended(pid), gate.parked(), gate.short(), gate.least(),
                        gate.outstanding(), gate.waiting(), gate.waits, gate.asks, book.owed(),
                        book.outstanding(k % 3, pid), book.admits(k % 3, pid, n)))
        return out

    assert run(compiled_gate) == run(pure_gate)


def test_the_built_gate_is_current_and_chosen() -> None:
    from aiopdbp import ext
    from aiopdbp.hosts import gatecore
    if compiled_gate is None or not ext.core().get("gate", "").startswith("compiled"):
        pytest.skip("the compiled gate is not built here (or AIOPDBP_NO_EXTENSIONS is set)")
    assert gatecore.CreditGate is compiled_gate.CreditGate and gatecore.COMPILED


@pytest.mark.timeout(10)
async def test_grant_crossing_a_cancel_hands_the_credit_on() -> None:
    """A parked sender is cancelled (its future is done at once, its task
    handles the cancel a turn later) and a grant arrives in between: the
    credit served to it goes to the next sender, nothing raises or leaks."""
    link, first, second = await _two_parked()
    first.cancel()
    link.grant(PID, 400)
    with pytest.raises(asyncio.CancelledError):
        await first
    await asyncio.wait_for(second, 5)
    link.grant(PID, WINDOW - 400)
    link.grant(PID, 400)                        # all back: the destination is free again
    link.reserve_nowait(PID, WINDOW)


# ------------------------------------------------------- a pipe's marks
@pytest.mark.parametrize("form", FORMS)
def test_marks_owe_a_hosts_credit_once_the_reader_has_passed_them(form: Any) -> None:
    book, dues = form.CreditBook(WINDOW), []
    marks = form.PipeMarks(book, dues.append)
    assert marks.mark(1, PID, 10, 3) == 3         # the host's first mark: the pipe watches it
    assert marks.mark(1, PID, 10, 5) == 5         # the same GP, below a 64th of the window: it grows
    assert marks.mark(1, PID, 240, 9) == -1       # 20 * 64 >= the window: a mark of its own
    assert marks.mark(2, PID, 300, 6) == 6        # another host counts apart
    assert book.outstanding(1, PID) == 260 and book.outstanding(2, PID) == 300
    assert marks.settle(None, 4, 1) == 5 and dues == []          # not past the first mark yet
    assert marks.settle(None, 5, 1) == 9 and dues == []          # 20 owed, below a quarter
    assert marks.settle(None, 9, 1) == 1 << 62 and dues == [SOON]
    assert book.grants() == {1: [(PID, 260)]}
    assert marks.drain() == [(2, PID, 300)] and marks.settle(None, 99, 2) == 1 << 62


_MARKS = st.lists(st.tuples(st.sampled_from(["mark", "settle", "drain", "ask", "flush"]), st.integers(0, 2),
                            st.integers(0, 3), st.integers(1, 600)), max_size=80)


@pytest.mark.skipif(compiled_gate is None, reason="the compiled gate is not built")
@settings(max_examples=300, deadline=None)
@given(_MARKS)
def test_both_forms_of_the_marks_answer_alike(events: list[tuple[str, int, int, int]]) -> None:
    """The compiled marks (a C ring per host, grown as marks queue, and the
    account held per host) give the pure form's watches, dues, drained
    marks and grants for any sequence, asks and flushes among them."""
    def run(form: Any) -> list[Any]:
        book, dues = form.CreditBook(WINDOW), []
        marks = form.PipeMarks(book, dues.append)
        appended = 0
        taken = [0, 0, 0]
        out: list[Any] = []
        for op, host, pid, n in events:
            if op == "mark":
                appended += 1 + n % 3
                out.append(marks.mark(host, pid, n, appended))
            elif op == "settle":
                taken[host] = min(appended, taken[host] + n % 7)
                out.append(marks.settle(None, taken[host], host))
            elif op == "ask":   # the book's (host, GP) events meet the accounts the marks hold
                out.append(book.ask(host, pid))
            elif op == "flush":
                out.append(book.grants(everything=True))
            else:
                out.append(marks.drain())
            out.append((list(dues), book.grants(), book.owed()))
        return out

    assert run(compiled_gate) == run(pure_gate)


# ------------------------------------------------- placing arrivals (Placer)
from aiopdbp.wire.message import CREDIT_OVERHEAD  # noqa: E402

class _Pipe:
    """What the placer sees of a pipe: ``put_many``, ``appended``, the watch."""

    def __init__(self, closed: bool = False) -> None:
        self.closed = closed
        self.appended = 0
        self.got: list[Any] = []
        self.watch_at = 1 << 62
        self.on_watch: Any = None

    def put_many(self, items: list[Any], host: int) -> bool:
        if self.closed:
            return False
        self.got.append((host, items))
        self.appended += len(items)
        return True


class _Reader:
    """A reader whose frames say what ``read_one`` gives: ``("one", pid, n)`` or ``("runs",)``."""

    def read_one(self, buf: Any) -> Any:
        return None if buf[0] == "runs" else (buf[1], ("msg", buf[1], buf[2]), buf[2])


def _placer(form: Any, targets: dict[int, Any]) -> tuple[Any, list[Any]]:
    calls: list[Any] = []
    book = form.CreditBook(WINDOW)
    placer = form.Placer(_Reader(), targets, _Pipe, book, lambda due: calls.append(("due", due)),
                         lambda *a: calls.append(("other", *a)), lambda *a: calls.append(("runs", *a)))
    return placer, calls


@pytest.mark.parametrize("form", FORMS)
def test_placer_puts_a_lone_message_into_its_pipe_and_marks_it(form: Any) -> None:
    pipe = _Pipe()
    placer, calls = _placer(form, {PID: pipe})
    placer.place(1, ("one", PID, 8))
    assert pipe.got == [(1, [("msg", PID, 8)])] and calls == []
    assert pipe.watch_at == 1 and pipe.on_watch == placer.marks[pipe].settle
    assert placer.book.outstanding(1, PID) == 8 + CREDIT_OVERHEAD


@pytest.mark.parametrize("form", FORMS)
def test_placer_hands_a_message_with_no_open_pipe_on(form: Any) -> None:
    closed = _Pipe(closed=True)
    placer, calls = _placer(form, {PID: closed, PID + 1: object()})
    placer.place(1, ("one", PID, 8))
    placer.place(2, ("one", PID + 1, 3))
    placer.place(2, ("one", PID + 2, 0))
    assert calls == [("other", 1, PID, [("msg", PID, 8)], 8 + CREDIT_OVERHEAD),
                     ("other", 2, PID + 1, [("msg", PID + 1, 3)], 3 + CREDIT_OVERHEAD),
                     ("other", 2, PID + 2, [("msg", PID + 2, 0)], CREDIT_OVERHEAD)]
    assert placer.marks == {} and placer.book.outstanding(1, PID) == 0


@pytest.mark.parametrize("form", FORMS)
def test_placer_puts_one_message_into_an_open_pipe_and_says_whether_it_did(form: Any) -> None:
    pipe = _Pipe()
    placer, calls = _placer(form, {PID: pipe, PID + 1: _Pipe(closed=True), PID + 2: object()})
    assert placer.place_one(1, PID, "m", 100) is True
    assert pipe.got == [(1, ["m"])] and pipe.watch_at == 1 and placer.book.outstanding(1, PID) == 100
    # no open pipe: nothing done, nothing handed on (the caller's)
    assert [placer.place_one(1, p, "m", 5) for p in (PID + 1, PID + 2, PID + 3)] == [False, False, False]
    assert calls == [] and list(placer.marks) == [pipe]


@pytest.mark.parametrize("form", FORMS)
def test_placer_hands_a_frame_of_several_records_to_its_runs(form: Any) -> None:
    placer, calls = _placer(form, {PID: _Pipe()})
    placer.place(1, ("runs",))
    assert calls == [("runs", 1, ("runs",))]


_PLACES = st.lists(st.tuples(st.sampled_from(["one", "runs", "take", "mark"]), st.integers(0, 2),
                             st.integers(0, 3), st.integers(0, 5000)), max_size=80)


@pytest.mark.skipif(compiled_gate is None, reason="the compiled gate is not built")
@settings(max_examples=300, deadline=None)
@given(_PLACES)
def test_both_forms_of_the_placer_place_and_mark_alike(events: list[tuple[str, int, int, int]]) -> None:
    """Lone messages to open, closed and missing pipes, frames for the runs,
    marks of batches and the reader's takes (the pipe's ``on_watch``): the
    same puts, hand-offs, watches, dues and grants from both forms."""
    def run(form: Any) -> list[Any]:
        pipes = {0: _Pipe(), 1: _Pipe(), 2: _Pipe(closed=True)}   # GP 3: no pipe here
        placer, calls = _placer(form, dict(pipes))
        taken = {0: 0, 1: 0}
        out: list[Any] = []
        for op, host, pid, n in events:
            if op == "one":
                placer.place(host, ("one", pid, n))
            elif op == "runs":
                placer.place(host, ("runs",))
            elif op == "mark" and pid < 2:   # a batch the runs put
                pipes[pid].put_many([n], host)
                placer.mark(pipes[pid], host, pid, n)
            elif op == "take" and pid < 2 and pipes[pid].on_watch is not None:
                taken[pid] = min(pipes[pid].appended, taken[pid] + 1 + n % 4)
                if taken[pid] >= pipes[pid].watch_at:
                    pipes[pid].watch_at = pipes[pid].on_watch(pipes[pid], taken[pid], host)
            out.append((list(calls), [(p.got, p.watch_at) for p in pipes.values()],
                        placer.book.grants(), placer.book.owed()))
        return out

    assert run(compiled_gate) == run(pure_gate)
