"""The processes of one ``mpiexec`` job, watched from outside (Linux /proc).

``aiopdbp launch`` is not the parent of the ranks (hydra's
``hydra_pmi_proxy`` is): it learns which processes are ranks, when each
ends and which shared-memory segments the job holds by reading /proc and
holding a pidfd on each rank (:mod:`aiopdbp.launch.exits`).  What to *say*
about an end is the launcher's; this module only watches.
"""

from __future__ import annotations

import contextlib
import os
import signal
import threading
import time
from collections.abc import Callable

from aiopdbp.env import LIFELINE_FILE, RANK_VARS, recorded_ranks, recorded_shm
from aiopdbp.launch.exits import Ended, ExitWatch, KernelLog, zombie_status

__all__ = ["JobWatch"]


class JobWatch:
    """Watches the processes of one ``mpiexec`` job from outside (Linux /proc).

    A thread polls every ``interval`` seconds: the job's processes (the
    descendants of ``mpiexec``), its *ranks* (children of hydra's
    ``hydra_pmi_proxy``), and the MPICH shared-memory segments
    (``/dev/shm/mpich_shm_*``) that any of them maps.  Those segments belong
    to this job -- ownership, never a glob over everyone's files -- so
    :meth:`remove_leftovers` may delete the ones still there once the job has
    ended (MPICH leaves them behind when a job is aborted or killed).

    It learns each rank's number from its environment (``PMI_RANK``) and
    keeps a pidfd on it (:mod:`aiopdbp.launch.exits`): :attr:`ended` lists
    the rank processes that ended, in the order seen, with their status
    where it could still be read; ``on_end`` is called with each, in the
    watch thread, the moment it is seen -- before hydra ends the others.
    """

    def __init__(self, root: int, interval: float = 0.1, job_dir: str | None = None,
                 on_end: Callable[[Ended], None] | None = None) -> None:
        self.root = root
        self.interval = interval
        self.job_dir = job_dir          # where aiopdbp ranks list their segments
        self.pids: dict[int, str] = {}       # pid -> start time (guards pid reuse)
        self.ranks: set[int] = set()
        self.rank_of: dict[int, int] = {}    # rank pid -> its rank (from its environment)
        self.ended: list[Ended] = []         # rank processes that ended, in the order seen
        self.segments: set[str] = set()
        self._on_end = on_end
        self._exits = ExitWatch(self._exited)
        if job_dir is not None:
            self._exits.listen(os.path.join(job_dir, LIFELINE_FILE))
        self._looks = 0                      # ends of one look at /proc cannot be ordered
        self.kernel_log = KernelLog()        # opened now: only this job's kills are read
        self._unwatched: set[int] = set()    # ranks without a pidfd: ends found in /proc
        self._stop = threading.Event()
        self._lock = threading.Lock()
        self._thread = threading.Thread(target=self._run, name="aiopdbp-jobwatch", daemon=True)

    def start(self) -> JobWatch:
        self._exits.start()
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stop.set()
        if self._thread.is_alive():
            self._thread.join(2.0)
        self.scan()  # a last look (processes that are still around)

    def _run(self) -> None:
        start = time.monotonic()
        try:
            while not self._stop.is_set():
                self.scan()
                # MPI creates its segments at start-up: look often then
                fast = time.monotonic() - start < 5.0
                self._stop.wait(min(self.interval, 0.025) if fast else self.interval)
        finally:
            self._exits.close()
            self.kernel_log.close()

    def _exited(self, pid: int, status: int | None) -> None:
        """(the exits thread) A rank's pidfd said it ended: a look of its own."""
        self._record([(pid, status)])

    def _record(self, gone: list[tuple[int, int | None]]) -> None:
        """``(pid, status)`` of ranks seen ended in one look."""
        if not gone:
            return
        now = time.monotonic()
        for pid, _ in gone:
            if pid not in self.rank_of:
                self._learn_rank(pid, watch=False)   # (the rank files may know it)
        with self._lock:
            self._looks += 1
            ends = [Ended(pid, self.rank_of.get(pid), now, self._looks, status) for pid, status in gone]
            self.ended.extend(ends)
        if self._on_end is not None:
            for end in ends:
                self._on_end(end)

    def _learn_rank(self, pid: int, watch: bool = True) -> None:
        """A rank process: its rank, and (new ones, watch thread only) a pidfd on it."""
        rank = _rank_in_environment(pid)
        if rank is None and self.job_dir is not None:   # a rank seen before its exec
            rank = {p: r for r, p in recorded_ranks(self.job_dir)[0].items()}.get(pid)
        if rank is not None:
            self.rank_of[pid] = rank
        if watch and not self._exits.add(pid):
            self._unwatched.add(pid)

    def _ends_without_pidfd(self) -> None:
        """Ranks without a pidfd that are gone: ended, seen at this look."""
        gone = [p for p in self._unwatched if not _running(p, self.pids.get(p, ""))]
        self._unwatched.difference_update(gone)
        self._record([(p, zombie_status(p)) for p in gone])

    def scan(self) -> None:
        """One look at the process tree under ``root``."""
        if not os.path.isdir("/proc"):
            return
        children: dict[int, list[int]] = {}
        parent: dict[int, int] = {}
        info: dict[int, tuple[str, str]] = {}
        for entry in os.listdir("/proc"):
            if not entry.isdigit():
                continue
            try:
                with open(f"/proc/{entry}/stat", encoding="ascii", errors="replace") as f:
                    stat = f.read()
            except OSError:
                continue
            close = stat.rfind(")")
            comm = stat[stat.find("(") + 1:close]
            fields = stat[close + 2:].split()
            if len(fields) < 20:
                continue
            pid = int(entry)
            parent[pid] = int(fields[1])
            children.setdefault(parent[pid], []).append(pid)
            info[pid] = (comm, fields[19])
        found: list[int] = []
        todo = [self.root]
        while todo:
            pid = todo.pop()
            for child in children.get(pid, ()):
                found.append(child)
                todo.append(child)
        new_ranks = []
        with self._lock:
            for pid in found:
                comm, start = info[pid]
                self.pids.setdefault(pid, start)
                if info.get(parent[pid], ("", ""))[0] == "hydra_pmi_proxy" and pid not in self.ranks:
                    self.ranks.add(pid)
                    new_ranks.append(pid)
        for pid in new_ranks:
            self._learn_rank(pid)
        for pid in found:
            if pid in self.ranks:
                self._exits.add_threads(pid)
        for pid in found:   # seen before its exec: its environment was hydra's
            if pid in self.ranks and pid not in self.rank_of and pid not in new_ranks:
                self._learn_rank(pid, watch=False)
        self._ends_without_pidfd()
        for pid in found:
            try:
                with open(f"/proc/{pid}/maps", encoding="ascii", errors="replace") as f:
                    for line in f:
                        if "/dev/shm/mpich_shm_" in line and "(deleted)" not in line:
                            self.segments.add(line.split(None, 5)[5].strip())
            except (OSError, IndexError):
                continue

    def alive(self) -> list[int]:
        """The job's processes still running (same pid *and* start time)."""
        out = []
        with self._lock:
            items = list(self.pids.items())
        for pid, start in items:
            try:
                with open(f"/proc/{pid}/stat", encoding="ascii", errors="replace") as f:
                    stat = f.read()
            except OSError:
                continue
            fields = stat[stat.rfind(")") + 2:].split()
            if len(fields) > 19 and fields[19] == start and fields[0] != "Z":
                out.append(pid)
        return out

    def rank_count(self) -> int:
        """How many rank processes were seen."""
        with self._lock:
            return len(self.ranks)

    def gone_ranks(self) -> list[int]:
        """The rank processes seen running that have ended."""
        with self._lock:
            ranks = list(self.ranks)
        alive = set(self.alive())
        return [pid for pid in ranks if pid not in alive]

    def signal_ranks(self, sig: int) -> bool:
        """Send ``sig`` to the ranks themselves; False when none is known yet."""
        with self._lock:
            ranks = list(self.ranks)
        alive = set(self.alive())
        sent = False
        for pid in ranks:
            if pid in alive:
                with contextlib.suppress(OSError):
                    os.kill(pid, sig)
                    sent = True
        return sent

    def kill_all(self) -> None:
        """SIGKILL every process of the job that is still running."""
        for pid in self.alive():
            with contextlib.suppress(OSError):
                os.kill(pid, signal.SIGKILL)

    def remove_leftovers(self) -> list[str]:
        """Delete the job's shared-memory segments that are still there."""
        if self.job_dir is not None:
            self.segments.update(recorded_shm(self.job_dir))
        removed = []
        for path in sorted(self.segments):
            with contextlib.suppress(OSError):
                os.unlink(path)
                removed.append(path)
        return removed


def _rank_in_environment(pid: int) -> int | None:
    """The rank the MPI launcher gave process ``pid`` (``PMI_RANK``...), None if unreadable."""
    try:
        with open(f"/proc/{pid}/environ", "rb") as f:
            env = dict(item.partition(b"=")[::2] for item in f.read().split(b"\0") if item)
    except OSError:
        return None
    for var in RANK_VARS:
        with contextlib.suppress(ValueError):
            if var.encode() in env:
                return int(env[var.encode()])
    return None


def _running(pid: int, start: str) -> bool:
    """``pid`` runs (not a zombie) and started at ``start``."""
    try:
        with open(f"/proc/{pid}/stat", encoding="ascii", errors="replace") as f:
            fields = f.read().rsplit(")", 1)[1].split()
    except (OSError, IndexError):
        return False
    return len(fields) > 19 and fields[19] == start and fields[0] != "Z"
