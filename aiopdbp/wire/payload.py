"""Level-3 payload encoding: raw bytes, numpy arrays, opt-in pickles.

:func:`encode_payload` classifies what a CDU carries and returns its tag,
its self-delimiting meta and the buffers to send (zero copy where the data
is C-contiguous); :func:`decode_ndarray` and :func:`decode_pickle` turn the
payload of a received record back into an object, raising only
:class:`~aiopdbp.errors.ProtocolError` and never allocating beyond
:class:`~aiopdbp.wire.mesp.Limits`.  The layout is described in
:mod:`aiopdbp.wire.mesp`.  Sans-I/O: imports neither asyncio nor mpi4py.
"""

from __future__ import annotations

import pickle
import struct
from typing import Any

import numpy as np

from aiopdbp.arrays import parse_name, wire_name
from aiopdbp.errors import ProtocolError
from aiopdbp.wire.mesp import ALIGN, DEFAULT_LIMITS, Buffer, Limits, Payload

__all__ = ["SHORT_ARRAY_MAX", "decode_ndarray", "decode_pickle", "decode_short_ndarray", "encode_payload",
           "ndarray_meta", "short_ndarray", "travels_raw"]

_U8 = struct.Struct("<B")
_U16 = struct.Struct("<H")
_ZEROS = bytes(ALIGN)

# Hot paths use plain ints: on Python 3.11 reading ``Payload.BYTES`` costs
# ~120 ns (an enum property), an int compare ~20 ns.
_NONE, _BYTES, _NDARRAY, _PICKLE = (int(t) for t in Payload)

_DTYPE_CACHE: dict[bytes, np.dtype[Any]] = {}
_DTYPE_CACHE_MAX = 256
# Small messages repeat their dtype and shape: the level-3 meta of a
# (dtype, shape) already checked is kept encoded (sender), and the decoded
# (dtype, shape, count) of meta bytes already checked (receiver): ~2.5 us of
# a lone 8 B array's ~4 us encode, ~1.5 us of its decode.
_META_ENC: dict[tuple[np.dtype[Any], tuple[int, ...]], bytes] = {}
# Tagged dtypes (aiopdbp.arrays) compare and hash equal to their untagged
# base (and each other), so their meta, which names the origin, is kept
# apart, by the dtype object itself (its id, the entry holding it):
# aiopdbp.arrays makes one per tag and views and copies keep it, so the
# lookup costs what an untagged one does; an equal dtype of another
# object only misses the cache.
_TAGGED_ENC: dict[tuple[int, tuple[int, ...]], tuple[np.dtype[Any], bytes]] = {}
_META_DEC: dict[bytes, tuple[np.dtype[Any], tuple[int, ...], int]] = {}
_META_CACHE_MAX = 1024


#: arrays of at most this many data bytes may travel in a short record
#: (:mod:`aiopdbp.wire.shorts`; the sender's link also keeps them below its
#: ``large``, as it does ``bytes``): both ends copy them, which costs no more
#: than a full record's path (8 B-1 KiB: 8x the floor against 13-21x;
#: 8 KiB: 34 us one way against 39 us; 16 KiB: 41 us either way)
SHORT_ARRAY_MAX = (32 << 10) - 1


def _align(off: int) -> int:
    return (off + ALIGN - 1) & -ALIGN


def _pickle_payload(obj: object, limits: Limits) -> tuple[int, bytes, list[Buffer], int]:
    oob: list[pickle.PickleBuffer] = []
    try:
        main = pickle.dumps(obj, protocol=5, buffer_callback=oob.append)
        views = [b.raw() for b in oob]
    except Exception as exc:  # PicklingError, AttributeError, BufferError, ...
        raise TypeError(f"cannot pickle {type(obj).__name__} payload: {exc}") from exc
    if len(views) > limits.max_pickle_buffers:
        raise ValueError(f"{len(views)} out-of-band pickle buffers > {limits.max_pickle_buffers}")
    segs: list[Buffer] = [main, *views]
    lengths = [len(main), *(v.nbytes for v in views)]
    meta = _U16.pack(len(views)) + struct.pack(f"<{len(lengths)}Q", *lengths)
    # Segments after the first are padded to ALIGN relative to the (aligned)
    # first one, so the padding does not depend on where the record sits.
    parts: list[Buffer] = []
    plen = 0
    for seg, n in zip(segs, lengths):
        pad = -plen & (ALIGN - 1)
        if pad:
            parts.append(_ZEROS[:pad])
            plen += pad
        if n:
            parts.append(seg)
        plen += n
    return _PICKLE, meta, parts, plen


def encode_payload(data: Any, allow_pickle: bool,
                   limits: Limits) -> tuple[int, bytes, list[Buffer], int]:
    """Classify ``data``: (tag, level-3 meta without padding, parts, payload_len)."""
    if type(data) is bytes:  # immutable, so the object itself is the part
        return _BYTES, b"", [data] if data else [], len(data)
    if data is None:
        return _NONE, b"", [], 0
    if isinstance(data, (bytes, bytearray, memoryview)):
        mv = memoryview(data)
        if not mv.c_contiguous:
            mv = memoryview(mv.tobytes())  # the one copy a strided view needs
        elif mv.ndim != 1 or mv.itemsize != 1:
            mv = mv.cast("B")
        return _BYTES, b"", [mv] if mv.nbytes else [], mv.nbytes
    if isinstance(data, np.generic):
        data = np.asarray(data)  # numpy scalars travel as 0-d arrays
    if isinstance(data, np.ndarray):
        dt = data.dtype
        # a tagged dtype (aiopdbp.arrays: a tensor's) equals its untagged base
        if dt.metadata is None:
            hit = _META_ENC.get((dt, data.shape))
        else:  # a tagged dtype: by the dtype object (see _TAGGED_ENC), looked up inline on this hot path
            tagged = _TAGGED_ENC.get((id(dt), data.shape))
            hit = tagged[1] if tagged is not None and tagged[0] is dt else None
        if hit is not None:  # dtype and shape checked before
            if data.ndim == 1 and dt.itemsize == 1 and data.flags.c_contiguous and dt.isbuiltin != 2:
                view = data.data  # already flat bytes (maybe as int8, bool, S1)
                if view.format != "B":
                    view = view.cast("B")
            else:
                view = np.ascontiguousarray(data).reshape(-1).view(np.uint8).data
            return _NDARRAY, hit, [view] if view.nbytes else [], view.nbytes
        if not travels_raw(data, allow_pickle, limits):
            return _pickle_payload(data, limits)
        name = wire_name(dt).encode("ascii")
        meta = (_U8.pack(len(name)) + name
                + struct.pack(f"<B{data.ndim}Q", data.ndim, *data.shape))
        if dt.metadata is None:
            if len(_META_ENC) < _META_CACHE_MAX:
                _META_ENC[(dt, data.shape)] = meta
        elif len(_TAGGED_ENC) < _META_CACHE_MAX:
            _TAGGED_ENC[(id(dt), data.shape)] = (dt, meta)
        flat = np.ascontiguousarray(data).reshape(-1).view(np.uint8)
        return _NDARRAY, meta, [flat.data] if flat.nbytes else [], flat.nbytes
    if allow_pickle:
        return _pickle_payload(data, limits)
    raise TypeError(f"cannot send {type(data).__name__} without allow_pickle=True "
                    "(only None, bytes-like objects and numpy arrays travel raw)")


def travels_raw(data: np.ndarray[Any, Any], allow_pickle: bool, limits: Limits = DEFAULT_LIMITS) -> bool:
    """Whether the array ``data`` travels as raw bytes (True) or, with
    ``allow_pickle``, pickled (False); ``TypeError``/``ValueError`` when it
    cannot travel at all.  Raw: plain fixed-size dtypes (no objects, fields,
    sub-arrays or empty void) of at most ``limits.max_ndim`` dimensions.  The
    sender checks this before it reserves anything, so that a refused
    payload fails the same way on one host and on many."""
    dt = data.dtype
    if dt.metadata is None:
        if (dt, data.shape) in _META_ENC:
            return True  # checked before
    else:
        tagged = _TAGGED_ENC.get((id(dt), data.shape))
        if tagged is not None and tagged[0] is dt:
            return True
    if dt.hasobject or dt.fields is not None or dt.subdtype is not None or dt.itemsize == 0:
        if allow_pickle:
            return False
        raise TypeError(f"ndarray of dtype {dt} needs allow_pickle=True (only plain numeric, bool, "
                        "bytes and datetime dtypes travel raw; pickle: trusted clusters only)")
    if data.ndim > limits.max_ndim:
        raise ValueError(f"ndarray has {data.ndim} dimensions > {limits.max_ndim}")
    if len(wire_name(dt)) > 0xFF:
        raise TypeError(f"dtype {dt} has too long a name for the wire")
    return True


def short_ndarray(data: np.ndarray[Any, Any]) -> tuple[bytes, memoryview] | None:
    """``(meta, data bytes)`` of a small array for a short record -- its
    level-3 meta unpadded, then its C-contiguous bytes -- or None when it
    is not one (too big, not C-contiguous, a dtype or shape never checked
    by :func:`encode_payload`: the full record path takes it)."""
    dt = data.dtype
    if dt.metadata is None:
        meta = _META_ENC.get((dt, data.shape))
    else:
        tagged = _TAGGED_ENC.get((id(dt), data.shape))
        meta = tagged[1] if tagged is not None and tagged[0] is dt else None
    if meta is None or data.nbytes > SHORT_ARRAY_MAX or not data.flags.c_contiguous:
        return None
    if data.ndim == 1 and dt.itemsize == 1 and dt.isbuiltin != 2:  # (no buffer of a user dtype: float8)
        view = data.data  # already flat bytes (maybe as int8, bool, S1)
        if view.format != "B":
            view = view.cast("B")
    else:  # no copy: C-contiguous; also for dtypes without the buffer protocol (M8)
        view = data.reshape(-1).view(np.uint8).data
    return meta, view


# ---------------------------------------------------------------- decoding


def _dtype(name: bytes) -> np.dtype[Any]:
    dt = _DTYPE_CACHE.get(name)
    if dt is not None:
        return dt
    try:
        dt = parse_name(name.decode("ascii"))
    except Exception as exc:  # TypeError, ValueError, UnicodeDecodeError, ...
        raise ProtocolError(f"bad dtype {name!r}") from exc
    # Only plain, fixed-size, reference-free dtypes can be viewed over bytes.
    if dt.hasobject or dt.fields is not None or dt.subdtype is not None or dt.itemsize == 0:
        raise ProtocolError(f"dtype {name!r} refused")
    if len(_DTYPE_CACHE) < _DTYPE_CACHE_MAX:
        _DTYPE_CACHE[name] = dt
    return dt


def _u64s(mv: memoryview, off: int, end: int, n: int) -> tuple[int, ...]:
    if off + 8 * n > end:
        raise ProtocolError("truncated payload meta")
    return struct.unpack_from(f"<{n}Q", mv, off)


def ndarray_meta(mv: memoryview, off: int, end: int,
                 limits: Limits) -> tuple[np.dtype[Any], tuple[int, ...], int, int]:
    """Level-3 ndarray meta at ``off``: (dtype, shape, element count, aligned
    offset of the data)."""
    if off >= end:
        raise ProtocolError("truncated ndarray meta")
    nlen = mv[off]
    if off + nlen + 2 <= end:
        stop = off + nlen + 2 + 8 * mv[off + nlen + 1]
        if stop <= end:
            key = bytes(mv[off:stop])
            hit = _META_DEC.get(key)
            if hit is not None and len(hit[1]) <= limits.max_ndim:  # checked before
                return hit[0], hit[1], hit[2], _align(stop)
            dt, shape, count, data_off = _ndarray_meta_slow(mv, off, end, limits)
            if len(_META_DEC) < _META_CACHE_MAX:
                _META_DEC[key] = (dt, shape, count)
            return dt, shape, count, data_off
    return _ndarray_meta_slow(mv, off, end, limits)


def _ndarray_meta_slow(mv: memoryview, off: int, end: int,
                       limits: Limits) -> tuple[np.dtype[Any], tuple[int, ...], int, int]:
    nlen = mv[off]
    off += 1
    if off + nlen + 1 > end:
        raise ProtocolError("truncated ndarray meta")
    dt = _dtype(bytes(mv[off:off + nlen]))
    off += nlen
    ndim = mv[off]
    if ndim > limits.max_ndim:
        raise ProtocolError(f"ndarray with {ndim} dimensions > {limits.max_ndim}")
    shape = _u64s(mv, off + 1, end, ndim)
    count = 1
    for dim in shape:
        count *= dim
    return dt, shape, count, _align(off + 1 + 8 * ndim)


#: the largest Unicode code point: a ``U`` array holding more decodes, but
#: numpy raises SystemError when an element becomes a str (a[0], repr, tolist)
_MAX_CODE_POINT = 0x10FFFF


def check_text(arr: np.ndarray[Any, Any]) -> np.ndarray[Any, Any]:
    """``arr`` itself; a unicode array (``<U``/``>U``) holding a code point
    beyond U+10FFFF raises :class:`~aiopdbp.errors.ProtocolError` (every
    other array passes without a look at its data)."""
    dt = arr.dtype
    if dt.kind == "U" and arr.size:
        codes = np.ascontiguousarray(arr).reshape(-1).view(np.dtype(np.uint32).newbyteorder(dt.byteorder))
        if int(codes.max()) > _MAX_CODE_POINT:
            raise ProtocolError(f"{dt} array holds a code point beyond U+10FFFF")
    return arr


def decode_ndarray(mv: memoryview, off: int, end: int, plen: int,
                   limits: Limits) -> tuple[np.ndarray[Any, Any], int]:
    """The NDARRAY payload whose meta starts at ``off``: (a zero-copy array
    over ``mv``, the offset after its data)."""
    dt, shape, count, off = ndarray_meta(mv, off, end, limits)
    if count * dt.itemsize != plen or off + plen > end:
        raise ProtocolError(f"ndarray {shape} of {dt} does not match {plen} payload bytes")
    try:  # an empty array may still carry absurd dims numpy refuses
        arr = np.frombuffer(mv, dt, count, off).reshape(shape)
    except (ValueError, OverflowError) as exc:
        raise ProtocolError(f"bad ndarray shape {shape}") from exc
    return check_text(arr), off + plen


def decode_pickle(mv: memoryview, off: int, end: int, plen: int, limits: Limits) -> tuple[Any, int]:
    """The PICKLE payload whose meta starts at ``off``: (the object, the
    offset after its last segment).  Only for trusted peers (see
    :func:`aiopdbp.wire.codec.decode`)."""
    if off + 2 > end:
        raise ProtocolError("truncated pickle meta")
    (nbuf,) = _U16.unpack_from(mv, off)
    if nbuf > limits.max_pickle_buffers:
        raise ProtocolError(f"{nbuf} pickle buffers > {limits.max_pickle_buffers}")
    lengths = _u64s(mv, off + 2, end, nbuf + 1)
    start = pos = _align(off + 2 + 8 * (nbuf + 1))
    segs: list[memoryview] = []
    for n in lengths:
        pos = _align(pos)
        if pos + n > end:
            raise ProtocolError("pickle segment runs past the frame")
        segs.append(mv[pos:pos + n])
        pos += n
    if pos - start != plen:
        raise ProtocolError(f"pickle segments of {pos - start} bytes, header says {plen}")
    try:
        obj = pickle.loads(segs[0], buffers=segs[1:])
    except Exception as exc:  # anything a corrupt (or hostile) pickle may raise
        raise ProtocolError(f"bad pickle payload: {exc!r}") from exc
    return obj, pos


def decode_short_ndarray(b: bytes, off: int, stop: int, limits: Limits) -> np.ndarray[Any, Any]:
    """The array of a short record whose payload is ``b[off:stop]`` (meta,
    then the data unpadded): a writable copy of its own, aligned."""
    if off + 2 > stop:
        raise ProtocolError("truncated ndarray meta")
    mend = off + b[off] + 2
    if mend > stop:
        raise ProtocolError("truncated ndarray meta")
    mend += 8 * b[mend - 1]
    hit = _META_DEC.get(b[off:mend])
    if hit is not None and len(hit[1]) <= limits.max_ndim:  # checked before
        dt, shape, count = hit
    else:
        dt, shape, count, _ = ndarray_meta(memoryview(b), off, stop, limits)
    if count * dt.itemsize != stop - mend:
        raise ProtocolError(f"short ndarray {shape} of {dt} does not match {stop - mend} bytes")
    try:
        arr = np.frombuffer(b, dt, count, mend)
        arr = (arr if len(shape) == 1 else arr.reshape(shape)).copy()
    except (ValueError, OverflowError) as exc:
        raise ProtocolError(f"bad ndarray shape {shape}") from exc
    return check_text(arr)
