"""A received :class:`~aiopdbp.wire.message.Message`'s named fields
(:mod:`aiopdbp.wire.fields`) and their compiled twin
(``aiopdbp.wire.cfields``): every test runs against both forms, on a tuple
subclass made as ``Message`` is."""

from __future__ import annotations

import pickle
from types import ModuleType
from typing import Any

import pytest

from aiopdbp.wire import fields as pure_fields
from aiopdbp.wire.message import Message
from aiopdbp.wire.mesp import Kind

try:
    from aiopdbp.wire import cfields as compiled_fields  # type: ignore[attr-defined, unused-ignore]
except ImportError:
    compiled_fields = None

#: both forms: every test runs against each
FORMS = [pytest.param(pure_fields, id="pure"),
         pytest.param(compiled_fields, id="compiled",
                      marks=pytest.mark.skipif(compiled_fields is None, reason="the compiled form is not built"))]

pytestmark = pytest.mark.timeout(30)


def _record(form: ModuleType) -> type[tuple[Any, ...]]:
    class Record(tuple):  # type: ignore[type-arg]
        __slots__ = ()
        source = form.field(0)
        kind = form.field(1)
        com = form.field(2)
        data = form.field(3)
        source_pid = form.field(4)
    return Record


@pytest.mark.parametrize("form", FORMS)
def test_each_field_reads_its_item(form: ModuleType) -> None:
    r = _record(form)(("gp.a", Kind.COMMAND, 7, b"xy", 12))
    assert (r.source, r.kind, r.com, r.data, r.source_pid) == ("gp.a", Kind.COMMAND, 7, b"xy", 12)
    assert [type(r).__dict__[n].__doc__ for n in form.NAMES] == list(pure_fields.DOCS)


@pytest.mark.parametrize("form", FORMS)
def test_a_field_past_a_short_tuple_raises_index_error(form: ModuleType) -> None:
    r = _record(form)(("gp.a", Kind.SHORT))
    assert r.kind is Kind.SHORT
    with pytest.raises(IndexError):
        r.data


@pytest.mark.parametrize("form", FORMS)
def test_a_field_cannot_be_set_or_asked_for_past_five(form: ModuleType) -> None:
    r = _record(form)(("gp.a", Kind.SHORT, 0, None, 1))
    with pytest.raises(AttributeError):
        r.source = "gp.b"  # type: ignore[misc]
    with pytest.raises(ValueError):
        form.field(5)


def test_message_reads_its_fields_with_the_form_that_runs() -> None:
    # the compiled getter where the core is compiled (not the pure property)
    from aiopdbp import ext
    compiled = ext.core().get("fields", "").startswith("compiled")
    assert (type(Message.__dict__["data"]) is not property) == compiled
    m = Message(("gp.a", Kind.SHORT, 3, b"x", 9))
    back = pickle.loads(pickle.dumps(m))
    assert type(back) is Message and (back.source, back.com, back.data, back.source_pid) == ("gp.a", 3, b"x", 9)
