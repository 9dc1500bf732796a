"""Module-level guard of the GPU test files: CuPy and a CUDA device, or skip."""

from __future__ import annotations

import warnings
from typing import Any

import pytest


def cupy_or_skip() -> tuple[Any, int]:
    """``(cupy, device count)``; skips the calling test module (at import)
    without CuPy or without a CUDA device."""
    with warnings.catch_warnings():  # an import-time warning of CuPy is not ours to fail on
        warnings.simplefilter("ignore")
        cp = pytest.importorskip("cupy")
    try:
        ndev = int(cp.cuda.runtime.getDeviceCount())
    except Exception:  # no driver, no device
        ndev = 0
    if ndev < 1:
        pytest.skip("no CUDA device", allow_module_level=True)
    return cp, ndev
