import timeit, numpy as np
a = np.arange(8, dtype=np.uint8); u8 = np.dtype(np.uint8)
dt = np.dtype("u1", metadata={"aiopdbp": ("torch", "|u1")})
at = a.view(dt); mv = a.data
T = {
 "a.view(u8)": lambda: a.view(u8),
 "at.view(u8)": lambda: at.view(u8),
 "a.view(dt)": lambda: a.view(dt),
 "at.view(dt)": lambda: at.view(dt),
 "frombuffer u8": lambda: np.frombuffer(mv, u8, 8, 0),
 "frombuffer dt": lambda: np.frombuffer(mv, dt, 8, 0),
 "a.copy": lambda: a.copy(),
 "at.copy": lambda: at.copy(),
 "a.data": lambda: a.data,
 "at.data": lambda: at.data,
 "asc(a).reshape(-1).view(u8)": lambda: np.ascontiguousarray(a).reshape(-1).view(u8),
 "asc(at).reshape(-1).view(u8)": lambda: np.ascontiguousarray(at).reshape(-1).view(u8),
}
res = {k: [] for k in T}
for r in range(7):
  for k, f in T.items():
    res[k].append(min(timeit.repeat(f, number=5000, repeat=3))/5000*1e6)
for k, v in res.items(): v.sort(); print(f"{k:30s} min {v[0]:6.3f} med {v[3]:6.3f} us")
