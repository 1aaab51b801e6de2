"""ctest KernelBenchConverterCastsDtype: examples/make_kernelbench_models.py
--dtype bf16 (issue 18's level-3 figure is float32 and bf16) casts the
model's floating parameters and the floating inputs, leaves an integer
input (class indices) as it is, casts a floating tensor kept as a plain
module attribute (which nn.Module.to leaves alone), and writes <level>_<stem>_bf16/, the
folder bench/capture_sweep.py reads from the converter's "OK ... -> DIR" line (its
`dice tune` and `dice profile` runs use that folder). Exits non-zero with the reason
otherwise."""
import os
import sys
import tempfile

import torch

from converter_check import ROOT, convert

sys.path.insert(0, os.path.join(ROOT, "bench"))
from capture_sweep import converted_dir  # noqa: E402

TASK = '''import torch
import torch.nn as nn

class Model(nn.Module):
    def __init__(self, n):
        super().__init__()
        self.lin = nn.Linear(n, 8)
        self.scale = torch.ones(8)  # a plain attribute (level3/33_VanillaRNN keeps its state so)

    def forward(self, x, idx):
        return (torch.relu(self.lin(x)) * self.scale)[:, idx]

batch_size = 4
n = 16

def get_inputs():
    return [torch.rand(batch_size, n), torch.tensor([0, 3, 5])]

def get_init_inputs():
    return [n]
'''


def main() -> int:
    with tempfile.TemporaryDirectory() as tmp:
        lines = []
        meta = convert(tmp, "level3", "9_Lin", TASK, "--dtype", "bf16", suffix="_bf16", stdout=lines)
        if meta is None:
            print("FAIL: the converter did not convert the task")
            return 1
        folder = os.path.join(tmp, "models", "level3_9_Lin_bf16")
        if os.path.abspath(converted_dir("\n".join(lines)) or "") != os.path.abspath(folder):
            print(f"FAIL: capture_sweep reads {converted_dir(chr(10).join(lines))!r} from {lines}, not {folder}")
            return 1
        if meta["inputs"] != ["4x16:bf16"] or meta["outputs"] != ["4x3:bf16"] or meta["fixed_inputs"] != {"1": "3:i64"}:
            print(f"FAIL: specs {meta['inputs']} -> {meta['outputs']}, fixed {meta['fixed_inputs']}")
            return 1
        model = torch.jit.load(os.path.join(folder, "model.pt"))
        dtypes = {p.dtype for p in model.parameters()}
        if dtypes != {torch.bfloat16}:
            print(f"FAIL: parameter dtypes {dtypes}")
            return 1
        x = torch.load(os.path.join(folder, "inputs.pt"))[0]
        if model(x).dtype != torch.bfloat16:
            print("FAIL: the traced model does not run in bf16")
            return 1
    print("ok: --dtype bf16 casts floating parameters and inputs, indices stay i64")
    return 0


if __name__ == "__main__":
    sys.exit(main())
