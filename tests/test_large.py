"""Large payloads (issue 18 item 3): the split header's announcement, the
bulk path's memory bound over MPI.  (MPI_Send ownership and ``recv_into``
are behaviour scenarios: ``tests/scenarios.py``, run in-process and over MPI.)"""

from __future__ import annotations

import json

import numpy as np
import pytest

from aiopdbp.errors import ProtocolError
from aiopdbp.wire.codec import decode_split, encode_cdu, encode_split, split_target
from aiopdbp.wire.mesp import CDU, Kind

from tests.mpirun import SCRIPTS_DIR, requires_mpi, run_mpi


def test_split_target_announces_size_and_destination_of_an_array() -> None:
    arr = np.arange(10_000, dtype=np.float32).reshape(100, 100)
    head, payload = encode_split(CDU(Kind.SHORT, 7, (42,), arr, 3))
    assert split_target(head) == (arr.nbytes, 42, False)
    cdu = decode_split(head, bytearray(memoryview(payload).cast("B")))
    assert cdu.dest_ps == (42,) and (cdu.data == arr).all() and cdu.data.shape == (100, 100)


def test_split_target_announces_a_stream_segment() -> None:
    head, _ = encode_split(CDU(Kind.STREAM, 7, (0,), b"x" * 50_000, 0))
    nbytes, _, stream = split_target(head)
    assert (nbytes, stream) == (50_000, True)


def test_split_target_refuses_a_whole_frame() -> None:
    whole = b"".join(bytes(p) for p in encode_cdu(CDU(Kind.SHORT, 1, (2,), b"abc", 0)))
    with pytest.raises(ProtocolError, match="announces"):
        split_target(whole)


def test_split_target_refuses_garbage() -> None:
    with pytest.raises(ProtocolError):
        split_target(b"\x01\x07\x01\x00" + bytes(4))


@requires_mpi
@pytest.mark.timeout(150)
def test_three_senders_of_16mib_to_a_slow_receiver_stay_under_the_rss_bound_4ranks() -> None:
    r = run_mpi(SCRIPTS_DIR / "large_rss.py", n=4, timeout=120)
    assert r.returncode == 0, r.stdout + r.stderr
    line = next(x for x in r.stdout.splitlines() if "RSS {" in x)
    got = json.loads(line.split("RSS ", 1)[1])
    assert got["ok"] and got["peak_mib"] - got["base_mib"] <= got["bound_mib"], got
