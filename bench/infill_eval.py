#!/usr/bin/env python3
"""The DICE kernel-infilling evaluation items through the extension-form path.

Each item of kernel_infilling_evaluation.json (fields id, pytorch_code,
cuda_code, prefix, middle, suffix; `middle` is a reference solution, and
prefix+middle+suffix is a KernelBench `ModelNew` program that builds its CUDA
source with torch.utils.cpp_extension.load_inline) is:
  1. assembled (prefix+middle+suffix; checked against cuda_code) and given a
     unique extension name (the items all call theirs `custom_ops`, which
     load_inline would otherwise cache by name within one process);
  2. compiled: the program is imported in a child process with its own
     TORCH_EXTENSIONS_DIR under --build-root (TORCH_CUDA_ARCH_LIST=9.0 by
     default, MAX_JOBS=1), --jobs children at a time, each killed after
     --timeout seconds;
  3. judged by KernelBench's protocol in a GPU child process: Model and
     ModelNew built from get_init_inputs() after the same seed, --trials
     trials of seeded get_inputs() (on the GPU), outputs compared with
     atol=rtol=1e-2 (shape first), then both timed with CUDA events (warm-up,
     median of --reps, ms). A child that crashes or hangs (--timeout) costs
     only the item in flight; the next child goes on with the rest.
Results are appended one JSON line per item to --out-dir/infill_eval.jsonl
(items already there are skipped: the run is resumable across calls) and
summarised in --out-dir/infill_eval.md: items compiled / correct, fast_1
(correct and faster than PyTorch eager), geometric-mean speedup over the
correct items. --deadline-s bounds the whole run (unstarted items are left
for the next call).

--dry-run only assembles each item and checks the reference and assembled
programs are valid Python defining Model / ModelNew (no torch import, no
compiler, no GPU).

Usage (GPU machine, one call):
  python3 bench/infill_eval.py --data .deps/data/kernel_infilling_evaluation.json \
      --out-dir bench/results/infill --jobs 14 --timeout 240 --deadline-s 500
"""
import argparse
import ast
import json
import math
import os
import re
import subprocess
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor

HERE = os.path.abspath(__file__)
sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(HERE)), "runtime", "python"))
import dice_kb_judge as kb_judge  # noqa: E402  (no torch import at module level)
NAME_RE = re.compile(r"""(\bname\s*=\s*)(['"])([^'"]+)\2""")


def assemble(item):
    """(program with a unique extension name, whether prefix+middle+suffix == cuda_code)."""
    program = item["prefix"] + item["middle"] + item["suffix"]
    same = program == item.get("cuda_code", program)
    unique = f"dice_infill_{item['id']}"
    program, n = NAME_RE.subn(lambda m: m.group(1) + m.group(2) + unique + m.group(2), program, count=1)
    return program, same, n == 1


def defines(source, name):
    tree = ast.parse(source)
    return any(isinstance(n, ast.ClassDef) and n.name == name for n in tree.body)


def dry_run_item(item):
    program, same, renamed = assemble(item)
    rec = {"id": item["id"], "assembled_equals_cuda_code": same, "renamed": renamed}
    try:
        compile(item["pytorch_code"], f"item{item['id']}_ref.py", "exec")
        compile(program, f"item{item['id']}_new.py", "exec")
        rec["model"] = defines(item["pytorch_code"], "Model")
        rec["model_new"] = defines(program, "ModelNew")
        rec["uses_load_inline"] = "load_inline" in program
        rec["status"] = "syntax_ok" if rec["model"] and rec["model_new"] and rec["uses_load_inline"] else "bad_program"
    except SyntaxError as e:
        rec["status"] = "syntax_error"
        rec["error"] = f"{e.filename}:{e.lineno}: {e.msg}"
    return rec


# ------------------------------------------------------------------ children

def child_compile(program_path):
    """Imports the program: load_inline builds the extension (or raises)."""
    mod = kb_judge.load_module("dice_infill_program", program_path)
    if not hasattr(mod, "ModelNew"):
        raise RuntimeError("the program defines no ModelNew")


def judge(item_dir, trials, reps, seed):
    """KernelBench protocol for one compiled item (runtime/python/dice_kb_judge.py,
    the judge dice::JudgeProgram runs); returns a result dict."""
    ref = kb_judge.load_module("dice_infill_ref", os.path.join(item_dir, "reference.py"))
    new = kb_judge.load_module("dice_infill_new", os.path.join(item_dir, "program.py"))
    return kb_judge.judge_models(ref, new, "cuda", trials, reps, seed)


def child_judge(work, ids, trials, reps, seed):
    """GPU child: judges `ids` in order, one 'BEGIN id' then one 'RESULT {json}' line each."""
    import torch
    for item_id in ids:
        print(f"BEGIN {item_id}", flush=True)
        item_dir = os.path.join(work, str(item_id))
        os.environ["TORCH_EXTENSIONS_DIR"] = os.path.join(item_dir, "ext")
        try:
            rec = judge(item_dir, trials, reps, seed)
        except Exception as e:  # a bad program: recorded, the next item goes on
            rec = {"correct": False, "error": f"{type(e).__name__}: {str(e)[:600]}"}
        rec["id"] = item_id
        print("RESULT " + json.dumps(rec), flush=True)
        if "CUDA error" in rec.get("error", "") or "illegal memory" in rec.get("error", ""):
            return  # the context is unusable: the parent starts a fresh child for the rest


# ------------------------------------------------------------------ parent

def child_env(item_dir, arch):
    env = dict(os.environ)
    env["TORCH_EXTENSIONS_DIR"] = os.path.join(item_dir, "ext")
    env.setdefault("TORCH_CUDA_ARCH_LIST", arch)
    env["MAX_JOBS"] = "1"
    return env


def compile_item(work, item_id, timeout, arch):
    item_dir = os.path.join(work, str(item_id))
    t0 = time.time()
    try:
        p = subprocess.run([sys.executable, HERE, "--_child-compile", os.path.join(item_dir, "program.py")],
                           env=child_env(item_dir, arch), capture_output=True, text=True, timeout=timeout)
        ok = p.returncode == 0
        err = "" if ok else (p.stderr.strip().splitlines() or ["exit %d" % p.returncode])
        if not ok:
            errors = [l for l in err if "error" in l.lower()]
            err = "\n".join((errors or err)[-6:])[:1500]
    except subprocess.TimeoutExpired:
        ok, err = False, f"compile exceeded {timeout} s"
    return {"id": item_id, "compiled": ok, "compile_s": round(time.time() - t0, 1), "compile_error": err}


def judge_items(work, ids, args, deadline):
    """Runs GPU children until every id has a result or the deadline passes."""
    results, remaining = {}, list(ids)
    while remaining and time.time() < deadline:
        cmd = [sys.executable, HERE, "--_child-judge", work, "--trials", str(args.trials), "--reps", str(args.reps),
               "--seed", str(args.seed), "--ids"] + [str(i) for i in remaining]
        p = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True,
                             env=child_env(work, args.arch))
        in_flight, last = None, time.time()
        import selectors
        sel = selectors.DefaultSelector()
        sel.register(p.stdout, selectors.EVENT_READ)
        while True:
            limit = min(args.timeout, deadline - time.time())
            if not sel.select(timeout=max(limit - (time.time() - last), 0.1)):
                if time.time() - last >= limit:
                    p.kill()
                    if in_flight is not None:
                        results[in_flight] = {"id": in_flight, "correct": False,
                                              "error": f"timeout: no result within {args.timeout} s"}
                    break
                continue
            line = p.stdout.readline()
            if not line:  # the child ended
                p.wait()
                if in_flight is not None:
                    results[in_flight] = {"id": in_flight, "correct": False,
                                          "error": f"crashed: the judging process ended ({p.returncode})"}
                break
            last = time.time()
            if line.startswith("BEGIN "):
                in_flight = int(line.split()[1])
            elif line.startswith("RESULT "):
                rec = json.loads(line[7:])
                results[rec["id"]] = rec
                in_flight = None
        p.wait()
        remaining = [i for i in remaining if i not in results]
    return results


def summarise(records, out_md, total):
    compiled = [r for r in records if r.get("compiled")]
    correct = [r for r in records if r.get("correct")]
    fast1 = [r for r in correct if r.get("speedup", 0) > 1.0]
    speedups = [r["speedup"] for r in correct if r.get("speedup", 0) > 0]
    geo = math.exp(sum(math.log(s) for s in speedups) / len(speedups)) if speedups else 0.0
    lines = ["# Kernel-infilling reference solutions through the extension-form path", "",
             f"items: {len(records)} of {total}; compiled: {len(compiled)}; correct: {len(correct)}; "
             f"fast_1: {len(fast1)}; geomean speedup (correct items): {geo:.3f}x", "",
             "| id | compiled | correct | PyTorch ms | ModelNew ms | speedup | note |",
             "|---:|:---:|:---:|---:|---:|---:|---|"]
    for r in sorted(records, key=lambda r: r["id"]):
        note = (r.get("compile_error") or r.get("error") or "").replace("\n", " ").replace("|", "/")[:120]
        lines.append(f"| {r['id']} | {'yes' if r.get('compiled') else 'no'} | {'yes' if r.get('correct') else 'no'} "
                     f"| {r.get('ref_ms', 0):.3f} | {r.get('new_ms', 0):.3f} | {r.get('speedup', 0):.2f} | {note} |")
    with open(out_md, "w") as f:
        f.write("\n".join(lines) + "\n")
    summary = (f"infill_eval: {len(records)}/{total} items; compiled {len(compiled)}; correct {len(correct)}; "
               f"fast_1 {len(fast1)}; geomean {geo:.3f}x")
    print(summary)
    return summary


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--data", help="kernel_infilling_evaluation.json")
    p.add_argument("--out-dir", default="bench/results/infill")
    p.add_argument("--build-root", default="build/infill-eval",
                   help="programs and per-item TORCH_EXTENSIONS_DIR (kept: reruns reuse the builds)")
    p.add_argument("--limit", type=int, default=0, help="at most this many items (0 = all)")
    p.add_argument("--offset", type=int, default=0, help="skip the first N items")
    p.add_argument("--jobs", type=int, default=14, help="compiles at once")
    p.add_argument("--timeout", type=float, default=240, help="per item: compile, and judging, seconds")
    p.add_argument("--deadline-s", type=float, default=500, help="whole run, seconds; the rest waits for a rerun")
    p.add_argument("--trials", type=int, default=5)
    p.add_argument("--reps", type=int, default=50)
    p.add_argument("--seed", type=int, default=42)
    p.add_argument("--arch", default="9.0", help="TORCH_CUDA_ARCH_LIST when unset")
    p.add_argument("--dry-run", action="store_true", help="assemble + Python syntax check only (CPU)")
    p.add_argument("--_child-compile", dest="child_compile")
    p.add_argument("--_child-judge", dest="child_judge")
    p.add_argument("--ids", type=int, nargs="*")
    args = p.parse_args()

    if args.child_compile:
        child_compile(args.child_compile)
        return 0
    if args.child_judge:
        child_judge(args.child_judge, args.ids, args.trials, args.reps, args.seed)
        return 0
    if not args.data:
        p.error("--data FILE is required")
    start = time.time()
    deadline = start + args.deadline_s
    try:
        with open(args.data) as f:
            items = json.load(f)
    except (OSError, ValueError) as e:
        print(f"infill_eval: error: cannot read --data {args.data}: {e}", file=sys.stderr)
        return 2
    for k in ("id", "pytorch_code", "prefix", "middle", "suffix"):
        missing = [i for i, it in enumerate(items) if k not in it]
        if missing:
            print(f"infill_eval: error: item #{missing[0]} of {args.data} has no '{k}'", file=sys.stderr)
            return 2
    total = len(items)
    items = items[args.offset:]
    if args.limit:
        items = items[:args.limit]
    os.makedirs(args.out_dir, exist_ok=True)

    if args.dry_run:
        recs = [dry_run_item(it) for it in items]
        with open(os.path.join(args.out_dir, "infill_eval_dry.jsonl"), "w") as f:
            for r in recs:
                f.write(json.dumps(r) + "\n")
        ok = sum(r["status"] == "syntax_ok" for r in recs)
        same = sum(r["assembled_equals_cuda_code"] for r in recs)
        renamed = sum(r["renamed"] for r in recs)
        print(f"infill_eval dry run: {ok}/{len(recs)} programs valid; {same}/{len(recs)} assembled == cuda_code; "
              f"{renamed}/{len(recs)} renamed")
        return 0 if ok == len(recs) else 1

    out_jsonl = os.path.join(args.out_dir, "infill_eval.jsonl")
    done = {}
    if os.path.exists(out_jsonl):
        with open(out_jsonl) as f:
            for line in f:
                if line.strip():
                    r = json.loads(line)
                    done[r["id"]] = r
    todo = [it for it in items if it["id"] not in done]
    print(f"infill_eval: {len(items)} items, {len(items) - len(todo)} already in {out_jsonl}, {len(todo)} to run",
          flush=True)
    work = os.path.abspath(args.build_root)
    for it in todo:
        d = os.path.join(work, str(it["id"]))
        os.makedirs(os.path.join(d, "ext"), exist_ok=True)
        program, same, _ = assemble(it)
        with open(os.path.join(d, "program.py"), "w") as f:
            f.write(program)
        with open(os.path.join(d, "reference.py"), "w") as f:
            f.write(it["pytorch_code"])

    # Compile (CPU, --jobs at a time) until the deadline, keeping time to judge.
    compile_deadline = start + args.deadline_s * 0.7
    compiled = {}
    with ThreadPoolExecutor(max_workers=max(1, args.jobs)) as pool:
        futures = {}
        for it in todo:
            futures[it["id"]] = pool.submit(
                lambda i: compile_item(work, i, args.timeout, args.arch) if time.time() < compile_deadline else None,
                it["id"])
        for item_id, fut in futures.items():
            r = fut.result()
            if r is not None:
                compiled[item_id] = r
                print(f"  compiled {item_id}: {'ok' if r['compiled'] else 'FAILED'} ({r['compile_s']} s)", flush=True)
    ok_ids = [i for i, r in compiled.items() if r["compiled"]]
    judged = judge_items(work, ok_ids, args, deadline) if ok_ids else {}
    with open(out_jsonl, "a") as f:
        for item_id, c in compiled.items():
            if c["compiled"] and item_id not in judged:
                continue  # compiled but not judged before the deadline: next run
            rec = dict(c)
            rec.update(judged.get(item_id, {"correct": False}))
            done[item_id] = rec
            f.write(json.dumps(rec) + "\n")
    summarise(list(done.values()), os.path.join(args.out_dir, "infill_eval.md"), total)
    left = total - len(done)
    if left:
        print(f"infill_eval: {left} item(s) not run yet; run the same command again to continue")
    return 0


if __name__ == "__main__":
    sys.exit(main())
