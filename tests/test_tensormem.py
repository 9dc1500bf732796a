"""A CPU tensor's memory as an ndarray without ``t.numpy()``
(aiopdbp.tensormem.view and its compiled twin aiopdbp.tensormem.cview): every test
runs on both forms, and both make the same arrays."""

from __future__ import annotations

import gc
import warnings
import weakref
from typing import Any

import numpy as np
import pytest

from aiopdbp import arrays
from aiopdbp.tensormem import view as pure_memory

torch = pytest.importorskip("torch")

try:
    from aiopdbp.tensormem import cview as compiled_memory  # type: ignore[attr-defined, unused-ignore]
except ImportError:
    compiled_memory = None

#: both forms: every test runs against each
FORMS = [pytest.param(pure_memory, id="pure"),
         pytest.param(compiled_memory, id="compiled",
                      marks=pytest.mark.skipif(compiled_memory is None, reason="tensormem.cview is not built"))]

# torch dtype -> the dtype its ndarray gets (the ml_dtypes family: its bits, as arrays tags them)
DTYPES = [(torch.float32, np.dtype("<f4")), (torch.float64, np.dtype("<f8")), (torch.float16, np.dtype("<f2")),
          (torch.int64, np.dtype("<i8")), (torch.int8, np.dtype("|i1")), (torch.uint8, np.dtype("|u1")),
          (torch.bool, np.dtype("|b1")), (torch.complex64, np.dtype("<c8")),
          (torch.bfloat16, np.dtype("<u2")), (torch.float8_e4m3fn, np.dtype("|u1")),
          (torch.float8_e5m2, np.dtype("|u1"))]


def _view(form: Any, t: Any, dt: np.dtype[Any]) -> Any:
    return form.tensor_array(t, dt, torch.strided, t.dtype.is_complex)


@pytest.mark.parametrize("form", FORMS)
@pytest.mark.parametrize("tdtype, dt", DTYPES, ids=[str(d) for d, _ in DTYPES])
def test_every_dtype_is_viewed_over_the_tensors_memory(form: Any, tdtype: Any, dt: np.dtype[Any]) -> None:
    t = torch.arange(12).reshape(3, 4).to(tdtype)
    tagged = np.dtype(dt.str, metadata={"aiopdbp": ("torch", "x")})
    arr = _view(form, t, tagged)
    assert type(arr) is np.ndarray and arr.dtype is tagged and arr.shape == (3, 4)
    assert arr.flags.c_contiguous and arr.flags.writeable and arr.flags.aligned
    assert arr.tobytes() == t.view(torch.uint8).numpy().tobytes()
    assert arr.ctypes.data == t.data_ptr()  # no copy


@pytest.mark.parametrize("form", FORMS)
def test_a_write_to_the_array_is_a_write_to_the_tensor(form: Any) -> None:
    t = torch.zeros(4, dtype=torch.int32)
    _view(form, t, np.dtype("<i4"))[2] = 7
    assert t.tolist() == [0, 0, 7, 0]


@pytest.mark.parametrize("form", FORMS)
def test_the_array_keeps_the_tensor_alive(form: Any) -> None:
    t = torch.arange(1000, dtype=torch.float64)
    gone = weakref.ref(t)
    arr = _view(form, t, np.dtype("<f8"))
    del t
    gc.collect()
    assert gone() is not None and arr[999] == 999.0
    del arr
    gc.collect()
    assert gone() is None  # and lets it go with the array


@pytest.mark.parametrize("form", FORMS)
def test_views_keep_their_offset_and_shape(form: Any) -> None:
    base = torch.arange(24, dtype=torch.int16)
    t = base[6:18].view(3, 4)  # contiguous, at an offset into its storage
    arr = _view(form, t, np.dtype("<i2"))
    assert arr.shape == (3, 4) and arr.tolist() == t.tolist()
    s = torch.tensor(5.0)  # 0-d
    a0 = _view(form, s, np.dtype("<f4"))
    assert a0.shape == () and float(a0) == 5.0


@pytest.mark.parametrize("form", FORMS)
@pytest.mark.parametrize("make", [
    lambda: torch.ones(3, requires_grad=True),
    lambda: torch._neg_view(torch.ones(3)),
    lambda: torch.ones(3, dtype=torch.complex64).conj(),
    lambda: torch.arange(12.).reshape(3, 4).T,
    lambda: torch.ones(0),
    lambda: torch.ones(3).to_sparse(),
    lambda: torch.ones(3, device="meta"),
], ids=["requires_grad", "neg", "conj", "non-contiguous", "empty", "sparse", "meta"])
def test_what_it_cannot_view_as_it_is_is_left_to_the_general_path(form: Any, make: Any) -> None:
    t = make()
    assert _view(form, t, np.dtype("<f4")) is None


@pytest.mark.parametrize("form", FORMS)
def test_a_nested_tensor_is_left_to_the_general_path(form: Any) -> None:
    with warnings.catch_warnings():  # (torch warns, once, that the strided nested layout is a prototype)
        warnings.simplefilter("ignore", UserWarning)
        t = torch.nested.nested_tensor([torch.ones(2), torch.ones(3)])
    assert _view(form, t, np.dtype("<f4")) is None


def test_a_tensors_send_makes_no_torch_numpy_call(monkeypatch: pytest.MonkeyPatch) -> None:
    arrays.host_array(torch.arange(8, dtype=torch.float32))  # (the first tensor of a dtype makes its plan)

    def no_numpy(self: Any, *args: Any, **kwargs: Any) -> Any:
        raise AssertionError("t.numpy() called")

    monkeypatch.setattr(torch.Tensor, "numpy", no_numpy)
    for x in (torch.arange(8, dtype=torch.float32), torch.arange(6, dtype=torch.float32).reshape(2, 3)):
        arr = arrays.cpu_tensor_array(x)
        assert arr is not None and arr.tolist() == x.tolist() and arrays.wire_name(arr.dtype) == "<f4;torch"


@pytest.mark.parametrize("form", FORMS)
def test_tensor_of_takes_a_writable_array_of_a_known_dtype_object(form: Any) -> None:
    tagged = np.dtype("<f4", metadata={"aiopdbp": ("torch", "<f4")})
    known = {id(tagged): tagged}
    arr = np.arange(4, dtype=np.float32).view(tagged)
    t = form.tensor_of(arr, known, torch.from_numpy)
    assert type(t) is torch.Tensor and t.tolist() == [0, 1, 2, 3]
    t[0] = 5
    assert arr[0] == 5  # over the array's memory


@pytest.mark.parametrize("form", FORMS)
def test_tensor_of_leaves_everything_else_to_the_general_path(form: Any) -> None:
    tagged = np.dtype("<f4", metadata={"aiopdbp": ("torch", "<f4")})
    known = {id(tagged): tagged}
    plain = np.arange(4, dtype=np.float32)  # its dtype equals the tagged one, but is not it
    frozen = plain.view(tagged)
    frozen.flags.writeable = False
    sub = plain.view(tagged).view(np.ma.MaskedArray)
    for arr in (plain, frozen, sub, b"1234", None):
        assert form.tensor_of(arr, known, torch.from_numpy) is None


def test_the_built_twin_is_current_and_chosen() -> None:
    from aiopdbp import ext
    if compiled_memory is None or not ext.core().get("tensormem", "").startswith("compiled"):
        pytest.skip("tensormem.cview is not built here (or AIOPDBP_NO_EXTENSIONS is set)")
    assert arrays._tensor_array is compiled_memory.tensor_array
    assert type(arrays._paths) is compiled_memory.TensorPaths


@pytest.mark.parametrize("form", FORMS)
def test_bind_says_whether_the_form_uses_dlpacks_c_exchange_api(form: Any) -> None:
    # the compiled form where torch has the API (2.9 and later); the pure form never
    has_api = "__dlpack_c_exchange_api__" in torch.Tensor.__dict__
    assert form.bind(torch.Tensor) is (form is compiled_memory and has_api)
    assert form.bind(int) is False  # a type without the API changes nothing


def _bound_compiled() -> Any:
    if compiled_memory is None or not compiled_memory.bind(torch.Tensor):
        pytest.skip("the compiled form is not built, or this torch has no __dlpack_c_exchange_api__")
    return compiled_memory


def test_a_bound_tensor_is_described_by_dlpack_not_by_attribute_reads(monkeypatch: pytest.MonkeyPatch) -> None:
    form = _bound_compiled()

    def no_read(self: Any, *args: Any, **kwargs: Any) -> Any:
        raise AssertionError("read by attribute")

    t = torch.arange(12, dtype=torch.int32).reshape(3, 4)
    for name in ("is_contiguous", "data_ptr"):
        monkeypatch.setattr(torch.Tensor, name, no_read)
    arr = _view(form, t, np.dtype("<i4"))
    assert arr.shape == (3, 4) and arr.tolist() == t.tolist() and arr.base is t


@pytest.mark.parametrize("tdtype", [torch.float32, torch.uint8])
def test_a_bound_tensors_flags_are_read_by_torchs_own_functions_not_looked_up(
        monkeypatch: pytest.MonkeyPatch, tdtype: Any) -> None:
    # (bind() finds the C functions behind is_neg() and requires_grad once; a
    # name looked up on each tensor would find these stand-ins)
    form = _bound_compiled()

    def no_read(self: Any, *args: Any, **kwargs: Any) -> Any:
        raise AssertionError("looked up by name")

    plain, neg = torch.arange(4).to(tdtype), torch.arange(4).to(tdtype)._neg_view()
    monkeypatch.setattr(torch.Tensor, "is_neg", no_read)
    monkeypatch.setattr(torch.Tensor, "requires_grad", property(no_read))
    dt = np.dtype(plain.numpy().dtype.str)
    arr, refused = _view(form, plain, dt), _view(form, neg, dt)
    monkeypatch.undo()
    assert arr is not None and arr.ctypes.data == plain.data_ptr() and refused is None
    grad = torch.arange(4.0, requires_grad=True)
    assert _view(form, grad, np.dtype("<f4")) is None  # (the flag is read still)


@pytest.mark.parametrize("form", FORMS)
def test_a_tensor_subclass_is_viewed_by_its_attributes(form: Any) -> None:
    class Sub(torch.Tensor):  # (the exchange API is for exactly the type it was found on)
        pass

    form.bind(torch.Tensor)
    t = torch.arange(6, dtype=torch.float32).as_subclass(Sub)
    arr = _view(form, t, np.dtype("<f4"))
    assert arr.tolist() == [0, 1, 2, 3, 4, 5] and arr.ctypes.data == t.data_ptr()
    assert _view(form, t[::2], np.dtype("<f4")) is None  # and its non-contiguous views left to the general path


def test_a_bound_arrival_is_made_by_dlpack_and_holds_the_array() -> None:
    form = _bound_compiled()
    tagged = np.dtype("<i8", metadata={"aiopdbp": ("torch", "<i8")})
    known = {id(tagged): tagged}

    def no_from_numpy(arr: Any) -> Any:
        raise AssertionError("from_numpy called")

    base = np.arange(12, dtype=np.int64)
    gone = weakref.ref(base)
    t = form.tensor_of(base.reshape(3, 4).view(tagged), known, no_from_numpy)
    assert type(t) is torch.Tensor and t.dtype is torch.int64 and t.shape == (3, 4) and t.is_contiguous()
    assert t.data_ptr() == base.ctypes.data and t[2, 3].item() == 11
    del base
    gc.collect()
    assert gone() is not None  # the tensor holds the array's memory
    del t
    gc.collect()
    assert gone() is None  # and lets it go with itself


@pytest.mark.parametrize("tdtype", [torch.float32, torch.float16, torch.float64, torch.complex64, torch.bool,
                                    torch.int8, torch.uint8, torch.int16, torch.int64])
def test_a_bound_arrival_keeps_the_dtype(tdtype: Any) -> None:
    form = _bound_compiled()
    src = torch.arange(6).reshape(2, 3).to(tdtype)
    dt = src.numpy().dtype
    tagged = np.dtype(dt.str, metadata={"aiopdbp": ("torch", dt.str)})
    got = form.tensor_of(src.numpy().copy().view(tagged), {id(tagged): tagged}, torch.from_numpy)
    assert got.dtype is tdtype and torch.equal(got, src)


# ---------------------------------------------------------------- TensorPaths


class _General:
    """A TensorPaths' general paths, recording what reached them."""

    def __init__(self) -> None:
        self.sent: list[Any] = []
        self.arrived: list[tuple[Any, str]] = []

    def send(self, t: Any) -> Any:
        self.sent.append(t)
        return "general"

    def arrive(self, arr: Any, kind: str) -> Any:
        self.arrived.append((arr, kind))
        return "general"


def _paths(form: Any, known: dict[int, np.dtype[Any]] | None = None) -> tuple[Any, _General]:
    general = _General()
    form.bind(torch.Tensor)
    paths = form.TensorPaths(general.send, general.arrive, {} if known is None else known)
    paths.track(torch.Tensor, torch.strided)
    return paths, general


def _tagged(dt: np.dtype[Any]) -> np.dtype[Any]:
    return np.dtype(dt.str, metadata={"aiopdbp": ("torch", dt.str)})


@pytest.mark.parametrize("form", FORMS)
@pytest.mark.parametrize("tdtype, dt", DTYPES, ids=[str(d) for d, _ in DTYPES])
def test_paths_send_views_a_tensor_of_a_planned_dtype(form: Any, tdtype: Any, dt: np.dtype[Any]) -> None:
    paths, general = _paths(form)
    t = torch.arange(12).reshape(3, 4).to(tdtype)
    tagged = _tagged(dt)
    paths.add_plan(t, tagged, t.dtype.is_complex)
    arr = paths.send(torch.arange(12).reshape(3, 4).to(tdtype))  # another tensor of that dtype
    assert type(arr) is np.ndarray and arr.dtype is tagged and arr.shape == (3, 4) and not general.sent
    assert arr.tobytes() == t.view(torch.uint8).numpy().tobytes()


@pytest.mark.parametrize("form", FORMS)
def test_paths_send_leaves_other_types_and_unplanned_dtypes(form: Any) -> None:
    paths, general = _paths(form)
    assert paths.send(np.arange(3)) is None and paths.send(b"x") is None and not general.sent
    t = torch.arange(3, dtype=torch.int16)  # no plan for int16
    assert paths.send(t) == "general" and general.sent == [t]


@pytest.mark.parametrize("form", FORMS)
@pytest.mark.parametrize("make", [
    lambda: torch.ones(3, requires_grad=True),
    lambda: torch._neg_view(torch.ones(3)),
    lambda: torch.arange(12.).reshape(3, 4).T,
    lambda: torch.ones(0),
    lambda: torch.ones(3).to_sparse(),
    lambda: torch.ones(3, device="meta"),
], ids=["requires_grad", "neg", "non-contiguous", "empty", "sparse", "meta"])
def test_paths_send_leaves_what_it_cannot_view_to_the_general_path(form: Any, make: Any) -> None:
    paths, general = _paths(form)
    paths.add_plan(torch.ones(1), _tagged(np.dtype("<f4")), False)
    t = make()
    assert paths.send(t) == "general" and general.sent == [t]


@pytest.mark.parametrize("form", FORMS)
@pytest.mark.parametrize("name, base", [("bfloat16", "<u2"), ("float16", "<f2"), ("float8_e4m3fn", "|u1"),
                                        ("complex64", "<c8")])
def test_paths_send_leaves_a_tensor_of_each_float_kind_that_requires_grad_to_the_general_path(
        form: Any, name: str, base: str) -> None:
    paths, general = _paths(form)
    tdt = getattr(torch, name)
    paths.add_plan(torch.zeros(1).to(tdt), _tagged(np.dtype(base)), tdt.is_complex)
    t = torch.zeros(3).to(tdt).requires_grad_()
    assert paths.send(t) == "general" and general.sent == [t]


@pytest.mark.parametrize("form", FORMS)
@pytest.mark.parametrize("name", ["uint8", "int64", "bool"])
def test_paths_send_leaves_a_negative_view_of_an_integer_or_bool_tensor_to_the_general_path(
        form: Any, name: str) -> None:
    paths, general = _paths(form)
    tdt = getattr(torch, name)
    paths.add_plan(torch.zeros(1, dtype=tdt), _tagged(np.dtype(str(torch.zeros(1, dtype=tdt).numpy().dtype))), False)
    t = torch._neg_view(torch.zeros(3, dtype=tdt))
    assert paths.send(t) == "general" and general.sent == [t]


@pytest.mark.parametrize("form", FORMS)
def test_paths_send_leaves_a_conjugate_view_to_the_general_path(form: Any) -> None:
    paths, general = _paths(form)
    paths.add_plan(torch.ones(1, dtype=torch.complex64), _tagged(np.dtype("<c8")), True)
    t = torch.ones(3, dtype=torch.complex64).conj()
    assert paths.send(t) == "general" and general.sent == [t]
    assert type(paths.send(t.resolve_conj())) is np.ndarray


def test_paths_send_finds_a_bound_tensors_plan_by_its_dlpack_code(monkeypatch: pytest.MonkeyPatch) -> None:
    form = _bound_compiled()
    paths, general = _paths(form)
    tagged = _tagged(np.dtype("<u2"))
    paths.add_plan(torch.ones(1, dtype=torch.bfloat16), tagged, False)

    def no_read(self: Any) -> Any:
        raise AssertionError("t.dtype read")

    t = torch.arange(4, dtype=torch.bfloat16)
    monkeypatch.setattr(torch.Tensor, "dtype", property(no_read))
    arr = paths.send(t)
    monkeypatch.undo()
    assert arr.dtype is tagged and arr.tobytes() == t.view(torch.int16).numpy().tobytes() and not general.sent
    assert paths.send(torch.arange(4, dtype=torch.float16)) == "general"  # same bits, another code


@pytest.mark.parametrize("form", FORMS)
def test_paths_arrive_makes_a_tensor_of_a_known_dtype(form: Any) -> None:
    tagged = _tagged(np.dtype("<f4"))
    paths, general = _paths(form, {id(tagged): tagged})
    paths.from_numpy = torch.from_numpy
    t = paths.arrive(np.arange(4, dtype=np.float32).view(tagged), "auto")
    assert type(t) is torch.Tensor and t.tolist() == [0, 1, 2, 3] and not general.arrived


@pytest.mark.parametrize("form", FORMS)
def test_paths_arrive_leaves_the_rest_to_the_general_path(form: Any) -> None:
    tagged = _tagged(np.dtype("<f4"))
    paths, general = _paths(form, {id(tagged): tagged})
    paths.from_numpy = torch.from_numpy
    known = np.arange(4, dtype=np.float32).view(tagged)
    plain = np.arange(4, dtype=np.float32)
    assert paths.arrive(known, "numpy") == "general" and paths.arrive(plain, "torch") == "general"
    assert general.arrived == [(known, "numpy"), (plain, "torch")]


@pytest.mark.parametrize("form", FORMS)
def test_paths_arrive_checks_each_arrays_dtype_after_a_known_one(form: Any) -> None:
    tagged = _tagged(np.dtype("<f4"))
    paths, general = _paths(form, {id(tagged): tagged})
    paths.from_numpy = torch.from_numpy
    known = np.arange(4, dtype=np.float32).view(tagged)
    twin = np.arange(4, dtype=np.float32).view(_tagged(np.dtype("<f4")))  # equal, not the known object
    frozen = known.copy()
    frozen.flags.writeable = False
    assert type(paths.arrive(known, "auto")) is torch.Tensor
    assert paths.arrive(twin, "auto") == "general" and paths.arrive(frozen, "auto") == "general"
    assert type(paths.arrive(known.copy(), "auto")) is torch.Tensor
    assert len(general.arrived) == 2 and general.arrived[0][0] is twin and general.arrived[1][0] is frozen
    paths.known = {}  # (a new set of dtypes: the one found before is not among them)
    again = known.copy()
    assert paths.arrive(again, "auto") == "general" and general.arrived[-1][0] is again


@pytest.mark.parametrize("form", FORMS)
@pytest.mark.parametrize("shape", [(2, 3, 4), (1, 5), (3, 1, 2), (64, 64)], ids=str)
@pytest.mark.parametrize("how", ["arrive", "land"])
def test_an_arriving_tensor_has_c_contiguous_strides(form: Any, shape: tuple[int, ...], how: str) -> None:
    tagged = _tagged(np.dtype("<f4"))
    paths, _ = _paths(form, {id(tagged): tagged})
    paths.from_numpy = torch.from_numpy
    src = np.arange(int(np.prod(shape)), dtype=np.float32).reshape(shape)
    t = getattr(paths, how)(src.copy().view(tagged), "auto")
    assert type(t) is torch.Tensor and t.shape == shape and t.is_contiguous()
    assert t.stride() == tuple(s // 4 for s in src.strides) and torch.equal(t, torch.from_numpy(src))
    assert torch.equal(t.reshape(-1)[1:], torch.from_numpy(src).reshape(-1)[1:])  # (a view of it, too)


def _landing_paths(form: Any, tagged: np.dtype[Any]) -> Any:
    paths = form.TensorPaths(lambda t: None, lambda arr, kind: ("general", arr), {id(tagged): tagged})
    paths.from_numpy = torch.from_numpy
    return paths


def test_a_small_landed_arrival_has_its_bytes_in_its_own_tensor() -> None:
    form = _bound_compiled()
    tagged = np.dtype("<i8", metadata={"aiopdbp": ("torch", "<i8")})
    base = np.arange(12, dtype=np.int64).view(tagged)
    gone = weakref.ref(base)
    t = _landing_paths(form, tagged).land(base.reshape(3, 4), "auto")
    assert type(t) is torch.Tensor and t.dtype is torch.int64 and t.shape == (3, 4)
    assert t.data_ptr() != base.ctypes.data and t.data_ptr() % 16 == 0
    del base
    gc.collect()
    assert gone() is None  # the tensor does not hold the array: its bytes are its own
    junk = [np.full(12, -1, dtype=np.int64) for _ in range(8)]
    assert t.flatten().tolist() == list(range(12)) and len(junk) == 8


def test_a_large_landed_arrival_holds_its_array() -> None:
    form = _bound_compiled()
    tagged = np.dtype("<f4", metadata={"aiopdbp": ("torch", "<f4")})
    base = np.arange(4096, dtype=np.float32).view(tagged)
    t = _landing_paths(form, tagged).land(base, "auto")
    assert type(t) is torch.Tensor and t.data_ptr() == base.ctypes.data  # (no copy of a large array)


@pytest.mark.parametrize("form", FORMS)
@pytest.mark.parametrize("case", ["float32", "bool", "0-d", "empty", "numpy", "read-only"])
def test_a_landed_arrival_is_what_arrive_gives(form: Any, case: str) -> None:
    src = {"float32": np.arange(6, dtype=np.float32).reshape(2, 3), "bool": np.array([True, False]),
           "0-d": np.array(2.5), "empty": np.zeros((0, 3), np.float32), "numpy": np.arange(3, dtype=np.int16),
           "read-only": np.arange(3, dtype=np.int32)}[case]
    tagged = np.dtype(src.dtype.str, metadata={"aiopdbp": ("torch", src.dtype.str)})
    arr = src.view(tagged)
    if case == "read-only":
        arr.flags.writeable = False
    paths = _landing_paths(form, tagged)
    kind = "numpy" if case == "numpy" else "auto"
    got, want = paths.land(arr.copy() if case != "read-only" else arr, kind), paths.arrive(arr, kind)
    if type(want) is torch.Tensor:
        assert type(got) is torch.Tensor and got.dtype == want.dtype and torch.equal(got, want)
    else:  # (what tensor_of leaves: the general arrival's)
        assert got[0] == want[0] == "general" and np.array_equal(got[1], want[1])
