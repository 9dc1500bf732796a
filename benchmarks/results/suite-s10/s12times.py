"""Append each test phase's duration to $S12_TIMES as it finishes (survives a killed run)."""
import json, os, time

_T0 = time.time()

def pytest_runtest_logreport(report):
    path = os.environ.get("S12_TIMES")
    if not path:
        return
    with open(path, "a") as f:
        f.write(json.dumps({"id": report.nodeid, "when": report.when, "dur": round(report.duration, 3),
                            "outcome": report.outcome, "t": round(time.time() - _T0, 1)}) + "\n")
