"""Medians of streams/s per variant and size over the runs of streams_ab.sh: python summarize_streams.py DIR [PREFIX]."""
import json, statistics, sys
from pathlib import Path

root, prefix = Path(sys.argv[1]), (sys.argv[2] if len(sys.argv) > 2 else "streams")
for v in ("old", "c16", "c8"):
    runs = sorted(root.glob(f"{prefix}-{v}[0-9]*/streams.json"))
    by: dict[int, list[float]] = {}
    msgs: dict[int, list[float]] = {}
    for p in runs:
        for r in json.loads(p.read_text())["rows"]:
            by.setdefault(r["size"], []).append(r["streams_per_s"])
            msgs.setdefault(r["size"], []).append(r["msgs_per_s"])
    for size in sorted(by):
        s = by[size]
        print(f"{v:4} {size:>8} streams/s median {statistics.median(s):8.0f} range {min(s):6.0f}-{max(s):6.0f}"
              f"  msgs/s median {statistics.median(msgs[size]):8.0f}  ({len(s)} runs)")
