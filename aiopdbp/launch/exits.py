"""How a rank process ended, seen from outside it (``aiopdbp launch``).

The launcher is not the parent of the ranks (hydra's ``hydra_pmi_proxy``
is), so it cannot ``wait`` for them.  What Linux offers a non-parent:

* a *pidfd* (``os.pidfd_open``, Linux 5.3) becomes readable the moment the
  process exits, before its parent reaps it -- so the rank that died first
  is seen first, not at the next look at ``/proc``;
* while the process is a zombie (exited, not yet reaped) field 52 of
  ``/proc/<pid>/stat`` holds its status as ``waitpid`` reports it.  hydra
  reaps within milliseconds, often before a launcher starved of CPU looks;
  from then on the pidfd still tells it (``PIDFD_GET_INFO``, Linux 6.15).
  Where neither can, it is *unknown*, and said so rather than guessed;
* the kernel log (``/dev/kmsg``) says ``Killed process <pid>`` when the
  out-of-memory killer chose it -- readable by root or where
  ``kernel.dmesg_restrict`` is 0; not readable is not an error.

:class:`ExitWatch` holds the pidfds and returns what ended, in the order
seen; :class:`KernelLog` reads the kernel log; :func:`how_it_ended` words it.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import re
import select
import signal
import socket
import struct
import threading
import time
from collections.abc import Callable
from typing import NamedTuple

__all__ = ["Ended", "ExitWatch", "KernelLog", "dying", "how_it_ended", "pidfd_exit_status", "zombie_status"]


class Ended(NamedTuple):
    """A rank process that ended."""

    pid: int
    rank: int | None     # None: its rank was never learnt
    seen: float          # time.monotonic() when the launcher saw it gone
    look: int            # ends seen in the same look cannot be ordered
    status: int | None   # as waitpid reports it; None: unknown (reaped before it was read)


def zombie_status(pid: int) -> int | None:
    """The exit status of ``pid`` while it is a zombie -- or already while
    its main thread is exiting, once the kernel has set it: hydra reaps a
    rank within milliseconds of its last thread's end, often before a
    launcher starved of CPU looks -- else None."""
    try:
        with open(f"/proc/{pid}/stat", encoding="ascii", errors="replace") as f:
            fields = f.read().rsplit(")", 1)[1].split()
    except (OSError, IndexError):
        return None
    # fields[0] is field 3 (state), fields[6] field 9 (flags); exit_code is
    # field 52 (Linux 3.5), set early in do_exit: 0 there is "not yet"
    if len(fields) < 50:
        return None
    try:
        code, exiting = int(fields[49]), int(fields[6]) & _PF_EXITING
    except ValueError:
        return None
    if fields[0] == "Z" or exiting and code:
        return code
    return None


#: ``ioctl(pidfd, PIDFD_GET_INFO, struct pidfd_info)``: _IOWR(0xFF, 11), its first version's 64 bytes
_PIDFD_GET_INFO = (3 << 30) | (64 << 16) | (0xFF << 8) | 11
#: ``pidfd_info.mask``: the exit status (Linux 6.15), known once the process was reaped
_PIDFD_INFO_EXIT = 8
#: where ``pidfd_info.exit_code`` lies: after mask, cgroupid and eleven 32-bit ids
_EXIT_CODE_AT = 60


def pidfd_exit_status(fd: int) -> int | None:
    """The exit status of the process ``fd`` (a pidfd of it or of its main
    thread) refers to, once its parent has reaped it; None before, or where
    the kernel cannot say (before Linux 6.15)."""
    info = bytearray(64)
    struct.pack_into("=Q", info, 0, _PIDFD_INFO_EXIT)
    try:
        fcntl.ioctl(fd, _PIDFD_GET_INFO, info)
    except OSError:
        return None
    if not struct.unpack_from("=Q", info, 0)[0] & _PIDFD_INFO_EXIT:
        return None
    return int(struct.unpack_from("=i", info, _EXIT_CODE_AT)[0])


class KernelLog:
    """The kernel log (``/dev/kmsg``) from now on: which processes the
    out-of-memory killer killed.  Reading it from its start would take tens
    of milliseconds -- longer than hydra takes to end the other ranks --
    so it is opened at its end and read as it grows.  Unreadable (not root,
    ``kernel.dmesg_restrict``): it knows of no kill."""

    def __init__(self) -> None:
        self._killed: set[int] = set()
        self._lock = threading.Lock()   # the watch thread and the launcher's main thread
        try:
            self._fd: int | None = os.open("/dev/kmsg", os.O_RDONLY | os.O_NONBLOCK)
            os.lseek(self._fd, 0, os.SEEK_END)
        except OSError:
            self._fd = None

    def oom_killed(self, pid: int) -> bool:
        """Whether the out-of-memory killer killed ``pid`` since this log was opened."""
        with self._lock:
            return self._read_for(pid)

    def _read_for(self, pid: int) -> bool:
        while self._fd is not None:
            try:
                record = os.read(self._fd, 8192)   # one record per read
            except BlockingIOError:
                break                                # nothing more yet
            except BrokenPipeError:
                continue                             # records overwritten while reading
            except OSError:
                break
            if not record:
                break
            found = _KILLED.search(record)
            if found:
                self._killed.add(int(found.group(1)))
        return pid in self._killed

    def close(self) -> None:
        """Close the log (it then knows only the kills read so far)."""
        with self._lock:
            if self._fd is not None:
                with contextlib.suppress(OSError):
                    os.close(self._fd)
                self._fd = None


_KILLED = re.compile(rb"Killed process (\d+) ")


def how_it_ended(end: Ended, log: KernelLog | None = None, unknown: str = "vanished") -> str:
    """``was killed by SIGKILL``, ``exited with status 3``, ``was killed by
    the out-of-memory killer (SIGKILL)``, or ``vanished (exit status unknown)``
    (``unknown`` instead of "vanished")."""
    if end.status is None:
        if log is not None and log.oom_killed(end.pid):
            return "was killed by the out-of-memory killer"
        return f"{unknown} (exit status unknown)"
    if os.WIFSIGNALED(end.status):
        num = os.WTERMSIG(end.status)
        try:
            name = signal.Signals(num).name
        except ValueError:
            name = f"signal {num}"
        if num == signal.SIGKILL and log is not None and log.oom_killed(end.pid):
            return f"was killed by the out-of-memory killer ({name})"
        return f"was killed by {name}" + (" (core dumped)" if os.WCOREDUMP(end.status) else "")
    return f"exited with status {os.WEXITSTATUS(end.status)}"


#: pidfd_open's flag (Linux 6.9) for a pidfd of one thread: it is readable
#: when that thread ends, not once every thread did -- a rank killed by a
#: signal may take longer to end its other threads (unmapping shared memory)
#: than hydra takes to kill another rank outright, which would then be seen
#: first.  The main thread stays a zombie, its status readable, until the
#: others have ended, which also leaves more time to read it.
_PIDFD_THREAD = os.O_EXCL

#: threads of one rank watched besides its main thread: the first of them
#: to end says the rank is dying.  hydra kills the other ranks once the
#: dying rank's sockets close, which is when its *last* thread lets go of
#: them; a main thread that is preempted just after that would be seen to
#: end after a rank hydra killed.  Bounded: a rank may run a thread per core
#: (BLAS), and a pidfd is a file descriptor of the launcher.
THREADS_WATCHED = 4

#: how long the watch waits, once a rank is seen dying, for its main thread
#: to end, so that its status can be read
_STATUS_WAIT_S = 0.25

#: ``/proc/<pid>/stat`` flags: the thread is exiting (``PF_EXITING``)
_PF_EXITING = 0x4


def dying(pid: int) -> bool:
    """Whether process ``pid`` is ending: its main thread gone, a zombie,
    exiting, or with a SIGKILL pending -- which the kernel queues on every
    thread of a process that a fatal signal or ``exit_group`` (``os._exit``
    on another thread) ends, before any of them has run."""
    try:
        with open(f"/proc/{pid}/stat", encoding="ascii", errors="replace") as f:
            fields = f.read().rsplit(")", 1)[1].split()
        if fields[0] in "ZXx" or int(fields[6]) & _PF_EXITING:
            return True
        with open(f"/proc/{pid}/task/{pid}/status", encoding="ascii", errors="replace") as f:
            pending = [line.split()[1] for line in f if line.startswith(("SigPnd:", "ShdPnd:"))]
    except (OSError, IndexError, ValueError):
        return True   # gone
    return any(int(mask, 16) & (1 << (signal.SIGKILL - 1)) for mask in pending)


class ExitWatch:
    """A thread that waits on pidfds of the rank processes and reports each
    one that ends, the moment it ends: ``on_exit(pid, status)`` (status as
    :func:`zombie_status` read it, None if already reaped), called in the
    thread in the order the kernel reported the ends (epoll's ready list is
    in the order of the events).  Nothing else runs in the thread, so it
    wakes before hydra has ended the other ranks.

    A rank's end is the first sign of it: its main thread ending, or one of
    its other threads (:meth:`add_threads`) ending while the process is
    :func:`dying` -- a thread that ends while its process runs on is no end.

    Without pidfds or epoll (old kernels, not Linux) :meth:`add` returns
    False and the caller finds ends by looking at ``/proc`` instead.

    Surer is a rank's *lifeline* (:meth:`listen`): a connection the rank
    holds to the watch until it ends.  The kernel closes it with the rank's
    other files, just before hydra's PMI socket (from which hydra learns of
    the end and kills the others: :func:`aiopdbp.env.hold_lifeline` keeps it
    above that descriptor), so a rank's lifeline closes before any rank that
    hydra killed for it can end, whichever of its threads was last and
    whether or not a pidfd of that thread is watched.  While a
    rank holds one, its end is its lifeline's close or its main thread's
    end, never another thread's: a thread that ended on its own while the
    watch was starved of CPU would be looked at only once hydra had killed
    its rank, and would put that rank first."""

    def __init__(self, on_exit: Callable[[int, int | None], None]) -> None:
        self._on_exit = on_exit
        self._fds: dict[int, tuple[int, int]] = {}   # fd -> (pid, tid)
        self._main: dict[int, int] = {}               # pid -> its main thread's fd
        self._tids: dict[int, set[int]] = {}          # pid -> the other threads watched
        self._reported: set[int] = set()
        self._early: dict[int, int] = {}   # pid -> the order of its first thread's end, not yet an end
        self._listener: socket.socket | None = None
        self._lines: dict[int, tuple[socket.socket, int]] = {}   # fd -> (a lifeline, its rank's pid)
        self._lined: set[int] = set()   # the pids holding a lifeline
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._epoll = select.epoll() if hasattr(select, "epoll") and hasattr(os, "pidfd_open") else None
        self._thread = threading.Thread(target=self._run, name="aiopdbp-rank-exits", daemon=True)

    def start(self) -> ExitWatch:
        if self._epoll is not None:
            self._thread.start()
        return self

    def listen(self, path: str) -> bool:
        """Take lifelines at ``path``, a Unix socket made here (the job
        directory's :data:`aiopdbp.env.LIFELINE_FILE`); False when it cannot
        be (no epoll, a path too long): ends are then seen as without."""
        if self._epoll is None or self._listener is not None:
            return False
        listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        try:
            listener.bind(path)
            listener.listen(1024)
        except OSError:
            listener.close()
            return False
        listener.setblocking(False)
        self._listener = listener
        self._epoll.register(listener.fileno(), select.EPOLLIN)
        return True

    def lifelines(self) -> set[int]:
        """The pids whose lifeline the watch holds now."""
        return set(self._lined)

    def add(self, pid: int) -> bool:
        """Watch ``pid`` (any thread); False when it cannot be (no pidfd, gone)."""
        if self._epoll is None or self._stop.is_set():
            return False
        try:
            fd = os.pidfd_open(pid, _PIDFD_THREAD)
        except OSError:
            try:   # before Linux 6.9: readable only once every thread of it ended
                fd = os.pidfd_open(pid)
            except OSError:
                return False
        self._watch(fd, pid, pid)
        return True

    def add_threads(self, pid: int) -> None:
        """Watch the threads ``pid`` runs besides its main thread, up to
        :data:`THREADS_WATCHED` (a watched ``pid``; Linux 6.9 and later)."""
        with self._lock:
            known = self._tids.get(pid)
            if known is None or len(known) >= THREADS_WATCHED or pid in self._reported:
                return
        try:
            tids = sorted(int(t) for t in os.listdir(f"/proc/{pid}/task") if int(t) != pid)
        except (OSError, ValueError):
            return
        for tid in tids:
            if tid in known or len(known) >= THREADS_WATCHED:
                continue
            try:
                fd = os.pidfd_open(tid, _PIDFD_THREAD)
            except OSError:
                return   # no thread pidfds, or the thread is gone
            self._watch(fd, pid, tid)

    def _watch(self, fd: int, pid: int, tid: int) -> None:
        with self._lock:
            self._fds[fd] = (pid, tid)
            if tid == pid:
                self._main[pid] = fd
                self._tids.setdefault(pid, set())
            else:
                self._tids.setdefault(pid, set()).add(tid)
        assert self._epoll is not None
        self._epoll.register(fd, select.EPOLLIN)   # (thread-safe while the thread waits)

    def _run(self) -> None:
        assert self._epoll is not None
        seen = 0   # events taken so far: their order
        while not self._stop.is_set():
            try:
                ready = self._epoll.poll(0.1)
            except OSError:
                return
            self._forget_early()
            for fd, _ in ready:
                seen += 1
                if self._listener is not None and fd == self._listener.fileno():
                    self._take_lines(seen)
                    continue
                if fd in self._lines:
                    self._line_event(fd, seen)
                    continue
                with self._lock:
                    pid, tid = self._fds.pop(fd, (0, 0))
                if pid == 0:
                    continue
                # first: hydra reaps it within milliseconds
                status = self._status(pid, fd) if tid == pid else None
                self._unwatch(fd, pid, tid)
                if pid in self._reported or tid != pid and pid in self._lined:
                    continue
                if tid != pid and not dying(pid):
                    # a thread ended while its process runs on -- or while its
                    # main thread, preempted between taking its SIGKILL and
                    # marking itself exiting, shows no sign yet: kept in mind
                    self._early.setdefault(pid, seen)
                    continue
                self._report_until(pid, status, self._early.pop(pid, seen))

    def _take_lines(self, seen: int) -> None:
        """Accept the lifelines waiting, each known by its peer's pid; one
        already closed is an end seen now, in the order of this event."""
        assert self._listener is not None and self._epoll is not None
        while True:
            try:
                conn, _ = self._listener.accept()
            except OSError:   # none left (BlockingIOError), or out of descriptors
                return
            creds = conn.getsockopt(socket.SOL_SOCKET, socket.SO_PEERCRED, struct.calcsize("3i"))
            pid = struct.unpack("3i", creds)[0]
            if pid <= 0:   # (a peer in a pid namespace this one cannot see)
                conn.close()
                continue
            conn.setblocking(False)
            self._lines[conn.fileno()] = (conn, pid)
            self._lined.add(pid)
            self._early.pop(pid, None)   # (a thread end looked at before: not its end)
            self._epoll.register(conn.fileno(), select.EPOLLIN | select.EPOLLRDHUP)
            self._line_event(conn.fileno(), seen)

    def _line_event(self, fd: int, seen: int) -> None:
        """A lifeline is readable: its end, once closed, is its rank's end
        if the rank is dying; a live rank that closed it goes on unwatched
        there (its pidfd still tells its end)."""
        conn, pid = self._lines[fd]
        try:
            while conn.recv(256):   # nothing is sent: whatever is, is dropped
                pass
        except BlockingIOError:
            return   # still open
        except OSError:
            pass     # reset: closed as well
        del self._lines[fd]
        self._lined.discard(pid)
        self._early.pop(pid, None)   # (a thread end before it held the lifeline)
        assert self._epoll is not None
        with contextlib.suppress(OSError):
            self._epoll.unregister(fd)
        conn.close()
        if pid not in self._reported and dying(pid):
            self._report_until(pid, None, seen)

    def _forget_early(self) -> None:
        """Forget the threads that ended, before this look, in a process that
        still runs: they ended on their own (a rank ends a thread or two at
        start-up).  Kept, such an end would count as the start of the
        process's death once hydra killed it -- before the rank that died
        first (:meth:`_report_until`)."""
        for pid in [p for p in self._early if not dying(p)]:
            del self._early[pid]

    def _report_until(self, pid: int, status: int | None, order: int) -> None:
        """Report ``pid``, after the ranks whose thread ended before ``order``
        and that are dying now (a live one's thread ended on its own)."""
        earlier = sorted((s, p) for p, s in self._early.items() if s < order)
        deadline = time.monotonic() + _STATUS_WAIT_S
        for _, other in earlier:
            del self._early[other]
            if dying(other):
                self._main_ended(other, max(0.0, deadline - time.monotonic()))   # its status, then
                self._report(other, self._status(other))
        if status is None and not self._main_ended(pid, 0.0):   # the first sign: its main thread ends next
            self._main_ended(pid, max(0.0, deadline - time.monotonic()))
        self._report(pid, status if status is not None else self._status(pid))

    def _status(self, pid: int, fd: int | None = None) -> int | None:
        """The exit status of ``pid``, whose main thread ended: read while it
        is a zombie, else from its pidfd once reaped (``fd``: its main
        thread's, by default the one still watched)."""
        if fd is None:
            with self._lock:
                fd = self._main.get(pid)
        for _ in range(3):   # (between the two: reaped, the pidfd not told yet)
            status = zombie_status(pid)
            if status is None and fd is not None:
                status = pidfd_exit_status(fd)
            if status is not None or fd is None:
                return status
            time.sleep(0.001)
        return None

    def _report(self, pid: int, status: int | None) -> None:
        self._reported.add(pid)
        self._on_exit(pid, status)

    def _main_ended(self, pid: int, wait: float) -> bool:
        """Whether the main thread of ``pid`` ended (waiting up to ``wait`` s)."""
        with self._lock:
            fd = self._main.get(pid)
        if fd is None:
            return zombie_status(pid) is not None or not os.path.exists(f"/proc/{pid}")
        try:
            return bool(select.select([fd], [], [], wait)[0])
        except (OSError, ValueError):
            return False

    def _unwatch(self, fd: int, pid: int, tid: int) -> None:
        with self._lock:   # (the fd's number may be reused at once)
            if tid == pid:
                self._main.pop(pid, None)
            else:
                self._tids.get(pid, set()).discard(tid)
        with contextlib.suppress(OSError):
            assert self._epoll is not None
            self._epoll.unregister(fd)
            os.close(fd)

    def close(self) -> None:
        """Stop the thread and close every pidfd."""
        self._stop.set()
        if self._thread.is_alive() and self._thread is not threading.current_thread():
            self._thread.join(2.0)
        with self._lock:
            fds, self._fds = list(self._fds), {}
        for fd in fds:
            with contextlib.suppress(OSError):
                os.close(fd)
        for conn, _ in self._lines.values():
            conn.close()
        self._lines.clear()
        if self._listener is not None:
            self._listener.close()
        if self._epoll is not None:
            self._epoll.close()
