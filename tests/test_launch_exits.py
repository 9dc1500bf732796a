"""How the launcher tells how a rank process ended (aiopdbp.launch.exits),
on real processes: the ended ones in the order they ended, their status
read while they are zombies, worded for the user."""

from __future__ import annotations

import contextlib
import ctypes
import os
import signal
import subprocess
import sys
import threading

import pytest

from aiopdbp.launch.exits import (Ended, ExitWatch, KernelLog, dying, how_it_ended, pidfd_exit_status,
                                  zombie_status)

pytestmark = [pytest.mark.timeout(30),
              pytest.mark.skipif(not hasattr(os, "pidfd_open"), reason="needs pidfds (Linux 5.3)")]


def _child() -> subprocess.Popen[bytes]:
    return subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])


def _ended_unreaped(proc: subprocess.Popen[bytes]) -> None:
    """Wait until ``proc`` ended, leaving it a zombie (its status readable)."""
    os.waitid(os.P_PID, proc.pid, os.WEXITED | os.WNOWAIT)


def test_exit_watch_reports_each_end_in_the_order_they_happened_with_status() -> None:
    first, second = _child(), _child()
    seen: list[tuple[int, int | None]] = []
    both = threading.Event()

    def on_exit(pid: int, status: int | None) -> None:
        seen.append((pid, status))
        if len(seen) == 2:
            both.set()

    watch = ExitWatch(on_exit).start()
    try:
        assert watch.add(first.pid) and watch.add(second.pid)
        second.send_signal(signal.SIGKILL)
        _ended_unreaped(second)
        first.send_signal(signal.SIGTERM)
        _ended_unreaped(first)
        assert both.wait(10), seen
    finally:
        watch.close()
        for proc in (first, second):
            proc.kill()
            proc.wait()
    assert [pid for pid, _ in seen] == [second.pid, first.pid]
    words = [how_it_ended(Ended(pid, None, 0.0, 0, status)) for pid, status in seen]
    assert words == ["was killed by SIGKILL", "was killed by SIGTERM"]


def test_zombie_status_is_the_exit_status_until_the_parent_reaps_it() -> None:
    proc = subprocess.Popen([sys.executable, "-c", "raise SystemExit(3)"])
    _ended_unreaped(proc)
    status = zombie_status(proc.pid)
    proc.wait()
    assert status is not None and how_it_ended(Ended(proc.pid, 1, 0.0, 0, status)) == "exited with status 3"
    assert zombie_status(proc.pid) is None   # reaped: unknown, not guessed


def test_an_unknown_status_is_said_to_be_unknown() -> None:
    log = KernelLog()
    try:
        assert how_it_ended(Ended(1 << 30, 1, 0.0, 0, None), log) == "vanished (exit status unknown)"
    finally:
        log.close()


def test_a_kill_the_kernel_log_blames_on_the_oom_killer_says_so() -> None:
    class Log(KernelLog):
        def oom_killed(self, pid: int) -> bool:
            return pid == 4102

    killed = int(signal.SIGKILL)   # waitpid's status of a process a signal killed: the signal
    log = Log()
    try:
        assert how_it_ended(Ended(4102, 1, 0.0, 0, killed), log) == \
            "was killed by the out-of-memory killer (SIGKILL)"
        assert how_it_ended(Ended(4103, 1, 0.0, 0, killed), log) == "was killed by SIGKILL"
    finally:
        log.close()


#: a child with a second thread that ends when told (a line on stdin), then sleeps
_THREADED = """
import sys, threading, time
def helper():
    sys.stdin.readline()
threading.Thread(target=helper).start()
print("up", flush=True)
time.sleep(60)
"""


def test_a_thread_that_ends_while_its_process_runs_on_is_no_end_and_a_kill_is_one() -> None:
    proc = subprocess.Popen([sys.executable, "-c", _THREADED], stdin=subprocess.PIPE, stdout=subprocess.PIPE)
    assert proc.stdin is not None and proc.stdout is not None
    seen: list[tuple[int, int | None]] = []
    reported = threading.Event()

    def on_exit(pid: int, status: int | None) -> None:
        seen.append((pid, status))
        reported.set()

    watch = ExitWatch(on_exit).start()
    try:
        assert proc.stdout.readline() == b"up\n"
        assert watch.add(proc.pid)
        watch.add_threads(proc.pid)
        helper = sorted(int(t) for t in os.listdir(f"/proc/{proc.pid}/task") if int(t) != proc.pid)
        assert helper, "the child's helper thread is not running"
        proc.stdin.write(b"end\n")
        proc.stdin.flush()
        while os.path.exists(f"/proc/{proc.pid}/task/{helper[0]}"):   # the helper thread ended
            threading.Event().wait(0.01)
        assert not reported.wait(0.5), seen   # its process runs on
        assert not dying(proc.pid)
        proc.send_signal(signal.SIGKILL)
        _ended_unreaped(proc)
        assert dying(proc.pid)
        assert reported.wait(10), seen
        threading.Event().wait(0.3)   # a second report would come now
    finally:
        watch.close()
        proc.kill()
        proc.wait()
        proc.stdin.close()
        proc.stdout.close()
    assert [pid for pid, _ in seen] == [proc.pid], seen


def _ended_holding_the_gil(pid: int, reap: bool = False) -> None:
    """Wait until ``pid`` (a child) ended, leaving it a zombie (or reaping
    it), without letting another thread of this process run: ``waitid``
    called through ``ctypes.PyDLL`` keeps the GIL."""
    libc = ctypes.PyDLL(None, use_errno=True)
    info = ctypes.create_string_buffer(128)   # a siginfo_t
    flags = os.WEXITED | (0 if reap else os.WNOWAIT)
    if libc.waitid(ctypes.c_int(1), ctypes.c_uint(pid), info, ctypes.c_int(flags)) != 0:
        raise OSError(ctypes.get_errno(), "waitid")


def test_a_thread_that_ended_long_before_does_not_put_its_process_before_the_one_killed_first() -> None:
    # Every rank ends a thread at start-up.  When hydra has killed them all
    # by the time the watch looks at the first rank's end, such an old
    # thread end must not count as the start of their deaths.
    other, victim = (subprocess.Popen([sys.executable, "-c", _THREADED], stdin=subprocess.PIPE,
                                      stdout=subprocess.PIPE) for _ in range(2))
    procs = (other, victim)
    seen: list[int] = []
    both = threading.Event()

    def on_exit(pid: int, status: int | None) -> None:
        seen.append(pid)
        if len(seen) == 2:
            both.set()

    watch = ExitWatch(on_exit).start()
    interval = sys.getswitchinterval()
    try:
        for proc in procs:
            assert proc.stdout is not None and proc.stdout.readline() == b"up\n"
            assert watch.add(proc.pid)
            watch.add_threads(proc.pid)
        assert other.stdin is not None
        other.stdin.write(b"end\n")
        other.stdin.flush()
        assert not both.wait(0.5), seen   # its helper thread ended; it runs on
        assert not dying(other.pid)
        # the victim dies, then the other is killed, as hydra would, before
        # the watch thread can look (this thread keeps the GIL)
        sys.setswitchinterval(30.0)
        for proc in (victim, other):
            os.kill(proc.pid, signal.SIGKILL)
            _ended_holding_the_gil(proc.pid)
        sys.setswitchinterval(interval)
        assert both.wait(10), seen
    finally:
        sys.setswitchinterval(interval)
        watch.close()
        for proc in procs:
            proc.kill()
            proc.wait()
            for pipe in (proc.stdin, proc.stdout):
                assert pipe is not None
                pipe.close()
    assert seen == [victim.pid, other.pid]


def _reaped_status_known() -> bool:
    """Whether a pidfd tells the exit status once reaped (Linux 6.15)."""
    proc = subprocess.Popen([sys.executable, "-c", "raise SystemExit(3)"])
    fd = os.pidfd_open(proc.pid)
    try:
        proc.wait()
        return pidfd_exit_status(fd) == 3 << 8
    finally:
        os.close(fd)


def test_the_status_of_a_rank_reaped_before_the_watch_looks_is_known() -> None:
    # hydra reaps a killed rank within milliseconds; a launcher starved of
    # CPU looks later (258 ms in a traced 32-rank run): the status then
    # comes from the pidfd
    if not _reaped_status_known():
        pytest.skip("the kernel keeps no exit status for a pidfd (Linux 6.15)")
    proc = subprocess.Popen([sys.executable, "-c", _THREADED], stdin=subprocess.PIPE, stdout=subprocess.PIPE)
    seen: list[tuple[int, int | None]] = []
    reported = threading.Event()

    def on_exit(pid: int, status: int | None) -> None:
        seen.append((pid, status))
        reported.set()

    watch = ExitWatch(on_exit).start()
    interval = sys.getswitchinterval()
    try:
        assert proc.stdout is not None and proc.stdout.readline() == b"up\n"
        assert watch.add(proc.pid)
        watch.add_threads(proc.pid)
        sys.setswitchinterval(30.0)   # killed and reaped before the watch thread can look
        os.kill(proc.pid, signal.SIGKILL)
        _ended_holding_the_gil(proc.pid, reap=True)
        sys.setswitchinterval(interval)
        assert reported.wait(10), seen
    finally:
        sys.setswitchinterval(interval)
        watch.close()
        with contextlib.suppress(ChildProcessError):
            proc.kill()
            proc.wait()
        for pipe in (proc.stdin, proc.stdout):
            assert pipe is not None
            pipe.close()
    assert len(seen) == 1 and seen[0][0] == proc.pid
    assert how_it_ended(Ended(proc.pid, 1, 0.0, 0, seen[0][1])) == "was killed by SIGKILL"


def test_hydras_banner_waits_for_the_launchers_line_and_nothing_else_does() -> None:
    from aiopdbp.launch.launcher import _forward

    written: list[bytes] = []
    holding = threading.Event()
    release = threading.Event()

    def hold() -> None:   # the launcher's watch thread has not said its line yet
        holding.set()
        assert release.wait(10)

    r, w = os.pipe()
    thread = threading.Thread(target=_forward, args=(r, hold, written.append), daemon=True)
    thread.start()
    os.write(w, b"[0] a rank's line\n")
    os.write(w, b"[1] another\n\n=====\n=   BAD TERMINATION OF ONE OF YOUR APPLICATION PROCESSES\n=   PID 7\n")
    assert holding.wait(10)
    assert b"".join(written) == b"[0] a rank's line\n[1] another\n"   # the banner is held, not what came before
    release.set()
    os.write(w, b"YOUR APPLICATION TERMINATED\n")
    os.close(w)
    thread.join(10)
    assert b"".join(written).endswith(b"\n\n=====\n=   BAD TERMINATION OF ONE OF YOUR APPLICATION PROCESSES\n"
                                      b"=   PID 7\nYOUR APPLICATION TERMINATED\n")
