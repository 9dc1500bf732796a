"""The hosts/ layer: it imports nothing above it, and every control kind has
exactly one handler among its parts."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from aiopdbp.hosts.channel import HANDLER_NAMES, Dispatch
from aiopdbp.wire.control import ByeMsg, StopAckMsg

ROOT = Path(__file__).resolve().parent.parent

#: imports aiopdbp.hosts alone: the package's own ``__init__`` (the public API,
#: which imports every layer) is replaced by an empty package of the same path
_PROBE = """
import json, sys, types
pkg = types.ModuleType("aiopdbp"); pkg.__path__ = [sys.argv[1]]; sys.modules["aiopdbp"] = pkg
import aiopdbp.hosts
print(json.dumps(sorted(m for m in sys.modules if m.startswith("aiopdbp."))))
"""


@pytest.mark.timeout(60)
def test_hosts_import_loads_nothing_from_the_layers_above() -> None:
    out = subprocess.run([sys.executable, "-c", _PROBE, str(ROOT / "aiopdbp")], capture_output=True,
                         text=True, timeout=50, check=True).stdout
    loaded = json.loads(out)
    assert "aiopdbp.hosts.remote" in loaded
    above = [m for m in loaded if m.split(".")[1] in ("routing", "streams", "runtime", "sync", "launch",
                                                       "bench", "cli")]
    assert above == []


class _Handles:
    """A part that handles the control kinds it is given."""

    def __init__(self, names: list[str], log: list[tuple[str, int, object]]) -> None:
        for name in names:
            setattr(self, name, lambda src, msg, _n=name: log.append((_n, src, msg)))


def test_dispatch_hands_each_kind_to_its_one_owner() -> None:
    log: list[tuple[str, int, object]] = []
    half = len(HANDLER_NAMES) // 2
    dispatch = Dispatch(_Handles(list(HANDLER_NAMES[:half]), log), _Handles(list(HANDLER_NAMES[half:]), log))
    bye, ack = ByeMsg(3), StopAckMsg(1)
    dispatch(2, bye)
    dispatch(1, ack)
    assert log == [("on_bye", 2, bye), ("on_stop_ack", 1, ack)]


def test_dispatch_refuses_a_control_kind_without_handler() -> None:
    with pytest.raises(TypeError, match="on_bye: 0 owners"):
        Dispatch(_Handles([n for n in HANDLER_NAMES if n != "on_bye"], []))


def test_dispatch_refuses_a_control_kind_with_two_handlers() -> None:
    with pytest.raises(TypeError, match="on_table: 2 owners"):
        Dispatch(_Handles(list(HANDLER_NAMES), []), _Handles(["on_table"], []))
