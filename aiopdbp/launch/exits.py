"""How a rank process ended, seen from outside it (``aiopdbp launch``).

The launcher is not the parent of the ranks (hydra's ``hydra_pmi_proxy``
is), so it cannot ``wait`` for them.  What Linux offers a non-parent:

* a *pidfd* (``os.pidfd_open``, Linux 5.3) becomes readable the moment the
  process exits, before its parent reaps it -- so the rank that died first
  is seen first, not at the next look at ``/proc``;
* while the process is a zombie (exited, not yet reaped) field 52 of
  ``/proc/<pid>/stat`` holds its status as ``waitpid`` reports it.  hydra
  reaps within milliseconds, so the status is often gone: then it is
  *unknown*, and said so rather than guessed;
* the kernel log (``/dev/kmsg``) says ``Killed process <pid>`` when the
  out-of-memory killer chose it -- readable by root or where
  ``kernel.dmesg_restrict`` is 0; not readable is not an error.

:class:`ExitWatch` holds the pidfds and returns what ended, in the order
seen; :class:`KernelLog` reads the kernel log; :func:`how_it_ended` words it.
"""

from __future__ import annotations

import contextlib
import os
import re
import select
import signal
import threading
from collections.abc import Callable
from typing import NamedTuple

__all__ = ["Ended", "ExitWatch", "KernelLog", "how_it_ended", "zombie_status"]


class Ended(NamedTuple):
    """A rank process that ended."""

    pid: int
    rank: int | None     # None: its rank was never learnt
    seen: float          # time.monotonic() when the launcher saw it gone
    look: int            # ends seen in the same look cannot be ordered
    status: int | None   # as waitpid reports it; None: unknown (reaped before it was read)


def zombie_status(pid: int) -> int | None:
    """The exit status of ``pid`` while it is a zombie, else None."""
    try:
        with open(f"/proc/{pid}/stat", encoding="ascii", errors="replace") as f:
            fields = f.read().rsplit(")", 1)[1].split()
    except (OSError, IndexError):
        return None
    # fields[0] is field 3 (state); exit_code is field 52 (Linux 3.5)
    if len(fields) < 50 or fields[0] != "Z":
        return None
    try:
        return int(fields[49])
    except ValueError:
        return None


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


#: pidfd_open's flag (Linux 6.9) for a pidfd of the main thread alone: it is
#: readable when that thread ends, not once every thread did -- a rank killed
#: by a signal may take longer to end its other threads (unmapping shared
#: memory) than hydra takes to kill another rank outright, which would then
#: be seen first.  The main thread stays a zombie, its status readable, until
#: the others have ended, which also leaves more time to read it.
_PIDFD_THREAD = os.O_EXCL


class ExitWatch:
    """A thread that waits on pidfds of the rank processes and reports each
    one that ends, the moment it ends: ``on_exit(pid, status)`` (status as
    :func:`zombie_status` read it at once, None if already reaped), called
    in the thread in the order the kernel reported the exits (epoll's ready
    list is in the order of the events).  Nothing else runs in the thread,
    so it wakes before hydra has ended the other ranks.

    Without pidfds or epoll (old kernels, not Linux) :meth:`add` returns
    False and the caller finds ends by looking at ``/proc`` instead."""

    def __init__(self, on_exit: Callable[[int, int | None], None]) -> None:
        self._on_exit = on_exit
        self._fds: dict[int, int] = {}   # fd -> pid
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._epoll = select.epoll() if hasattr(select, "epoll") and hasattr(os, "pidfd_open") else None
        self._thread = threading.Thread(target=self._run, name="aiopdbp-rank-exits", daemon=True)

    def start(self) -> ExitWatch:
        if self._epoll is not None:
            self._thread.start()
        return self

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
        with self._lock:
            self._fds[fd] = pid
        self._epoll.register(fd, select.EPOLLIN)   # (thread-safe while the thread waits)
        return True

    def _run(self) -> None:
        assert self._epoll is not None
        while not self._stop.is_set():
            try:
                ready = self._epoll.poll(0.1)
            except OSError:
                return
            for fd, _ in ready:
                with self._lock:
                    pid = self._fds.pop(fd, None)
                if pid is None:
                    continue
                status = zombie_status(pid)   # first: hydra reaps it within milliseconds
                with contextlib.suppress(OSError):
                    self._epoll.unregister(fd)
                    os.close(fd)
                self._on_exit(pid, status)

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
        if self._epoll is not None:
            self._epoll.close()
