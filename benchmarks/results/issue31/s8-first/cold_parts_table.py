"""Join ``cold_parts.py``'s per-rank stamps into the parts of each round trip.

    python cold_parts_table.py OUTDIR [OUTDIR ...]

Per mode (cold / known / warm / idle), medians over the pairs (ms):
``rtt`` the round trip at rank 0; ``lookup`` send start -> the home's
``proc_reg`` applied at 0 (``home-in``: -> the home's name service saw the
lookup); ``send`` send start -> send returned; ``to d`` send returned -> d's
GP took the ping; ``d turn`` d took the ping -> d's send returned; ``back``
-> rank 0 took the pong.  Then the count phase's messages, per sending rank.
"""
from __future__ import annotations

import json
import statistics
import sys
from pathlib import Path
from typing import Any


def load(d: Path) -> dict[int, dict[str, Any]]:
    return {int(p.stem.split("-")[1]): json.loads(p.read_text()) for p in d.glob("rank-*.json")}


def parts(ranks: dict[int, dict[str, Any]]) -> list[dict[str, Any]]:
    r0 = ranks[0]
    rows = []
    for rec in r0["rounds"]:
        d, mode = rec["peer"], rec["mode"]
        name = f"cold-{d}"
        peer = [x for x in ranks[d]["rounds"] if x["mode"] == mode and x.get("j") == rec.get("j")]
        if not peer:
            continue
        p = peer[0]
        s0, s2, s5 = rec["s0"], rec["s2"], rec["s5"]
        row = {"peer": d, "mode": mode, "rtt": s5 - s0, "send": s2 - s0, "to_d": p["d1"] - s2,
               "d_turn": p["d2"] - p["d1"], "back": s5 - p["d2"], "lookup": None, "home_in": None,
               "home": r0["homes"][name], "lookup_s": rec.get("lookup_s")}
        ans = [s[1] for s in r0["stamps"] if s[0] == "table" and s[2] == "proc_reg" and s[4] == name
               and s0 <= s[1] <= s5]
        if ans:
            row["lookup"] = ans[0] - s0
        res = [s[1] for s in r0["stamps"] if s[0] == "resolved" and s[2] == name and s0 <= s[1] <= s5]
        row["resumed"] = res[0] - s0 if res and mode != "known" else None
        h = ranks.get(r0["homes"][name])
        if h is not None:
            hin = [s[1] for s in h["stamps"] if s[0] == "lookup_in" and s[3] == name and s[2] == 0
                   and s0 <= s[1] <= s5]
            if hin:
                row["home_in"] = hin[0] - s0
        rows.append(row)
    return rows


def ms(v: list[float]) -> str:
    v = [x for x in v if x is not None]
    return f"{statistics.median(v) * 1e3:7.2f}" if v else "      -"


def main() -> None:
    for arg in sys.argv[1:]:
        ranks = load(Path(arg))
        size = ranks[0]["size"]
        rows = parts(ranks)
        print(f"== {arg}: N={size}")
        print(f"{'mode':6s} {'n':>3s} {'rtt':>7s} {'lookup':>7s} {'home-in':>7s} {'resumed':>7s} {'send':>7s} {'to d':>7s} "
              f"{'d turn':>7s} {'back':>7s} {'lookup()':>8s}")
        for mode in ("count", "cold", "known", "warm", "idle"):
            sel = [r for r in rows if r["mode"] == mode]
            if not sel:
                continue
            print(f"{mode:6s} {len(sel):3d} " + " ".join(ms([r[k] for r in sel]) for k in
                  ("rtt", "lookup", "home_in", "resumed", "send", "to_d", "d_turn", "back")) + " " + ms([r["lookup_s"] for r in sel]))
        for r in rows:
            if r["mode"] in ("cold", "count"):
                f = lambda k: "-" if r[k] is None else f"{r[k] * 1e3:.2f}"
                print(f"   {r['mode']} peer {r['peer']} (home of its name {r['home']}): rtt {f('rtt')} lookup "
                      f"{f('lookup')} resumed {f('resumed')} home-in {f('home_in')} send {f('send')} to-d {f('to_d')} d-turn {f('d_turn')} back {f('back')}")
        print("count phase (one cold round trip 0 -> 2 -> 0, +1 s): messages sent, rank -> {host: {kind: n}}")
        total = 0
        for r in sorted(ranks):
            c = {h: k for h, k in ranks[r]["sent_count_phase"].items() if k}
            if c:
                print(f"   rank {r}: {c}")
                total += sum(n for k in c.values() for n in k.values())
        print(f"   total {total}; home of cold-2: {ranks[0]['homes']['cold-2']}, of cold-0: {ranks[0]['homes']['cold-0']}")


if __name__ == "__main__":
    main()
