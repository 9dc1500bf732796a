import ctypes, torch
cap = torch.Tensor.__dict__["__dlpack_c_exchange_api__"]
PyCapsule_GetPointer = ctypes.pythonapi.PyCapsule_GetPointer
PyCapsule_GetPointer.restype = ctypes.c_void_p
PyCapsule_GetPointer.argtypes = [ctypes.py_object, ctypes.c_char_p]
api = PyCapsule_GetPointer(cap, b"dlpack_exchange_api")
# header: version(8) prev_api(8); allocator(8); from_py(8); to_py(8); dltensor_from_py(8)
fp = ctypes.c_void_p.from_address(api + 8 + 8 + 8 + 8 + 8).value
F = ctypes.CFUNCTYPE(ctypes.c_int, ctypes.c_void_p, ctypes.c_void_p)(fp)
buf = (ctypes.c_char * 64)()
for name, t in [("plain", torch.arange(4.)), ("neg", torch.arange(4.)._neg_view()), ("grad", torch.arange(4., requires_grad=True)),
                ("conj", torch.randn(4, dtype=torch.cfloat).conj()), ("negint", None)]:
    if t is None:
        try: t = torch.arange(4)._neg_view()
        except Exception as e: print("int neg view:", e); continue
    r = F(id(t), ctypes.addressof(buf))
    print(name, t.is_neg(), r)
try:
    print("bool neg", torch.ones(3, dtype=torch.bool)._neg_view().is_neg())
except Exception as e: print("bool neg err", e)
x = torch.randn(3, dtype=torch.cfloat).conj().imag
print("conj.imag", x.dtype, x.is_neg(), x._is_view(), x._base is not None)
y = torch.arange(4.)._neg_view()
print("negview base", y._base is not None, y.detach().is_neg(), y.detach()._base is not None, y.data.is_neg(), y.data._base is not None)
print(torch.Tensor.is_neg, type(torch.Tensor.is_neg))
