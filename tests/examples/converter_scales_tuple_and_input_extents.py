"""ctest KernelBenchConverterScalesTupleAndInputExtents: the --small converter
(examples/make_kernelbench_models.py) fits tasks whose sizes sit in tuple
assignments (``depth, height, width = 16, 128, 128``) or in input extents
below 64 (a batch of 32), and never picks sizes the model cannot run at (a
LayerNorm whose normalized_shape is tied to the input's width). The capture
sweep (bench/capture_sweep.py, issue 18 item 6) found KernelBench tasks
the old converter refused ("cannot scale the task below ..."). Exits non-zero
with the reason when a task is not converted or its shapes are not the
expected ones."""
import sys
import tempfile

from converter_check import convert

# Sizes only in a tuple assignment: height and width must be halved.
TUPLE_TASK = '''import torch
import torch.nn as nn

class Model(nn.Module):
    def __init__(self, channels):
        super().__init__()
        self.scale = nn.Parameter(torch.ones(channels, 1, 1, 1))

    def forward(self, x):
        return torch.relu(x * self.scale)

batch_size = 16
channels = 4
depth, height, width = 16, 128, 128

def get_inputs():
    return [torch.rand(batch_size, channels, depth, height, width)]

def get_init_inputs():
    return [channels]
'''

# A LayerNorm whose size is another int than the dim it normalises (out_channels
# == 2 * width, as after a stride-2 ConvTranspose): halving out_channels breaks
# the model, halving the batch does not.
TIED_TASK = '''import torch
import torch.nn as nn

class Model(nn.Module):
    def __init__(self, out_channels, norm_shape):
        super().__init__()
        self.norm = nn.LayerNorm(norm_shape)

    def forward(self, x):
        return torch.relu(self.norm(torch.cat([x, x], -1)))

batch_size = 32
in_channels = 4
out_channels = 64
depth, height, width = 16, 32, 32
norm_shape = (out_channels,)

def get_inputs():
    return [torch.rand(batch_size, in_channels, depth, height, width)]

def get_init_inputs():
    return [out_channels, norm_shape]
'''



def main() -> int:
    with tempfile.TemporaryDirectory() as tmp:
        meta = convert(tmp, "level2", "1_Tuple", TUPLE_TASK, "--budget-mb", "17")  # 64 MiB in at full size, 16 MiB halved once
        if meta is None or meta["inputs"] != ["16x4x16x64x64:f32"]:
            print(f"FAIL: tuple-assigned height/width were not halved: {meta and meta['inputs']}")
            return 1
        meta = convert(tmp, "level2", "2_Tied", TIED_TASK, "--budget-mb", "5")  # 8 MiB in at full size; batch 16 fits
        if meta is None or meta["inputs"] != ["16x4x16x32x32:f32"] or meta["outputs"] != ["16x4x16x32x64:f32"]:
            print(f"FAIL: the tied task was not scaled by its batch alone: {meta and (meta['inputs'], meta['scaled'])}")
            return 1
    print("ok: tuple-assigned sizes and input extents are scaled; tied sizes are left alone")
    return 0


if __name__ == "__main__":
    sys.exit(main())
