"""The dice compile of one dynamo graph: aot_autograd lowers it to ATen, the
partitioner forms fusion groups, only the regions ``choose`` picks become
``dice::run_group`` calls, the ops dice kept whole that no group took get
Inductor's own decomposition (``decomp.decompose_leftovers``), and Inductor
(or eager, ``rest="eager"``) compiles the rest.

A region is every group of one ``decisions.region_key`` (IR text + input
signature) in the graph: repeated blocks share one decision. Regions are
learned on a copy of the ATen graph (``capture.recording_members`` names
their FX nodes), then the real graph is partitioned with the unchosen
regions' nodes excluded (``capture.excluding``), so Inductor keeps them and
can fuse across them.
"""

from __future__ import annotations

import copy
import logging
from dataclasses import dataclass, field
from typing import Any, Callable, Sequence

import torch
import torch.fx

from . import capture, decisions, decomp, partition
from .measure import Region

log = logging.getLogger("dice_torch")

#: regions -> the region keys given to dice.
Chooser = Callable[[list[Region]], frozenset]


@dataclass
class CompileState:
    """Progress of one backend compile: the stage running now (named in a
    fallback's warning), and what the partitioner found."""

    stage: str = "load"
    primary: bool = True  #: the compile-time compile (not a first-call variant)
    regions: list[Region] = field(default_factory=list)
    groups: list[partition.FusionGroup] = field(default_factory=list)
    candidates: list[partition.FusionGroup] = field(default_factory=list)
    left_out: list[partition.LeftOut] = field(default_factory=list)
    decomposed: list[str] = field(default_factory=list)


#: What dynamo hangs on its GraphModule besides the graph: AOTAutograd reads
#: ``_param_name_to_source`` (with each placeholder's ``_dynamo_source``) to
#: tell a dynamo graph's parameters apart as static inputs. A copy without
#: them is taken for an exported graph: the parameters become ordinary
#: inputs, and Inductor's code for the same graph ran 3-5% slower on
#: ResNet101 (H200, 2026-12-01, docs/PERF.md).
_DYNAMO_GM_ATTRS = ("_param_name_to_source", "_source_to_user_stacks", "compile_subgraph_reason")


def copy_gm(gm: torch.fx.GraphModule) -> torch.fx.GraphModule:
    """A GraphModule sharing ``gm``'s parameters and submodules with a copy of
    its graph (node meta copied shallowly), so passes on it leave ``gm`` as it
    was. Dynamo's own attributes (_DYNAMO_GM_ATTRS, ``gm.meta`` and each
    placeholder's ``_dynamo_source``) come along, so AOTAutograd and Inductor
    treat the copy exactly as the graph dynamo handed over."""
    graph = torch.fx.Graph()
    graph._codegen = gm.graph._codegen
    val_map: dict[torch.fx.Node, torch.fx.Node] = {}
    out = graph.graph_copy(gm.graph, val_map)
    old_out = next(n for n in reversed(gm.graph.nodes) if n.op == "output")
    graph.output(out).meta = copy.copy(old_out.meta)  # Inductor reads user_visible_output_idxs there
    for old, new_node in val_map.items():
        if old.op == "placeholder" and hasattr(old, "_dynamo_source"):
            new_node._dynamo_source = old._dynamo_source
    new = torch.fx.GraphModule(gm, graph)
    new.meta = dict(getattr(gm, "meta", {}))
    for attr in _DYNAMO_GM_ATTRS:
        if hasattr(gm, attr):
            setattr(new, attr, getattr(gm, attr))
    return new


def regions_of(groups: Sequence[partition.FusionGroup], records: Sequence[tuple]) -> list[Region]:
    """Groups -> regions (first appearance order), matching each group to the
    first unused record (ir_text, member names, input signature) of
    ``capture.recording_members`` with its IR text.
    Raises:
        RuntimeError: a group without a record (the partitioner rendered its IR elsewhere)."""
    used = [False] * len(records)
    by_key: dict[str, Region] = {}
    for g in groups:
        k = next((i for i, r in enumerate(records) if not used[i] and r[0] == g.ir), None)
        if k is None:
            raise RuntimeError(f"dice: no member record for group {g.id} ({g.summary})")
        used[k] = True
        _, names, sig = records[k]
        key = decisions.region_key(g.ir, sig)
        region = by_key.setdefault(key, Region(key, g.summary))
        region.group_ids.append(g.id)
        region.members.extend(names)
    return list(by_key.values())


def fuse_chosen(aten_gm: torch.fx.GraphModule, choose: Chooser, state: CompileState,
                enter: Callable[[str], None]) -> torch.fx.GraphModule:
    """Partitions ``aten_gm`` giving dice only the regions ``choose`` picks and
    decomposes the leftovers; returns the graph to compile (``aten_gm`` itself
    or a rewritten copy). Fills ``state`` (regions, groups, candidates, left_out).
    ``enter(stage)`` is called at each stage ("partition", "decompositions")."""
    enter("partition")
    trial = copy_gm(aten_gm)
    with capture.recording_members() as records:
        res = partition.fuse_dice_groups(trial)
    regions = regions_of(res.groups, records)
    chosen = choose(regions)
    if all(r.key in chosen for r in regions):
        final, final_res = trial, res
    else:
        excluded = [n for r in regions if r.key not in chosen for n in r.members]
        with capture.excluding(excluded):
            final_res = partition.fuse_dice_groups(aten_gm)
        final = aten_gm
    enter("decompositions")
    decomposed = decomp.decompose_leftovers(final)
    if state.primary:
        state.regions, state.candidates = regions, list(res.groups)
        state.groups, state.left_out, state.decomposed = list(final_res.groups), list(final_res.left_out), decomposed
        for g in final_res.groups:
            log.info("dice: group %d formed: %s (%d input(s), %d output(s))", g.id, g.summary, g.num_inputs,
                     g.num_outputs)
    return final


def compile_inductor(gm: torch.fx.GraphModule, example_inputs: Sequence[Any], choose: Chooser,
                     state: CompileState, enter: Callable[[str], None],
                     config_patches: dict[str, Any] | None = None) -> Callable:
    """compile_fx on a copy of ``gm`` with dice's decomposition table and an
    inner_compile that runs ``fuse_chosen`` before Inductor's own passes.
    ``config_patches``: Inductor config for the rest (``rest_config``; None:
    Inductor's defaults)."""
    from torch._inductor.compile_fx import compile_fx, compile_fx_inner

    def inner_compile(aten_gm: torch.fx.GraphModule, aten_inputs: Sequence[Any], **kwargs: Any) -> Any:
        final = fuse_chosen(aten_gm, choose, state, enter)
        enter("compile")
        return compile_fx_inner(final, aten_inputs, **kwargs)

    enter("decompositions")
    table = decomp.dice_table()
    enter("compile")
    # AOTAutograd's cache keys the dynamo graph, not our inner_compile: a hit
    # would skip the partitioner (or hand plain Inductor our groups). Off for
    # this compile; Inductor's FX graph cache (keyed on the rewritten graph) stays.
    with torch._functorch.config.patch(enable_autograd_cache=False):
        return compile_fx(copy_gm(gm), example_inputs, inner_compile=inner_compile, decompositions=table,
                          config_patches=config_patches)


def compile_eager(gm: torch.fx.GraphModule, example_inputs: Sequence[Any], state: CompileState,
                  enter: Callable[[str], None]) -> Callable:
    """aot_autograd with every region to dice and the rest run op by op (``rest="eager"``)."""
    from functorch.compile import make_boxed_func
    from torch._dynamo.backends.common import aot_autograd

    def fw_compiler(aten_gm: torch.fx.GraphModule, aten_inputs: Sequence[Any]) -> Callable:
        enter("partition")
        res = partition.fuse_dice_groups(aten_gm)
        state.groups, state.candidates, state.left_out = list(res.groups), list(res.groups), list(res.left_out)
        for g in res.groups:
            log.info("dice: group %d formed: %s", g.id, g.summary)
        return make_boxed_func(aten_gm.forward)

    return aot_autograd(fw_compiler=fw_compiler)(gm, example_inputs)


def rest_config(rest: str) -> dict[str, Any] | None:
    """The Inductor config patches of a rest compiler: None for "inductor"
    (torch.compile's default mode); for "max-autotune", what
    ``torch.compile(mode="max-autotune-no-cudagraphs")`` sets (Inductor's own
    mode table, ``torch._inductor.list_mode_options``: autotuned GEMM/conv
    templates and coordinate-descent tuning of its Triton kernels; no CUDA
    graphs, which dice's replay tactic decides instead).
    Raises:
        ValueError: a rest that is not Inductor-based ("eager", unknown names)."""
    if rest == "inductor":
        return None
    if rest == "max-autotune":
        from torch._inductor import list_mode_options

        return dict(list_mode_options("max-autotune-no-cudagraphs"))
    raise ValueError(f"dice backend: rest '{rest}' is not compiled by Inductor")


def plain_inductor(gm: torch.fx.GraphModule, example_inputs: Sequence[Any],
                   config_patches: dict[str, Any] | None = None) -> Callable:
    """Inductor alone (``compile_fx``) on a copy of ``gm``: the baseline and the
    fallback. ``config_patches``: as in ``compile_inductor``."""
    from torch._inductor.compile_fx import compile_fx

    return compile_fx(copy_gm(gm), example_inputs, config_patches=config_patches)
