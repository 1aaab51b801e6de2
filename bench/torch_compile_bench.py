#!/usr/bin/env python3
"""torch.compile(backend="dice") side by side with eager, torch.compile
(default) and torch.compile(mode="max-autotune-no-cudagraphs"), in one run.

Workloads: KernelBench task files (Model, get_inputs, get_init_inputs) and,
with --gpt2, a GPT-2-style transformer block in plain PyTorch (pre-LN causal
self-attention written out with matmul + scale + additive mask + softmax, and
a GELU MLP; bf16, batch 8, sequence 1024, width 768, 12 heads).

Per workload and variant: correctness against eager (per-dtype tolerance of
bench/kernelbench_bench.py: |err| <= tol + tol*|ref|, NaN placement equal;
a workload running an op whose summation order PyTorch does not fix (conv,
conv_transpose, mm/bmm/addmm/linear/matmul, reductions: ORDER_FREE_OPS) gets
the float64 second opinion of kernelbench_bench.match_against_float64 when it
misses that tolerance; docs/DECISIONS.md "Correctness of order-free ops"),
time (µs: CUDA events, L2 flushed, median of --reps; wall-clock median on
CPU), first-call time (s: compile, and for dice in tune-sync mode the tuning).
Summary: fast_1 / fast_2 (share of workloads correct and >= 1x / >= 2x
faster than eager), geomean speedup vs eager and vs max-autotune. One JSON
line per workload goes to --out; the markdown table is printed.

GPU machine (the lead's run):
    python3 bench/torch_compile_bench.py level1/23_Softmax.py level2/... --gpt2 \
        --kb .deps/kernelbench --cache /tmp/dice-cache --out $OUT/compile.jsonl
Issue 17's workload lists (--list level3-dev: every task of <kb>/level3;
--list level2-20: the 20 level-2 tasks of WORKLOAD_LISTS), in chunks that fit
one device call: --time-budget-s stops starting workloads once the next one
would likely pass the budget (elapsed + the median wall time of the
workloads so far; put the longest workloads last), rows are appended to --out as each workload
ends, and --skip-done skips tasks already in --out (so the next call resumes):
    python3 bench/torch_compile_bench.py --list level3-dev --cold-inductor-cache \
        --time-budget-s 480 --skip-done --out $OUT/compile.jsonl
Variants: eager, inductor (alias compile-default), max-autotune (alias
max-autotune-no-cudagraphs), dice, inductor-via-backend (Inductor alone
compiled by dice's own path, pipeline.plain_inductor, in a custom backend:
what the guard serves when it keeps Inductor; it should time as inductor
does), reduce-overhead (Inductor with CUDA graphs: the reference for
launch-bound networks), dice-max-autotune (backend="dice" with
rest="max-autotune": dice over max-autotune-no-cudagraphs, measured against
it; its own kernel cache dir, --cache + "-max-autotune"). --kernel-sum adds each variant's GPU kernel time
per call (kernel_us) beside its wall time. Each row has task, correct (dice's),
speedup_vs_compile (dice vs torch.compile default) and per variant
first_call_s (compile; with --cold-inductor-cache each variant from empty
Inductor and Triton caches). --first-call-cap-s N stops the first call of the
--cap-variants (default max-autotune, whose autotuning takes 54-132 s on the
small level-3 MLPs and more than 300 s on AlexNet on an H100) after N s: that
variant records first_call_capped and a lower-bound first_call_s, is not
timed, and the other variants of the workload still are.
CPU dry run (tiny shapes: module-level ints of each task capped at 32; the
GPT-2 block at batch 2, sequence 16, width 64; float32):
    python3 bench/torch_compile_bench.py level1/23_Softmax.py --gpt2 --dry-run
"""

from __future__ import annotations

import argparse
import contextlib
import copy
import dataclasses
import json
import math
import os
import signal
import statistics
import sys
import time
from pathlib import Path

import torch
import torch.nn as nn

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "bench"))
sys.path.insert(0, str(ROOT / "torch_ext" / "python"))

import kernelbench_bench as kb  # noqa: E402  (load_task, bench_interleaved, outputs_match)
from tasks.gpt2_block import Model as _Gpt2Task  # noqa: E402

VARIANTS = ("eager", "inductor", "max-autotune", "dice", "inductor-via-backend", "reduce-overhead",
            "dice-max-autotune")
DEFAULT_VARIANTS = VARIANTS[:4]
ALIASES = {"compile-default": "inductor", "max-autotune-no-cudagraphs": "max-autotune"}

#: Issue 17's lists: level-2 convolution tasks, then GEMM tasks (by number).
LEVEL2_20 = (1, 2, 4, 10, 17, 21, 32, 46, 52, 54, 12, 22, 29, 40, 53, 56, 59, 62, 70, 76)

#: ATen ops whose summation order PyTorch itself does not fix (cuDNN / cuBLAS
#: pick the algorithm, reductions split as they like): outputs depending on
#: them get the float64 second opinion (docs/DECISIONS.md).
ORDER_FREE_OPS = frozenset({
    "convolution", "_convolution", "cudnn_convolution", "cudnn_convolution_transpose", "conv2d", "conv1d",
    "conv3d", "conv_transpose1d", "conv_transpose2d", "conv_transpose3d", "mkldnn_convolution",
    "mm", "bmm", "addmm", "baddbmm", "addbmm", "matmul", "linear", "_scaled_dot_product_flash_attention",
    "_scaled_dot_product_efficient_attention", "_scaled_dot_product_cudnn_attention",
    "sum", "mean", "var", "std", "var_mean", "std_mean", "prod", "norm", "linalg_vector_norm", "logsumexp",
    "_softmax", "_log_softmax", "native_layer_norm", "native_group_norm", "native_batch_norm",
    "_native_batch_norm_legit_no_training", "cumsum", "avg_pool2d", "avg_pool3d", "adaptive_avg_pool2d",
    "_adaptive_avg_pool2d", "_adaptive_avg_pool3d", "_cdist_forward", "einsum",
})


def workload_list(name: str, kb_root: str) -> list[str]:
    """Task paths of a named list: "level3-dev" (every .py of <kb>/level3,
    sorted by task number) or "level2-20" (LEVEL2_20, in that order).
    Raises:
        ValueError: an unknown list, or a listed level-2 task missing under kb_root."""
    def number(p: Path) -> int:
        head = p.name.split("_", 1)[0]
        return int(head) if head.isdigit() else 1 << 30

    if name == "level3-dev":
        return [str(p) for p in sorted(Path(kb_root, "level3").glob("*.py"), key=number)]
    if name == "level2-20":
        files = {number(p): p for p in Path(kb_root, "level2").glob("*.py")}
        missing = [n for n in LEVEL2_20 if n not in files]
        if missing:
            raise ValueError(f"level2-20: tasks {missing} not found under {kb_root}/level2")
        return [str(files[n]) for n in LEVEL2_20]
    raise ValueError(f"unknown workload list '{name}' (expected level3-dev|level2-20)")


def order_free_ops(model: nn.Module, inputs: list) -> set[str]:
    """The ORDER_FREE_OPS the model runs on ``inputs`` (one eager call under a
    dispatch mode that records ATen op names)."""
    from torch.utils._python_dispatch import TorchDispatchMode

    seen: set[str] = set()

    class Record(TorchDispatchMode):
        def __torch_dispatch__(self, func, types, args=(), kwargs=None):
            name = func.overloadpacket.__name__
            if name in ORDER_FREE_OPS:
                seen.add(name)
            return func(*args, **(kwargs or {}))

    with torch.no_grad(), Record():
        model(*inputs)
    return seen


def check_correct(model: nn.Module, inputs: list, out, ref, order_free: set[str]) -> tuple[bool, str]:
    """Strict per-dtype tolerance against eager; when that fails and the model
    runs an order-free op, the float64 second opinion decides (ours at most
    about as wrong as eager, both against the model in float64)."""
    ok, detail = kb.outputs_match(out, ref)
    if ok or "outside tolerance" not in detail or not order_free:
        return ok, detail
    try:
        ok, detail = kb.match_against_float64(model, inputs, out, ref, detail)
    except Exception as e:  # e.g. a non-tensor input without .double()
        return False, f"{detail}; no float64 check: {type(e).__name__}"
    return ok, f"{detail} (float64 second opinion: {', '.join(sorted(order_free))})"


class GPT2Block(_Gpt2Task):
    """Pre-LN GPT-2 block: x + attn(ln_1(x)), then + mlp(ln_2(.)). Input and
    output [batch, seq, width]; causal mask as an additive -inf buffer. The
    model of bench/tasks/gpt2_block.py (what run_chunk.sh times through
    `dice tune`), with its sizes as defaults; float32 until .to(dtype)."""

    def __init__(self, width: int = 768, heads: int = 12, seq: int = 1024):
        super().__init__(width, heads, seq)


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


def kernel_sum_us(fn, runs: int = 5) -> float:
    """GPU time of one call of ``fn`` (µs): the sum of its CUDA kernels' and
    memcpy/memset durations under torch.profiler (kb.cuda_kernel_table).
    Beside the wall time (CUDA events, ``us``) it says whether a variant is
    bound by its kernels or by the CPU launching them."""
    return sum(us for _, us in kb.cuda_kernel_table(fn, runs))


def fresh_compile_caches() -> None:
    """Empty compile caches for the next variant's first call: new
    TORCHINDUCTOR_CACHE_DIR and TRITON_CACHE_DIR (temporary dirs, left for the
    OS to clean) and Inductor's in-process caches cleared
    (torch._inductor.utils.clear_caches). Without this, a variant compiled
    after another reuses its FX graphs and Triton kernels, and its first call
    looks faster than a user's would (session 24's rows had this: one cold
    cache per run)."""
    import tempfile

    os.environ["TORCHINDUCTOR_CACHE_DIR"] = tempfile.mkdtemp(prefix="inductor-cold-")
    os.environ["TRITON_CACHE_DIR"] = tempfile.mkdtemp(prefix="triton-cold-")
    try:
        from torch._inductor.utils import clear_caches
        clear_caches()
    except ImportError:  # an older torch: the on-disk caches are still fresh
        pass


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
    if name == "reduce-overhead":  # Inductor with CUDA graphs: the launch-overhead reference
        return torch.compile(model, mode="reduce-overhead")
    if name == "inductor-via-backend":  # what the dice backend serves when the guard keeps Inductor alone
        from dice_torch import pipeline

        return torch.compile(model, backend=lambda gm, example_inputs: pipeline.plain_inductor(gm, example_inputs))
    if name == "dice-max-autotune":  # dice over max-autotune-no-cudagraphs: its own kernel cache, so its first call is cold too
        return torch.compile(model, backend="dice", options={"mode": args.dice_mode, "cache_dir": args.cache + "-max-autotune",
                                                             "rest": "max-autotune"})
    return torch.compile(model, backend="dice",
                         options={"mode": args.dice_mode, "cache_dir": args.cache, "rest": args.rest})


class FirstCallCapped(Exception):
    """Raised in the main thread when a capped variant's first call runs past its cap."""


def first_call_cap_s(name: str, args) -> float:
    """The cap (s) on variant ``name``'s first call: --first-call-cap-s for the
    variants named in --cap-variants, 0 (none) for the others and by default."""
    cap = float(getattr(args, "first_call_cap_s", 0.0) or 0.0)
    return cap if cap > 0 and name in getattr(args, "cap_variants", ()) else 0.0


@contextlib.contextmanager
def capped(seconds: float):
    """Raises FirstCallCapped inside the block once ``seconds`` have passed,
    and again every second after that until the block ends (SIGALRM through
    setitimer: main thread only; 0 = no cap): Inductor's autotuning catches
    an exception raised inside one choice's benchmark and goes on with the
    next, so a single alarm can be swallowed. The exception surfaces where
    Python next runs in the main thread, e.g. between two of Inductor's
    autotuning benchmarks, so a compile stuck in one C call ends only when
    that call returns. It may reach the caller wrapped (Inductor re-raises it
    as InductorError): see stopped_by_cap."""
    if seconds <= 0:
        yield
        return
    state = {"closing": False}

    def fire(signum, frame):
        if not state["closing"]:
            raise FirstCallCapped()
    previous = signal.signal(signal.SIGALRM, fire)
    signal.setitimer(signal.ITIMER_REAL, seconds, 1.0)
    try:
        yield
    finally:
        state["closing"] = True
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)


def stopped_by_cap(e: BaseException) -> bool:
    """True when ``e`` is FirstCallCapped or wraps one: through ``__cause__``,
    ``__context__`` or ``inner_exception`` (torch._inductor's InductorError
    keeps the original there), at most 16 links deep."""
    seen = 0
    while e is not None and seen < 16:
        if isinstance(e, FirstCallCapped):
            return True
        e = getattr(e, "inner_exception", None) or e.__cause__ or e.__context__
        seen += 1
    return False


def run_workload(label: str, model: nn.Module, inputs: list, args) -> dict:
    """Runs every variant on ``inputs`` under torch.no_grad(): first-call
    time (s), correctness against eager, median time (µs), and for dice the
    groups formed, hits, fallbacks and their reasons. A variant that raises
    records "error" and the others still run.

    Every variant runs its own copy of the model as it was before the
    reference call, so a model that keeps state across calls (VanillaRNN's
    ``self.hidden``) is not advanced or overwritten by another variant: before
    this, reduce-overhead's CUDA-graph outputs stored in the shared module
    failed every variant's timing. reduce-overhead is called the way PyTorch
    asks for a model whose outputs live on across calls: after
    ``torch.compiler.cudagraph_mark_step_begin()``. Each variant is called once
    more alone before the round-robin timing, so one that fails only on a
    repeat call records its own error and the others are still timed."""
    import dice_torch

    cuda = args.device == "cuda"
    rec: dict = {"task": label, "device": torch.cuda.get_device_name(0) if cuda else "cpu", "variants": {}}
    ready: dict = {}
    with torch.no_grad():
        pristine = copy.deepcopy(model)  # the state every variant starts from
        ref = model(*inputs)
        order_free = order_free_ops(copy.deepcopy(pristine), inputs)
        # One reset per workload, none between variants: dynamo guards each
        # cache entry on its backend, so the compiled variants coexist and can
        # be timed side by side afterwards.
        torch._dynamo.reset()
        for name in args.variants:
            v: dict = {}
            rec["variants"][name] = v
            try:
                dice_torch.clear_reports()
                if getattr(args, "cold_inductor_cache", False):
                    fresh_compile_caches()
                compiled = make_variant(name, copy.deepcopy(pristine), args)
                if name == "reduce-overhead":
                    def fn(*xs, f=compiled):
                        torch.compiler.cudagraph_mark_step_begin()
                        return f(*xs)
                else:
                    fn = compiled
                cap = first_call_cap_s(name, args)
                t0 = time.time()
                try:
                    with capped(cap):
                        out = fn(*inputs)
                        if cuda:
                            torch.cuda.synchronize()
                except Exception as e:  # the cap, possibly wrapped by Inductor; anything else is the variant's error
                    if not stopped_by_cap(e):
                        raise
                    v["first_call_s"], v["first_call_capped"] = time.time() - t0, True
                    v["error"] = f"first call stopped after {cap:g} s (--first-call-cap-s): not timed"
                    continue
                v["first_call_s"] = time.time() - t0
                v["correct"], v["detail"] = check_correct(pristine, inputs, out, ref, order_free)  # copies it to run it
                if name.startswith("dice"):
                    groups = [g for r in dice_torch.reports() for g in r.groups]
                    ids = {g.id for g in groups}
                    stats = [s for s in dice_torch.group_stats() if s["id"] in ids] if ids else []
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
                    v.update(dice_decisions(dice_torch.reports()))
                ready[name] = (lambda f=fn: f(*inputs))
            except Exception as e:  # one failing variant must not end the run
                v["error"] = f"{type(e).__name__}: {e}"[:500]
        for name in list(ready):  # a variant failing only on a repeat call
            try:
                ready[name]()
                if cuda:
                    torch.cuda.synchronize()
            except Exception as e:
                rec["variants"][name]["error"] = f"repeat call: {type(e).__name__}: {e}"[:500]
                del ready[name]
        try:
            for name, us in time_us(ready, args.reps, cuda).items():
                rec["variants"][name]["us"] = us
        except Exception as e:  # a variant failing only when timed
            for name in ready:
                rec["variants"][name]["error"] = f"timing: {type(e).__name__}: {e}"[:500]
        if cuda and args.kernel_sum:
            for name, fn in ready.items():
                try:
                    rec["variants"][name]["kernel_us"] = kernel_sum_us(fn)
                except Exception as e:
                    rec["variants"][name]["kernel_us_error"] = f"{type(e).__name__}: {e}"[:300]
    add_speedups(rec)
    return rec


def dice_decisions(reports: list) -> dict:
    """The dice variant's decisions from its CompileReports: regions (summary,
    choice, source), guard choices, graphs that fell back (stage: cause), and
    each tune-sync first call's prebuild counts (distinct nvcc builds, built,
    cached, failed, seconds), and each graph's CUDA-graph replay decision."""
    out: dict = {"regions": [], "guard": [], "fallback": [], "prebuild": [], "replay": []}
    for r in reports:
        if getattr(r, "replay", None) is not None:
            out["replay"].append(dataclasses.asdict(r.replay))
        if getattr(r, "prebuild", None):
            out["prebuild"].append(r.prebuild)
        out["regions"] += [{"summary": d.summary, "choice": d.choice, "source": d.source} for d in r.regions]
        if r.guard is not None:
            out["guard"].append({"choice": r.guard.choice, "source": r.guard.source,
                                 "dice_us": r.guard.dice_us, "base_us": r.guard.base_us})
        if r.fallback:
            out["fallback"].append(f"{r.fallback['stage']}: {r.fallback['cause']}")
    return out


def add_speedups(rec: dict) -> None:
    """Per variant speedup_vs_eager / _vs_compile / _vs_max_autotune /
    _vs_reduce_overhead (where those variants ran), and the
    row's own ``correct`` and ``speedup_vs_compile`` (the dice variant's)."""
    base = {k: rec["variants"].get(n, {}).get("us") for k, n in
            (("eager", "eager"), ("compile", "inductor"), ("max_autotune", "max-autotune"),
             ("reduce_overhead", "reduce-overhead"))}
    for v in rec["variants"].values():
        for k, us in base.items():
            if v.get("us") and us:
                v[f"speedup_vs_{k}"] = us / v["us"]
    d = rec["variants"].get("dice", {})
    rec["correct"] = d.get("correct", False) and "error" not in d
    if "speedup_vs_compile" in d:
        rec["speedup_vs_compile"] = d["speedup_vs_compile"]


def summarize(records: list[dict], variants: list[str]) -> str:
    """Markdown: one row per workload (µs per variant, dice correctness and
    groups), then fast_1 / fast_2 / geomeans per variant."""
    head = "| task | " + " | ".join(f"{v} µs" for v in variants) + " | dice correct | dice groups | dice first call s |"
    lines = [head, "|" + "---|" * (len(variants) + 4)]
    for r in records:
        cells = []
        for name in variants:
            v = r["variants"].get(name, {})
            cells.append(f"{v['us']:.1f}" if "us" in v else
                         (f"> {v['first_call_s']:.0f} s compile" if v.get("first_call_capped") else
                          ("error" if "error" in v else "-")))
        d = r["variants"].get("dice", {})
        lines.append(f"| {r['task']} | " + " | ".join(cells) +
                     f" | {d.get('correct', '-')} | {'; '.join(d.get('groups', [])) or '-'} |"
                     f" {d.get('first_call_s', float('nan')):.1f} |")
    lines.append("")
    lines.append("| variant | correct | fast_1 | fast_2 | geomean vs eager | geomean vs compile | min vs compile |"
                 " geomean vs max-autotune | geomean vs reduce-overhead | first call s (sum) |")
    lines.append("|---|---|---|---|---|---|---|---|---|---|")
    n = max(len(records), 1)
    for name in variants:
        vs = [r["variants"].get(name, {}) for r in records]
        ok = [v for v in vs if v.get("correct")]
        f1 = sum(1 for v in ok if v.get("speedup_vs_eager", 0) >= 1.0)
        f2 = sum(1 for v in ok if v.get("speedup_vs_eager", 0) >= 2.0)

        def geo(key):
            xs = [v[key] for v in ok if v.get(key)]
            return f"{math.exp(sum(map(math.log, xs)) / len(xs)):.3f}" if xs else "-"

        mins = [v["speedup_vs_compile"] for v in ok if v.get("speedup_vs_compile")]
        first = sum(v.get("first_call_s", 0.0) for v in vs)
        more = ">" if any(v.get("first_call_capped") for v in vs) else ""  # a capped first call: a lower bound
        lines.append(f"| {name} | {len(ok)}/{len(records)} | {f1 / n:.0%} | {f2 / n:.0%} | {geo('speedup_vs_eager')} |"
                     f" {geo('speedup_vs_compile')} | {min(mins):.3f} |" if mins else
                     f"| {name} | {len(ok)}/{len(records)} | {f1 / n:.0%} | {f2 / n:.0%} | {geo('speedup_vs_eager')} |"
                     f" {geo('speedup_vs_compile')} | - |")
        lines[-1] += f" {geo('speedup_vs_max_autotune')} | {geo('speedup_vs_reduce_overhead')} | {more}{first:.1f} |"
    return "\n".join(lines)


def add_workload_args(p: argparse.ArgumentParser) -> None:
    """The arguments ``workloads()`` reads: task files, --kb, --list, --gpt2,
    --gpt2-fp32 and --dry-run (shared with bench/op_shape_table.py)."""
    p.add_argument("tasks", nargs="*", help="KernelBench task files (absolute, or relative to --kb)")
    p.add_argument("--kb", default=os.environ.get("KB", ".deps/kernelbench"), help="KernelBench root")
    p.add_argument("--list", default="", help="comma list of workload lists: level3-dev, level2-20")
    p.add_argument("--gpt2", action="store_true", help="also run the GPT-2-style block (bf16)")
    p.add_argument("--gpt2-fp32", action="store_true", help="also run the GPT-2-style block in float32")
    p.add_argument("--dry-run", action="store_true", help="CPU, tiny shapes, float32 (checks the script works)")


def stamp_row(rec: dict, t0: float, args: argparse.Namespace) -> None:
    """Adds a finished row's wall time (s since ``t0``), the host's 1-minute
    load average at its end (``host_load1``: a row timed while something
    else loaded the CPUs shows it; launch-bound variants slow down with it
    and CUDA-graph replay does not, which skews the ratios) and, when
    ``args.tree`` names one, the code tree it was measured on."""
    rec["wall_s"] = time.time() - t0
    rec["host_load1"] = round(os.getloadavg()[0], 2)
    if getattr(args, "tree", ""):
        rec["tree"] = args.tree


def parse_args(argv=None) -> argparse.Namespace:
    """The command line (see the module docstring)."""
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    add_workload_args(p)
    p.add_argument("--variants", default=None, help=f"comma list from {','.join(VARIANTS + tuple(ALIASES))} "
                   "(default: the first four on a GPU; eager,dice in a dry run)")
    p.add_argument("--dice-mode", default="tune-sync", help="DICE mode of the dice variant (default tune-sync)")
    p.add_argument("--rest", default="inductor", choices=["inductor", "max-autotune", "eager"],
                   help="what runs the ops outside fusion groups in the dice variant")
    p.add_argument("--cache", default=os.environ.get("DICE_CACHE_DIR", "/tmp/dice-compile-bench-cache"))
    p.add_argument("--reps", type=int, default=None, help="timed repetitions (default 30; 3 in a dry run)")
    p.add_argument("--time-budget-s", type=float, default=0.0,
                   help="stop starting workloads when the next would likely end past this many seconds (0: no limit)")
    p.add_argument("--skip-done", action="store_true", help="skip tasks that already have a row in --out")
    p.add_argument("--cold-inductor-cache", action="store_true",
                   help="fresh empty Inductor and Triton caches before each variant of each workload "
                        "(first-call times from cold, none reusing another variant's compile)")
    p.add_argument("--first-call-cap-s", type=float, default=0.0,
                   help="stop the first call (compile) of the --cap-variants after this many seconds: the variant "
                        "records first_call_capped and is not timed, the others still run (0: no cap)")
    p.add_argument("--cap-variants", default="max-autotune", type=lambda t: [v for v in t.split(",") if v],
                   help="comma list of variants --first-call-cap-s applies to (default max-autotune)")
    p.add_argument("--kernel-sum", action="store_true",
                   help="also record each variant's GPU kernel time per call (kernel_us, torch.profiler)")
    p.add_argument("--tree", default=os.environ.get("DICE_BENCH_TREE", ""),
                   help="the code tree (commit) the rows come from, written into each row as \"tree\" "
                        "(default $DICE_BENCH_TREE; none when empty): a list resumed across trees says per row")
    p.add_argument("--out", default="compile-bench.jsonl")
    args = p.parse_args(argv)
    if not args.tasks and not args.gpt2 and not args.gpt2_fp32 and not args.list:
        p.error("give KernelBench task files, --list and/or --gpt2")
    return args


def done_tasks(path: str) -> set[str]:
    """Task labels with a row in the JSONL file ``path`` (none if it is missing)."""
    try:
        with open(path) as f:
            return {json.loads(line).get("task") for line in f if line.strip()}
    except (OSError, ValueError):
        return set()


def workloads(args) -> list:
    """[(label, build)]: build() -> (model, inputs) on args.device, seeded."""
    paths = list(args.tasks)
    for name in filter(None, args.list.split(",")):
        paths += workload_list(name, args.kb)
    out = []
    for t in paths:
        path = t if os.path.isabs(t) or os.path.exists(t) else os.path.join(args.kb, t)

        def build(path=path):
            torch.manual_seed(0)
            mod = kb.load_task(path)
            if args.dry_run:
                shrink_task(mod, 32)
            model = mod.Model(*mod.get_init_inputs()).to(args.device).eval()
            return model, [x.to(args.device) if isinstance(x, torch.Tensor) else x for x in mod.get_inputs()]
        out.append(("/".join(Path(path).parts[-2:]), build))
    for flag, bf16 in ((args.gpt2, True), (args.gpt2_fp32, False)):
        if not flag:
            continue
        if args.dry_run:
            batch, seq, width, heads, dtype = 2, 16, 64, 4, torch.float32
        else:
            batch, seq, width, heads, dtype = 8, 1024, 768, 12, torch.bfloat16 if bf16 else torch.float32

        def build(batch=batch, seq=seq, width=width, heads=heads, dtype=dtype):
            torch.manual_seed(0)
            model = GPT2Block(width, heads, seq).to(args.device, dtype).eval()
            return model, [torch.randn(batch, seq, width, device=args.device, dtype=dtype)]
        out.append((f"gpt2-block b{batch} s{seq} {str(dtype).replace('torch.', '')}", build))
    return out


def main(argv=None) -> int:
    """CLI entry point; exit code 0, or 2 for bad arguments / no CUDA device without --dry-run."""
    args = parse_args(argv)
    args.device = "cpu" if args.dry_run else "cuda"
    if not args.dry_run and not torch.cuda.is_available():
        print("torch_compile_bench: no CUDA device; use --dry-run on a CPU machine", file=sys.stderr)
        return 2
    args.variants = [ALIASES.get(v, v) for v in args.variants.split(",")] if args.variants else \
        (["eager", "dice"] if args.dry_run else list(DEFAULT_VARIANTS))
    bad = [v for v in args.variants if v not in VARIANTS]
    if bad:
        print(f"torch_compile_bench: unknown variant(s) {bad} (expected {','.join(VARIANTS)})", file=sys.stderr)
        return 2
    args.reps = args.reps or (3 if args.dry_run else 30)
    if args.dry_run and args.dice_mode.startswith("tune"):
        args.dice_mode = "cache"  # nothing to tune without a GPU
    try:
        todo = workloads(args)
    except ValueError as e:
        print(f"torch_compile_bench: {e}", file=sys.stderr)
        return 2
    skip = done_tasks(args.out) if args.skip_done else set()
    if args.cold_inductor_cache:
        # The process's one-time compiler start-up (imports, toolchain checks:
        # ~19 s on the CPU here) would otherwise land on whichever variant
        # compiles first; a throw-away compile takes it, then every variant
        # starts from empty caches (fresh_compile_caches).
        dev = "cuda" if args.device == "cuda" else "cpu"
        torch.compile(lambda t: torch.relu(t) + 1)(torch.ones(4, device=dev))
        torch._dynamo.reset()
    start, walls, records, left = time.time(), [], [], []
    for label, build in todo:
        if label in skip:
            continue
        elapsed = time.time() - start
        # The median, not the longest: one slow first call (SwinMLP's 240 s)
        # must not keep every short workload after it from running.
        if args.time_budget_s and walls and elapsed + statistics.median(walls) > args.time_budget_s:
            left.append(label)
            continue
        t0 = time.time()
        try:
            model, inputs = build()
            rec = run_workload(label, model, inputs, args)
            del model, inputs
        except Exception as e:  # a broken task file must not end the run
            rec = {"task": label, "error": f"{type(e).__name__}: {e}"[:500], "variants": {}, "correct": False}
        stamp_row(rec, t0, args)
        walls.append(rec["wall_s"])
        records.append(rec)
        print(json.dumps(rec), flush=True)
        with open(args.out, "a") as f:  # per workload: a chunk killed at its limit keeps its rows
            f.write(json.dumps(rec) + "\n")
        if args.device == "cuda":
            torch.cuda.empty_cache()
    if left:
        print(f"torch_compile_bench: time budget reached; not run: {' '.join(left)}", flush=True)
    print(summarize(records, args.variants))
    return 0


if __name__ == "__main__":
    sys.exit(main())
