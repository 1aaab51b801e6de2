"""The package as a user installs it: `pip install` of torch_ext/python, then
torch.compile(backend="dice") in a fresh interpreter WITHOUT importing
dice_torch (the torch_dynamo_backends entry point registers it)."""

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

PKG = Path(__file__).resolve().parents[3] / "torch_ext" / "python"

SCRIPT = """
import torch
m = torch.nn.Sequential(torch.nn.Linear(8, 8), torch.nn.GELU())
with torch.no_grad():
    x = torch.randn(2, 8)
    torch.testing.assert_close(torch.compile(m, backend="dice", options={"rest": "eager"})(x), m(x))
import dice_torch, importlib.metadata as md
assert md.distribution("dice_torch").entry_points.select(group="torch_dynamo_backends")
print("installed at", dice_torch.__file__)
print("groups", [g.torch_ops for g in dice_torch.last_report().groups])
"""


def test_pip_installed_package_registers_the_backend_by_entry_point(tmp_path):
    if not os.environ.get("DICE_TORCH_LIB"):
        pytest.skip("DICE_TORCH_LIB not set (ctest sets it to this build's library)")
    target = tmp_path / "site"
    src = tmp_path / "src"  # setuptools writes build/ and *.egg-info beside the sources: not in the checkout
    shutil.copytree(PKG, src, ignore=shutil.ignore_patterns("__pycache__", "build", "*.egg-info"))
    pip = subprocess.run([sys.executable, "-m", "pip", "install", "-q", "--no-build-isolation", "--no-deps",
                          "--no-index", "--target", str(target), str(src)],
                         capture_output=True, text=True, timeout=300)
    assert pip.returncode == 0, pip.stdout + pip.stderr
    # Only the installed copy, not the source tree; the CPU test switch makes it partition without a GPU.
    env = dict(os.environ, PYTHONPATH=str(target), DICE_TORCH_FORCE_PARTITION="1")
    run = subprocess.run([sys.executable, "-c", SCRIPT], capture_output=True, text=True, timeout=300, env=env,
                         cwd=tmp_path)
    assert run.returncode == 0, run.stdout + run.stderr
    assert f"installed at {target}" in run.stdout, run.stdout
    assert "groups [['aten.addmm.default', 'aten.gelu.default']]" in run.stdout, run.stdout
