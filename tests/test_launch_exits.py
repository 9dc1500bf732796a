"""How the launcher tells how a rank process ended (aiopdbp.launch.exits),
on real processes: the ended ones in the order they ended, their status
read while they are zombies, worded for the user."""

from __future__ import annotations

import contextlib
import ctypes
import os
import signal
import socket
import subprocess
import sys
import threading
from pathlib import Path

import pytest

from aiopdbp.env import LIFELINE_FILE
from aiopdbp.launch.exits import (Ended, ExitWatch, KernelLog, dying, how_it_ended, pidfd_exit_status,
                                  zombie_status)

pytestmark = [pytest.mark.timeout(30),
              pytest.mark.skipif(not hasattr(os, "pidfd_open"), reason="needs pidfds (Linux 5.3)")]


class _Ends:
    """An ``on_exit`` for :class:`ExitWatch` that keeps what it reported, in
    order, and lets a test wait for a number of reports."""

    def __init__(self) -> None:
        self.seen: list[tuple[int, int | None]] = []
        self._cond = threading.Condition()

    def __call__(self, pid: int, status: int | None) -> None:
        with self._cond:
            self.seen.append((pid, status))
            self._cond.notify_all()

    def wait(self, n: int, timeout: float) -> bool:
        """Whether ``n`` ends were reported within ``timeout`` s."""
        with self._cond:
            return self._cond.wait_for(lambda: len(self.seen) >= n, timeout)

    @property
    def pids(self) -> list[int]:
        return [pid for pid, _ in self.seen]


def _child() -> subprocess.Popen[bytes]:
    return subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])


def _ended_unreaped(proc: subprocess.Popen[bytes]) -> None:
    """Wait until ``proc`` ended, leaving it a zombie (its status readable)."""
    os.waitid(os.P_PID, proc.pid, os.WEXITED | os.WNOWAIT)


def test_exit_watch_reports_each_end_in_the_order_they_happened_with_status() -> None:
    first, second = _child(), _child()
    ends = _Ends()

    watch = ExitWatch(ends).start()
    try:
        assert watch.add(first.pid) and watch.add(second.pid)
        second.send_signal(signal.SIGKILL)
        _ended_unreaped(second)
        first.send_signal(signal.SIGTERM)
        _ended_unreaped(first)
        assert ends.wait(2, 10), ends.seen
    finally:
        watch.close()
        for proc in (first, second):
            proc.kill()
            proc.wait()
    assert ends.pids == [second.pid, first.pid]
    words = [how_it_ended(Ended(pid, None, 0.0, 0, status)) for pid, status in ends.seen]
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
    ends = _Ends()

    watch = ExitWatch(ends).start()
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
        assert not ends.wait(1, 0.5), ends.seen   # its process runs on
        assert not dying(proc.pid)
        proc.send_signal(signal.SIGKILL)
        _ended_unreaped(proc)
        assert dying(proc.pid)
        assert ends.wait(1, 10), ends.seen
        threading.Event().wait(0.3)   # a second report would come now
    finally:
        watch.close()
        proc.kill()
        proc.wait()
        proc.stdin.close()
        proc.stdout.close()
    assert ends.pids == [proc.pid], ends.seen


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
    ends = _Ends()

    watch = ExitWatch(ends).start()
    interval = sys.getswitchinterval()
    try:
        for proc in procs:
            assert proc.stdout is not None and proc.stdout.readline() == b"up\n"
            assert watch.add(proc.pid)
            watch.add_threads(proc.pid)
        assert other.stdin is not None
        other.stdin.write(b"end\n")
        other.stdin.flush()
        assert not ends.wait(2, 0.5), ends.seen   # its helper thread ended; it runs on
        assert not dying(other.pid)
        # the victim dies, then the other is killed, as hydra would, before
        # the watch thread can look (this thread keeps the GIL)
        sys.setswitchinterval(30.0)
        for proc in (victim, other):
            os.kill(proc.pid, signal.SIGKILL)
            _ended_holding_the_gil(proc.pid)
        sys.setswitchinterval(interval)
        assert ends.wait(2, 10), ends.seen
    finally:
        sys.setswitchinterval(interval)
        watch.close()
        for proc in procs:
            proc.kill()
            proc.wait()
            for pipe in (proc.stdin, proc.stdout):
                assert pipe is not None
                pipe.close()
    assert ends.pids == [victim.pid, other.pid]


#: a rank's side of the lifeline: held from its run's start until the process ends
_HOLDING = """
import sys, time
import aiopdbp.env
aiopdbp.env.hold_lifeline(sys.argv[1])
print("up", flush=True)
time.sleep(60)
"""


def _lifeline_child(where: str) -> subprocess.Popen[bytes]:
    return subprocess.Popen([sys.executable, "-c", _HOLDING, where], stdout=subprocess.PIPE)


def test_a_lifeline_that_closes_as_its_process_dies_is_that_process_end_before_one_killed_after(
        tmp_path: Path) -> None:
    # The victim's threads are not watched at all (a thread it started after
    # the watch last looked): its lifeline alone says it ended first.
    ends = _Ends()

    watch = ExitWatch(ends)
    assert watch.listen(str(tmp_path / LIFELINE_FILE))
    watch.start()
    victim = _lifeline_child(str(tmp_path))
    other = _child()
    interval = sys.getswitchinterval()
    try:
        assert victim.stdout is not None and victim.stdout.readline() == b"up\n"
        assert watch.add(other.pid)
        sys.setswitchinterval(30.0)   # both die before the watch thread can look, as under hydra
        for proc in (victim, other):
            os.kill(proc.pid, signal.SIGKILL)
            _ended_holding_the_gil(proc.pid)
        sys.setswitchinterval(interval)
        assert ends.wait(2, 10), ends.seen
    finally:
        sys.setswitchinterval(interval)
        watch.close()
        for proc in (victim, other):
            proc.kill()
            proc.wait()
        assert victim.stdout is not None
        victim.stdout.close()
    assert ends.pids == [victim.pid, other.pid], ends.seen
    assert how_it_ended(Ended(victim.pid, 0, 0.0, 0, ends.seen[0][1])) == "was killed by SIGKILL"


#: a rank holding its lifeline, with a helper thread that ends when told (on stdin)
_HOLDING_THREADED = """
import sys, threading, time
import aiopdbp.env
aiopdbp.env.hold_lifeline(sys.argv[1])
threading.Thread(target=sys.stdin.readline).start()
print("up", flush=True)
time.sleep(60)
"""


def _thread_ended_holding_the_gil(fd: int) -> None:
    """Wait until the thread of pidfd ``fd`` ended without letting another
    thread of this process run (``poll`` through ``ctypes.PyDLL``)."""
    class PollFd(ctypes.Structure):
        _fields_ = [("fd", ctypes.c_int), ("events", ctypes.c_short), ("revents", ctypes.c_short)]
    libc = ctypes.PyDLL(None, use_errno=True)
    pfd = PollFd(fd, 1, 0)   # POLLIN
    if libc.poll(ctypes.byref(pfd), 1, 10_000) != 1:
        raise OSError(ctypes.get_errno(), "poll")


def test_a_thread_that_ended_on_its_own_just_before_hydra_killed_its_rank_does_not_put_it_first(
        tmp_path: Path) -> None:
    # A rank's start-up thread ends on its own; before the starved watch
    # looks, another rank dies and hydra kills the first: looked at now,
    # the thread's end seems the start of its rank's death.  The lifeline
    # is what says which rank died first.
    other, victim = (subprocess.Popen([sys.executable, "-c", _HOLDING_THREADED, str(tmp_path)],
                                      stdin=subprocess.PIPE, stdout=subprocess.PIPE) for _ in range(2))
    procs = (other, victim)
    ends = _Ends()

    watch = ExitWatch(ends)
    assert watch.listen(str(tmp_path / LIFELINE_FILE))
    watch.start()
    interval = sys.getswitchinterval()
    helper = -1
    try:
        for proc in procs:
            assert proc.stdout is not None and proc.stdout.readline() == b"up\n"
            assert watch.add(proc.pid)
            watch.add_threads(proc.pid)
        while watch.lifelines() != {other.pid, victim.pid}:   # (taken by the watch thread)
            threading.Event().wait(0.01)
        tid = max(int(t) for t in os.listdir(f"/proc/{other.pid}/task"))
        helper = os.pidfd_open(tid, os.O_EXCL)   # (PIDFD_THREAD)
        assert other.stdin is not None
        sys.setswitchinterval(30.0)
        os.write(other.stdin.fileno(), b"end\n")
        _thread_ended_holding_the_gil(helper)
        for proc in (victim, other):   # the victim dies; hydra kills the other
            os.kill(proc.pid, signal.SIGKILL)
            _ended_holding_the_gil(proc.pid)
        sys.setswitchinterval(interval)
        assert ends.wait(2, 10), ends.seen
    finally:
        sys.setswitchinterval(interval)
        watch.close()
        if helper >= 0:
            os.close(helper)
        for proc in procs:
            proc.kill()
            proc.wait()
            for pipe in (proc.stdin, proc.stdout):
                assert pipe is not None
                pipe.close()
    assert ends.pids == [victim.pid, other.pid]


_CLOSING = """
import socket, sys, time
conn = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
conn.connect(sys.argv[1])
print("up", flush=True)
sys.stdin.readline()
conn.close()
print("closed", flush=True)
time.sleep(60)
"""


def test_a_lifeline_closed_by_a_process_that_runs_on_is_no_end(tmp_path: Path) -> None:
    ends = _Ends()

    watch = ExitWatch(ends)
    assert watch.listen(str(tmp_path / LIFELINE_FILE))
    watch.start()
    proc = subprocess.Popen([sys.executable, "-c", _CLOSING, str(tmp_path / LIFELINE_FILE)],
                            stdin=subprocess.PIPE, stdout=subprocess.PIPE)
    try:
        assert proc.stdin is not None and proc.stdout is not None
        assert proc.stdout.readline() == b"up\n"
        assert watch.add(proc.pid)
        proc.stdin.write(b"close\n")
        proc.stdin.flush()
        assert proc.stdout.readline() == b"closed\n"
        assert not ends.wait(1, 0.5), ends.seen   # it runs on
        proc.kill()
        _ended_unreaped(proc)
        assert ends.wait(1, 10), ends.seen        # its end is still seen, by its pidfd
        threading.Event().wait(0.3)           # a second report would come now
    finally:
        watch.close()
        proc.kill()
        proc.wait()
        for pipe in (proc.stdin, proc.stdout):
            assert pipe is not None
            pipe.close()
    assert ends.pids == [proc.pid]


def test_a_rank_without_a_launcher_listening_holds_no_lifeline_and_runs_on(tmp_path: Path) -> None:
    out = subprocess.run([sys.executable, "-c", _HOLDING.replace("time.sleep(60)", ""), str(tmp_path)],
                         capture_output=True, timeout=30)
    assert (out.returncode, out.stdout, out.stderr) == (0, b"up\n", b"")


def test_a_lifeline_is_held_above_hydras_pmi_socket(tmp_path: Path) -> None:
    # an ending process lets go of its files last descriptor first: above
    # the PMI socket, the lifeline closes before hydra hears of the end
    listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    listener.bind(str(tmp_path / LIFELINE_FILE))
    listener.listen(1)
    show = ("import os, sys, aiopdbp.env\n"
            "aiopdbp.env.hold_lifeline(sys.argv[1])\n"
            "for fd in sorted(map(int, os.listdir('/proc/self/fd'))):\n"
            "    try:\n"
            "        if os.readlink(f'/proc/self/fd/{fd}').startswith('socket:'): print(fd)\n"
            "    except OSError: pass\n")
    try:
        out = subprocess.run([sys.executable, "-c", show, str(tmp_path)], capture_output=True, text=True,
                             env={**os.environ, "PMI_FD": "40"}, timeout=30)
    finally:
        listener.close()
    assert out.returncode == 0, out.stderr
    fds = [int(fd) for fd in out.stdout.split()]
    assert len(fds) == 1 and fds[0] > 40, out.stdout


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
    ends = _Ends()

    watch = ExitWatch(ends).start()
    interval = sys.getswitchinterval()
    try:
        assert proc.stdout is not None and proc.stdout.readline() == b"up\n"
        assert watch.add(proc.pid)
        watch.add_threads(proc.pid)
        sys.setswitchinterval(30.0)   # killed and reaped before the watch thread can look
        os.kill(proc.pid, signal.SIGKILL)
        _ended_holding_the_gil(proc.pid, reap=True)
        sys.setswitchinterval(interval)
        assert ends.wait(1, 10), ends.seen
    finally:
        sys.setswitchinterval(interval)
        watch.close()
        with contextlib.suppress(ChildProcessError):
            proc.kill()
            proc.wait()
        for pipe in (proc.stdin, proc.stdout):
            assert pipe is not None
            pipe.close()
    assert len(ends.seen) == 1 and ends.seen[0][0] == proc.pid
    assert how_it_ended(Ended(proc.pid, 1, 0.0, 0, ends.seen[0][1])) == "was killed by SIGKILL"


def test_hydras_banner_waits_for_the_launchers_line_and_nothing_else_does() -> None:
    from aiopdbp.launch.launcher import _forward

    written: list[bytes] = []
    holding = threading.Event()
    release = threading.Event()

    def hold() -> bool:   # the launcher's watch thread has not said its line yet
        holding.set()
        assert release.wait(10)
        return True

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


def test_hydras_banner_is_left_out_after_an_interrupt_and_what_follows_it_is_not() -> None:
    from aiopdbp.launch.launcher import _forward

    written: list[bytes] = []
    r, w = os.pipe()
    thread = threading.Thread(target=_forward, args=(r, lambda: False, written.append), daemon=True)
    thread.start()
    os.write(w, b"[0] a rank's line\n\n=====\n=   BAD TERMINATION OF ONE OF YOUR APPLICATION PROCESSES\n"
                b"=   EXIT CODE: 9\n=====\nYOUR APPLICATION TERMINATED WITH THE EXIT STRING: Killed (signal 9)\n"
                b"This typically refers to a problem with your application.\nPlease see the FAQ")
    os.write(w, b" page for debugging suggestions\n[1] a late line\n")
    os.close(w)
    thread.join(10)
    assert b"".join(written) == b"[0] a rank's line\n[1] a late line\n"


def test_hydras_banner_read_in_two_pieces_is_left_out_too() -> None:
    from aiopdbp.launch.launcher import _forward

    written: list[bytes] = []
    got = threading.Condition()

    def write(data: bytes) -> None:
        with got:
            written.append(data)
            got.notify_all()

    r, w = os.pipe()
    thread = threading.Thread(target=_forward, args=(r, lambda: False, write), daemon=True)
    thread.start()
    # hydra writes its banner a line at a time: a read may end after the box's first line
    os.write(w, b"[0] a rank's line\n\n=====\n")
    with got:
        assert got.wait_for(lambda: b"".join(written) == b"[0] a rank's line\n", 10)
    os.write(w, b"=   BAD TERMINATION OF ONE OF YOUR APPLICATION PROCESSES\n=   EXIT CODE: 9\n=====\n"
                b"[1] a late line\n")
    os.close(w)
    thread.join(10)
    assert b"".join(written) == b"[0] a rank's line\n[1] a late line\n"


def test_a_line_of_equals_signs_alone_is_forwarded_when_nothing_follows() -> None:
    from aiopdbp.launch.launcher import _forward

    written: list[bytes] = []
    got = threading.Condition()

    def write(data: bytes) -> None:
        with got:
            written.append(data)
            got.notify_all()

    r, w = os.pipe()
    thread = threading.Thread(target=_forward, args=(r, lambda: False, write), daemon=True)
    thread.start()
    os.write(w, b"[0] results\n=====\n")   # the program's own rule line, and then a long silence
    with got:
        assert got.wait_for(lambda: b"".join(written) == b"[0] results\n=====\n", 10)
    os.close(w)
    thread.join(10)
    assert b"".join(written) == b"[0] results\n=====\n"


# ------------------------------------------ which rank the launcher names
def _job_dir(tmp_path: Path, started: dict[int, int]) -> str:
    from aiopdbp.env import RANK_FILE_PREFIX

    for rank, pid in started.items():   # as each rank's aiopdbp.run records itself
        (tmp_path / f"{RANK_FILE_PREFIX}{rank}").write_text(f"{pid}\n")
    return str(tmp_path)


def test_a_rank_killed_before_it_started_aiopdbp_run_is_named_when_it_ended_first(tmp_path: Path) -> None:
    from aiopdbp.launch.launcher import _vanish_line

    # rank 1 was killed while importing; hydra then killed ranks 0 and 2, in aiopdbp.run
    where = _job_dir(tmp_path, {0: 100, 2: 102})
    ends = [Ended(101, 1, 0.0, 1, signal.SIGKILL), Ended(102, 2, 0.0, 2, signal.SIGKILL),
            Ended(100, 0, 0.0, 3, signal.SIGKILL)]
    assert _vanish_line(ends, where) == ("rank 1 (pid 101) was killed by SIGKILL before it started aiopdbp.run, "
                                         "the first rank to end; the others were stopped")


def test_a_rank_that_exited_before_aiopdbp_run_is_not_named_as_vanished(tmp_path: Path) -> None:
    from aiopdbp.launch.launcher import _vanish_line

    # an exit (an exception at import) is the early-exit rule's to say; a
    # rank killed while in aiopdbp.run after it is the first to vanish
    where = _job_dir(tmp_path, {0: 100})
    ends = [Ended(101, 1, 0.0, 1, 1 << 8), Ended(100, 0, 0.0, 2, signal.SIGKILL)]
    assert _vanish_line(ends, where).startswith("rank 0 (pid 100) was killed by SIGKILL during aiopdbp.run, ")
    assert _vanish_line(ends[:1], where) == ""


def test_a_rank_killed_first_while_no_rank_had_reached_aiopdbp_run_is_named(tmp_path: Path) -> None:
    from aiopdbp.launch.launcher import _vanish_line

    # rank 2 was killed in a long import; hydra then killed ranks 0 and 1
    ends = [Ended(102, 2, 0.0, 1, signal.SIGKILL), Ended(100, 0, 0.0, 2, signal.SIGKILL),
            Ended(101, 1, 0.0, 3, signal.SIGKILL)]
    assert _vanish_line(ends, _job_dir(tmp_path, {})) == ("rank 2 (pid 102) was killed by SIGKILL, "
                                                          "the first rank to end; the others were stopped")


def test_a_rank_that_exited_first_while_no_rank_had_reached_aiopdbp_run_names_no_kill(tmp_path: Path) -> None:
    from aiopdbp.launch.launcher import _vanish_line

    # rank 2's exit (an exception at import) ended the job: hydra's kills after it are not the cause
    ends = [Ended(102, 2, 0.0, 1, 1 << 8), Ended(100, 0, 0.0, 2, signal.SIGKILL)]
    assert _vanish_line(ends, _job_dir(tmp_path, {})) == ""
