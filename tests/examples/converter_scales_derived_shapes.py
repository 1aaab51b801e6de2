"""ctest KernelBenchConverterScalesDerivedShapes: examples/make_kernelbench_models.py
--small scales module-level ints *and* the values derived from them at module
level (a fresh user's README command 1 died on level2/76_Gemm_Add_ReLU,
whose ``bias_shape = (out_features,)`` kept the full size). Exits non-zero
with the reason when the converter fails or the shapes do not follow."""
import sys
import tempfile

from converter_check import convert

TASK = '''import torch
import torch.nn as nn

class Model(nn.Module):
    def __init__(self, in_features, out_features, bias_shape):
        super().__init__()
        self.gemm = nn.Linear(in_features, out_features, bias=False)
        self.bias = nn.Parameter(torch.randn(bias_shape))

    def forward(self, x):
        return torch.relu(self.gemm(x) + self.bias)

batch_size = 1024
in_features = 8192
out_features = 8192
bias_shape = (out_features,)

def get_inputs():
    return [torch.rand(batch_size, in_features)]

def get_init_inputs():
    return [in_features, out_features, bias_shape]
'''


def main() -> int:
    with tempfile.TemporaryDirectory() as tmp:
        meta = convert(tmp, "level2", "76_Gemm_Add_ReLU", TASK)
        if meta is None:
            print("FAIL: the converter did not convert the task")
            return 1
        scaled = {k: v[1] for k, v in meta["scaled"].items()}
        want_in = f"{scaled['batch_size']}x{scaled['in_features']}:f32"
        want_out = f"{scaled['batch_size']}x{scaled['out_features']}:f32"
        if meta["inputs"] != [want_in] or meta["outputs"] != [want_out] or scaled["out_features"] >= 8192:
            print(f"FAIL: shapes did not follow the scaled ints: {meta['inputs']} -> {meta['outputs']}, {scaled}")
            return 1
    print("ok: derived module-level shapes follow the scaled ints")
    return 0


if __name__ == "__main__":
    sys.exit(main())
