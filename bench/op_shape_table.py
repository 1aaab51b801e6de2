#!/usr/bin/env python3
"""Issue 18's table per conv / GEMM / attention shape: eager, torch.compile
(default and mode="max-autotune-no-cudagraphs", with the kernels Inductor
launched) and backend="dice" on each op alone, side by side.

1. Extraction: every workload (KernelBench task files, --list, --gpt2 /
   --gpt2-fp32: the loader and workloads of bench/torch_compile_bench.py) runs
   once under torch.no_grad() with a dispatch mode that records each ATen
   convolution (aten.convolution, transposed included: op conv{1,2,3}d /
   conv_transpose{1,2,3}d) and GEMM (mm, addmm, bmm, baddbmm: nn.Linear and
   torch.matmul reach ATen as these, with the views they add) with the
   shape, strides (memory format), dtype of every tensor argument and the
   other arguments by schema name (stride, padding, dilation, groups,
   beta...); a torch-function mode records F.scaled_dot_product_attention
   (op "sdpa": q, k, v, mask shapes, is_causal, scale) before PyTorch picks
   its backend. Attention written out (matmul -> scale / mask -> softmax ->
   matmul) is found by data flow: a bmm whose operand comes from a softmax of
   another bmm's output (through elementwise ops and views) adds one
   "attention_pattern" row (q, k^T, v as the two bmms saw them), replayed as
   softmax(q @ k^T * 1/sqrt(d)) @ v: the ops between the bmm and the softmax
   (mask, scale) are listed in its params, not replayed. Its two bmms stay
   GEMM rows of their own. Ops are deduplicated by (op, tensors, params)
   across all workloads: a row counts its occurrences and names its tasks.
2. Per unique op shape, on the GPU: a module running just that op, its
   tensors passed as inputs (as Inductor sees parameters without freezing),
   filled with seeded normal values (bool masks all True) in the recorded
   strides, timed round-robin with CUDA events and L2 flushed, median of
   --reps (torch_compile_bench.time_us, i.e. kernelbench_bench.bench_interleaved)
   as eager, torch.compile default, max-autotune-no-cudagraphs and
   backend="dice" (options mode --dice-mode (tune-sync), rest --rest
   (inductor), cache_dir --cache). The kernels each variant launched come from
   torch.profiler (eager: cuDNN / cuBLAS names; Inductor: triton_* kernels or
   extern cuDNN / cuBLAS calls; max-autotune: its template choice). dice's
   part: its groups, their winner and baseline µs (dice_torch.group_stats()),
   region / guard decisions and what it left to Inductor and why
   (dice_torch.reports()): a lone op is usually left to Inductor, and the
   row says so ("dice_winner": {"decision": ...}).
3. Correctness of dice's output (the compile variant's in a dry run) against
   eager: torch_compile_bench.check_correct, per-dtype tolerance, then the
   float64 second opinion for an op whose summation order PyTorch does not
   fix (conv, GEMM, attention).
One JSON line per op shape to --out (task, op, kind, shape, dtype, params,
eager_us, compile_us, max_autotune_us, dice_us, best, eager_kernels,
inductor_kernels, max_autotune_kernels, dice_kernels, dice_winner,
speedup_vs_eager / _vs_compile / _vs_max_autotune (dice's), correct, key,
count, tasks), then a markdown table.

GPU machine (a built tree: libdice_torch_ext.so, dice-worker):
    PYTHONPATH=torch_ext/python python3 bench/op_shape_table.py --list level2-20 --kinds conv,gemm \
        --kb .deps/kernelbench --cache /tmp/dice-op-cache --time-budget-s 480 --skip-done --out $OUT/op_shapes.jsonl
    (--gpt2 / --gpt2-fp32 add the GPT-2 block's GEMMs and its written-out attention.)
Issue 18's level-2 conv and GEMM shapes (the 20 tasks of --list level2-20) as
device calls of at most 10 minutes each: here `bash scripts/gpu_snapshot.sh`
(and, from the second call on, cp <files_at>/op_shapes.jsonl .gpu-carry/), then
a call with carry [".gpu-carry"] that builds when the machine has no build
(~4 min), resumes the carried rows and stops starting op shapes after 270 s
(max-autotune's first call of a lone conv or GEMM is the long part):
    bash .gpu-carry/tree/scripts/gpu_from_snapshot.sh bash -c '[ -f build/torch_ext/libdice_torch_ext.so ] || \
      BUILD_TARGETS="dice dice-worker dice_torch_ext" JOBS=16 bash scripts/setup.sh > $OUT/build.log 2>&1 || \
      { tail -40 $OUT/build.log; exit 1; }; source scripts/deps_env.sh; \
      [ -f ../.gpu-carry/op_shapes.jsonl ] && cp ../.gpu-carry/op_shapes.jsonl $OUT/; \
      PYTHONPATH=torch_ext/python timeout 330 python3 -u bench/op_shape_table.py --list level2-20 \
      --kinds conv,gemm --kb .deps/kernelbench --cache /tmp/dice-op-cache --time-budget-s 270 --skip-done \
      --out $OUT/op_shapes.jsonl > $OUT/op_shapes.log 2>&1; echo rc $?; tail -30 $OUT/op_shapes.log'
CPU dry run (tiny shapes as in torch_compile_bench; eager and Inductor only,
no kernel names):
    python3 bench/op_shape_table.py level2/1_Conv2D_ReLU_BiasAdd.py --gpt2 --dry-run
Exit codes: 0 done (a workload that fails to trace is reported and skipped),
2 bad arguments: a task file that does not exist, an unknown list or
variant, no CUDA device without --dry-run.
"""

from __future__ import annotations

import argparse
import copy
import json
import math
import os
import statistics
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

import torch
import torch.nn as nn
import torch.nn.functional as F

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "bench"))
sys.path.insert(0, str(ROOT / "torch_ext" / "python"))

import torch_compile_bench as tcb  # noqa: E402  (workloads, make_variant, time_us, check_correct)

kb = tcb.kb
CONV_OPS = frozenset({"convolution", "_convolution"})
GEMM_OPS = frozenset({"mm", "addmm", "bmm", "baddbmm"})
SOFTMAX_OPS = frozenset({"_softmax", "softmax"})
VARIANTS = ("eager", "inductor", "max-autotune", "dice")
#: Row field of each variant's median µs.
US_FIELD = {"eager": "eager_us", "inductor": "compile_us", "max-autotune": "max_autotune_us", "dice": "dice_us"}
KERNELS_FIELD = {"eager": "eager_kernels", "inductor": "inductor_kernels", "max-autotune": "max_autotune_kernels",
                 "dice": "dice_kernels"}


@dataclass
class OpShape:
    """One conv / GEMM / attention call as recorded: ``fn`` names what
    replays it ("aten.convolution.default", "sdpa", "attention_pattern");
    ``template`` is its positional arguments with each tensor replaced by
    {"t": index into ``tensors``}, ``kwargs`` likewise."""

    op: str
    kind: str                                  #: conv | gemm | attention
    fn: str
    tensors: list[dict]                        #: {"name", "shape", "stride", "dtype", "format"}
    params: dict
    template: list
    kwargs: dict = field(default_factory=dict)
    count: int = 1
    tasks: list[str] = field(default_factory=list)

    def key(self) -> str:
        meta = [(t["name"], t["shape"], t["stride"], t["dtype"]) for t in self.tensors]
        return json.dumps([self.fn, self.op, meta, self.params], sort_keys=True, default=str)

    def shape(self) -> str:
        """"input[8,3,32,32] weight[16,3,3,3] bias[16]" (+ " cl" for channels_last)."""
        fmt = {"contiguous": "", "channels_last": " cl", "channels_last_3d": " cl3d"}
        return " ".join(f"{t['name']}[{','.join(map(str, t['shape']))}]" +
                        fmt.get(t["format"], f" strides{tuple(t['stride'])}") for t in self.tensors)

    def dtype(self) -> str:
        return self.tensors[0]["dtype"] if self.tensors else "-"


def memory_format(t: torch.Tensor) -> str:
    """contiguous | channels_last | channels_last_3d | strided."""
    if t.is_contiguous():
        return "contiguous"
    if t.dim() == 4 and t.is_contiguous(memory_format=torch.channels_last):
        return "channels_last"
    if t.dim() == 5 and t.is_contiguous(memory_format=torch.channels_last_3d):
        return "channels_last_3d"
    return "strided"


def _tensor_meta(name: str, t: torch.Tensor) -> dict:
    return {"name": name, "shape": list(t.shape), "stride": list(t.stride()),
            "dtype": str(t.dtype).replace("torch.", ""), "format": memory_format(t)}


def _plain(v):
    """A JSON-able copy of a non-tensor argument (dtype / device as text)."""
    if isinstance(v, (list, tuple)):
        return [_plain(x) for x in v]
    if v is None or isinstance(v, (bool, int, float, str)):
        return v
    return str(v)


def _templated(names: list[str], args, kwargs) -> tuple[list[dict], dict, list, dict]:
    """(tensors, params, template, kwargs template) of one call; ``names`` are
    the schema's argument names in order (positional first)."""
    tensors, params = [], {}

    def slot(name, v):
        if isinstance(v, torch.Tensor):
            tensors.append(_tensor_meta(name, v))
            return {"t": len(tensors) - 1}
        params[name] = _plain(v)
        return _plain(v)

    template = [slot(names[i] if i < len(names) else f"arg{i}", v) for i, v in enumerate(args)]
    kw = {k: slot(k, v) for k, v in (kwargs or {}).items()}
    return tensors, params, template, kw


def _conv_label(args) -> str:
    transposed = bool(args[6]) if len(args) > 6 else False
    dims = args[0].dim() - 2 if isinstance(args[0], torch.Tensor) else 2
    return f"conv_transpose{dims}d" if transposed else f"conv{dims}d"


SDPA_ARGS = ["query", "key", "value", "attn_mask", "dropout_p", "is_causal", "scale", "enable_gqa"]


def extract_ops(model: nn.Module, inputs: list, task: str = "") -> list[OpShape]:
    """Every conv / GEMM / attention op of one call of ``model(*inputs)`` in
    call order (not deduplicated; see module docstring, step 1)."""
    from torch.overrides import TorchFunctionMode
    from torch.utils._python_dispatch import TorchDispatchMode
    from torch.utils.weak import WeakIdKeyDictionary

    found: list[OpShape] = []
    tags = WeakIdKeyDictionary()  # tensor -> ("score" | "probs", bmm's OpShape, ops between)
    state = {"in_sdpa": 0}

    def flat_tensors(xs):
        for x in xs:
            if isinstance(x, torch.Tensor):
                yield x
            elif isinstance(x, (list, tuple)):
                yield from flat_tensors(x)

    class Functions(TorchFunctionMode):
        def __torch_function__(self, func, types, args=(), kwargs=None):
            kwargs = kwargs or {}
            if func is not F.scaled_dot_product_attention:
                return func(*args, **kwargs)
            tensors, params, template, kw = _templated(SDPA_ARGS, args, kwargs)
            found.append(OpShape("sdpa", "attention", "sdpa", tensors, params, template, kw, tasks=[task]))
            state["in_sdpa"] += 1
            try:
                return func(*args, **kwargs)
            finally:
                state["in_sdpa"] -= 1

    class Ops(TorchDispatchMode):
        def __torch_dispatch__(self, func, types, args=(), kwargs=None):
            out = func(*args, **(kwargs or {}))
            if state["in_sdpa"]:
                return out
            name = func.overloadpacket.__name__
            outs = list(flat_tensors([out]))
            ins = [t for t in flat_tensors(list(args) + list((kwargs or {}).values())) if t in tags]
            names = [a.name for a in func._schema.arguments]
            rec = None
            if name in CONV_OPS or name in GEMM_OPS:
                tensors, params, template, kw = _templated(names, args, kwargs)
                op = _conv_label(args) if name in CONV_OPS else name
                rec = OpShape(op, "conv" if name in CONV_OPS else "gemm", str(func), tensors, params, template, kw,
                              tasks=[task])
                found.append(rec)
            if name == "bmm":
                probs = [(i, tags[t]) for i, t in enumerate(args[:2]) if t in tags and tags[t][0] == "probs"]
                if probs:
                    i, (_, qk, between) = probs[0]
                    found.append(_attention_pattern(qk, rec, between, 1 - i, task))
                for t in outs:
                    tags[t] = ("score", rec, [])
            elif name in SOFTMAX_OPS:
                score = [tags[t] for t in ins if tags[t][0] == "score"]
                for t in outs:
                    if score:
                        tags[t] = ("probs", score[0][1], score[0][2])
            elif ins and name not in GEMM_OPS and name not in CONV_OPS:
                kind, src, between = tags[ins[0]]
                for t in outs:  # views, scale, mask, dropout: the tag flows through
                    tags[t] = (kind, src, between + ([name] if kind == "score" and name not in between else []))
            return out

    with torch.no_grad(), Functions(), Ops():
        model(*inputs)
    return found


def _attention_pattern(qk: OpShape, pv: OpShape, between: list[str], v_index: int, task: str) -> OpShape:
    """The attention_pattern row of a bmm(q, k^T) -> ... -> softmax -> bmm(p, v)
    (``v_index``: which operand of the second bmm is v)."""
    q, kt = (dict(qk.tensors[i], name=n) for i, n in ((0, "q"), (1, "k_t")))
    v = dict(pv.tensors[v_index], name="v")
    d = q["shape"][-1]
    kept = [b for b in between if b not in ("view", "_unsafe_view")]
    params = {"scale": 1.0 / math.sqrt(d), "between_not_replayed": kept}
    return OpShape("attention_pattern", "attention", "attention_pattern", [q, kt, v], params,
                   [{"t": 0}, {"t": 1}, {"t": 2}], {}, tasks=[task])


def dedup(ops: list[OpShape]) -> list[OpShape]:
    """One OpShape per key, in first-seen order, with count and tasks merged."""
    out: dict[str, OpShape] = {}
    for o in ops:
        k = o.key()
        if k in out:
            out[k].count += o.count
            out[k].tasks += [t for t in o.tasks if t not in out[k].tasks]
        else:
            out[k] = copy.deepcopy(o)
    return list(out.values())


def _attention_fn(q, k_t, v, scale):
    return torch.matmul(q, k_t).mul(scale).softmax(dim=-1).matmul(v)


def _resolve(fn: str):
    if fn == "sdpa":
        return F.scaled_dot_product_attention
    if fn == "attention_pattern":
        return _attention_fn
    packet, _, overload = fn.removeprefix("aten.").partition(".")
    return getattr(getattr(torch.ops.aten, packet), overload or "default")


class OpModule(nn.Module):
    """Runs one recorded op on its tensors (the forward's arguments, in the
    order of OpShape.tensors) with the recorded non-tensor arguments."""

    def __init__(self, spec: OpShape):
        super().__init__()
        self.fn_name = spec.fn
        self.template = copy.deepcopy(spec.template)
        self.kw = copy.deepcopy(spec.kwargs)
        self.scale = spec.params.get("scale") if spec.fn == "attention_pattern" else None

    def forward(self, *ts):
        fn = _resolve(self.fn_name)
        args = [ts[a["t"]] if isinstance(a, dict) and "t" in a else a for a in self.template]
        kw = {k: ts[a["t"]] if isinstance(a, dict) and "t" in a else a for k, a in self.kw.items()}
        if self.scale is not None:
            return fn(*args, self.scale)
        return fn(*args, **kw)


def make_inputs(spec: OpShape, device: str, seed: int = 0) -> list[torch.Tensor]:
    """Seeded tensors with the recorded shapes, strides and dtypes: normal
    values (bool: all True, integers: zeros), laid out over a storage as large
    as the strides need (expanded stride-0 views included)."""
    torch.manual_seed(seed)
    out = []
    for t in spec.tensors:
        dtype = getattr(torch, t["dtype"])
        n = 1 + sum((s - 1) * st for s, st in zip(t["shape"], t["stride"]) if s > 0) if all(t["shape"]) else 0
        if dtype.is_floating_point:
            base = torch.randn(n, device=device, dtype=torch.float32).to(dtype)
        elif dtype == torch.bool:
            base = torch.ones(n, device=device, dtype=torch.bool)
        else:
            base = torch.zeros(n, device=device, dtype=dtype)
        out.append(base.as_strided(t["shape"], t["stride"]))
    return out


def dice_winner(reports: list, stats: list) -> dict:
    """What dice did with the lone op: its groups with winner / baseline µs
    (group_stats), region and guard decisions, what it left to the rest
    compiler and why, and one ``decision`` line for the table."""
    groups = [g for r in reports for g in r.groups]
    ids = {g.id for g in groups}
    mine = [s for s in stats if s["id"] in ids]
    info = tcb.dice_decisions(reports)
    info["groups"] = [{"summary": s["summary"], "hits": s["hits"], "fallbacks": s["fallbacks"],
                       "winner_us": s.get("winner_best_us") or None, "baseline_us": s.get("winner_baseline_us") or None,
                       "fallback_reasons": s.get("fallback_reasons", {})} for s in mine]
    info["left_out"] = sorted({f"{lo.op}: {lo.reason}" for r in reports for lo in r.left_out})
    skipped = [r.skipped for r in reports if r.skipped]
    served = [g for g in info["groups"] if g["hits"]]
    rest = reports[0].rest if reports else "rest"
    if info["fallback"]:
        decision = "fallback to rest: " + info["fallback"][0]
    elif skipped:
        decision = f"rest unchanged: {skipped[0]}"
    elif served:
        decision = "dice: " + ", ".join(f"{g['summary']} {g['winner_us'] or 0:.1f} vs {g['baseline_us'] or 0:.1f} µs"
                                        for g in served)
    elif info["guard"] and info["guard"][0]["choice"] == "inductor":
        decision = f"inductor (guard: {info['guard'][0]['source']})"
    elif info["regions"]:
        decision = "; ".join(f"{d['summary']}: {d['choice']} ({d['source']})" for d in info["regions"])
    elif info["groups"]:
        reasons = sorted({r for g in info["groups"] for r in g["fallback_reasons"]})
        decision = (f"{rest}: groups {', '.join(g['summary'] for g in info['groups'])} not served"
                    + (f" ({'; '.join(reasons)[:120]})" if reasons else ""))
    else:
        decision = f"{rest}: no group for dice" + (f" ({info['left_out'][0]})" if info["left_out"] else "")
    info["decision"] = decision
    return info


def kernel_names(fn, runs: int = 3) -> list[str]:
    """The GPU kernels (and memcpy / memset) one call launches, longest first."""
    return [name for name, _ in kb.cuda_kernel_table(fn, runs)]


def run_op(spec: OpShape, args) -> dict:
    """Times one op shape in every variant (module docstring, steps 2-3)."""
    import dice_torch

    cuda = args.device == "cuda"
    row = {"task": spec.tasks[0], "op": spec.op, "kind": spec.kind, "shape": spec.shape(), "dtype": spec.dtype(),
           "params": spec.params, "count": spec.count, "tasks": spec.tasks, "key": spec.key(),
           "device": torch.cuda.get_device_name(0) if cuda else "cpu", "errors": {}, "first_call_s": {},
           "dice_winner": None, **{f: None for f in (*US_FIELD.values(), *KERNELS_FIELD.values())}}
    model, inputs = OpModule(spec), make_inputs(spec, args.device)
    ready = {}
    with torch.no_grad():
        ref = model(*inputs)
        order_free = tcb.order_free_ops(model, inputs) | ({"attention"} if spec.kind == "attention" else set())
        torch._dynamo.reset()
        for name in args.variants:
            try:
                dice_torch.clear_reports()
                fn = tcb.make_variant(name, copy.deepcopy(model), args)
                t0 = time.time()
                out = fn(*inputs)
                if cuda:
                    torch.cuda.synchronize()
                row["first_call_s"][name] = round(time.time() - t0, 3)
                ok, detail = tcb.check_correct(model, inputs, out, ref, order_free)
                row.setdefault("correct_by_variant", {})[name] = ok
                row.setdefault("detail", {})[name] = detail
                if name == "dice":
                    row["dice_winner"] = dice_winner(dice_torch.reports(), dice_torch.group_stats())
                ready[name] = (lambda f=fn: f(*inputs))
            except Exception as e:  # one failing variant must not end the row
                row["errors"][name] = f"{type(e).__name__}: {e}"[:500]
        try:
            for name, us in tcb.time_us(ready, args.reps, cuda).items():
                row[US_FIELD[name]] = us
        except Exception as e:
            row["errors"]["timing"] = f"{type(e).__name__}: {e}"[:500]
        if cuda:
            for name, fn in ready.items():
                try:
                    row[KERNELS_FIELD[name]] = kernel_names(fn)
                except Exception as e:
                    row["errors"][f"{name} kernels"] = f"{type(e).__name__}: {e}"[:300]
    add_speedups(row, args.variants)
    return row


def add_speedups(row: dict, variants: list[str]) -> None:
    """best (fastest variant), dice's speedup_vs_eager / _vs_compile /
    _vs_max_autotune, and ``correct``: dice's, or in a run without dice the
    compile variant's (``correct_of`` names it)."""
    times = {n: row[US_FIELD[n]] for n in variants if row.get(US_FIELD[n])}
    if times:
        best = min(times, key=times.get)
        row["best"] = {"variant": best, "us": times[best]}
    d = row.get("dice_us")
    for k, f in (("eager", "eager_us"), ("compile", "compile_us"), ("max_autotune", "max_autotune_us")):
        row[f"speedup_vs_{k}"] = row[f] / d if d and row.get(f) else None
    who = "dice" if "dice" in variants else ("inductor" if "inductor" in variants else variants[-1])
    row["correct_of"] = who
    row["correct"] = bool(row.get("correct_by_variant", {}).get(who)) and who not in row["errors"]


def _kernels_cell(names) -> str:
    if not names:
        return "-"
    short = [n if len(n) <= 48 else n[:45] + "..." for n in names[:2]]
    return "<br>".join(s.replace("|", "/") for s in short) + (f" (+{len(names) - 2})" if len(names) > 2 else "")


def summarize(rows: list[dict]) -> str:
    """Markdown: one line per op shape, then the geomeans of dice vs eager /
    compile / max-autotune over the correct rows."""
    fmt = lambda v, p=1: "-" if v is None else f"{v:.{p}f}"
    head = ("| task | op | shape | dtype | n | eager µs | compile µs | max-autotune µs | dice µs | best |"
            " dice vs eager | dice vs compile | Inductor chose | max-autotune chose | dice decision | correct |")
    lines = [head, "|" + "---|" * 16]
    for r in rows:
        if "op" not in r:
            lines.append(f"| {r.get('task')} | error: {r.get('error', '')[:80]} |" + " |" * 14)
            continue
        d = (r.get("dice_winner") or {}).get("decision", "-")
        lines.append(f"| {r['task']} | {r['op']} | {r['shape']} | {r['dtype']} | {r['count']} |"
                     f" {fmt(r.get('eager_us'))} | {fmt(r.get('compile_us'))} | {fmt(r.get('max_autotune_us'))} |"
                     f" {fmt(r.get('dice_us'))} | {(r.get('best') or {}).get('variant', '-')} |"
                     f" {fmt(r.get('speedup_vs_eager'), 3)} | {fmt(r.get('speedup_vs_compile'), 3)} |"
                     f" {_kernels_cell(r.get('inductor_kernels'))} | {_kernels_cell(r.get('max_autotune_kernels'))} |"
                     f" {d.replace('|', '/')[:90]} | {r.get('correct')} |")
    ok = [r for r in rows if r.get("correct")]
    lines.append("")
    for k in ("eager", "compile", "max_autotune"):
        xs = [r[f"speedup_vs_{k}"] for r in ok if r.get(f"speedup_vs_{k}")]
        if xs:
            lines.append(f"dice vs {k}: geomean {math.exp(sum(map(math.log, xs)) / len(xs)):.3f} over {len(xs)} "
                         f"correct op shapes (min {min(xs):.3f})")
    lines.append(f"correct: {len(ok)}/{len(rows)}")
    return "\n".join(lines)


def parse_args(argv=None) -> argparse.Namespace:
    """The command line (see the module docstring)."""
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    tcb.add_workload_args(p)  # tasks, --kb, --list, --gpt2, --gpt2-fp32, --dry-run (eager and Inductor there)
    p.add_argument("--variants", default=None, help=f"comma list from {','.join(VARIANTS)} "
                   "(default: all four on a GPU; eager,inductor in a dry run)")
    p.add_argument("--kinds", default="conv,gemm,attention", help="which op kinds get rows")
    p.add_argument("--dice-mode", default="tune-sync", help="DICE mode of the dice variant (default tune-sync)")
    p.add_argument("--rest", default="inductor", choices=["inductor", "max-autotune", "eager"],
                   help="the dice variant's rest compiler")
    p.add_argument("--cache", default=os.environ.get("DICE_CACHE_DIR", "/tmp/dice-op-shape-cache"),
                   help="the dice variant's kernel cache dir")
    p.add_argument("--reps", type=int, default=None, help="timed repetitions (default 50; 3 in a dry run)")
    p.add_argument("--time-budget-s", type=float, default=0.0,
                   help="stop starting op shapes when the next would likely end past this many seconds (0: no limit)")
    p.add_argument("--skip-done", action="store_true", help="skip op shapes (by key) that already have a row in --out")
    p.add_argument("--out", default="op-shapes.jsonl")
    args = p.parse_args(argv)
    if not args.tasks and not args.gpt2 and not args.gpt2_fp32 and not args.list:
        p.error("give KernelBench task files, --list and/or --gpt2")
    return args


def task_path(t: str, kb_root: str) -> str:
    """A task argument as torch_compile_bench.workloads resolves it."""
    return t if os.path.isabs(t) or os.path.exists(t) else os.path.join(kb_root, t)


def check_args(args) -> str | None:
    """The first bad argument's message, else None (main exits 2 on it)."""
    missing = [t for t in args.tasks if not os.path.isfile(task_path(t, args.kb))]
    if missing:
        return (f"task file(s) not found: {' '.join(missing)} "
                f"(paths are absolute, or relative to the cwd or --kb {args.kb})")
    bad = [v for v in args.variants if v not in VARIANTS]
    if bad:
        return f"unknown variant(s) {bad} (expected {','.join(VARIANTS)})"
    bad = [k for k in args.kinds if k not in ("conv", "gemm", "attention")]
    if bad:
        return f"unknown kind(s) {bad} (expected conv,gemm,attention)"
    return None


def collect(args) -> tuple[list[OpShape], list[dict]]:
    """(unique op shapes of every workload, error rows of workloads that failed to trace)."""
    ops, errors = [], []
    for label, build in tcb.workloads(args):
        try:
            model, inputs = build()
            ops += [o for o in extract_ops(model, inputs, label) if o.kind in args.kinds]
            del model, inputs
        except Exception as e:  # one broken task must not end the run
            errors.append({"task": label, "error": f"trace: {type(e).__name__}: {e}"[:500], "correct": False})
            print(f"op_shape_table: {label}: {errors[-1]['error']}", file=sys.stderr)
    return dedup(ops), errors


def main(argv=None) -> int:
    """CLI entry point; exit code 0, or 2 for bad arguments / no CUDA device without --dry-run."""
    args = parse_args(argv)
    start = time.time()  # the budget counts the extraction too
    args.device = "cpu" if args.dry_run else "cuda"
    args.variants = args.variants.split(",") if args.variants else \
        (["eager", "inductor"] if args.dry_run else list(VARIANTS))
    args.kinds = args.kinds.split(",")
    msg = check_args(args)
    if msg is None and not args.dry_run and not torch.cuda.is_available():
        msg = "no CUDA device; use --dry-run on a CPU machine"
    if msg is None:
        try:
            for name in filter(None, args.list.split(",")):
                tcb.workload_list(name, args.kb)
        except ValueError as e:
            msg = str(e)
    if msg:
        print(f"op_shape_table: {msg}", file=sys.stderr)
        return 2
    args.reps = args.reps or (3 if args.dry_run else 50)
    if args.dry_run and args.dice_mode.startswith("tune"):
        args.dice_mode = "cache"  # nothing to tune without a GPU
    ops, rows = collect(args)
    done: set = set()
    if args.skip_done and os.path.exists(args.out):
        with open(args.out) as f:
            done = {json.loads(line).get("key") for line in f if line.strip()}
    for r in rows:
        with open(args.out, "a") as f:
            f.write(json.dumps(r) + "\n")
    print(f"op_shape_table: {len(ops)} unique op shapes "
          f"({sum(o.count for o in ops)} calls); {len([o for o in ops if o.key() in done])} already in {args.out}",
          flush=True)
    if args.device == "cuda":
        torch.cuda.empty_cache()  # the traced models are gone
    walls, left = [], []
    for spec in ops:
        if spec.key() in done:
            continue
        if args.time_budget_s and walls and time.time() - start + statistics.median(walls) > args.time_budget_s:
            left.append(f"{spec.op} {spec.shape()}")
            continue
        t0 = time.time()
        try:
            row = run_op(spec, args)
        except Exception as e:  # e.g. out of memory building the inputs
            row = {"task": spec.tasks[0], "op": spec.op, "shape": spec.shape(), "dtype": spec.dtype(),
                   "key": spec.key(), "count": spec.count, "errors": {"run": f"{type(e).__name__}: {e}"[:500]},
                   "correct": False}
        row["wall_s"] = round(time.time() - t0, 2)
        walls.append(row["wall_s"])
        rows.append(row)
        print(json.dumps(row), flush=True)
        with open(args.out, "a") as f:  # per row: a chunk killed at its limit keeps its rows
            f.write(json.dumps(row) + "\n")
        if args.device == "cuda":
            torch.cuda.empty_cache()
    if left:
        print(f"op_shape_table: time budget reached; {len(left)} op shapes not run (rerun with --skip-done)",
              flush=True)
    print(summarize(rows))
    return 0


if __name__ == "__main__":
    sys.exit(main())
