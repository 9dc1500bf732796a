"""The emulated cluster (``aiopdbp.launch.emulate``, ``aiopdbp launch --emulate``).

Rate parsing and the privilege/tool checks run everywhere.  Everything that
creates namespaces needs root, ``ip`` and ``tc`` and is skipped, with the
reason, where they are missing.  The state of the machine is read with
``ip``/``tc`` themselves, never from the module's own bookkeeping.  Every
subprocess runs in its own session and is killed with its group on timeout.
"""

from __future__ import annotations

import errno
import json
import os
import re
import shutil
import signal
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.mpirun import REPO_ROOT, requires_mpi

from aiopdbp.launch.emulate import (
    STATE_DIR,
    ClusterState,
    EmulateConfig,
    EmulateError,
    EmulatedCluster,
    EmulationUnavailable,
    check_requirements,
    cleanup,
    format_rate,
    parse_rate,
    requirements_problems,
)

_PROBLEMS = requirements_problems()
requires_emulation = pytest.mark.skipif(
    bool(_PROBLEMS), reason="emulated cluster unavailable: " + "; ".join(_PROBLEMS))
_LAUNCHER_VARS = ("AIOPDBP_TRANSPORT", "PMI_FD", "PMI_RANK", "PMI_SIZE", "PMI_PORT",
                  "MPI_LOCALNRANKS", "MPI_LOCALRANKID")


# ----------------------------------------------------------------- helpers
def _env() -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k not in _LAUNCHER_VARS}
    env["PYTHONPATH"] = os.pathsep.join([str(REPO_ROOT), *filter(None, [env.get("PYTHONPATH")])])
    env["PYTHONUNBUFFERED"] = "1"
    return env


def _run(cmd: list[str], timeout: float) -> subprocess.CompletedProcess[str]:
    """Run ``cmd`` in its own session; on timeout kill the group and fail."""
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            env=_env(), cwd=str(REPO_ROOT), start_new_session=True)
    try:
        out, err = proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        _killpg(proc)
        out, err = proc.communicate()
        pytest.fail(f"{cmd} timed out\n--- stdout ---\n{out}\n--- stderr ---\n{err}", pytrace=False)
    return subprocess.CompletedProcess(cmd, proc.returncode, out, err)


def _killpg(proc: subprocess.Popen[str]) -> None:
    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except ProcessLookupError:
        pass


def _sh(*argv: str) -> str:
    return subprocess.run(argv, capture_output=True, text=True, check=True, timeout=30).stdout


def _netns() -> set[str]:
    return {line.split()[0] for line in _sh("ip", "netns", "list").splitlines() if line.strip()}


def _root_links() -> set[str]:
    return {d["ifname"] for d in json.loads(_sh("ip", "-j", "link", "show"))}


def _qdisc(netns: str, dev: str) -> str:
    return _sh("tc", "-n", netns, "qdisc", "show", "dev", dev)


def _objects(c: EmulatedCluster) -> tuple[set[str], str]:
    return {h.netns for h in c.hosts} | {c.switch_netns}, c.link


# The owner of a cluster in a child process: prints its objects, then blocks
# on stdin until it is killed (or stdin closes).
_OWNER = """
import json, sys
from pathlib import Path
from aiopdbp.launch.emulate import EmulatedCluster
with EmulatedCluster(2, "1gbit", state_dir=Path(sys.argv[1])) as c:
    print(json.dumps({"job": c.job, "link": c.link,
                      "netns": [h.netns for h in c.hosts] + [c.switch_netns]}), flush=True)
    sys.stdin.read()
"""


@pytest.fixture
def owner(tmp_path: Path) -> Iterator[tuple[subprocess.Popen[str], dict[str, object], Path]]:
    """A child process that owns a 2-host cluster (state in ``tmp_path``)."""
    proc = subprocess.Popen([sys.executable, "-c", _OWNER, str(tmp_path)], stdin=subprocess.PIPE,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=_env(),
                            start_new_session=True)
    assert proc.stdout is not None
    line = proc.stdout.readline()   # the cluster is up once this line arrives
    if not line:
        _killpg(proc)
        pytest.fail(f"owner failed: {proc.communicate()[1]}")
    try:
        yield proc, json.loads(line), tmp_path
    finally:
        _killpg(proc)
        proc.communicate()
        cleanup(state_dir=tmp_path)


# ------------------------------------------------------------ no privilege
@pytest.mark.parametrize("text, bits", [
    ("1gbit", 10**9), ("100mbit", 10**8), ("10gbit", 10**10), ("1.5gbit", 1_500_000_000),
    ("64kbit", 64_000), (" 1GBit ", 10**9), ("2500000", 2_500_000), (5_000_000, 5_000_000),
])
def test_parse_rate_reads_tc_units(text: str | int, bits: int) -> None:
    assert parse_rate(text) == bits


@pytest.mark.parametrize("text", ["none", "off", "NONE", None])
def test_parse_rate_none_means_unshaped(text: str | None) -> None:
    assert parse_rate(text) is None


@pytest.mark.parametrize("text", ["1gbyte", "fast", "", "-1gbit", "0", "1bit", "1gbps", "2tbit"])
def test_parse_rate_rejects_bad_rates(text: str) -> None:
    with pytest.raises(ValueError, match="rate"):
        parse_rate(text)


@pytest.mark.parametrize("text", ["1gbit", "100mbit", "10gbit", "1.5gbit", "64kbit", "none"])
def test_format_rate_round_trips(text: str) -> None:
    assert format_rate(parse_rate(text)) == text


def test_requirements_without_capabilities_ask_for_root() -> None:
    problems = requirements_problems(cap_eff=0, which=lambda name: f"/usr/sbin/{name}")
    assert len(problems) == 1
    assert "root" in problems[0] and "CAP_NET_ADMIN" in problems[0] and "CAP_SYS_ADMIN" in problems[0]
    with pytest.raises(EmulationUnavailable, match="CAP_NET_ADMIN"):
        check_requirements(cap_eff=0, which=lambda name: f"/usr/sbin/{name}")


def test_requirements_without_tools_name_them() -> None:
    problems = requirements_problems(cap_eff=-1, which=lambda name: None)
    assert [p.split("`")[1] for p in problems] == ["ip", "tc"]
    assert all("iproute2" in p for p in problems)


def test_requirements_with_everything_are_met() -> None:
    assert requirements_problems(cap_eff=-1, which=lambda name: f"/usr/sbin/{name}") == []


def test_emulate_config_rejects_bad_hosts() -> None:
    with pytest.raises(ValueError, match="--hosts"):
        EmulateConfig(hosts=0)


def test_cluster_rejects_zero_hosts() -> None:
    with pytest.raises(ValueError, match="hosts"):
        EmulatedCluster(0)


def test_launch_link_without_emulate_is_usage_error() -> None:
    r = _run([sys.executable, "-m", "aiopdbp", "launch", "-n", "2", "--link", "1gbit", "x.py"], 60)
    assert r.returncode == 2
    assert "--link needs --emulate" in r.stderr


def test_launch_bad_link_rate_is_usage_error() -> None:
    r = _run([sys.executable, "-m", "aiopdbp", "launch", "-n", "2", "--emulate", "--link", "fast",
              "x.py"], 60)
    assert r.returncode == 2
    assert "bad link rate 'fast'" in r.stderr


@pytest.mark.skipif(os.geteuid() != 0 or shutil.which("setpriv") is None,
                    reason="needs root and setpriv to drop capabilities")
def test_launch_emulate_without_capability_exits_2() -> None:
    before = _netns()
    r = _run(["setpriv", "--bounding-set", "-net_admin,-sys_admin", "--", sys.executable, "-m",
              "aiopdbp", "launch", "-n", "2", "--emulate", "examples/hello_cluster.py"], 60)
    assert r.returncode == 2, r.stderr
    assert "needs root" in r.stderr and "CAP_NET_ADMIN" in r.stderr
    assert "hello_cluster" not in r.stdout
    assert not {n for n in _netns() - before if n.startswith("aiopdbp-")}


# --------------------------------------------------------------- with root
@requires_emulation
def test_cluster_objects_exist_while_up_and_are_gone_after() -> None:
    with EmulatedCluster(3, "1gbit") as c:
        netns, link = _objects(c)
        assert c.state is ClusterState.UP
        assert netns <= _netns() and link in _root_links()
        assert f"inet {c.gateway}/24" in _sh("ip", "addr", "show", "dev", link)
        for h in c.hosts:
            assert f"inet {h.address}/24" in _sh("ip", "-n", h.netns, "addr", "show", "dev", link)
        assert c.state_file.exists()
        state_file = c.state_file
    assert c.state is ClusterState.CLOSED
    assert not netns & _netns()
    assert link not in _root_links()
    assert link not in _sh("tc", "qdisc", "show")
    assert not state_file.exists()


@requires_emulation
def test_rate_limit_shapes_both_directions() -> None:
    with EmulatedCluster(2, "100mbit") as c:
        for h in c.hosts:
            down = _qdisc(c.switch_netns, h.port)      # switch -> host
            up = _qdisc(h.netns, c.link)               # host -> switch
            for out in (down, up):
                assert re.search(r"qdisc tbf \S+ root .*rate 100Mbit", out), out


@requires_emulation
def test_link_none_adds_no_qdisc() -> None:
    with EmulatedCluster(2, "none") as c:
        for h in c.hosts:
            assert "tbf" not in _qdisc(c.switch_netns, h.port) + _qdisc(h.netns, c.link)


@requires_emulation
def test_hosts_reach_each_other_and_nothing_else() -> None:
    server = ("import socket, sys; s = socket.create_server((sys.argv[1], 0)); "
              "print(s.getsockname()[1], flush=True); c, _ = s.accept(); print(c.recv(5).decode())")
    with EmulatedCluster(2, "1gbit") as c:
        h0, h1 = c.hosts
        routes = _sh("ip", "-n", h0.netns, "-4", "route", "show", "table", "all")
        assert "default" not in routes
        proc = subprocess.Popen(c.exec_argv(h1, [sys.executable, "-c", server, h1.address]),
                                stdout=subprocess.PIPE, text=True, start_new_session=True)
        try:
            assert proc.stdout is not None
            port = proc.stdout.readline().strip()
            client = (f"import socket; socket.create_connection(('{h1.address}', {port}), 10)"
                      ".sendall(b'hello')")
            subprocess.run(c.exec_argv(h0, [sys.executable, "-c", client]), check=True, timeout=30)
            assert proc.communicate(timeout=30)[0].strip() == "hello"
        finally:
            _killpg(proc)
        outside = ("import socket\ntry: socket.create_connection(('203.0.113.1', 80), 5)\n"
                   "except OSError as e: print(e.errno)")
        r = subprocess.run(c.exec_argv(h0, [sys.executable, "-c", outside]), capture_output=True,
                           text=True, timeout=30)
        assert r.stdout.strip() == str(errno.ENETUNREACH), r  # no route off the machine


@requires_emulation
def test_two_clusters_do_not_collide() -> None:
    with EmulatedCluster(2, "1gbit") as a, EmulatedCluster(2, "100mbit") as b:
        assert a.job != b.job and a.link != b.link and a.subnet != b.subnet
        a_objs, b_objs = _objects(a), _objects(b)
        assert not a_objs[0] & b_objs[0]
        a.close()
        assert b_objs[0] <= _netns() and b.link in _root_links()
        assert not a_objs[0] & _netns() and a.link not in _root_links()
        assert "rate 100Mbit" in _qdisc(b.switch_netns, b.hosts[0].port)


@requires_emulation
def test_exception_inside_removes_cluster() -> None:
    with pytest.raises(RuntimeError, match="boom"):
        with EmulatedCluster(2, "1gbit") as c:
            netns, link = _objects(c)
            raise RuntimeError("boom")
    assert not netns & _netns() and link not in _root_links()


@requires_emulation
def test_sigterm_to_owner_removes_its_cluster(
        owner: tuple[subprocess.Popen[str], dict[str, object], Path]) -> None:
    proc, objs, state_dir = owner
    assert set(objs["netns"]) <= _netns()  # type: ignore[arg-type]
    proc.send_signal(signal.SIGTERM)
    assert proc.wait(30) == 128 + signal.SIGTERM
    assert not set(objs["netns"]) & _netns()  # type: ignore[arg-type]
    assert objs["link"] not in _root_links()
    assert not list(state_dir.glob("*.json"))


@requires_emulation
def test_cleanup_after_sigkilled_owner_removes_only_its_job(
        owner: tuple[subprocess.Popen[str], dict[str, object], Path]) -> None:
    proc, objs, state_dir = owner
    with EmulatedCluster(2, "1gbit", state_dir=state_dir) as live:
        proc.kill()
        proc.wait(30)
        assert set(objs["netns"]) <= _netns()    # type: ignore[arg-type]  # left behind
        assert cleanup(state_dir=state_dir) == [objs["job"]]
        assert not set(objs["netns"]) & _netns()  # type: ignore[arg-type]
        assert objs["link"] not in _root_links()
        live_netns, live_link = _objects(live)
        assert live_netns <= _netns() and live_link in _root_links()
        assert live.state_file.exists()
        assert cleanup(state_dir=state_dir) == []  # a live owner's job is never removed


@requires_emulation
def test_link_down_cuts_host_and_link_up_restores() -> None:
    with EmulatedCluster(2, "1gbit") as c:
        h1 = c.host(1)

        def carrier() -> bool:
            return "NO-CARRIER" not in _sh("ip", "-n", h1.netns, "link", "show", "dev", c.link)

        def probe() -> str:  # "refused": h1 answered (nothing listens on port 9)
            code = (f"import socket\ntry: socket.create_connection(('{h1.address}', 9), 1)\n"
                    "except ConnectionRefusedError: print('refused')\n"
                    "except OSError as e: print(type(e).__name__)")
            return subprocess.run(c.exec_argv(0, [sys.executable, "-c", code]), capture_output=True,
                                  text=True, timeout=30).stdout.strip()

        assert carrier() and probe() == "refused"
        c.link_down(h1.address)
        assert "state DOWN" in _sh("ip", "-n", c.switch_netns, "link", "show", "dev", h1.port)
        assert not carrier()
        assert probe() != "refused"
        assert "state UP" in _sh("ip", "-n", c.switch_netns, "link", "show", "dev", c.host(0).port)
        c.link_up(1)
        assert carrier() and probe() == "refused"


def test_closed_cluster_cannot_restart() -> None:
    c = EmulatedCluster(1, "none")
    c.close()
    assert c.state is ClusterState.CLOSED
    with pytest.raises(EmulateError, match="closed -> starting"):
        c.start()


@requires_emulation
@requires_mpi
@pytest.mark.timeout(180)
def test_launch_emulate_runs_hello_cluster_on_3_hosts() -> None:
    before = _netns()
    r = _run([sys.executable, "-m", "aiopdbp", "launch", "-n", "3", "--emulate", "--link", "1gbit",
              "examples/hello_cluster.py"], timeout=150)
    assert r.returncode == 0, r.stdout + r.stderr
    assert "streams to hello-0: 3 x 4000 bytes, all correct" in r.stdout
    assert "barrier: all 3 GPs passed" in r.stdout
    m = re.search(r"emulated cluster (\w+): 3 host\(s\)", r.stderr)
    assert m, r.stderr
    job = m.group(1)
    assert not {n for n in _netns() - before if job in n}
    assert f"apb-{job}" not in _root_links()
    assert job not in _sh("tc", "qdisc", "show")
    assert not list(STATE_DIR.glob(f"{job}.*"))


@requires_emulation
def test_launch_emulate_cleanup_exits_0() -> None:
    r = _run([sys.executable, "-m", "aiopdbp", "launch", "--emulate", "--cleanup"], 60)
    assert r.returncode == 0, r.stderr
    assert "leftover emulated cluster" in r.stderr


@requires_emulation
@requires_mpi
@pytest.mark.timeout(180)
def test_link_down_mid_stream_gives_host_lost_error_naming_rank_and_host(tmp_path: Path) -> None:
    # benchmarks/link_down.py: 3 hosts stream N-to-N, host 2's cable is pulled,
    # hosts 0 and 1 must get HostLostError for rank 2 from node.host_lost() and
    # from their pending send_stream to it, and their reads of its streams end
    # with StreamError saying why (how fast is the benchmark's figure)
    out = tmp_path / "ld.json"
    r = _run([sys.executable, "benchmarks/link_down.py", "--hosts", "3", "--host-timeout", "2",
              "--repeat", "1", "--link", "100mbit", "--json", str(out)], timeout=150)
    assert r.returncode == 0, r.stdout + r.stderr
    rec = json.loads(out.read_text())["records"][0]
    assert rec["host_timeout"] == 2 and rec["victim"] == 2
    assert [s["rank"] for s in rec["survivors"]] == [0, 1]
    for s in rec["survivors"]:
        assert s["lost_rank"] == 2 and s["error"] == "HostLostError", s
        assert f"rank 2 (host '{rec['victim_host']}')" in s["message"], s
        failed = {f["where"]: f for f in s["failed"]}
        assert failed["send_stream to g2"]["type"] == "HostLostError", s   # its pending send
        assert failed["send_stream to g2"]["origin_rank"] == 2, s
        cut = failed["stream from g2"]                                     # its pending read
        assert cut["type"] == "StreamError" and "rank 2 (host" in cut["message"], s
        silence = float(re.search(r"not been heard of for ([\d.]+) s", s["message"]).group(1))
        assert silence >= 2.0, s   # declared only after a silence of host_timeout
    assert rec["victim_host"] == f"aiopdbp-{rec['job']}-h2"
    assert not {n for n in _netns() if rec["job"] in n}
    assert f"apb-{rec['job']}" not in _root_links()
    assert not list(STATE_DIR.glob(f"{rec['job']}.*"))
