"""The decomposition table dice hands to Inductor, and the repair of the ops
it kept whole that no fusion group took.

Inductor decomposes softmax, layer_norm, gelu, _to_copy, ... before lowering.
dice removes the ops its IR has from that table (``capture.supported_targets``)
so they reach the partitioner whole. An op kept whole that then joins no
group (an unsupported dtype, a cast alone, ...) must not reach Inductor's
lowering as it is: Inductor has no lowering for most of them and creating an
implicit ATen fallback for an op that also has a decomposition is an
assertion (torch/_inductor/lowering.py ``make_fallback``: "both a fallback
and a decomp for same op: aten._to_copy.default", the ResNet18 failure of
issue 17). ``decompose_leftovers`` applies Inductor's own decomposition to
exactly those nodes, so the graph Inductor lowers is the one it would have
produced itself. Which ops need it is read from Inductor's registries at run
time (``torch._inductor.lowering.lowerings``), not from a hard-coded list.
"""

from __future__ import annotations

import logging
from typing import Any

import torch
import torch.fx
from torch.utils import _pytree as pytree

from . import capture

log = logging.getLogger("dice_torch")


def inductor_table() -> dict:
    """Inductor's full decomposition table (``select_decomp_table``): op overload -> function."""
    from torch._inductor.decomposition import select_decomp_table

    return dict(select_decomp_table())


def dice_table() -> dict:
    """Inductor's table minus the ops the IR has (softmax, layer_norm, gelu,
    casts, ... reach the partitioner whole). Pass it as ``decompositions`` to
    ``compile_fx`` together with an ``inner_compile`` that runs
    ``decompose_leftovers`` after partitioning."""
    keep = set(capture.supported_targets())
    return {op: fn for op, fn in inductor_table().items() if op not in keep}


def needs_decomposition() -> dict:
    """Ops dice keeps whole that Inductor cannot lower as they are: in
    Inductor's table, supported by the IR, and absent from Inductor's
    lowering registry. op overload -> Inductor's decomposition function."""
    from torch._inductor.lowering import lowerings

    keep = set(capture.supported_targets())
    return {op: fn for op, fn in inductor_table().items() if op in keep and op not in lowerings}


def _copy_attrs(gm: torch.fx.GraphModule, sub: torch.fx.GraphModule, sub_graph: torch.fx.Graph) -> None:
    """Moves the constants a traced decomposition refers to (get_attr) into ``gm`` under fresh names."""
    for n in sub_graph.nodes:
        if n.op != "get_attr":
            continue
        base, k = f"_dice_decomp_{n.target}", 0
        while hasattr(gm, f"{base}_{k}"):
            k += 1
        name = f"{base}_{k}"
        value = getattr(sub, n.target)
        if isinstance(value, torch.nn.Parameter):
            gm.register_parameter(name, value)
        elif isinstance(value, torch.Tensor):
            gm.register_buffer(name, value)
        else:
            setattr(gm, name, value)
        n.target = name


def _decompose_node(gm: torch.fx.GraphModule, node: torch.fx.Node, table: dict) -> bool:
    """Replaces ``node`` by its decomposition under ``table`` (traced with
    make_fx on the nodes' example values). Returns False, leaving the node, when
    an operand has no example value."""
    from torch._guards import detect_fake_mode
    from torch.fx.experimental.proxy_tensor import make_fx

    flat, spec = pytree.tree_flatten((node.args, node.kwargs))
    pos = [i for i, a in enumerate(flat) if isinstance(a, torch.fx.Node)]
    vals = [flat[i].meta.get("val") for i in pos]
    if any(v is None for v in vals):
        return False
    target = node.target

    def call(*tensors: Any) -> Any:
        items = list(flat)
        for i, t in zip(pos, tensors):
            items[i] = t
        args, kwargs = pytree.tree_unflatten(items, spec)
        return target(*args, **kwargs)

    fake = detect_fake_mode([v for v in vals if isinstance(v, torch.Tensor)])
    if fake is not None:
        with fake:
            sub = make_fx(call, decomposition_table=table)(*vals)
    else:
        sub = make_fx(call, decomposition_table=table)(*vals)
    sub_graph = sub.graph
    _copy_attrs(gm, sub, sub_graph)
    placeholders = [n for n in sub_graph.nodes if n.op == "placeholder"]
    val_map = {p: flat[i] for p, i in zip(placeholders, pos)}
    with gm.graph.inserting_before(node):
        out = gm.graph.graph_copy(sub_graph, val_map)
    if isinstance(out, (tuple, list)):
        for user in list(node.users):
            if user.op == "call_function" and user.target.__name__ == "getitem":
                user.replace_all_uses_with(out[user.args[1]])
                gm.graph.erase_node(user)
    else:
        node.replace_all_uses_with(out)
    if not node.users:
        gm.graph.erase_node(node)
    return True


def decompose_leftovers(gm: torch.fx.GraphModule, needs: dict | None = None,
                        table: dict | None = None) -> list[str]:
    """Decomposes, in place, every call node of ``gm`` whose target is in
    ``needs`` (default ``needs_decomposition()``), recursively with ``table``
    (default Inductor's full table), i.e. what Inductor itself would have done
    to them. Call it after ``partition.fuse_dice_groups``: the nodes left
    are those no group took. Returns the names of the ops decomposed
    ("aten._to_copy.default", ...), one per node.
    Raises whatever make_fx raises for a decomposition that does not trace
    (the backend then falls back to plain Inductor for the graph)."""
    needs = needs_decomposition() if needs is None else needs
    table = inductor_table() if table is None else table
    done: list[str] = []
    for node in list(gm.graph.nodes):
        if node.op == "call_function" and node.target in needs and _decompose_node(gm, node, table):
            done.append(capture.op_name(node))
    if done:
        gm.graph.eliminate_dead_code()
        gm.graph.lint()
        gm.recompile()
        log.debug("dice: decomposed %d op(s) no fusion group took: %s", len(done), ", ".join(sorted(set(done))))
    return done

