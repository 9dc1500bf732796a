"""Thread CPU per torch call on a small tensor's send and receive path (min of repeats, ns)."""
import sys, time, timeit
import numpy as np, torch
from aiopdbp import arrays
from aiopdbp.tensormem import cview, view

N = int(sys.argv[1]) if len(sys.argv) > 1 else 8
t = torch.zeros(N // 8, dtype=torch.float64)
a = np.zeros(N // 8)
arrays.host_array(t)  # the plan seen
plan = arrays._TORCH_PLANS[t.dtype]
st = torch.strided
storage = t.untyped_storage()
dl = a.__dlpack__
sub = torch.Tensor._make_subclass
E = torch.empty(0, dtype=torch.float64)
cases = {
    "pass (loop floor)": "None",
    "t.dtype": "t.dtype", "t.shape": "t.shape", "t.stride()": "t.stride()",
    "t.data_ptr()": "t.data_ptr()", "t.is_contiguous()": "t.is_contiguous()",
    "t.device": "t.device", "t.is_cpu": "t.is_cpu", "t.layout": "t.layout",
    "t.requires_grad": "t.requires_grad", "t.is_neg()": "t.is_neg()", "t.is_conj()": "t.is_conj()",
    "t.is_sparse": "t.is_sparse", "t.is_nested": "t.is_nested", "type(t)": "type(t)",
    "t.numpy()": "t.numpy()",
    "cview.tensor_array": "cview.tensor_array(t, plan.dtype, st, False)",
    "view.tensor_array": "view.tensor_array(t, plan.dtype, st, False)",
    "arrays.cpu_tensor_array": "arrays.cpu_tensor_array(t)",
    "arrays.host_array(ndarray)": "arrays.host_array(a)",
    "torch.from_numpy": "torch.from_numpy(a)",
    "torch.frombuffer": "torch.frombuffer(a, dtype=torch.float64)",
    "torch.from_dlpack(ndarray)": "torch.from_dlpack(a)",
    "torch.as_strided(existing storage)": "torch.as_strided(t, (N//8,), (1,))",
    "E.set_(storage) on a new empty": "torch.empty(0, dtype=torch.float64).set_(storage)",
    "torch.empty(0) alone": "torch.empty(0, dtype=torch.float64)",
    "t.view(t.shape) (alias)": "t.view(-1)",
    "arrays.arrival(tagged)": "arrays.arrival(tagged, 'auto')",
    "arrays.arrival(ndarray)": "arrays.arrival(a, 'auto')",
}
tagged = arrays.cpu_tensor_array(t)
arrays.arrival(tagged, "auto")
g = dict(globals())
print(f"# N={N} bytes, torch {torch.__version__}, ns per call, thread CPU, min of 9 x 20000")
for name, stmt in cases.items():
    timer = timeit.Timer(stmt, globals=g, timer=time.thread_time)
    best = min(timer.repeat(9, 20000)) / 20000 * 1e9
    print(f"{name:38s} {best:8.1f}")
