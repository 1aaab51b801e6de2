"""Where grouped and depthwise convolutions cost time in whole networks
(issues 17 and 18): for each KernelBench task, torch.compile's forward is
profiled (CUDA kernels, µs per forward, top 14, and the share of the kernels
that implement a grouped conv), then every distinct grouped conv of the
model (nn.Conv2d with groups > 1, shapes recorded by forward hooks) is timed
alone, round-robin with CUDA events (median of --reps, L2 not flushed since
each call streams more than L2), in NCHW and channels_last with
cudnn.benchmark off (torch.compile's default) and on. Each row gives µs and
the bandwidth the conv would need at that time for its minimum traffic
(input + output + weight read/written once, GB/s = bytes / µs / 1e3).
Prints one JSON line per profile and per conv.
Usage: python3 bench/grouped_conv_probe.py --kb DIR level3/19_MobileNetV1.py ...
"""
import argparse, importlib.util, json, statistics

import torch
import torch.nn.functional as F

import kernelbench_bench as kb  # cuda_kernel_table (the script's own folder is on sys.path)


def load(path):
    spec = importlib.util.spec_from_file_location("task", path)
    m = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(m)
    return m


def time_round_robin(fns, reps):
    """Median µs of each callable in `fns`, interleaved so drift hits all alike."""
    times = {k: [] for k in fns}
    for _ in range(3):
        for f in fns.values():
            f()
    torch.cuda.synchronize()
    for _ in range(reps):
        for k, f in fns.items():
            s, e = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            s.record(); f(); e.record(); e.synchronize()
            times[k].append(s.elapsed_time(e) * 1e3)
    return {k: statistics.median(v) for k, v in times.items()}


def grouped_convs(model, inputs):
    seen = {}

    def hook(mod, args, out):
        x = args[0]
        key = (tuple(x.shape), tuple(mod.weight.shape), mod.stride, mod.padding, mod.dilation, mod.groups)
        seen.setdefault(key, (mod, tuple(out.shape)))

    hs = [m.register_forward_hook(hook) for m in model.modules()
          if isinstance(m, torch.nn.Conv2d) and m.groups > 1]
    with torch.no_grad():
        model(*inputs)
    for h in hs:
        h.remove()
    return seen


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("tasks", nargs="+")
    ap.add_argument("--kb", default=".deps/kernelbench")
    ap.add_argument("--reps", type=int, default=30)
    a = ap.parse_args()
    for task in a.tasks:
        m = load(f"{a.kb}/{task}")
        torch.manual_seed(0)
        model = m.Model(*m.get_init_inputs()).cuda().eval()
        x = [t.cuda() for t in m.get_inputs()]
        with torch.no_grad():
            compiled = torch.compile(model)
            compiled(*x)
            rows = kb.cuda_kernel_table(lambda: compiled(*x))
        total = sum(v for _, v in rows)
        grouped = sum(v for k, v in rows if "depthwise" in k.lower() or "grouped" in k.lower())
        print(json.dumps({"task": task, "variant": "torch.compile", "kernel_us_per_forward": round(total, 1),
                          "depthwise_named_us": round(grouped, 1),
                          "top": [[k[:110], round(v, 1)] for k, v in rows[:14]]}), flush=True)
        for key, (mod, oshape) in grouped_convs(model, x).items():
            xshape, wshape, stride, pad, dil, groups = key
            xin = torch.randn(xshape, device="cuda")
            w = mod.weight.detach()
            b = mod.bias.detach() if mod.bias is not None else None
            xin_cl = xin.contiguous(memory_format=torch.channels_last)
            w_cl = w.contiguous(memory_format=torch.channels_last)
            conv = lambda t, ww: F.conv2d(t, ww, b, stride, pad, dil, groups)
            nbytes = 4 * (xin.numel() + w.numel() + torch.Size(oshape).numel())
            out = {}
            with torch.no_grad():
                for bench_flag in (False, True):
                    torch.backends.cudnn.benchmark = bench_flag
                    t = time_round_robin({"nchw": lambda: conv(xin, w), "channels_last": lambda: conv(xin_cl, w_cl)},
                                         a.reps)
                    for k, v in t.items():
                        out[k + ("+benchmark" if bench_flag else "")] = round(v, 1)
                torch.backends.cudnn.benchmark = False
                names = [n for n, _ in kb.cuda_kernel_table(lambda: conv(xin, w), runs=2)[:2]]
                names_cl = [n for n, _ in kb.cuda_kernel_table(lambda: conv(xin_cl, w_cl), runs=2)[:2]]
            best = min(out.values())
            print(json.dumps({"task": task, "x": xshape, "w": wshape, "stride": stride, "pad": pad, "groups": groups,
                              "out": oshape, "mbytes": round(nbytes / 1e6, 2), "us": out,
                              "gbps_at_best": round(nbytes / best / 1e3, 1),
                              "kernels_nchw": [n[:90] for n in names], "kernels_cl": [n[:90] for n in names_cl]}),
                  flush=True)


if __name__ == "__main__":
    main()
