#!/usr/bin/env python3
"""Writes training/sweeps/templates.json, the template-sweep catalog
(dice/training/sweep.h), from the family lists below (issue 21 item 1:
held-out sets with power).

The first 20 entries are the catalog of issue 4, unchanged (tests and
scripts name them). After them come more families, each a fusion group the
parametric templates support (elementwise DAGs; row groups whose reductions
and normalisations share their axes), at several shape sets:
  * level 1: single ops (elementwise, reductions, normalisations);
  * level 2: chains of 2..5 ops (bias/activation/scale chains, gating,
    residuals, scaled/masked softmax, norm + activation, RMSNorm, manual
    softmax, variance, L2 normalisation, ...), at most 6 IR ops with constants.
The split (dice/training/split.h) is by op-chain (the sorted multiset of op
names): every entry and shape set of one op-chain lands in one split.
Run from the checkout: python3 training/sweeps/make_catalog.py [--check]
(--check: exit 1 when templates.json differs from what this writes).
"""
import json
import os
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
OUT = os.path.join(HERE, "templates.json")

# The 20 entries of issue 4's catalog, kept byte-identical in meaning.
ISSUE4_NAMES = 20


def fmt(x):
    x = float(x)
    return str(int(x)) if x.is_integer() else repr(x)


class G:
    """A small builder for dice-ir v1 text."""

    def __init__(self, *inputs):
        self.lines = ["dice-ir v1"]
        self.n = 0
        self.ins = []
        for dtype, rank in inputs:
            self.lines.append(f"input %{self.n} {dtype} rank={rank}")
            self.ins.append(f"%{self.n}")
            self.n += 1

    def op(self, name, *args, dims=None, keepdim=False, i=None, s=None):
        text = f"%{self.n} = {name}({', '.join(args)})"
        if dims is not None:
            text += " dims=[" + ",".join(str(d) for d in dims) + "]"
        if keepdim:
            text += " keepdim=1"
        if i is not None:
            text += f" i={i}"
        if s is not None:
            text += " s=[" + ",".join(fmt(v) for v in s) + "]"
        self.lines.append(text)
        v = f"%{self.n}"
        self.n += 1
        return v

    def const(self, value):
        self.lines.append(f"%{self.n} = const({fmt(value)})")
        v = f"%{self.n}"
        self.n += 1
        return v

    def done(self, out):
        return "\n".join(self.lines + [f"output {out}", ""])


UNARY_SCALARS = {
    "softplus": [1, 20],
    "elu": [1, 1, 1],
    "leaky_relu": [0.01],
    "clamp": [-1, 1],
}


def unary(g, name, x):
    if name == "gelu_tanh":
        return g.op("gelu", x, i=1)
    return g.op(name, x, s=UNARY_SCALARS.get(name))


def spec(shape, dtype):
    return "x".join(str(d) for d in shape) + ":" + dtype


def entry(name, ir, shape_sets):
    return {"name": name, "ir": ir, "shapes": shape_sets}


# Elementwise shapes: 2-D, large enough that eager's extra kernels cost
# memory traffic rather than launch latency, each of its own element count
# (an elementwise kernel without a broadcast depends on the count only, so
# two shapes of one count would give one kernel, deduplicated by the dataset).
EW2 = [(4096, 4096), (8192, 3072), (3000, 5000), (16384, 1000), (8192, 4096)]
EW2_SMALL = [(4096, 4096), (1024, 3000)]
EW4 = [(16, 64, 64, 64), (32, 128, 28, 28)]
# Row shapes: [rows, cols], reduced over the last dim unless said otherwise.
ROWS = [(4096, 4096), (8192, 1024), (1024, 8192), (16384, 512), (2048, 16384)]


def level1_unary():
    names = ["gelu", "silu", "sigmoid", "tanh", "exp", "mish", "softplus", "elu", "selu", "leaky_relu",
             "hardswish", "hardsigmoid", "abs", "neg", "erf", "softsign", "clamp"]
    out = []
    for n in names:
        g = G(("f32", 2))
        y = unary(g, n, g.ins[0])
        out.append(entry(n + "_f32", g.done(y), [[spec(s, "f32")] for s in EW2_SMALL]))
    for n in ["relu", "sigmoid", "silu"]:
        g = G(("bf16", 2))
        y = unary(g, n, g.ins[0])
        out.append(entry(n + "_bf16", g.done(y), [[spec((8192, 4096), "bf16")]]))
    return out


def level1_rows():
    out = []
    for red in ["sum", "mean", "amax", "amin"]:
        g = G(("f32", 2))
        out.append(entry(red + "_last", g.done(g.op(red, g.ins[0], dims=[1])), [[spec(s, "f32")] for s in ROWS]))
        g = G(("f32", 4))
        out.append(entry(red + "_spatial", g.done(g.op(red, g.ins[0], dims=[2, 3])),
                         [[spec(s, "f32")] for s in [(32, 256, 28, 28), (64, 512, 14, 14)]]))
    g = G(("f32", 3))
    out.append(entry("logsumexp_dim1_of_3", g.done(g.op("logsumexp", g.ins[0], dims=[1])),
                     [[spec(s, "f32")] for s in [(8, 512, 256), (16, 1000, 64)]]))
    for p in [1, 2]:
        g = G(("f32", 2))
        out.append(entry(f"norm{p}_rows", g.done(g.op("norm", g.ins[0], dims=[1], s=[p])),
                         [[spec(s, "f32")] for s in [(8192, 1024), (2048, 4096)]]))
    g = G(("f32", 4))
    out.append(entry("softmax_heads", g.done(g.op("softmax", g.ins[0], dims=[3])),
                     [[spec(s, "f32")] for s in [(8, 16, 256, 256), (4, 8, 512, 512)]]))
    g = G(("f32", 3))
    out.append(entry("log_softmax_dim1_of_3", g.done(g.op("log_softmax", g.ins[0], dims=[1])),
                     [[spec(s, "f32")] for s in [(16, 256, 128), (8, 1000, 64)]]))
    g = G(("bf16", 2))
    out.append(entry("layer_norm_bf16", g.done(g.op("layer_norm", g.ins[0], i=1, s=[1e-5])),
                     [[spec(s, "bf16")] for s in [(4096, 4096), (16384, 1024)]]))
    g = G(("f32", 4))
    out.append(entry("group_norm_plain", g.done(g.op("group_norm", g.ins[0], i=32, s=[1e-5])),
                     [[spec(s, "f32")] for s in [(16, 128, 32, 32), (8, 256, 16, 16)]]))
    return out


def ew_entry(name, build, n_inputs, shapes=EW2, bias=False, dtype="f32"):
    """An elementwise chain over `n_inputs` same-shape inputs (plus a
    rank-1 bias over the last dim when `bias`)."""
    ins = [(dtype, len(shapes[0]))] * n_inputs + ([(dtype, 1)] if bias else [])
    g = G(*ins)
    y = build(g, *g.ins)
    sets = []
    for s in shapes:
        row = [spec(s, dtype)] * n_inputs
        if bias:
            row.append(spec((s[-1],), dtype))
        sets.append(row)
    return entry(name, g.done(y), sets)


def level2_elementwise():
    out = []
    # bias -> activation -> scale: op-chain {add, act, mul}.
    for act in ["relu", "sigmoid", "tanh", "silu", "mish", "elu", "hardswish", "softplus", "hardsigmoid",
                "leaky_relu", "selu"]:
        def build(g, x, b, act=act):
            return g.op("mul", unary(g, act, g.op("add", x, b)), g.const(0.5))
        out.append(ew_entry(f"bias_{act}_scale", build, 1, bias=True))
    # activation(x) * y gating: {act, mul}.
    for act in ["gelu_tanh", "sigmoid", "relu", "tanh", "leaky_relu"]:
        def build(g, x, y, act=act):
            return g.op("mul", unary(g, act, x), y)
        out.append(ew_entry(f"{act}_gate", build, 2))
    # residual: act(x) + y: {act, add}.
    for act in ["gelu_tanh", "silu", "elu", "selu", "tanh"]:
        def build(g, x, y, act=act):
            return g.op("add", unary(g, act, x), y)
        out.append(ew_entry(f"{act}_residual", build, 2))
    chains = {
        "relu_sub": (2, lambda g, x, y: g.op("sub", g.op("relu", x), y)),
        "log1p_abs": (1, lambda g, x: g.op("log", g.op("add", g.op("abs", x), g.const(1)))),
        "exp_neg_mul": (2, lambda g, x, y: g.op("mul", g.op("exp", g.op("neg", x)), y)),
        "manual_swish": (1, lambda g, x: g.op("div", x, g.op("add", g.op("exp", g.op("neg", x)), g.const(1)))),
        "relu6_scale": (1, lambda g, x: g.op("mul", g.op("clamp", x, s=[0, 6]), g.const(0.1666))),
        "clip_between": (3, lambda g, x, lo, hi: g.op("minimum", g.op("maximum", x, lo), hi)),
        "add3_relu": (3, lambda g, x, y, z: g.op("relu", g.op("add", g.op("add", x, y), z))),
        "axpby": (2, lambda g, x, y: g.op("add", g.op("mul", x, g.const(0.75)), g.op("mul", y, g.const(0.25)))),
        "squared_error": (2, lambda g, x, y: g.op("mul", g.op("pow_scalar", g.op("sub", x, y), s=[2]), g.const(0.5))),
        "quick_gelu": (1, lambda g, x: g.op("mul", x, g.op("sigmoid", g.op("mul", x, g.const(1.702))))),
        "manual_softsign": (1, lambda g, x: g.op("div", x, g.op("add", g.op("abs", x), g.const(1)))),
        "rsqrt_scale": (2, lambda g, x, y: g.op("mul", g.op("rsqrt", g.op("add", g.op("abs", x), g.const(1e-3))), y)),
        "hypot": (2, lambda g, x, y: g.op("sqrt", g.op("add", g.op("mul", x, x), g.op("mul", y, y)))),
        "pow_abs": (2, lambda g, x, y: g.op("pow", g.op("add", g.op("abs", x), g.const(1)), y)),
        "manual_mish": (1, lambda g, x: g.op("mul", x, g.op("tanh", g.op("softplus", x, s=[1, 20])))),
        "leaky_relu_scale_add": (2, lambda g, x, y: g.op("add", g.op("mul", g.op("leaky_relu", x, s=[0.2]),
                                                                         g.const(1.4142)), y)),
        "sigmoid_sub_mul": (2, lambda g, x, y: g.op("mul", g.op("sub", g.op("sigmoid", x), g.const(0.5)), y)),
        "exp_sub": (2, lambda g, x, y: g.op("exp", g.op("sub", x, y))),
        "tanh_tanh_scale": (1, lambda g, x: g.op("mul", g.op("tanh", g.op("tanh", x)), g.const(2))),
        "erf_gate": (2, lambda g, x, y: g.op("mul", g.op("erf", x), y)),
        "hardswish_minimum": (2, lambda g, x, y: g.op("minimum", g.op("hardswish", x), y)),
        "abs_maximum_neg": (2, lambda g, x, y: g.op("neg", g.op("maximum", g.op("abs", x), y))),
    }
    for name, (n, build) in chains.items():
        out.append(ew_entry(name, build, n))
    # rank-4 and bf16 variants of a few chains (same op-chains: same split).
    out.append(ew_entry("bias_relu_scale_4d", lambda g, x, b: g.op("mul", g.op("relu", g.op("add", x, b)),
                                                                   g.const(0.5)), 1, shapes=EW4, bias=True))
    out.append(ew_entry("silu_residual_bf16", lambda g, x, y: g.op("add", g.op("silu", x), y), 2,
                        shapes=[(8192, 4096), (4096, 11008)], dtype="bf16"))
    out.append(ew_entry("quick_gelu_bf16", lambda g, x: g.op("mul", x, g.op("sigmoid", g.op("mul", x, g.const(1.702)))),
                        1, shapes=[(8192, 4096), (4096, 11008)], dtype="bf16"))
    return out


def row_entry(name, build, n_full, shapes=ROWS, vec=0, dtype="f32", rank=2):
    """A row group over `n_full` inputs of the row shape plus `vec` rank-1
    inputs over the last dim."""
    ins = [(dtype, rank)] * n_full + [(dtype, 1)] * vec
    g = G(*ins)
    y = build(g, *g.ins)
    sets = [[spec(s, dtype)] * n_full + [spec((s[-1],), dtype)] * vec for s in shapes]
    return entry(name, g.done(y), sets)


def level2_rows():
    L = [1]  # last dim of a rank-2 row shape
    chains = {
        "scaled_softmax": (1, lambda g, x: g.op("softmax", g.op("mul", x, g.const(0.125)), dims=L)),
        "masked_softmax": (2, lambda g, x, m: g.op("softmax", g.op("add", x, m), dims=L)),
        "scaled_masked_softmax": (2, lambda g, x, m: g.op("softmax", g.op("add", g.op("mul", x, g.const(0.125)), m),
                                                        dims=L)),
        "scaled_log_softmax": (1, lambda g, x: g.op("mul", g.op("log_softmax", x, dims=L), g.const(-1))),
        "tanh_softmax": (1, lambda g, x: g.op("softmax", g.op("tanh", x), dims=L)),
        "center_rows": (1, lambda g, x: g.op("sub", x, g.op("mean", x, dims=L, keepdim=True))),
        "manual_softmax": (1, lambda g, x: (lambda e: g.op("div", e, g.op("sum", e, dims=L, keepdim=True)))(
            g.op("exp", g.op("sub", x, g.op("amax", x, dims=L, keepdim=True))))),
        "exp_sum_rows": (1, lambda g, x: g.op("sum", g.op("exp", x), dims=L)),
        "l1_rows": (1, lambda g, x: g.op("sum", g.op("abs", x), dims=L)),
        "row_dot": (2, lambda g, x, y: g.op("sum", g.op("mul", x, y), dims=L)),
        "relu_amax_rows": (1, lambda g, x: g.op("amax", g.op("relu", x), dims=L)),
        "sigmoid_mean_rows": (1, lambda g, x: g.op("mean", g.op("sigmoid", x), dims=L, keepdim=True)),
        "l2_normalize": (1, lambda g, x: g.op("div", x, g.op("norm", x, dims=L, keepdim=True, s=[2]))),
        "scaled_logsumexp": (1, lambda g, x: g.op("logsumexp", g.op("mul", x, g.const(0.5)), dims=L)),
        "manual_log_softmax": (1, lambda g, x: g.op("sub", x, g.op("logsumexp", x, dims=L, keepdim=True))),
        "neg_amin_rows": (1, lambda g, x: g.op("neg", g.op("amin", x, dims=L))),
        "row_variance": (1, lambda g, x: g.op("mean", g.op("pow_scalar", g.op("sub", x, g.op(
            "mean", x, dims=L, keepdim=True)), s=[2]), dims=L)),
        "rmsnorm_rsqrt": (1, lambda g, x: g.op("mul", x, g.op("rsqrt", g.op("add", g.op(
            "mean", g.op("pow_scalar", x, s=[2]), dims=L, keepdim=True), g.const(1e-6))))),
        "layer_norm_gelu": (1, lambda g, x: g.op("gelu", g.op("layer_norm", x, i=1, s=[1e-5]), i=1)),
        "layer_norm_relu": (1, lambda g, x: g.op("relu", g.op("layer_norm", x, i=1, s=[1e-5]))),
        "residual_layer_norm": (2, lambda g, x, y: g.op("layer_norm", g.op("add", x, y), i=1, s=[1e-5])),
        "softmax_gate": (2, lambda g, x, y: g.op("mul", g.op("softmax", x, dims=L), y)),
        "relu_sum_rows": (1, lambda g, x: g.op("sum", g.op("relu", x), dims=L, keepdim=True)),
    }
    out = [row_entry(name, build, n) for name, (n, build) in chains.items()]
    # adaLN-style modulation: layer_norm(x) * (1 + scale) + shift.
    out.append(row_entry("layer_norm_modulate", lambda g, x, sc, sh: g.op("add", g.op(
        "mul", g.op("layer_norm", x, i=1, s=[1e-6]), g.op("add", sc, g.const(1))), sh), 1, vec=2))
    # Normalisations over [N, C, H, W] followed by an activation or a residual.
    GN = [(16, 128, 32, 32), (8, 256, 16, 16), (32, 64, 32, 32), (4, 512, 16, 16)]
    for act in ["silu", "relu"]:
        def build(g, x, w, b, act=act):
            return g.op(act, g.op("group_norm", x, w, b, i=32, s=[1e-5]))
        out.append(entry(f"group_norm_{act}", build_nchw(build), [
            [spec(s, "f32"), spec((s[1],), "f32"), spec((s[1],), "f32")] for s in GN]))
    out.append(entry("group_norm_residual", build_nchw(
        lambda g, x, w, b: g.op("add", g.op("group_norm", x, w, b, i=16, s=[1e-5]), x)), [
        [spec(s, "f32"), spec((s[1],), "f32"), spec((s[1],), "f32")] for s in GN]))
    # Spatial reductions after an activation (global pooling heads).
    POOL = [(32, 256, 28, 28), (64, 512, 14, 14), (16, 1024, 7, 7)]
    g = G(("f32", 4))
    out.append(entry("relu_global_avg_pool", g.done(g.op("mean", g.op("relu", g.ins[0]), dims=[2, 3])),
                     [[spec(s, "f32")] for s in POOL]))
    g = G(("f32", 4))
    x = g.ins[0]
    out.append(entry("swish_global_avg_pool", g.done(g.op("mean", g.op("mul", x, g.op("sigmoid", x)), dims=[2, 3])),
                     [[spec(s, "f32")] for s in POOL]))
    # bf16 variants of common row chains (same op-chains).
    out.append(row_entry("scaled_softmax_bf16", chains["scaled_softmax"][1], 1, shapes=[(8192, 2048), (4096, 4096)],
                         dtype="bf16"))
    out.append(row_entry("rmsnorm_rsqrt_bf16", chains["rmsnorm_rsqrt"][1], 1, shapes=[(8192, 4096), (16384, 2048)],
                         dtype="bf16"))
    return out


def build_nchw(build):
    g = G(("f32", 4), ("f32", 1), ("f32", 1))
    return g.done(build(g, *g.ins))


def main():
    with open(OUT) as f:
        old = json.load(f)
    catalog = old[:ISSUE4_NAMES] + level1_unary() + level1_rows() + level2_elementwise() + level2_rows()
    names = [e["name"] for e in catalog]
    dup = {n for n in names if names.count(n) > 1}
    if dup:
        sys.exit(f"duplicate names: {sorted(dup)}")
    text = json.dumps(catalog, indent=1) + "\n"
    if "--check" in sys.argv:
        with open(OUT) as f:
            sys.exit(0 if f.read() == text else 1)
    with open(OUT, "w") as f:
        f.write(text)
    print(f"{OUT}: {len(catalog)} entries, {sum(len(e['shapes']) for e in catalog)} shape sets")


if __name__ == "__main__":
    main()
