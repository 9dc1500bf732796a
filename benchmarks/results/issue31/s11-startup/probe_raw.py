"""The raw program's start-up in phases (as probe_open.py): imports / init (mpi4py.MPI) / open (Barrier)."""
import os
if os.environ.get("CGMARK"):
    import ctypes
    _m = ctypes.CDLL(os.environ["CGMARK"]).mark
    _m.argtypes = [ctypes.c_char_p]
else:   # no callgrind: each phase's CPU (user, sys) and minor page faults, printed at the end
    import resource, sys, time
    _marks = []

    def _m(label: bytes) -> None:
        r = resource.getrusage(resource.RUSAGE_SELF)
        _marks.append((label.decode(), time.time(), r.ru_utime, r.ru_stime, r.ru_minflt))
        if label == (b"4-open" if "probe_raw" in __file__ else b"6-closed"):
            prev = (0, 0, 0, 0)
            for name, _, u, s, f in _marks:
                print(f"phase {name:13} user {u - prev[0]:.4f} sys {s - prev[1]:.4f} minflt {f - prev[2]}")
                prev = (u, s, f, 0)
_m(b"0-start")
import argparse, json, resource, time  # noqa: E401
from pathlib import Path  # noqa: F401
import numpy as np  # noqa: F401
_m(b"1-imports")
from mpi4py import MPI
_m(b"3-init")
MPI.COMM_WORLD.Barrier()
_m(b"4-open")
