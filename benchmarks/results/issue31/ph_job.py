"""scale_job rank with /proc/self/status recorded per phase (open, registered, pattern, end)."""
import atexit, json, os, sys
from pathlib import Path
import aiopdbp.bench.scale_job as sj

def status():
    d = {}
    for line in open("/proc/self/status"):
        k, _, v = line.partition(":")
        if k in ("VmRSS", "VmHWM", "RssAnon", "RssShmem"):
            d[k] = int(v.split()[0])
    return d
phases = {}
orig_reg = sj.registration_messages
def reg(sent):
    if "open" not in phases: phases["open"] = status()
    return orig_reg(sent)
sj.registration_messages = reg
orig_b = sj._barrier
async def barrier(inbox, rank, names, epoch):
    await orig_b(inbox, rank, names, epoch)
    phases[f"barrier{epoch}"] = status()
    phases["rank"] = rank; phases["size"] = len(names)
sj._barrier = barrier
def end():
    phases["end"] = status()
    Path(os.environ["TM_OUT"], f"ph-{phases.get('rank')}.json").write_text(json.dumps(phases))
atexit.register(end)
sys.exit(sj.main(sys.argv[1:]))
