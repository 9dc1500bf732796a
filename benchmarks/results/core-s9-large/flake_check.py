import sys
sys.path.insert(0, ".")
from tests.test_hosts import _admitting_inbound, _carried_frame, _split_head
from aiopdbp.wire.mesp import MsgType
frame = _carried_frame([(7, 100)]); head = _split_head(1 << 16)
whole = bytearray(frame + head); whole[0:2] = bytes([1, int(MsgType.BPS)])
failed = []
inbound, _ = _admitting_inbound(None, failed)
inbound._on_credit = lambda src, msg: None
try:
    inbound.on_data(1, memoryview(bytes(whole)))
    print("no error", failed)
except Exception as e:
    print("raised", type(e).__name__, e)
