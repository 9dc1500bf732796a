"""H.264 ingest: per-stream decoders that write each stream's current frame as
YUV 4:2:0 planes into a row of a batch.

A batch row is one I420 frame, ``(H * 3 // 2, W)`` uint8: the Y plane's ``H``
rows, then the U plane and the V plane (``H/2 x W/2`` each) packed into the
remaining ``H/2`` rows -- FFmpeg's ``yuv420p`` layout, so a batch of ``B`` frames
is one contiguous ``(B, H * 3 // 2, W)`` array that travels as one stream.

Two kinds of source, each with its own decoder state:

* :class:`FileSource`: a clip file (``.h264``, ``.mp4``, ``.mkv``) read once, for
  ``analyse``;
* :class:`PacketSource`: a clip's compressed access units held in memory and
  replayed in a loop from a given keyframe, for ``live`` (many sources may share
  one packet list; each has its own ``av.CodecContext``).  A replay that wraps
  around marks its first frame ``restart`` so the analyser does not compare it
  with the clip's last frame.

Decoders run single-threaded (``thread_count = 1``): with thousands of streams
per process, FFmpeg's own threads would only multiply memory and context
switches; the parallelism is across streams and ranks.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

import numpy as np

CLIP_SUFFIXES = (".h264", ".264", ".mp4", ".mkv")

Array = np.ndarray[Any, Any]


def require_av() -> Any:
    """Import PyAV or fail with the install hint."""
    try:
        import av
    except ImportError as exc:  # pragma: no cover - depends on the environment
        raise SystemExit("the video example needs PyAV: pip install -e .[video]  (or: pip install av)") from exc
    return av


def find_clips(paths: Sequence[str | Path]) -> list[Path]:
    """The clip files named or contained (not recursively) in ``paths``, sorted per directory."""
    out: list[Path] = []
    for p in map(Path, paths):
        if p.is_dir():
            found = sorted(f for f in p.iterdir() if f.suffix.lower() in CLIP_SUFFIXES and f.is_file())
            if not found:
                raise FileNotFoundError(f"{p}: no {'/'.join(CLIP_SUFFIXES)} clips in this directory")
            out.extend(found)
        elif p.is_file():
            if p.suffix.lower() not in CLIP_SUFFIXES:
                raise ValueError(f"{p}: not a clip ({'/'.join(CLIP_SUFFIXES)})")
            out.append(p)
        else:
            raise FileNotFoundError(f"{p}: no such file or directory")
    names = [p.name for p in out]
    dup = sorted({n for n in names if names.count(n) > 1})
    if dup:
        raise ValueError(f"clip names must be unique (they name the CSV rows): {dup}")
    return out


def probe_size(path: Path) -> tuple[int, int]:
    """(width, height) of the clip's first video stream."""
    av = require_av()
    with av.open(str(path)) as c:
        if not c.streams.video:
            raise ValueError(f"{path}: no video stream")
        cc = c.streams.video[0].codec_context
        return int(cc.width), int(cc.height)


def common_size(paths: Sequence[Path]) -> tuple[int, int]:
    """The frame size every clip shares; a clear error when they differ."""
    sizes = {p: probe_size(p) for p in paths}
    distinct = sorted(set(sizes.values()))
    if len(distinct) != 1:
        listing = ", ".join(f"{p.name}: {w}x{h}" for p, (w, h) in list(sizes.items())[:6])
        raise ValueError(f"all clips of one run must have the same frame size; found {distinct} ({listing})")
    w, h = distinct[0]
    if w % 16 or h % 16:
        raise ValueError(f"frame size {w}x{h}: width and height must be multiples of 16")
    return w, h


def copy_planes(frame: Any, out: Array) -> None:
    """Write a decoded frame's Y, U, V planes into ``out`` (H*3/2, W) uint8."""
    if frame.format.name != "yuv420p":
        frame = frame.reformat(format="yuv420p")
    h, w = frame.height, frame.width
    flat = out.reshape(-1)
    at = 0
    for plane, (ph, pw) in zip(frame.planes, ((h, w), (h // 2, w // 2), (h // 2, w // 2))):
        src = np.frombuffer(plane, np.uint8).reshape(ph, plane.line_size)[:, :pw]
        flat[at:at + ph * pw].reshape(ph, pw)[...] = src
        at += ph * pw


def _single_threaded(cc: Any) -> None:
    cc.thread_count = 1
    cc.thread_type = "NONE"


@dataclass
class Decoded:
    """What a source produced for one batch row."""

    frame: int          # the stream's frame number (0, 1, ...)
    restart: bool       # no previous frame to compare with


class Source(Protocol):
    """A stream with its own decoder state."""

    done: bool

    def decode_into(self, out: Array) -> Decoded | None: ...


@dataclass
class StreamTable:
    """The run's streams, known identically on every rank (same arguments, same table)."""

    names: list[str]
    make_source: Callable[[int], Source]     # called on the stream's ingest rank only
    truth: list[str] | None = None           # expected verdict per stream, when known


class FileSource:
    """A clip file, decoded frame by frame (each source has its own demuxer and decoder)."""

    def __init__(self, path: Path, width: int, height: int) -> None:
        av = require_av()
        self.path, self.width, self.height = path, width, height
        self._container = av.open(str(path))
        stream = self._container.streams.video[0]
        _single_threaded(stream.codec_context)
        self._frames: Iterator[Any] = self._container.decode(stream)
        self._n = 0
        self.done = False

    def decode_into(self, out: Array) -> Decoded | None:
        """Decode the next frame into ``out``; None (and closed) at the end of the clip."""
        if self.done:
            return None
        try:
            frame = next(self._frames)
        except StopIteration:
            self.close()
            return None
        if (frame.width, frame.height) != (self.width, self.height):
            self.close()
            raise ValueError(f"{self.path}: frame {self._n} is {frame.width}x{frame.height}, "
                             f"expected {self.width}x{self.height}")
        copy_planes(frame, out)
        n = self._n
        self._n += 1
        return Decoded(n, n == 0)

    def close(self) -> None:
        if not self.done:
            self.done = True
            self._container.close()


class PacketSource:
    """A clip's H.264 access units, replayed in a loop through a decoder of its own."""

    def __init__(self, packets: Sequence[bytes], start: int = 0, extradata: bytes | None = None) -> None:
        av = require_av()
        if not packets:
            raise ValueError("a packet source needs at least one packet")
        self._av = av
        self.packets = packets
        self._pos = start % len(packets)
        self._cc = av.CodecContext.create("h264", "r")
        _single_threaded(self._cc)
        if extradata:
            self._cc.extradata = extradata
        self._n = 0
        self._restart = True
        self.done = False

    def decode_into(self, out: Array) -> Decoded:
        """Decode the stream's current access unit into ``out`` and move on."""
        frames = self._cc.decode(self._av.Packet(self.packets[self._pos]))
        if len(frames) != 1:
            raise RuntimeError(f"decoder returned {len(frames)} frames for one access unit "
                               "(clips must have no B-frames / no reordering delay)")
        copy_planes(frames[0], out)
        d = Decoded(self._n, self._restart)
        self._n += 1
        self._pos += 1
        self._restart = False
        if self._pos == len(self.packets):
            self._pos = 0
            self._restart = True
        return d


@dataclass
class ClipPackets:
    """A clip's compressed access units (one per frame) and what a decoder needs to join."""

    name: str
    packets: list[bytes]
    keys: list[int]                 # indices of keyframes (a fresh decoder may start there)
    extradata: bytes | None = None  # avcC of mp4/mkv clips; None for Annex B
    flags: str = ""                 # ground truth, when known

    def source(self, start_key: int = 0) -> PacketSource:
        """A new replaying source that starts at the ``start_key``-th keyframe (modulo)."""
        return PacketSource(self.packets, self.keys[start_key % len(self.keys)], self.extradata)


def demux(target: Any, name: str, fmt: str | None = None) -> ClipPackets:
    """Read a clip (a path or a binary file object) into a :class:`ClipPackets`."""
    av = require_av()
    with av.open(target if not isinstance(target, Path) else str(target), "r", format=fmt) as c:
        stream = c.streams.video[0]
        extradata = stream.codec_context.extradata
        packets: list[bytes] = []
        keys: list[int] = []
        for p in c.demux(stream):
            if p.size:
                if p.is_keyframe:
                    keys.append(len(packets))
                packets.append(bytes(p))
    if not packets:
        raise ValueError(f"{name}: no video packets")
    return ClipPackets(name, packets, keys or [0], bytes(extradata) if extradata else None)


def file_table(paths: Sequence[Path], width: int, height: int,
               truth_by_name: dict[str, str] | None = None) -> StreamTable:
    """One stream per clip file, named by the file name (``analyse``)."""
    names = [p.name for p in paths]
    truth = None
    if truth_by_name is not None and all(n in truth_by_name for n in names):
        truth = [truth_by_name[n] for n in names]
    return StreamTable(names, lambda s: FileSource(paths[s], width, height), truth)


def live_table(n: int, bank: Sequence[ClipPackets]) -> StreamTable:
    """``n`` synthetic live streams ``live-00000`` ...: stream ``s`` replays clip ``s % K``
    of the bank, joining at its ``(s // K)``-th keyframe, with a decoder of its own."""
    if not bank:
        raise ValueError("live mode needs at least one clip")
    k = len(bank)
    names = [f"live-{s:05d}" for s in range(n)]
    truth = [bank[s % k].flags for s in range(n)] if all(c.flags for c in bank) else None
    return StreamTable(names, lambda s: bank[s % k].source(s // k), truth)
