"""ctest KernelBenchConverterScalesListSizesAndFixedNetworks: the --small
converter (examples/make_kernelbench_models.py) halves the int literals of a
module-level list (``hidden_layer_sizes = [32768, 32768]``, level3/2), and
converts a network whose layer sizes are written in its class (VGG16,
AlexNet, ResNet101: parameters no module-level int sizes) at the smallest
inputs it runs at, when its parameters are within --max-param-mb, also when
its constructor cannot run on the meta device (.item(), SwinMLP). The capture
sweep (bench/capture_sweep.py, issue 18 item 6) found level-3 networks the
old converter refused ("cannot scale the task below ..."). Exits non-zero
with the reason when a task is not converted or its shapes are not the
expected ones."""
import sys
import tempfile

from converter_check import convert

LIST_TASK = '''import torch
import torch.nn as nn

class Model(nn.Module):
    def __init__(self, input_size, hidden_layer_sizes, output_size):
        super().__init__()
        layers, current = [], input_size
        for h in hidden_layer_sizes:
            layers += [nn.Linear(current, h), nn.ReLU()]
            current = h
        layers.append(nn.Linear(current, output_size))
        self.net = nn.Sequential(*layers)

    def forward(self, x):
        return self.net(x)

batch_size = 16
input_size = 64
hidden_layer_sizes = [4096, 4096]
output_size = 64

def get_inputs():
    return [torch.rand(batch_size, input_size)]

def get_init_inputs():
    return [input_size, hidden_layer_sizes, output_size]
'''

# 16 MiB of parameters no module-level int sizes; a batch of 256.
FIXED_TASK = '''import torch
import torch.nn as nn

class Model(nn.Module):
    def __init__(self, num_classes):
        super().__init__()
        self.features = nn.Linear(1024, 4096)
        self.classifier = nn.Linear(4096, num_classes)

    def forward(self, x):
        return self.classifier(torch.relu(self.features(x)))

batch_size = 256
num_classes = 10

def get_inputs():
    return [torch.rand(batch_size, 1024)]

def get_init_inputs():
    return [num_classes]
'''

# A constructor that reads a value (SwinMLP's drop-path rates: .item(), not
# possible on the meta device) and an input extent the class fixes (1024).
ITEM_TASK = '''import torch
import torch.nn as nn

class Model(nn.Module):
    def __init__(self):
        super().__init__()
        self.rate = torch.linspace(0, 0.1, 4)[1].item()
        self.proj = nn.Linear(1024, 4096)

    def forward(self, x):
        return self.proj(x) * (1 - self.rate)

batch_size = 8
image_size = 1024

def get_inputs():
    return [torch.rand(batch_size, image_size)]

def get_init_inputs():
    return []
'''



def main() -> int:
    with tempfile.TemporaryDirectory() as tmp:
        meta = convert(tmp, "level3", "2_ListMLP", LIST_TASK, "--budget-mb", "16")  # 64 MiB of parameters at full size
        scaled = meta and meta["scaled"]
        if meta is None or scaled.get("hidden_layer_sizes[0]", [0, 4096])[1] >= 4096 or \
                scaled.get("hidden_layer_sizes[1]", [0, 4096])[1] >= 4096:
            print(f"FAIL: the list's sizes were not halved: {scaled}")
            return 1
        meta = convert(tmp, "level3", "5_Fixed", FIXED_TASK, "--budget-mb", "8", "--max-param-mb", "64")
        if meta is None or meta["inputs"] != ["16x1024:f32"] or meta["outputs"] != ["16x10:f32"]:
            print(f"FAIL: the fixed-size network was not converted at its smallest batch: {meta and meta['inputs']}")
            return 1
        if convert(tmp, "level3", "5_Fixed", FIXED_TASK, "--budget-mb", "8", "--max-param-mb", "8") is not None:
            print("FAIL: parameters over --max-param-mb were accepted")
            return 1
        meta = convert(tmp, "level3", "29_Item", ITEM_TASK, "--budget-mb", "8", "--max-param-mb", "64")
        if meta is None or meta["inputs"] != ["8x1024:f32"]:
            print(f"FAIL: a model built with .item() was not converted at the sizes it runs at: {meta and meta['inputs']}")
            return 1
    print("ok: list sizes are halved; fixed-size networks convert at their smallest inputs within --max-param-mb")
    return 0


if __name__ == "__main__":
    sys.exit(main())
