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

# Only what every command needs is imported here: `aiopdbp launch` starts its
# ranks without loading numpy, asyncio or the runtime in the launcher's process
# (and a Ctrl-C while it starts meets main's handler, not an import).
import argparse
import json
import os
import platform
import socket
import sys
from collections.abc import Callable, Sequence
from importlib import metadata
from typing import TYPE_CHECKING, Any

from aiopdbp import __version__
from aiopdbp.env import uvloop_wanted

if TYPE_CHECKING:
    from aiopdbp.launch.emulate import EmulateConfig

__all__ = ["collect_info", "main"]


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
    from aiopdbp.hosts import gatecore, sendercore, splitincore  # noqa: F401  (importing them makes the choice)
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
        "numpy": _dist_version("numpy"),
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
def cmd_demo(args: argparse.Namespace) -> int:
    from aiopdbp.demo import DemoConfig, run_demo

    cfg = DemoConfig(transformers=args.transformers, frames=args.frames, height=args.height,
                     width=args.width, messages=args.messages, seed=args.seed,
                     timeout=args.timeout, inject_fault=args.inject_fault)
    return run_demo(cfg, use_uvloop=False if args.no_uvloop else None)


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

    from aiopdbp.demo import DemoConfig

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
        try:
            return cmd_launch(args_list[1:])
        except KeyboardInterrupt:  # before the launcher took SIGINT over: one line, no traceback
            print("aiopdbp launch: interrupted while starting the job", file=sys.stderr)
            return 130
    if args_list[:1] == ["bench"]:  # its own parser (aiopdbp.bench.cli)
        from aiopdbp.bench import main as bench_main

        return bench_main(args_list[1:])
    parser = build_parser()
    args = parser.parse_args(args_list)
    if args.command == "info":
        try:
            return cmd_info(args)
        except BrokenPipeError:  # `aiopdbp info | head`: the reader left, as with any Unix tool
            os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
            return 141
    if args.command == "demo":
        try:
            return cmd_demo(args)
        except KeyboardInterrupt:
            return 130
    parser.print_help()
    return 2


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
