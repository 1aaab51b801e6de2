"""Forms fusion groups in an ATen-level FX graph and replaces each with a call
to ``torch.ops.dice.run_group(ir_text, [inputs])``.

The FX frontend beside the TorchScript pass (``torch_ext/include/dice/
torch_ext/fusion_pass.h``). Which nodes form a group is decided by the one
policy both frontends share, in C++ (``torch_ext/src/fusion_policy.h``,
called here through ``torch.ops.dice.fusion_groups``): groups are connected
sets of supported nodes (``capture.unsupported_reason`` is None), grown in
topological order by merging a node with its producers' groups only when the
merged set stays convex (no path leaves the group and comes back, so one call
can replace it) and every reduction in it runs over the same axes (one kernel
reduces over one set of axes: group_norm feeding amin over channels becomes
two groups); groups made only of casts are dissolved. This module describes
the graph to the policy and translates the groups to IR. Everything else
(matmuls, views, unsupported dtypes, ...) stays in the graph as it was, and is
reported with its reason.
"""

from __future__ import annotations

import json
import operator
from dataclasses import dataclass, field

import torch
import torch.fx
from torch.fx.passes.tools_common import stable_topological_sort

from . import capture


@dataclass
class FusionGroup:
    """One group that became a ``dice::run_group`` call."""

    id: int                 #: process-wide group id (dice::register_group)
    ir: str                 #: IR canonical text (runtime/include/dice/core/ir.h)
    summary: str            #: "mul+add+gelu" (IR op names, constants omitted)
    torch_ops: list[str]    #: the ATen ops it replaced, in graph order
    num_inputs: int
    num_outputs: int


@dataclass
class LeftOut:
    """A call node that stayed with PyTorch, and why."""

    op: str       #: "aten.mm.default"
    reason: str   #: "not a fusible op", "unsupported dtype int64 (operand x)"


@dataclass
class PartitionReport:
    """What ``fuse_dice_groups`` did to one graph."""

    groups: list[FusionGroup] = field(default_factory=list)
    left_out: list[LeftOut] = field(default_factory=list)


def _dim_fact(dim):
    """The ``dim`` argument as ``dice::fusion_groups`` reads it: None (every
    axis), an int, a list of ints, or "?" (not a constant)."""
    if dim is None or (isinstance(dim, int) and not isinstance(dim, bool)):
        return dim
    if isinstance(dim, (list, tuple)) and all(isinstance(d, int) and not isinstance(d, bool) for d in dim):
        return list(dim)
    return "?"


def _extent(operand: torch.fx.Node, out: torch.fx.Node) -> str:
    """How ``operand``'s shape relates to ``out``'s (fusion_policy.h Extent):
    "full" (equal), "row" ([N], [1, N], ... with N the output's last dim),
    "other", or "unknown" (no example value)."""
    a, o = capture.tensor_meta(operand), capture.tensor_meta(out)
    if a is None or o is None:
        return "unknown"
    if list(a.shape) == list(o.shape):
        return "full"
    if a.dim() == 0 or o.dim() == 0 or a.shape[-1] != o.shape[-1] or any(d != 1 for d in a.shape[:-1]):
        return "other"
    return "row"


def _gemm_facts(node: torch.fx.Node, d: dict, index: dict[torch.fx.Node, int]) -> None:
    """Adds the GEMM rule's facts (rule 4: epilogue_op, epilogue_operands) of a fusible node to ``d``."""
    operands = capture.epilogue_facts(node)
    if operands is None:
        return
    d["epilogue_op"] = True
    d["epilogue_operands"] = [{"source": index.get(a, -1), "extent": _extent(a, node)} for a in operands]


def lone_gemm_reason(node: torch.fx.Node) -> str:
    """Why the GEMM gate lets the linear ``node`` form a group only with an
    epilogue op (``dice::gemm_group_lone_reason``: a bf16/f16 output under
    ``DICE_GEMM_GROUPS=epilogue``, the FX default), or "" when it may form one
    alone (fusion_policy.h rule 4, PolicyNode::needs_epilogue)."""
    out = capture.tensor_meta(node)
    if out is None or out.dtype not in capture.DTYPE_IDS:
        return ""
    return str(torch.ops.dice.gemm_group_lone_reason(capture.DTYPE_IDS[out.dtype]))


def policy_node(node: torch.fx.Node, fusible: bool, index: dict[torch.fx.Node, int]) -> dict:
    """``node`` as the fusion policy sees it (torch_ext/src/fusion_policy.h,
    ParsePolicyNodes): kind, fusibility, the nodes it reads and, for a fusible
    ATen op, the facts its reduction signature and the GEMM rule are computed
    from. A fusible mm / addmm (F.linear, ``capture.linear_operands``) is
    "aten::linear", the kind that starts a GEMM group."""
    tgt = node.target
    if node.op != "call_function":
        kind = node.op
    elif tgt is operator.getitem:
        kind = "getitem"
    elif fusible and tgt in capture.GEMM_TARGETS:
        kind = "aten::linear"
    elif isinstance(tgt, torch._ops.OpOverload):
        kind = tgt._schema.name
    else:
        kind = getattr(tgt, "__name__", str(tgt))
    d = {"kind": kind, "fusible": fusible, "inputs": [index[a] for a in node.all_input_nodes if a in index]}
    if any(u.op == "output" for u in node.users):
        d["escapes"] = True
    if kind == "aten::linear" and lone_gemm_reason(node):
        d["needs_epilogue"] = True
    if not fusible or not isinstance(tgt, torch._ops.OpOverload):
        return d
    _gemm_facts(node, d, index)
    names = [a.name for a in tgt._schema.arguments]
    args = dict(zip(names, node.args))
    args.update(node.kwargs)
    d["operands"] = len(node.args)
    d["tensor_operands"] = sum(isinstance(a, torch.fx.Node) for a in node.args)
    val = node.args[0].meta.get("val") if node.args and isinstance(node.args[0], torch.fx.Node) else None
    if isinstance(val, torch.Tensor):
        d["rank"] = val.dim()
    if "dim" in names:
        d["dim"] = _dim_fact(args.get("dim"))  # left at its default: None
    shape = args.get("normalized_shape")
    if isinstance(shape, (list, tuple)):
        d["normalized_dims"] = len(shape)
    return d


def propose_groups(graph: torch.fx.Graph) -> tuple[list[list[torch.fx.Node]], list[LeftOut]]:
    """Groups of supported nodes (each in graph order) and the call nodes left
    out. The grouping is the C++ policy shared with the TorchScript pass
    (``torch.ops.dice.fusion_groups``, torch_ext/src/fusion_policy.h); the
    dice library must be loaded."""
    index: dict[torch.fx.Node, int] = {}
    described: list[dict] = []
    nodes: list[torch.fx.Node] = []
    left_out: list[LeftOut] = []
    for node in graph.nodes:
        fusible = False
        if node.op == "call_function":
            reason = capture.unsupported_reason(node)
            fusible = reason is None
            if reason is not None and node.target is not operator.getitem and reason != capture.ABSORBED_REASON:
                left_out.append(LeftOut(capture.op_name(node), reason))
        described.append(policy_node(node, fusible, index))
        index[node] = len(nodes)
        nodes.append(node)
    group_of = torch.ops.dice.fusion_groups(json.dumps(described), 1)
    groups: dict[int, list[torch.fx.Node]] = {}
    for node, d, g in zip(nodes, described, group_of):
        if g >= 0:
            groups.setdefault(g, []).append(node)
        elif d.get("needs_epilogue"):  # a lone bf16/f16 linear (rule 4): said at the matmul
            mm = node.args[0] if node.target not in capture.GEMM_MATMULS else node  # an N-d linear's view
            left_out.append(LeftOut(capture.op_name(mm), lone_gemm_reason(node)))
    return [groups[g] for g in sorted(groups)], left_out


@dataclass
class _Plan:
    members: list[torch.fx.Node]
    builder: capture.IrBuilder
    out_nodes: list[torch.fx.Node]
    values: list
    group: FusionGroup


def _plan_group(members: list[torch.fx.Node]) -> _Plan:
    """Translates and registers one group without touching the graph.
    Raises capture.Unsupported or RuntimeError (IR rejected by the C++ parser)."""
    member_set = set(members)
    b = capture.IrBuilder()
    for n in members:
        capture.translate_node(n, b)
    # Outputs: members used outside the group, one per distinct IR value.
    out_nodes = [n for n in members if any(u not in member_set for u in n.users)]
    values: list = []
    for n in out_nodes:
        if b.values[n] not in values:
            values.append(b.values[n])
    ir_text = b.text(values)
    torch_ops = [capture.op_name(n) for n in members if n.target is not operator.getitem]
    gid = int(torch.ops.dice.register_group(ir_text, torch_ops))
    summary = "+".join(name for name, _, _ in b.ops if name != "const") or "identity"
    return _Plan(members, b, out_nodes, values,
                 FusionGroup(gid, ir_text, summary, torch_ops, len(b.input_nodes), len(values)))


def _apply_plan(gm: torch.fx.GraphModule, plan: _Plan, replaced: dict[torch.fx.Node, torch.fx.Node]) -> None:
    """Replaces the plan's members by one run_group call. ``replaced`` maps
    outputs of groups applied earlier (erased nodes) to their getitem nodes;
    this plan's outputs are added to it."""
    graph = gm.graph
    member_set = set(plan.members)
    b, values = plan.builder, plan.values
    inputs = [replaced.get(n, n) for n in b.input_nodes]
    with graph.inserting_after(plan.members[-1]):
        call = graph.call_function(torch.ops.dice.run_group.default, (plan.group.ir, inputs))
    outs: list[torch.fx.Node] = []
    for k, v in enumerate(values):
        with graph.inserting_after(outs[-1] if outs else call):
            g = graph.call_function(operator.getitem, (call, k))
        src = next(n for n in plan.out_nodes if b.values[n] == v)
        g.meta["val"] = src.meta.get("val")
        outs.append(g)
    call.meta["val"] = [g.meta.get("val") for g in outs]
    for n in plan.out_nodes:
        new = outs[values.index(b.values[n])]
        n.replace_all_uses_with(new, delete_user_cb=lambda user: user not in member_set)
        replaced[n] = new
    for n in reversed(plan.members):
        graph.erase_node(n)


_LINEAR_PARTS = capture.GEMM_TARGETS | capture.TRANSPOSES  # the matmuls, views and transposes of an F.linear


def _erase_dead_linear_parts(gm: torch.fx.GraphModule) -> None:
    """Erases what a GEMM group left without readers: the ``t(w)`` /
    ``permute(w)`` of its weight (the group reads w itself) and, for an N-d
    linear, the matmul and the input view its output view stood for."""
    for n in reversed(list(gm.graph.nodes)):
        if n.op == "call_function" and n.target in _LINEAR_PARTS and not n.users:
            gm.graph.erase_node(n)


def fuse_dice_groups(gm: torch.fx.GraphModule) -> PartitionReport:
    """Rewrites ``gm`` in place: every fusion group becomes one
    ``dice::run_group`` call (plus a getitem per output); the graph is then
    re-sorted topologically (stably) and recompiled. Needs ``node.meta["val"]``
    (example values, as aot_autograd and torch.export leave them).
    Requires the dice library to be loaded (``dice_torch._library.load``).
    Returns the groups formed and the call nodes left to PyTorch, with reasons
    (a group whose IR the runtime rejects stays as it was, its nodes reported
    with "group not formed: <the parser's message>").
    """
    proposals, left_out = propose_groups(gm.graph)
    report = PartitionReport(left_out=left_out)
    plans = []
    for members in proposals:  # translate everything first: a failure leaves the graph untouched
        try:
            plans.append(_plan_group(members))
        except (capture.Unsupported, RuntimeError) as e:
            reason = f"group not formed: {e}".splitlines()[0]
            report.left_out.extend(LeftOut(capture.op_name(n), reason) for n in members
                                   if n.target is not operator.getitem)
    replaced: dict[torch.fx.Node, torch.fx.Node] = {}
    for plan in plans:
        _apply_plan(gm, plan, replaced)
        report.groups.append(plan.group)
    if report.groups:
        _erase_dead_linear_parts(gm)
        stable_topological_sort(gm)
        gm.graph.lint()
        gm.recompile()
    return report
