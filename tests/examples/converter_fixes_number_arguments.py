"""ctest KernelBenchConverterFixesNumberAndIndexArguments: a KernelBench task
whose get_inputs() returns a Python number (level1/5: ``A * s`` with
s = 3.14), an integer tensor (level1/95's class targets) or a bool mask
(level1/93) beside its float tensors converts
(examples/make_kernelbench_models.py): the number is a constant of the traced
graph, the integer/bool tensors are buffers of the module, model.pt takes only
the float tensors, meta.json lists those as inputs and the others under
"constants" / "fixed_inputs", and the loaded model reproduces the eager
output. The capture sweep (bench/capture_sweep.py, issue 18 item 6) found the
old converter refusing the number ("get_inputs() returned a non-tensor
input") and `dice tune` refusing i64/b8 --input specs, which it cannot fill
with meaningful data (a random target is out of range). Exits non-zero with
the reason otherwise."""
import os
import sys
import tempfile

import torch

from converter_check import convert

TASK = '''import torch
import torch.nn as nn

class Model(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, A: torch.Tensor, s: float, B: torch.Tensor, idx: torch.Tensor, mask: torch.Tensor):
        return torch.where(mask, A * s + B, A.gather(1, idx))

M = 64
N = 32

def get_inputs():
    return [torch.rand(M, N), 3.5, torch.rand(M, N), torch.randint(0, N, (M, N)), torch.rand(M, N) > 0.5]

def get_init_inputs():
    return []
'''


def main() -> int:
    with tempfile.TemporaryDirectory() as tmp:
        meta = convert(tmp, "level1", "5_Scalar", TASK)
        if meta is None:
            print("FAIL: the converter did not convert a task with a number argument")
            return 1
        d = os.path.join(tmp, "models", "level1_5_Scalar")
        if meta["inputs"] != ["64x32:f32", "64x32:f32"] or meta.get("constants") != {"1": 3.5} or \
                meta.get("fixed_inputs") != {"3": "64x32:i64", "4": "64x32:b8"}:
            print(f"FAIL: inputs {meta['inputs']}, constants {meta.get('constants')}, fixed {meta.get('fixed_inputs')}")
            return 1
        model = torch.jit.load(os.path.join(d, "model.pt"))
        a, b = torch.load(os.path.join(d, "inputs.pt"))
        got, want = model(a, b), torch.load(os.path.join(d, "expected.pt"))
        idx, mask = model.fixed_arg3, model.fixed_arg4  # get_inputs()'s values, kept as buffers
        if not torch.equal(got, want) or not torch.equal(got, torch.where(mask, a * 3.5 + b, a.gather(1, idx))):
            print("FAIL: the traced model does not reproduce the eager output")
            return 1
    print("ok: number and integer/bool arguments are fixed in the traced model; its inputs are the float tensors")
    return 0


if __name__ == "__main__":
    sys.exit(main())
