"""Run a script with RemoteConfig.gp_window defaulting to $GPW bytes (both ranks):

    GPW=8388608 aiopdbp launch -n 2 benchmarks/results/large6/gp_window.py benchmarks/large_hops.py --sizes 1M ...
"""
import os, runpy, sys, dataclasses
from aiopdbp.hosts import remote
W = int(os.environ["GPW"])
init = remote.RemoteConfig.__init__
names = [f.name for f in dataclasses.fields(remote.RemoteConfig)]
d = list(init.__defaults__)
# defaults align with the last len(d) fields
i = names.index("gp_window") - (len(names) - len(d))
assert d[i] == 1 << 20, d[i]
d[i] = W
init.__defaults__ = tuple(d)
assert remote.RemoteConfig().gp_window == W
sys.argv = [sys.argv[1]] + sys.argv[2:]
runpy.run_path(sys.argv[0], run_name="__main__")
