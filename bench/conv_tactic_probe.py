"""Where Inductor's conv time comes from (issue 18 item 2): one KernelBench
conv task's model timed in eager with cudnn.benchmark off/on, contiguous and
channels_last (weights and input converted outside the timed region), against
torch.compile, round-robin with CUDA events. Prints one JSON line per variant.
"channels_last+copies" pays the NCHW -> NHWC copy of the input and the copy
back of the output inside the timed region, as a KernelBench model (NCHW in
and out) does. With --kernels, each variant is also run 5 times under
torch.profiler and its CUDA kernels are printed (µs per forward, top 12).
With --served FILE.pt (a `dice tune --save` file, e.g. the bench's
/tmp/dice-bench/<task>.served.pt) the model dice serves from the cache
(DICE_MODE=cache, --cache DIR, --lib the extension) is one more variant,
"dice served", in the same loop.
Usage: python3 bench/conv_tactic_probe.py TASK.py [--reps 20] [--kernels]
           [--served FILE.pt --cache DIR --lib build/torch_ext/libdice_torch_ext.so]
"""
import argparse, importlib.util, json, os, sys

import torch


def load(path):
    spec = importlib.util.spec_from_file_location("task", path)
    m = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(m)
    return m


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("task")
    ap.add_argument("--reps", type=int, default=20)
    ap.add_argument("--kernels", action="store_true")
    ap.add_argument("--served", help="a `dice tune --save` file to time as the variant \"dice served\"")
    ap.add_argument("--cache", default="/tmp/dice-bench-cache", help="the cache dir the served file's winners are in")
    ap.add_argument("--lib", default="build/torch_ext/libdice_torch_ext.so")
    a = ap.parse_args()
    m = load(a.task)
    torch.manual_seed(0)
    model = m.Model(*m.get_init_inputs()).cuda().eval()
    x = [t.cuda() for t in m.get_inputs()]
    model_cl = m.Model(*m.get_init_inputs()).cuda().eval()
    model_cl.load_state_dict(model.state_dict())
    model_cl = model_cl.to(memory_format=torch.channels_last)
    x_cl = [t.contiguous(memory_format=torch.channels_last) if t.dim() == 4 else t for t in x]
    compiled = torch.compile(model)
    variants = {
        "eager": (False, lambda: model(*x)),
        "eager+benchmark": (True, lambda: model(*x)),
        "channels_last": (False, lambda: model_cl(*x_cl)),
        "channels_last+benchmark": (True, lambda: model_cl(*x_cl)),
        "channels_last+copies": (False, lambda: model_cl(*[t.contiguous(memory_format=torch.channels_last)
                                                            if t.dim() == 4 else t for t in x]).contiguous()),
        "torch.compile": (False, lambda: compiled(*x)),
    }
    if a.served:
        os.environ["DICE_MODE"] = "cache"
        os.environ["DICE_CACHE_DIR"] = a.cache
        torch.ops.load_library(a.lib)
        served = torch.jit.load(a.served).cuda().eval()
        variants["dice served"] = (False, lambda: served(*x))
    times = {k: [] for k in variants}
    with torch.no_grad():
        for k, (bench, fn) in variants.items():  # warm-up (and cuDNN's search)
            torch.backends.cudnn.benchmark = bench
            for _ in range(3):
                fn()
        torch.cuda.synchronize()
        for _ in range(a.reps):
            for k, (bench, fn) in variants.items():
                torch.backends.cudnn.benchmark = bench
                s, e = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
                s.record()
                fn()
                e.record()
                e.synchronize()
                times[k].append(s.elapsed_time(e) * 1000.0)
    for k, v in times.items():
        v.sort()
        print(json.dumps({"task": a.task.split("/")[-1], "variant": k, "median_us": v[len(v) // 2]}))
    sys.stdout.flush()
    if a.kernels:
        from torch.profiler import ProfilerActivity, profile
        with torch.no_grad():
            for k, (bench, fn) in variants.items():
                torch.backends.cudnn.benchmark = bench
                with profile(activities=[ProfilerActivity.CUDA]) as prof:
                    for _ in range(5):
                        fn()
                    torch.cuda.synchronize()
                rows = sorted((e for e in prof.key_averages() if e.device_time_total > 0),
                              key=lambda e: -e.device_time_total)[:12]
                print(json.dumps({"task": a.task.split("/")[-1], "variant": k, "kernels": [
                    {"name": e.key[:90], "us_per_forward": e.device_time_total / 5, "calls": e.count / 5} for e in rows]}))
        sys.stdout.flush()


if __name__ == "__main__":
    main()
