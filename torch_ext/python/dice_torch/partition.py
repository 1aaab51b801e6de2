"""Forms fusion groups in an ATen-level FX graph and replaces each with a call
to ``torch.ops.dice.run_group(ir_text, [inputs])``.

The FX twin of the TorchScript pass (``torch_ext/include/dice/torch_ext/
fusion_pass.h``): groups are maximal connected sets of supported nodes
(``capture.unsupported_reason`` is None), grown in topological order by
merging a node into its producers' groups only when the merged set stays
convex (no path leaves the group and comes back, so one call can replace it)
and every reduction in it runs over the same axes (one kernel reduces over one
set of axes: group_norm feeding amin over channels becomes two groups).
Groups made only of casts are dissolved. Everything else (matmuls, views,
unsupported dtypes, ...) stays in the graph as it was, and is reported with
its reason.
"""

from __future__ import annotations

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


def _convex(members: set[torch.fx.Node], order: dict[torch.fx.Node, int]) -> bool:
    """True when no path leaves ``members`` and re-enters it."""
    last = max(order[n] for n in members)
    frontier = [u for n in members for u in n.users if u not in members]
    seen: set[torch.fx.Node] = set()
    while frontier:
        n = frontier.pop()
        if n in seen or order.get(n, last + 1) > last:
            continue
        seen.add(n)
        for u in n.users:
            if u in members:
                return False
            frontier.append(u)
    return True


_DIM_REDUCTIONS = {
    "sum", "mean", "amax", "amin", "max", "min", "softmax", "log_softmax", "_softmax", "_log_softmax",
    "logsumexp", "norm", "linalg_vector_norm", "prod", "var", "std", "var_mean", "argmax", "argmin", "all", "any",
}
_LAST_AXES_NORMS = {"layer_norm", "native_layer_norm", "rms_norm"}
_OPAQUE_NORMS = {"group_norm", "native_group_norm", "instance_norm"}


def _rank(arg) -> int | None:
    val = arg.meta.get("val") if isinstance(arg, torch.fx.Node) else None
    return val.dim() if isinstance(val, torch.Tensor) else None


def reduction_signature(node: torch.fx.Node):
    """The axes a node reduces over, comparable across nodes: None for a node
    that reduces nothing, ("dims", (1,)) / ("dims", "all") for ops with a
    dim argument (negative dims normalised with the input's rank), the last
    axes for layer_norm / rms_norm, and a signature unique to the node where
    the axes cannot be named (group_norm's channel groups). The twin of
    ReductionSignature in torch_ext/src/fusion_pass.cc."""
    tgt = node.target
    if not isinstance(tgt, torch._ops.OpOverload):
        return None
    name = tgt._schema.name.split("::")[-1]
    if name not in _DIM_REDUCTIONS and name not in _LAST_AXES_NORMS and name not in _OPAQUE_NORMS:
        return None
    unique = ("node", id(node))
    if name in _OPAQUE_NORMS or not node.args:
        return unique
    rank = _rank(node.args[0])
    names = [a.name for a in tgt._schema.arguments]
    args = dict(zip(names, node.args))
    args.update(node.kwargs)
    if name in _LAST_AXES_NORMS:
        shape = args.get("normalized_shape")
        if rank is None or not isinstance(shape, (list, tuple)) or len(shape) > rank:
            return unique
        return ("dims", tuple(range(rank - len(shape), rank)))
    if "dim" not in names:
        if name in ("max", "min") and len(node.args) == 2 and isinstance(node.args[1], torch.fx.Node):
            return None  # elementwise maximum / minimum
        return ("dims", "all")
    dim = args.get("dim")
    if dim is None or dim == []:
        return ("dims", "all")
    dims = [dim] if isinstance(dim, int) else list(dim)
    if not all(isinstance(d, int) for d in dims):
        return unique
    if rank is not None:
        dims = [d + rank if d < 0 else d for d in dims]
    return ("dims", tuple(sorted(dims)))


def propose_groups(graph: torch.fx.Graph) -> tuple[list[list[torch.fx.Node]], list[LeftOut]]:
    """Groups of supported nodes (each in graph order) and the call nodes left out."""
    order = {n: i for i, n in enumerate(graph.nodes)}
    group_of: dict[torch.fx.Node, int] = {}
    groups: dict[int, set[torch.fx.Node]] = {}
    reductions: dict[int, set] = {}
    left_out: list[LeftOut] = []
    next_id = 0
    for node in graph.nodes:
        if node.op != "call_function":
            continue
        reason = capture.unsupported_reason(node)
        if reason is not None:
            if node.target is not operator.getitem:
                left_out.append(LeftOut(capture.op_name(node), reason))
            continue
        gid = next_id
        next_id += 1
        groups[gid] = {node}
        sig = reduction_signature(node)
        reductions[gid] = {sig} if sig is not None else set()
        group_of[node] = gid
        producers = [a for a in node.all_input_nodes if a in group_of]
        for p in producers:
            pg = group_of[p]
            if pg == gid:
                continue
            merged = groups[pg] | groups[gid]
            sigs = reductions[pg] | reductions[gid]
            if len(sigs) <= 1 and _convex(merged, order):
                for n in groups[gid]:
                    group_of[n] = pg
                groups[pg] = merged
                reductions[pg] = sigs
                del groups[gid], reductions[gid]
                gid = pg
    out = []
    for members in groups.values():
        nontrivial = [n for n in members if n.target not in capture.TRIVIAL_TARGETS]
        if nontrivial:
            out.append(sorted(members, key=order.__getitem__))
    out.sort(key=lambda ms: order[ms[0]])
    return out, left_out


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
        stable_topological_sort(gm)
        gm.graph.lint()
        gm.recompile()
    return report
