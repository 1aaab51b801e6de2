"""ctest KernelBenchConverterFixesNumberArguments: a KernelBench task whose
get_inputs() returns a Python number beside its tensors (level1/5: ``A * s``
with s = 3.14) converts (examples/make_kernelbench_models.py): the number is
a constant of the traced graph, model.pt takes only the tensors, meta.json
lists the tensors as inputs and the number under "constants", and the
loaded model reproduces the eager output. The capture sweep
(bench/capture_sweep.py, issue 18 item 6) found the old converter refusing
it ("get_inputs() returned a non-tensor input"). Exits non-zero with the
reason otherwise."""
import json
import os
import subprocess
import sys
import tempfile

import torch

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
TASK = '''import torch
import torch.nn as nn

class Model(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, A: torch.Tensor, s: float, B: torch.Tensor) -> torch.Tensor:
        return A * s + B

M = 64
N = 32

def get_inputs():
    return [torch.rand(M, N), 3.5, torch.rand(M, N)]

def get_init_inputs():
    return []
'''


def main() -> int:
    with tempfile.TemporaryDirectory() as tmp:
        level = os.path.join(tmp, "level1")
        os.makedirs(level)
        task = os.path.join(level, "5_Scalar.py")
        with open(task, "w") as f:
            f.write(TASK)
        out = os.path.join(tmp, "models")
        r = subprocess.run([sys.executable, os.path.join(ROOT, "examples", "make_kernelbench_models.py"), task,
                            "--out", out, "--small"], capture_output=True, text=True)
        if r.returncode != 0:
            print(r.stdout + r.stderr)
            print("FAIL: the converter did not convert a task with a number argument")
            return 1
        d = os.path.join(out, "level1_5_Scalar")
        meta = json.load(open(os.path.join(d, "meta.json")))
        if meta["inputs"] != ["64x32:f32", "64x32:f32"] or meta.get("constants") != {"1": 3.5}:
            print(f"FAIL: inputs {meta['inputs']}, constants {meta.get('constants')}")
            return 1
        model = torch.jit.load(os.path.join(d, "model.pt"))
        a, b = torch.load(os.path.join(d, "inputs.pt"))
        got, want = model(a, b), torch.load(os.path.join(d, "expected.pt"))
        if not torch.equal(got, want) or not torch.equal(got, a * 3.5 + b):
            print("FAIL: the traced model does not reproduce the eager output")
            return 1
    print("ok: number arguments are constants of the traced model; its inputs are the tensors")
    return 0


if __name__ == "__main__":
    sys.exit(main())
