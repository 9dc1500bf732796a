"""Tests of aiopdbp.hosts.tables: NTA/PTA/MTA behind the single update point Tables.apply."""

from __future__ import annotations

from typing import Any

import pytest

from aiopdbp import DuplicateProcessError, NodeType, PDBPError, PType, Tables, UnknownProcessError
from aiopdbp.hosts.tables import ProcReg, Update

pytestmark = pytest.mark.timeout(10)

UPDATES: list[tuple[str, tuple[Any, ...]]] = [
    ("node_add", (0, "host0", "10.0.0.1", int(NodeType.MASTER))),
    ("node_add", (1, "host1", "10.0.0.2", int(NodeType.COMPUTE))),
    ("proc_reg", ("producer", int(PType.CPU), 0)),
    ("proc_reg", ("consumer", int(PType.GPU), 1)),
    ("pipe_bind", (2, 7)),
]


def _tables(updates: list[tuple[str, tuple[Any, ...]]]) -> Tables:
    tables = Tables()
    for op, args in updates:
        tables.apply(op, args)
    return tables


def test_apply_increments_version_per_update() -> None:
    tables = Tables()
    assert tables.version == 0
    for n, (op, args) in enumerate(UPDATES, 1):
        tables.apply(op, args)
        assert tables.version == n


def test_apply_changes_digest_on_every_update() -> None:
    tables = Tables()
    seen = {tables.digest}
    for op, args in UPDATES:
        tables.apply(op, args)
        assert tables.digest not in seen
        seen.add(tables.digest)


def test_apply_notifies_subscribers_with_op_typed_update_and_result() -> None:
    tables = Tables()
    calls: list[tuple[str, Update, Any]] = []
    tables.subscribe(lambda op, update, result: calls.append((op, update, result)))
    pid = tables.apply("proc_reg", ["a", int(PType.CPU), 0])  # a list is accepted as well
    assert calls == [("proc_reg", ProcReg("a", int(PType.CPU), 0, None, None), pid)]
    update = calls[0][1]
    assert type(update) is ProcReg and update.name == "a" and update.node == 0 and update.pipe is None


def test_an_update_of_the_wrong_arity_is_refused_and_changes_nothing() -> None:
    tables = _tables(UPDATES)
    before = tables.snapshot()
    with pytest.raises(PDBPError, match="'pipe_bind' with 3 arguments: PipeBind has 2"):
        tables.apply("pipe_bind", (2, 7, 9))
    assert tables.snapshot() == before


def test_same_updates_give_equal_digest_and_snapshot() -> None:
    a, b = _tables(UPDATES), _tables(UPDATES)
    assert a.digest == b.digest
    assert a.snapshot() == b.snapshot()


def test_different_update_order_gives_different_digest() -> None:
    first = _tables([UPDATES[0], UPDATES[1]])
    swapped = _tables([UPDATES[1], UPDATES[0]])
    # Same content, but the update history differs: the digest must tell.
    assert first.snapshot()["nta"] == swapped.snapshot()["nta"]
    assert first.digest != swapped.digest


def test_snapshot_reflects_content() -> None:
    snap = _tables(UPDATES).snapshot()
    assert snap["version"] == len(UPDATES)
    assert snap["nta"] == [(0, "host0", "10.0.0.1", 1), (1, "host1", "10.0.0.2", 0)]
    assert snap["pta"] == [(1, "producer", 0, 0, None), (2, "consumer", 1, 1, 7)]


def test_pid_assignment_sequential_from_one() -> None:
    tables = Tables()
    assert [tables.apply("proc_reg", (n, int(PType.CPU), 0)) for n in "abc"] == [1, 2, 3]
    assert tables.pid_of("b") == 2
    assert tables.name_of(3) == "c"


def test_pid_assignment_deterministic_across_tables() -> None:
    ops = [("proc_reg", ("a", 0, 0)), ("proc_reg", ("b", 0, 1)), ("proc_free", (1,)),
           ("proc_reg", ("c", 0, 0))]
    a, b = _tables(ops), _tables(ops)
    assert a.by_name == b.by_name == {"b": 2, "c": 3}  # a freed pid is not reused


def test_duplicate_name_raises_and_leaves_tables_unchanged() -> None:
    tables = _tables([("proc_reg", ("a", 0, 0))])
    before = tables.snapshot()
    with pytest.raises(DuplicateProcessError) as info:
        tables.apply("proc_reg", ("a", 0, 1))
    assert info.value.name == "a"
    assert isinstance(info.value, PDBPError)
    assert tables.snapshot() == before


def test_unknown_op_raises_pdbperror_and_leaves_tables_unchanged() -> None:
    tables = Tables()
    before = tables.snapshot()
    for op in ("no_such_op", "snapshot", "__init__", ""):
        with pytest.raises(PDBPError):
            tables.apply(op, ())
    assert tables.snapshot() == before


def test_free_unknown_pid_raises_unknownprocesserror() -> None:
    with pytest.raises(UnknownProcessError):
        Tables().apply("proc_free", (42,))


def test_pid_of_unknown_name_raises_unknownprocesserror() -> None:
    with pytest.raises(UnknownProcessError):
        Tables().pid_of("nobody")


def test_proc_free_removes_row_and_name() -> None:
    tables = _tables([("proc_reg", ("a", 0, 0))])
    tables.apply("proc_free", (1,))
    assert tables.pta == {} and tables.by_name == {}


def test_pipe_bind_and_release_update_pn() -> None:
    tables = _tables([("proc_reg", ("a", 0, 0))])
    tables.apply("pipe_bind", (1, 5))
    assert tables.process(1).pipe == 5
    assert tables.apply("pipe_release", (1,)) == 5
    assert tables.process(1).pipe is None


def test_stream_bindings_are_not_table_updates() -> None:
    # The MTA is per host (aiopdbp.streams.table): a stream is bound by its two
    # hosts, never through the replicated tables.
    with pytest.raises(PDBPError, match="unknown table update 'stream_bind'"):
        Tables().apply("stream_bind", (0, 3, 2, 1, 100))


def test_processes_on_lists_rows_of_one_node() -> None:
    tables = _tables(UPDATES)
    assert [p.name for p in tables.processes_on(1)] == ["consumer"]


def test_every_hosts_row_is_added_in_one_update() -> None:
    tables = Tables()
    rows = [[0, "h0", "10.0.0.1", int(NodeType.MASTER)], [1, "h1", "10.0.0.2", int(NodeType.COMPUTE)]]
    assert tables.apply("nodes_add", (rows,)) == 2
    assert tables.version == 1
    assert [(n.nid, n.ntype) for n in tables.nta.values()] == [(0, NodeType.MASTER), (1, NodeType.COMPUTE)]


def test_a_host_table_with_an_unknown_node_type_adds_no_row() -> None:
    tables = Tables()
    with pytest.raises(PDBPError, match="node type 7"):
        tables.apply("nodes_add", ([[0, "h0", "10.0.0.1", 0], [1, "h1", "10.0.0.2", 7]],))
    assert tables.nta == {}
