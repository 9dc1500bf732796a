"""Last words: under a plain ``mpiexec`` (MPICH's hydra), the rank that
vanishes -- ``kill -9``, the out-of-memory killer, ``os._exit`` -- is named,
with its pid and how it ended, before hydra's banner.

hydra kills every other rank about a millisecond after the dying rank's PMI
socket (``PMI_FD``) closes -- before any survivor's heartbeat, or a ring
neighbour watching its pidfd, gets the CPU on a loaded machine.  So each
rank starts a small helper process that holds a copy of its PMI socket:
the socket closes only when both have ended.  The helper waits on a pidfd
of the rank; when the rank ends without having said it leaves through
Python (:func:`quiet`, called by ``aiopdbp.run`` on every way out it
handles, a reported failure included), the helper reads its exit status
(the zombie's ``/proc`` entry, or the pidfd once hydra reaped it), writes
one line to the rank's stderr and exits -- then hydra stops the job as
before.  The helper is in the rank's process group, which hydra kills
with it, so a rank hydra kills says nothing.

Only under hydra with ``PMI_FD``, on Linux with pidfds, and not under
``aiopdbp launch`` (its launcher names the rank itself); ``AIOPDBP_LAST_WORDS=0``
turns it off (it costs a process of about 10 MB per rank).  Bounded: the
helper waits at most :data:`STATUS_WAIT_S` for the status, so hydra's
cleanup is delayed by no more than that.
"""

from __future__ import annotations

import contextlib
import os
import subprocess
import sys

from aiopdbp.env import last_words_enabled, pmi_fd, under_aiopdbp_launch

__all__ = ["STATUS_WAIT_S", "quiet", "start"]

#: how long the helper looks for the rank's exit status before it speaks
STATUS_WAIT_S = 0.2

#: the helper (``python -I -S -c``): argv pid, rank; stdin the rank's pipe
_HELPER = r"""
import fcntl, os, select, signal, struct, sys, time
signal.signal(signal.SIGINT, signal.SIG_IGN)   # a Ctrl-C hydra sends the rank's group is the rank's
pid, rank = int(sys.argv[1]), int(sys.argv[2])
try:
    fd = os.pidfd_open(pid)
except OSError:
    sys.exit(0)
if os.getppid() != pid:
    sys.exit(0)   # the rank is gone already
ready = select.select([fd, 0], [], [])[0]
if 0 in ready and os.read(0, 1):
    sys.exit(0)   # the rank left through Python: it said what it had to
select.select([fd], [], [])
status, deadline = None, time.monotonic() + float(sys.argv[3])
while status is None and time.monotonic() < deadline:
    try:
        with open(f"/proc/{pid}/stat") as f:
            fields = f.read().rsplit(")", 1)[1].split()
        if fields[0] == "Z":
            status = int(fields[49])
    except (OSError, IndexError, ValueError):
        info = bytearray(64)   # reaped: PIDFD_GET_INFO, PIDFD_INFO_EXIT (Linux 6.15)
        struct.pack_into("=Q", info, 0, 8)
        with __import__("contextlib").suppress(OSError):
            fcntl.ioctl(fd, (3 << 30) | (64 << 16) | (0xFF << 8) | 11, info)
            if struct.unpack_from("=Q", info)[0] & 8:
                status = struct.unpack_from("=i", info, 60)[0]
    if status is None:
        time.sleep(0.002)
if status is None:
    how = "vanished (exit status unknown)"
elif os.WIFSIGNALED(status):
    num = os.WTERMSIG(status)
    try:
        how = "was killed by " + signal.Signals(num).name
    except ValueError:
        how = f"was killed by signal {num}"
else:
    how = f"exited with status {os.WEXITSTATUS(status)}"
os.write(2, f"[{rank}] aiopdbp: rank {rank} (pid {pid}) {how} during aiopdbp.run; "
            "mpiexec stops the other ranks\n".encode())
"""

_pipe: int | None = None   # the write end: a byte there means "leaving through Python"
_helper: subprocess.Popen[bytes] | None = None   # (kept: a Popen dropped while it runs warns)


def start(rank: int) -> None:
    """Start this rank's helper (once; where it applies, see the module doc)."""
    global _pipe, _helper
    fd = pmi_fd()
    if (_pipe is not None or fd is None or under_aiopdbp_launch() or not hasattr(os, "pidfd_open")
            or not last_words_enabled()):
        return
    try:
        os.fstat(fd)
    except OSError:
        return   # not open in this process
    rd, wr = os.pipe()
    try:
        _helper = subprocess.Popen([sys.executable, "-I", "-S", "-c", _HELPER, str(os.getpid()), str(rank),
                                    str(STATUS_WAIT_S)], stdin=rd, stdout=subprocess.DEVNULL, pass_fds=(fd,))
    except OSError:
        os.close(wr)
        return
    finally:
        os.close(rd)
    _pipe = wr


def quiet() -> None:
    """This rank leaves through Python (it returned, or reported its failure
    or stop): its helper ends without a word."""
    global _pipe
    wr, _pipe = _pipe, None
    if wr is not None:
        with contextlib.suppress(OSError):
            os.write(wr, b"q")
            os.close(wr)
