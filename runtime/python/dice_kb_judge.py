#!/usr/bin/env python3
"""KernelBench-protocol judge for whole programs (reference `Model` vs candidate `ModelNew`).

The Python half of dice::JudgeProgram (runtime/include/dice/runtime/program_judge.h),
also imported by bench/infill_eval.py. Protocol (KernelBench's, as DICE
evaluates end-to-end and infilling generations):
  1. compile: import the candidate program; a ModelNew built with
     torch.utils.cpp_extension.load_inline compiles here (TORCH_EXTENSIONS_DIR
     and TORCH_CUDA_ARCH_LIST come from the environment the caller sets);
  2. correctness: Model and ModelNew built from the reference's
     get_init_inputs() after the same torch.manual_seed(seed); `trials` trials
     of get_inputs() seeded seed+1+t, on the device; outputs (tensors, nested
     tuples/lists flattened) must match in count and shape and satisfy
     torch.allclose(atol, rtol) (KernelBench: 1e-2 / 1e-2);
  3. timing: both models on the same inputs, 3 warm-ups then the median of
     `reps` runs in ms (CUDA events on cuda; perf_counter on cpu).

As a script it judges one program and prints lines "PHASE compile",
"PHASE correctness", "PHASE timing" as it goes, then one line
"RESULT {json}" with: outcome (correct | incorrect | parse_error |
bad_program | compile_error | runtime_error | no_device), compiled, correct,
ref_ms, new_ms, speedup (ref_ms / new_ms), compile_s, error. A crash or a hang
ends the process; the caller (C++) records it from the missing RESULT line.
Exit status 0 whenever a RESULT line was printed.
"""
import argparse
import importlib.util
import json
import os
import re
import sys
import time


def load_module(name, path):
    """Imports the file at `path` as module `name` (raises what the file raises)."""
    spec = importlib.util.spec_from_file_location(name, path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def flat(out):
    """The tensors of a model output (a tensor, or nested tuples/lists), in order."""
    import torch
    if isinstance(out, torch.Tensor):
        return [out]
    if isinstance(out, (list, tuple)):
        return [t for o in out for t in flat(o)]
    return []


def to_device(xs, device):
    import torch
    return [x.to(device) if isinstance(x, torch.Tensor) else x for x in xs]


def cpu_timing_threads():
    """Intra-op threads for timing on the CPU: $DICE_CPU_TIMING_THREADS
    (1..256), default 1, read by the rule of every DICE integer setting
    (core/include/dice/core/env.h EnvInt, which the dice CLI uses): junk or
    out of range is the default after a warning on stderr naming the
    variable. One thread because with several on shared cores an op waits
    for a descheduled thread, and times come in scheduler ticks."""
    v = os.environ.get("DICE_CPU_TIMING_THREADS", "")
    if not v:
        return 1
    if re.fullmatch(r"[+-]?[0-9]+", v) and 1 <= int(v) <= 256:
        return int(v)
    if v not in _warned_env:  # once per value and process, as EnvInt
        _warned_env.add(v)
        sys.stderr.write("dice: warning: DICE_CPU_TIMING_THREADS='%s' is not an integer in [1, 256]; "
                         "using the default 1\n" % v)
    return 1


_warned_env = set()


def median_ms(fn, reps, device="cuda"):
    """Median wall time of fn() in ms over `reps` runs after 3 warm-ups; on
    the CPU with cpu_timing_threads() intra-op threads (restored after)."""
    import torch
    cuda = device.startswith("cuda")
    if not cuda:
        previous = torch.get_num_threads()
        torch.set_num_threads(cpu_timing_threads())
        try:
            return _median_ms(fn, reps, False)
        finally:
            torch.set_num_threads(previous)
    return _median_ms(fn, reps, True)


def _median_ms(fn, reps, cuda):
    import torch
    for _ in range(3):
        fn()
    if cuda:
        torch.cuda.synchronize()
    times = []
    for _ in range(reps):
        if cuda:
            s, e = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            s.record()
            fn()
            e.record()
            e.synchronize()
            times.append(s.elapsed_time(e))
        else:
            t0 = time.perf_counter()
            fn()
            times.append((time.perf_counter() - t0) * 1e3)
    times.sort()
    return times[len(times) // 2]


def judge_models(ref, new, device="cuda", trials=5, reps=20, seed=42, atol=1e-2, rtol=1e-2, phase=lambda p: None):
    """Correctness then timing of imported modules `ref` (Model, get_inputs,
    get_init_inputs) and `new` (ModelNew). Returns {"correct": bool, "error"?,
    "ref_ms", "new_ms", "speedup"} (times only when correct). Raises what the
    models raise."""
    import torch
    cuda = device.startswith("cuda")
    init = ref.get_init_inputs()
    torch.manual_seed(seed)
    model = ref.Model(*init).to(device).eval()
    torch.manual_seed(seed)
    model_new = new.ModelNew(*init).to(device).eval()
    rec = {"correct": False}
    phase("correctness")
    with torch.no_grad():
        for t in range(trials):
            torch.manual_seed(seed + 1 + t)
            inputs = to_device(ref.get_inputs(), device)
            want = flat(model(*inputs))
            got = flat(model_new(*inputs))
            if cuda:
                torch.cuda.synchronize()
            if len(want) != len(got):
                rec["error"] = f"trial {t}: {len(got)} outputs, the reference has {len(want)}"
                return rec
            for k, (w, g) in enumerate(zip(want, got)):
                if w.shape != g.shape:
                    rec["error"] = f"trial {t}, output {k}: shape {tuple(g.shape)}, want {tuple(w.shape)}"
                    return rec
                if not torch.allclose(g.float(), w.float(), atol=atol, rtol=rtol):
                    diff = (g.float() - w.float()).abs().max().item()
                    rec["error"] = f"trial {t}, output {k}: max abs diff {diff:.4g} (atol={atol:g}, rtol={rtol:g})"
                    return rec
        rec["correct"] = True
        phase("timing")
        torch.manual_seed(seed)
        inputs = to_device(ref.get_inputs(), device)
        rec["ref_ms"] = median_ms(lambda: model(*inputs), reps, device)
        rec["new_ms"] = median_ms(lambda: model_new(*inputs), reps, device)
        rec["speedup"] = rec["ref_ms"] / rec["new_ms"] if rec["new_ms"] > 0 else 0.0
    return rec


def judge_files(reference, program, device="cuda", trials=5, reps=20, seed=42, atol=1e-2, rtol=1e-2,
                phase=lambda p: None):
    """The whole protocol on two files; never raises for a bad candidate (the
    outcome says what went wrong)."""
    res = {"outcome": "runtime_error", "compiled": False, "correct": False}
    try:
        import torch
    except ImportError as e:
        return dict(res, outcome="no_device", error=f"torch is not importable: {e}")
    if device.startswith("cuda") and not torch.cuda.is_available():
        return dict(res, outcome="no_device", error="no CUDA device (torch.cuda.is_available() is False)")
    try:
        ref = load_module("dice_kb_reference", reference)
    except Exception as e:  # the reference is the caller's input: say so
        return dict(res, outcome="bad_program", error=f"reference: {type(e).__name__}: {str(e)[:600]}")
    phase("compile")
    try:
        with open(program) as f:
            compile(f.read(), program, "exec")
    except SyntaxError as e:
        return dict(res, outcome="parse_error", error=f"SyntaxError: {e}")
    t0 = time.time()
    try:
        new = load_module("dice_kb_candidate", program)
    except Exception as e:  # load_inline build failures land here
        return dict(res, outcome="compile_error", compile_s=time.time() - t0,
                    error=f"{type(e).__name__}: {str(e)[-1500:]}")
    res["compile_s"] = time.time() - t0
    if not hasattr(new, "ModelNew"):
        return dict(res, outcome="bad_program", error="the program defines no ModelNew")
    res["compiled"] = True
    try:
        rec = judge_models(ref, new, device, trials, reps, seed, atol, rtol, phase)
    except Exception as e:
        return dict(res, outcome="runtime_error", error=f"{type(e).__name__}: {str(e)[:600]}")
    res.update(rec)
    res["outcome"] = "correct" if rec["correct"] else "incorrect"
    return res


def main(argv):
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--reference", required=True, help="KernelBench reference program (Model, get_inputs, get_init_inputs)")
    p.add_argument("--program", required=True, help="candidate program defining ModelNew")
    p.add_argument("--device", default="cuda", help="cuda | cuda:N | cpu")
    p.add_argument("--trials", type=int, default=5)
    p.add_argument("--reps", type=int, default=20)
    p.add_argument("--seed", type=int, default=42)
    p.add_argument("--atol", type=float, default=1e-2)
    p.add_argument("--rtol", type=float, default=1e-2)
    a = p.parse_args(argv)

    def phase(name):
        print(f"PHASE {name}", flush=True)

    res = judge_files(a.reference, a.program, a.device, a.trials, a.reps, a.seed, a.atol, a.rtol, phase)
    print("RESULT " + json.dumps(res), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
