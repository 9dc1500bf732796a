"""A rank's output: every line whole, prefixed with ``[rank] `` (under MPI).

:func:`prefix_output` wraps ``sys.stdout`` and ``sys.stderr`` in
:class:`RankPrefixed`; ``aiopdbp.run`` (and a node opened under another
loop) calls it.  ``aiopdbp launch`` starts each rank as
``python -m aiopdbp.rankout prog.py ARGS...`` (:func:`main`), which calls it
before the program runs, so that what a rank prints *before* ``aiopdbp.run``
-- an import that fails, say -- is prefixed too: with several ranks failing
alike, unprefixed tracebacks could not be told apart.  Everything else about
the program is as under ``python prog.py``: ``__name__`` is ``"__main__"``,
``sys.argv`` and ``sys.path[0]`` are the script's, and a traceback shows the
program's frames only.  One thing differs at the end: once the program is
over, the objects it leaves are frozen (``gc.freeze``), so the interpreter's
end does not walk them in its last collections -- with many ranks to a core
that walk was a large part of a job's last second.  Objects left in
reference cycles are then not collected at exit (their ``__del__`` does not
run; Python never promises that it does at exit); ``atexit`` handlers,
``weakref.finalize`` and the flushing of the standard streams run as always.
And one thing at the start: on an oversubscribed host (every rank of the job
on it, more ranks than cores) the first import of ``mpi4py.MPI`` -- aiopdbp's
or the program's own, where ``MPI_Init`` runs -- first waits, asleep, at the
job directory's start gate (:func:`aiopdbp.env.start_gate`) until every rank
has come to it: ``MPI_Init`` ends in a barrier where the ranks that came
first poll with ``sched_yield`` for the last, taking the CPU that the ranks
still starting need.  A rank that never initialises MPI would hold the others
in ``MPI_Init`` anyway; here they wait at most :data:`GATE_TIMEOUT_S` and go
on into it (aiopdbp's start-up watchdog still ends a start that takes too long).

Imports: :mod:`aiopdbp.env` and the standard library only -- a rank's start
stays as light as ``python prog.py`` (``aiopdbp bench scale`` measures raw
mpi4py programs launched this way).
"""

from __future__ import annotations

import atexit
import contextlib
import gc
import io
import os
import runpy
import signal
import sys
import threading
from collections.abc import Sequence
from types import TracebackType
from typing import TextIO

from aiopdbp.env import env_rank, env_size, gate_ranks, job_dir, rank_prefix_wanted, start_gate

__all__ = ["GATE_TIMEOUT_S", "MPIGate", "RankPrefixed", "flush_all", "hold_mpi_init", "main", "prefix_output", "wraps"]

#: the most the first import of ``mpi4py.MPI`` waits at the start gate
GATE_TIMEOUT_S = 300.0


class RankPrefixed(io.TextIOBase):
    """A text stream that writes whole lines, each prefixed, in one write.

    Partial lines are held back until their newline (or the end of the
    program), so lines of different ranks never run together in the merged
    output of ``mpiexec``.
    """

    def __init__(self, raw: TextIO, prefix: str) -> None:
        super().__init__()
        self.raw = raw
        self.prefix = prefix
        self._partial = ""
        self._lock = threading.Lock()

    def write(self, s: str) -> int:
        if not s:
            return 0
        with self._lock:
            data = self._partial + s
            head, sep, self._partial = data.rpartition("\n")
            if sep:
                p = self.prefix
                self.raw.write("".join(f"{p}{line}\n" for line in head.split("\n")))
                self.raw.flush()
        return len(s)

    def finish(self) -> None:
        """Write a held-back partial line (end of program)."""
        with self._lock:
            if self._partial:
                self.raw.write(f"{self.prefix}{self._partial}\n")
                self._partial = ""
            self.raw.flush()

    def flush(self) -> None:
        self.raw.flush()

    def writable(self) -> bool:
        return True

    def isatty(self) -> bool:
        return self.raw.isatty()

    def fileno(self) -> int:
        return self.raw.fileno()

    @property
    def encoding(self) -> str:  # type: ignore[override]
        return getattr(self.raw, "encoding", "utf-8")


def prefix_output(rank: int) -> None:
    """Prefix every line of ``sys.stdout``/``sys.stderr`` with ``[rank] ``
    (once; not when ``AIOPDBP_RANK_PREFIX=0``)."""
    if not rank_prefix_wanted():
        return
    for name in ("stdout", "stderr"):
        stream = getattr(sys, name)
        if not isinstance(stream, RankPrefixed) and stream is not None:
            setattr(sys, name, RankPrefixed(stream, f"[{rank}] "))
    atexit.register(flush_all)


def flush_all() -> None:
    """Write held-back partial lines and flush (before the process ends)."""
    for stream in (sys.stdout, sys.stderr):
        with contextlib.suppress(Exception):
            if isinstance(stream, RankPrefixed):
                stream.finish()
            stream.flush()


class MPIGate:
    """A ``sys.meta_path`` entry that holds the first import of ``mpi4py.MPI``
    at the start gate (see the module doc), then leaves ``sys.meta_path`` and
    lets the import go on as ever."""

    def __init__(self, where: str, rank: int, ranks: int, timeout: float = GATE_TIMEOUT_S) -> None:
        self.where, self.rank, self.ranks, self.timeout = where, rank, ranks, timeout
        self.passed: bool | None = None   # None: not come yet; else whether all the ranks came

    def find_spec(self, fullname: str, path: object = None, target: object = None) -> None:
        if fullname == "mpi4py.MPI" and self.passed is None:
            with contextlib.suppress(ValueError):
                sys.meta_path.remove(self)
            self.passed = start_gate(self.where, self.rank, self.ranks, self.timeout)
        return None   # the import itself is the other finders'


def hold_mpi_init() -> MPIGate | None:
    """Put an :class:`MPIGate` first on ``sys.meta_path`` where this rank
    has a start gate to pass (:func:`aiopdbp.env.gate_ranks`)."""
    ranks, where = gate_ranks(), job_dir()
    if ranks is None or not where or "mpi4py.MPI" in sys.modules:
        return None
    gate = MPIGate(where, env_rank(), ranks)
    sys.meta_path.insert(0, gate)
    return gate


def wraps(argv: Sequence[str]) -> bool:
    """Whether :func:`main` can run ``python ARGV...``: a script, or ``-m module``
    (not interpreter options or ``-c``, which go to the interpreter itself)."""
    return bool(argv) and (not argv[0].startswith("-") or argv[0] == "-m" and len(argv) > 1)


#: frames of the run's own machinery, left out of a program's traceback
_OWN = frozenset({__file__, runpy.__file__, "<frozen runpy>"})


def _program_frames(exc: BaseException) -> TracebackType | None:
    tb = exc.__traceback__
    while tb is not None and tb.tb_frame.f_code.co_filename in _OWN:
        tb = tb.tb_next
    return tb


def main(argv: Sequence[str]) -> int:
    """Run ``python ARGV...`` (:func:`wraps`) with this rank's output prefixed;
    the exit status an uncaught exception gives (1), else 0."""
    size = env_size()
    if size > 1:
        prefix_output(env_rank())
        hold_mpi_init()
    try:
        return _run_program(argv, size)
    finally:
        # The program is over: what is left is the interpreter's end, whose
        # collections would walk every object still alive in every rank at
        # once (see the module doc).
        gc.freeze()


def _run_program(argv: Sequence[str], size: int) -> int:
    try:
        if argv[0] == "-m":
            sys.argv = [argv[1], *argv[2:]]   # (run_module sets argv[0] to the module's file)
            runpy.run_module(argv[1], run_name="__main__", alter_sys=True)
        else:
            sys.argv = list(argv)
            sys.path[0] = os.path.dirname(os.path.realpath(argv[0]))   # as `python prog.py` does
            runpy.run_path(argv[0], run_name="__main__")
    except SystemExit:
        raise
    except BaseException as exc:   # as the interpreter reports it, the program's frames only
        if isinstance(exc, KeyboardInterrupt) and size > 1:
            # Ctrl-C before aiopdbp.run (a slow import, say): the launcher
            # says so in one line for the job, as after aiopdbp.run.  A
            # traceback from every rank would bury that line, and a death by
            # SIGINT would add hydra's banner.  os._exit, as aiopdbp.run ends
            # a stopped rank: no MPI_Finalize waiting for peers that stop too.
            flush_all()
            os._exit(130)
        exc.__traceback__ = _program_frames(exc)   # (the hook prints the exception's own)
        sys.excepthook(type(exc), exc, exc.__traceback__)
        if isinstance(exc, KeyboardInterrupt):   # ends by SIGINT, as the interpreter does
            flush_all()
            signal.signal(signal.SIGINT, signal.SIG_DFL)
            os.kill(os.getpid(), signal.SIGINT)
        return 1
    return 0


if __name__ == "__main__":
    # run as ``-m``, this file is ``__main__``: the program must meet the
    # one ``aiopdbp.rankout`` that ``aiopdbp.run`` imports (its RankPrefixed)
    from aiopdbp.rankout import main as _main

    sys.exit(_main(sys.argv[1:]))
