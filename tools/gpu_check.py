"""The Python steps of ``tools/gpu_check.sh`` (one per call, each in its own
process so the shell can kill it): ``info``, ``bandwidth``, ``blocking``, and
``record`` (merge a step's outcome into ``OUTDIR/gpu_check.json``).

Needs only the standard library, numpy and -- on a GPU -- CuPy; aiopdbp is
imported from the checkout (``PYTHONPATH``).  ``--mode sim`` runs the same
steps on the simulated device.
"""

from __future__ import annotations

import argparse
import importlib
import json
import os
import platform
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

MiB = 1 << 20
CHUNKS = [256 << 10, MiB, 4 * MiB, 16 * MiB]


def _version(mod: str) -> str | None:
    try:
        return str(getattr(importlib.import_module(mod), "__version__", "?"))
    except Exception as exc:  # absent or broken: say which
        return f"absent ({type(exc).__name__}: {exc})"[:200]


def info(mode: str) -> dict[str, Any]:
    """Versions of everything the GPU path depends on, and the device."""
    out: dict[str, Any] = {"python": sys.version.split()[0], "platform": platform.platform(),
                           "numpy": _version("numpy"), "mpi4py": _version("mpi4py"), "msgpack": _version("msgpack"),
                           "uvloop": _version("uvloop"), "pytest": _version("pytest"), "mode": mode}
    import aiopdbp

    out["aiopdbp"] = getattr(aiopdbp, "__version__", "?")
    out["aiopdbp_file"] = aiopdbp.__file__
    try:
        from aiopdbp import ext

        out["aiopdbp_compiled_core"] = bool(getattr(ext, "ACTIVE", getattr(ext, "active", False)))
    except Exception as exc:
        out["aiopdbp_compiled_core"] = f"not loaded ({type(exc).__name__})"
    if mode == "sim":
        out["device"] = "simulated (aiopdbp.device.sim)"
        return out
    import cupy as cp

    rt = cp.cuda.runtime
    out["cupy"] = cp.__version__
    out["cuda_runtime"] = rt.runtimeGetVersion()
    out["cuda_driver"] = rt.driverGetVersion()
    out["device_count"] = rt.getDeviceCount()
    props = rt.getDeviceProperties(0)
    out["device"] = props["name"].decode() if isinstance(props["name"], bytes) else str(props["name"])
    out["device_memory"] = int(props["totalGlobalMem"])
    out["async_engines"] = int(props.get("asyncEngineCount", -1))
    try:
        out["nvrtc"] = cp.cuda.nvrtc.getVersion()
    except Exception as exc:  # RawKernel (the tests' holds) needs it
        out["nvrtc"] = f"absent ({type(exc).__name__}: {exc})"[:200]
    return out


class _Device:
    """Pinned copies and a hold, over CuPy or the simulator."""

    def __init__(self, mode: str) -> None:
        self.mode = mode
        if mode == "sim":
            from aiopdbp.device import SimBackend

            self.backend: Any = SimBackend(copy_delay=20e-6, byte_delay=1 / 8e9)
        else:
            from aiopdbp.device.cupy_backend import CupyBackend

            self.backend = CupyBackend()
        self.stream = self.backend.create_stream(0)

    def array(self, nbytes: int) -> Any:
        if self.mode == "sim":
            return self.backend.empty((nbytes,), np.uint8, "C", 0)
        import cupy as cp

        return cp.zeros(nbytes, cp.uint8)

    def copy(self, arr: Any, bufs: list[Any], direction: str, chunk: int) -> float:
        be, nbytes = self.backend, int(arr.nbytes)
        t0 = time.perf_counter()
        for i, off in enumerate(range(0, nbytes, chunk)):
            view = bufs[i % len(bufs)][: min(chunk, nbytes - off)]
            if direction == "d2h":
                be.copy_d2h(arr, off, view, self.stream)
            else:
                be.copy_h2d(view, arr, off, self.stream)
        be.record_event(self.stream).synchronize()
        return time.perf_counter() - t0

    def close(self) -> None:
        self.backend.close()


def bandwidth(mode: str, size: int, chunks: list[int], out: Path) -> dict[str, Any]:
    """Pinned (and, for contrast, pageable) copy bandwidth per chunk size,
    written to ``out`` after every measurement."""
    dev = _Device(mode)
    arr = dev.array(size)
    rows: list[dict[str, Any]] = []
    result: dict[str, Any] = {"size": size, "rows": rows}
    try:
        for chunk in chunks:
            pinned = [dev.backend.alloc_pinned(chunk) for _ in range(2)]
            for direction in ("d2h", "h2d"):
                dev.copy(arr, pinned, direction, chunk)  # warm-up
                t = min(dev.copy(arr, pinned, direction, chunk) for _ in range(3))
                rows.append({"chunk": chunk, "direction": direction, "memory": "pinned", "GB/s": size / t / 1e9})
                out.write_text(json.dumps(result, indent=1))
        page = [np.empty(4 * MiB, np.uint8)]
        t = dev.copy(arr, page, "d2h", 4 * MiB)
        rows.append({"chunk": 4 * MiB, "direction": "d2h", "memory": "pageable", "GB/s": size / t / 1e9})
        out.write_text(json.dumps(result, indent=1))
    finally:
        dev.close()
    return result


_GATE = r"""
extern "C" __global__ void aiopdbp_gate(const volatile int* flag) {
    while (*flag == 0) { __nanosleep(1000); }
}
"""


def blocking(mode: str, out: Path, wait: float = 1.0) -> dict[str, Any]:
    """Which host calls return while a kernel is running on another stream:
    each is tried in a thread while a held kernel runs; ``blocks`` means it
    had not returned after ``wait`` s (it must return once the kernel ends)."""
    dev = _Device(mode)
    be = dev.backend
    result: dict[str, Any] = {"wait_s": wait, "calls": {}}
    held_stream = be.create_stream(0)
    other = be.create_stream(0)
    arr = dev.array(MiB)
    pinned = be.alloc_pinned(MiB)
    pageable = np.empty(MiB, np.uint8)
    probes: dict[str, Callable[[], Any]] = {
        "record_event_other_stream": lambda: be.record_event(other),
        "event_query": lambda: be.record_event(other).done(),
        "copy_d2h_pinned_other_stream": lambda: be.copy_d2h(arr, 0, pinned, other),
        "copy_d2h_pageable_other_stream": lambda: be.copy_d2h(arr, 0, pageable, other),
        "copy_d2h_pageable_held_stream": lambda: be.copy_d2h(arr, 0, pageable, held_stream),
        "create_stream": lambda: be.create_stream(0),
        "alloc_pinned": lambda: be.alloc_pinned(MiB),
    }
    if mode == "cupy":
        import cupy as cp

        rt = cp.cuda.runtime
        probes.update({
            "cudaMalloc": lambda: rt.free(rt.malloc(64 * MiB)),
            "cudaHostAlloc+cudaFreeHost": lambda: rt.freeHost(rt.hostAlloc(MiB, 0)),
            "pool_allocation": lambda: cp.empty(MiB, cp.uint8),
        })
    try:
        for name, call in probes.items():
            hold = _hold(dev, held_stream)
            done = threading.Event()
            error: list[BaseException] = []

            def run(call: Callable[[], Any] = call, done: threading.Event = done, error: list[BaseException] = error) -> None:
                try:
                    call()
                except BaseException as exc:  # reported, not raised
                    error.append(exc)
                finally:
                    done.set()

            t = threading.Thread(target=run, daemon=True)
            t.start()
            returned = done.wait(wait)
            hold()
            finished = done.wait(30)
            result["calls"][name] = {"blocks": not returned, "returned_after_release": finished,
                                     **({"error": repr(error[0])[:200]} if error else {})}
            out.write_text(json.dumps(result, indent=1))
            if not finished:  # a call that never returns: the shell's kill ends this step
                raise SystemExit(f"{name} did not return after the kernel ended")
            be.record_event(held_stream).synchronize()
    finally:
        dev.close()
    return result


def _hold(dev: _Device, stream: Any) -> Callable[[], None]:
    """Start a held kernel on ``stream``; returns its release."""
    if dev.mode == "sim":
        return dev.backend.hold(stream).release  # type: ignore[no-any-return]
    import cupy as cp

    mem = cp.cuda.alloc_pinned_memory(4)
    flag = np.frombuffer(mem, np.int32, 1)
    flag[0] = 0
    with stream.owner:
        cp.RawKernel(_GATE, "aiopdbp_gate")((1,), (1,), (np.uint64(flag.ctypes.data),))

    def release() -> None:
        flag[0] = 1
        _keep.append(mem)

    return release


_keep: list[Any] = []


def record(outdir: Path, step: str, rc: int, seconds: float, limit: int, note: str) -> None:
    """Merge one step's outcome (and its own JSON, if it wrote one) into gpu_check.json."""
    path = outdir / "gpu_check.json"
    data: dict[str, Any] = json.loads(path.read_text()) if path.exists() else {"steps": {}}
    status = "ok" if rc == 0 else "timeout (killed)" if rc in (124, 137) else "skipped" if rc < 0 else "failed"
    entry: dict[str, Any] = {"status": status, "rc": rc, "seconds": round(seconds, 1), "limit_s": limit}
    if note:
        entry["note"] = note
    own = outdir / f"{step}.json"
    if own.exists():
        try:
            entry["result"] = json.loads(own.read_text())
        except ValueError:
            entry["result"] = "unreadable (killed while writing)"
    log = outdir / f"{step}.log"
    if log.exists() and rc != 0:
        entry["log_tail"] = log.read_text(errors="replace")[-2000:]
    data["steps"][step] = entry
    data["updated"] = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
    tmp = path.with_suffix(".tmp")
    tmp.write_text(json.dumps(data, indent=1))
    os.replace(tmp, path)  # whole or not at all, whenever the run is killed


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("what", choices=["info", "bandwidth", "blocking", "record"])
    ap.add_argument("outdir", type=Path)
    ap.add_argument("--mode", choices=["cupy", "sim"], default="cupy")
    ap.add_argument("--size", type=int, default=256 * MiB)
    ap.add_argument("--step", default="")
    ap.add_argument("--rc", type=int, default=0)
    ap.add_argument("--seconds", type=float, default=0.0)
    ap.add_argument("--limit", type=int, default=0)
    ap.add_argument("--note", default="")
    a = ap.parse_args()
    if a.what == "record":
        record(a.outdir, a.step, a.rc, a.seconds, a.limit, a.note)
        return 0
    out = a.outdir / f"{a.what}.json"
    if a.what == "info":
        out.write_text(json.dumps(info(a.mode), indent=1))
    elif a.what == "bandwidth":
        chunks = CHUNKS if a.mode == "cupy" else CHUNKS[:2]
        bandwidth(a.mode, a.size, chunks, out)
    else:
        blocking(a.mode, out, wait=1.0 if a.mode == "cupy" else 0.2)
    return 0


if __name__ == "__main__":
    sys.exit(main())
