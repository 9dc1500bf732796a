"""Command line interface: ``aiopdbp info | demo | launch`` (also ``python -m aiopdbp``).

* ``aiopdbp info [--json]`` -- versions of aiopdbp, Python, numpy, the event
  loop, mpi4py and the MPI library, the ``mpiexec`` that ``launch`` would use,
  and CuPy with its CUDA devices.  It never initialises MPI.
* ``aiopdbp demo`` -- a small checked pipeline (producer -> transformers ->
  consumer) with short messages, multicast commands and data streams; exit
  code 0 when every checksum matches.  Runs unchanged on several ranks:
  ``aiopdbp launch -n 2 -m aiopdbp demo``.
* ``aiopdbp launch -n N [--tcp] prog.py args...`` -- run a program on N ranks
  with ``mpiexec`` (see :mod:`aiopdbp.launch.launcher`).
* ``aiopdbp bench [-n N] ...`` -- benchmarks (see :mod:`aiopdbp.bench`).
"""

from __future__ import annotations

import argparse
import asyncio
import dataclasses
import json
import os
import platform
import socket
import sys
import time
import zlib
from collections.abc import Callable, Sequence
from enum import IntEnum
from importlib import metadata
from typing import TYPE_CHECKING, Any

import numpy as np

from aiopdbp import __version__
from aiopdbp.env import uvloop_wanted
from aiopdbp.errors import PDBPError
from aiopdbp.runtime.node import Node, open_node, run
from aiopdbp.runtime.process import GP
from aiopdbp.wire.message import Message
from aiopdbp.streams.receiver import IncomingStream

if TYPE_CHECKING:
    from aiopdbp.launch.emulate import EmulateConfig

__all__ = ["DemoConfig", "collect_info", "demo_main", "main"]


# ===================================================================== info
def _dist_version(name: str) -> str | None:
    try:
        return metadata.version(name)
    except metadata.PackageNotFoundError:
        return None


def _mpi_info() -> dict[str, Any]:
    """mpi4py and MPI library versions, without initialising MPI.

    ``MPI_Get_library_version`` and ``MPI_Get_version`` may be called before
    ``MPI_Init``, so ``info`` works on a login node without ``mpiexec``.
    """
    out: dict[str, Any] = {"mpi4py": _dist_version("mpi4py"), "mpich_wheel": _dist_version("mpich")}
    if out["mpi4py"] is None:
        out["mpi_library"] = "not installed (pip install mpi4py)"
        return out
    try:
        if "mpi4py.MPI" not in sys.modules:
            import mpi4py

            mpi4py.rc.initialize = False  # only ask for versions: no MPI_Init here
            mpi4py.rc.finalize = False
        from mpi4py import MPI

        lib = MPI.Get_library_version().strip().splitlines()
        out["mpi_library"] = " ".join(lib[0].split()) if lib else "unknown"
        out["mpi_standard"] = "%d.%d" % MPI.Get_version()
        vendor, ver = MPI.get_vendor()
        out["mpi_vendor"] = f"{vendor} {'.'.join(map(str, ver))}"
    except Exception as exc:  # a broken MPI install must not break `info`
        out["mpi_library"] = f"unavailable ({type(exc).__name__}: {exc})"
    try:
        from aiopdbp.transport.mpi import mpi_world_size

        out["mpi_world_size"] = mpi_world_size()
    except Exception:
        pass
    return out


def _mpiexec() -> str:
    try:
        from aiopdbp.launch.launcher import find_mpiexec
    except ImportError:
        return "unknown (aiopdbp.launch.launcher unavailable)"
    try:
        return find_mpiexec()
    except FileNotFoundError as exc:
        return f"not found ({exc})"


def _cuda_info() -> dict[str, Any]:
    try:
        import cupy  # type: ignore[import-not-found, unused-ignore]
    except ImportError:
        return {"cupy": "not installed", "cuda_devices": []}
    except Exception as exc:
        return {"cupy": f"broken ({type(exc).__name__}: {exc})", "cuda_devices": []}
    out: dict[str, Any] = {"cupy": cupy.__version__, "cuda_devices": []}
    try:
        rt = cupy.cuda.runtime
        v = rt.runtimeGetVersion()
        out["cuda_runtime"] = f"{v // 1000}.{v % 1000 // 10}"
        for i in range(rt.getDeviceCount()):
            props = rt.getDeviceProperties(i)
            name = props["name"]
            out["cuda_devices"].append({
                "id": i,
                "name": name.decode() if isinstance(name, bytes) else str(name),
                "memory_gib": round(props["totalGlobalMem"] / 2**30, 1),
            })
    except Exception as exc:  # no driver / no device
        out["cuda_error"] = f"{type(exc).__name__}: {exc}"
    return out


def _core_info() -> str:
    """Which form of the data-path core runs (compiled or pure Python) and why:
    one form for all its modules, or each module's."""
    from aiopdbp import ext
    from aiopdbp.hosts import gatecore, sendercore  # noqa: F401  (importing them makes the choice)
    from aiopdbp.wire import core  # noqa: F401

    try:
        from aiopdbp.transport import receives  # noqa: F401  (the receive kernel's choice)
    except Exception as exc:  # mpi4py missing or broken: `info` says so elsewhere
        return "; ".join([*(f"{name}: {form}" for name, form in ext.core().items()),
                          f"kernel: not loaded ({type(exc).__name__}: {exc})"])
    forms = ext.core()
    if len(set(forms.values())) == 1:
        return f"{next(iter(forms.values()))}: {', '.join(sorted(forms))}"
    return "; ".join(f"{name}: {form}" for name, form in forms.items())


def collect_info() -> dict[str, Any]:
    """Everything ``aiopdbp info`` reports, as a JSON-able dict."""
    uvloop_version = _dist_version("uvloop")
    use_uvloop = uvloop_version is not None and uvloop_wanted()
    info: dict[str, Any] = {
        "aiopdbp": __version__,
        "python": f"{platform.python_implementation()} {sys.version.split()[0]} ({sys.executable})",
        "platform": platform.platform(),
        "host": socket.gethostname(),
        "cpus": os.cpu_count(),
        "numpy": np.__version__,
        "msgpack": _dist_version("msgpack"),
        "uvloop": uvloop_version or "not installed",
        "event_loop": "uvloop" if use_uvloop else "asyncio (default)",
        "core": _core_info(),
    }
    info.update(_mpi_info())
    info["mpiexec"] = _mpiexec()
    info.update(_cuda_info())
    return info


def cmd_info(args: argparse.Namespace) -> int:
    info = collect_info()
    if args.json:
        print(json.dumps(info, indent=2))
        return 0
    devices = info.pop("cuda_devices")
    width = max(len(k) for k in info)
    for key, value in info.items():
        print(f"{key:<{width}}  {value if value is not None else '-'}")
    if devices:
        for d in devices:
            print(f"{'cuda:' + str(d['id']):<{width}}  {d['name']}, {d['memory_gib']} GiB")
    elif info["cupy"] != "not installed":
        print(f"{'cuda_devices':<{width}}  none")
    return 0


# ===================================================================== demo
class Com(IntEnum):
    """Command codes used by the demo pipeline."""

    CONFIG = 1    # multicast producer -> transformers: offsets and counts
    READY = 2     # transformer -> producer: config taken
    WORK = 3      # producer -> transformer: one 64-byte work item (short message)
    ACK = 4       # transformer -> producer: all work items counted
    FRAMES = 5    # producer -> transformer: data stream of frames
    RESULT = 6    # transformer -> consumer: data stream of transformed frames
    STOP = 7      # multicast producer -> transformers + consumer: end of work + expected checksums
    REPORT = 8    # transformer -> consumer: what the transformer verified
    VERDICT = 9   # consumer -> producer: the final result


@dataclasses.dataclass
class DemoConfig:
    transformers: int = 3
    frames: int = 64
    height: int = 480
    width: int = 640
    messages: int = 30_000
    seed: int = 2024
    timeout: float = 60.0
    inject_fault: bool = False

    def names(self) -> list[str]:
        """GP names in placement order: GP i lives on rank i % size."""
        return ["producer", *(f"xform-{k}" for k in range(self.transformers)), "consumer"]


def _js(obj: Any) -> bytes:
    return json.dumps(obj, separators=(",", ":")).encode()


def _unjs(msg: Message) -> Any:
    return json.loads(bytes(msg.data))


class DemoFailure(Exception):
    """A check of the demo failed."""


async def _expect(gp: GP, com: Com, timeout: float) -> Message:
    item = await gp.recv(timeout=timeout)
    if isinstance(item, IncomingStream):
        await item.aclose()
        raise DemoFailure(f"{gp.name}: expected {com.name}, got a data stream")
    if item.com != com:
        raise DemoFailure(f"{gp.name}: expected {com.name}, got command {item.com} from {item.source}")
    return item


def _crc(buf: Any, start: int = 0) -> int:
    """CRC32 of an array's bytes (or any buffer), continuing from ``start``."""
    if isinstance(buf, np.ndarray):
        buf = np.ascontiguousarray(buf).data
    return zlib.crc32(buf, start)


def _frames(cfg: DemoConfig, k: int) -> np.ndarray[Any, np.dtype[np.uint8]]:
    rng = np.random.default_rng(cfg.seed + k)
    return rng.integers(0, 256, (cfg.frames, cfg.height, cfg.width), dtype=np.uint8)


def _offset(cfg: DemoConfig, k: int) -> int:
    return (cfg.seed + 17 * (k + 1)) % 251 + 1


async def _producer(gp: GP, cfg: DemoConfig, say: Callable[[str], None]) -> bool:
    xf = cfg.names()[1:-1]
    t = cfg.timeout
    for name in cfg.names():
        await gp.node.lookup(name, timeout=t)      # wait for GPs on other ranks
    per = [len(range(k, cfg.messages, len(xf))) for k in range(len(xf))]
    offsets = {name: _offset(cfg, k) for k, name in enumerate(xf)}
    await gp.command(xf, Com.CONFIG, _js({"offsets": offsets, "messages": dict(zip(xf, per))}), timeout=t)
    say(f"producer: multicast CONFIG to {len(xf)} transformers (offsets {', '.join(map(str, offsets.values()))})")
    for _ in xf:
        await _expect(gp, Com.READY, t)
    say(f"producer: all {len(xf)} transformers READY")

    # -- short messages: 64-byte work items, round-robin ---------------------
    pad = bytes(56)
    t0 = time.perf_counter()
    for i in range(cfg.messages):
        await gp.send(xf[i % len(xf)], i.to_bytes(8, "little") + pad, com=Com.WORK, timeout=t)
    ok = True
    for _ in xf:
        ack = _unjs(await _expect(gp, Com.ACK, t))
        k = xf.index(ack["name"])
        want = sum(range(k, cfg.messages, len(xf)))
        if ack["count"] != per[k] or ack["sum"] != want:
            say(f"producer: FAIL {ack['name']} counted {ack['count']} items / sum {ack['sum']}, "
                f"expected {per[k]} / {want}")
            ok = False
    t_msgs = time.perf_counter() - t0
    say(f"producer: {cfg.messages:,} short messages (64 B) sent and acknowledged, "
        f"counts and sums {'match' if ok else 'DO NOT match'}")

    # -- data streams: one array of frames per transformer ------------------
    frames = [_frames(cfg, k) for k in range(len(xf))]
    expect = {name: {"in": _crc(f), "out": _crc(f + np.uint8(offsets[name]))}
              for name, f in zip(xf, frames)}
    nbytes = sum(f.nbytes for f in frames)
    say(f"producer: streaming {cfg.frames} frames {cfg.height}x{cfg.width} u8 "
        f"({frames[0].nbytes / 1e6:.1f} MB) to each transformer")
    t0 = time.perf_counter()
    sent = await asyncio.gather(*(gp.send_stream(name, f, com=Com.FRAMES, timeout=t)
                                  for name, f in zip(xf, frames)))
    t_stream = time.perf_counter() - t0
    if sum(sent) != nbytes:
        say(f"producer: FAIL streams delivered {sum(sent)} bytes, expected {nbytes}")
        ok = False
    say(f"producer: {len(xf)} streams delivered ({nbytes / 1e6:.1f} MB)")

    # -- end of work: one multicast to every other GP --------------------------
    await gp.command([*xf, "consumer"], Com.STOP, _js({"expect": expect}), timeout=t)
    say(f"producer: multicast STOP (+ expected CRC32s) to {len(xf)} transformers and consumer")
    verdict = _unjs(await _expect(gp, Com.VERDICT, t))
    ok = ok and bool(verdict["ok"])
    say(f"producer: consumer's verdict: {'OK' if verdict['ok'] else 'FAILED'}")
    say(f"throughput: {cfg.messages / t_msgs:,.0f} msg/s (64 B work items, until all ACKs)")
    say(f"            {nbytes / t_stream / 1e9:.2f} GB/s (frame streams, until delivered)")
    say("  (a cold process: first-touch page faults and the pipeline's own work included;")
    say("   routing alone: benchmarks/bench_local.py)")
    return ok


async def _transformer(gp: GP, cfg: DemoConfig, say: Callable[[str], None]) -> bool:
    t = cfg.timeout
    config = _unjs(await _expect(gp, Com.CONFIG, t))
    offset = np.uint8(config["offsets"][gp.name])
    quota = config["messages"][gp.name]
    await gp.send("producer", com=Com.READY, timeout=t)
    count = total = 0
    crc_in: int | None = None
    while True:
        item = await gp.recv(timeout=t)
        if isinstance(item, IncomingStream):
            frames = await item.read()                # one ndarray, sender's dtype and shape
            crc_in = _crc(frames)
            out = frames + offset                      # the "computation"
            if cfg.inject_fault and gp.name == "xform-0":
                out[0, 0, 0] ^= 1
            await gp.send_stream("consumer", out, com=Com.RESULT, timeout=t)
            say(f"{gp.name}: stream of {frames.shape[0]} frames in, +{offset} mod 256, forwarded to consumer")
        elif item.com == Com.WORK:
            count += 1
            total += int.from_bytes(item.data[:8], "little")
            if count == quota:
                await gp.send("producer", _js({"name": gp.name, "count": count, "sum": total}),
                              com=Com.ACK, timeout=t)
        elif item.com == Com.STOP:
            want = _unjs(item)["expect"][gp.name]["in"]
            ok = bool(crc_in == want)
            await gp.send("consumer", _js({"name": gp.name, "ok": ok, "crc_in": crc_in}),
                          com=Com.REPORT, timeout=t)
            say(f"{gp.name}: STOP; input CRC32 {'ok' if ok else 'MISMATCH'}, {count:,} work items")
            return ok
        else:
            raise DemoFailure(f"{gp.name}: unexpected command {item.com} from {item.source}")


async def _consumer(gp: GP, cfg: DemoConfig, say: Callable[[str], None]) -> bool:
    t = cfg.timeout
    n = cfg.transformers
    got: dict[str, int] = {}            # transformer -> CRC32 of the stream received
    reports: dict[str, bool] = {}
    expect: dict[str, dict[str, int]] | None = None
    while len(got) < n or len(reports) < n or expect is None:
        item = await gp.recv(timeout=t)
        if isinstance(item, IncomingStream):
            crc, nbytes, nseg = 0, 0, 0
            async for seg in item:                       # segments in order, as they arrive
                crc = _crc(seg, crc)
                nbytes += seg.nbytes
                nseg += 1
            got[item.source] = crc
            say(f"consumer: stream from {item.source}: {nseg} segments, {nbytes / 1e6:.1f} MB")
        elif item.com == Com.REPORT:
            r = _unjs(item)
            reports[r["name"]] = bool(r["ok"])
        elif item.com == Com.STOP:
            expect = _unjs(item)["expect"]
        else:
            raise DemoFailure(f"consumer: unexpected command {item.com} from {item.source}")
    assert expect is not None
    bad = [name for name in expect if got.get(name) != expect[name]["out"] or not reports.get(name)]
    ok = not bad
    say(f"consumer: {n} result streams, CRC32 {'all match' if ok else 'MISMATCH at ' + ', '.join(bad)}")
    await gp.send("producer", _js({"ok": ok}), com=Com.VERDICT, timeout=t)
    return ok


_ROLES = {"producer": _producer, "consumer": _consumer}


async def demo_main(node: Node, cfg: DemoConfig | None = None, *,
                    rank: int | None = None, size: int | None = None,
                    say: Callable[[str], None] | None = None) -> bool:
    """Run this rank's part of the demo pipeline on ``node``; True if every check passed.

    GP ``i`` of ``cfg.names()`` lives on rank ``i % size`` and only that rank
    creates it; names on other ranks are found with ``lookup(..., timeout=)``.
    ``rank``/``size`` default to the node's.
    """
    cfg = cfg or DemoConfig()
    rank = node.rank if rank is None else rank
    size = node.size if size is None else size
    if cfg.transformers < 1 or cfg.frames < 1 or cfg.messages < cfg.transformers:
        raise ValueError("need >= 1 transformer, >= 1 frame and >= 1 message per transformer")
    if say is None:
        prefix = f"[demo {rank}/{size}]" if size > 1 else "[demo]"

        def say(line: str) -> None:
            print(f"{prefix} {line}", flush=True)

    mine = [name for i, name in enumerate(cfg.names()) if i % size == rank]
    if not mine:
        say("no GP placed on this rank")
        return True
    say(f"node {rank}/{size}: starting GPs {', '.join(mine)}")

    async def role(name: str) -> bool:
        fn = _ROLES.get(name, _transformer)
        async with node.process(name) as gp:
            return await fn(gp, cfg, say)

    failed = False
    try:
        async with asyncio.timeout(cfg.timeout), asyncio.TaskGroup() as tg:
            tasks = [tg.create_task(role(name)) for name in mine]
    except* (DemoFailure, TimeoutError, PDBPError) as eg:
        for exc in eg.exceptions:
            why = str(exc) or f"nothing arrived within --timeout {cfg.timeout:g} s"
            say(f"FAIL: {type(exc).__name__}: {why}")
        failed = True
    return not failed and all(task.result() for task in tasks)


async def _demo_node(cfg: DemoConfig) -> tuple[bool, str]:
    async with open_node() as node:
        ok = await demo_main(node, cfg)
        return ok, (f"[demo {node.rank}/{node.size}]" if node.size > 1 else "[demo]")


def cmd_demo(args: argparse.Namespace) -> int:
    cfg = DemoConfig(transformers=args.transformers, frames=args.frames, height=args.height,
                     width=args.width, messages=args.messages, seed=args.seed,
                     timeout=args.timeout, inject_fault=args.inject_fault)
    t0 = time.perf_counter()
    ok, prefix = run(_demo_node(cfg), use_uvloop=False if args.no_uvloop else None)
    status = "OK" if ok else "FAILED"
    print(f"{prefix} {status} in {time.perf_counter() - t0:.2f} s", flush=True)
    return 0 if ok else 1


# =================================================================== launch
LAUNCH_USAGE = ("usage: aiopdbp launch -n N [--tcp] [--emulate [--link RATE] [--hosts H]] [--] prog.py [args ...]"
                "  (or: -m module [args ...])\n       aiopdbp launch --emulate --cleanup")


class _UsageError(Exception):
    pass


def _parse_launch(tokens: Sequence[str]) -> tuple[int, bool, list[str], EmulateConfig | None] | None:
    """``-n N [--tcp] [--emulate ...] [--] argv...``: options end at the first other token."""
    n: int | None = None
    tcp = False
    emulate = False
    emu_opts: dict[str, str] = {}  # --emulate [--link RATE] [--hosts H]
    rest = list(tokens)
    while rest:
        tok = rest[0]
        if tok in ("-h", "--help"):
            print(LAUNCH_USAGE + "\n\n" + _launch_doc())
            return None
        if tok == "--":
            rest.pop(0)
            break
        if tok == "--tcp":
            tcp = True
        elif tok == "--emulate":
            emulate = True
        elif tok in ("--link", "--hosts"):
            if len(rest) < 2:
                raise _UsageError(f"{tok} needs a value")
            emu_opts[tok[2:]] = rest.pop(1)
        elif tok == "--cleanup":
            raise _UsageError("--cleanup goes alone: aiopdbp launch --emulate --cleanup")
        elif tok in ("-n", "-np", "--np"):
            if len(rest) < 2:
                raise _UsageError(f"{tok} needs a number")
            n = _int_arg(rest[1])
            rest.pop(0)
        elif tok.startswith("-n") and (tok[2:].lstrip("=").isdigit()):
            n = _int_arg(tok[2:].lstrip("="))
        else:
            break
        rest.pop(0)
    if n is None:
        raise _UsageError("-n N is required")
    if not rest:
        raise _UsageError("nothing to launch")
    if emu_opts and not emulate:
        raise _UsageError(f"--{' --'.join(emu_opts)} needs --emulate")
    return n, tcp, rest, _emulate_config(emu_opts) if emulate else None


def _emulate_config(opts: dict[str, str]) -> EmulateConfig:
    from aiopdbp.launch.emulate import EmulateConfig

    try:
        hosts = _int_arg(opts["hosts"]) if "hosts" in opts else None
        return EmulateConfig(link=opts.get("link", "1gbit"), hosts=hosts)
    except ValueError as exc:
        raise _UsageError(str(exc)) from None


def _positive(kind: Callable[[str], Any]) -> Callable[[str], Any]:
    """An argparse type: ``kind(s) > 0``, else a usage error (exit 2)."""
    def parse(s: str) -> Any:
        try:
            value = kind(s)
        except ValueError:
            raise argparse.ArgumentTypeError(f"{s!r} is not a number") from None
        if not value > 0:
            raise argparse.ArgumentTypeError(f"must be > 0, got {s}")
        return value
    parse.__name__ = kind.__name__
    return parse


def _int_arg(s: str) -> int:
    try:
        n = int(s)
    except ValueError:
        raise _UsageError(f"-n wants a number, got {s!r}") from None
    if n < 1:
        raise _UsageError("-n must be >= 1")
    return n


def _launch_doc() -> str:
    return ("Runs `mpiexec -n N <this python> prog.py args...` (mpiexec from the installed\n"
            "mpich wheel, else a system one; env AIOPDBP_MPIEXEC overrides) and exits with its code.\n"
            "--tcp  force the network path between local ranks "
            "(UCX_TLS=tcp,self MPIR_CVAR_NOLOCAL=1 FI_PROVIDER=tcp).\n"
            "--emulate  run the ranks on an emulated cluster: one network namespace per host\n"
            "  (H hosts, default N), links shaped with tc tbf to --link RATE each way (default\n"
            "  1gbit; 100mbit, 10gbit, none), no added delay. Needs root, ip and tc.\n"
            "  --emulate --cleanup removes leftovers of jobs whose owner died.")


def _unrunnable(argv: Sequence[str]) -> str | None:
    """Why python could not start ``argv`` (a missing script, an unknown
    ``-m`` module), or None.  Other leading python options are not checked.
    A leading interpreter (``python prog.py``) is skipped, as the launch
    command skips it (:func:`aiopdbp.launch.launcher.launch_command`)."""
    from aiopdbp.launch.launcher import names_python

    interpreter = len(argv) > 1 and names_python(argv[0])
    if interpreter:
        argv = argv[1:]
    if argv[0] == "-m":
        if len(argv) < 2:
            return "-m needs a module name"
        import importlib.util

        sys.path.insert(0, os.getcwd())   # as `python -m` does in each rank
        try:
            spec = importlib.util.find_spec(argv[1])
        except (ImportError, ValueError) as exc:
            return f"no module named {argv[1]!r} ({exc})"
        finally:
            sys.path.pop(0)
        return None if spec is not None else f"no module named {argv[1]!r}"
    if argv[0].startswith("-"):
        return None
    if not os.path.exists(argv[0]):
        return f"can't open file {argv[0]!r}: no such file"
    if interpreter:
        return None   # another python may take syntax that this one refuses
    return _syntax_error(argv[0])


def _syntax_error(path: str) -> str | None:
    """``path``'s syntax error as python shows it, after a first line that
    names it; None if it compiles (or cannot be read: its ranks say why)."""
    import traceback

    try:
        with open(path, "rb") as f:
            compile(f.read(), path, "exec", dont_inherit=True)
    except SyntaxError as exc:
        shown = "".join(traceback.format_exception_only(exc)).rstrip("\n")
        return f"{path!r} does not compile: {type(exc).__name__}: {exc.msg} (line {exc.lineno})\n{shown}"
    except (OSError, ValueError):   # unreadable, or null bytes: python says it in each rank
        return None
    return None


def cmd_launch(tokens: Sequence[str]) -> int:
    if set(tokens) == {"--emulate", "--cleanup"}:
        from aiopdbp.launch.emulate import cleanup_main

        return cleanup_main()
    try:
        parsed = _parse_launch(tokens)
    except _UsageError as exc:
        print(f"{LAUNCH_USAGE}\naiopdbp launch: error: {exc}", file=sys.stderr)
        return 2
    if parsed is None:
        return 0
    n, tcp, argv, emulate = parsed
    problem = _unrunnable(argv)
    if problem:   # once here, instead of once per rank from each rank's python
        first, _, shown = problem.partition("\n")
        print(f"aiopdbp launch: error: {first} (no rank was started)", file=sys.stderr)
        if shown:
            print(shown, file=sys.stderr)
        return 2
    from aiopdbp.launch.launcher import launch, reporting_failures

    return reporting_failures("aiopdbp launch", lambda: launch(n, argv, tcp=tcp, emulate=emulate))


# ===================================================================== main
def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="aiopdbp", description="aiopdbp: asyncio PDBP for GPU clusters.")
    p.add_argument("--version", action="version", version=f"aiopdbp {__version__}")
    sub = p.add_subparsers(dest="command", metavar="COMMAND")

    s = sub.add_parser("info", help="versions, event loop, MPI library, mpiexec, CUDA devices")
    s.add_argument("--json", action="store_true", help="print JSON")

    d = DemoConfig()
    s = sub.add_parser("demo", help="run a checked producer -> transformers -> consumer pipeline",
                       description="Producer -> transformers -> consumer: a multicast CONFIG, "
                       "64-byte work messages, frame streams, a multicast STOP; every result "
                       "is checked (exit code 1 on a mismatch). On N ranks, GP i lives on "
                       "rank i mod N: aiopdbp launch -n 2 -m aiopdbp demo")
    s.add_argument("--transformers", type=_positive(int), default=d.transformers, metavar="K")
    s.add_argument("--frames", type=_positive(int), default=d.frames,
                   help="frames per stream (default %(default)s)")
    s.add_argument("--height", type=_positive(int), default=d.height)
    s.add_argument("--width", type=_positive(int), default=d.width)
    s.add_argument("--messages", type=_positive(int), default=d.messages,
                   help="64-byte work messages (default %(default)s)")
    s.add_argument("--seed", type=int, default=d.seed)
    s.add_argument("--timeout", type=_positive(float), default=d.timeout,
                   help="seconds (default %(default)s)")
    s.add_argument("--no-uvloop", action="store_true", help="use the default asyncio loop")
    s.add_argument("--inject-fault", action="store_true",
                   help="corrupt one byte in xform-0 to show that verification fails (exit 1)")

    s = sub.add_parser("launch", help="run a program on N ranks with mpiexec", usage=LAUNCH_USAGE[7:],
                       description=_launch_doc())
    s.add_argument("-n", type=int, required=True, help="number of ranks")
    s.add_argument("--tcp", action="store_true", help="force TCP between local ranks")
    s.add_argument("--emulate", action="store_true", help="run on an emulated cluster (needs root)")
    s.add_argument("--link", default="1gbit", help="emulated link rate each way (default 1gbit)")
    s.add_argument("--hosts", type=int, help="emulated hosts (default: one per rank)")
    s.add_argument("--cleanup", action="store_true", help="with --emulate: remove dead jobs' leftovers")
    s.add_argument("argv", nargs=argparse.REMAINDER, help="prog.py args... or -m module args...")

    from aiopdbp.bench import register as register_bench

    register_bench(sub)
    return p


def main(argv: Sequence[str] | None = None) -> int:
    args_list = list(sys.argv[1:] if argv is None else argv)
    if args_list[:1] == ["launch"]:
        # argparse cannot take `-m module` after options; parse by hand.
        return cmd_launch(args_list[1:])
    if args_list[:1] == ["bench"]:  # its own parser (aiopdbp.bench.cli)
        from aiopdbp.bench import main as bench_main

        return bench_main(args_list[1:])
    parser = build_parser()
    args = parser.parse_args(args_list)
    if args.command == "info":
        return cmd_info(args)
    if args.command == "demo":
        try:
            return cmd_demo(args)
        except KeyboardInterrupt:
            return 130
    parser.print_help()
    return 2


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
