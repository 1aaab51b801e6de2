"""pytest setup for the dice_torch tests (run by ctest: PythonBackendTests,
PythonBackendGpuTests). Makes torch_ext/python importable when the package
is not installed and registers the ``gpu`` marker."""

import sys
from pathlib import Path

import pytest

_PKG = Path(__file__).resolve().parents[3] / "torch_ext" / "python"
if str(_PKG) not in sys.path:
    sys.path.insert(0, str(_PKG))


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
