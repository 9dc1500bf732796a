"""A plain CPU tensor's memory as an ndarray, without ``t.numpy()``.

``t.numpy()`` runs four of torch's dispatcher operations (detach, a
conversion, resolve_conj, resolve_neg) per call: more than a small message
costs to send.  :func:`tensor_array` reads the few attributes that say
whether the tensor's memory can be viewed as it is, and views it: the
common case of :func:`aiopdbp.arrays.host_array`.  Anything else -- a
tensor off the CPU, sparse, nested, non-contiguous, empty, or one that
``t.numpy()`` refuses (it requires grad, its conjugate or negative bit is
set) -- gets None, and the caller takes the general path, which says why.
:func:`tensor_of` is the arrival's common case, the other way round.
:func:`frozen` and :func:`plain_snapshot` are a send's common case of an
array: whether anyone can change its memory, and the snapshot the receiver
will see when its dtype is one of numpy's plain builtins (a few flag reads
in the compiled form, where the general checks cost more than the rest of
a small message's send).

This is the Python form; ``cview.pyx`` beside it is its compiled twin
(one numpy C call instead of a ctypes view), chosen by
:mod:`aiopdbp.arrays` through :func:`aiopdbp.ext.choose`.  Neither imports
torch: the caller hands over what it needs from it.
"""

from __future__ import annotations

import ctypes
from collections.abc import Callable
from typing import Any

import numpy as np

__all__ = ["PLAIN_NUMS", "TensorPaths", "bind", "frozen", "ownable", "plain_snapshot", "tensor_array", "tensor_of"]

#: ``dtype.num`` of numpy's builtin fixed-size dtypes that travel as raw
#: bytes whatever their byte order or metadata: bool, the integers, the
#: floats and complex numbers (half and long double included), datetime64
#: and timedelta64 -- not objects, bytes and str (sized per dtype), void
#: (fields, sub-arrays) or user dtypes (ml_dtypes): those take the general path
PLAIN_NUMS = frozenset(range(17)) | {21, 22, 23}


def bind(cls: type) -> bool:
    """Name the tensor type (``torch.Tensor``) whose exact instances the
    compiled form reads and makes through DLPack's C exchange API (its
    ``__dlpack_c_exchange_api__``); True when it does.  This form has no
    C calls to make: it reads attributes and calls ``from_numpy`` for every
    tensor, and says False."""
    return False


def tensor_array(t: Any, dt: np.dtype[Any], strided: Any, complex_: bool) -> np.ndarray[Any, Any] | None:
    """The memory of ``t`` (a ``torch.Tensor``) as a writable C-contiguous
    ndarray of dtype ``dt`` (whose item size is ``t``'s) and ``t``'s shape;
    the array keeps ``t`` alive.  ``strided`` is ``torch.strided``;
    ``complex_`` says whether ``t``'s dtype is complex (only then can its
    conjugate bit be set).  None when ``t`` needs the general path (see the
    module's doc)."""
    if (not t.is_cpu or t.layout is not strided or t.requires_grad or t.is_neg()
            or complex_ and t.is_conj() or not t.is_contiguous()):
        return None
    try:
        shape = t.shape
    except RuntimeError:  # a nested tensor has none
        return None
    n = dt.itemsize
    for d in shape:
        n *= d
    if n == 0:
        return None
    mem = (ctypes.c_char * n).from_address(t.data_ptr())
    mem._tensor = t  # type: ignore[attr-defined]  # the array's base holds the tensor's memory alive
    arr: np.ndarray[Any, Any] = np.frombuffer(mem, dt)  # type: ignore[call-overload]  # (a ctypes array has the buffer protocol)
    return arr if len(shape) == 1 else arr.reshape(shape)


def tensor_of(arr: Any, known: dict[int, np.dtype[Any]], from_numpy: Any) -> Any:
    """``from_numpy(arr)`` (``torch.from_numpy``) when ``arr`` is a writable
    ``numpy.ndarray`` whose dtype is one of ``known``'s values, keyed by its
    id (tagged dtypes compare equal to their base: only the object itself
    tells them apart); else None."""
    if type(arr) is not np.ndarray:
        return None
    dt = arr.dtype
    if known.get(id(dt)) is not dt or not arr.flags.writeable:
        return None
    return from_numpy(arr)


class TensorPaths:
    """A send's and an arrival's common case of a tensor, each whole in one
    call (one C call in the compiled form, no Python frame between the GP
    and torch): :meth:`send` is :func:`aiopdbp.arrays.cpu_tensor_array`,
    :meth:`arrive` is :func:`aiopdbp.arrays.arrival`.  What they leave goes
    to the caller's general paths, ``general_send(t)`` and
    ``general_arrival(arr, kind)``, which give the same results.

    The per-dtype decisions are made once, by :meth:`add_plan`; the
    compiled form also keys them by the dtype's DLPack code, which the one
    call that describes a bound tensor gives (no ``t.dtype`` read)."""

    __slots__ = ("tracked", "strided", "plans", "known", "from_numpy", "general_send", "general_arrival")

    def __init__(self, general_send: Callable[[Any], np.ndarray[Any, Any] | None],
                 general_arrival: Callable[[Any, str], Any], known: dict[int, np.dtype[Any]]) -> None:
        #: the tensor type whose exact instances :meth:`send` takes (None: none yet)
        self.tracked: type | None = None
        self.strided: Any = None
        #: torch dtype -> (the tagged dtype of its tensors' arrays, whether complex)
        self.plans: dict[Any, tuple[np.dtype[Any], bool]] = {}
        #: :meth:`arrive`'s dtypes, as :func:`tensor_of`'s ``known`` (the caller fills it)
        self.known = known
        #: ``torch.from_numpy`` once torch is imported (the caller sets it)
        self.from_numpy: Any = None
        self.general_send = general_send
        self.general_arrival = general_arrival

    def track(self, cls: type, strided: Any) -> None:
        """:meth:`send` takes exact instances of ``cls`` (``torch.Tensor``;
        ``strided`` is ``torch.strided``)."""
        self.tracked, self.strided = cls, strided

    def add_plan(self, t: Any, dt: np.dtype[Any], complex_: bool) -> None:
        """Tensors of ``t``'s dtype are viewed as arrays of ``dt`` (complex:
        their conjugate bit is checked too)."""
        self.plans[t.dtype] = (dt, complex_)

    def send(self, obj: Any) -> np.ndarray[Any, Any] | None:
        """None when ``obj`` is not exactly of the tracked type; else its
        memory as an ndarray of its plan's dtype (:func:`tensor_array`)
        where a plan and the tensor allow, or ``general_send(obj)``."""
        if type(obj) is not self.tracked:
            return None
        arr = self.view(obj)
        return arr if arr is not None else self.general_send(obj)

    def view(self, obj: Any) -> np.ndarray[Any, Any] | None:
        """:meth:`send`'s common case alone: ``obj``'s memory as an ndarray
        of its plan's dtype when ``obj`` is exactly of the tracked type,
        has a plan and :func:`tensor_array` takes it; else None (the send
        path's first look: what it leaves, the GP's own send takes, and
        refuses with its reasons)."""
        if type(obj) is not self.tracked:
            return None
        t: Any = obj
        plan = self.plans.get(t.dtype)
        return None if plan is None else tensor_array(t, plan[0], self.strided, plan[1])

    def arrive(self, arr: Any, kind: str) -> Any:
        """:func:`tensor_of` ``arr`` unless ``kind`` is ``"numpy"``; else,
        or when it says None, ``general_arrival(arr, kind)``."""
        if kind != "numpy" and (t := tensor_of(arr, self.known, self.from_numpy)) is not None:
            return t
        return self.general_arrival(arr, kind)

    def land(self, arr: Any, kind: str) -> Any:
        """:meth:`arrive` for a message's own array, which no one else sees
        or keeps (a receive path's): the tensor may take a copy of its
        bytes instead of holding it (the compiled form does so for small
        ones, whose tensor then lets its memory go without Python); here,
        :meth:`arrive`."""
        return self.arrive(arr, kind)


def frozen(arr: np.ndarray[Any, Any]) -> bool:
    """True when no one can change ``arr``'s memory: read-only all the way
    down to an immutable ``bytes`` object (a read-only *view* of writable
    memory is not frozen)."""
    if arr.flags.writeable:
        return False
    base: Any = arr.base
    while isinstance(base, np.ndarray):
        if base.flags.writeable:
            return False
        base = base.base
    if isinstance(base, memoryview):
        base = base.obj
    return isinstance(base, bytes)


def ownable(arr: np.ndarray[Any, Any]) -> bool:
    """A writable array whose bytes can travel from its own memory as one
    MPI message (see :meth:`GP.send <aiopdbp.runtime.process.GP.send>`,
    "Buffer ownership"): C-contiguous, no objects, fields or subarrays in
    its dtype, and not :func:`frozen` (that one is shared, never owned)."""
    dt = arr.dtype
    return (arr.flags.c_contiguous and not dt.hasobject and dt.fields is None and dt.subdtype is None
            and not frozen(arr))


def plain_snapshot(arr: np.ndarray[Any, Any], max_ndim: int) -> np.ndarray[Any, Any] | None:
    """The snapshot a receiver will see of ``arr`` (a ``numpy.ndarray``, not
    a subclass) when its dtype is plain (:data:`PLAIN_NUMS`) and it has at
    most ``max_ndim`` dimensions: ``arr`` itself when :func:`frozen`, else a
    C-order copy.  None for any other array: the caller's general path
    (which checks, pickles or refuses it)."""
    if arr.dtype.num not in PLAIN_NUMS or arr.ndim > max_ndim:
        return None
    return arr if frozen(arr) else arr.copy()
