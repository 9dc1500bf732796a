"""How the thresholds were chosen: the measures of the tuning clips next to them.

``python -m examples.video_quality tune [--seeds 1,2,3]`` encodes and decodes the
generated clips of the given seeds (no aiopdbp: one stream state per clip,
frame by frame) and prints, for each decision, the two populations the
threshold must separate and where the threshold sits between them:

* blur: the median blur score of sharp clips vs blurred clips;
* still frames: smoothness inside freezes vs outside them;
* jumps: smoothness at a drop over the stream's motion baseline vs the same
  ratio for ordinary frames.

The thresholds in :mod:`.kernels` were set between these populations (about the
geometric mean of the closest values of seeds 1-3) and are not changed per run;
the tests use other seeds.
"""

from __future__ import annotations

from collections.abc import Sequence
from concurrent.futures import ProcessPoolExecutor
from typing import Any

import numpy as np

from . import kernels as k
from . import scenes


def clip_measures(spec: scenes.ClipSpec) -> tuple[scenes.ClipSpec, np.ndarray[Any, Any]]:
    """Decode a generated clip and return (spec, rows (frames, 3): blur, smoothness, flags)."""
    clip = scenes.encode_packets(spec)
    src = clip.source(0)
    frame = np.empty((1, scenes.HEIGHT * 3 // 2, scenes.WIDTH), np.uint8)
    state = k.StreamStates(np, 1, scenes.HEIGHT, scenes.WIDTH)
    rows = []
    for _ in range(spec.frames):
        src.decode_into(frame[0])
        r = state.analyse(frame, np.zeros(1, np.int64))
        rows.append((float(r.blur[0]), float(r.smoothness[0]), int(r.flags[0])))
    return spec, np.array(rows)


def _gap(name: str, low: Sequence[float], high: Sequence[float], threshold: float) -> None:
    lo, hi = max(low), min(high)
    print(f"{name}: highest of the low side {lo:.4f}, lowest of the high side {hi:.4f}, "
          f"threshold {threshold:.4f} (x{threshold / lo:.2f} above, x{hi / threshold:.2f} below)")


def main(seeds: Sequence[int], per_seed: int = 24) -> int:
    specs = [s for seed in seeds for s in scenes.plan_set(per_seed, seed)]
    with ProcessPoolExecutor(2) as ex:
        results = list(ex.map(clip_measures, specs))
    sharp: list[float] = []
    blurred: list[float] = []
    still: list[float] = []
    moving: list[float] = []
    jumps: list[float] = []
    ordinary: list[float] = []
    wrong = 0
    for spec, rows in results:
        (blurred if "blurred" in spec.kind else sharp).append(float(np.median(rows[:, 0])))
        frozen = np.zeros(spec.frames, bool)
        if spec.freeze:
            frozen[spec.freeze[0]:sum(spec.freeze)] = True
        drop_at = {a for a, _ in spec.drops}
        normal = [i for i in range(1, spec.frames) if not frozen[i] and i not in drop_at]
        still += [float(rows[i, 1]) for i in range(1, spec.frames) if frozen[i]]
        moving += [float(rows[i, 1]) for i in normal]
        for i in range(1, spec.frames):
            before = [j for j in normal if j < i][-k.MOTION_WINDOW:]
            if len(before) < k.MOTION_MIN or frozen[i]:
                continue
            ratio = float(rows[i, 1] / np.median(rows[before, 1]))
            (jumps if i in drop_at else ordinary).append(ratio)
        got = k.verdict_text(int(rows[-1, 2]))
        if got != spec.kind:
            wrong += 1
            print(f"  {spec.name}: verdict {got}, expected {spec.kind}")
    print(f"seeds {list(seeds)}: {len(results)} clips, {wrong} verdict(s) different from the truth")
    _gap("blur (median per clip: blurred < sharp)", blurred, sharp, k.BLUR_THRESHOLD)
    # a freeze's frames after the first few are the relevant ones: the encoder refines the
    # repeated picture for a couple of frames, which the FREEZE_RUN rule tolerates
    print(f"still frames: 90th percentile {np.percentile(still, 90):.4f}, max {max(still):.4f}; "
          f"moving frames: min {min(moving):.4f}; threshold {k.FREEZE_THRESHOLD:.4f}")
    _gap("jump ratio (ordinary < drop)", ordinary, jumps, k.JUMP_RATIO)
    return 1 if wrong else 0
