#!/usr/bin/env python3
"""Turns kernelbench_bench.py JSON lines into the docs/PERF.md markdown table.

fast_p (KernelBench): share of tasks that are correct AND faster than eager by
more than p (fast_1: speedup > 1, fast_2: speedup > 2). Geomeans are over the
correct tasks. Group speedup: PyTorch's time for a fusion group's ops (the
worker's baseline) over the winner kernel's time, per tuned group.
When a task appears more than once, its last record is used.
Usage: python3 bench/report.py results.jsonl [...]
"""
import json
import math
import sys


def geomean(xs):
    xs = [x for x in xs if x and x > 0]
    return math.exp(sum(math.log(x) for x in xs) / len(xs)) if xs else float("nan")


def main(paths):
    recs = [json.loads(line) for p in paths for line in open(p) if line.strip()]
    # A task measured more than once: the last record (later file, later line) counts.
    latest = {r["task"]: r for r in recs}
    recs = [r for r in recs if latest[r["task"]] is r]
    print("| task | eager µs | compile µs | dice µs | vs eager | vs compile | correct | groups (speedup) | tune s |")
    print("|---|---:|---:|---:|---:|---:|:-:|---|---:|")
    for r in recs:
        if "dice_us" not in r:
            print(f"| {r['task']} | | | | | | error | {r.get('error', '')[:80]} | |")
            continue
        groups = ", ".join(f"{g['description'].split(' ')[0]} {g['speedup']:.2f}x" if g.get("speedup") else
                           f"{g['description'].split(' ')[0]} -" for g in r.get("groups", []))
        print(f"| {r['task']} | {r['eager_us']:.1f} | {r['compile_us']:.1f} | {r['dice_us']:.1f} | "
              f"{r['speedup_vs_eager']:.2f}x | {r['speedup_vs_compile']:.2f}x | {'yes' if r['correct'] else 'NO'} | "
              f"{groups} | {r.get('tune_s', 0):.1f} |")
        if r.get("max_autotune_us"):
            print(f"| ↳ max-autotune | | {r['max_autotune_us']:.1f} | | | {r['max_autotune_us'] / r['dice_us']:.2f}x | | | |")
        if r.get("freezing_us"):
            print(f"| ↳ freezing | | {r['freezing_us']:.1f} | | | {r['freezing_us'] / r['dice_us']:.2f}x | | | |")
        if r.get("dice_replay_us"):
            rep = (r.get("replay") or {}).get("choice", "?")
            ro = r.get("reduce_overhead_us")
            ro_txt = f"; vs reduce-overhead ({ro:.1f} µs) {ro / r['dice_replay_us']:.2f}x" if ro else ""
            print(f"| ↳ dice + CUDA-graph replay ({rep}) | | | {r['dice_replay_us']:.1f} | "
                  f"{r['eager_us'] / r['dice_replay_us']:.2f}x | {r['compile_us'] / r['dice_replay_us']:.2f}x{ro_txt} | "
                  f"{'yes' if r.get('replay_correct') else 'NO'} | | |")
    for level in sorted({r["task"].split("/")[0] for r in recs}):
        rs = [r for r in recs if r["task"].startswith(level)]
        ok = [r for r in rs if r.get("correct")]
        n = len(rs)
        fast1 = sum(1 for r in ok if r["speedup_vs_eager"] > 1.0)
        fast2 = sum(1 for r in ok if r["speedup_vs_eager"] > 2.0)
        gs = [g["speedup"] for r in ok for g in r.get("groups", []) if g.get("speedup")]
        ma = [r for r in ok if r.get("max_autotune_us")]
        ma_txt = (f"; vs max-autotune {geomean([r['max_autotune_us'] / r['dice_us'] for r in ma]):.3f}x over "
                  f"{len(ma)} tasks (max-autotune vs eager {geomean([r['eager_us'] / r['max_autotune_us'] for r in ma]):.3f}x)"
                  if ma else "")
        fz = [r for r in ok if r.get("freezing_us")]
        if fz:
            ma_txt += (f"; vs torch.compile freezing {geomean([r['freezing_us'] / r['dice_us'] for r in fz]):.3f}x over "
                       f"{len(fz)} tasks (min {min(r['freezing_us'] / r['dice_us'] for r in fz):.3f}x)")
        rp = [r for r in ok if r.get("dice_replay_us") and r.get("replay_correct")]
        if rp:
            ma_txt += (f"; dice + CUDA-graph replay (reported apart) vs torch.compile "
                       f"{geomean([r['compile_us'] / r['dice_replay_us'] for r in rp]):.3f}x over {len(rp)} tasks")
            ro = [r for r in rp if r.get("reduce_overhead_us")]
            if ro:
                ma_txt += (f", vs reduce-overhead {geomean([r['reduce_overhead_us'] / r['dice_replay_us'] for r in ro]):.3f}x"
                           f" over {len(ro)}")
        print(f"\n**{level}**: {n} tasks, correct {len(ok)}/{n}, fast_1 {100.0 * fast1 / max(n, 1):.0f}%, "
              f"fast_2 {100.0 * fast2 / max(n, 1):.0f}%, geomean vs eager {geomean([r['speedup_vs_eager'] for r in ok]):.3f}x, "
              f"vs torch.compile {geomean([r['speedup_vs_compile'] for r in ok]):.3f}x; compile vs eager "
              f"{geomean([r['eager_us'] / r['compile_us'] for r in ok]):.3f}x; fused groups vs eager's kernels "
              f"{geomean(gs):.3f}x over {len(gs)} groups{ma_txt}")
    # Groups with a tuned winner that the served model did not run every call.
    missed = [(r["task"], g) for r in recs for g in r.get("serving", []) if g["hits"] < g["calls"]]
    if missed:
        print("\nServed model, groups not served on every call:")
        for task, g in missed:
            reasons = ", ".join(f"{k} x{n}" for k, n in g["fallback_reasons"].items()) or "-"
            print(f"- {task}: {g['group']} {g['hits']}/{g['calls']} hits ({reasons})")


if __name__ == "__main__":
    main(sys.argv[1:])
