"""Every environment variable aiopdbp reads, in one place.

No other module of aiopdbp reads ``os.environ``: each variable is read here,
by a typed function, at the moment it is asked for (so a test or a program
may set it at run time).  Modules that prepare a child process's
environment (the launcher, the cluster emulation) start from
:func:`inherited` and use the names defined here.  This module imports
nothing else from aiopdbp.

Variables set by MPI launchers (read, never set)
------------------------------------------------
=============================  ==========================================  ===========
variable(s)                    meaning                                     default
=============================  ==========================================  ===========
:data:`RANK_VARS`              this process's rank (:func:`env_rank`)        0
:data:`SIZE_VARS`              the world size (:func:`env_size`)             1
:data:`LOCAL_RANK_VARS`        rank among its host's ranks                 None
                               (:func:`local_rank`: the default GPU)
:data:`LOCAL_SIZE_VARS`        ranks on this host (:func:`local_ranks`:      1
                               oversubscription)
:data:`JOB_VARS`               present under any launcher                  not in a job
                               (:func:`in_mpi_job`)
=============================  ==========================================  ===========

aiopdbp settings
----------------
=============================  ==========================================  ===========
variable                       meaning                                     default
=============================  ==========================================  ===========
``AIOPDBP_TRANSPORT``          ``local``: never MPI, one host per process  (MPI when
                               (:func:`local_transport_forced`)            size > 1)
``AIOPDBP_UVLOOP``             ``0``: plain asyncio loop                   ``1``
                               (:func:`uvloop_wanted`)
``AIOPDBP_NO_EXTENSIONS``      ``1``: the pure-Python core, even where     ``0``
                               the compiled one is built
                               (:func:`extensions_wanted`)
``AIOPDBP_RANK_PREFIX``        ``0``: no ``[rank]`` prefix on output       ``1``
                               (:func:`rank_prefix_wanted`)
``AIOPDBP_DEVICE``             device backend: auto, cupy, sim             ``auto``
                               (:func:`device_backend`)
``AIOPDBP_PROGRESS``           MPI progress mode (:func:`progress_mode`)   ``poll``
``AIOPDBP_SPIN_US``            progress spin after an empty step, us        20
``AIOPDBP_MAX_BACKOFF_US``     idle back-off cap in a conversation, us      1000
``AIOPDBP_IDLE_MAX_US``        idle back-off cap once peers can ring, us    50000
``AIOPDBP_DOORBELL``           ``0``: no doorbell socket                   ``1``
                               (:func:`doorbell_enabled`)
``AIOPDBP_LAST_WORDS``         ``0``: under a plain ``mpiexec``, no helper   ``1``
                               process naming a vanished rank
                               (:func:`last_words_enabled`)
``AIOPDBP_MPI_THREAD_LEVEL``   MPI thread level requested                  ``multiple``
                               (:func:`mpi_thread_level`)
``AIOPDBP_MPIEXEC``            the ``mpiexec`` to launch with              searched
                               (:func:`mpiexec_override`)
``AIOPDBP_BENCH_LINK``         ``aiopdbp bench``'s link label              ``""``
=============================  ==========================================  ===========

Set by ``aiopdbp launch`` for its ranks
---------------------------------------
=============================  ==========================================
variable                       meaning
=============================  ==========================================
``AIOPDBP_LAUNCHER``           the launcher reports interrupts itself
                               (:func:`under_aiopdbp_launch`)
``AIOPDBP_JOB_DIR``            the job directory (:func:`job_dir`): ranks
                               list their shared-memory segments and a
                               failing rank its status there
``AIOPDBP_EMULATE_JOB``,       ``launch --emulate``: the emulated cluster's
``AIOPDBP_EMULATE_LINK_BPS``,  job, link rate, host table and tools (read by
``AIOPDBP_EMULATE_HOSTS``,     ``emulate_exec.sh`` and by ``aiopdbp bench``:
``AIOPDBP_EMULATE_IP``,        :func:`emulated_link_bps`)
``AIOPDBP_EMULATE_UNSHARE``
=============================  ==========================================

Others: ``PATH`` (:func:`search_path`), and the MPI library's own settings
that ``aiopdbp bench`` records with its results (:func:`mpi_settings`).

The job directory
-----------------
``aiopdbp launch`` (the reader) and the ranks (the writers) share a
directory named by ``AIOPDBP_JOB_DIR``: right after MPI starts each rank
writes ``shm.<pid>`` listing the MPICH segments it maps
(:func:`record_own_shm`), so the launcher can remove them even when the rank
is killed before its node has started (:func:`recorded_shm`; once it has, the
ranks have removed the names themselves, :func:`unlink_own_shm`); a failing rank writes its exit status to
:data:`FAILED_FILE` (:func:`record_failure`, read by :func:`recorded_failure`).
Each rank also holds a connection to the launcher's socket there,
:data:`LIFELINE_FILE` (:func:`hold_lifeline`), whose close tells the
launcher the moment the rank ends.  On an oversubscribed host each rank
passes the start gate there (:func:`start_gate`) before ``MPI_Init``.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import select
import socket
from collections.abc import Mapping

__all__ = [
    "RANK_VARS", "SIZE_VARS", "LOCAL_RANK_VARS", "LOCAL_SIZE_VARS", "JOB_VARS",
    "TRANSPORT", "UVLOOP", "RANK_PREFIX", "DEVICE", "PROGRESS", "SPIN_US", "MAX_BACKOFF_US",
    "IDLE_MAX_US", "DOORBELL", "LAST_WORDS", "MPI_THREAD_LEVEL", "MPIEXEC", "BENCH_LINK", "LAUNCHER",
    "JOB_DIR", "EMULATE_JOB", "EMULATE_LINK_BPS", "EMULATE_HOSTS", "EMULATE_IP",
    "EMULATE_UNSHARE", "FAILED_FILE", "SHM_FILE_PREFIX", "MPI_SETTING_PREFIXES",
    "env_rank", "launcher_rank", "env_size", "local_rank", "local_ranks", "in_mpi_job",
    "local_transport_forced", "uvloop_wanted", "rank_prefix_wanted", "device_backend",
    "progress_mode", "spin_seconds", "max_backoff_seconds", "idle_max_seconds", "doorbell_enabled",
    "last_words_enabled",
    "mpi_thread_level", "mpiexec_override", "bench_link", "under_aiopdbp_launch", "job_dir", "pmi_fd",
    "emulated_link_bps", "search_path", "mpi_settings", "inherited",
    "own_shm", "record_own_shm", "unlink_own_shm", "recorded_shm", "record_failure", "recorded_failure", "recorded_stop",
    "record_rank", "recorded_ranks", "oversubscribed", "gate_ranks", "start_gate", "GATE_FIFO",
    "GATE_FILE_PREFIX",
]

# ------------------------------------------------------------- launchers
#: this process's rank, as MPI launchers announce it, most specific first
RANK_VARS = ("OMPI_COMM_WORLD_RANK", "PMI_RANK", "PMIX_RANK", "MV2_COMM_WORLD_RANK",
             "SLURM_PROCID")
#: the world size, most specific first; MPI_LOCALNRANKS (MPICH hydra) only
#: counts the ranks on this node, so it is the last resort
SIZE_VARS = (
    "OMPI_COMM_WORLD_SIZE",  # Open MPI
    "PMI_SIZE",  # MPICH hydra, Intel MPI, Slurm PMI-1/2
    "PMIX_SIZE",  # some PMIx launchers
    "MV2_COMM_WORLD_SIZE",  # MVAPICH2
    "SLURM_STEP_NUM_TASKS",  # a step launched by srun (not SLURM_NTASKS: set in batch scripts too)
    "MPI_LOCALNRANKS",  # MPICH hydra (node-local)
)
#: the rank's index among the ranks of its host, in the order consulted
LOCAL_RANK_VARS = (
    "MPI_LOCALRANKID",  # MPICH hydra, Intel MPI
    "OMPI_COMM_WORLD_LOCAL_RANK",  # Open MPI
    "MV2_COMM_WORLD_LOCAL_RANK",  # MVAPICH2
    "PMI_LOCAL_RANK",
    "PALS_LOCAL_RANKID",  # Cray PALS
    "SLURM_LOCALID",  # srun
    "LOCAL_RANK",  # torchrun and friends
)
#: the number of ranks on this host
LOCAL_SIZE_VARS = ("MPI_LOCALNRANKS", "OMPI_COMM_WORLD_LOCAL_SIZE", "MV2_COMM_WORLD_LOCAL_SIZE",
                   "SLURM_NTASKS_PER_NODE", "PALS_LOCAL_SIZE")
#: any of these says "this process is a rank of an MPI job"
JOB_VARS = ("PMI_RANK", "PMI_SIZE", "OMPI_COMM_WORLD_SIZE", "PMIX_RANK", "SLURM_STEP_NUM_TASKS")

# ------------------------------------------------------ aiopdbp settings
TRANSPORT = "AIOPDBP_TRANSPORT"
UVLOOP = "AIOPDBP_UVLOOP"
NO_EXTENSIONS = "AIOPDBP_NO_EXTENSIONS"
RANK_PREFIX = "AIOPDBP_RANK_PREFIX"
DEVICE = "AIOPDBP_DEVICE"
PROGRESS = "AIOPDBP_PROGRESS"
SPIN_US = "AIOPDBP_SPIN_US"
MAX_BACKOFF_US = "AIOPDBP_MAX_BACKOFF_US"
IDLE_MAX_US = "AIOPDBP_IDLE_MAX_US"
DOORBELL = "AIOPDBP_DOORBELL"
LAST_WORDS = "AIOPDBP_LAST_WORDS"
MPI_THREAD_LEVEL = "AIOPDBP_MPI_THREAD_LEVEL"
MPIEXEC = "AIOPDBP_MPIEXEC"
#: MPICH's shared-memory eager cells per rank (:mod:`aiopdbp.transport.mpiload` sets a default in a rank)
MPICH_SHM_CELLS = "MPIR_CVAR_CH4_SHM_POSIX_IQUEUE_NUM_CELLS"
BENCH_LINK = "AIOPDBP_BENCH_LINK"
#: set by ``aiopdbp launch``: the launcher reports interrupts itself
LAUNCHER = "AIOPDBP_LAUNCHER"
#: set by ``aiopdbp launch``: the job directory (see the module docstring)
JOB_DIR = "AIOPDBP_JOB_DIR"
EMULATE_JOB = "AIOPDBP_EMULATE_JOB"
EMULATE_LINK_BPS = "AIOPDBP_EMULATE_LINK_BPS"
EMULATE_HOSTS = "AIOPDBP_EMULATE_HOSTS"
EMULATE_IP = "AIOPDBP_EMULATE_IP"
EMULATE_UNSHARE = "AIOPDBP_EMULATE_UNSHARE"
#: the MPI library settings (and ours) a benchmark result records
MPI_SETTING_PREFIXES = ("UCX_", "MPIR_CVAR_", "MPICH_", "FI_", "OMPI_MCA_", "I_MPI_", "HYDRA_",
                        "AIOPDBP_")

_THREAD_LEVELS = ("single", "funneled", "serialized", "multiple")


def _get(name: str, environ: Mapping[str, str] | None = None) -> str:
    return (os.environ if environ is None else environ).get(name, "")


def _first_int(names: tuple[str, ...]) -> int | None:
    """The first of ``names`` that holds an integer (garbage is skipped)."""
    for var in names:
        raw = os.environ.get(var)
        if raw:
            try:
                return int(raw)
            except ValueError:
                continue
    return None


def launcher_rank() -> int | None:
    """This process's rank as announced by the launcher, None without one."""
    return _first_int(RANK_VARS)


def env_rank() -> int:
    """This process's rank as announced by the launcher (0 without one)."""
    rank = launcher_rank()
    return 0 if rank is None else rank


def env_size() -> int:
    """World size announced by the MPI launcher, without importing mpi4py
    (1 when no launcher variable is set: plain ``python prog.py``)."""
    size = _first_int(SIZE_VARS)
    return 1 if size is None else max(1, size)


def local_rank(environ: Mapping[str, str] | None = None) -> int | None:
    """This rank's index among the ranks of its host (see
    :data:`LOCAL_RANK_VARS`), or None outside a launcher; ``environ``
    defaults to this process's environment."""
    for var in LOCAL_RANK_VARS:
        raw = _get(var, environ).strip()
        if raw:
            try:
                return int(raw)
            except ValueError:
                raise ValueError(f"{var}={raw!r} is not an integer") from None
    return None


def local_ranks() -> int:
    """Ranks of this job on this host, as the launcher announces them (1 if unknown)."""
    for var in LOCAL_SIZE_VARS:
        raw = _get(var).split("(")[0]
        if raw.isdigit():
            return max(1, int(raw))
    return 1


def oversubscribed(ranks: int | None = None) -> bool:
    """True when this host runs more ranks (``ranks``, default
    :func:`local_ranks`) than this process may use cores."""
    try:
        cores = len(os.sched_getaffinity(0))
    except (AttributeError, OSError):  # pragma: no cover - not Linux
        cores = os.cpu_count() or 1
    return (local_ranks() if ranks is None else ranks) > cores


def in_mpi_job() -> bool:
    """Whether this process runs under an MPI launcher (see :data:`JOB_VARS`)."""
    return any(var in os.environ for var in JOB_VARS)


# ------------------------------------------------------ aiopdbp settings
def _flag(name: str) -> bool:
    """On unless set to ``0``."""
    return _get(name).strip() != "0"


def local_transport_forced() -> bool:
    """``AIOPDBP_TRANSPORT=local``: a node never uses MPI, even under a launcher."""
    return _get(TRANSPORT).lower() == "local"


def uvloop_wanted() -> bool:
    """Whether ``aiopdbp.run`` should use uvloop (if installed): ``AIOPDBP_UVLOOP`` not ``0``."""
    return _flag(UVLOOP)


def extensions_wanted() -> bool:
    """Whether the compiled core may run (:mod:`aiopdbp.ext`): ``AIOPDBP_NO_EXTENSIONS``
    unset, empty or ``0``."""
    return _get(NO_EXTENSIONS).strip() in ("", "0")


def rank_prefix_wanted() -> bool:
    """Whether a rank prefixes its output lines with ``[rank]``: ``AIOPDBP_RANK_PREFIX`` not ``0``."""
    return _flag(RANK_PREFIX)


def device_backend() -> str:
    """The device backend named by ``AIOPDBP_DEVICE`` (lower case), ``"auto"`` when unset.
    The caller checks the name."""
    return _get(DEVICE).strip().lower() or "auto"


def progress_mode() -> str:
    """The MPI progress mode named by ``AIOPDBP_PROGRESS`` (lower case), ``"poll"``
    when unset.  The caller checks the name."""
    return _get(PROGRESS).strip().lower() or "poll"


def _microseconds(name: str, default_s: float) -> float:
    """``env[name]`` microseconds in seconds, or ``default_s`` when unset."""
    raw = _get(name)
    if raw.strip() == "":
        return default_s
    try:
        return float(raw) * 1e-6
    except ValueError:
        raise ValueError(f"{name}={raw!r} is not a number") from None


def spin_seconds(default_s: float) -> float:
    """How long the progress engine spins after an empty step (``AIOPDBP_SPIN_US``)."""
    return _microseconds(SPIN_US, default_s)


def max_backoff_seconds(default_s: float) -> float:
    """The idle back-off's cap during a conversation (``AIOPDBP_MAX_BACKOFF_US``)."""
    return _microseconds(MAX_BACKOFF_US, default_s)


def idle_max_seconds(default_s: float) -> float:
    """The idle back-off's cap once every peer can ring (``AIOPDBP_IDLE_MAX_US``)."""
    return _microseconds(IDLE_MAX_US, default_s)


def doorbell_enabled() -> bool:
    """Whether the transport opens its doorbell socket: ``AIOPDBP_DOORBELL`` not ``0``."""
    return _flag(DOORBELL)


def last_words_enabled() -> bool:
    """Whether a rank under a plain ``mpiexec`` starts its last-words helper
    (:mod:`aiopdbp.runtime.lastwords`): ``AIOPDBP_LAST_WORDS`` not ``0``."""
    return _flag(LAST_WORDS)


def mpi_thread_level() -> str:
    """The MPI thread level to request (``AIOPDBP_MPI_THREAD_LEVEL``, default
    ``"multiple"``); ValueError for a name that is not one."""
    level = _get(MPI_THREAD_LEVEL).strip().lower() or "multiple"
    if level not in _THREAD_LEVELS:
        raise ValueError(f"{MPI_THREAD_LEVEL}={level!r} is not an MPI thread level")
    return level


def default_mpich_shm_cells(count: int) -> str:
    """Ask MPICH for ``count`` shared-memory eager cells per rank
    (:data:`MPICH_SHM_CELLS`, read by ``MPI_Init``) unless the environment
    names a count; returns the count in force."""
    return os.environ.setdefault(MPICH_SHM_CELLS, str(count))


def mpiexec_override() -> str | None:
    """The ``mpiexec`` named by ``AIOPDBP_MPIEXEC``, None when unset."""
    return _get(MPIEXEC) or None


def bench_link(environ: Mapping[str, str] | None = None) -> str:
    """``aiopdbp bench``'s default link label (``AIOPDBP_BENCH_LINK``)."""
    return _get(BENCH_LINK, environ)


def pmi_fd() -> int | None:
    """The socket MPICH's hydra gave this rank for PMI (``PMI_FD``), None without one."""
    raw = _get("PMI_FD").strip()
    return int(raw) if raw.isdigit() else None


def under_aiopdbp_launch() -> bool:
    """Whether ``aiopdbp launch`` started this rank (``AIOPDBP_LAUNCHER`` set)."""
    return bool(_get(LAUNCHER))


def job_dir() -> str | None:
    """The job directory of ``aiopdbp launch`` (``AIOPDBP_JOB_DIR``), None outside one."""
    return _get(JOB_DIR) or None


def emulated_link_bps(environ: Mapping[str, str] | None = None) -> int | None:
    """On an emulated cluster (``AIOPDBP_EMULATE_JOB`` set), its shaped link
    rate in bit/s (0: unshaped or unreadable); None elsewhere."""
    env = os.environ if environ is None else environ
    if EMULATE_JOB not in env:
        return None
    try:
        return int(env.get(EMULATE_LINK_BPS, "0"))
    except ValueError:
        return 0


# ---------------------------------------------------------------- others
def search_path() -> str:
    """``PATH`` (empty when unset)."""
    return _get("PATH")


def mpi_settings() -> dict[str, str]:
    """The MPI library's settings and ours in this environment (sorted), for
    a benchmark's record (see :data:`MPI_SETTING_PREFIXES`)."""
    return {k: v for k, v in sorted(os.environ.items()) if k.startswith(MPI_SETTING_PREFIXES)}


def inherited() -> dict[str, str]:
    """A copy of this process's environment, to build a child process's on."""
    return dict(os.environ)


# --------------------------------------------------------- job directory
#: a rank's segment list in the job directory is ``shm.<pid>``
SHM_FILE_PREFIX = "shm."
#: the file in the job directory that holds the job's status when a rank failed
FAILED_FILE = "failed"
_SHM_MARK = "/dev/shm/mpich_shm_"


def own_shm() -> list[str]:
    """The MPICH shared-memory segments this process maps."""
    try:
        with open("/proc/self/maps", encoding="ascii", errors="replace") as f:
            return sorted({line.split(None, 5)[5].strip() for line in f
                           if _SHM_MARK in line and "(deleted)" not in line})
    except (OSError, IndexError):
        return []


def unlink_own_shm() -> list[str]:
    """Remove the names of the MPICH shared-memory segments this process
    maps; the mappings stay valid (returns the paths removed).

    MPICH unlinks them in ``MPI_Finalize``; a rank that ends without it
    (abort, interrupt, kill) leaves them in ``/dev/shm``.  Only files mapped
    by this very process are touched: they belong to this job.  Once every
    local rank has mapped them (the node's start-up, :mod:`aiopdbp.hosts.remote`),
    nothing opens them by name again, and ``MPI_Finalize`` accepts finding
    them gone.
    """
    removed: list[str] = []
    for path in own_shm():
        with contextlib.suppress(OSError):
            os.unlink(path)
            removed.append(path)
    return removed


def record_own_shm() -> None:
    """Tell the launcher which segments this rank maps (right after MPI
    init), so that it can remove them even if the rank is killed."""
    where = job_dir()
    if not where:
        return
    segs = own_shm()
    if segs:
        with contextlib.suppress(OSError):
            with open(os.path.join(where, f"{SHM_FILE_PREFIX}{os.getpid()}"), "w", encoding="utf-8") as f:
                f.write("\n".join(segs) + "\n")


#: ``rank.<rank>`` (its pid) when a rank's ``aiopdbp.run`` starts, ``done.<rank>`` when it returns
RANK_FILE_PREFIX = "rank."
DONE_FILE_PREFIX = "done."


def record_rank(rank: int, done: bool = False) -> None:
    """Tell the launcher that ``aiopdbp.run`` started on ``rank`` (its pid),
    or, with ``done``, that it returned: a rank that started and never
    returned, with no failure or interrupt recorded, vanished (killed by a
    signal, out of memory, ``os._exit``)."""
    where = job_dir()
    if not where:
        return
    if not done:
        hold_lifeline(where)
    name = f"{DONE_FILE_PREFIX if done else RANK_FILE_PREFIX}{rank}"
    if not done:  # a second aiopdbp.run in the same program: its end is not known yet
        with contextlib.suppress(OSError):
            os.unlink(os.path.join(where, f"{DONE_FILE_PREFIX}{rank}"))
    with contextlib.suppress(OSError):
        with open(os.path.join(where, name), "w", encoding="utf-8") as f:
            f.write(f"{os.getpid()}\n")


#: the launcher's Unix socket in the job directory that each rank holds a connection to
LIFELINE_FILE = "lifeline"

_lifeline: int | None = None   # a bare descriptor: held, never closed (the kernel closes it at the end)


def hold_lifeline(where: str) -> None:
    """Connect to the launcher's lifeline in job directory ``where``, once,
    and hold the connection for the rest of the process: the kernel closes
    it with the rank's other files, so the launcher learns of the rank's end
    at the moment hydra does, before hydra stops any other rank for it.  No
    launcher listening, or no room: nothing happens (the launcher sees ends
    by other means)."""
    global _lifeline
    if _lifeline is not None:
        return
    conn = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)   # (not inherited by a program it runs)
    conn.settimeout(1.0)
    try:
        conn.connect(os.path.join(where, LIFELINE_FILE))
    except OSError:
        conn.close()
        return
    fd = conn.detach()
    # An ending process's files are let go of last descriptor first, so one
    # above hydra's PMI socket closes before hydra can hear of the end.
    above = pmi_fd()
    if above is not None and fd < above:
        with contextlib.suppress(OSError):
            high = fcntl.fcntl(fd, fcntl.F_DUPFD_CLOEXEC, above + 1)
            os.close(fd)
            fd = high
    _lifeline = fd


def recorded_ranks(where: str) -> tuple[dict[int, int], set[int]]:
    """``({rank: pid} of the ranks whose run started, {ranks whose run
    returned})`` from job directory ``where`` (launcher side)."""
    started: dict[int, int] = {}
    done: set[int] = set()
    with contextlib.suppress(OSError):
        for name in os.listdir(where):
            prefix, _, rank = name.partition(".")
            if not rank.isdigit():
                continue
            if name.startswith(DONE_FILE_PREFIX):
                done.add(int(rank))
            elif name.startswith(RANK_FILE_PREFIX):
                with contextlib.suppress(OSError, ValueError):
                    with open(os.path.join(where, name), encoding="utf-8") as f:
                        started[int(rank)] = int(f.read().strip())
    return started, done


def recorded_shm(where: str) -> set[str]:
    """The segments the ranks listed in job directory ``where`` (launcher side)."""
    found: set[str] = set()
    if not os.path.isdir(where):
        return found
    for name in os.listdir(where):
        if name.startswith(SHM_FILE_PREFIX):
            with contextlib.suppress(OSError):
                with open(os.path.join(where, name), encoding="utf-8") as f:
                    found.update(p for p in f.read().split() if p.startswith(_SHM_MARK))
    return found


def record_failure(code: int, line: str = "") -> None:
    """Tell ``aiopdbp launch`` the job's status: this rank failed (or, with
    ``line``, the job was interrupted or a host lost: the launcher says
    ``line`` when it was not signalled itself).  The ranks exit on their own once
    the failure is acknowledged; when one exits before the others, hydra
    kills those still running and mpiexec's status becomes 9 (killed), which
    would hide the failure's own status.  Written whole by a rename: many
    ranks may record at once (a lost host), and the launcher must never
    read a file another rank has just emptied."""
    where = job_dir()
    if not where:
        return
    path = os.path.join(where, FAILED_FILE)
    tmp = f"{path}.{os.getpid()}"
    with contextlib.suppress(OSError):
        with open(tmp, "w", encoding="utf-8") as f:
            f.write(f"{code}\n{line}\n" if line else f"{code}\n")
        os.replace(tmp, path)


def recorded_failure(where: str) -> int | None:
    """The status a failing rank recorded in job directory ``where`` (None: none did)."""
    return recorded_stop(where)[0]


def recorded_stop(where: str) -> tuple[int | None, str]:
    """The status and line a rank recorded in job directory ``where``
    (:func:`record_failure`; ``(None, "")``: none did)."""
    try:
        with open(os.path.join(where, FAILED_FILE), encoding="utf-8") as f:
            text = f.read().strip()
    except OSError:
        return None, ""
    head, _, line = text.partition("\n")
    try:
        return (int(head) if head else None), line.strip()
    except ValueError:
        return None, ""


# ------------------------------------------------------------ the start gate
#: in the job directory: the start gate's FIFO, and the file each rank makes when it comes (+ its rank)
GATE_FIFO, GATE_FILE_PREFIX = "gate", "gate."


def gate_ranks() -> int | None:
    """How many ranks this rank waits for at the start gate (:func:`start_gate`):
    the job's, under ``aiopdbp launch`` with every rank on this host and more
    ranks than cores; None otherwise (no gate)."""
    size = env_size()
    if size > 1 and job_dir() and local_ranks() == size and oversubscribed(size):
        return size
    return None


def start_gate(where: str, rank: int, ranks: int, timeout: float) -> bool:
    """Wait, asleep, until ``ranks`` ranks (this one included) have come to
    the gate in directory ``where``, at most ``timeout`` s; True once they
    all have, False on the timeout or where the gate cannot be made.

    Why (see :mod:`aiopdbp.rankout`, which calls it before ``MPI_Init``):
    MPICH's ``MPI_Init`` ends in a barrier of a host's ranks that polls
    with ``sched_yield``, and with more ranks than cores a rank polling
    there takes the CPU that the ranks still starting need.

    Each rank opens the FIFO for reading *before* it marks its coming
    (``gate.RANK``), so a rank that counts every mark finds every other
    rank's reader open: opening the FIFO for writing and closing it wakes
    them all (a reader that never saw a writer is not woken before one).
    Ranks that count every mark at once all open it: no harm.
    """
    fifo = os.path.join(where, GATE_FIFO)
    try:
        with contextlib.suppress(FileExistsError):
            os.mkfifo(fifo, 0o600)
        fd = os.open(fifo, os.O_RDONLY | os.O_NONBLOCK)
    except OSError:
        return False
    try:
        try:
            os.close(os.open(os.path.join(where, f"{GATE_FILE_PREFIX}{rank}"), os.O_WRONLY | os.O_CREAT, 0o600))
            came = sum(1 for name in os.listdir(where)
                       if name.startswith(GATE_FILE_PREFIX) and name[len(GATE_FILE_PREFIX):].isdigit())
        except OSError:
            return False
        if came >= ranks:
            with contextlib.suppress(OSError):   # ENXIO: no reader is open, nobody waits
                os.close(os.open(fifo, os.O_WRONLY | os.O_NONBLOCK))
            return True
        return bool(select.select([fd], [], [], max(0.0, timeout))[0])
    finally:
        os.close(fd)
