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
                 "outputs": [...], "scaled": {"batch_size": [4096, 64], ...},
                 "constants": {"1": 3.14}, "fixed_inputs": {"1": "8192:i64"}}
                (by argument index: Python numbers get_inputs() returned,
                fixed in the traced graph, and integer/bool tensors - class
                indices, masks - kept as module buffers; neither is an input)

Input specs use the DICE CLI form "<d0>x<d1>x...:<dtype>" ("scalar:f32" for 0-d).

--small (CPU machines): the module-level integer constants the file declares
(batch_size, dim, in_features, ..., also in tuple assignments such as
`depth, height, width = 16, 32, 32`; only values >= 64, so kernel sizes, groups
and strides stay) are halved together until the inputs and parameters fit in --budget-mb
and the outputs in --max-output-mb. When those are exhausted, the ints that only get_inputs() reads
(batch_size, depth, height, width: input extents, never a layer's argument)
are halved too, from 32 down to 16. Sizes are measured on the meta device, so nothing large is ever
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
MIN_SCALED_VALUE = 64  # ints below this (kernel sizes, groups, strides) are never scaled...
MIN_INPUT_ONLY_VALUE = 32  # ...unless only get_inputs() reads them (input extents), then from this size
MIN_RESULT = 16  # no int is halved below this


def spec_of(t):
    """'1024x8192:f32' for a tensor."""
    dims = "x".join(str(d) for d in t.shape) if t.dim() > 0 else "scalar"
    return f"{dims}:{DTYPE_NAMES.get(t.dtype, str(t.dtype).replace('torch.', ''))}"


def assigned_names(node):
    """[(name, value node)] of a module-level `x = 1` or `a, b = 1, 2`
    assignment (value node None where the tuple's shape does not match)."""
    if not isinstance(node, ast.Assign) or len(node.targets) != 1:
        return []
    target = node.targets[0]
    if isinstance(target, ast.Name):
        return [(target.id, node.value)]
    if isinstance(target, (ast.Tuple, ast.List)) and all(isinstance(e, ast.Name) for e in target.elts):
        values = node.value.elts if isinstance(node.value, (ast.Tuple, ast.List)) and \
            len(node.value.elts) == len(target.elts) else [None] * len(target.elts)
        return [(e.id, v) for e, v in zip(target.elts, values)]
    return []


def module_level_ints(path, source):
    """Module-level names the file assigns that hold ints after it runs
    (literals and expressions such as `N = 2048 * 2`, tuple assignments
    `depth, height, width = 16, 32, 32`), and the int literals of a list or
    tuple (`hidden_layer_sizes = [32768, 32768]`, named 'name[i]'):
    {'batch_size': 4096, 'hidden_layer_sizes[0]': 32768}."""
    names, elements = [], {}
    for node in ast.parse(source).body:
        pairs = assigned_names(node)
        names.extend(n for n, _ in pairs)
        if isinstance(node, ast.Assign) and len(node.targets) > 1:
            names.extend(t.id for t in node.targets if isinstance(t, ast.Name))
        if len(pairs) == 1 and isinstance(pairs[0][1], (ast.List, ast.Tuple)):
            for i, e in enumerate(pairs[0][1].elts):
                if isinstance(e, ast.Constant) and type(e.value) is int:
                    elements[f"{pairs[0][0]}[{i}]"] = e.value
    ns = load_namespace(path, source, {})
    ints = {n: ns[n] for n in names if type(ns.get(n)) is int}
    ints.update(elements)
    return ints


def input_only_names(source):
    """Names that get_inputs() reads and nothing else at module level does
    (get_init_inputs, Model, other assignments): input extents such as
    batch_size or height, which no layer's argument depends on."""
    reads = {}
    for node in ast.parse(source).body:
        key = node.name if isinstance(node, (ast.FunctionDef, ast.ClassDef)) else "<module>"
        used = {n.id for n in ast.walk(node) if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Load)}
        reads.setdefault(key, set()).update(used)
    inputs = reads.pop("get_inputs", set())
    others = set().union(*reads.values()) if reads else set()
    return inputs - others


def load_namespace(path, source, overrides):
    """Executes the task file with some module-level ints replaced. The
    replacement happens in the assignments themselves (also inside
    `a, b = 1, 2` and list literals, 'name[i]'), so module-level values derived from them
    (``bias_shape = (out_features,)``) follow."""
    ns = {"__name__": "kernelbench_task", "__file__": path}
    tree = ast.parse(source, path)
    for node in tree.body:
        pairs = assigned_names(node)
        if len(pairs) == 1 and pairs[0][0] in overrides:
            node.value = ast.copy_location(ast.Constant(overrides[pairs[0][0]]), node.value)
        elif len(pairs) == 1 and isinstance(node.value, (ast.List, ast.Tuple)):
            for i, e in enumerate(node.value.elts):
                key = f"{pairs[0][0]}[{i}]"
                if key in overrides:
                    node.value.elts[i] = ast.copy_location(ast.Constant(overrides[key]), e)
        elif len(pairs) > 1 and isinstance(node.value, (ast.Tuple, ast.List)):
            for i, (name, value) in enumerate(pairs):
                if name in overrides and value is not None:
                    node.value.elts[i] = ast.copy_location(ast.Constant(overrides[name]), value)
    exec(compile(tree, path, "exec"), ns)
    # get_inputs/get_init_inputs read the globals at call time.
    ns.update({k: v for k, v in overrides.items() if "[" not in k})
    return ns


def footprint_bytes(ns):
    """(input bytes, parameter + buffer bytes, output bytes), measured on the
    meta device (a 32768x64 @ 64x32768 task is 16 MiB in, 4 GiB out). A model
    whose constructor reads values (``.item()`` on a linspace, as SwinMLP's
    drop-path rates) cannot be built there; it is built on the CPU and its
    outputs count as 0."""
    outputs = []
    with torch.device("meta"):
        inputs = ns["get_inputs"]()
        try:
            model = ns["Model"](*ns["get_init_inputs"]())
        except (RuntimeError, NotImplementedError):
            model = None
        if model is not None:
            try:
                with torch.no_grad():
                    outputs = flatten_outputs(model(*inputs))
            except Exception:  # shapes that do not run: runs_on_meta() says so
                outputs = []
    if model is None:
        model = ns["Model"](*ns["get_init_inputs"]())
    size = lambda ts: sum(t.numel() * t.element_size() for t in ts if isinstance(t, torch.Tensor))
    params = size(model.parameters()) + size(model.buffers())
    return size(inputs), params, size(outputs)


def runs_on_meta(ns):
    """Whether Model(*get_init_inputs())(*get_inputs()) runs on the meta
    device (shapes only, nothing allocated): scaled sizes that a layer's
    fixed argument no longer matches (a LayerNorm over the width) fail here.
    A model that cannot be built there (its constructor reads a value) is
    run on the CPU instead; callers only ask that at sizes within budget."""
    try:
        with torch.device("meta"):
            model = ns["Model"](*ns["get_init_inputs"]())
    except (RuntimeError, NotImplementedError):
        model = None
    try:
        with torch.no_grad():
            if model is None:
                ns["Model"](*ns["get_init_inputs"]())(*ns["get_inputs"]())
            else:
                with torch.device("meta"):
                    model(*ns["get_inputs"]())
        return True
    except Exception:  # any failure: these sizes do not make a model
        return False


def builds_on_meta(ns):
    try:
        with torch.device("meta"):
            ns["Model"](*ns["get_init_inputs"]())
        return True
    except (RuntimeError, NotImplementedError):
        return False


def halvings(ints, input_only, inputs_first):
    """The scaled configurations to try, in order: each one halves a set of
    ints at once. The large ints (>= MIN_SCALED_VALUE) go first, all
    together, then the input-only ones; inputs_first halves the input-only
    ints first, one at a time (an input extent is the safest to shrink when
    layer sizes are tied to each other), then everything."""
    current = dict(ints)
    yield dict(current)
    for _ in range(64):
        halvable = [k for k, v in current.items() if v // 2 >= MIN_RESULT]
        if inputs_first:  # one input extent at a time, in declaration order (batch_size first)
            first = [k for k in halvable if k in input_only][:1]
        else:
            first = [k for k in halvable if ints[k] >= MIN_SCALED_VALUE]
        shrinkable = first or halvable
        if not shrinkable:
            return
        for k in shrinkable:
            current[k] //= 2
        yield dict(current)


def scale_down(path, source, budget_bytes, max_param_bytes, max_output_bytes):
    """Halves the module-level ints until the task's inputs and parameters
    fit in budget_bytes, its outputs in max_output_bytes, and it still runs (checked on the meta device when
    the unscaled task runs there). Tries the large ints first, then the
    input extents first. A network whose layer sizes are written in its
    class (VGG16's 4096-wide classifier) cannot shrink its parameters: when
    no configuration fits, the most halved one whose inputs fit in
    budget_bytes, whose parameters fit in max_param_bytes and that runs is
    taken (the least CPU work).
    Errors: RuntimeError when no configuration fits and runs."""
    all_ints = module_level_ints(path, source)
    input_only = input_only_names(source)
    ints = {k: v for k, v in all_ints.items() if v >= MIN_SCALED_VALUE or
            (k in input_only and v >= MIN_INPUT_ONLY_VALUE)}
    unscaled = load_namespace(path, source, {})
    check_meta = runs_on_meta(unscaled) if builds_on_meta(unscaled) else True
    for inputs_first in (False, True):
        for current in halvings(ints, input_only, inputs_first):
            ns = load_namespace(path, source, current)
            inputs, params, outputs = footprint_bytes(ns)
            if inputs + params <= budget_bytes and outputs <= max_output_bytes:
                if not check_meta or runs_on_meta(ns):
                    return current, ints
                break  # halving further keeps the mismatch; try the other order
    # Parameters fixed by the class: the smallest inputs it still runs at.
    best = None
    for current in halvings(ints, input_only, False):
        ns = load_namespace(path, source, current)
        inputs, params, outputs = footprint_bytes(ns)
        if params > max_param_bytes or inputs > budget_bytes or outputs > max_output_bytes:
            continue
        if check_meta and not runs_on_meta(ns):
            break
        best = current
    if best is not None:
        return best, ints
    raise RuntimeError(f"cannot scale the task below {budget_bytes} bytes (parameters below {max_param_bytes}) "
                       f"to sizes it runs at (ints: {ints})")


def flatten_outputs(out):
    if isinstance(out, torch.Tensor):
        return [out]
    if isinstance(out, (list, tuple)):
        flat = []
        for o in out:
            flat.extend(flatten_outputs(o))
        return flat
    raise TypeError(f"unsupported output type {type(out).__name__}")


class ConstantArgs(torch.nn.Module):
    """The task's model with some arguments fixed: Python numbers (level1/5's
    scalar `s` in A * s) become constants of the traced graph, and integer or
    bool tensors (class indices, masks: data `dice --input` cannot make up,
    as a random target would be out of range) become buffers of the module
    holding get_inputs()'s values. forward() takes the floating-point
    tensors, in get_inputs() order."""

    def __init__(self, model, args, fixed):
        super().__init__()
        self.model = model
        self.args = [None if isinstance(a, torch.Tensor) else a for a in args]
        self.fixed = sorted(fixed)
        for i in self.fixed:
            self.register_buffer(f"fixed_arg{i}", args[i])
        self.tensor_slots = [i for i, a in enumerate(args) if isinstance(a, torch.Tensor) and i not in fixed]

    def forward(self, *tensors):
        args = list(self.args)
        for i in self.fixed:
            args[i] = getattr(self, f"fixed_arg{i}")
        for slot, t in zip(self.tensor_slots, tensors):
            args[slot] = t
        return self.model(*args)


DTYPES = {"f32": torch.float32, "bf16": torch.bfloat16, "f16": torch.float16}


def cast_floating(model, args, dtype):
    """`model` and its arguments in `dtype` (a torch floating dtype): the
    floating parameters and buffers, the floating tensors kept as plain
    module attributes (which nn.Module.to skips: level3/33_VanillaRNN's
    hidden state would promote the activations back to float32), and the
    floating tensor arguments. Integer tensors (indices, masks) and Python
    numbers keep theirs. Returns (model, args). Also used by
    bench/kernelbench_bench.py --dtype."""
    model = model.to(dtype)
    for m in model.modules():
        for k, v in list(vars(m).items()):
            if isinstance(v, torch.Tensor) and v.is_floating_point():
                setattr(m, k, v.to(dtype))
    return model, [a.to(dtype) if isinstance(a, torch.Tensor) and a.is_floating_point() else a for a in args]


def convert(path, out_root, device, small, budget_bytes, seed, max_param_bytes=768 * 2**20,
            max_output_bytes=256 * 2**20, dtype=None):
    """One task converted (the module docstring says what is written); with
    `dtype` (a torch floating dtype) the model's floating parameters and
    buffers and the floating inputs are cast to it before tracing, and the
    output folder is named <level>_<stem>_<dtype name>. Raises on a task
    that cannot be built, run or traced."""
    level = os.path.basename(os.path.dirname(os.path.abspath(path)))
    stem = os.path.splitext(os.path.basename(path))[0]
    with open(path, encoding="utf-8") as f:
        source = f.read()
    overrides, original = ({}, {})
    if small:
        overrides, original = scale_down(path, source, budget_bytes, max_param_bytes, max_output_bytes)
    ns = load_namespace(path, source, overrides)

    torch.manual_seed(seed)
    model = ns["Model"](*ns["get_init_inputs"]()).eval().to(device)
    args = [a.to(device) if isinstance(a, torch.Tensor) else a for a in ns["get_inputs"]()]
    if dtype is not None:
        model, args = cast_floating(model, args, dtype)
    bad = [type(a).__name__ for a in args if not isinstance(a, (torch.Tensor, bool, int, float))]
    if bad:
        raise TypeError(f"get_inputs() returned a {bad[0]} input; only tensors and Python numbers can be traced")
    fixed = {i for i, a in enumerate(args) if isinstance(a, torch.Tensor) and not a.is_floating_point()}
    inputs = [a for i, a in enumerate(args) if isinstance(a, torch.Tensor) and i not in fixed]
    constants = {i: a for i, a in enumerate(args) if not isinstance(a, torch.Tensor)}
    traced_model = ConstantArgs(model, args, fixed) if constants or fixed else model
    with torch.no_grad():
        expected = model(*args)
        traced = torch.jit.trace(traced_model, tuple(inputs), check_trace=False)
    outputs = flatten_outputs(expected)

    suffix = "" if dtype is None else "_" + next(k for k, v in DTYPES.items() if v == dtype)
    out_dir = os.path.join(out_root, f"{level}_{stem}{suffix}")
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
        "constants": {str(i): a for i, a in constants.items()},
        "fixed_inputs": {str(i): spec_of(args[i]) for i in sorted(fixed)},
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
    p.add_argument("--max-param-mb", type=float, default=768.0,
                   help="--small: parameters a task's class fixes (no module-level int sizes them) are accepted "
                        "up to this size when nothing brings the task under --budget-mb, MiB")
    p.add_argument("--max-output-mb", type=float, default=256.0,
                   help="--small: the outputs' size limit (a 64-wide matmul is small in, large out), MiB")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--dtype", choices=sorted(DTYPES), default=None,
                   help="cast the model's floating parameters and inputs to this dtype (folder <level>_<stem>_<dtype>); "
                        "default: the task's own")
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
            out_dir, meta = convert(path, args.out, device, args.small, int(args.budget_mb * 2**20), args.seed,
                                    int(args.max_param_mb * 2**20), int(args.max_output_mb * 2**20),
                                    DTYPES.get(args.dtype))
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
