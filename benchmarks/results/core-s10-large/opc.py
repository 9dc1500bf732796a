"""Python bytecodes executed and Python frames entered per large message of large_ir.py (N=0 vs
N=K, sys.settrace with opcode events: deterministic, no valgrind; C work is not counted).
    PYTHONPATH=TREE python opc.py K"""
import os, runpy, sys

counts = [0, 0]


def tracer(frame, event, arg):
    if event == "call":
        counts[1] += 1
        frame.f_trace_opcodes = True
    elif event == "opcode":
        counts[0] += 1
    return tracer


def run(n):
    os.environ["N"] = str(n)
    counts[:] = [0, 0]
    sys.settrace(tracer)
    try:
        runpy.run_path(os.path.join(os.path.dirname(os.path.abspath(__file__)), "large_ir.py"), run_name="__main__")
    finally:
        sys.settrace(None)
    return tuple(counts)


k = int(sys.argv[1])
run(0)   # (imports and one-time set-up)
a = run(0)
b = run(k)
print(f"{os.environ.get('PYTHONPATH')} {'pure' if os.environ.get('AIOPDBP_NO_EXTENSIONS') else 'compiled'}: "
      f"per message {(b[0] - a[0]) / k:.1f} bytecodes, {(b[1] - a[1]) / k:.2f} Python frames")
