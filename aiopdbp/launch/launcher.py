"""Start an aiopdbp program on N ranks with ``mpiexec`` (``aiopdbp launch``).

``launch(4, ["prog.py", "--size", "1M"])`` runs
``mpiexec -n 4 <this python> prog.py --size 1M`` and returns its exit code.
Nothing here imports mpi4py.

``tcp=True`` makes MPICH use its network path even between ranks on one
machine, standing in for a cluster interconnect: ``MPIR_CVAR_NOLOCAL=1``
(no shared-memory fast path between local ranks) and ``UCX_TLS=tcp,self``
(the UCX netmod -- the ``mpich`` wheel's default -- uses TCP sockets only).
``FI_PROVIDER=tcp`` is set as well, which has the same effect should the OFI
netmod be selected (``MPIR_CVAR_CH4_NETMOD=ofi``).  Other MPI libraries
ignore these variables.
"""

from __future__ import annotations

import contextlib
import os
import re
import select
import shutil
import signal
import subprocess
import sys
import sysconfig
import tempfile
import threading
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

from aiopdbp.env import JOB_DIR, LAUNCHER, inherited, mpiexec_override, recorded_ranks, recorded_stop
from aiopdbp.launch.emulate import (
    EmulateConfig,
    EmulatedCluster,
    EmulateError,
    EmulationUnavailable,
    check_requirements,
)
from aiopdbp.launch.exits import Ended, KernelLog, how_it_ended
from aiopdbp.launch.watch import JobWatch
from aiopdbp.rankout import wraps

__all__ = ["find_mpiexec", "launch", "launch_command", "launch_emulated", "launch_env",
           "reporting_failures", "run_job", "TCP_ENV"]

#: environment that forces MPICH onto TCP between local ranks
TCP_ENV: Mapping[str, str] = {
    "MPIR_CVAR_NOLOCAL": "1",
    "UCX_TLS": "tcp,self",
    "FI_PROVIDER": "tcp",
}


def _executable(path: Path) -> bool:
    return path.is_file() and os.access(path, os.X_OK)


def _mpich_wheel_mpiexec() -> list[Path]:
    """Where the ``mpich`` wheel (if installed) put its ``mpiexec``."""
    from importlib.metadata import PackageNotFoundError, files

    try:
        return [Path(os.path.normpath(str(f.locate()))) for f in files("mpich") or () if f.name == "mpiexec"]
    except PackageNotFoundError:
        return []


def find_mpiexec() -> str:
    """Path of the ``mpiexec`` to use.

    Search order: env ``AIOPDBP_MPIEXEC``; the ``mpiexec`` next to
    ``sys.executable`` (a virtual environment's ``bin``); the one the
    ``mpich`` wheel installed (its scripts directory, found from the wheel's
    file list); ``mpiexec`` then ``mpirun`` on ``PATH``.  Raises
    :class:`FileNotFoundError` with a hint when there is none.
    """
    override = mpiexec_override()
    if override:
        found = shutil.which(override)
        if found is None:
            raise FileNotFoundError(f"AIOPDBP_MPIEXEC={override!r} is not an executable")
        return found

    candidates: list[Path] = [Path(sys.executable).parent / "mpiexec", *_mpich_wheel_mpiexec()]
    for scheme_path in (sysconfig.get_path("scripts"), sysconfig.get_path("scripts", f"{os.name}_user")):
        if scheme_path:
            candidates.append(Path(scheme_path) / "mpiexec")
    for cand in candidates:
        if _executable(cand):
            return str(cand)
    for name in ("mpiexec", "mpirun"):
        found = shutil.which(name)
        if found is not None:
            return found
    raise FileNotFoundError(
        "no mpiexec found: install an MPI library (e.g. `pip install mpich`, which aiopdbp "
        "depends on) or put your MPI's mpiexec on PATH, or set AIOPDBP_MPIEXEC"
    )


def launch_env(
    *, tcp: bool = False, extra_env: Mapping[str, str] | None = None, base: Mapping[str, str] | None = None
) -> dict[str, str]:
    """Environment for the launched job: ``base`` (default: this process's) + TCP + extra."""
    env = inherited() if base is None else dict(base)
    if tcp:
        env.update(TCP_ENV)
    if extra_env:
        env.update(extra_env)
    return env


def launch_command(
    n: int, argv: Sequence[str], *, mpiexec_args: Iterable[str] = (), python: str | None = None
) -> list[str]:
    """``[mpiexec, *mpiexec_args, -n, N, python, -m, aiopdbp.rankout, *argv]``.

    ``argv`` may start with the interpreter itself, as people type it
    (``aiopdbp launch -n 2 python prog.py``): a bare ``python``/``python3``
    means this interpreter, a path to one (``/opt/py/bin/python3.12``) that one.
    A script or ``-m module`` runs under :mod:`aiopdbp.rankout`, which
    prefixes the rank's output from its start (a traceback at import
    included); interpreter options (``-u prog.py``, ``-c``) run as given.
    """
    if n < 1:
        raise ValueError(f"number of ranks must be >= 1, got {n}")
    if not argv:
        raise ValueError("nothing to launch: argv is empty")
    if names_python(argv[0]) and len(argv) > 1:
        python = argv[0] if os.sep in argv[0] else python
        argv = argv[1:]
    rank_main = ["-m", "aiopdbp.rankout"] if wraps(argv) else []
    return [find_mpiexec(), *mpiexec_args, "-n", str(n), python or sys.executable, *rank_main, *argv]


_PYTHON = re.compile(r"python(\d+(\.\d+)?)?")


def names_python(arg: str) -> bool:
    """Whether ``arg`` is an interpreter as people type it before their
    script (``python``, ``python3.12``, ``/opt/py/bin/python3``)."""
    return _PYTHON.fullmatch(os.path.basename(arg)) is not None


def _die_with_parent() -> None:  # pragma: no cover - runs in the child
    """mpiexec gets SIGTERM (and forwards it to the ranks) if the launcher dies."""
    try:
        import ctypes

        ctypes.CDLL(None, use_errno=True).prctl(1, signal.SIGTERM)  # PR_SET_PDEATHSIG
    except Exception:
        pass


def reporting_failures(prog: str, start: Callable[[], int]) -> int:
    """``start()``, with a launcher that cannot start turned into one line on
    stderr and an exit code: 127 without ``mpiexec``, 2 where this machine or
    user cannot emulate a cluster, 1 when the emulation failed."""
    try:
        return start()
    except FileNotFoundError as exc:
        print(f"{prog}: {exc}", file=sys.stderr)
        return 127
    except EmulateError as exc:
        print(f"{prog}: {exc}", file=sys.stderr)
        return 2 if isinstance(exc, EmulationUnavailable) else 1


def launch(
    n: int,
    argv: Sequence[str],
    *,
    tcp: bool = False,
    extra_env: Mapping[str, str] | None = None,
    mpiexec_args: Iterable[str] = (),
    timeout: float | None = None,
    emulate: EmulateConfig | str | None = None,
    grace: float = 5.0,
) -> int:
    """Run ``mpiexec -n N python argv...`` and return its exit code.

    ``argv`` is what would follow ``python`` (a script and its arguments, or
    ``-m module ...``).  ``tcp`` forces the network path (see module doc);
    ``extra_env`` adds variables; ``mpiexec_args`` go before ``-n``.  A
    signal death is reported as ``128 + signal`` like a shell does; on
    ``timeout`` the job is killed and 124 returned.
    ``emulate`` (an :class:`~aiopdbp.launch.emulate.EmulateConfig` or a link rate
    such as ``"1gbit"``) runs the ranks on an emulated cluster, one host per
    rank by default (see :mod:`aiopdbp.launch.emulate`; needs root).

    Interrupts: ``mpiexec`` runs in a session of its own; a SIGINT (Ctrl-C)
    or SIGTERM to the launcher is passed straight to the ranks, which stop
    every rank (see :mod:`aiopdbp.runtime.job`); after ``grace`` seconds, or at a
    second Ctrl-C, whatever is left of the job is killed.  The launcher
    prints one line and returns 130 (SIGINT) or 143 (SIGTERM).  Whatever
    the end, the MPICH shared-memory segments the job's processes mapped and
    left behind are removed (:class:`JobWatch`).
    """
    if emulate is not None:
        return launch_emulated(n, argv, emulate, tcp=tcp, extra_env=extra_env,
                               mpiexec_args=list(mpiexec_args), timeout=timeout,
                               log=lambda line: print(f"aiopdbp launch: {line}", file=sys.stderr))
    cmd = launch_command(n, argv, mpiexec_args=mpiexec_args)
    env = launch_env(tcp=tcp, extra_env={LAUNCHER: "1", **(extra_env or {})})
    return run_job(cmd, env, timeout=timeout, grace=grace)


#: how long a rank may be gone, unstarted, before the launcher stops the job (hydra may first)
EARLY_EXIT_GRACE_S = 1.0

#: how long after a rank vanished during ``aiopdbp.run`` the launcher stops the others itself:
#: hydra does within milliseconds -- except after an ``os._exit(0)`` it reaps before it reads
#: the rank's PMI socket close, which it then takes for a normal end
VANISHED_GRACE_S = 1.0


def _rank_name(end: Ended, pids: Mapping[int, int]) -> str:
    """``rank 1 (pid 4102)``; ``pid 4102`` when its rank is not known."""
    rank = end.rank if end.rank is not None else pids.get(end.pid)
    return f"pid {end.pid}" if rank is None else f"rank {rank} (pid {end.pid})"


def _vanish_line(ends: Sequence[Ended], job_dir: str, log: KernelLog | None = None) -> str:
    """A line naming the rank that ended first while in ``aiopdbp.run``
    with no failure or interrupt recorded -- it vanished: a signal, the
    out-of-memory killer, ``os._exit`` -- and how it ended; or, when no rank
    had reached ``aiopdbp.run``, the rank a signal killed first; "" when none
    did.  Ranks seen ended in the same look cannot be ordered: all are named."""
    started, done = recorded_ranks(job_dir)
    if recorded_stop(job_dir)[0] is not None:
        return ""    # a rank reported a failure or an interrupt: its line says it
    pids = {pid: rank for rank, pid in started.items()}
    first: list[Ended] = []
    before_run = False
    for end in ends:
        rank = end.rank if end.rank is not None else pids.get(end.pid)
        if rank is None or rank in done:
            continue   # not a rank, or its run returned
        if started.get(rank) != end.pid:
            # not in aiopdbp.run (yet): its end is the job's first only when
            # a signal killed it (an exit there is _left_before_run's).  When
            # no rank reached aiopdbp.run (a long import under load, a plain
            # MPI program) a kill is still the cause: named only if it is the
            # first end seen, since hydra's own kills follow any first end
            signalled = end.status is not None and os.WIFSIGNALED(end.status)
            if not started and not signalled:
                break
            if first or not signalled:
                continue
            before_run = True
        if first and end.look != first[0].look:
            break
        first.append(end)
        if before_run:
            break
    if not first:
        return ""
    if len(first) == 1:
        what = f"{_rank_name(first[0], pids)} {how_it_ended(first[0], log)}"
    else:
        what = (f"{', '.join(f'{_rank_name(e, pids)} {how_it_ended(e, log)}' for e in first)} "
                "(ended at the same moment)")
    when = "" if not started else " before it started aiopdbp.run" if before_run else " during aiopdbp.run"
    return f"{what}{when}, the first rank to end; the others were stopped"


def _left_before_run(watch: JobWatch, job_dir: str, now: float, seen: dict[int, float]) -> str:
    """A line when a rank's process ended without starting ``aiopdbp.run``
    (it failed at import, say) while other ranks did start it: they would
    wait for it in their start-up handshake until it times out (30 s by
    default).  "" otherwise, or while that is younger than
    :data:`EARLY_EXIT_GRACE_S`."""
    gone = watch.gone_ranks()
    if not gone:
        return ""
    started, done = recorded_ranks(job_dir)
    if not started or done or len(started) >= watch.rank_count():
        # not an aiopdbp.run program, or none started yet; a rank already
        # finished; or every rank process started it (a rank process that
        # is a wrapper around python then ended after its python)
        return ""
    in_run = set(started.values())
    early = [p for p in gone if p not in in_run]
    for p in early:
        seen.setdefault(p, now)
    late = sorted(p for p in early if now - seen[p] >= EARLY_EXIT_GRACE_S)
    if not late:
        return ""
    ends = {e.pid: e for e in watch.ended}
    who = ", ".join(f"{_rank_name(ends[p], {})} {how_it_ended(ends[p], watch.kernel_log, 'ended')}" if p in ends
                    else f"{_rank_name(Ended(p, watch.rank_of.get(p), 0, 0, None), {})} ended"
                    for p in late)
    return (f"{who} before starting aiopdbp.run (see its output above) while the other ranks wait for "
            "it in their start-up handshake: the job was stopped")


def _vanished(job_dir: str) -> str:
    """A line naming the ranks whose ``aiopdbp.run`` started and never
    returned although none recorded a failure or an interrupt ("" when
    every one returned, or none used ``aiopdbp.run``)."""
    started, done = recorded_ranks(job_dir)
    gone = sorted(set(started) - done)
    if not gone:
        return ""
    who = ", ".join(f"{r} (pid {started[r]})" for r in gone)
    return ("the job ended without aiopdbp's report: a rank was killed (a signal, out of memory) "
            "or left by os._exit, and hydra ended the others; never returned from aiopdbp.run: "
            f"rank{'s' if len(gone) > 1 else ''} {who}")


#: how long hydra's banner is held for the launcher's line on the rank that vanished
BANNER_HOLD_S = 2.0
#: the start of hydra's banner for a job that ended badly (it names a pid, often not the first to end)
_BANNER = re.compile(rb"(?:^|(?<=\n))\n*=+\n=\s+BAD TERMINATION")   # (from a line's start)
#: the end of a read that may be the start of hydra's banner cut in two (hydra writes it a line at a time)
_BANNER_CUT = re.compile(rb"(?:^|(?<=\n))\n*=+(?:\n(?:=[ \t]*(?:B[A-Z ]*)?)?)?\Z")
#: how long such an end waits for the rest of its line before it is forwarded as it is
BANNER_CUT_WAIT_S = 0.05
#: the lines of hydra's banner: its box, and what it says below it when a rank was signalled
_BANNER_LINE = re.compile(rb"(?:|=.*|YOUR APPLICATION TERMINATED WITH THE EXIT STRING: .*"
                          rb"|This typically refers to a problem with your application\."
                          rb"|Please see the FAQ page for debugging suggestions)")


def _write_stdout(data: bytes) -> None:
    with contextlib.suppress(OSError, ValueError):
        if hasattr(sys.stdout, "buffer"):
            sys.stdout.buffer.write(data)
            sys.stdout.buffer.flush()
        else:
            os.write(1, data)


def _forward(src: int, hold: Callable[[], bool], write: Callable[[bytes], None] = _write_stdout) -> None:
    """(a thread) mpiexec's stdout to ``write`` as it comes, except that hydra's
    banner waits for ``hold()``: the launcher's line naming the rank that
    vanished first must come first, and the banner is printed the moment
    hydra has ended the ranks -- possibly before the launcher's watch
    thread, on a loaded machine, has run at all.  ``hold()`` returns False
    when the banner is no news (the job was interrupted, or a rank reported
    its failure: the ranks it calls badly terminated are the ones that were
    stopped for it, and a line already says why): then the banner's lines
    are left out."""
    held = False
    dropping = False
    rest = b""   # (while dropping) the start of a line not complete yet
    cut = b""    # (before the banner) an end that may be the banner's start, read in two
    while True:
        if cut and not select.select([src], [], [], BANNER_CUT_WAIT_S)[0]:
            write(cut)   # nothing more came: it was a line of the program's own
            cut = b""
            continue
        try:
            chunk = os.read(src, 1 << 16)
        except OSError:
            break
        if not chunk:
            break
        chunk, cut = cut + chunk, b""
        parts = [chunk]
        if not held and (m := _BANNER.search(chunk)) is not None:
            held = True
            parts = [chunk[:m.start()], chunk[m.start():]]
        elif not held and (c := _BANNER_CUT.search(chunk)) is not None:
            cut = chunk[c.start():]
            parts = [chunk[:c.start()]]
        for k, part in enumerate(parts):
            if k == 1 and not hold():
                dropping = True
            if dropping:
                after, rest = _drop_banner(rest + part)
                dropping = after is None
                part = after or b""
            if part:
                write(part)
    if cut:
        write(cut)
    if rest and not _BANNER_LINE.fullmatch(rest):
        write(rest)
    with contextlib.suppress(OSError):
        os.close(src)


def _drop_banner(data: bytes) -> tuple[bytes | None, bytes]:
    """Leave out hydra's banner lines at the start of ``data``: ``(None,
    incomplete last line)`` while the banner may go on, else ``(what
    follows the banner, b"")``."""
    start = 0
    while (end := data.find(b"\n", start)) >= 0:
        if not _BANNER_LINE.fullmatch(data, start, end):
            return data[start:], b""
        start = end + 1
    return None, data[start:]


def run_job(cmd: Sequence[str], env: Mapping[str, str] | None = None, *,
            timeout: float | None = None, grace: float = 5.0,
            say: Callable[[str], None] | None = None, **popen: Any) -> int:
    """Run an ``mpiexec`` command line as :func:`launch` does (signals,
    leftovers) and return its exit status; ``popen`` goes to ``Popen``.
    Without a ``stdout`` there, mpiexec's output is forwarded to this
    process's as it comes, hydra's closing banner only after the line that
    names the rank that vanished first (:func:`_forward`)."""
    say = say or (lambda line: print(f"aiopdbp launch: {line}", file=sys.stderr, flush=True))
    got: list[tuple[int, float]] = []  # (signal number, when)
    main_thread = threading.current_thread() is threading.main_thread()

    def on_signal(signum: int, frame: Any) -> None:
        got.append((signum, time.monotonic()))
        if len(got) > 1 and signum == signal.SIGINT:
            watch.kill_all()  # the second Ctrl-C: no more waiting
            return
        if not watch.signal_ranks(signum):
            with contextlib.suppress(OSError):
                proc.send_signal(signum)

    said: list[str] = []   # the vanished rank's line, said as soon as it ended
    said_at: list[float] = []   # when
    said_lock = threading.Lock()
    stopping = threading.Event()   # the launcher ends the ranks itself: none vanishes
    looked_at: set[int] = set()    # the rank processes whose end on_end has seen

    def on_end(end: Ended) -> None:   # (watch thread) before hydra's banner, which names any rank
        with said_lock:
            quiet = said or got or stopping.is_set()
            line = "" if quiet else _vanish_line(watch.ended, job_dir, watch.kernel_log)
            if line:
                said.append(line)
                said_at.append(time.monotonic())
                say(line)
            looked_at.add(end.pid)

    def settled() -> bool:   # (forward thread) hydra's banner may come once every end was looked at
        deadline = time.monotonic() + BANNER_HOLD_S
        while time.monotonic() < deadline:
            gone = set(watch.gone_ranks())
            with said_lock:
                if said or got or stopping.is_set() or gone and gone <= looked_at:
                    break
            time.sleep(0.005)
        # after an interrupt the banner names the ranks the launcher stopped,
        # after a rank's own report of its failure the ranks hydra killed
        return not got and recorded_stop(job_dir)[0] is None

    job_dir = tempfile.mkdtemp(prefix="aiopdbp-job-")
    full_env = inherited() if env is None else dict(env)
    full_env[JOB_DIR] = job_dir
    forward = "stdout" not in popen   # (a caller that takes the output keeps it as it comes)
    if forward:
        popen["stdout"] = subprocess.PIPE
    proc = subprocess.Popen(list(cmd), env=full_env, start_new_session=True,
                            preexec_fn=_die_with_parent if sys.platform.startswith("linux") else None,
                            **popen)
    watch = JobWatch(proc.pid, job_dir=job_dir, on_end=on_end).start()
    forwarder = None
    if forward and proc.stdout is not None:
        forwarder = threading.Thread(target=_forward, args=(os.dup(proc.stdout.fileno()), settled),
                                     name="aiopdbp-launch-output", daemon=True)
        proc.stdout.close()
        forwarder.start()
    old: dict[int, Any] = {}
    if main_thread:
        for sig in (signal.SIGINT, signal.SIGTERM):
            old[sig] = signal.signal(sig, on_signal)
    deadline = None if timeout is None else time.monotonic() + timeout
    rc: int | None = None
    timed_out = False
    try:
        early = ""                       # a rank that ended before it started aiopdbp.run
        early_seen: dict[int, float] = {}  # such a rank's pid -> when it was first seen gone
        while rc is None:
            rc = proc.poll()
            if rc is not None:
                break
            now = time.monotonic()
            if got and now - got[0][1] > grace:
                watch.kill_all()
                with contextlib.suppress(OSError):
                    os.killpg(proc.pid, signal.SIGKILL)
            if deadline is not None and now > deadline and not timed_out:
                timed_out = True
                got.append((int(signal.SIGTERM), now))
                watch.signal_ranks(signal.SIGTERM)
                with contextlib.suppress(OSError):
                    proc.terminate()
            if said_at and not got and now - said_at[0] > VANISHED_GRACE_S and not stopping.is_set():
                stopping.set()   # a rank vanished and hydra let the others run on
                watch.kill_all()
                with contextlib.suppress(OSError):
                    os.killpg(proc.pid, signal.SIGKILL)
            if not got and not early:
                early = _left_before_run(watch, job_dir, now, early_seen)
                if early:  # the others would wait for it until their handshake times out
                    stopping.set()
                    watch.kill_all()
                    with contextlib.suppress(OSError):
                        os.killpg(proc.pid, signal.SIGKILL)
            with contextlib.suppress(subprocess.TimeoutExpired):
                rc = proc.wait(0.05)
        stop_line = ""
        if early:
            stop_line, rc = early, 1
        elif rc is not None and not got:
            code, stop_line = recorded_stop(job_dir)  # stop_line: a rank was signalled alone
            if rc and code is not None:
                rc = code  # the status a failing rank recorded, not hydra's 9
            elif code is None:
                with said_lock:
                    vanished = said[0] if said else _vanish_line(watch.ended, job_dir, watch.kernel_log) or _vanished(job_dir)
                    if vanished and not said:  # no aiopdbp report: say which rank vanished
                        stop_line = vanished
                        said.append(vanished)
                if vanished:
                    rc = rc or 1
    finally:
        stopping.set()
        for signum, handler in old.items():
            signal.signal(signum, handler)
        watch.stop()
        watch.kill_all()  # ranks that outlived mpiexec
        with contextlib.suppress(OSError):
            os.killpg(proc.pid, signal.SIGKILL)
        watch.remove_leftovers()
        shutil.rmtree(job_dir, ignore_errors=True)
        if forwarder is not None:   # the job's output is out before the launcher's last line
            forwarder.join(5.0)
    if timed_out:
        say(f"job timed out after {timeout:g} s and was stopped")
        return 124
    if got:
        signum, t0 = got[0]
        name = signal.Signals(signum).name
        say(f"interrupted by {name}; the job ended {time.monotonic() - t0:.2f} s later")
        return 128 + signum
    if stop_line:
        say(stop_line)
    return 128 - rc if rc < 0 else rc


# ----------------------------------------------------------------- emulated
def _check_hydra() -> None:
    exe = find_mpiexec()
    try:
        out = subprocess.run([exe, "--version"], capture_output=True, text=True, timeout=30).stdout
    except (OSError, subprocess.TimeoutExpired) as exc:
        raise EmulationUnavailable(f"cannot run {exe} --version: {exc}") from exc
    if "HYDRA" not in out:
        raise EmulationUnavailable(f"--emulate needs MPICH's hydra mpiexec; {exe} is not one "
                                   "(set AIOPDBP_MPIEXEC to an MPICH mpiexec)")


def launch_emulated(
    n: int,
    argv: Sequence[str],
    config: EmulateConfig | str | None = None,
    *,
    tcp: bool = False,
    extra_env: Mapping[str, str] | None = None,
    mpiexec_args: Sequence[str] = (),
    timeout: float | None = None,
    log: Callable[[str], None] | None = None,
) -> int:
    """``aiopdbp launch`` on an emulated cluster; returns the job's exit code.

    Builds a cluster of ``config.hosts`` (default ``n``) hosts, runs
    :func:`launch` with hydra pointed at them, and removes the
    cluster whatever happens.
    """
    if not isinstance(config, EmulateConfig):
        config = EmulateConfig(link=config if config is not None else "1gbit")
    check_requirements()  # the clearest error first: privilege and tools
    _check_hydra()
    with EmulatedCluster(config.hosts or n, config.link, log=log) as cluster:
        if log:
            log(cluster.describe())
        return launch(n, argv, tcp=tcp, extra_env={**cluster.env(), **(extra_env or {})},
                      mpiexec_args=[*cluster.mpiexec_args(), *mpiexec_args], timeout=timeout)
