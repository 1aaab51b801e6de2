"""ctest KernelBenchConverterCountsOutputsInBudget: the --small converter
(examples/make_kernelbench_models.py) limits a task's outputs (--max-output-mb),
not only its inputs and parameters (--budget-mb). level1/7 (a 32768x64 @ 64x32768 matmul:
16 MiB in, 4 GiB out) was left at full size and `dice tune` ran past the
capture sweep's 300 s timeout (bench/capture_sweep.py, issue 18 item 6).
Exits non-zero with the reason when the sizes are not scaled."""
import sys
import tempfile

from converter_check import convert

TASK = '''import torch
import torch.nn as nn

class Model(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, A, B):
        return torch.matmul(A, B)

M = 4096
N = 4096
K = 64

def get_inputs():
    return [torch.rand(M, K), torch.rand(K, N)]

def get_init_inputs():
    return []
'''


def main() -> int:
    with tempfile.TemporaryDirectory() as tmp:
        meta = convert(tmp, "level1", "7_SmallK", TASK, "--max-output-mb", "8")
        if meta is None:
            print("FAIL: the converter did not convert the task")
            return 1
        # 2 MiB in, 64 MiB out at full size: halved twice, 4 MiB out.
        if meta["inputs"] != ["1024x16:f32", "16x1024:f32"] or meta["outputs"] != ["1024x1024:f32"]:
            print(f"FAIL: the output was not counted in the budget: {meta['inputs']} -> {meta['outputs']}")
            return 1
    print("ok: outputs are limited by --max-output-mb")
    return 0


if __name__ == "__main__":
    sys.exit(main())
