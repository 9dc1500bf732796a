from mpi4py import MPI
import numpy as np, time, sys
comm = MPI.COMM_WORLD; bulk = comm.Dup(); r = comm.rank; p = 1 - r
SIZE = int(sys.argv[1]); N = 3000
data = np.ones(SIZE, np.uint8); head = np.zeros(64, np.uint8)
def one():   # one message, a fresh buffer per receive (Mprobe/Mrecv), as floor-lib
    def send(): comm.Send(data, p)
    def recv():
        st = MPI.Status(); m = comm.Mprobe(p, status=st); buf = np.empty(st.Get_count(MPI.BYTE), np.uint8); m.Recv(buf); return buf
    return send, recv
def two():   # header then payload on another comm; receiver posts after the header
    def send():
        comm.Send(head, p); bulk.Send(data, p)
    def recv():
        h = np.empty(64, np.uint8); comm.Recv(h, p)
        buf = np.empty(SIZE, np.uint8); bulk.Recv(buf, p); return buf
    return send, recv
def two_isend():   # as aiopdbp: Isend header, Isend payload, then wait both
    def send():
        a = comm.Isend(head, p); b = bulk.Isend(data, p); MPI.Request.Waitall([a, b])
    def recv():
        h = np.empty(64, np.uint8); comm.Recv(h, p)
        buf = np.empty(SIZE, np.uint8); bulk.Recv(buf, p); return buf
    return send, recv
def struct():   # one message: header + payload gathered by a datatype, no copy
    def send():
        dt = MPI.Datatype.Create_struct([64, SIZE], [MPI.Get_address(head), MPI.Get_address(data)], [MPI.BYTE, MPI.BYTE]).Commit()
        comm.Send([MPI.BOTTOM, 1, dt], p); dt.Free()
    def recv():
        st = MPI.Status(); m = comm.Mprobe(p, status=st); buf = np.empty(st.Get_count(MPI.BYTE), np.uint8); m.Recv(buf); return buf[64:]
    return send, recv
for name, mk in (("one", one), ("two", two), ("two_isend", two_isend), ("struct", struct)):
    send, recv = mk()
    res = []
    for rep in range(3):
        comm.Barrier(); t = time.perf_counter()
        for i in range(N):
            if r == 0: send(); recv()
            else: b = recv(); send()
        res.append((time.perf_counter() - t) / N / 2 * 1e6)
    if r == 0: print(f"{name:10s} {SIZE:8d} B one way: {sorted(res)[1]:.2f} us")
