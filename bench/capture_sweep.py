#!/usr/bin/env python3
"""Capture sweep (issue 18 item 6): every KernelBench task through the
converter and `dice tune`, one task at a time, each step under a timeout.

For every task file this runs

  examples/make_kernelbench_models.py TASK --out MODELS [--small]
  dice tune MODELS/<level>_<stem>/model.pt --input ... --json tune.json

and appends one JSON line to --out:

  {"task": "level2/76_Gemm_Add_ReLU", "stage": "tune", "rc": 0,
   "outcome": "compiled" | "tuned" | "unchanged" | "error",
   "reason": "...",          # why unchanged, or the error's message
   "warnings": ["..."],      # `dice: warning:` lines (a freeze fallback, ...)
   "groups": 1, "left_out": 1, "candidates": 6, "compiled": 6,
   "convert_s": 2.0, "tune_s": 1.3, "seconds": 3.3}

Outcomes: "tuned" - at least one group has a winner (GPU); "compiled" - the
compile-only run (no GPU) formed groups and compiled their candidates, the
CPU form of a tune that succeeded; "unchanged" - `dice tune` exited 0 and
left the model as it was, with the reason (no fusion group, no candidate
compiled); "error" - the converter or `dice tune` failed or hung ("hang:"
reasons), with the message. The last line printed is the summary:
"capture sweep: N ok, N unchanged-with-reason, N errors (of N)".

  python3 bench/capture_sweep.py --levels level2,level3 --small \
      --dice /tmp/dice-snapshot/dice.sh --out bench/results/.../capture_sweep_cpu.jsonl
  python3 bench/capture_sweep.py --rerun-errors FILE.jsonl ...   # only the tasks that failed in FILE
  python3 bench/capture_sweep.py --explain FILE.jsonl --models M --out /dev/null   # reasons of unchanged tasks
  python3 bench/capture_sweep.py --table FILE.jsonl --out /dev/null   # counts per level, markdown

An unchanged task with no fusion group gets its reason from `dice profile`
(the ops left with PyTorch and why), also kept as "left_with_pytorch".

Exit status: 0 when no task is an error, 1 otherwise, 2 for bad arguments.
"""

import argparse
import glob
import hashlib
import json
import os
import re
import subprocess
import sys
import time

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
CONVERTER = os.path.join(REPO, "examples", "make_kernelbench_models.py")


def task_paths(kb, levels, names):
    """Task files: every .py of <kb>/<level> for each level, or the named
    ones ("level2/76_Gemm_Add_ReLU.py"), sorted by level then task number."""
    if names:
        return [os.path.join(kb, n if n.endswith(".py") else n + ".py") for n in names]
    paths = []
    for level in levels:
        files = glob.glob(os.path.join(kb, level, "*.py"))
        files.sort(key=lambda p: (int(re.match(r"(\d+)", os.path.basename(p)).group(1))
                                  if re.match(r"\d+", os.path.basename(p)) else 1 << 30, p))
        paths.extend(files)
    return paths


def task_name(path):
    return f"{os.path.basename(os.path.dirname(path))}/{os.path.splitext(os.path.basename(path))[0]}"


def run(cmd, timeout_s, env=None):
    """(rc, stdout, stderr, seconds); rc None on timeout."""
    t0 = time.monotonic()
    try:
        p = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout_s, env=env, errors="replace")
        return p.returncode, p.stdout, p.stderr, time.monotonic() - t0
    except subprocess.TimeoutExpired as e:
        out = e.stdout.decode(errors="replace") if isinstance(e.stdout, bytes) else (e.stdout or "")
        err = e.stderr.decode(errors="replace") if isinstance(e.stderr, bytes) else (e.stderr or "")
        return None, out, err, time.monotonic() - t0


def first_error_line(stdout, stderr):
    """The line that says what failed: a `dice: error`/FAIL line, else the last non-empty line."""
    lines = [l.strip() for l in (stderr + "\n" + stdout).splitlines() if l.strip()]
    for l in lines:
        if l.startswith("FAIL ") or "error:" in l.lower() or l.startswith("dice: ") and "failed" in l:
            return l[:600]
    return lines[-1][:600] if lines else ""


def classify_tune(rc, stdout, stderr, report):
    """(outcome, reason, facts) for a finished `dice tune`."""
    facts = {}
    m = re.search(r"(\d+) fusion group\(s\) formed, (\d+) op\(s\) left with PyTorch", stdout)
    if m:
        facts["groups"], facts["left_out"] = int(m.group(1)), int(m.group(2))
    if rc != 0:
        return "error", first_error_line(stdout, stderr), facts
    groups = (report or {}).get("groups", [])
    facts["candidates"] = sum(g.get("tried", 0) for g in groups)
    facts["compiled"] = sum(g.get("compiled", 0) for g in groups)
    facts["outputs_match"] = (report or {}).get("outputs_match")
    failed = [g["description"] for g in groups if g.get("tried", 0) == 0 and g.get("description", "").startswith("group ")]
    if any(g.get("winner") for g in groups):
        return "tuned", "", facts
    if not groups:
        return "unchanged", f"no fusion group formed ({facts.get('left_out', '?')} op(s) left with PyTorch)", facts
    if facts["compiled"] > 0 and not (report or {}).get("gpu", False):
        return "compiled", "", facts
    if failed:
        return "unchanged", "; ".join(failed)[:600], facts
    if facts["compiled"] == 0:
        return "unchanged", "no candidate compiled", facts
    return "unchanged", "no candidate beat PyTorch", facts


def converted_dir(stdout):
    """The model folder the converter wrote, from its line
    `OK   <task> -> <dir>  inputs ...` (examples/make_kernelbench_models.py),
    or None when it printed none."""
    for line in stdout.splitlines():
        if line.startswith("OK ") and " -> " in line:
            return line.split(" -> ", 1)[1].split("  inputs ", 1)[0].strip()
    return None


def sweep_one(path, args, env):
    name = task_name(path)
    rec = {"task": name, "converter": args.converter_sha}
    models = os.path.abspath(args.models)
    conv = [sys.executable, args.converter, path, "--out", models] + (["--small"] if args.small else []) + \
        (["--dtype", args.dtype] if args.dtype else [])
    if args.dtype:
        rec["dtype"] = args.dtype
    rc, out, err, secs = run(conv, args.timeout, env)
    rec["convert_s"] = round(secs, 2)
    if rc != 0:
        rec.update(stage="convert", rc=rc, outcome="error",
                   reason=(f"hang: converter did not exit in {args.timeout} s" if rc is None
                           else first_error_line(out, err)))
        rec["seconds"] = rec["convert_s"]
        return rec
    model_dir = converted_dir(out)
    if model_dir is None:
        rec.update(stage="convert", rc=rc, outcome="error", reason="the converter printed no 'OK ... -> DIR' line")
        rec["seconds"] = rec["convert_s"]
        return rec
    rec["model_dir"] = model_dir
    with open(os.path.join(model_dir, "meta.json"), encoding="utf-8") as f:
        meta = json.load(f)
    rec["inputs"] = meta["inputs"]
    rec["scaled"] = meta.get("scaled", {})
    json_path = os.path.join(model_dir, "tune.json")
    if os.path.exists(json_path):
        os.remove(json_path)
    tune = [args.dice, "tune", os.path.join(model_dir, "model.pt"), "--cache", os.path.abspath(args.cache),
            "--reps", str(args.reps), "--json", json_path]
    for spec in meta["inputs"]:
        tune += ["--input", spec]
    rc, out, err, secs = run(tune, args.timeout, env)
    rec["tune_s"] = round(secs, 2)
    rec["seconds"] = round(rec["convert_s"] + rec["tune_s"], 2)
    rec["stage"] = "tune"
    rec["rc"] = rc
    rec["warnings"] = [l.split("dice: warning:", 1)[1].strip() for l in err.splitlines() if "dice: warning:" in l]
    if rc is None:
        rec.update(outcome="error", reason=f"hang: dice tune did not exit in {args.timeout} s")
        return rec
    report = None
    if os.path.exists(json_path):
        try:
            with open(json_path, encoding="utf-8") as f:
                report = json.load(f)
        except ValueError:
            report = None
    outcome, reason, facts = classify_tune(rc, out, err, report)
    rec.update(facts)
    rec["outcome"], rec["reason"] = outcome, reason
    return rec


def explain_unchanged(rec, args, env):
    """For a task left unchanged with no fusion group: `dice profile` lists
    the ops left with PyTorch and why ("aten::batch_norm (not a fusible
    op)"); the distinct ones, with counts, go into rec["left_with_pytorch"]
    and the reason."""
    if rec.get("outcome") != "unchanged" or rec.get("groups", 0) != 0:
        return rec
    model = os.path.join(rec["model_dir"], "model.pt")  # the converted folder (bf16 ones carry a suffix)
    cmd = [args.dice, "profile", model, "--reps", "1"]
    for spec in rec.get("inputs", []):
        cmd += ["--input", spec]
    rc, out, _, _ = run(cmd, args.timeout, env)
    if rc != 0:
        return rec
    counts = {}
    for line in out.splitlines():
        if line.strip().startswith("left with PyTorch:"):
            what = line.split(":", 1)[1].strip()
            counts[what] = counts.get(what, 0) + 1
    if counts:
        rec["left_with_pytorch"] = counts
        top = sorted(counts.items(), key=lambda kv: -kv[1])
        rec["reason"] = "no fusion group formed: " + ", ".join(f"{n}x {w}" for w, n in top[:4]) + \
            (f", ... ({len(top)} kinds)" if len(top) > 4 else "")
    return rec


def markdown_table(records):
    """| level | tasks | ok | unchanged | errors | rows, then the errors by message."""
    rows = ["| level | tasks | ok (tuned / compiled) | unchanged, with reason | errors | capture warnings |",
            "|---|---:|---:|---:|---:|---:|"]
    for level in sorted({r["task"].split("/")[0] for r in records}):
        rs = [r for r in records if r["task"].startswith(level + "/")]
        ok = sum(r["outcome"] in ("tuned", "compiled") for r in rs)
        rows.append(f"| {level} | {len(rs)} | {ok} | {sum(r['outcome'] == 'unchanged' for r in rs)} | "
                    f"{sum(r['outcome'] == 'error' for r in rs)} | {sum(bool(r.get('warnings')) for r in rs)} |")
    errors = [r for r in records if r["outcome"] == "error"]
    if errors:
        rows.append("")
        rows += [f"- {r['task']}: {r['reason'][:200]}" for r in errors]
    return "\n".join(rows)


def summary(records):
    ok = sum(r["outcome"] in ("tuned", "compiled") for r in records)
    unchanged = sum(r["outcome"] == "unchanged" for r in records)
    errors = sum(r["outcome"] == "error" for r in records)
    return f"capture sweep: {ok} ok, {unchanged} unchanged-with-reason, {errors} errors (of {len(records)})"


def main(argv):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--kb", default=os.path.join(REPO, "..", "shared", "data", "kernelbench"))
    p.add_argument("--levels", default="level1,level2,level3", help="comma list of level folders")
    p.add_argument("--tasks", nargs="*", default=[], help="task files relative to --kb (instead of --levels)")
    p.add_argument("--rerun-errors", default="", help="a previous JSONL: run only the tasks that were errors there")
    p.add_argument("--dice", default=os.path.join(REPO, "build", "cli", "dice"), help="the dice executable")
    p.add_argument("--converter", default=CONVERTER, help="the KernelBench -> TorchScript converter script")
    p.add_argument("--out", required=True, help="JSONL file to append one line per task to")
    p.add_argument("--models", default="/tmp/capture_sweep/models", help="where converted models go")
    p.add_argument("--cache", default="/tmp/capture_sweep/cache", help="dice tune --cache")
    p.add_argument("--small", action="store_true", help="converter --small (CPU machines)")
    p.add_argument("--dtype", choices=["f32", "bf16", "f16"], default=None,
                   help="converter --dtype: every task cast to this dtype (rows say dtype); default the task's own")
    p.add_argument("--timeout", type=float, default=300.0, help="seconds per step; past it the task is a hang")
    p.add_argument("--reps", type=int, default=3, help="dice tune --reps (end-to-end timing repetitions)")
    p.add_argument("--explain", default="", help="a JSONL this script wrote: add the ops left with PyTorch "
                                                  "(dice profile) to its unchanged tasks, in place (--models as when run)")
    p.add_argument("--table", default="", help="a JSONL this script wrote: print its counts per level as markdown")
    p.add_argument("--skip-done", action="store_true", help="skip tasks already recorded in --out")
    args = p.parse_args(argv)

    if args.table:  # markdown counts per level (docs/PERF.md)
        with open(args.table, encoding="utf-8") as f:
            records = [json.loads(l) for l in f if l.strip()]
        print(markdown_table(records))
        return 0
    if args.explain:  # fill in the reasons of unchanged tasks in an existing file, in place
        with open(args.explain, encoding="utf-8") as f:
            records = [json.loads(l) for l in f if l.strip()]
        records = [explain_unchanged(r, args, dict(os.environ)) for r in records]
        with open(args.explain, "w", encoding="utf-8") as f:
            f.writelines(json.dumps(r) + "\n" for r in records)
        print(summary(records))
        return 0
    names = list(args.tasks)
    if args.rerun_errors:
        with open(args.rerun_errors, encoding="utf-8") as f:
            names += [json.loads(l)["task"] + ".py" for l in f if l.strip() and json.loads(l)["outcome"] == "error"]
    paths = task_paths(args.kb, [l for l in args.levels.split(",") if l], names)
    if not paths:
        print("capture_sweep: no task files found", file=sys.stderr)
        return 2
    done = set()
    if args.skip_done and os.path.exists(args.out):
        with open(args.out, encoding="utf-8") as f:
            done = {json.loads(l)["task"] for l in f if l.strip()}
    os.makedirs(os.path.dirname(os.path.abspath(args.out)), exist_ok=True)
    os.makedirs(args.models, exist_ok=True)
    os.makedirs(args.cache, exist_ok=True)
    env = dict(os.environ)
    with open(args.converter, "rb") as f:
        args.converter_sha = hashlib.sha256(f.read()).hexdigest()[:12]  # which converter made the model
    records = []
    for path in paths:
        if task_name(path) in done:
            continue
        rec = explain_unchanged(sweep_one(path, args, env), args, env)
        records.append(rec)
        with open(args.out, "a", encoding="utf-8") as f:
            f.write(json.dumps(rec) + "\n")
        extra = (" " + rec["reason"][:160]) if rec.get("reason") else ""
        warn = f" [{len(rec.get('warnings', []))} warning(s)]" if rec.get("warnings") else ""
        print(f"{rec['outcome']:9s} {rec['seconds']:7.1f}s {rec['task']}{warn}{extra}", flush=True)
    print(summary(records))
    return 1 if any(r["outcome"] == "error" for r in records) else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
