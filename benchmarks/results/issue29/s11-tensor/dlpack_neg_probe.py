"""Does DLPack's C exchange API (torch.Tensor.__dlpack_c_exchange_api__, dltensor_from_py_object_no_sync)
refuse what tensormem must refuse? rc=0: described (accepted). Run: python dlpack_neg_probe.py"""
import ctypes, torch
cap = torch.Tensor.__dict__["__dlpack_c_exchange_api__"]
PyCapsule_GetPointer = ctypes.pythonapi.PyCapsule_GetPointer
PyCapsule_GetPointer.restype = ctypes.c_void_p; PyCapsule_GetPointer.argtypes = [ctypes.py_object, ctypes.c_char_p]
p = PyCapsule_GetPointer(cap, b"dlpack_exchange_api")
class DLTensor(ctypes.Structure):
    _fields_ = [("data", ctypes.c_void_p), ("dev_type", ctypes.c_int32), ("dev_id", ctypes.c_int32), ("ndim", ctypes.c_int32),
                ("code", ctypes.c_uint8), ("bits", ctypes.c_uint8), ("lanes", ctypes.c_uint16),
                ("shape", ctypes.c_void_p), ("strides", ctypes.c_void_p), ("byte_offset", ctypes.c_uint64)]
# header: version(8) prev_api(8); then allocator, from_py, to_py, dltensor_from_py, stream
ptrs = (ctypes.c_void_p * 7).from_address(p)
print("version", (ctypes.c_uint32*2).from_address(p)[:])
fn = ctypes.PYFUNCTYPE(ctypes.c_int, ctypes.py_object, ctypes.POINTER(DLTensor))(ptrs[5])
def tryit(name, t):
    d = DLTensor()
    try:
        r = fn(t, ctypes.byref(d))
    except Exception as e:
        r = f"exc {type(e).__name__}: {str(e).splitlines()[0]}"
    print(f"{name:28s} rc={r} dev={d.dev_type} code={d.code} bits={d.bits}")
t = torch.arange(6.)
tryit("plain", t)
tryit("neg view", torch._neg_view(t))
c = torch.ones(6, dtype=torch.complex64)
tryit("conj view", c.conj())
tryit("requires_grad", torch.ones(3, requires_grad=True))
tryit("sparse", torch.eye(3).to_sparse())
tryit("meta", torch.empty(3, device="meta"))
tryit("bf16", t.bfloat16())
tryit("f8", t.to(torch.float8_e4m3fn))
