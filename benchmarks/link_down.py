"""Liveness over the emulated network: pull one host's cable mid-stream and
time how long the other hosts take to get ``HostLostError`` (needs root).

    sudo .venv/bin/python benchmarks/link_down.py                      # host_timeout 2 s and default, 3 repeats
    sudo .venv/bin/python benchmarks/link_down.py --host-timeout 2 --repeat 5 --json out.json
    # options: --hosts 3  --victim 2  --link 1gbit  --chunk 64K  --host-timeout T (repeatable; 'default')

One repeat: a fresh emulated cluster of ``--hosts`` hosts (one rank each,
:class:`aiopdbp.launch.emulate.EmulatedCluster`); every rank opens a node with the
given ``host_timeout`` and streams to every other rank without end
(``send_stream`` of ``--chunk``-byte segments: n(n-1) streams, the paper's
N-to-N).  Once every rank has received from every peer, this process sets
the victim's switch port down (``cluster.link_down(victim)``: ``ip link set
<port> down`` in the switch namespace, the host sees NO-CARRIER) and notes the
time.  Each surviving rank records, on the same clock (``CLOCK_MONOTONIC``
is one per machine, and the emulated hosts are namespaces of this machine):

* ``lost``: ``await node.host_lost()`` returned -- rank, ``HostLostError``;
* ``failed``: each of its pending awaits that raised (the ``send_stream`` to
  the victim, the iteration of the victim's stream to it), when and with what.

*Detection time* = the survivor's ``lost`` time minus the moment the
``ip link set ... down`` command returned (it takes a few ms; its duration
is printed).  The heartbeat declares a host lost ``timeout`` to ``timeout +
tick`` s after it was last heard of (interval ``min(1, timeout / 10)``,
tick ``min(interval / 4, 0.25)``; see :mod:`aiopdbp.hosts.liveness`); the last beat
came up to an interval before the cable was pulled, so the expected window is
``timeout - interval .. timeout + tick``.  The table
gives the median over survivors and repeats, with min and max.  The link is
plugged back in once the survivors have reported, so the job's abort
(``MPI_Abort`` by the survivors) reaches every host and the run ends.

The ranks run this same file with ``--rank-side``; they write their events
as JSON lines to a file (the hosts share this machine's file system), which
this process reads -- output through ``mpiexec`` would need the downed link.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

_HERE = Path(__file__).resolve().parent
if str(_HERE.parent) not in sys.path:  # run as a script from a checkout
    sys.path.insert(0, str(_HERE.parent))

import aiopdbp  # noqa: E402
from aiopdbp.bench.plan import parse_size  # noqa: E402

DEFAULT = "default"


# ================================================================ rank side
class Events:
    """This rank's events, appended as JSON lines (one ``write`` each)."""

    def __init__(self, path: str, rank: int) -> None:
        self.path, self.rank = path, rank

    def __call__(self, event: str, **fields: Any) -> None:
        line = json.dumps({"rank": self.rank, "event": event, "t": time.monotonic(), **fields}) + "\n"
        fd = os.open(self.path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
        try:
            os.write(fd, line.encode())
        finally:
            os.close(fd)


def _describe(exc: BaseException) -> dict[str, Any]:
    """The exception and the first HostLostError in its cause chain."""
    lost = exc
    while lost is not None and not isinstance(lost, aiopdbp.HostLostError):
        lost = lost.__cause__ or lost.__context__  # type: ignore[assignment]
    out: dict[str, Any] = {"type": type(exc).__name__, "message": str(exc)[:300]}
    if lost is not None:
        out["host_lost"] = {"message": str(lost), "origin_rank": getattr(lost, "origin_rank", None)}
    return out


async def rank_side(ns: argparse.Namespace) -> None:
    from aiopdbp.hosts.remote import RemoteConfig

    timeout = None if ns.host_timeout == DEFAULT else float(ns.host_timeout)
    # lost_grace: every survivor gets to see the loss before one of them aborts the job
    async with aiopdbp.open_node(host_timeout=timeout,
                                 remote=RemoteConfig(lost_grace=ns.lost_grace)) as node:
        ev = Events(ns.events, node.rank)
        peers = [r for r in range(node.size) if r != node.rank]
        chunk = bytes(range(256)) * (ns.chunk // 256) + bytes(ns.chunk % 256)
        got = dict.fromkeys(peers, 0)
        ready = asyncio.Event()
        def fail(where: str, exc: BaseException) -> None:
            ev("failed", where=where, **_describe(exc))

        async with node.process(f"g{node.rank}") as gp:
            for r in peers:
                await node.lookup(f"g{r}")
            ev("host_timeout", value=node.host_timeout)

            def forever() -> Any:
                while True:
                    yield chunk

            async def send(peer: int) -> None:
                try:
                    await gp.send_stream(f"g{peer}", forever(), segment_size=ns.chunk)
                except Exception as exc:
                    fail(f"send_stream to g{peer}", exc)

            opened: list[str] = []

            async def receive() -> None:
                try:
                    while True:
                        stream = await gp.recv()
                        opened.append(stream.source)
                        src = int(stream.source[1:])
                        asyncio.get_running_loop().create_task(read(src, stream))
                except Exception as exc:
                    fail("recv", exc)

            async def read(src: int, stream: Any) -> None:
                try:
                    async for seg in stream:
                        got[src] += len(seg)
                        if not ready.is_set() and min(got.values()) >= 4 * ns.chunk:
                            ready.set()
                            ev("streaming", got=dict(got))
                except Exception as exc:
                    fail(f"stream from g{src}", exc)

            async def progress() -> None:  # tells a controller that waits in vain why
                while not ready.is_set():
                    await asyncio.sleep(5)
                    if not ready.is_set():
                        st = node.stats()
                        ev("progress", got=dict(got), streams_opened=list(opened),
                           tasks=[t.get_name() + (":done" if t.done() else "") for t in tasks],
                           stats={k: str(getattr(st, k)) for k in (
                               "routed", "dropped", "parked", "pipes_in_use", "streams_in",
                               "streams_out", "credit_owed", "received", "links")})

            loop = asyncio.get_running_loop()
            tasks = [loop.create_task(send(p), name=f"send-g{p}") for p in peers]
            tasks += [loop.create_task(receive(), name="recv"), loop.create_task(progress())]
            rank, err = await node.host_lost()
            ev("lost", lost_rank=rank, liveness={k: v for k, v in node.stats().liveness.items()
                                                 if k in ("stalls", "max_stall_s", "lost")},
               **_describe(err))
            await asyncio.sleep(120)  # aiopdbp.run aborts the job lost_grace (1 s) later
            ev("not_aborted")


# =============================================================== controller
def _read_events(path: Path) -> list[dict[str, Any]]:
    try:
        text = path.read_text()
    except FileNotFoundError:
        return []
    return [json.loads(ln) for ln in text.splitlines() if ln.strip()]


def _wait_for(path: Path, done: Any, timeout: float, job: threading.Thread, what: str,
              log: Path) -> list[dict[str, Any]]:
    deadline = time.monotonic() + timeout
    while True:
        evs = _read_events(path)
        if done(evs):
            return evs
        if time.monotonic() > deadline or not job.is_alive():
            why = "the job ended" if not job.is_alive() else f"{timeout:g} s passed"
            raise RuntimeError(f"{why} before {what}; events: {evs}\n--- job output (tail) ---\n"
                               + log.read_text(errors="replace")[-3000:])
        time.sleep(0.01)


def run_once(hosts: int, victim: int, host_timeout: str, link: str, chunk: int,
             lost_grace: float = 5.0) -> dict[str, Any]:
    """One repeat (see the module doc); returns what happened."""
    from aiopdbp.launch.emulate import EmulatedCluster
    from aiopdbp.launch.launcher import launch_command, launch_env, run_job

    tmp = Path(tempfile.mkdtemp(prefix="aiopdbp-linkdown-"))
    events = tmp / "events.jsonl"
    out_log = tmp / "job.log"
    limit = (30.0 if host_timeout == DEFAULT else float(host_timeout)) * 3 + 60
    survivors = {r for r in range(hosts) if r != victim}
    result: dict[str, Any] = {"hosts": hosts, "victim": victim, "host_timeout_arg": host_timeout,
                              "link": link}
    try:
        with EmulatedCluster(hosts, link) as cluster:
            result["job"] = cluster.job
            result["victim_host"] = cluster.host(victim).netns
            argv = [str(Path(__file__).resolve()), "--rank-side", "--events", str(events),
                    "--host-timeout", host_timeout, "--chunk", str(chunk),
                    "--lost-grace", str(lost_grace)]
            cmd = launch_command(hosts, argv, mpiexec_args=cluster.mpiexec_args())
            env = launch_env(extra_env={"AIOPDBP_LAUNCHER": "1", **cluster.env()})
            rc: list[int] = []
            with open(out_log, "w") as f:
                job = threading.Thread(target=lambda: rc.append(run_job(
                    cmd, env, timeout=limit + 30, stdout=f, stderr=subprocess.STDOUT,
                    say=lambda line: None)), daemon=True)
                job.start()
                try:
                    _wait_for(events, lambda e: len({x["rank"] for x in e
                                                     if x["event"] == "streaming"}) == hosts,
                              60, job, "every rank was streaming", out_log)
                    t0 = time.monotonic()
                    cluster.link_down(victim)
                    t_down = time.monotonic()
                    result["ip_command_s"] = t_down - t0
                    try:
                        _wait_for(events, lambda e: survivors <= {x["rank"] for x in e
                                                                  if x["event"] == "lost"}, limit, job,
                                  "every survivor got HostLostError", out_log)
                    except RuntimeError as exc:  # recorded below: a survivor without "lost"
                        result["incomplete"] = str(exc)[:3000]
                    cluster.link_up(victim)  # the survivors' MPI_Abort must reach the victim's proxy
                    job.join(60)
                finally:
                    f.flush()
            result["job_exit"] = rc[0] if rc else None
            result["job_output_tail"] = out_log.read_text(errors="replace")[-3000:]
        evs = _read_events(events)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    result["events"] = evs
    per: list[dict[str, Any]] = []
    for r in sorted(survivors):
        lost = next((x for x in evs if x["rank"] == r and x["event"] == "lost"), None)
        fails = [x for x in evs if x["rank"] == r and x["event"] == "failed"]
        fail = fails[0] if fails else None
        if lost is None:
            per.append({"rank": r, "detect_s": None, "error": None, "message": "no HostLostError "
                        "before the job ended", "first_failed": fail,
                        "first_failed_s": fail["t"] - t_down if fail else None})
            continue
        per.append({"rank": r, "detect_s": lost["t"] - t_down, "lost_rank": lost["lost_rank"],
                    "error": lost.get("type"), "message": lost.get("message"),
                    "liveness": lost.get("liveness"),
                    "first_failed_s": fail["t"] - t_down if fail else None,
                    "first_failed": fail,
                    "failed": [{"where": x["where"], "type": x["type"], "after_s": x["t"] - t_down,
                                "message": x["message"],
                                "origin_rank": (x.get("host_lost") or {}).get("origin_rank")}
                               for x in fails]})
    result["survivors"] = per
    result["host_timeout"] = next((x["value"] for x in evs if x["event"] == "host_timeout"), None)
    return result


def _fmt(v: float | None) -> str:
    return "-" if v is None else f"{v:.2f}"


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--rank-side", action="store_true", help=argparse.SUPPRESS)
    p.add_argument("--events", default="", help=argparse.SUPPRESS)
    p.add_argument("--host-timeout", action="append", default=None,
                   help="liveness timeout of the nodes in s, or 'default' (the node's: the name "
                   "timeout, 30 s); repeat the option to measure several (default: 2 and default)")
    p.add_argument("--hosts", type=int, default=3, help="emulated hosts, one rank each (3)")
    p.add_argument("--victim", type=int, default=None, help="rank whose link goes down (the last)")
    p.add_argument("--link", default="1gbit", help="emulated link rate (1gbit)")
    p.add_argument("--chunk", type=parse_size, default=64 << 10, help="stream segment size (64K)")
    p.add_argument("--repeat", type=int, default=3, help="repeats per host timeout (3)")
    p.add_argument("--lost-grace", type=float, default=5.0,
                   help="RemoteConfig.lost_grace of the ranks: from the first HostLostError to "
                   "the job's abort (5 s, so that every survivor detects; the library's is 1 s)")
    p.add_argument("--json", default="", help="write every repeat's record here")
    ns = p.parse_args(argv)
    if ns.rank_side:
        ns.host_timeout = (ns.host_timeout or [DEFAULT])[0]
        aiopdbp.run(rank_side(ns))
        return 0
    from aiopdbp.launch.emulate import EmulationUnavailable, requirements_problems

    problems = requirements_problems()
    if problems:
        print("link_down: cannot emulate a cluster here: " + "; ".join(problems), file=sys.stderr)
        return 2
    victim = ns.hosts - 1 if ns.victim is None else ns.victim
    if ns.hosts < 2 or not 0 <= victim < ns.hosts:
        p.error("--hosts >= 2 and 0 <= --victim < --hosts")
    timeouts = ns.host_timeout or ["2", DEFAULT]
    records: list[dict[str, Any]] = []
    table: list[tuple[str, ...]] = []
    for ht in timeouts:
        detect: list[float] = []
        first: list[float] = []
        missed = 0
        eff = None
        for rep in range(ns.repeat):
            try:
                rec = run_once(ns.hosts, victim, ht, ns.link, ns.chunk, ns.lost_grace)
            except (EmulationUnavailable, RuntimeError) as exc:
                print(f"link_down: host_timeout {ht}, repeat {rep + 1}: {exc}", file=sys.stderr)
                return 1
            records.append(rec)
            eff = rec["host_timeout"]
            for s in rec["survivors"]:
                if s["detect_s"] is None:
                    missed += 1
                    print(f"host_timeout {ht} repeat {rep + 1}: rank {s['rank']}: {s['message']}",
                          flush=True)
                    continue
                detect.append(s["detect_s"])
                if s["first_failed_s"] is not None:
                    first.append(s["first_failed_s"])
                print(f"host_timeout {ht} repeat {rep + 1}: rank {s['rank']} got {s['error']} "
                      f"after {s['detect_s']:.2f} s (own stalls {s['liveness']}): {s['message']}",
                      flush=True)
            print(f"  (ip link set down took {rec['ip_command_s'] * 1e3:.1f} ms; job exit "
                  f"{rec['job_exit']})", flush=True)
        interval = min(1.0, float(eff) / 10) if eff else 0.0
        if not detect:
            print(f"link_down: host_timeout {ht}: no survivor detected the loss", file=sys.stderr)
            return 1
        table.append((f"{eff:g}" if eff else "?", str(len(detect)), str(missed),
                      _fmt(statistics.median(detect)), _fmt(min(detect)), _fmt(max(detect)),
                      _fmt(statistics.median(first)) if first else "-",
                      f"{float(eff) - interval:.2f} .. {float(eff) + min(interval / 4, 0.25):.2f}"
                      if eff else "?"))
    head = ("host_timeout s", "samples", "undetected", "median detect s", "min", "max",
            "first await failed s", "model s")
    widths = [max(len(h), *(len(r[i]) for r in table)) for i, h in enumerate(head)]
    print(f"\nlink down -> HostLostError, {ns.hosts} emulated hosts ({ns.link}, tbf, no added delay), "
          f"victim rank {victim}, {ns.repeat} repeat(s), survivors x repeats samples:")
    for row in (head, tuple("-" * w for w in widths), *table):
        print("  ".join(c.rjust(w) for c, w in zip(row, widths)))
    if ns.json:
        from aiopdbp.bench.report import machine_info, write_json

        write_json(ns.json, {"machine": machine_info(), "records": records,
                             "table": [dict(zip(head, r)) for r in table]})
    return 0


if __name__ == "__main__":
    sys.exit(main())
