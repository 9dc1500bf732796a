"""Arrays as users hold them: PyTorch tensors, DLPack, the ml_dtypes family.

Everything below the GP works on plain ``numpy.ndarray``.  A host array of
another kind is turned into one at the call (:func:`host_array`, no copy),
its dtype *tagged* with numpy dtype metadata: ``{"aiopdbp": (origin,
name)}`` -- where it came from (``"torch"`` or ``""``) and its dtype's name
on the wire.  The tag rides along every path an ndarray takes (a tagged
array is still ``type(a) is np.ndarray``: short records, owned sends and
streams keep their fast paths), and the receiver turns it back
(:func:`arrival`).

The wire names a dtype by ``dtype.str`` (``"<f4"``: name and byte order)
for numpy's own dtypes and by its name for the ``ml_dtypes`` family
(``"bfloat16"``, ``"float8_e4m3fn"``: little-endian, as every supported
host), followed by ``";torch"`` for an array sent as a tensor.  No framework
is imported unless an object (or the wire) names it.
"""

from __future__ import annotations

import sys
import warnings
from collections.abc import Callable
from types import ModuleType
from typing import Any, NamedTuple

import numpy as np

from aiopdbp import ext
from aiopdbp.tensormem import view as _pure_memory

# a tensor's memory as an ndarray: the compiled twin of aiopdbp.tensormem.view where built and current
_memory: ModuleType = ext.twin("tensormem", _pure_memory, "aiopdbp.tensormem.cview")
_tensor_array: Callable[[Any, np.dtype[Any], Any, bool], np.ndarray[Any, Any] | None] = _memory.tensor_array
_bind: Callable[[type], bool] = _memory.bind
#: whether anyone can change an array's memory (:func:`aiopdbp.tensormem.view.frozen`)
frozen: Callable[[np.ndarray[Any, Any]], bool] = _memory.frozen
#: whether an array can be sent from its own memory (:func:`aiopdbp.tensormem.view.ownable`)
ownable: Callable[[np.ndarray[Any, Any]], bool] = _memory.ownable
#: a send's snapshot of an array of a plain dtype, or None
#: (:func:`aiopdbp.tensormem.view.plain_snapshot`)
plain_snapshot: Callable[[np.ndarray[Any, Any], int], np.ndarray[Any, Any] | None] = _memory.plain_snapshot

__all__ = ["KINDS", "ML_DTYPES", "TAG", "arrival", "cpu_tensor_array", "cpu_tensor_view", "device_dtype", "frozen",
           "host_array", "landed_arrival", "ownable", "parse_name", "plain_snapshot", "tag_of", "tensor_wanted", "wire_name"]

#: what a receiver may ask arrays to arrive as
KINDS = ("auto", "numpy", "torch")

#: the key of a tagged dtype's tag in its metadata (see :func:`tag_of`)
TAG = "aiopdbp"
# The ml_dtypes family (numpy knows them only once ml_dtypes is imported):
# name -> item size, for the unsigned view a receiver without it falls back to.
_ML_SIZES = {"bfloat16": 2, "float8_e4m3fn": 1, "float8_e5m2": 1, "float8_e4m3fnuz": 1,
             "float8_e5m2fnuz": 1, "float8_e4m3b11fnuz": 1, "float8_e4m3": 1, "float8_e3m4": 1,
             "float8_e8m0fnu": 1, "float4_e2m1fn": 1, "float6_e2m3fn": 1, "float6_e3m2fn": 1,
             "int2": 1, "int4": 1, "uint2": 1, "uint4": 1}
_UINT: dict[int, np.dtype[Any]] = {1: np.dtype(np.uint8), 2: np.dtype(np.uint16)}
#: the wire names of the ml_dtypes family
ML_DTYPES = frozenset(_ML_SIZES)
# torch dtypes numpy has no builtin for: torch name -> wire name
_TORCH_SPECIAL = {"bfloat16": "bfloat16", "float8_e4m3fn": "float8_e4m3fn", "float8_e5m2": "float8_e5m2",
                  "float8_e4m3fnuz": "float8_e4m3fnuz", "float8_e5m2fnuz": "float8_e5m2fnuz"}

_tagged: dict[tuple[str, str, str], np.dtype[Any]] = {}
# Per torch dtype seen: its _TorchPlan (the tagged dtype built from names
# per send cost more than the rest of a small tensor's send).
_TORCH_PLANS: dict[Any, _TorchPlan] = {}
# torch.Tensor once a tensor was sent (torch is not imported for it)
_tensor: type | None = None
_UNSET = object()
# Tagged dtypes of tensors (by id: tagged dtypes compare equal to their
# base) that torch.from_numpy takes as they are, a plain native dtype: their
# arrays arrive by that one call.  Filled once torch imported.
_as_is: dict[int, np.dtype[Any]] = {}
_torch_module: Any = _UNSET
_parsed: dict[str, np.dtype[Any]] = {}
_plain: dict[str, np.dtype[Any]] = {}  # the wire names of the tags above: their untagged dtypes
_warned: set[str] = set()


def _tag(base: np.dtype[Any], origin: str, name: str) -> np.dtype[Any]:
    key = (base.str, origin, name)
    dt = _tagged.get(key)
    if dt is None:  # building a dtype costs ~1 us: one per (base, origin, name)
        dt = _tagged[key] = np.dtype(base.str, metadata={TAG: (origin, name)})
    return dt


def _tag_of(dt: np.dtype[Any]) -> tuple[str, str]:
    origin, name = dt.metadata[TAG]  # type: ignore[index]
    return str(origin), str(name)


def tag_of(dt: np.dtype[Any]) -> Any:
    """What tells ``dt``'s wire name apart from that of the dtypes it
    compares equal to (a tagged dtype equals its untagged base): its tag
    ``(origin, name)``, or None for an untagged dtype (whatever other
    metadata it holds).  For caches keyed by dtype (a hot one reads
    ``dt.metadata.get(TAG)`` itself: the same, without the call)."""
    md = dt.metadata
    return None if md is None else md.get(TAG)


def _ml_dtype(name: str) -> np.dtype[Any] | None:
    try:
        import ml_dtypes
    except ImportError:
        return None
    dt: np.dtype[Any] = np.dtype(getattr(ml_dtypes, name))
    return dt


def wire_name(dt: np.dtype[Any]) -> str:
    """The name ``dt`` travels by (see the module's doc)."""
    md = dt.metadata
    if md is not None and TAG in md:
        origin, name = _tag_of(dt)
        return f"{name};{origin}" if origin else name
    if dt.isbuiltin == 2 and dt.type.__name__ in _ML_SIZES:  # a user-defined (ml_dtypes) dtype:
        return str(dt.type.__name__)  # its dt.str ("<V2", "<f1") names no dtype
    return dt.str


def parse_name(text: str) -> np.dtype[Any]:
    """The dtype a wire name stands for; ``ValueError``/``TypeError`` when
    it names none.  An ``ml_dtypes`` name imports ml_dtypes; without it,
    the unsigned integer of the same size, with one warning."""
    dt = _parsed.get(text)
    if dt is not None:
        return dt
    name, _, origin = text.partition(";")
    if origin not in ("", "torch"):
        raise ValueError(f"unknown array origin {origin!r}")
    size = _ML_SIZES.get(name)
    if size is None:
        base = np.dtype(name)
        dt = base if not origin else _tag(base, origin, base.str)
    elif origin:  # a tensor: its receiver rebuilds it from the bits, no ml_dtypes needed
        dt = _tag(_UINT[size], origin, name)
    else:
        ml = _ml_dtype(name)
        dt = ml if ml is not None else _tag(_UINT[size], "", name)
    if len(_parsed) < 256:
        _parsed[text] = dt
    return dt


# ------------------------------------------------------------------ sending


def _torch_refusal(t: Any) -> TypeError | None:
    if t.requires_grad:
        return TypeError("cannot send a tensor that requires grad: send t.detach()")
    if t.is_nested:
        return TypeError("cannot send a nested tensor: send its components (t.unbind()) or t.to_padded_tensor(0)")
    if t.is_conj():
        return TypeError("cannot send a tensor with its conjugate bit set: send t.resolve_conj()")
    if t.is_neg():
        return TypeError("cannot send a tensor with its negative bit set: send t.resolve_neg()")
    return None


class _TorchPlan(NamedTuple):
    """How the tensors of one torch dtype become ndarrays."""
    dtype: np.dtype[Any]  # the tagged numpy dtype of their ndarray (built from names once)
    complex_: bool  # only a complex tensor can have its conjugate bit set
    bits: Any  # the torch dtype torch.numpy() takes their bits as (int16/uint8), or None for their own


def _torch_plan(t: Any, torch: Any) -> _TorchPlan:
    """The plan for ``t``'s dtype, made and kept; ``TypeError`` for a dtype
    that cannot travel."""
    try:  # numpy's dtype for torch's, as t.numpy() would have it (an empty tensor: no data read)
        base = torch.empty(0, dtype=t.dtype).numpy().dtype
    except (TypeError, RuntimeError) as exc:
        special = _TORCH_SPECIAL.get(str(t.dtype).removeprefix("torch."))
        if special is None:
            raise TypeError(f"cannot send a tensor of {t.dtype}: {exc}") from None
        size = _ML_SIZES[special]
        plan = _TorchPlan(_tag(_UINT[size], "torch", special), False, torch.uint8 if size == 1 else torch.int16)
    else:
        plan = _TorchPlan(_tag(base, "torch", base.str), bool(t.dtype.is_complex), None)
    _TORCH_PLANS[t.dtype] = plan
    _paths.add_plan(t, plan.dtype, plan.complex_)
    return plan


def _torch_array(t: Any) -> np.ndarray[Any, Any] | None:
    """A CPU tensor as a tagged ndarray over its memory; None for a device
    tensor (the device path takes it); ``TypeError`` for one that cannot
    travel, saying what to send instead."""
    if not t.is_cpu:
        if t.is_meta:
            raise TypeError("cannot send a tensor on the meta device: it has no data")
        return None
    torch = sys.modules["torch"]
    if t.layout is not torch.strided:
        raise TypeError(f"cannot send a {t.layout} tensor: send t.to_dense() (or its indices and values)")
    plan = _TORCH_PLANS.get(t.dtype)
    if plan is not None and (arr := _tensor_array(t, plan.dtype, torch.strided, plan.complex_)) is not None:
        return arr
    if (refusal := _torch_refusal(t)) is not None:
        raise refusal
    if plan is None:
        plan = _torch_plan(t, torch)
    # (what tensor_array leaves: a non-contiguous or empty tensor, through torch's own view)
    try:
        raw: np.ndarray[Any, Any] = (t if plan.bits is None else t.view(plan.bits)).numpy()
    except (TypeError, RuntimeError) as exc:
        raise TypeError(f"cannot send this tensor: {exc}") from None
    return raw.view(plan.dtype)


def host_array(obj: Any) -> np.ndarray[Any, Any] | None:
    """``obj`` -- a tensor or an array by ``__dlpack__`` in host memory -- as
    an ndarray over the same memory (tagged with its origin); None when it
    is no such array (bytes, a device array, any other object)."""
    global _tensor
    cls = type(obj)
    if cls is _tensor:
        return _torch_array(obj)
    if cls.__module__.startswith("torch"):
        torch = sys.modules.get("torch")
        if torch is not None and (cls is torch.Tensor or isinstance(obj, torch.Tensor)):
            _tensor = torch.Tensor
            _bind(_tensor)
            _paths.track(_tensor, torch.strided)
            return _torch_array(obj)
    probe = getattr(obj, "__dlpack_device__", None)
    if probe is None or getattr(obj, "__cuda_array_interface__", None) is not None:
        return None
    try:
        dev_type = int(probe()[0])
    except Exception:
        return None
    if dev_type not in (1, 3):  # kDLCPU, kDLCUDAHost
        return None
    try:
        arr: np.ndarray[Any, Any] = np.from_dlpack(obj)
        return arr
    except (BufferError, TypeError, RuntimeError) as exc:
        raise TypeError(f"cannot send {type(obj).__name__}: DLPack refused it ({exc})") from None


def device_dtype(obj: Any, dt: np.dtype[Any]) -> np.dtype[Any]:
    """The dtype a device array ``obj`` of dtype ``dt`` travels by on the
    device path: ``dt`` tagged as a tensor's when ``obj`` is a torch tensor
    (by its class's package: torch is not imported for this; or a simulated
    one, :class:`~aiopdbp.device.sim.SimTensor`), so that its receivers get
    a tensor back (:func:`tensor_wanted`); else ``dt``."""
    if (type(obj).__module__.partition(".")[0] != "torch" and not getattr(obj, "__aiopdbp_tensor__", False)
            or tag_of(dt) is not None):
        return dt
    name = wire_name(dt)
    # (the ml_dtypes family stays untagged: a tensor of them arrives as the backend's array)
    return dt if name in _ML_SIZES else _tag(dt, "torch", name)


# ---------------------------------------------------------------- receiving


def _torch() -> Any:
    """The torch module, or None where it does not import (asked once:
    a failed import costs a search of sys.path)."""
    global _torch_module
    if _torch_module is _UNSET:
        try:
            import torch
        except ImportError:
            _torch_module = None
        else:
            _torch_module = torch
            _paths.from_numpy = torch.from_numpy
            _bind(torch.Tensor)
    return _torch_module


def _as_torch(arr: np.ndarray[Any, Any], name: str) -> Any:
    torch = _torch()
    if torch is None:
        raise RuntimeError("arrays='torch' needs PyTorch on the receiver (pip install torch)")
    size = _ML_SIZES.get(name)
    if not arr.flags.writeable:  # a shared read-only copy: the tensor gets its own
        arr = arr.copy()
    if size is not None:
        t = torch.from_numpy(arr.view(_UINT[size] if size == 1 else np.int16))
        return t.view(getattr(torch, name))
    if not arr.dtype.isnative:
        arr = arr.astype(arr.dtype.newbyteorder("="))
    return torch.from_numpy(arr.view(arr.dtype.str))


def _as_numpy(arr: np.ndarray[Any, Any], name: str) -> np.ndarray[Any, Any]:
    if name in _ML_SIZES:
        ml = _ml_dtype(name)
        if ml is not None:
            return arr.view(ml)
        if name not in _warned:
            _warned.add(name)
            warnings.warn(f"arrays of {name} arrive as {arr.dtype.str} (their bits): "
                          "pip install ml_dtypes on the receiver for the dtype itself", stacklevel=3)
        return arr.view(arr.dtype.str)
    if not name:
        return arr
    dt = _plain.get(name)
    if dt is None:  # np.dtype(name) costs ~1 us: kept for the first names seen
        dt = np.dtype(name)
        if len(_plain) < 256:
            _plain[name] = dt
    return arr.view(dt)


def _arrival(arr: np.ndarray[Any, Any], kind: str) -> Any:
    """:func:`arrival` but its common case (a tensor of a dtype in ``_as_is``)."""
    dt = arr.dtype
    md = dt.metadata
    tag = md.get(TAG) if md is not None else None
    if tag is None:
        if kind == "torch" and isinstance(arr, np.ndarray):
            return _as_torch(arr, wire_name(dt))
        return arr
    origin, name = tag
    if kind == "numpy" or kind == "auto" and origin != "torch":
        return _as_numpy(arr, name)
    torch = _torch()
    if torch is None:
        if kind == "auto":
            return _as_numpy(arr, name)
    elif origin == "torch" and name not in _ML_SIZES and dt.isnative:
        if len(_as_is) < 256:
            _as_is[id(dt)] = dt
        if arr.flags.writeable:
            return torch.from_numpy(arr)  # torch ignores the dtype's tag
    return _as_torch(arr, name)


# A tensor's send and arrival, their common cases each in one call
# (aiopdbp.tensormem.view.TensorPaths: compiled, one C call)
_paths: Any = _memory.TensorPaths(_torch_array, _arrival, _as_is)

#: ``cpu_tensor_array(obj)``: ``obj`` as :func:`host_array` has it if it is a
#: plain ``torch.Tensor`` and tensors were sent before; None for anything
#: else (which then takes the general checks): the send path's first look,
#: before it asks whether ``obj`` is a device array.  The common case makes
#: no torch operation (tensormem's doc).
cpu_tensor_array: Callable[[Any], np.ndarray[Any, Any] | None] = _paths.send
#: ``cpu_tensor_view(obj)``: :data:`cpu_tensor_array`'s common case alone,
#: None for anything else and nothing raised (``gp.send``'s first look in
#: the compiled form: what it leaves goes to ``GP.send``, which says why).
cpu_tensor_view: Callable[[Any], np.ndarray[Any, Any] | None] = _paths.view

#: ``arrival(arr, kind)``: a received ``arr`` as the receiver asked:
#: ``"auto"`` as it was sent (a tensor as a tensor when torch imports here,
#: else numpy), ``"numpy"``, ``"torch"``.  No copy (but a tensor of a
#: read-only or non-native-endian array).  The common case (a tensor of a
#: plain dtype seen before) is one torch call.
arrival: Callable[[np.ndarray[Any, Any], str], Any] = _paths.arrive

#: ``landed_arrival(arr, kind)``: :data:`arrival` of a message's own array
#: (no one else sees or keeps it: a receive path's), whose tensor may hold
#: a copy of its bytes instead of the array (small ones, compiled: the
#: tensor then frees its memory without taking the GIL back).
landed_arrival: Callable[[np.ndarray[Any, Any], str], Any] = _paths.land


def tensor_wanted(name: str) -> bool:
    """Whether a received device array of wire name ``name`` arrives as a
    torch tensor: it was sent as one and torch imports here (else it
    arrives as the device backend's array)."""
    return name.endswith(";torch") and _torch() is not None
