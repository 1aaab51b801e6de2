#!/usr/bin/env python3
"""torch.compile(backend="dice") side by side with eager, torch.compile
(default) and torch.compile(mode="max-autotune-no-cudagraphs"), in one run.

Workloads: KernelBench task files (Model, get_inputs, get_init_inputs) and,
with --gpt2, a GPT-2-style transformer block in plain PyTorch (pre-LN causal
self-attention written out with matmul + scale + additive mask + softmax, and
a GELU MLP; bf16, batch 8, sequence 1024, width 768, 12 heads).

Per workload and variant: correctness against eager (per-dtype tolerance of
bench/kernelbench_bench.py: |err| <= tol + tol*|ref|, NaN placement equal),
time (µs: CUDA events, L2 flushed, median of --reps; wall-clock median on
CPU), first-call time (s: compile, and for dice in tune-sync mode the tuning).
Summary: fast_1 / fast_2 (share of workloads correct and >= 1x / >= 2x
faster than eager), geomean speedup vs eager and vs max-autotune. One JSON
line per workload goes to --out; the markdown table is printed.

GPU machine (the lead's run):
    python3 bench/torch_compile_bench.py level1/23_Softmax.py level2/... --gpt2 \
        --kb .deps/kernelbench --cache /tmp/dice-cache --out $OUT/compile.jsonl
CPU dry run (tiny shapes: module-level ints of each task capped at 32; the
GPT-2 block at batch 2, sequence 16, width 64; float32):
    python3 bench/torch_compile_bench.py level1/23_Softmax.py --gpt2 --dry-run
"""

from __future__ import annotations

import argparse
import json
import math
import os
import statistics
import sys
import time
from pathlib import Path

import torch
import torch.nn as nn
import torch.nn.functional as F

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "bench"))
sys.path.insert(0, str(ROOT / "torch_ext" / "python"))

import kernelbench_bench as kb  # noqa: E402  (load_task, bench_interleaved, outputs_match)

VARIANTS = ("eager", "inductor", "max-autotune", "dice")


class GPT2Block(nn.Module):
    """Pre-LN GPT-2 block: x + attn(ln_1(x)), then + mlp(ln_2(.)). Input and
    output [batch, seq, width]; causal mask as an additive -inf buffer."""

    def __init__(self, width: int = 768, heads: int = 12, seq: int = 1024):
        super().__init__()
        self.heads = heads
        self.ln_1, self.ln_2 = nn.LayerNorm(width), nn.LayerNorm(width)
        self.c_attn, self.c_proj = nn.Linear(width, 3 * width), nn.Linear(width, width)
        self.c_fc, self.c_out = nn.Linear(width, 4 * width), nn.Linear(4 * width, width)
        mask = torch.full((seq, seq), float("-inf")).triu(1)
        self.register_buffer("mask", mask, persistent=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        b, t, c = x.shape
        q, k, v = self.c_attn(self.ln_1(x)).split(c, dim=2)
        q, k, v = (z.view(b, t, self.heads, c // self.heads).transpose(1, 2) for z in (q, k, v))
        att = (q @ k.transpose(-2, -1)) * (1.0 / math.sqrt(c // self.heads)) + self.mask[:t, :t]
        y = torch.softmax(att, dim=-1) @ v
        x = x + self.c_proj(y.transpose(1, 2).reshape(b, t, c))
        return x + self.c_out(F.gelu(self.c_fc(self.ln_2(x)), approximate="tanh"))


def shrink_task(mod, cap: int) -> None:
    """Dry run: caps every module-level int of a task (batch_size, dims,
    features) and every int inside a module-level tuple (bias_shape) at
    ``cap`` so get_inputs/get_init_inputs build tiny shapes."""
    for name, v in list(vars(mod).items()):
        if name.startswith("_"):
            continue
        if type(v) is int and v > cap:
            setattr(mod, name, cap)
        elif type(v) is tuple and v and all(type(d) is int for d in v):
            setattr(mod, name, tuple(min(d, cap) for d in v))


def time_us(fns: dict, reps: int, cuda: bool) -> dict:
    """Median µs per name of fns {name: callable}. On a GPU all variants are
    timed round-robin in one loop (kernelbench_bench.bench_interleaved: CUDA
    events, L2 flushed before each call, order rotated per repetition); on
    CPU each one by wall clock."""
    if cuda:
        return kb.bench_interleaved(fns, reps)
    out = {}
    for name, fn in fns.items():
        fn()
        times = []
        for _ in range(reps):
            t0 = time.perf_counter()
            fn()
            times.append((time.perf_counter() - t0) * 1e6)
        out[name] = statistics.median(times)
    return out


def make_variant(name: str, model: nn.Module, args) -> nn.Module:
    """The callable for one variant: the model itself (eager), torch.compile
    default / max-autotune-no-cudagraphs, or backend="dice" with the run's
    mode, cache dir and rest compiler."""
    if name == "eager":
        return model
    if name == "inductor":
        return torch.compile(model)
    if name == "max-autotune":
        return torch.compile(model, mode="max-autotune-no-cudagraphs")
    return torch.compile(model, backend="dice",
                         options={"mode": args.dice_mode, "cache_dir": args.cache, "rest": args.rest})


def run_workload(label: str, model: nn.Module, inputs: list, args) -> dict:
    """Runs every variant on ``inputs`` under torch.no_grad(): first-call
    time (s), correctness against eager, median time (µs), and for dice the
    groups formed, hits, fallbacks and their reasons. A variant that raises
    records "error" and the others still run."""
    import dice_torch

    cuda = args.device == "cuda"
    rec: dict = {"task": label, "device": torch.cuda.get_device_name(0) if cuda else "cpu", "variants": {}}
    ready: dict = {}
    with torch.no_grad():
        ref = model(*inputs)
        # One reset per workload, none between variants: dynamo guards each
        # cache entry on its backend, so the compiled variants coexist and can
        # be timed side by side afterwards.
        torch._dynamo.reset()
        for name in args.variants:
            v: dict = {}
            rec["variants"][name] = v
            try:
                dice_torch.clear_reports()
                fn = make_variant(name, model, args)
                t0 = time.time()
                out = fn(*inputs)
                if cuda:
                    torch.cuda.synchronize()
                v["first_call_s"] = time.time() - t0
                v["correct"], v["detail"] = kb.outputs_match(out, ref)
                if name == "dice":
                    groups = [g for r in dice_torch.reports() for g in r.groups]
                    ids = {g.id for g in groups}
                    stats = [s for s in dice_torch.group_stats() if s["id"] in ids]
                    v["groups"] = [g.summary for g in groups]
                    v["hits"] = sum(s["hits"] for s in stats)
                    v["fallbacks"] = sum(s["fallbacks"] for s in stats)
                    reasons: dict = {}
                    for s in stats:
                        for r, n in s["fallback_reasons"].items():
                            reasons[r] = reasons.get(r, 0) + n
                    v["fallback_reasons"] = reasons
                    skipped = [r.skipped for r in dice_torch.reports() if r.skipped]
                    if skipped:
                        v["skipped"] = skipped[0]
                ready[name] = (lambda f=fn: f(*inputs))
            except Exception as e:  # one failing variant must not end the run
                v["error"] = f"{type(e).__name__}: {e}"[:500]
        try:
            for name, us in time_us(ready, args.reps, cuda).items():
                rec["variants"][name]["us"] = us
        except Exception as e:  # a variant failing only when timed
            for name in ready:
                rec["variants"][name]["error"] = f"timing: {type(e).__name__}: {e}"[:500]
    eager = rec["variants"].get("eager", {}).get("us")
    ma = rec["variants"].get("max-autotune", {}).get("us")
    for v in rec["variants"].values():
        if v.get("us") and eager:
            v["speedup_vs_eager"] = eager / v["us"]
        if v.get("us") and ma:
            v["speedup_vs_max_autotune"] = ma / v["us"]
    return rec


def summarize(records: list[dict], variants: list[str]) -> str:
    """Markdown: one row per workload (µs per variant, dice correctness and
    groups), then fast_1 / fast_2 / geomeans per variant."""
    head = "| task | " + " | ".join(f"{v} µs" for v in variants) + " | dice correct | dice groups | dice first call s |"
    lines = [head, "|" + "---|" * (len(variants) + 4)]
    for r in records:
        cells = []
        for name in variants:
            v = r["variants"].get(name, {})
            cells.append(f"{v['us']:.1f}" if "us" in v else ("error" if "error" in v else "-"))
        d = r["variants"].get("dice", {})
        lines.append(f"| {r['task']} | " + " | ".join(cells) +
                     f" | {d.get('correct', '-')} | {'; '.join(d.get('groups', [])) or '-'} |"
                     f" {d.get('first_call_s', float('nan')):.1f} |")
    lines.append("")
    lines.append("| variant | correct | fast_1 | fast_2 | geomean vs eager | geomean vs max-autotune |")
    lines.append("|---|---|---|---|---|---|")
    n = max(len(records), 1)
    for name in variants:
        vs = [r["variants"].get(name, {}) for r in records]
        ok = [v for v in vs if v.get("correct")]
        f1 = sum(1 for v in ok if v.get("speedup_vs_eager", 0) >= 1.0)
        f2 = sum(1 for v in ok if v.get("speedup_vs_eager", 0) >= 2.0)

        def geo(key):
            xs = [v[key] for v in ok if v.get(key)]
            return f"{math.exp(sum(map(math.log, xs)) / len(xs)):.3f}" if xs else "-"

        lines.append(f"| {name} | {len(ok)}/{len(records)} | {f1 / n:.0%} | {f2 / n:.0%} | {geo('speedup_vs_eager')} |"
                     f" {geo('speedup_vs_max_autotune')} |")
    return "\n".join(lines)


def main() -> int:
    """CLI entry point; exit code 0, or 2 for bad arguments / no CUDA device without --dry-run."""
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("tasks", nargs="*", help="KernelBench task files (absolute, or relative to --kb)")
    p.add_argument("--kb", default=os.environ.get("KB", ".deps/kernelbench"), help="KernelBench root")
    p.add_argument("--gpt2", action="store_true", help="also run the GPT-2-style block")
    p.add_argument("--dry-run", action="store_true", help="CPU, tiny shapes, float32 (checks the script works)")
    p.add_argument("--variants", default=None, help=f"comma list from {','.join(VARIANTS)} "
                   "(default: all on a GPU; eager,dice in a dry run)")
    p.add_argument("--dice-mode", default="tune-sync", help="DICE mode of the dice variant (default tune-sync)")
    p.add_argument("--rest", default="inductor", choices=["inductor", "eager"],
                   help="what runs the ops outside fusion groups in the dice variant")
    p.add_argument("--cache", default=os.environ.get("DICE_CACHE_DIR", "/tmp/dice-compile-bench-cache"))
    p.add_argument("--reps", type=int, default=None, help="timed repetitions (default 30; 3 in a dry run)")
    p.add_argument("--out", default="compile-bench.jsonl")
    args = p.parse_args()
    args.device = "cpu" if args.dry_run else "cuda"
    if not args.dry_run and not torch.cuda.is_available():
        print("torch_compile_bench: no CUDA device; use --dry-run on a CPU machine", file=sys.stderr)
        return 2
    args.variants = (args.variants.split(",") if args.variants else
                     (["eager", "dice"] if args.dry_run else list(VARIANTS)))
    bad = [v for v in args.variants if v not in VARIANTS]
    if bad:
        print(f"torch_compile_bench: unknown variant(s) {bad} (expected {','.join(VARIANTS)})", file=sys.stderr)
        return 2
    args.reps = args.reps or (3 if args.dry_run else 30)
    if args.dry_run and args.dice_mode.startswith("tune"):
        args.dice_mode = "cache"  # nothing to tune without a GPU
    if not args.tasks and not args.gpt2:
        p.error("give KernelBench task files and/or --gpt2")

    records = []
    for t in args.tasks:
        path = t if os.path.isabs(t) or os.path.exists(t) else os.path.join(args.kb, t)
        label = "/".join(Path(path).parts[-2:])
        try:
            torch.manual_seed(0)
            mod = kb.load_task(path)
            if args.dry_run:
                shrink_task(mod, 32)
            model = mod.Model(*mod.get_init_inputs()).to(args.device).eval()
            inputs = [x.to(args.device) if isinstance(x, torch.Tensor) else x for x in mod.get_inputs()]
            rec = run_workload(label, model, inputs, args)
        except Exception as e:  # a broken task file must not end the run
            rec = {"task": label, "error": f"{type(e).__name__}: {e}"[:500], "variants": {}}
        records.append(rec)
        print(json.dumps(rec), flush=True)
    if args.gpt2:
        torch.manual_seed(0)
        if args.dry_run:
            batch, seq, width, heads, dtype = 2, 16, 64, 4, torch.float32
        else:
            batch, seq, width, heads, dtype = 8, 1024, 768, 12, torch.bfloat16
        model = GPT2Block(width, heads, seq).to(args.device, dtype).eval()
        x = torch.randn(batch, seq, width, device=args.device, dtype=dtype)
        rec = run_workload(f"gpt2-block b{batch} s{seq} {str(dtype).replace('torch.', '')}", model, [x], args)
        records.append(rec)
        print(json.dumps(rec), flush=True)
    with open(args.out, "a") as f:
        for r in records:
            f.write(json.dumps(r) + "\n")
    print(summarize(records, args.variants))
    return 0


if __name__ == "__main__":
    sys.exit(main())
