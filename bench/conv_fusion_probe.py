"""Is cuDNN's fused conv + bias (+ add) + ReLU a tactic worth having (issue 18
items 2 and 7)? Inductor leaves every convolution to cuDNN and runs the
bias / batch-norm / ReLU after it as a separate Triton kernel, one more read
and write of the activation. ATen's cudnn_convolution_relu and
cudnn_convolution_add_relu run the conv with the epilogue fused (cuDNN's
conv-bias-activation), but Inductor never emits them.

Two measurements, side by side in one process, round-robin, CUDA events:
  ops:      per conv shape, eager conv+relu, torch.compile(conv+relu), the
            fused op (NCHW and channels_last weights), median µs;
  networks: KernelBench level-3 models, torch.compile of the model against
            torch.compile of the same model with conv(+bn)(+add)+relu rewritten
            to the fused op (batch norm folded into the conv, eval mode), with
            the max abs error of both vs eager.
Prints one JSON line per row. Usage:
  python3 bench/conv_fusion_probe.py --kb DIR [--nets 10_ResNet101.py,...] [--reps 20]
"""
import argparse
import importlib.util
import json
import operator
import sys

import torch
import torch.fx as fx
import torch.nn as nn
import torch.nn.functional as F


@torch.library.custom_op("dice_probe::conv_relu", mutates_args=())
def conv_relu(x: torch.Tensor, w: torch.Tensor, b: torch.Tensor, stride: list[int], padding: list[int],
              dilation: list[int], groups: int) -> torch.Tensor:
    return torch.ops.aten.cudnn_convolution_relu(x, w, b, stride, padding, dilation, groups)


@torch.library.custom_op("dice_probe::conv_add_relu", mutates_args=())
def conv_add_relu(x: torch.Tensor, w: torch.Tensor, z: torch.Tensor, b: torch.Tensor, stride: list[int],
                  padding: list[int], dilation: list[int], groups: int) -> torch.Tensor:
    return torch.ops.aten.cudnn_convolution_add_relu(x, w, z, 1.0, b, stride, padding, dilation, groups)


def _out_like(x, w, stride, padding, dilation):
    n, _, h, wd = x.shape
    k, _, r, s = w.shape
    p = (h + 2 * padding[0] - dilation[0] * (r - 1) - 1) // stride[0] + 1
    q = (wd + 2 * padding[1] - dilation[1] * (s - 1) - 1) // stride[1] + 1
    cl = w.is_contiguous(memory_format=torch.channels_last) and not w.is_contiguous()
    cl = cl or (x.is_contiguous(memory_format=torch.channels_last) and not x.is_contiguous())
    fmt = torch.channels_last if cl else torch.contiguous_format
    return x.new_empty((n, k, p, q)).contiguous(memory_format=fmt)


@conv_relu.register_fake
def _(x, w, b, stride, padding, dilation, groups):
    return _out_like(x, w, stride, padding, dilation)


@conv_add_relu.register_fake
def _(x, w, z, b, stride, padding, dilation, groups):
    return _out_like(x, w, stride, padding, dilation)


class FusedConv(nn.Module):
    """conv (+ folded bn) (+ add z) + relu as one cuDNN call."""

    def __init__(self, conv: nn.Conv2d, bn: nn.BatchNorm2d | None, channels_last: bool):
        super().__init__()
        w = conv.weight.detach()
        b = conv.bias.detach() if conv.bias is not None else torch.zeros(w.shape[0], device=w.device)
        if bn is not None:
            scale = bn.weight.detach() / torch.sqrt(bn.running_var + bn.eps)
            w = w * scale[:, None, None, None]
            b = (b - bn.running_mean) * scale + bn.bias.detach()
        fmt = torch.channels_last if channels_last else torch.contiguous_format
        self.register_buffer("w", w.contiguous(memory_format=fmt))
        self.register_buffer("b", b.contiguous())
        self.args = (list(conv.stride), list(conv.padding), list(conv.dilation), conv.groups)

    def forward(self, x, z=None):
        if z is None:
            return conv_relu(x, self.w, self.b, *self.args)
        return conv_add_relu(x, self.w, z, self.b, *self.args)


def _is_relu(gm, n):
    if n.op == "call_module":
        return isinstance(gm.get_submodule(n.target), nn.ReLU)
    return n.op in ("call_function", "call_method") and n.target in (F.relu, torch.relu, "relu")


def _is_mod(gm, n, cls):
    return n.op == "call_module" and isinstance(gm.get_submodule(n.target), cls)


def rewrite(model: nn.Module, channels_last: bool) -> tuple[fx.GraphModule, int]:
    """conv2d [-> bn] [-> add(., z)] -> relu chains (single users, padding_mode zeros) become FusedConv."""
    gm = fx.symbolic_trace(model)
    count = 0
    for relu in list(gm.graph.nodes):
        if not _is_relu(gm, relu):
            continue
        cur, z = relu.args[0], None
        if cur.op == "call_function" and cur.target in (operator.add, operator.iadd, torch.add) and len(cur.users) == 1:
            a, c = cur.args[0], cur.args[1]
            if isinstance(a, fx.Node) and isinstance(c, fx.Node):
                cur, z = a, c
        bn = None
        if _is_mod(gm, cur, nn.BatchNorm2d) and len(cur.users) == 1:
            bn, cur = cur, cur.args[0]
        if not (_is_mod(gm, cur, nn.Conv2d) and len(cur.users) == 1):
            continue
        conv = gm.get_submodule(cur.target)
        if conv.padding_mode != "zeros" or isinstance(conv.padding, str):
            continue
        name = f"dice_fused_{count}"
        gm.add_submodule(name, FusedConv(conv, gm.get_submodule(bn.target) if bn else None, channels_last))
        with gm.graph.inserting_before(relu):
            new = gm.graph.call_module(name, (cur.args[0],) if z is None else (cur.args[0], z))
        relu.replace_all_uses_with(new)
        count += 1
    gm.graph.eliminate_dead_code()
    gm.recompile()
    return gm, count


def timeit(fns: dict, reps: int) -> dict:
    times = {k: [] for k in fns}
    flush = torch.empty(64 << 20, dtype=torch.int8, device="cuda")
    for fn in fns.values():
        for _ in range(3):
            fn()
    torch.cuda.synchronize()
    for _ in range(reps):
        for k, fn in fns.items():
            flush.zero_()
            s, e = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            s.record()
            fn()
            e.record()
            e.synchronize()
            times[k].append(s.elapsed_time(e) * 1000.0)
    return {k: sorted(v)[len(v) // 2] for k, v in times.items()}


OP_SHAPES = [  # N, C, H, W, K, R, stride, pad
    (10, 64, 56, 56, 64, 3, 1, 1), (10, 256, 56, 56, 64, 1, 1, 0), (10, 128, 28, 28, 128, 3, 1, 1),
    (10, 1024, 14, 14, 256, 1, 1, 0), (10, 256, 14, 14, 256, 3, 1, 1), (10, 64, 224, 224, 64, 3, 1, 1),
    (10, 512, 14, 14, 512, 3, 1, 1), (1024, 64, 27, 27, 192, 5, 1, 2), (128, 3, 32, 32, 16, 3, 1, 0),
    (64, 64, 256, 256, 128, 3, 1, 0),
]


def probe_ops(reps, dtype):
    for (n, c, h, w, k, r, st, pd) in OP_SHAPES:
        x = torch.randn(n, c, h, w, device="cuda", dtype=dtype)
        conv = nn.Conv2d(c, k, r, st, pd).cuda().to(dtype).eval()
        ref = lambda: F.relu(conv(x))
        comp = torch.compile(lambda t: F.relu(conv(t)))
        wcl = conv.weight.detach().contiguous(memory_format=torch.channels_last)
        b = conv.bias.detach()
        args = ([st, st], [pd, pd], [1, 1], 1)
        fns = {
            "eager": ref,
            "torch.compile": lambda: comp(x),
            "fused_nchw": lambda: conv_relu(x, conv.weight.detach(), b, *args),
            "fused_cl_weight": lambda: conv_relu(x, wcl, b, *args),
        }
        with torch.no_grad():
            want = ref()
            errs = {k2: float((f() - want).abs().max()) for k2, f in fns.items()}
            med = timeit(fns, reps)
        print(json.dumps({"probe": "op", "dtype": str(dtype), "shape": [n, c, h, w, k, r, st, pd], "us": med,
                          "max_abs_err_vs_eager": errs}), flush=True)


def load(path):
    spec = importlib.util.spec_from_file_location("task", path)
    m = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(m)
    return m


def probe_nets(kb, nets, reps):
    for name in nets:
        try:
            m = load(f"{kb}/{name}")
            torch.manual_seed(0)
            model = m.Model(*m.get_init_inputs()).cuda().eval()
            x = [t.cuda() for t in m.get_inputs()]
            with torch.no_grad():
                want = model(*x)
                base = torch.compile(model)
                fns = {"eager": lambda: model(*x), "torch.compile": lambda: base(*x)}
                rows = {}
                for cl in (False, True):
                    gm, count = rewrite(model, cl)
                    rows[cl] = count
                    comp = torch.compile(gm)
                    fns[f"fused{'_cl' if cl else ''}+compile"] = (lambda c=comp: c(*x))
                errs = {k: float((f() - want).abs().max()) for k, f in fns.items()}
                med = timeit(fns, reps)
            print(json.dumps({"probe": "net", "task": name, "fused_chains": rows[False], "us": med,
                              "speedup_vs_compile": {k: med["torch.compile"] / v for k, v in med.items()},
                              "max_abs_err_vs_eager": errs}), flush=True)
        except Exception as e:  # a probe row, not a gate: say what failed and go on
            print(json.dumps({"probe": "net", "task": name, "error": f"{type(e).__name__}: {e}"[:400]}), flush=True)
        torch._dynamo.reset()


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--kb", required=True)
    ap.add_argument("--nets", default="10_ResNet101.py,11_VGG16.py,5_AlexNet.py,19_MobileNetV1.py,27_RegNet.py,"
                    "25_ShuffleNetUnit.py,4_LeNet5.py,17_SqueezeNetFireModule.py")
    ap.add_argument("--reps", type=int, default=20)
    ap.add_argument("--skip-ops", action="store_true")
    a = ap.parse_args()
    if not a.skip_ops:
        probe_ops(a.reps, torch.float32)
    probe_nets(a.kb + "/level3", a.nets.split(","), a.reps)
    sys.stdout.flush()


if __name__ == "__main__":
    main()
