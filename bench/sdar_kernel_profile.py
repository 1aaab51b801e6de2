#!/usr/bin/env python3
"""Where the GPU time of one block-diffusion step forward goes, kernel by kernel.

Runs the plain PyTorch loop of bench/sdar_decode_reference.py (same weights
layout, same ops as the C++ decoder's eager forward) under torch.profiler and
prints, per batch size, the CUDA kernels sorted by total device time, with the
device time per step forward (µs) next to the memory-roofline time of that
forward (bytes of weights read / --bandwidth-tbs). The C++ decoder with CUDA
graphs replays the same kind of kernels without host gaps, so its step time
minus this kernel time is what is left of launch overhead.

Usage (GPU machine):
  python3 bench/sdar_kernel_profile.py --config .deps/sdar/config-4b.json --batch 1,128 [--top 15]

Errors: exits 3 without a CUDA device, 2 on an unreadable --config.
"""
import argparse
import json
import os
import sys

import torch
from torch.profiler import ProfilerActivity, profile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from sdar_decode_reference import Sdar  # noqa: E402


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--config", required=True)
    p.add_argument("--batch", default="1,128")
    p.add_argument("--prompt", type=int, default=512)
    p.add_argument("--steps", type=int, default=8, help="profiled step forwards per batch size")
    p.add_argument("--top", type=int, default=15)
    p.add_argument("--bandwidth-tbs", type=float, default=4.2, help="HBM bandwidth for the roofline (TB/s)")
    args = p.parse_args()
    if not torch.cuda.is_available():
        print("sdar_kernel_profile: error: no CUDA device", file=sys.stderr)
        return 3
    try:
        with open(args.config) as f:
            cfg = json.load(f)
    except (OSError, ValueError) as e:
        print(f"sdar_kernel_profile: error: cannot read --config {args.config}: {e}", file=sys.stderr)
        return 2
    cfg.setdefault("block_size", 4)
    dev = torch.device("cuda")
    model = Sdar(cfg, dev, torch.bfloat16, 0)
    weight_bytes = sum(t.numel() * t.element_size() for l in model.layers for t in l.values())
    weight_bytes += model.lm_head.numel() * model.lm_head.element_size()
    bs, mask_id = cfg["block_size"], cfg["mask_token_id"]
    for b in [int(x) for x in args.batch.split(",") if x]:
        cache = model.new_cache(b, args.prompt + bs)
        ids = torch.full((b, args.prompt), 7, device=dev, dtype=torch.long)
        with torch.no_grad():
            model.forward(ids, cache, commit=True, logits=False)
            x = torch.full((b, bs), mask_id, device=dev, dtype=torch.long)
            for _ in range(3):
                model.forward(x, cache, commit=False)
            torch.cuda.synchronize()
            with profile(activities=[ProfilerActivity.CUDA]) as prof:
                for _ in range(args.steps):
                    model.forward(x, cache, commit=False)
                torch.cuda.synchronize()
        rows = []
        for e in prof.key_averages():
            t = getattr(e, "device_time_total", None)
            if t is None:
                t = e.cuda_time_total
            if t > 0 and e.device_type == torch.autograd.DeviceType.CUDA:
                rows.append((t, e.count, e.key))
        rows.sort(reverse=True)
        total = sum(r[0] for r in rows)
        per = total / args.steps
        roof = weight_bytes / (args.bandwidth_tbs * 1e12) * 1e6
        print(f"\n## batch {b}: {per:.0f} µs of kernels per step forward "
              f"(weights {weight_bytes / 1e9:.2f} GB -> roofline {roof:.0f} µs at {args.bandwidth_tbs} TB/s)")
        print("| kernel | µs / step | calls / step | share |")
        print("|---|---:|---:|---:|")
        for t, n, k in rows[:args.top]:
            name = k if len(k) <= 90 else k[:87] + "..."
            print(f"| `{name}` | {t / args.steps:.0f} | {n / args.steps:.0f} | {100 * t / total:.1f}% |")
        del cache
        torch.cuda.empty_cache()
    return 0


if __name__ == "__main__":
    sys.exit(main())
