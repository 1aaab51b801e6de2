#!/usr/bin/env python3
"""KernelBench benchmark chunk: eager vs torch.compile vs the model after `dice tune`.

For each task file (KernelBench format: Model, get_inputs, get_init_inputs):
  1. eager time and torch.compile (default; max-autotune with --max-autotune;
     Inductor's inference freezing with --freezing),
  2. trace to TorchScript, `dice tune` it (subprocess; winners go to --cache),
  3. load the model `dice tune --save` wrote (frozen, with the tune's memory-format
     and attention decisions applied) in THIS process with libdice_torch_ext loaded and
     DICE_MODE=cache (the registered TorchScript pass forms fusion groups and
     serves the cached winners), check its outputs against eager within the
     per-dtype tolerance, and time it with the same timer;
  4. time the same frozen file loaded while the pass is off (DICE_MODE=off: no
     dice group in its graph) beside them: what capture alone (freezing,
     conv-batchnorm folding) gives. capture_speedup = eager_us / captured_us,
     winners_speedup = captured_us / dice_us; their product is speedup_vs_eager.
     With the `--save` file also timed with the pass off ("decided": capture
     plus the tune's memory-format / attention decisions, no dice group),
     decisions_speedup = captured_us / decided_us and winners_speedup =
     decided_us / dice_us.
  5. with --replay, two more columns (issue 18: a whole-model CUDA graph is
     reported apart and against mode="reduce-overhead"): the served model
     wrapped in dice_torch.replayed (its first call measures CUDA-graph replay
     against direct and keeps the faster; dice_replay_us, replay decision and
     its correctness), and torch.compile(mode="reduce-overhead")
     (reduce_overhead_us).
All times: CUDA events, warm-up, L2 flushed (256 MB write) before each
repetition, median of --reps, in µs. The variants are timed side by side:
each repetition runs eager, torch.compile, (max-autotune, freezing,) captured, dice once each in
a rotating order, so clock and thermal drift hit every column alike. One JSON line per task goes to --out;
bench/report.py turns the lines into the docs/PERF.md table.

Usage (GPU machine): python3 bench/kernelbench_bench.py TASK.py [...] --dice build/cli/dice
    --lib build/torch_ext/libdice_torch_ext.so --cache /tmp/dice-cache --out results.jsonl
"""
import argparse
import dataclasses
import importlib.util
import json
import os
import subprocess
import sys
import time

import torch

DTYPE_SPEC = {torch.float32: "f32", torch.float16: "f16", torch.bfloat16: "bf16"}
TOL = {torch.float32: 1e-4, torch.float16: 1e-2, torch.bfloat16: 1e-2}


def make_inputs(mod):
    """The task's get_inputs() generated directly on the GPU (torch's default
    device), seeded: the level-1 tasks draw 6-8 GB per tensor, which takes
    seconds on the CPU plus the copy."""
    torch.manual_seed(0)
    with torch.device("cuda"):
        xs = mod.get_inputs()
    return [x.cuda() if isinstance(x, torch.Tensor) else x for x in xs]


def load_task(path):
    # TorchScript names the traced class after the module: it must be an identifier.
    name = "kb_" + "".join(c if c.isalnum() else "_" for c in os.path.basename(path)[:-3])
    spec = importlib.util.spec_from_file_location(name, path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


# The converter's cast (examples/make_kernelbench_models.py), so that the
# benchmark and the converted models cast a task the same way.
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "examples"))
from make_kernelbench_models import DTYPES as DTYPE_NAMES, cast_floating  # noqa: E402  (--dtype's names)


def cast_task(model, inputs, dtype):
    """The task run in `dtype` (issue 18's level-3 figure asks for float32 and
    bf16), as make_kernelbench_models.cast_floating casts it; `dtype` None
    leaves both unchanged. Returns (model, inputs)."""
    return (model, inputs) if dtype is None else cast_floating(model, inputs, dtype)


_flush = None
#: dice_torch's sources (the --replay variant imports it from the checkout).
TORCH_EXT_PYTHON = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "torch_ext", "python")


def cuda_kernel_table(fn, runs=5):
    """Runs ``fn`` once, then ``runs`` times under torch.profiler; returns
    [(kernel or memcpy/memset name, µs per call)], largest first."""
    import collections

    from torch.profiler import ProfilerActivity, profile

    fn()
    torch.cuda.synchronize()
    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        for _ in range(runs):
            fn()
        torch.cuda.synchronize()
    acc = collections.Counter()
    for e in prof.events():
        if e.device_type == torch.autograd.DeviceType.CUDA:
            acc[e.name] += e.device_time_total
    return [(k, v / runs) for k, v in acc.most_common()]


def bench_interleaved(fns, reps):
    """Median µs per name of fns {name: callable}, timed round-robin.

    Each repetition times every variant once (order rotated per repetition):
    warm-up 3 calls each, a 256 MB write flushes L2 before every timed call,
    CUDA events around the call."""
    global _flush
    if _flush is None:
        _flush = torch.empty(256 * 1024 * 1024 // 4, dtype=torch.float32, device="cuda")
    names = list(fns)
    for name in names:
        for _ in range(3):
            fns[name]()
    torch.cuda.synchronize()
    times = {n: [] for n in names}
    for r in range(reps):
        for i in range(len(names)):
            name = names[(i + r) % len(names)]
            _flush.zero_()
            start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            start.record()
            fns[name]()
            end.record()
            torch.cuda.synchronize()
            times[name].append(start.elapsed_time(end) * 1000.0)
    return {n: sorted(t)[len(t) // 2] for n, t in times.items()}


def flatten(out):
    if isinstance(out, torch.Tensor):
        return [out]
    if isinstance(out, (tuple, list)):
        return [t for o in out for t in flatten(o)]
    return []


def outputs_match(got, want):
    g, w = flatten(got), flatten(want)
    if len(g) != len(w):
        return False, "output count differs"
    worst = 0.0
    for a, b in zip(g, w):
        if a.shape != b.shape or a.dtype != b.dtype:
            return False, "shape/dtype differs"
        tol = TOL.get(b.dtype, 1e-4)
        a64, b64 = a.double(), b.double()
        if not torch.equal(torch.isnan(a64), torch.isnan(b64)):
            return False, "NaN placement differs"
        err = (a64 - b64).abs().nan_to_num(0)
        bad = int((err > tol + tol * b64.abs().nan_to_num(0)).sum())
        worst = max(worst, float(err.max()) if err.numel() else 0.0)
        if bad:
            return False, f"{bad} elements outside tolerance (max abs err {worst:.3g})"
    return True, f"max abs err {worst:.3g}"


def group_stats():
    """Per-fusion-group counters of this process (torch.ops.dice.group_stats:
    calls, hits, fallbacks and their reasons); [] when the op is missing."""
    try:
        return json.loads(torch.ops.dice.group_stats())
    except (AttributeError, RuntimeError):
        return []


def dice_groups_in_last_graph():
    """dice::FusionGroup nodes in the graph TorchScript executed last."""
    return str(torch.jit.last_executed_optimized_graph()).count("dice::FusionGroup")


def load_captured(pt, inputs):
    """The frozen TorchScript file as capture alone leaves it: loaded and run
    (the profiling executor optimizes it on these first calls) while the
    registered dice pass is off (DICE_MODE=off), so its graph holds no dice
    group; DICE_MODE is back to "cache" on return."""
    os.environ["DICE_MODE"] = "off"
    try:
        cap = torch.jit.load(pt).cuda().eval()
        for _ in range(3):
            cap(*inputs)
    finally:
        os.environ["DICE_MODE"] = "cache"
    return cap


def attribution(eager_us, captured_us, dice_us, decided_us=None):
    """capture_speedup = eager / captured (freezing, folding: capture alone);
    decisions_speedup = captured / decided (the tune's memory-format and
    attention decisions: the `--save` file with no dice group), when measured;
    winners_speedup = decided (else captured) / dice (what the served winners
    added on top). Their product is eager / dice. None for a time not measured."""
    ok = lambda v: isinstance(v, (int, float)) and v > 0
    base = decided_us if ok(decided_us) else captured_us
    return {"capture_speedup": eager_us / captured_us if ok(eager_us) and ok(captured_us) else None,
            "decisions_speedup": captured_us / decided_us if ok(captured_us) and ok(decided_us) else None,
            "winners_speedup": base / dice_us if ok(base) and ok(dice_us) else None}


def match_against_float64(model, inputs, got, want, strict_detail):
    """Second opinion when `got` misses eager's output by more than the
    per-dtype tolerance: long float32 reductions (a sum over 8192 products)
    differ from eager by reduction order alone. Both are compared with the
    model run in float64; `got` passes when every element is within
    tol + tol*|ref64| + 2 * (eager's own worst error vs float64), i.e. it is
    at most about as wrong as eager. Returns (ok, detail)."""
    import copy
    try:
        m64 = copy.deepcopy(model).double()
        ref64 = m64(*[x.double() for x in inputs])
    except (RuntimeError, torch.OutOfMemoryError) as e:
        return False, f"{strict_detail}; no float64 check: {type(e).__name__}"
    g, w, r = flatten(got), flatten(want), flatten(ref64)
    worst = 0.0
    for a, b, c in zip(g, w, r):
        tol = TOL.get(b.dtype, 1e-4)
        eager_err = float((b.double() - c).abs().nan_to_num(0).max()) if c.numel() else 0.0
        err = (a.double() - c).abs().nan_to_num(0)
        worst = max(worst, float(err.max()) if err.numel() else 0.0)
        if bool((err > tol + tol * c.abs() + 2 * eager_err).any()):
            return False, f"{strict_detail}; worse than eager vs float64 (ours {worst:.3g}, eager {eager_err:.3g})"
    del m64, ref64
    return True, f"{strict_detail} vs eager; vs float64 ours {worst:.3g} within 2x eager's own error"


def replay_variants(model, dm, inputs, ref, args, rec):
    """--replay's two variants: the served model ``dm`` through
    dice_torch.replayed (first call: replay measured against direct, in
    tune-sync, decision stored in --cache; second call checked against eager's
    ``ref``) and torch.compile(model, mode="reduce-overhead") warmed up (its
    CUDA graphs are recorded on the first calls). Fills rec["replay"] and
    rec["replay_correct"]; returns (replayed, reduce_overhead), None for one
    that failed (its error in rec)."""
    if TORCH_EXT_PYTHON not in sys.path:
        sys.path.insert(0, TORCH_EXT_PYTHON)
    from dice_torch import replay as dice_replay

    rp = ro = None
    try:
        rp = dice_replay.replayed(dm, mode="tune-sync", cache_dir=args.cache)
        rp(*inputs)
        ok, detail = outputs_match(rp(*inputs), ref)
        d = rp.decision
        rec["replay"] = dataclasses.asdict(d)
        rec["replay_correct"], rec["replay_correct_detail"] = ok, detail
    except Exception as e:  # the other columns still run
        rp, rec["replay_error"] = None, f"{type(e).__name__}: {e}"[:300]
    try:
        # Its own copy of the model, called after cudagraph_mark_step_begin()
        # as PyTorch asks: a model keeping its output as state (VanillaRNN's
        # self.hidden) would otherwise read a CUDA-graph output overwritten by
        # the next replay, or hand it to the other variants.
        compiled_ro = torch.compile(copy.deepcopy(model), mode="reduce-overhead")

        def ro(*xs):
            torch.compiler.cudagraph_mark_step_begin()
            return compiled_ro(*xs)

        for _ in range(3):
            ro(*inputs)
    except Exception as e:
        ro, rec["reduce_overhead_error"] = None, f"{type(e).__name__}: {e}"[:300]
    return rp, ro


def run_dice_tune(pt, served_pt, inputs, args, rec):
    """Runs `dice tune` on the traced model `pt` (writing `served_pt` with
    --save and `pt`.json) and records its time, exit code and report in `rec`."""
    specs = ["x".join(str(d) for d in x.shape) + ":" + DTYPE_SPEC[x.dtype] for x in inputs]
    cmd = [args.dice, "tune", pt, "--cache", args.cache, "--budget-s", str(args.budget_s),
           "--json", pt + ".json", "--save", served_pt] + [a for s in specs for a in ("--input", s)]
    t0 = time.time()
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=args.task_timeout)
    rec["tune_s"] = time.time() - t0
    rec["tune_rc"] = proc.returncode
    sys.stdout.write(proc.stdout[-3000:])
    if proc.returncode not in (0, 1):
        rec["error"] = "dice tune exit %d: %s" % (proc.returncode, proc.stderr[-500:])
    try:
        with open(pt + ".json") as f:
            tune = json.load(f)
        rec["groups"] = tune["groups"]
        rec["dice_before_us"], rec["dice_after_us"] = tune["before_us"], tune["after_us"]
        rec["dice_captured_us"] = tune.get("captured_us")  # dice tune's own capture-alone time
        rec["memory_format"] = (tune.get("memory_format") or {}).get("format")
        rec["attention"] = (tune.get("attention") or {}).get("choice")
    except (OSError, ValueError, KeyError) as e:
        rec.setdefault("error", f"no tune report: {e}")


def serving_since(stats_before):
    """Per fusion group called since `stats_before` (group_stats() then, by
    id): its calls, hits and fallback reasons over that interval."""
    serving = []
    for g in group_stats():
        old = stats_before.get(g["id"], {})
        calls = g["calls"] - old.get("calls", 0)
        if calls:
            reasons = {r: n - old.get("fallback_reasons", {}).get(r, 0) for r, n in g["fallback_reasons"].items()}
            serving.append({"group": g["summary"], "calls": calls, "hits": g["hits"] - old.get("hits", 0),
                            "fallback_reasons": {r: n for r, n in reasons.items() if n}})
    return serving


def run_task(path, args):
    name = os.path.basename(path)[:-3]
    level = os.path.basename(os.path.dirname(path))
    rec = {"task": f"{level}/{name}", "gpu": torch.cuda.get_device_name(0),
           "precision": "strict" if args.strict_fp32 else "default",
           "dtype": args.dtype or "task",  # "task": the task's own dtypes
           # the host's load when the task starts: other work on the CPUs slows
           # launch-bound variants (torch_compile_bench.stamp_row)
           "host_load1": round(os.getloadavg()[0], 2)}
    torch.manual_seed(0)
    mod = load_task(path)
    model = mod.Model(*mod.get_init_inputs()).cuda().eval()
    inputs = make_inputs(mod)
    model, inputs = cast_task(model, inputs, DTYPE_NAMES.get(args.dtype))
    if not all(isinstance(x, torch.Tensor) and x.dtype in DTYPE_SPEC for x in inputs):
        rec["error"] = "non-tensor or non-float input; skipped"
        return rec
    with torch.no_grad():
        ref = model(*inputs)
        t0 = time.time()
        compiled = torch.compile(model)
        compiled(*inputs)
        rec["compile_s"] = time.time() - t0
        ma = None
        if args.max_autotune:
            ma = torch.compile(model, mode="max-autotune-no-cudagraphs")
            ma(*inputs)
        fz = None
        if args.freezing:
            # Inductor's inference freezing (parameters become constants,
            # conv-batchnorm folding, weight layout chosen once): issue 18's
            # second baseline. The config is read when the graph compiles,
            # i.e. on this first call; passing it as an option makes a backend
            # of its own, so dynamo does not reuse the default compile's code.
            fz = torch.compile(model, options={"freezing": True})
            t1 = time.time()
            fz(*inputs)
            rec["freezing_compile_s"] = time.time() - t1
        # Frozen (parameters become constants), as dice::torch_ext::optimize
        # does: the registered pass sees no types for unfrozen parameters
        # (module attributes) and would leave their ops out of the groups
        # that `dice tune` (which freezes) tuned.
        traced = torch.jit.trace(model, tuple(inputs), check_trace=False).eval()
        try:
            traced = torch.jit.freeze(traced)
        except RuntimeError as e:
            # PyTorch's own freeze passes can assert on a model (level2/46:
            # frozen_conv_folding.cpp:276). `dice tune` falls back to an
            # unfrozen capture by itself (issue 18 item 6); the row says so.
            rec["bench_freeze_error"] = str(e).splitlines()[0][:300]
    pt = os.path.join(args.workdir, name + ".pt")
    traced.save(pt)
    # Give the GPU memory back while `dice tune` (and its worker) run: large
    # level-1 tasks hold several GB per tensor.
    # The inputs stay on the GPU (at most ~8 GB per task); the reference
    # output is recomputed after tuning instead of kept.
    ref = None
    del traced
    model.cpu()
    torch.cuda.empty_cache()
    # What `dice tune --save` writes: the captured model with the tune's
    # memory-format and attention decisions applied; the "dice" column serves
    # it (as a user deploying the tuned model would), "captured" stays `pt`.
    served_pt = os.path.join(args.workdir, name + ".served.pt")
    if os.path.exists(served_pt):
        os.remove(served_pt)
    run_dice_tune(pt, served_pt, inputs, args, rec)
    # The tuned model served from the cache, in this process, same timer.
    os.environ["DICE_MODE"] = "cache"
    os.environ["DICE_CACHE_DIR"] = args.cache
    model.cuda()
    stats_before = {g["id"]: g for g in group_stats()}
    with torch.no_grad():
        ref = model(*inputs)
        # Which file the "dice" column serves: the `--save` file, or (tune
        # failed before writing it) the traced original, named in the row.
        rec["served"] = "tuned (--save)" if os.path.exists(served_pt) else "original (no --save file written)"
        dm = torch.jit.load(served_pt if os.path.exists(served_pt) else pt).cuda().eval()
        for _ in range(3):  # the profiling executor optimizes after a few runs
            out = dm(*inputs)
        ok, detail = outputs_match(out, ref)
        if not ok and "outside tolerance" in detail:
            ok, detail = match_against_float64(model, inputs, out, ref, detail)
        rec["correct"], rec["correct_detail"] = ok, detail
        del out
        rp = ro = None
        if args.replay:
            rp, ro = replay_variants(model, dm, inputs, ref, args, rec)
        ref = None
        cap = load_captured(pt, inputs)
        dec = load_captured(served_pt, inputs) if os.path.exists(served_pt) else None
        fns = {"eager": lambda: model(*inputs), "compile": lambda: compiled(*inputs), "captured": lambda: cap(*inputs),
               "dice": lambda: dm(*inputs)}
        if dec is not None:
            fns["decided"] = lambda: dec(*inputs)
        if ma is not None:
            fns["max_autotune"] = lambda: ma(*inputs)
        if fz is not None:
            fns["freezing"] = lambda: fz(*inputs)
        if rp is not None:
            fns["dice_replay"] = lambda: rp(*inputs)
        if ro is not None:
            fns["reduce_overhead"] = lambda: ro(*inputs)
        us = bench_interleaved(fns, args.reps)
        for name in ("dice_replay", "reduce_overhead"):
            if name in us:
                rec[name + "_us"] = us[name]
        rec["eager_us"], rec["compile_us"], rec["dice_us"] = us["eager"], us["compile"], us["dice"]
        if ma is not None:
            rec["max_autotune_us"] = us["max_autotune"]
        if fz is not None:
            rec["freezing_us"] = us["freezing"]
            rec["speedup_vs_freezing"] = us["freezing"] / us["dice"]
        # Still no dice group in the captured model's graph (a re-optimisation
        # while DICE_MODE=cache would have run the pass): else it is no
        # capture-alone time.
        cap(*inputs)
        rec["captured_dice_groups"] = dice_groups_in_last_graph()
        rec["captured_us"] = us["captured"] if rec["captured_dice_groups"] == 0 else None
        rec["decided_us"] = None
        if dec is not None:
            dec(*inputs)
            rec["decided_us"] = us["decided"] if dice_groups_in_last_graph() == 0 else None
    # What the served model did per fusion group during this task: hits
    # (winner kernel ran) and fallbacks with their reasons.
    rec["serving"] = serving_since(stats_before)
    del compiled, ma, fz, dm, cap, dec, rp, ro
    torch.cuda.empty_cache()
    os.environ["DICE_MODE"] = "off"
    rec["speedup_vs_eager"] = rec["eager_us"] / rec["dice_us"]
    rec["speedup_vs_compile"] = rec["compile_us"] / rec["dice_us"]
    rec.update(attribution(rec["eager_us"], rec["captured_us"], rec["dice_us"], rec.get("decided_us")))
    return rec


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("tasks", nargs="+")
    p.add_argument("--dice", default="build/cli/dice")
    p.add_argument("--lib", default="build/torch_ext/libdice_torch_ext.so")
    p.add_argument("--cache", default="/tmp/dice-bench-cache")
    p.add_argument("--workdir", default="/tmp/dice-bench")
    p.add_argument("--out", default="bench-results.jsonl")
    p.add_argument("--reps", type=int, default=50)
    p.add_argument("--budget-s", type=float, default=30)
    p.add_argument("--task-timeout", type=float, default=240)
    p.add_argument("--max-autotune", action="store_true")
    p.add_argument("--strict-fp32", action="store_true",
                   help="strict float32 column: both TF32 switches off for eager and torch.compile, "
                        "DICE_STRICT_FP32=1 for dice tune and the served model (rows say precision=strict)")
    p.add_argument("--freezing", action="store_true",
                   help="also time torch.compile with torch._inductor.config.freezing=True (Inductor's inference "
                        "freezing) in the same round-robin loop: column freezing_us, speedup_vs_freezing")
    p.add_argument("--replay", action="store_true",
                   help="also time the served model with dice's CUDA-graph replay (dice_torch.replayed) and "
                        "torch.compile(mode=\"reduce-overhead\"): columns dice_replay_us, reduce_overhead_us")
    p.add_argument("--dtype", choices=sorted(DTYPE_NAMES), default=None,
                   help="run every variant in this dtype (model and floating inputs converted; rows say dtype); "
                        "default: the task's own")
    p.add_argument("--warm-compile-only", action="store_true",
                   help="only run torch.compile once per task (fills Inductor's on-disk caches; run these in "
                        "parallel before the timed, sequential pass)")
    args = p.parse_args()
    os.makedirs(args.workdir, exist_ok=True)
    if args.strict_fp32:
        # Issue 18's strict column: no TF32 anywhere. Eager and torch.compile
        # follow PyTorch's switches; `dice tune` (a subprocess, inheriting the
        # environment) and the served model follow DICE_STRICT_FP32.
        torch.backends.cuda.matmul.allow_tf32 = False
        torch.backends.cudnn.allow_tf32 = False
        os.environ["DICE_STRICT_FP32"] = "1"
    if args.warm_compile_only:
        for path in args.tasks:
            mod = load_task(path)
            model = mod.Model(*mod.get_init_inputs()).cuda().eval()
            model, inputs = cast_task(model, make_inputs(mod), DTYPE_NAMES.get(args.dtype))
            with torch.no_grad():
                torch.compile(model)(*inputs)
                if args.max_autotune:
                    torch.compile(model, mode="max-autotune-no-cudagraphs")(*inputs)
                if args.freezing:
                    torch.compile(model, options={"freezing": True})(*inputs)
                if args.replay:
                    torch.compile(model, mode="reduce-overhead")(*inputs)
            print("warmed", path, flush=True)
        return
    torch.ops.load_library(args.lib)
    for path in args.tasks:
        try:
            rec = run_task(path, args)
        except Exception as e:  # one broken task must not end the chunk
            rec = {"task": path, "error": f"{type(e).__name__}: {e}"[:500]}
        with open(args.out, "a") as f:
            f.write(json.dumps(rec) + "\n")
        print(json.dumps({k: v for k, v in rec.items() if k != "groups"}), flush=True)


if __name__ == "__main__":
    main()
