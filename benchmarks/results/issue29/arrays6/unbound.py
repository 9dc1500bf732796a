"""Bound attribute reads against torch.Tensor's descriptors fetched once (ns per call, thread CPU, min of 9 x 20000)."""
import time, timeit, torch
t = torch.zeros(1, dtype=torch.float64); T = torch.Tensor
neg = T.is_neg; cont = T.is_contiguous; ptr = T.data_ptr; rg = T.requires_grad.__get__; shp = T.shape.__get__
g = dict(globals())
for a, b in [("t.is_neg()", "neg(t)"), ("t.is_contiguous()", "cont(t)"), ("t.data_ptr()", "ptr(t)"),
             ("t.requires_grad", "rg(t)"), ("t.shape", "shp(t)")]:
    r = [min(timeit.Timer(s, globals=g, timer=time.thread_time).repeat(9, 20000)) / 20000 * 1e9 for s in (a, b)]
    print(f"{a:20s} {r[0]:6.1f}   {b:10s} {r[1]:6.1f}")
