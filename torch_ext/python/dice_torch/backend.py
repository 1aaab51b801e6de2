"""The torch.compile backend "dice" and ``optimize()``.

Flow (DESIGN.md "Layers": the Python frontend translates and calls, the C++
runtime does the work): dynamo hands over a graph; aot_autograd lowers it to
an ATen-level inference graph; ``partition.fuse_dice_groups`` replaces every
fusion group with a ``dice::run_group`` call (the C++ op serves the cached
winner kernel for the concrete shapes, or runs the group with ATen and counts
the fallback with its reason); the rest of the graph goes to the "rest"
compiler: Inductor (``rest="inductor"``, the default: ``compile_fx`` with our
groups formed in its ``inner_compile`` hook, before Inductor's own fusion) or
eager (``rest="eager"``: the rewritten ATen graph runs op by op).

Options (``torch.compile(..., backend="dice", options={...})`` or the
keyword arguments of ``optimize``): ``mode`` (off | observe | cache | tune |
tune-sync; default ``$DICE_MODE``, else "cache"), ``cache_dir`` (default
``$DICE_CACHE_DIR``, else ~/.cache/dice), ``rest`` ("inductor" | "eager").
Inference only: a graph that needs autograd (grad mode on and an input or
parameter requiring grad) is handed unchanged to the rest compiler, and a
warning on the "dice_torch" logger says so. Mode and cache dir are
process-wide (as on the C++ side): the last compile's options apply. Dynamic shapes: the op computes
its task key from the concrete shapes of each call, so a new batch size is a
new key (and a new tuning task in tune modes) while the fallback serves it.
"""

from __future__ import annotations

import json
import logging
import os
from dataclasses import dataclass, field
from typing import Any, Callable, Sequence

import torch
import torch.fx

from . import _library, partition

log = logging.getLogger("dice_torch")

MODES = ("off", "observe", "cache", "tune", "tune-sync")
RESTS = ("inductor", "eager")


@dataclass
class CompileReport:
    """What the backend did with one graph (one per dynamo graph / recompile)."""

    mode: str
    rest: str
    groups: list[partition.FusionGroup] = field(default_factory=list)
    left_out: list[partition.LeftOut] = field(default_factory=list)
    skipped: str | None = None  #: why the graph went to the rest compiler unchanged, else None


_reports: list[CompileReport] = []


def reports() -> list[CompileReport]:
    """Every CompileReport of this process, oldest first."""
    return list(_reports)


def last_report() -> CompileReport | None:
    """The most recent CompileReport, or None before the first compile."""
    return _reports[-1] if _reports else None


def clear_reports() -> None:
    """Forgets the CompileReports (group statistics stay in the C++ runtime)."""
    _reports.clear()


def group_stats() -> list[dict[str, Any]]:
    """Run-time statistics of every fusion group of this process (C++
    ``dice::torch_ext::GetGroupStats``): dicts with id, summary, canonical (IR),
    torch_ops, input_specs and task_key of the newest input signature, task_keys (every
    distinct key: one per input signature), calls, hits (served by a winner
    kernel), fallbacks, fallback_reasons (reason -> count, e.g. "no GPU"),
    timed_calls and total_us (µs, observe mode).
    Raises:
        FileNotFoundError / OSError: libdice_torch_ext.so missing or unloadable.
    """
    _library.load()
    return json.loads(torch.ops.dice.group_stats())


def resolve_options(options: dict[str, Any] | None) -> dict[str, str]:
    """Fills mode / cache_dir / rest from ``options``, then the environment
    (DICE_MODE, DICE_CACHE_DIR), then defaults ("cache", "", "inductor").
    Raises:
        ValueError: an unknown option, mode or rest (the message lists the accepted values).
    """
    options = dict(options or {})
    unknown = set(options) - {"mode", "cache_dir", "rest"}
    if unknown:
        raise ValueError(f"dice backend: unknown option(s) {sorted(unknown)} (accepted: mode, cache_dir, rest)")
    mode = options.get("mode") or os.environ.get("DICE_MODE") or "cache"
    mode = mode.replace("_", "-")
    if mode not in MODES:
        raise ValueError(f"dice backend: unknown mode '{mode}' (expected {'|'.join(MODES)})")
    rest = options.get("rest") or "inductor"
    if rest not in RESTS:
        raise ValueError(f"dice backend: unknown rest compiler '{rest}' (expected {'|'.join(RESTS)})")
    cache_dir = options.get("cache_dir") or os.environ.get("DICE_CACHE_DIR") or ""
    return {"mode": mode, "cache_dir": str(cache_dir), "rest": rest}


def autograd_reason(gm: torch.fx.GraphModule, example_inputs: Sequence[Any]) -> str | None:
    """Why this graph needs autograd (grad mode on and inputs requiring grad), or None."""
    if not torch.is_grad_enabled():
        return None
    names = [n.name for n in gm.graph.nodes if n.op == "placeholder"]
    needing = [names[i] if i < len(names) else f"input {i}" for i, x in enumerate(example_inputs)
               if isinstance(x, torch.Tensor) and x.requires_grad]
    if not needing:
        return None
    shown = ", ".join(needing[:3]) + (f" and {len(needing) - 3} more" if len(needing) > 3 else "")
    return (f"graph needs autograd ({len(needing)} input(s) require grad: {shown}); the dice backend is "
            "inference only: run under torch.no_grad() / torch.inference_mode() or call "
            "model.requires_grad_(False)")


def _rest_unchanged(gm: torch.fx.GraphModule, example_inputs: Sequence[Any], rest: str) -> Callable:
    if rest == "eager":
        return gm.forward
    from torch._inductor.compile_fx import compile_fx

    return compile_fx(gm, example_inputs)


def _inductor_decompositions() -> dict:
    """Inductor's decomposition table minus the ops the IR has (so softmax,
    layer_norm, gelu, ... reach the partitioner whole; ungrouped ones go to
    Inductor's lowerings or its ATen fallback)."""
    from torch._inductor.decomposition import select_decomp_table

    from . import capture

    keep = set(capture.supported_targets())
    return {op: fn for op, fn in select_decomp_table().items() if op not in keep}


def dice_backend(gm: torch.fx.GraphModule, example_inputs: Sequence[Any],
                 options: dict[str, Any] | None = None, **_: Any) -> Callable:
    """torch.compile backend "dice" (``torch.compile(model, backend="dice")``).

    Args:
        gm: dynamo's FX graph (torch-level ops).
        example_inputs: its example inputs (tensors, possibly fake; SymInts).
        options: {"mode", "cache_dir", "rest"}; see the module docstring.
    Returns:
        The compiled callable: ATen graph with ``dice::run_group`` calls, run
        by Inductor or eagerly; or, for an autograd graph or mode "off", the
        rest compiler's result on the unchanged graph.
    Raises:
        ValueError: bad options. (A missing or unloadable libdice_torch_ext.so
        is not raised: the graph goes to the rest compiler unchanged and the
        report's ``skipped`` and a warning name the cause.)
    """
    opts = resolve_options(options)
    report = CompileReport(mode=opts["mode"], rest=opts["rest"])
    try:
        _library.load()
    except OSError as e:  # FileNotFoundError included: the model still runs, without dice
        report.skipped = f"dice library unavailable: {e}"
        log.warning("dice: %s; graph left to %s unchanged", report.skipped, opts["rest"])
        _reports.append(report)
        return _rest_unchanged(gm, example_inputs, opts["rest"])
    torch.ops.dice.set_options(opts["mode"], opts["cache_dir"])
    compiled = _compile(gm, example_inputs, opts, report)
    _reports.append(report)  # only compiles that returned (dynamo may retry a graph)
    return compiled


def _compile(gm: torch.fx.GraphModule, example_inputs: Sequence[Any], opts: dict[str, str],
             report: CompileReport) -> Callable:
    if opts["mode"] == "off":
        report.skipped = "mode off (DICE_MODE=off): no fusion groups formed"
        log.info("dice: %s; graph left to %s", report.skipped, opts["rest"])
        return _rest_unchanged(gm, example_inputs, opts["rest"])
    reason = autograd_reason(gm, example_inputs)
    if reason is not None:
        report.skipped = reason
        log.warning("dice: %s; left to %s unchanged", reason, opts["rest"])
        return _rest_unchanged(gm, example_inputs, opts["rest"])

    def fuse(aten_gm: torch.fx.GraphModule) -> None:
        res = partition.fuse_dice_groups(aten_gm)
        report.groups.extend(res.groups)
        report.left_out.extend(res.left_out)
        log.info("dice: %d fusion group(s) [%s]; %d op(s) left to %s", len(res.groups),
                 ", ".join(g.summary for g in res.groups), len(res.left_out), opts["rest"])

    if opts["rest"] == "eager":
        from functorch.compile import make_boxed_func
        from torch._dynamo.backends.common import aot_autograd

        def fw_compiler(aten_gm: torch.fx.GraphModule, aten_inputs: Sequence[Any]) -> Callable:
            fuse(aten_gm)
            return make_boxed_func(aten_gm.forward)

        return aot_autograd(fw_compiler=fw_compiler)(gm, example_inputs)

    from torch._inductor.compile_fx import compile_fx, compile_fx_inner

    def inner_compile(aten_gm: torch.fx.GraphModule, aten_inputs: Sequence[Any], **kwargs: Any) -> Any:
        fuse(aten_gm)
        return compile_fx_inner(aten_gm, aten_inputs, **kwargs)

    # AOTAutograd's cache keys the dynamo graph, not our inner_compile: a hit
    # would skip the partitioner (or hand plain Inductor our groups). Off for
    # this compile; Inductor's FX graph cache (keyed on the rewritten graph) stays.
    with torch._functorch.config.patch(enable_autograd_cache=False):
        return compile_fx(gm, example_inputs, inner_compile=inner_compile, decompositions=_inductor_decompositions())


class OptimizedModel(torch.nn.Module):
    """``optimize()``'s result: calls the compiled model under torch.no_grad()
    (the backend is inference only). ``report`` is the CompileReport of the
    warm-up call."""

    def __init__(self, model: torch.nn.Module, compiled: Callable, report: CompileReport | None):
        super().__init__()
        self.model = model
        self._compiled = compiled
        self.report = report

    def forward(self, *args: Any, **kwargs: Any) -> Any:
        with torch.no_grad():
            return self._compiled(*args, **kwargs)


def optimize(model: torch.nn.Module, example_inputs: Sequence[Any], mode: str | None = None,
             rest: str | None = None, cache_dir: str | None = None, dynamic: bool | None = None) -> OptimizedModel:
    """Compiles ``model`` with the dice backend and runs it once on
    ``example_inputs`` (under torch.no_grad(); in mode "tune-sync" this tunes
    every fusion group for these shapes before returning). The model is put
    in eval mode.

    Args:
        model: any nn.Module torch.compile accepts.
        example_inputs: positional forward() arguments (tensors on the device
            the model will run on; their shapes form the first task keys).
        mode / cache_dir / rest: as the backend options (None: environment,
            then defaults); ``dynamic``: passed to torch.compile.
    Returns:
        An OptimizedModel (an nn.Module; call it like the model).
    Raises:
        ValueError: bad mode or rest. (Without the library the model still
        runs, unchanged; ``report.skipped`` says why.)
    """
    options = {k: v for k, v in (("mode", mode), ("cache_dir", cache_dir), ("rest", rest)) if v is not None}
    resolve_options(options)  # fail early on bad values
    model.eval()
    compiled = torch.compile(model, backend=dice_backend, options=options, dynamic=dynamic)
    before = len(_reports)
    with torch.no_grad():
        compiled(*example_inputs)
    return OptimizedModel(model, compiled, _reports[-1] if len(_reports) > before else None)
