"""Batched analysis kernels and the per-stream verdict state, for numpy or CuPy.

Every function takes the array module ``xp`` (``numpy`` or ``cupy``) and uses
only operations both provide, so the same code runs on the CPU (NGP analysers)
and on a GPU (SGP analysers).  A *batch* is ``B`` frames of ``B`` different
streams, stacked as I420 ``(B, H * 3 // 2, W)`` uint8 (the layout FFmpeg's
yuv420p uses: the Y rows, then U, then V); every measure is computed for the
whole batch with array operations, never with a Python loop over frames.

Measures (per frame; all invariant to a brightness/contrast change
``Y -> a * Y + b``, ``a > 0``, because each is divided by the matching power of
the frame's RMS contrast ``std(Y)``):

* ``blur``: ``var(Laplacian(Y)) / var(Y)``.  Defocus removes the high
  frequencies the Laplacian responds to, so the score falls as the blur grows.
  A constant frame scores 0.
* ``smoothness``: ``mean |Y_t - Y_prev| / std(Y_t)``, the mean absolute luma
  change from the stream's previous analysed frame (NaN when there is none).
  ~0 for a repeated frame, larger for a jump after dropped frames.
* ``blockiness``: mean absolute luma step across the 8-pixel block grid over the
  mean step elsewhere (1 = no blocking artefacts); the spatial half of the
  patent's smoothness/blockiness analysis, reported next to ``smoothness``.

Verdicts (sticky: a flag once raised stays for the rest of the stream, so the
verdict "as of" a frame says what the stream has shown so far):

* ``blurred``: the median ``blur`` of the stream's last ``BLUR_WINDOW`` frames
  is below ``BLUR_THRESHOLD``;
* ``frozen``: ``FREEZE_RUN`` consecutive frames with ``smoothness`` below
  ``FREEZE_THRESHOLD``;
* ``choppy``: ``JUMPS_FOR_CHOPPY`` jumps, a jump being a frame whose
  ``smoothness`` exceeds ``JUMP_RATIO`` times the median of the stream's last
  ``MOTION_WINDOW`` ordinary (neither still nor jump) frames.

The thresholds are fixed.  They were chosen on the clips of generator seeds
1-3 (``python -m examples.video_quality tune``); the tests check them on other
seeds.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

# ------------------------------------------------------------ thresholds --
BLUR_THRESHOLD = 0.085      # median blur below this: blurred
BLUR_WINDOW = 8             # frames in the blur median
FREEZE_THRESHOLD = 0.035    # smoothness below this: a still (repeated) frame
FREEZE_RUN = 5              # consecutive still frames: frozen (0.2 s at 25 fps)
JUMP_RATIO = 2.0            # smoothness above this x the motion baseline: a jump
MOTION_WINDOW = 8           # ordinary frames in the motion baseline
MOTION_MIN = 4              # baseline needs at least this many frames
JUMPS_FOR_CHOPPY = 2        # jumps: choppy

BLURRED, FROZEN, CHOPPY = 1, 2, 4        # verdict bits
FLAG_NAMES = ((BLURRED, "blurred"), (FROZEN, "frozen"), (CHOPPY, "choppy"))
BLOCK = 8
EPS = 1e-6

#: result columns an analyser sends to the collector, one row per frame
RESULT_COLUMNS = ("stream", "frame", "blur", "smoothness", "blockiness", "flags")


def verdict_text(bits: int) -> str:
    """``0 -> "ok"``, ``5 -> "blurred+choppy"``."""
    return "+".join(name for bit, name in FLAG_NAMES if bits & bit) or "ok"


# --------------------------------------------------------------- measures --
def luma_rows(frames: Any, height: int, width: int) -> Any:
    """The Y planes of an I420 batch (B, H*3/2, W) as a (B, H*W) uint8 view."""
    if frames.ndim != 3 or frames.shape[1:] != (height * 3 // 2, width):
        raise ValueError(f"expected an I420 batch (B, {height * 3 // 2}, {width}), got {frames.shape}")
    return frames.reshape(frames.shape[0], -1)[:, :height * width]


class Scratch:
    """Reusable work buffers for the measures, one per (name, dtype, row length).

    A fresh multi-megabyte temporary per operation costs more in page faults
    than the arithmetic (glibc hands large freed blocks back to the kernel), so
    the big intermediates are written into buffers kept here; a batch with
    fewer rows uses the first rows of a bigger buffer.  ``None`` everywhere
    below means "allocate".
    """

    def __init__(self, xp: Any) -> None:
        self.xp = xp
        self._bufs: dict[tuple[str, str, int], Any] = {}

    def get(self, name: str, rows: int, cols: int, dtype: Any) -> Any:
        key = (name, self.xp.dtype(dtype).str, cols)
        buf = self._bufs.get(key)
        if buf is None or buf.shape[0] < rows:
            buf = self._bufs[key] = self.xp.empty((rows, cols), dtype=dtype)
        return buf[:rows]


def _buf(scratch: Scratch | None, xp: Any, name: str, rows: int, cols: int, dtype: Any) -> Any:
    return xp.empty((rows, cols), dtype=dtype) if scratch is None else scratch.get(name, rows, cols, dtype)


def _acc(xp: Any, bound: int) -> Any:
    """The narrowest unsigned accumulator that holds a sum up to ``bound`` (narrow sums vectorise)."""
    return xp.uint32 if bound < 2**32 else xp.uint64


def absdiff(xp: Any, a: Any, b: Any, scratch: Scratch | None = None, name: str = "absdiff") -> Any:
    """|a - b| for unsigned integer (B, N) arrays, without overflow or a wider copy."""
    d = _buf(scratch, xp, name, a.shape[0], a.shape[1], a.dtype)
    low = _buf(scratch, xp, name + "-low", a.shape[0], a.shape[1], a.dtype)
    xp.maximum(a, b, out=d)
    xp.minimum(a, b, out=low)
    d -= low
    return d


def contrast(xp: Any, cur: Any, scratch: Scratch | None = None) -> Any:
    """RMS contrast (the standard deviation of the luma) of (B, N) uint8 rows, float64 (B,).

    Exact integer sums, so a frame's score never depends on which frames share
    its batch (or its device).
    """
    b, n = cur.shape
    s1 = cur.sum(axis=1, dtype=_acc(xp, 255 * n)).astype(xp.float64)
    sq = _buf(scratch, xp, "sq16", b, n, xp.uint16)
    sq[...] = cur
    sq *= sq
    s2 = sq.sum(axis=1, dtype=_acc(xp, 255 * 255 * n)).astype(xp.float64)
    return xp.sqrt(xp.maximum(s2 / n - (s1 / n) ** 2, 0.0))


def laplacian_var(xp: Any, cur: Any, height: int, width: int, scratch: Scratch | None = None) -> Any:
    """Variance of the 4-neighbour Laplacian over each frame's interior, float64 (B,).

    Computed on the flattened rows, where the neighbours of pixel p are p +- 1
    and p +- W, so every operation runs over long contiguous runs; the two
    border columns, where p +- 1 wraps to the next row, are then taken out of
    the sums.  int16 holds the Laplacian of uint8 luma exactly and the sums are
    exact integers.
    """
    b = cur.shape[0]
    n, w = height * width, width
    y = _buf(scratch, xp, "y16", b, n, xp.int16)
    y[...] = cur
    lap = _buf(scratch, xp, "lap", b, n - 2 * w, xp.int16)
    xp.multiply(y[:, w:n - w], 4, out=lap)
    lap -= y[:, w - 1:n - w - 1]
    lap -= y[:, w + 1:n - w + 1]
    lap -= y[:, :n - 2 * w]
    lap -= y[:, 2 * w:]
    border = lap.reshape(b, height - 2, w)[:, :, ::w - 1].astype(xp.int64)   # columns 0 and W-1
    sq = _buf(scratch, xp, "lap2", b, n - 2 * w, xp.int32)
    sq[...] = lap
    sq *= sq
    count = (height - 2) * (width - 2)
    s1 = lap.sum(axis=1, dtype=xp.int32 if 1020 * n < 2**31 else xp.int64) - border.sum(axis=(1, 2))
    s2 = sq.sum(axis=1, dtype=xp.int64) - (border * border).sum(axis=(1, 2))
    mean = s1.astype(xp.float64) / count
    return xp.maximum(s2.astype(xp.float64) / count - mean * mean, 0.0)


def blur_score(xp: Any, cur: Any, height: int, width: int, std: Any | None = None,
               scratch: Scratch | None = None) -> Any:
    """``var(Laplacian(Y)) / var(Y)`` per frame of (B, H*W) uint8 rows (0 if constant), (B,)."""
    if std is None:
        std = contrast(xp, cur, scratch)
    var = std * std
    lap = laplacian_var(xp, cur, height, width, scratch)
    return xp.where(var > EPS, lap / xp.maximum(var, EPS), 0.0).astype(xp.float32)


def temporal_score(xp: Any, cur: Any, prev: Any, std: Any | None = None,
                   scratch: Scratch | None = None) -> Any:
    """``mean |Y - prev| / std(Y)`` per frame of (B, N) uint8 rows, (B,).

    0 for two equal frames; +inf when a constant frame follows a different one.
    """
    if std is None:
        std = contrast(xp, cur, scratch)
    n = cur.shape[1]
    mad = absdiff(xp, cur, prev, scratch).sum(axis=1, dtype=_acc(xp, 255 * n)).astype(xp.float64) / n
    ratio = mad / xp.maximum(std, EPS)
    return xp.where(std > EPS, ratio, xp.where(mad > 0, xp.inf, 0.0)).astype(xp.float32)


def blockiness(xp: Any, cur: Any, height: int, width: int, scratch: Scratch | None = None) -> Any:
    """Mean |step| across the 8-pixel block grid over the mean |step| elsewhere, (B,).

    1 means no blocking.  Horizontal steps on the flattened rows: pair (p, p+1)
    is a grid step when p % 8 == 7, and a row wrap (not a step) when
    p % W == W - 1 (W is a multiple of 8, so wraps are among the p % 8 == 7).
    """
    if width % BLOCK or height % BLOCK:
        raise ValueError("blockiness needs a frame size that is a multiple of 8")
    b, n, w = cur.shape[0], height * width, width
    h_steps = absdiff(xp, cur[:, 1:], cur[:, :-1], scratch, "h-steps")
    acc = _acc(xp, 255 * n)
    h_all = h_steps.sum(axis=1, dtype=acc).astype(xp.int64)
    h_grid_wrap = h_steps[:, BLOCK - 1::BLOCK].sum(axis=1, dtype=acc).astype(xp.int64)
    h_wrap = h_steps[:, w - 1::w].sum(axis=1, dtype=acc).astype(xp.int64)
    v_steps = absdiff(xp, cur[:, w:], cur[:, :n - w], scratch, "v-steps")
    v_all = v_steps.sum(axis=1, dtype=acc).astype(xp.int64)
    v_grid = v_steps.reshape(b, height - 1, w)[:, BLOCK - 1::BLOCK, :].sum(axis=(1, 2), dtype=acc).astype(xp.int64)
    n_h_grid = (w // BLOCK - 1) * height
    n_v_grid = (height // BLOCK - 1) * w
    n_inner = (w - 1) * height - n_h_grid + (height - 1) * w - n_v_grid
    grid = ((h_grid_wrap - h_wrap) + v_grid) / (n_h_grid + n_v_grid)
    inner = ((h_all - h_grid_wrap) + (v_all - v_grid)) / n_inner
    return xp.where(inner > EPS, grid / xp.maximum(inner, EPS), 1.0).astype(xp.float32)


# ------------------------------------------------------------------ state --
@dataclass
class BatchResult:
    """Per-frame measures and verdict bits of one batch (arrays of module ``xp``)."""

    blur: Any
    smoothness: Any
    blockiness: Any
    flags: Any


def measure(xp: Any, frames: Any, prev: Any, height: int, width: int,
            scratch: Scratch | None = None) -> tuple[Any, Any, Any]:
    """(blur, temporal score, blockiness) of an I420 batch against ``prev`` (B, H*W) uint8."""
    cur = luma_rows(frames, height, width)
    std = contrast(xp, cur, scratch)
    return (blur_score(xp, cur, height, width, std, scratch), temporal_score(xp, cur, prev, std, scratch),
            blockiness(xp, cur, height, width, scratch))


class StreamStates:
    """The temporal state of ``n`` streams held by one analyser, on ``xp``'s device.

    Slot ``i`` is the analyser's i-th stream.  Kept per slot: the previous
    luma plane (uint8, so 10 000 QCIF streams hold 250 MB), the last blur
    scores, the motion baseline, the run of still frames, the jump count and the
    sticky verdict bits.  ``chunk`` frames are measured per array operation
    (None: the whole batch at once, right for a GPU; on a CPU a few dozen
    frames keep the temporaries in cache).
    """

    def __init__(self, xp: Any, n: int, height: int, width: int, chunk: int | None = None) -> None:
        self.xp, self.n, self.height, self.width, self.chunk = xp, n, height, width, chunk
        self.prev = xp.zeros((n, height * width), dtype=xp.uint8)
        self.has_prev = xp.zeros(n, dtype=bool)
        self.blur_ring = xp.full((n, BLUR_WINDOW), xp.inf, dtype=xp.float32)
        self.blur_count = xp.zeros(n, dtype=xp.int32)
        self.motion_ring = xp.full((n, MOTION_WINDOW), xp.nan, dtype=xp.float32)
        self.motion_count = xp.zeros(n, dtype=xp.int32)
        self.still_run = xp.zeros(n, dtype=xp.int32)
        self.jumps = xp.zeros(n, dtype=xp.int32)
        self.flags = xp.zeros(n, dtype=xp.int32)
        self.scratch = Scratch(xp)

    def analyse(self, frames: Any, slots: Any, restart: Any | None = None) -> BatchResult:
        """Analyse one batch: ``frames`` (B, H*3/2, W) uint8 on ``xp``'s device,
        ``slots`` (B,) distinct slot numbers, ``restart`` (B,) bool: the stream
        starts over at this frame (no previous frame to compare with)."""
        xp = self.xp
        slots = xp.asarray(slots, dtype=xp.int64)
        b = int(slots.size)
        if frames.shape[0] != b:
            raise ValueError(f"{frames.shape[0]} frames for {b} slots")
        if b != int(xp.unique(slots).size):
            raise ValueError("a batch holds at most one frame per stream")
        if b and (int(slots.min()) < 0 or int(slots.max()) >= self.n):
            raise ValueError(f"slot out of range [0, {self.n})")
        # a batch usually holds consecutive slots: then slices, not gathers, move the state
        contiguous = b > 0 and bool((xp.diff(slots) == 1).all())
        run = slice(int(slots[0]), int(slots[0]) + b) if contiguous else slots
        prev = self.prev[run]
        step = b if not self.chunk else self.chunk
        parts = [measure(xp, frames[i:i + step], prev[i:i + step], self.height, self.width, self.scratch)
                 for i in range(0, b, step)] or [measure(xp, frames, prev, self.height, self.width)]
        blur, smooth, block = (xp.concatenate([p[k] for p in parts]) for k in range(3))
        has_prev = self.has_prev[slots]
        if restart is not None:
            has_prev = has_prev & ~xp.asarray(restart, dtype=bool)
        smooth = xp.where(has_prev, smooth, xp.nan).astype(xp.float32)
        self.prev[run] = luma_rows(frames, self.height, self.width)
        self.has_prev[slots] = True
        self._update_verdicts(slots, blur, smooth, has_prev)
        return BatchResult(blur, smooth, block, self.flags[slots])

    def _update_verdicts(self, slots: Any, blur: Any, smooth: Any, has_prev: Any) -> None:
        xp = self.xp
        rows = xp.arange(slots.size)
        # blurred: median of the last BLUR_WINDOW blur scores (the ring starts at +inf)
        k = self.blur_count[slots]
        ring = self.blur_ring[slots]
        ring[rows, k % BLUR_WINDOW] = blur
        self.blur_ring[slots] = ring
        self.blur_count[slots] = k + 1
        blurred = (k + 1 >= BLUR_WINDOW) & (xp.median(ring, axis=1) < BLUR_THRESHOLD)
        # frozen: a run of still frames
        still = has_prev & (smooth < FREEZE_THRESHOLD)
        run = xp.where(still, self.still_run[slots] + 1, 0)
        self.still_run[slots] = run
        frozen = run >= FREEZE_RUN
        # choppy: jumps above the stream's own motion baseline
        m = self.motion_count[slots]
        mring = self.motion_ring[slots]
        ready = m >= MOTION_MIN
        base = xp.nanmedian(xp.where(ready[:, None], mring, 1.0), axis=1)
        jump = has_prev & ~still & ready & (smooth > JUMP_RATIO * base)
        ordinary = has_prev & ~still & ~jump
        sel = xp.nonzero(ordinary)[0]
        mring[sel, m[sel] % MOTION_WINDOW] = smooth[sel]
        self.motion_ring[slots] = mring
        self.motion_count[slots] = m + ordinary.astype(xp.int32)
        jumps = self.jumps[slots] + jump.astype(xp.int32)
        self.jumps[slots] = jumps
        choppy = jumps >= JUMPS_FOR_CHOPPY
        bits = (blurred.astype(xp.int32) * BLURRED + frozen.astype(xp.int32) * FROZEN
                + choppy.astype(xp.int32) * CHOPPY)
        self.flags[slots] = self.flags[slots] | bits


def result_rows(xp: Any, streams: Any, frame_numbers: Any, r: BatchResult) -> np.ndarray[Any, Any]:
    """The batch's result table (B, len(RESULT_COLUMNS)) float64, on the host."""
    table = xp.stack([xp.asarray(streams, dtype=xp.float64), xp.asarray(frame_numbers, dtype=xp.float64),
                      r.blur.astype(xp.float64), r.smoothness.astype(xp.float64),
                      r.blockiness.astype(xp.float64), r.flags.astype(xp.float64)], axis=1)
    out: np.ndarray[Any, Any] = table if xp is np else xp.asnumpy(table)
    return out
