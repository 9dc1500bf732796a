"""An emulated cluster of N hosts on one Linux machine (``aiopdbp launch --emulate``).

Theory of operation
-------------------
Host *i* is a network namespace ``aiopdbp-<job>-h<i>`` with one interface
``apb-<job>`` holding ``198.18.X.(i+2)/24`` (RFC 2544's benchmarking range).
Its veth peer ``p<i>`` is a port of bridge ``br0`` in a *switch* namespace
``aiopdbp-<job>-sw``, so the machine's firewall never sees the hosts' traffic
and the root namespace gains one interface only: the switch's uplink, veth
``apb-<job>`` with ``198.18.X.1``, through which ``mpiexec`` reaches its
proxies.  No namespace has a default route and nothing forwards: no packet
from a host leaves the machine.

``tbf`` shapes a device's egress only, so each link has one at each end: on
``p<i>`` (switch -> host) and on the host's ``apb-<job>`` (host -> switch).
It counts frames without preamble, FCS and gap: TCP payload tops out near
95.6 % of the rate (94.1 % on real Ethernet).  ``netem`` is missing on some
kernels (ours), so **no delay is added**.

Ranks start through hydra: ``-launcher ssh -launcher-exec emulate_exec.sh``
(next to this module), the hosts' addresses as host list and ``-iface
apb-<job>`` (one name in every namespace).  hydra calls the script like ssh;
it finds the address's namespace in ``AIOPDBP_EMULATE_HOSTS`` and runs the
proxy with ``ip netns exec``.  UCX is pinned to TCP on ``apb-<job>``: left
alone it sees that the "hosts" share memory and bypasses the links.

Ownership: a job id (6 hex digits) and a /24 are reserved under a lock in
``/run/aiopdbp/emulate/<job>.json``, which names every object before it is
created, with the owner's pid and start time.  Teardown (exit, exception,
Ctrl-C, SIGTERM, SIGHUP) ends what still runs in the job's namespaces and
deletes exactly the objects named there, then the file.  After a SIGKILL the
file stays; :func:`cleanup` (``--emulate --cleanup``, also run at each start)
removes jobs whose owner is dead, never a name it did not record.
"""

from __future__ import annotations

import enum
import fcntl
import ipaddress
import json
import os
import re
import secrets
import shutil
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import asdict, dataclass, field
from pathlib import Path
from types import FrameType, TracebackType
from typing import Any, NamedTuple

from aiopdbp.env import (
    EMULATE_HOSTS,
    EMULATE_IP,
    EMULATE_JOB,
    EMULATE_LINK_BPS,
    EMULATE_UNSHARE,
    inherited,
    search_path,
)

__all__ = [
    "STATE_DIR", "EXEC_SCRIPT", "EmulateError", "EmulationUnavailable", "EmulateConfig",
    "EmulatedHost", "EmulatedCluster", "ClusterState", "Tools", "parse_rate", "format_rate",
    "tbf_args", "requirements_problems", "check_requirements", "cleanup", "cleanup_main",
]

#: where each job's state file lives (tmpfs: gone at reboot, like the namespaces)
STATE_DIR = Path("/run/aiopdbp/emulate")
#: hydra's launcher-exec: runs a command inside an emulated host
EXEC_SCRIPT = Path(__file__).with_name("emulate_exec.sh")
#: the /24s handed out, one per job (198.18.0.0/15: RFC 2544, network benchmarks)
SUBNET_POOL = ipaddress.IPv4Network("198.18.0.0/15")
MAX_HOSTS = 253
CAP_NET_ADMIN = 12
CAP_SYS_ADMIN = 21
_SBIN = ("/usr/sbin", "/sbin", "/usr/bin", "/bin")
_MISSING = ("Cannot find device", "No such file or directory", "does not exist")


class EmulateError(RuntimeError):
    """Setting up or tearing down an emulated cluster failed."""


class EmulationUnavailable(EmulateError):
    """This machine or user cannot emulate a cluster (privilege, tools)."""


# ------------------------------------------------------------------ rates
_UNITS = {"bit": 1, "kbit": 10**3, "mbit": 10**6, "gbit": 10**9, "tbit": 10**12}
_RATE_RE = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*([a-z]*)\s*$", re.IGNORECASE)


def parse_rate(text: str | int | None) -> int | None:
    """``"1gbit"`` -> 1_000_000_000 bits/s; ``"none"``/``None`` -> None (no shaping).

    Units are tc's: bit, kbit, mbit, gbit, tbit (powers of 1000); a bare
    number is bits/s.  Raises :class:`ValueError` on anything else.
    """
    if text is None:
        return None
    if isinstance(text, int):
        bits = text
    else:
        if text.strip().lower() in ("none", "off", "unlimited"):
            return None
        m = _RATE_RE.match(text)
        unit = m.group(2).lower() if m else ""
        if m is None or (unit and unit not in _UNITS):
            raise ValueError(f"bad link rate {text!r}: use e.g. 1gbit, 100mbit, 10gbit or none")
        bits = round(float(m.group(1)) * _UNITS[unit or "bit"])
    if not 64_000 <= bits <= 10**12:
        raise ValueError(f"link rate {text!r} out of range (64kbit .. 1tbit)")
    return bits


def format_rate(bits: int | None) -> str:
    """Inverse of :func:`parse_rate` for display: 10**9 -> ``"1gbit"``."""
    if bits is None:
        return "none"
    for unit in ("tbit", "gbit", "mbit", "kbit"):
        if bits >= _UNITS[unit]:
            return f"{bits / _UNITS[unit]:g}{unit}"
    return f"{bits}bit"


def tbf_args(bits: int) -> list[str]:
    """tbf parameters for ``bits``/s: a burst of 1 ms of traffic (>= 16 KiB) and
    a 10 ms queue, which let one TCP flow fill 100 Mbit/s .. 10 Gbit/s (measured)."""
    burst = max(bits // 8000, 16384)
    return ["tbf", "rate", f"{bits}bit", "burst", str(burst), "latency", "10ms"]


# ----------------------------------------------------------- requirements
class Tools(NamedTuple):
    ip: str
    tc: str
    unshare: str | None  # optional: a hostname per emulated host


def _find_tool(name: str) -> str | None:
    path = os.pathsep.join([search_path(), *_SBIN])
    return shutil.which(name, path=path)


def _effective_caps() -> int:
    try:
        status = Path("/proc/self/status").read_text()
    except OSError:
        return 0
    return next((int(ln.split()[1], 16) for ln in status.splitlines() if ln.startswith("CapEff:")), 0)


def requirements_problems(
    *, cap_eff: int | None = None, which: Callable[[str], str | None] = _find_tool
) -> list[str]:
    """Why this process cannot emulate a cluster (empty list: it can).

    ``cap_eff`` (the effective capability mask) and ``which`` default to the
    real ones; tests pass others to see the messages.
    """
    if not sys.platform.startswith("linux"):
        return ["it needs Linux network namespaces"]
    caps = _effective_caps() if cap_eff is None else cap_eff
    missing = [n for bit, n in ((CAP_NET_ADMIN, "CAP_NET_ADMIN"), (CAP_SYS_ADMIN, "CAP_SYS_ADMIN"))
               if not caps >> bit & 1]
    problems = []
    if missing:
        problems.append(
            f"it needs root: this process lacks {' and '.join(missing)} (creating network "
            "namespaces, veth links and tc qdiscs needs CAP_NET_ADMIN; naming a namespace "
            "needs CAP_SYS_ADMIN). Run it as root, e.g. `sudo aiopdbp launch --emulate ...`")
    for tool in ("ip", "tc"):
        if which(tool) is None:
            problems.append(f"`{tool}` was not found on PATH or in /usr/sbin, /sbin "
                            "(install iproute2)")
    return problems


def check_requirements(
    *, cap_eff: int | None = None, which: Callable[[str], str | None] = _find_tool
) -> Tools:
    """The tools to use; raises :class:`EmulationUnavailable` saying what is missing."""
    problems = requirements_problems(cap_eff=cap_eff, which=which)
    if problems:
        raise EmulationUnavailable("cannot emulate a cluster: " + "; ".join(problems))
    return Tools(which("ip") or "ip", which("tc") or "tc", which("unshare"))


# ------------------------------------------------------------------ state
@dataclass(frozen=True)
class EmulatedHost:
    """One emulated host: its namespace, address and switch port."""

    index: int
    netns: str      # network namespace (also its hostname when unshare exists)
    address: str    # IPv4 address on the job's /24
    port: str       # its veth peer on the bridge, inside the switch namespace


@dataclass
class _Record:
    """What a job owns; written before anything is created (see module doc)."""

    job: str
    owner_pid: int
    owner_start: int | None
    uid: int
    subnet: str
    link: str                # root-namespace veth, also each host's interface name
    switch: str              # switch namespace
    rate_bps: int | None
    hosts: list[EmulatedHost] = field(default_factory=list)

    def dump(self) -> str:
        return json.dumps(asdict(self), indent=1)

    @classmethod
    def load(cls, text: str) -> _Record:
        d: dict[str, Any] = json.loads(text)
        d["hosts"] = [EmulatedHost(**h) for h in d.get("hosts", [])]
        return cls(**d)

    def owner_alive(self) -> bool:
        return self.owner_start is not None and _proc_start(self.owner_pid) == self.owner_start

    def netns_names(self) -> list[str]:
        return [h.netns for h in self.hosts] + [self.switch]


def _gateway(rec: _Record) -> str:
    return str(next(ipaddress.IPv4Network(rec.subnet).hosts()))


def _proc_start(pid: int) -> int | None:
    """Start time of ``pid`` (clock ticks since boot): a pid reused later differs."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    return int(stat.rsplit(")", 1)[1].split()[19])


@contextmanager
def _locked(state_dir: Path) -> Iterator[None]:
    """Serialise allocation and cleanup between jobs (an flock on the state dir)."""
    try:
        state_dir.mkdir(parents=True, exist_ok=True, mode=0o755)
        fd = os.open(state_dir / ".lock", os.O_RDWR | os.O_CREAT, 0o644)
    except OSError as exc:
        raise EmulationUnavailable(f"cannot use the state directory {state_dir}: {exc}") from exc
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        yield
    finally:
        os.close(fd)


def _records(state_dir: Path) -> list[tuple[Path, _Record]]:
    out = []
    for path in sorted(state_dir.glob("*.json")):
        try:
            out.append((path, _Record.load(path.read_text())))
        except (OSError, ValueError, TypeError, KeyError):
            continue  # being written (we hold the lock, so: corrupt); never guess its objects
    return out


# ---------------------------------------------------------------- running
def _run(argv: Sequence[str], *, missing_ok: bool = False) -> str:
    """Run an ip/tc command; a failure raises :class:`EmulateError` with its stderr.

    ``missing_ok``: an object that does not exist (already gone) is not an error.
    """
    env = {**inherited(), "LC_ALL": "C"}
    r = subprocess.run(list(argv), capture_output=True, text=True, env=env, check=False)
    if r.returncode != 0:
        err = r.stderr.strip()
        if missing_ok and any(s in err for s in _MISSING):
            return ""
        raise EmulateError(f"`{' '.join(argv)}` failed (exit {r.returncode}): {err}")
    return r.stdout


def _kill_inside(ip: str, namespaces: Sequence[str], grace: float = 2.0) -> None:
    """End what still runs in the job's namespaces (its MPI proxies and ranks)."""
    def pids() -> list[int]:
        return [int(p) for ns in namespaces
                for p in _run([ip, "netns", "pids", ns], missing_ok=True).split()]

    for sig, wait in ((signal.SIGTERM, grace), (signal.SIGKILL, 2.0)):
        found = pids()
        if not found:
            return
        for pid in found:
            try:
                os.kill(pid, sig)
            except ProcessLookupError:
                pass
        deadline = time.monotonic() + wait
        while time.monotonic() < deadline and pids():
            time.sleep(0.05)


def _teardown(rec: _Record, ip: str) -> list[str]:
    """Remove exactly what ``rec`` names; return the errors (empty: all gone)."""
    errors = []
    _kill_inside(ip, rec.netns_names())
    steps = [[ip, "link", "del", "dev", rec.link]]  # synchronous, unlike a netns's links
    steps += [[ip, "netns", "del", ns] for ns in rec.netns_names()]
    for argv in steps:
        try:
            _run(argv, missing_ok=True)
        except EmulateError as exc:
            errors.append(str(exc))
    return errors


def cleanup(
    *, state_dir: Path = STATE_DIR, log: Callable[[str], None] | None = None, tools: Tools | None = None
) -> list[str]:
    """Remove the leftovers of this user's jobs whose owner process is dead.

    A job is identified by its state file only; live owners' jobs and other
    users' jobs are never touched.  Returns the job ids removed.
    """
    tools = tools or check_requirements()
    removed = []
    with _locked(state_dir):
        for path in state_dir.glob("*.json"):
            if path.stat().st_size == 0:  # its writer died between reserving and writing:
                path.unlink()             # it names no object (writes finish under the lock)
        for path, rec in _records(state_dir):
            if rec.uid != os.getuid() or rec.owner_alive():
                continue
            errors = _teardown(rec, tools.ip)
            if errors:
                if log:
                    log(f"job {rec.job}: could not remove everything: {'; '.join(errors)}")
                continue
            path.unlink(missing_ok=True)
            path.with_suffix(".tmp").unlink(missing_ok=True)
            removed.append(rec.job)
            if log:
                log(f"removed emulated cluster {rec.job} (owner pid {rec.owner_pid} is gone): "
                    f"{', '.join(rec.netns_names())}, {rec.link}")
    return removed


# ---------------------------------------------------------------- cluster
class ClusterState(enum.Enum):
    NEW = "new"
    STARTING = "starting"
    UP = "up"
    CLOSING = "closing"
    CLOSED = "closed"


_TRANSITIONS: Mapping[ClusterState, frozenset[ClusterState]] = {
    ClusterState.NEW: frozenset({ClusterState.STARTING, ClusterState.CLOSED}),
    ClusterState.STARTING: frozenset({ClusterState.UP, ClusterState.CLOSING}),
    ClusterState.UP: frozenset({ClusterState.CLOSING}),
    ClusterState.CLOSING: frozenset({ClusterState.CLOSED}),
    ClusterState.CLOSED: frozenset(),
}
_SHIELDED = (signal.SIGTERM, signal.SIGHUP)


def _raise_exit(signum: int, frame: FrameType | None) -> None:
    raise SystemExit(128 + signum)


def _set_handlers(sigs: Sequence[int], handler: Any, *, only_default: bool) -> dict[int, Any]:
    """Install ``handler`` (main thread only); return the handlers it replaced."""
    if threading.current_thread() is not threading.main_thread():
        return {}
    return {sig: signal.signal(sig, handler) for sig in sigs
            if not only_default or signal.getsignal(sig) is signal.SIG_DFL}


def _restore(handlers: Mapping[int, Any]) -> None:
    for sig, old in handlers.items():
        signal.signal(sig, old)


class EmulatedCluster:
    """``hosts`` emulated hosts with ``link``-shaped links, as a context manager::

        with EmulatedCluster(3, "1gbit") as cluster:
            subprocess.run([mpiexec, *cluster.mpiexec_args(), "-n", "3", ...],
                           env={**os.environ, **cluster.env()})
            cluster.link_down(1)      # pull host 1's cable

    While the cluster is up, SIGTERM and SIGHUP raise ``SystemExit`` (if they
    had their default action) so that teardown runs; during teardown they and
    SIGINT are ignored (it takes a second or two).
    """

    def __init__(self, hosts: int, link: str | int | None = "1gbit", *, state_dir: Path = STATE_DIR,
                 log: Callable[[str], None] | None = None) -> None:
        if not 1 <= hosts <= MAX_HOSTS:
            raise ValueError(f"an emulated cluster has 1..{MAX_HOSTS} hosts, not {hosts}")
        self.rate_bps = parse_rate(link)
        self.state_dir = state_dir
        self._nhosts = hosts
        self._log = log
        self._state = ClusterState.NEW
        self._rec: _Record | None = None
        self._tools: Tools | None = None
        self._saved: dict[int, Any] = {}

    @property
    def state(self) -> ClusterState:
        return self._state

    def _to(self, new: ClusterState) -> None:
        if new not in _TRANSITIONS[self._state]:
            raise EmulateError(f"emulated cluster: {self._state.value} -> {new.value} is not allowed")
        self._state = new

    def _record(self, *, up: bool = False) -> _Record:
        """The job's record (names stay readable after close); ``up``: only while up."""
        if self._rec is None or (up and self._state is not ClusterState.UP):
            raise EmulateError(f"the emulated cluster is {self._state.value}, not up")
        return self._rec

    @property
    def job(self) -> str:
        return self._record().job

    @property
    def link(self) -> str:
        """The interface name: the root namespace's uplink and each host's interface."""
        return self._record().link

    @property
    def switch_netns(self) -> str:
        return self._record().switch

    @property
    def gateway(self) -> str:
        """The root namespace's address on the job's subnet (where mpiexec listens)."""
        return _gateway(self._record())

    @property
    def subnet(self) -> str:
        return self._record().subnet

    @property
    def hosts(self) -> tuple[EmulatedHost, ...]:
        return tuple(self._record().hosts)

    @property
    def state_file(self) -> Path:
        return self.state_dir / f"{self._record().job}.json"

    def host(self, which: int | str | EmulatedHost) -> EmulatedHost:
        """A host by index, namespace name, address or itself."""
        for h in self.hosts:
            if which in (h, h.index, h.netns, h.address):
                return h
        raise KeyError(f"no emulated host {which!r} in job {self.job}")

    def describe(self) -> str:
        rec = self._record()
        return (f"emulated cluster {rec.job}: {len(rec.hosts)} host(s) on {rec.subnet} "
                f"({rec.hosts[0].address} .. {rec.hosts[-1].address}), links "
                f"{format_rate(rec.rate_bps)} each way (tbf, no added delay), interface {rec.link}")

    def mpiexec_args(self) -> list[str]:
        """hydra options that start the ranks in the hosts (one rank per host in turn)."""
        rec = self._record(up=True)
        if not os.access(EXEC_SCRIPT, os.X_OK):
            raise EmulationUnavailable(f"{EXEC_SCRIPT} is missing or not executable (reinstall aiopdbp)")
        return ["-launcher", "ssh", "-launcher-exec", str(EXEC_SCRIPT), "-iface", rec.link,
                "-hosts", ",".join(h.address for h in rec.hosts)]

    def env(self) -> dict[str, str]:
        """Environment for mpiexec: the launcher's host table, and MPI on the links only.

        Without ``UCX_TLS=tcp,self`` UCX sees that the hosts share memory and
        uses it, bypassing the shaped links.
        """
        rec = self._record(up=True)
        assert self._tools is not None
        return {
            EMULATE_JOB: rec.job, EMULATE_LINK_BPS: str(rec.rate_bps or 0),
            EMULATE_HOSTS: " ".join(f"{h.address}={h.netns}" for h in rec.hosts),
            EMULATE_IP: self._tools.ip, EMULATE_UNSHARE: self._tools.unshare or "",
            "UCX_TLS": "tcp,self", "UCX_NET_DEVICES": rec.link,
            "FI_PROVIDER": "tcp", "FI_TCP_IFACE": rec.link,
        }

    def exec_argv(self, host: int | str | EmulatedHost, argv: Sequence[str]) -> list[str]:
        """``argv`` run inside ``host``'s network namespace."""
        assert self._tools is not None
        return [self._tools.ip, "netns", "exec", self.host(host).netns, *argv]

    def link_down(self, host: int | str | EmulatedHost) -> None:
        """Pull ``host``'s cable: its switch port goes down (the host sees NO-CARRIER)."""
        self._set_port(host, "down")

    def link_up(self, host: int | str | EmulatedHost) -> None:
        """Plug ``host``'s cable back in."""
        self._set_port(host, "up")

    def _set_port(self, host: int | str | EmulatedHost, how: str) -> None:
        assert self._tools is not None
        port = self.host(host).port
        _run([self._tools.ip, "-n", self._record(up=True).switch, "link", "set", "dev", port, how])

    def __enter__(self) -> EmulatedCluster:
        self.start()
        return self

    def __exit__(self, et: type[BaseException] | None, ev: BaseException | None,
                 tb: TracebackType | None) -> None:
        self.close()

    def start(self) -> None:
        """Create the namespaces, links and qdiscs; on any failure remove them and raise."""
        self._to(ClusterState.STARTING)
        try:
            self._tools = check_requirements()
            self._saved = _set_handlers(_SHIELDED, _raise_exit, only_default=True)
            cleanup(state_dir=self.state_dir, log=self._log, tools=self._tools)
            with _locked(self.state_dir):
                self._rec = self._allocate()
            self._build(self._rec)
            self._to(ClusterState.UP)
        except BaseException:
            self.close()
            raise

    def close(self) -> None:
        """Remove everything this job created; idempotent.

        Raises :class:`EmulateError` if something could not be removed (the
        state file then stays, so a later :func:`cleanup` retries).
        """
        if self._state is ClusterState.CLOSED:
            return
        if self._state is ClusterState.NEW:
            self._to(ClusterState.CLOSED)
            return
        self._to(ClusterState.CLOSING)
        errors: list[str] = []
        quiet = _set_handlers([signal.SIGINT, *self._saved], signal.SIG_IGN, only_default=False)
        try:
            if self._rec is not None and self._tools is not None:
                errors = _teardown(self._rec, self._tools.ip)
                if not errors:
                    (self.state_dir / f"{self._rec.job}.json").unlink(missing_ok=True)
        finally:
            _restore(quiet)
            _restore(self._saved)
            self._to(ClusterState.CLOSED)
        if errors:
            raise EmulateError("emulated cluster teardown incomplete: " + "; ".join(errors))

    def _allocate(self) -> _Record:
        """Pick a job id and a /24 nobody uses; reserve them in a state file (lock held)."""
        assert self._tools is not None
        ip = self._tools.ip
        records = [r for _, r in _records(self.state_dir)]
        links = {d.get("ifname") for d in json.loads(_run([ip, "-j", "link", "show"]) or "[]")}
        netns = {line.split()[0] for line in _run([ip, "netns", "list"]).splitlines() if line.strip()}
        job = ""
        for _ in range(100):
            job = secrets.token_hex(3)
            if (f"apb-{job}" not in links and job not in {r.job for r in records}
                    and not any(n.startswith(f"aiopdbp-{job}-") for n in netns)):
                break
        else:
            raise EmulateError("could not find a free job id")
        subnet = self._free_subnet(ip, {r.subnet for r in records})
        addrs = list(subnet.hosts())  # [gateway, host 0, host 1, ...]
        rec = _Record(job=job, owner_pid=os.getpid(), owner_start=_proc_start(os.getpid()),
                      uid=os.getuid(), subnet=str(subnet), link=f"apb-{job}",
                      switch=f"aiopdbp-{job}-sw", rate_bps=self.rate_bps)
        rec.hosts = [EmulatedHost(i, f"aiopdbp-{job}-h{i}", str(addrs[i + 1]), f"p{i}")
                     for i in range(self._nhosts)]
        path = self.state_dir / f"{job}.json"
        os.close(os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644))
        path.with_suffix(".tmp").write_text(rec.dump())
        os.replace(path.with_suffix(".tmp"), path)
        return rec

    @staticmethod
    def _free_subnet(ip: str, taken: set[str]) -> ipaddress.IPv4Network:
        used = [ipaddress.IPv4Network(s) for s in taken]
        for cmd in ([ip, "-j", "-4", "route", "show", "table", "all"], [ip, "-j", "-4", "addr", "show"]):
            for entry in json.loads(_run(cmd) or "[]"):
                dsts = [entry.get("dst")] + [f"{a['local']}/{a['prefixlen']}"
                                             for a in entry.get("addr_info", [])]
                used += [ipaddress.IPv4Network(d, strict=False) for d in dsts
                         if d and d != "default" and d[0].isdigit()]
        cands = list(SUBNET_POOL.subnets(new_prefix=24))
        start = secrets.randbelow(len(cands))
        for net in cands[start:] + cands[:start]:
            if not any(net.overlaps(u) for u in used):
                return net
        raise EmulateError(f"no free /24 left in {SUBNET_POOL} for an emulated cluster")

    def _build(self, rec: _Record) -> None:
        assert self._tools is not None
        ip, tc = self._tools.ip, self._tools.tc
        sw, link = rec.switch, rec.link
        prefix = ipaddress.IPv4Network(rec.subnet).prefixlen
        _run([ip, "netns", "add", sw])
        _run([ip, "-n", sw, "link", "set", "dev", "lo", "up"])
        _run([ip, "-n", sw, "link", "add", "br0", "type", "bridge"])
        _run([ip, "-n", sw, "link", "set", "dev", "br0", "up"])
        _run([ip, "link", "add", link, "type", "veth", "peer", "name", "uplink", "netns", sw])
        _run([ip, "-n", sw, "link", "set", "dev", "uplink", "master", "br0", "up"])
        _run([ip, "addr", "add", f"{_gateway(rec)}/{prefix}", "dev", link])
        _run([ip, "link", "set", "dev", link, "up"])
        for h in rec.hosts:
            _run([ip, "netns", "add", h.netns])
            _run([ip, "-n", h.netns, "link", "set", "dev", "lo", "up"])
            _run([ip, "-n", sw, "link", "add", h.port, "type", "veth", "peer", "name", link,
                  "netns", h.netns])
            _run([ip, "-n", sw, "link", "set", "dev", h.port, "master", "br0", "up"])
            _run([ip, "-n", h.netns, "addr", "add", f"{h.address}/{prefix}", "dev", link])
            _run([ip, "-n", h.netns, "link", "set", "dev", link, "up"])
            if rec.rate_bps is not None:  # tbf shapes egress: one per direction
                qdisc = tbf_args(rec.rate_bps)
                _run([tc, "-n", sw, "qdisc", "add", "dev", h.port, "root", *qdisc])
                _run([tc, "-n", h.netns, "qdisc", "add", "dev", link, "root", *qdisc])


# ----------------------------------------------------------------- launch
@dataclass(frozen=True)
class EmulateConfig:
    """``aiopdbp launch --emulate`` options: link rate and host count (default: one per rank)."""

    link: str | int | None = "1gbit"
    hosts: int | None = None

    def __post_init__(self) -> None:
        parse_rate(self.link)  # fail early, with the message
        if self.hosts is not None and not 1 <= self.hosts <= MAX_HOSTS:
            raise ValueError(f"--hosts must be 1..{MAX_HOSTS}, not {self.hosts}")


def cleanup_main(log: Callable[[str], None] | None = None) -> int:
    """``aiopdbp launch --emulate --cleanup``: 0 done, 1 something remained, 2 cannot."""
    say = log or (lambda line: print(f"aiopdbp launch: {line}", file=sys.stderr))
    try:
        removed = cleanup(log=say)
    except EmulationUnavailable as exc:
        say(str(exc))
        return 2
    mine = [r for _, r in _records(STATE_DIR) if r.uid == os.getuid()]
    stuck = [r.job for r in mine if not r.owner_alive()]
    say(f"removed {len(removed)} leftover emulated cluster(s); running jobs left alone: "
        f"{len(mine) - len(stuck)}" + (f"; could not remove: {', '.join(stuck)}" if stuck else ""))
    return 1 if stuck else 0
