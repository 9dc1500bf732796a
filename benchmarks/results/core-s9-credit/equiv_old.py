"""The new CreditBook / PipeMarks (accounts) against the old ones (tuple keys): every
answer, grant (in order), query and drained mark alike for any events.

    PYTHONPATH=/work/wt/cred11 python equiv_old.py /tmp/cred11-base/aiopdbp/hosts/gate.py [examples]

Compares the old pure form with the new pure form and the new compiled form."""
import importlib.util
import sys
from typing import Any

from hypothesis import given, settings, strategies as st

from aiopdbp.hosts import gate as new_pure

spec = importlib.util.spec_from_file_location("old_gate", sys.argv[1])
old = importlib.util.module_from_spec(spec)
spec.loader.exec_module(old)
try:
    from aiopdbp.hosts import cgate as new_c
except ImportError:
    new_c = None
FORMS = [f for f in (new_pure, new_c) if f is not None]
N = int(sys.argv[2]) if len(sys.argv) > 2 else 3000
W = 1000
SIZES = st.one_of(st.sampled_from([0, 1, 15, 16, 249, 250, 251, 500, 750, 999, 1000, 1001]),
                  st.integers(0, 3 * W // 2))
BOOK = st.lists(st.tuples(st.sampled_from(["delivered", "taken", "ask", "owe", "grants", "flush"]),
                          st.integers(0, 2), SIZES, st.integers(0, 2)), max_size=120)
MARKS = st.lists(st.tuples(st.sampled_from(["mark", "settle", "drain", "ask", "owe", "flush"]),
                           st.integers(0, 2), st.integers(0, 3), st.integers(0, 600)), max_size=120)


def book_run(form: Any, events: list) -> list:
    book, out = form.CreditBook(W), []
    for kind, pid, n, host in events:
        if kind == "delivered":
            out.append(book.delivered(host, pid, n))
        elif kind == "taken":
            out.append(book.taken(host, pid, n))
        elif kind == "ask":
            out.append(book.ask(host, pid))
        elif kind == "owe":
            out.append(book.owe(host, pid, n))
        else:
            out.append(book.grants(everything=kind == "flush"))
        out.append((book.owed(), [book.outstanding(h, p) for h in range(3) for p in range(3)],
                    book.admits(host, pid, n)))
    out.append(book.grants(everything=True))
    return out


def marks_run(form: Any, events: list) -> list:
    book, dues = form.CreditBook(W), []
    marks = form.PipeMarks(book, dues.append)
    appended, taken, out = 0, [0, 0, 0], []
    for op, host, pid, n in events:
        if op == "mark":
            appended += 1 + n % 3
            out.append(marks.mark(host, pid, n, appended))
        elif op == "settle":
            taken[host] = min(appended, taken[host] + n % 7)
            out.append(marks.settle(None, taken[host], host))
        elif op == "drain":
            out.append(marks.drain())
        elif op == "ask":
            out.append(book.ask(host, pid))
        elif op == "owe":
            out.append(book.owe(host, pid, n))
        else:
            out.append(book.grants(everything=True))
        out.append((list(dues), book.grants(), book.owed(),
                    [book.outstanding(h, p) for h in range(3) for p in range(4)]))
    return out


@settings(max_examples=N, deadline=None)
@given(BOOK)
def test_book(events: list) -> None:
    want = book_run(old, events)
    for f in FORMS:
        assert book_run(f, events) == want, f


@settings(max_examples=N, deadline=None)
@given(MARKS)
def test_marks(events: list) -> None:
    want = marks_run(old, events)
    for f in FORMS:
        assert marks_run(f, events) == want, f


test_book()
test_marks()
print("old == new for", [f.__name__ for f in FORMS], "examples", N, "each")
