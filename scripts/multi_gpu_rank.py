#!/usr/bin/env python3
"""One torchrun rank of the two-GPU check (docs/MULTI_GPU.md, issue 22).

    torchrun --nproc-per-node 2 scripts/multi_gpu_rank.py --phase tune --cache DIR --out DIR
    torchrun --nproc-per-node 2 scripts/multi_gpu_rank.py --phase cache --cache DIR --out DIR

Each rank puts its tensors on cuda:LOCAL_RANK and calls a few fusion groups
through the C++ op dice::run_group (the FX frontend's op, no dynamo guard in
between). Phase "tune" (DICE_MODE=tune semantics): calls every group until it
is served by a winner (the background tuner of one rank tunes a key, the
other rank waits on its claim), at most --timeout-s seconds. Phase "cache":
every call of every group must be a hit, with outputs equal to eager on this
rank's device. Writes <out>/rank<R>_<phase>.json and exits 1 on a failure.
"""

import argparse
import json
import os
import sys
import time

import torch
import torch.nn.functional as F

import dice_torch

# (name, IR, inputs(device), eager(*inputs)); shapes large enough that a fused
# kernel beats eager's several kernels by the tuner's 5% margin.
GROUPS = [
    ("add_mul_gelu",
     "dice-ir v1\ninput %0 f32 rank=2\ninput %1 f32 rank=1\n%2 = add(%0, %1)\n%3 = const(0.5)\n"
     "%4 = mul(%2, %3)\n%5 = gelu(%4)\noutput %5\n",
     lambda d, g: [torch.randn(4096, 4096, device=d, generator=g), torch.randn(4096, device=d, generator=g)],
     lambda x, b: F.gelu((x + b) * 0.5)),
    ("mul_silu_f16",
     "dice-ir v1\ninput %0 f16 rank=2\ninput %1 f16 rank=1\n%2 = mul(%0, %1)\n%3 = silu(%2)\noutput %3\n",
     lambda d, g: [torch.randn(8192, 4096, device=d, generator=g).half(),
                   torch.randn(4096, device=d, generator=g).half()],
     lambda x, b: F.silu(x * b)),
]


def stats_of(gid):
    return [s for s in dice_torch.group_stats() if s["id"] == gid]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--phase", choices=["tune", "cache"], required=True)
    ap.add_argument("--cache", required=True)
    ap.add_argument("--out", required=True)
    ap.add_argument("--timeout-s", type=float, default=600)
    a = ap.parse_args()
    rank = int(os.environ.get("LOCAL_RANK", "0"))
    dev = torch.device("cuda", rank)
    torch.cuda.set_device(dev)
    dice_torch.load_library()
    torch.ops.dice.set_options(a.phase, a.cache)
    gen = torch.Generator(device=dev)
    gen.manual_seed(1234)  # the same inputs (and so the same task keys) on every rank
    groups = [(name, ir, make(dev, gen), eager) for name, ir, make, eager in GROUPS]
    result = {"rank": rank, "device": str(dev), "gpu": torch.cuda.get_device_name(dev),
              "uuid": str(torch.cuda.get_device_properties(dev).uuid), "phase": a.phase, "groups": []}
    ok = True
    t0 = time.time()
    with torch.no_grad():
        for name, ir, inputs, eager in groups:
            gid = torch.ops.dice.register_group(ir, [])  # the group's record id (the op keeps it per IR text)
            served = False
            calls = 0
            while True:
                (out,) = torch.ops.dice.run_group(ir, inputs)
                calls += 1
                torch.cuda.synchronize(dev)
                hit = any(s["hits"] > 0 for s in stats_of(gid))
                if a.phase == "cache":
                    if calls < 3:
                        continue
                    served = hit
                    break
                if hit or time.time() - t0 > a.timeout_s:
                    served = hit
                    break
                time.sleep(0.5)  # the fallback ran; the background tuner (or the other rank) is at work
            want = eager(*inputs)
            tol = 1e-2 if out.dtype == torch.float16 else 1e-4
            err = (out.float() - want.float()).abs().max().item()
            mine = stats_of(gid)
            hits = sum(s["hits"] for s in mine)
            fallbacks = sum(s["fallbacks"] for s in mine)
            reasons = {}
            for s in mine:
                reasons.update(s.get("fallback_reasons", {}))
            g_ok = err <= tol and (served if a.phase == "tune" else (hits == calls and fallbacks == 0))
            ok = ok and g_ok
            result["groups"].append({"name": name, "calls": calls, "hits": hits, "fallbacks": fallbacks,
                                     "fallback_reasons": reasons, "max_abs_err": err, "ok": g_ok,
                                     "task_keys": sorted({k for s in mine for k in s.get("task_keys", [])})})
    result["seconds"] = round(time.time() - t0, 1)
    result["ok"] = ok
    os.makedirs(a.out, exist_ok=True)
    with open(os.path.join(a.out, f"rank{rank}_{a.phase}.json"), "w") as f:
        json.dump(result, f, indent=1)
    print(json.dumps(result))
    sys.exit(0 if ok else 1)


if __name__ == "__main__":
    main()
