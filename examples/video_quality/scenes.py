"""Procedural QCIF test clips with known degradations, encoded with libx264.

Theory of operation
-------------------
A *scene* is a pattern ``p(x, y, t)`` in [0, 1]: a moving background made of a
few random gratings, sharpened with ``tanh`` so that it has hard edges, plus
hard-edged discs and rectangles that move and bounce off the borders.  The
pattern is rendered analytically at every (integer or fractional) time, so a
moving texture is never resampled (resampling would blur it).  The luma of a
frame is ``brightness + contrast * 255 * (p - 0.5)``: scenes differ in
brightness and contrast by an affine map of the same kind of content, which is
what the analysers' normalisation must cancel.  Chroma is a smooth field plus
the shapes' colours, at half resolution (YUV 4:2:0).

A *clip* is a sequence of output frames, each showing one source time:

* ``ok``: source times 0, 1, 2, ...
* ``frozen``: one source frame repeated for ``freeze_len`` output frames (a
  stall), then playback continues where it stopped;
* ``choppy``: a few drop events, each skipping ``d`` source frames, so the
  picture jumps;
* ``blurred``: every frame Gaussian-blurred by ``blur_sigma`` pixels before
  quantisation (defocus).

Kinds combine (``blurred+frozen`` ...).  Every clip is encoded with libx264
(CRF 18 by default, no B-frames, one reference frame, a keyframe every 25 frames with
SPS/PPS repeated, so a decoder can join at any keyframe) and the ground truth
is written next to the clips (``truth.json`` and ``truth.csv``).
"""

from __future__ import annotations

import csv
import io
import json
import math
from collections.abc import Iterator, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

WIDTH, HEIGHT = 176, 144                 # QCIF
FPS = 25
DEFAULT_FRAMES = 60
FLAG_ORDER = ("blurred", "frozen", "choppy")  # verdict flags, in the order they are joined
#: the clip kinds a generated set cycles through (a few combined degradations included)
KIND_CYCLE = ("ok", "blurred", "frozen", "choppy", "ok", "blurred+frozen", "ok", "choppy+blurred")
X264_PARAMS = "keyint=25:min-keyint=25:scenecut=0:bframes=0:ref=1:repeat-headers=1:threads=1"

Array = np.ndarray[Any, Any]


def canonical_flags(kind: str) -> str:
    """``"choppy+blurred"`` -> ``"blurred+choppy"``; ``"ok"``/``""`` -> ``"ok"``."""
    parts = {p for p in kind.split("+") if p and p != "ok"}
    unknown = parts - set(FLAG_ORDER)
    if unknown:
        raise ValueError(f"unknown degradation(s) {sorted(unknown)}; known: {FLAG_ORDER}")
    return "+".join(f for f in FLAG_ORDER if f in parts) or "ok"


# ------------------------------------------------------------------ scenes --
@dataclass(frozen=True)
class Shape:
    kind: str                 # "disc" or "rect"
    x0: float
    y0: float
    vx: float
    vy: float
    size: float               # radius (disc) or half side (rect)
    level: float              # pattern value inside, 0..1
    u: float                  # chroma offsets
    v: float


@dataclass(frozen=True)
class Scene:
    """Everything needed to render a clip's frames (see the module doc)."""

    seed: int
    brightness: float
    contrast: float
    kx: tuple[float, ...]
    ky: tuple[float, ...]
    phase: tuple[float, ...]
    amp: tuple[float, ...]
    sharpness: float
    bg_vx: float
    bg_vy: float
    shapes: tuple[Shape, ...]
    noise: float = 0.004       # temporal noise (pattern units; scaled by contrast)


def make_scene(seed: int, brightness: float | None = None, contrast: float | None = None) -> Scene:
    """A random scene; ``brightness`` (mean luma) and ``contrast`` may be imposed."""
    rng = np.random.default_rng(seed)
    n = int(rng.integers(5, 9))
    wavelength = rng.uniform(7.0, 30.0, n)
    theta = rng.uniform(0, math.pi, n)
    k = 2 * math.pi / wavelength
    speed = rng.uniform(0.6, 1.6)
    direction = rng.uniform(0, 2 * math.pi)
    shapes = []
    for _ in range(int(rng.integers(3, 7))):
        sp = rng.uniform(0.6, 2.5)
        ang = rng.uniform(0, 2 * math.pi)
        shapes.append(Shape(
            kind=str(rng.choice(["disc", "rect"])),
            x0=float(rng.uniform(10, WIDTH - 10)), y0=float(rng.uniform(10, HEIGHT - 10)),
            vx=float(sp * math.cos(ang)), vy=float(sp * math.sin(ang)),
            size=float(rng.uniform(6, 20)), level=float(rng.choice([0.0, 0.1, 0.9, 1.0])),
            u=float(rng.uniform(-40, 40)), v=float(rng.uniform(-40, 40)),
        ))
    b = float(rng.uniform(60, 195)) if brightness is None else float(brightness)
    cmax = min(1.0, min(b, 255 - b) / 127.5)
    c = float(rng.uniform(0.3, max(0.3, cmax))) if contrast is None else float(contrast)
    if not (0 < c <= 1.0 and 0 <= b <= 255):
        raise ValueError(f"brightness must be in [0, 255] and contrast in (0, 1], got {b}, {c}")
    return Scene(
        seed=seed, brightness=b, contrast=c,
        kx=tuple(float(x) for x in k * np.cos(theta)), ky=tuple(float(x) for x in k * np.sin(theta)),
        phase=tuple(float(x) for x in rng.uniform(0, 2 * math.pi, n)),
        amp=tuple(float(x) for x in rng.uniform(0.5, 1.0, n)),
        sharpness=float(rng.uniform(1.5, 4.0)),
        bg_vx=float(speed * math.cos(direction)), bg_vy=float(speed * math.sin(direction)),
        shapes=tuple(shapes),
    )


_YY, _XX = np.mgrid[0:HEIGHT, 0:WIDTH].astype(np.float64)
_XS = np.arange(WIDTH, dtype=np.float64)
_YS = np.arange(HEIGHT, dtype=np.float64)


def _bounce(p0: float, v: float, t: float, lo: float, hi: float) -> float:
    """Position at time t of a point moving at v and reflecting off [lo, hi]."""
    span = hi - lo
    q = (p0 - lo + v * t) % (2 * span)
    return lo + (q if q <= span else 2 * span - q)


def render_pattern(scene: Scene, t: float) -> tuple[Array, Array, Array]:
    """The pattern p (H, W) in [0, 1] and the chroma offset fields u, v (H, W) at time t."""
    g = np.zeros((HEIGHT, WIDTH))
    ox, oy = scene.bg_vx * t, scene.bg_vy * t
    for kx, ky, ph, a in zip(scene.kx, scene.ky, scene.phase, scene.amp):
        # cos(kx(x-ox) + ky(y-oy) + ph) as an outer product: separable, cheap
        ax = kx * (_XS - ox)
        ay = ky * (_YS - oy) + ph
        g += a * (np.outer(np.cos(ay), np.cos(ax)) - np.outer(np.sin(ay), np.sin(ax)))
    g /= math.sqrt(0.5 * sum(a * a for a in scene.amp))
    p = 0.5 + 0.45 * np.tanh(scene.sharpness * g)
    u = 12.0 * np.tanh(g)
    v = -12.0 * np.tanh(0.5 * g)
    for s in scene.shapes:
        cx = _bounce(s.x0, s.vx, t, s.size, WIDTH - 1 - s.size)
        cy = _bounce(s.y0, s.vy, t, s.size, HEIGHT - 1 - s.size)
        if s.kind == "disc":
            mask = (_XX - cx) ** 2 + (_YY - cy) ** 2 <= s.size ** 2
        else:
            mask = (np.abs(_XX - cx) <= s.size) & (np.abs(_YY - cy) <= s.size * 0.7)
        p[mask] = s.level
        u[mask] = s.u
        v[mask] = s.v
    return p, u, v


def gaussian_blur(img: Array, sigma: float) -> Array:
    """Separable Gaussian blur with reflected borders (numpy only)."""
    if sigma <= 0:
        return img
    r = max(1, int(math.ceil(3 * sigma)))
    x = np.arange(-r, r + 1, dtype=np.float64)
    k = np.exp(-0.5 * (x / sigma) ** 2)
    k /= k.sum()
    out = img
    for axis in (0, 1):
        pad = [(0, 0), (0, 0)]
        pad[axis] = (r, r)
        padded = np.pad(out, pad, mode="reflect")
        n = out.shape[axis]
        acc = np.zeros_like(out, dtype=np.float64)
        for i, w in enumerate(k):
            acc += w * (padded[i:i + n, :] if axis == 0 else padded[:, i:i + n])
        out = acc
    return out


def render_frame(scene: Scene, t: float, blur_sigma: float = 0.0,
                 noise_rng: np.random.Generator | None = None) -> Array:
    """One I420 frame, shape (H * 3 // 2, W) uint8: Y rows, then U, then V."""
    p, u, v = render_pattern(scene, t)
    if noise_rng is not None and scene.noise > 0:
        p = p + noise_rng.normal(0.0, scene.noise, p.shape)
    if blur_sigma > 0:
        p = gaussian_blur(p, blur_sigma)
        u = gaussian_blur(u, blur_sigma)
        v = gaussian_blur(v, blur_sigma)
    y = scene.brightness + scene.contrast * 255.0 * (p - 0.5)
    out = np.empty((HEIGHT * 3 // 2, WIDTH), np.uint8)
    out[:HEIGHT] = np.clip(np.rint(y), 0, 255)
    ch, cw = HEIGHT // 2, WIDTH // 2
    for i, c in enumerate((u, v)):
        half = c.reshape(ch, 2, cw, 2).mean(axis=(1, 3))
        rows = np.clip(np.rint(128 + half), 0, 255).astype(np.uint8).reshape(ch * cw // WIDTH, WIDTH)
        out[HEIGHT + i * rows.shape[0]:HEIGHT + (i + 1) * rows.shape[0]] = rows
    return out


# ------------------------------------------------------------------- clips --
@dataclass
class ClipSpec:
    """What a clip shows and which degradations it carries (the ground truth)."""

    name: str
    seed: int
    kind: str                                   # canonical flags, e.g. "blurred+frozen" or "ok"
    frames: int = DEFAULT_FRAMES
    brightness: float | None = None
    contrast: float | None = None
    blur_sigma: float = 0.0
    freeze: tuple[int, int] | None = None       # (first output frame of the stall, length)
    drops: list[tuple[int, int]] = field(default_factory=list)  # (output frame, source frames skipped)
    crf: int = 18                               # libx264 quality (18: ~290 kbit/s; 28: ~90, 3G-like)

    def timeline(self) -> list[int]:
        """The source time shown by each output frame."""
        src: list[int] = []
        t = 0
        drops = dict(self.drops)
        i = 0
        while len(src) < self.frames:
            if self.freeze is not None and i == self.freeze[0]:
                src.extend([t - 1] * self.freeze[1])   # the last shown frame, repeated
                i += self.freeze[1]
                continue
            t += drops.get(i, 0)
            src.append(t)
            t += 1
            i += 1
        return src[:self.frames]


def make_spec(name: str, seed: int, kind: str, frames: int = DEFAULT_FRAMES,
              brightness: float | None = None, contrast: float | None = None,
              blur_sigma: float | None = None, crf: int = 18) -> ClipSpec:
    """Draw the degradation parameters of a clip of the given kind from ``seed``."""
    if frames < 40:
        raise ValueError(f"clips need at least 40 frames to carry a degradation, got {frames}")
    flags = canonical_flags(kind)
    parts = flags.split("+")
    rng = np.random.default_rng([seed, 7])
    if not 0 <= crf <= 51:
        raise ValueError(f"crf must be in 0..51, got {crf}")
    spec = ClipSpec(name, seed, flags, frames, brightness, contrast, crf=crf)
    if "blurred" in parts:
        spec.blur_sigma = float(rng.uniform(1.6, 3.0)) if blur_sigma is None else blur_sigma
    elif blur_sigma is not None:
        spec.blur_sigma = blur_sigma
    if "frozen" in parts:
        start = int(rng.integers(12, frames // 2))
        spec.freeze = (start, int(rng.integers(10, 16)))
    if "choppy" in parts:
        at = int(rng.integers(10, 14))
        while at < frames - 4 and len(spec.drops) < 5:
            if spec.freeze is None or not (spec.freeze[0] - 2 <= at <= sum(spec.freeze) + 2):
                spec.drops.append((at, int(rng.integers(3, 7))))
            at += int(rng.integers(6, 10))
    return spec


def plan_set(streams: int, seed: int, frames: int = DEFAULT_FRAMES, crf: int = 18) -> list[ClipSpec]:
    """The specs of a generated set: kinds cycle through :data:`KIND_CYCLE`."""
    if streams < 1:
        raise ValueError(f"--streams must be >= 1, got {streams}")
    specs = []
    for i in range(streams):
        kind = KIND_CYCLE[i % len(KIND_CYCLE)]
        clip_seed = seed * 100_003 + i
        specs.append(make_spec(f"clip{seed}-{i:04d}", clip_seed, kind, frames, crf=crf))
    return specs


def render_clip(spec: ClipSpec) -> Iterator[Array]:
    """The clip's I420 frames (see :func:`render_frame`)."""
    scene = make_scene(spec.seed, spec.brightness, spec.contrast)
    noise = np.random.default_rng([spec.seed, 11])
    cache: dict[int, Array] = {}
    for t in spec.timeline():
        if t not in cache:           # a repeated (frozen) frame is the very same picture
            cache.clear()
            cache[t] = render_frame(scene, float(t), spec.blur_sigma, noise)
        yield cache[t]


def encode_clip(spec: ClipSpec, target: str | Path | io.BytesIO, fmt: str | None = None) -> None:
    """Encode the clip with libx264 into a file (``.h264``, ``.mp4``, ``.mkv``) or a buffer."""
    import av

    if isinstance(target, io.BytesIO):
        container = av.open(target, "w", format=fmt or "h264")
    else:
        container = av.open(str(target), "w", format=fmt)
    try:
        stream = container.add_stream("libx264", rate=FPS, options={
            "crf": str(spec.crf), "preset": "veryfast", "tune": "zerolatency", "x264-params": X264_PARAMS})
        stream.width, stream.height, stream.pix_fmt = WIDTH, HEIGHT, "yuv420p"
        for i, img in enumerate(render_clip(spec)):
            frame = av.VideoFrame.from_ndarray(img, format="yuv420p")
            frame.pts = i
            container.mux(stream.encode(frame))
        container.mux(stream.encode(None))
    finally:
        container.close()


def encode_packets(spec: ClipSpec) -> Any:
    """The clip as Annex-B H.264 access units in memory (an ``ingest.ClipPackets``), for live mode."""
    from .ingest import demux

    buf = io.BytesIO()
    encode_clip(spec, buf, "h264")
    buf.seek(0)
    clip = demux(buf, spec.name, "h264")
    if len(clip.packets) != spec.frames:
        raise RuntimeError(f"{spec.name}: encoder produced {len(clip.packets)} packets for {spec.frames} frames")
    clip.flags = spec.kind
    return clip


def truth_record(spec: ClipSpec, file: str) -> dict[str, Any]:
    rec = asdict(spec)
    rec["file"] = file
    rec["flags"] = spec.kind
    scene = make_scene(spec.seed, spec.brightness, spec.contrast)
    rec["brightness"], rec["contrast"] = round(scene.brightness, 2), round(scene.contrast, 3)
    return rec


def write_truth(out: Path, records: Sequence[dict[str, Any]]) -> None:
    """``truth.json`` (every parameter) and ``truth.csv`` (file, flags, blur_sigma)."""
    (out / "truth.json").write_text(json.dumps(list(records), indent=1) + "\n", encoding="utf-8")
    with open(out / "truth.csv", "w", newline="", encoding="utf-8") as f:
        w = csv.writer(f)
        w.writerow(["file", "flags", "blur_sigma", "brightness", "contrast"])
        for r in records:
            w.writerow([r["file"], r["flags"], f"{r['blur_sigma']:.3f}", r["brightness"], r["contrast"]])


def read_truth(directory: str | Path) -> dict[str, str]:
    """file name -> expected verdict flags, from ``directory/truth.csv``."""
    return read_truth_file(Path(directory) / "truth.csv")


def read_truth_file(path: str | Path) -> dict[str, str]:
    """file name -> expected verdict flags, from a ``truth.csv`` written by
    :func:`generate`; ``ValueError`` for a CSV without its columns."""
    with open(path, newline="", encoding="utf-8") as f:
        reader = csv.DictReader(f)
        columns = reader.fieldnames or []
        if "file" not in columns or "flags" not in columns:
            raise ValueError(f"not a ground-truth file written by `generate`: its columns are "
                             f"{', '.join(columns) or 'none'}, not file, flags, ...")
        return {row["file"]: row["flags"] for row in reader}


def _encode_to(job: tuple[ClipSpec, Path]) -> None:
    encode_clip(*job)


def generate(out: str | Path, streams: int, seed: int = 1, frames: int = DEFAULT_FRAMES,
             fmt: str = "mp4", specs: Sequence[ClipSpec] | None = None, jobs: int = 1,
             crf: int = 18) -> list[Path]:
    """Encode a set of clips into ``out`` with their ground truth; returns the clip paths.

    ``jobs`` > 1 encodes in that many processes.
    """
    if fmt not in ("mp4", "mkv", "h264"):
        raise ValueError(f"format must be mp4, mkv or h264, got {fmt!r}")
    outdir = Path(out)
    outdir.mkdir(parents=True, exist_ok=True)
    specs = list(specs) if specs is not None else plan_set(streams, seed, frames, crf)
    paths = [outdir / f"{spec.name}.{fmt}" for spec in specs]
    work = list(zip(specs, paths))
    if jobs > 1 and len(work) > 1:
        from concurrent.futures import ProcessPoolExecutor

        with ProcessPoolExecutor(min(jobs, len(work))) as ex:
            list(ex.map(_encode_to, work))
    else:
        for job in work:
            _encode_to(job)
    write_truth(outdir, [truth_record(spec, path.name) for spec, path in work])
    return paths


def encode_bank(specs: Sequence[ClipSpec], jobs: int = 1) -> list[Any]:
    """:func:`encode_packets` of every spec, in ``jobs`` processes when > 1."""
    if jobs > 1 and len(specs) > 1:
        from concurrent.futures import ProcessPoolExecutor

        with ProcessPoolExecutor(min(jobs, len(specs))) as ex:
            return list(ex.map(encode_packets, specs))
    return [encode_packets(s) for s in specs]
