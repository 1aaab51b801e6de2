"""Both frontends form the same fusion groups (issue 16 item 5: one policy,
torch_ext/src/fusion_policy.h).

Each module runs through the TorchScript frontend (torch.jit.script or
torch.jit.trace; the DICE_MODE pass runs inside the profiling executor) and
through the FX frontend (make_fx, then
partition.py on the ATen graph, which asks ``torch.ops.dice.fusion_groups``). A group is
compared by the IR ops it holds (constants left out), since the ATen spellings
of the two frontends differ (aten::softmax vs aten._softmax.default)."""

import json
import os
import re

import pytest
import torch
import torch.nn as nn
import torch.nn.functional as F

from torch.fx.experimental.proxy_tensor import make_fx

from dice_torch import _library, partition

_OP = re.compile(r"^%\d+ = (\w+)\(", re.M)


def ir_ops(ir: str) -> tuple[str, ...]:
    """The non-constant op names of an IR canonical text, in order."""
    return tuple(name for name in _OP.findall(ir) if name != "const")


def fx_groups(model, inputs):
    """Groups partition.fuse_dice_groups forms in the ATen-level FX graph of
    ``model`` (make_fx: the graph aot_autograd hands the backend, without
    decompositions), and the rewritten graph's outputs."""
    with torch.no_grad():
        gm = make_fx(model, tracing_mode="fake")(*inputs)
        gm.graph.eliminate_dead_code()  # as aot_autograd does (layer_norm's unused mean/rstd getitems)
        gm.recompile()
        rep = partition.fuse_dice_groups(gm)
        got = gm(*inputs)
    return sorted(ir_ops(g.ir) for g in rep.groups), got


def _fusion_groups(block):
    for node in block.nodes():
        if node.kind() == "dice::FusionGroup":
            yield node
        for b in node.blocks():
            yield from _fusion_groups(b)


def torchscript_groups(model, inputs, trace=False):
    """Groups the DICE_MODE pass forms in the profiling executor's optimized graph."""
    scripted = torch.jit.trace(model, inputs) if trace else torch.jit.script(model)
    old_mode = os.environ.get("DICE_MODE")
    texpr = torch._C._jit_texpr_fuser_enabled()
    os.environ["DICE_MODE"] = "observe"
    torch._C._jit_set_texpr_fuser_enabled(False)
    try:
        with torch.no_grad():
            for _ in range(3):  # profile, then optimize (the pass runs), then run optimized
                got = scripted(*inputs)
        graph = torch.jit.last_executed_optimized_graph()
    finally:
        torch._C._jit_set_texpr_fuser_enabled(texpr)
        if old_mode is None:
            os.environ.pop("DICE_MODE", None)
        else:
            os.environ["DICE_MODE"] = old_mode
    return sorted(ir_ops(n.s("dice_ir")) for n in _fusion_groups(graph)), got


class ElementwiseChain(nn.Module):
    def forward(self, x, b, y):
        return torch.clamp((x + b) * 0.5 - y.exp() / 3, min=-1.0) ** 2 + 1


class ScaledSoftmax(nn.Module):
    def forward(self, x):
        return torch.softmax(x * 0.125, dim=-1)


class LayerNormResidual(nn.Module):
    def forward(self, x, r, w, b):
        return F.layer_norm(x + r, (64,), w, b)


class HandWrittenLayerNorm(nn.Module):
    def forward(self, x):
        d = x - x.mean(-1, keepdim=True)
        return d / torch.sqrt((d * d).mean(-1, keepdim=True) + 1e-5)


class ConsumersReducingOverTwoAxes(nn.Module):
    # One kernel reduces over one set of axes: exp joins the first reduction's
    # group, the second reduction forms its own. (The TorchScript pass used to
    # grow groups backwards and gave exp to the last one.) group_norm / amin
    # are left out here: the profiling executor records no types for the
    # inputs of ops its own fuser does not take, so the TorchScript pass sees
    # them only through optimize() (capture_test.cc).
    def forward(self, x):
        e = torch.exp(x)
        return e.sum(1, keepdim=True) * 2.0, e.mean(0, keepdim=True) + 1.0


class VarMeanNorm(nn.Module):
    def forward(self, x):
        v, m = torch.var_mean(x, dim=-1, keepdim=True)
        return (x - m) * torch.rsqrt(v + 1e-5)


class CastsOnly(nn.Module):
    def forward(self, x):
        return x.to(torch.float16).to(torch.float32)


class CastAroundRelu(nn.Module):
    def forward(self, x):
        return torch.relu(x.to(torch.float16)).to(torch.float32)


class MatmulEpilogue(nn.Module):
    def forward(self, x, w, b):
        return torch.relu(torch.matmul(torch.tanh(x), w) + b)


class AroundMatmul(nn.Module):
    def forward(self, x, w):
        a = torch.relu(x)
        return a + torch.matmul(a, w)


def _r(*shape):
    return torch.randn(*shape)


torch.manual_seed(0)
CASES = {
    "elementwise_chain": (ElementwiseChain(), (_r(4, 1, 8), _r(8), _r(4, 6, 8)), False),
    "elementwise_chain_traced": (ElementwiseChain(), (_r(4, 1, 8), _r(8), _r(4, 6, 8)), True),
    "softmax": (ScaledSoftmax(), (_r(8, 128),), False),
    "layer_norm": (LayerNormResidual(), (_r(2, 10, 64), _r(2, 10, 64), _r(64), _r(64)), False),
    "hand_written_layer_norm": (HandWrittenLayerNorm(), (_r(6, 32),), False),
    "consumers_reducing_over_two_axes": (ConsumersReducingOverTwoAxes(), (_r(6, 8),), False),
    "var_mean": (VarMeanNorm(), (_r(6, 32),), False),
    "casts_only": (CastsOnly(), (_r(4, 8),), False),
    "cast_around_relu": (CastAroundRelu(), (_r(4, 8),), True),
    "matmul_epilogue": (MatmulEpilogue(), (_r(4, 8), _r(8, 6), _r(6)), False),
    "around_matmul": (AroundMatmul(), (_r(8, 8), _r(8, 8)), False),
}

# What both frontends must form (IR ops per group, groups sorted).
EXPECTED = {
    "elementwise_chain": [("add", "mul", "exp", "div", "sub", "clamp", "pow_scalar", "add")],
    "softmax": [("mul", "softmax")],
    "layer_norm": [("add", "layer_norm")],
    "hand_written_layer_norm": [("mean", "sub", "mul", "mean", "add", "sqrt", "div")],
    "consumers_reducing_over_two_axes": [("exp", "sum", "mul"), ("mean", "add")],
    "var_mean": [("sub", "add", "rsqrt", "mul")],  # var_mean itself stays with PyTorch in both
    "cast_around_relu": [("cast", "relu", "cast")],
    "casts_only": [],
    "around_matmul": [("add",), ("relu",)],
}


@pytest.fixture(scope="module", autouse=True)
def _library_loaded():
    _library.load()


@pytest.mark.parametrize("name", sorted(CASES))
def test_torchscript_and_fx_frontends_form_the_same_groups(name):
    model, inputs, trace = CASES[name]
    model.eval()
    ts, ts_out = torchscript_groups(model, inputs, trace=trace)
    fx, fx_out = fx_groups(model, inputs)
    assert ts == fx, f"TorchScript {ts} vs FX {fx}"
    if name in EXPECTED:
        assert fx == sorted(EXPECTED[name]), fx
    with torch.no_grad():
        want = model(*inputs)
    for got in (ts_out, fx_out):
        torch.testing.assert_close(got, want)


def test_matmul_stays_out_and_its_epilogue_is_one_group():
    model, inputs, _ = CASES["matmul_epilogue"]
    fx, _ = fx_groups(model, inputs)
    assert fx == [("add", "relu"), ("tanh",)], fx


def test_policy_op_groups_a_described_graph():
    # relu -> mm -> add, and a cast-only pair: the op the FX frontend calls.
    nodes = [
        {"kind": "placeholder"},
        {"kind": "aten::relu", "fusible": True, "inputs": [0]},
        {"kind": "aten::mm", "inputs": [1, 0]},
        {"kind": "aten::add", "fusible": True, "inputs": [1, 2]},
        {"kind": "aten::_to_copy", "fusible": True, "inputs": [3]},
        {"kind": "aten::sum", "fusible": True, "inputs": [4], "operands": 2, "rank": 2, "dim": [-1]},
        {"kind": "aten::var_mean", "fusible": True, "inputs": [5], "operands": 2, "rank": 2, "dim": [0]},
    ]
    got = list(torch.ops.dice.fusion_groups(json.dumps(nodes), 1))
    # var_mean reduces over another axis than the sum: a group of its own.
    assert got == [-1, 0, -1, 1, 1, 1, 2], got
    with pytest.raises(RuntimeError, match="node 1 \\(aten::relu\\) reads node 3"):
        torch.ops.dice.fusion_groups(json.dumps([{"kind": "x"}, {"kind": "aten::relu", "inputs": [3]}]), 1)
