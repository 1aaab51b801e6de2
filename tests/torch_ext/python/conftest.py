"""pytest setup for the dice_torch tests (run by ctest: PythonBackendTests,
PythonBackendGpuTests). Makes torch_ext/python importable when the package
is not installed and registers the ``gpu`` marker."""

import os
import sys
from pathlib import Path

import pytest

_PKG = Path(__file__).resolve().parents[3] / "torch_ext" / "python"
if str(_PKG) not in sys.path:
    sys.path.insert(0, str(_PKG))


def _cutlass_include():
    """The CUTLASS include dir the runtime compiles gemm candidates with:
    $DICE_CUTLASS_INCLUDE (the runtime's own override), else the build's
    (ctest passes it as DICE_TEST_CUTLASS_INCLUDE); "" when neither holds
    cutlass/gemm/device/gemm.h."""
    for d in (os.environ.get("DICE_CUTLASS_INCLUDE", ""), os.environ.get("DICE_TEST_CUTLASS_INCLUDE", "")):
        if d and os.path.isfile(os.path.join(d, "cutlass", "gemm", "device", "gemm.h")):
            return d
    return ""


# For tests whose groups need a CUTLASS gemm candidate: without the headers
# every such candidate is a compile error, which is the machine, not dice.
NEEDS_CUTLASS = pytest.mark.skipif(not _cutlass_include(),
                                   reason="CUTLASS headers absent (scripts/setup.sh unpacks the pinned nvidia-cutlass "
                                          "wheel; or set DICE_CUTLASS_INCLUDE)")


def pytest_configure(config):
    config.addinivalue_line("markers", "gpu: needs a CUDA device (skipped with the reason when there is none)")


@pytest.fixture(autouse=True)
def _fresh_dynamo():
    """Each test compiles from scratch and sees only its own reports."""
    import torch._dynamo

    import dice_torch

    torch._dynamo.reset()
    dice_torch.clear_reports()
    yield
    torch._dynamo.reset()
