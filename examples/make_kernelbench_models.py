#!/usr/bin/env python3
"""Turn KernelBench task files into TorchScript models for DICE.

Each task file (../shared/data/kernelbench/level1/*.py, level2/*.py) defines
`Model`, `get_inputs()` and `get_init_inputs()`. For every file given this
script builds `Model(*get_init_inputs())`, traces it with torch.jit.trace on
`get_inputs()` and writes, into OUT/<level>_<file stem>/:

  model.pt      the traced TorchScript module (torch::jit::load)
  inputs.pt     the example inputs, a list of tensors (torch.save; C++: torch::pickle_load)
  expected.pt   the eager output on those inputs (tensor or list of tensors)
  meta.json     {"task", "level", "device", "inputs": ["1024x8192:f32", ...],
                 "outputs": [...], "scaled": {"batch_size": [4096, 64], ...}}

Input specs use the DICE CLI form "<d0>x<d1>x...:<dtype>" ("scalar:f32" for 0-d).

--small (CPU machines): the module-level integer constants the file declares
(batch_size, dim, in_features, ...; only values >= 64, so kernel sizes, groups
and strides stay) are halved together until the inputs and parameters fit in
--budget-mb. Sizes are measured on the meta device, so nothing large is ever
allocated. Without --small the file's own shapes are used (on CUDA when one is
available, unless --device says otherwise).

Exit status: 0 when every file was converted, 1 when any failed (each failure
is printed with its reason), 2 for bad arguments.
"""

import argparse
import ast
import json
import os
import sys
import traceback

import torch

DTYPE_NAMES = {
    torch.float32: "f32",
    torch.float16: "f16",
    torch.bfloat16: "bf16",
    torch.float64: "f64",
    torch.int64: "i64",
    torch.int32: "i32",
    torch.bool: "b8",
}
MIN_SCALED_VALUE = 64  # ints below this (kernel sizes, groups, strides) are never scaled


def spec_of(t):
    """'1024x8192:f32' for a tensor."""
    dims = "x".join(str(d) for d in t.shape) if t.dim() > 0 else "scalar"
    return f"{dims}:{DTYPE_NAMES.get(t.dtype, str(t.dtype).replace('torch.', ''))}"


def module_level_ints(path, source):
    """Module-level names the file assigns that hold ints after it runs
    (literals and expressions such as `N = 2048 * 2`): {'batch_size': 4096}."""
    names = []
    for node in ast.parse(source).body:
        if isinstance(node, ast.Assign):
            names.extend(t.id for t in node.targets if isinstance(t, ast.Name))
    ns = load_namespace(path, source, {})
    return {n: ns[n] for n in names if type(ns.get(n)) is int}


def load_namespace(path, source, overrides):
    """Executes the task file with some module-level ints replaced. The
    replacement happens in the assignments themselves, so module-level values
    derived from them (``bias_shape = (out_features,)``) follow."""
    ns = {"__name__": "kernelbench_task", "__file__": path}
    tree = ast.parse(source, path)
    for node in tree.body:
        if isinstance(node, ast.Assign) and len(node.targets) == 1 and isinstance(node.targets[0], ast.Name) \
                and node.targets[0].id in overrides:
            node.value = ast.copy_location(ast.Constant(overrides[node.targets[0].id]), node.value)
    exec(compile(tree, path, "exec"), ns)
    # get_inputs/get_init_inputs read the globals at call time.
    ns.update(overrides)
    return ns


def footprint_bytes(ns):
    """Bytes of the inputs plus the parameters, measured on the meta device."""
    with torch.device("meta"):
        inputs = ns["get_inputs"]()
        model = ns["Model"](*ns["get_init_inputs"]())
    total = sum(t.numel() * t.element_size() for t in inputs if isinstance(t, torch.Tensor))
    total += sum(p.numel() * p.element_size() for p in model.parameters())
    total += sum(b.numel() * b.element_size() for b in model.buffers())
    return total


def scale_down(path, source, budget_bytes):
    """Halves the large module-level ints together until the task fits."""
    ints = {k: v for k, v in module_level_ints(path, source).items() if v >= MIN_SCALED_VALUE}
    current = dict(ints)
    for _ in range(64):
        ns = load_namespace(path, source, current)
        if footprint_bytes(ns) <= budget_bytes:
            return current, ints
        shrinkable = {k: v for k, v in current.items() if v // 2 >= 16}
        if not shrinkable:
            break
        for k in shrinkable:
            current[k] = current[k] // 2
    raise RuntimeError(f"cannot scale the task below {budget_bytes} bytes (ints: {ints})")


def flatten_outputs(out):
    if isinstance(out, torch.Tensor):
        return [out]
    if isinstance(out, (list, tuple)):
        flat = []
        for o in out:
            flat.extend(flatten_outputs(o))
        return flat
    raise TypeError(f"unsupported output type {type(out).__name__}")


def convert(path, out_root, device, small, budget_bytes, seed):
    level = os.path.basename(os.path.dirname(os.path.abspath(path)))
    stem = os.path.splitext(os.path.basename(path))[0]
    with open(path, encoding="utf-8") as f:
        source = f.read()
    overrides, original = ({}, {})
    if small:
        overrides, original = scale_down(path, source, budget_bytes)
    ns = load_namespace(path, source, overrides)

    torch.manual_seed(seed)
    model = ns["Model"](*ns["get_init_inputs"]()).eval().to(device)
    inputs = ns["get_inputs"]()
    if not all(isinstance(t, torch.Tensor) for t in inputs):
        raise TypeError("get_inputs() returned a non-tensor input; torch.jit.trace needs tensors")
    inputs = [t.to(device) for t in inputs]
    with torch.no_grad():
        expected = model(*inputs)
        traced = torch.jit.trace(model, tuple(inputs), check_trace=False)
    outputs = flatten_outputs(expected)

    out_dir = os.path.join(out_root, f"{level}_{stem}")
    os.makedirs(out_dir, exist_ok=True)
    traced.save(os.path.join(out_dir, "model.pt"))
    torch.save([t.detach().cpu() for t in inputs], os.path.join(out_dir, "inputs.pt"))
    torch.save(expected.detach().cpu() if isinstance(expected, torch.Tensor) else [o.detach().cpu() for o in outputs],
               os.path.join(out_dir, "expected.pt"))
    meta = {
        "task": stem,
        "level": level,
        "source": os.path.abspath(path),
        "device": str(device),
        "inputs": [spec_of(t) for t in inputs],
        "outputs": [spec_of(o) for o in outputs],
        "scaled": {k: [original[k], overrides[k]] for k in overrides if overrides[k] != original[k]},
        "seed": seed,
        "torch": torch.__version__,
    }
    with open(os.path.join(out_dir, "meta.json"), "w", encoding="utf-8") as f:
        json.dump(meta, f, indent=2)
    return out_dir, meta


def main(argv):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("tasks", nargs="+", help="KernelBench task files (level1/*.py, level2/*.py)")
    p.add_argument("--out", required=True, help="output directory")
    p.add_argument("--device", choices=["auto", "cpu", "cuda"], default="auto",
                   help="where to build and trace (auto: cuda when available and not --small)")
    p.add_argument("--small", action="store_true", help="scale the task's module-level sizes down to --budget-mb")
    p.add_argument("--budget-mb", type=float, default=64.0, help="input+parameter budget for --small, MiB")
    p.add_argument("--seed", type=int, default=0)
    args = p.parse_args(argv)

    if args.device == "cuda" and not torch.cuda.is_available():
        print("make_kernelbench_models: --device cuda but no CUDA device is available", file=sys.stderr)
        return 2
    if args.device == "auto":
        device = torch.device("cuda" if torch.cuda.is_available() and not args.small else "cpu")
    else:
        device = torch.device(args.device)

    failures = 0
    for path in args.tasks:
        try:
            out_dir, meta = convert(path, args.out, device, args.small, int(args.budget_mb * 2**20), args.seed)
            scaled = ", ".join(f"{k} {a}->{b}" for k, (a, b) in meta["scaled"].items())
            print(f"OK   {path} -> {out_dir}  inputs {' '.join(meta['inputs'])}" + (f"  (scaled: {scaled})" if scaled else ""))
        except Exception as e:  # one bad task must not stop the batch
            failures += 1
            print(f"FAIL {path}: {type(e).__name__}: {e}", file=sys.stderr)
            if os.environ.get("DICE_DEBUG"):
                traceback.print_exc()
    print(f"{len(args.tasks) - failures}/{len(args.tasks)} converted")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
