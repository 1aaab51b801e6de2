"""The torch.compile backend "dice" and ``optimize()``.

Flow (DESIGN.md "Layers": the Python frontend translates and calls, the C++
runtime does the work): dynamo hands over a graph; aot_autograd lowers it to
an ATen-level inference graph; the partitioner (``partition.fuse_dice_groups``)
forms fusion groups and those given to dice become ``dice::run_group`` calls
(the C++ op serves the cached winner kernel for the concrete shapes, or runs
the group with ATen and counts the fallback with its reason); the rest goes
to the "rest" compiler: Inductor (``rest="inductor"``, the default; groups are
formed in its ``inner_compile`` hook, before Inductor's own fusion; or
``rest="max-autotune"``: Inductor configured as
``torch.compile(mode="max-autotune-no-cudagraphs")``) or eager
(``rest="eager"``: the rewritten ATen graph runs op by op). pipeline.py has
the compile, decisions.py / measure.py the Inductor-baseline decisions.

Issue 17's rules:
- With ``rest="inductor"`` (or "max-autotune"), that Inductor is the
  baseline: a region goes to dice
  only where measured faster in context (tune / tune-sync, first call, on a
  GPU; stored in the cache dir; ``cache`` mode reads the decision and never
  measures; a region never decided stays with Inductor), and the whole-graph
  guard keeps Inductor alone when that is faster (measure.TunedGraph).
- Any exception in dice's part (load, partition, decompositions, compile,
  tune) falls back to the rest compiler for that graph: one warning per graph
  names the stage and the cause (``warnings`` + logger ``dice_torch``), and
  ``backend_stats()["fallbacks"][stage]`` and the report's ``fallback`` show it.
- An elementwise-only region (no contraction, no reduction) stays with
  Inductor without being tuned or measured: Inductor fuses it into one kernel
  too, and measured in context such regions did not win
  (``decisions.ELEMENTWISE_SOURCE``; ``DICE_TORCH_ELEMENTWISE_REGIONS=1``
  measures them as before). With ``rest="eager"`` they are dice's as always.
- Without a GPU (no CUDA tensor among the graph's inputs) the graph goes to
  the rest compiler unchanged, said once; the test switch
  ``DICE_TORCH_FORCE_PARTITION=1`` (or option ``force_partition``) still
  partitions on CPU, so CI covers the partitioner.

Options (``torch.compile(..., backend="dice", options={...})`` or the keyword
arguments of ``optimize``): ``mode`` (off | observe | cache | tune | tune-sync;
default ``$DICE_MODE``, else "cache"), ``cache_dir`` (default
``$DICE_CACHE_DIR``, else ~/.cache/dice), ``rest`` ("inductor" |
"max-autotune" | "eager"; decisions are stored per rest compiler, since each
is measured against its own baseline),
``force_partition`` (bool), ``cudagraphs`` ("auto" | "off", default
``$DICE_TORCH_CUDAGRAPHS``, else "auto": with an Inductor rest on a GPU,
the served graph is replayed from a CUDA graph where measured faster,
replay.py). Inference only: a graph that needs autograd goes
to the rest compiler unchanged, with a warning. Mode and cache dir are
process-wide (as on the C++ side): the last compile's options apply. Dynamic
shapes: the op computes its task key from the concrete shapes of each call;
graphs with symbolic shapes are not measured (regions as in ``cache`` mode).
"""

from __future__ import annotations

import json
import logging
import os
from dataclasses import dataclass, field
from typing import Any, Callable, Sequence

import torch
import torch.fx

from . import _library, decisions, logs, measure, partition, pipeline, replay

log = logging.getLogger("dice_torch")

MODES = ("off", "observe", "cache", "tune", "tune-sync")
RESTS = ("inductor", "max-autotune", "eager")
#: The rest compilers that are Inductor (with pipeline.rest_config's patches).
INDUCTOR_RESTS = ("inductor", "max-autotune")
FORCE_ENV = "DICE_TORCH_FORCE_PARTITION"


@dataclass
class CompileReport:
    """What the backend did with one graph (one per dynamo graph / recompile)."""

    mode: str
    rest: str
    groups: list[partition.FusionGroup] = field(default_factory=list)  #: the groups given to dice (run_group calls)
    left_out: list[partition.LeftOut] = field(default_factory=list)
    skipped: str | None = None  #: why the graph went to the rest compiler unchanged, else None
    candidates: list[partition.FusionGroup] = field(default_factory=list)  #: every group the partitioner formed
    regions: list[decisions.RegionDecision] = field(default_factory=list)  #: per-region decisions (rest=inductor)
    guard: decisions.GuardResult | None = None  #: the whole-graph guard's result, when it ran
    fallback: dict[str, str] | None = None  #: {"stage", "cause"} when dice's part failed and rest took over
    decomposed: list[str] = field(default_factory=list)  #: ops kept whole for dice, decomposed for Inductor
    prebuild: dict[str, Any] | None = None  #: the tune-sync first call's prebuild pass (measure._prebuild), else None
    replay: Any = None  #: replay.ReplayDecision: CUDA-graph replay of the served graph, or why not (None: not considered)


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


class GroupStats(list):
    """``group_stats()``'s result: a list of per-group dicts, plus ``backend``:
    the backend's own counters (``backend_stats()``) at the time of the call."""

    backend: dict[str, Any]


def group_stats() -> GroupStats:
    """Run-time statistics of every fusion group of this process (C++
    ``dice::torch_ext::GetGroupStats``): dicts with id, summary, canonical (IR),
    torch_ops, input_specs and task_key of the newest input signature, task_keys (every
    distinct key: one per input signature), calls, hits (served by a winner
    kernel), fallbacks, fallback_reasons (reason -> count, e.g. "no GPU"),
    timed_calls and total_us (µs, observe mode), winner_baseline_us and
    winner_best_us (µs: the loaded winner of the newest key as the tuner
    timed it, 0 when none). The list's ``backend``
    attribute holds ``backend_stats()`` (graph-level fallbacks by stage).
    Raises:
        FileNotFoundError / OSError: libdice_torch_ext.so missing or unloadable.
    """
    _library.load()
    out = GroupStats(json.loads(torch.ops.dice.group_stats()))
    out.backend = backend_stats()
    return out


def backend_stats() -> dict[str, Any]:
    """The backend's graph-level counters (no library needed): graphs,
    graphs_with_dice, passthrough_no_gpu, and fallbacks {stage: count} for the
    stages load, partition, decompositions, compile, tune."""
    return logs.counters()


def resolve_mode(mode: str | None, who: str = "dice backend") -> str:
    """The DICE mode: ``mode``, else $DICE_MODE, else "cache"; "tune_sync"
    is read as "tune-sync". Shared by the backend and dice_torch.replayed.
    Raises:
        ValueError: a mode not in MODES (the message names ``who`` and lists them)."""
    mode = (mode or os.environ.get("DICE_MODE") or "cache").replace("_", "-")
    if mode not in MODES:
        raise ValueError(f"{who}: unknown mode '{mode}' (expected {'|'.join(MODES)})")
    return mode


def resolve_options(options: dict[str, Any] | None) -> dict[str, Any]:
    """Fills mode / cache_dir / rest / force_partition from ``options``, then
    the environment (DICE_MODE, DICE_CACHE_DIR, DICE_TORCH_FORCE_PARTITION),
    then defaults ("cache", "", "inductor", False).
    Raises:
        ValueError: an unknown option, mode or rest (the message lists the accepted values).
    """
    options = dict(options or {})
    accepted = ("mode", "cache_dir", "rest", "force_partition", "cudagraphs")
    unknown = set(options) - set(accepted)
    if unknown:
        raise ValueError(f"dice backend: unknown option(s) {sorted(unknown)} (accepted: {', '.join(accepted)})")
    mode = resolve_mode(options.get("mode"))
    rest = options.get("rest") or "inductor"
    if rest not in RESTS:
        raise ValueError(f"dice backend: unknown rest compiler '{rest}' (expected {'|'.join(RESTS)})")
    cache_dir = options.get("cache_dir") or os.environ.get("DICE_CACHE_DIR") or ""
    force = options.get("force_partition")
    if force is None:
        force = os.environ.get(FORCE_ENV, "") not in ("", "0")
    return {"mode": mode, "cache_dir": str(cache_dir), "rest": rest, "force_partition": bool(force),
            "cudagraphs": replay.resolve_choice(options)}


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


def on_gpu(example_inputs: Sequence[Any]) -> bool:
    """True when a CUDA device exists and some tensor input of the graph is on it
    (the only case where ``dice::run_group`` can launch a kernel)."""
    return torch.cuda.is_available() and any(isinstance(x, torch.Tensor) and x.is_cuda for x in example_inputs)


def is_static(example_inputs: Sequence[Any]) -> bool:
    """True when no input is a SymInt and no tensor input has a symbolic size."""
    for x in example_inputs:
        if isinstance(x, torch.SymInt):
            return False
        if isinstance(x, torch.Tensor) and any(isinstance(d, torch.SymInt) for d in x.shape):
            return False
    return True


#: Test hook: called with the stage name as each stage of dice's part starts;
#: a test makes it raise to inject a failure there.
_stage_hook: Callable[[str], None] | None = None
#: Test hook: whether the first call may measure (default: on a GPU).
_can_measure: Callable[[Sequence[Any]], bool] = on_gpu
#: Test hook: whether CUDA-graph replay is considered (default: on a GPU).
_can_replay: Callable[[Sequence[Any]], bool] = on_gpu


def _enter_stage(state: pipeline.CompileState | None, stage: str) -> None:
    if state is not None:
        state.stage = stage
    if _stage_hook is not None:
        _stage_hook(stage)


def _rest_unchanged(gm: torch.fx.GraphModule, example_inputs: Sequence[Any], rest: str) -> Callable:
    if rest == "eager":
        return gm.forward
    return pipeline.plain_inductor(gm, example_inputs, pipeline.rest_config(rest))


def _fall_back(report: CompileReport, stage: str, exc: BaseException, cause: str | None = None) -> None:
    cause = cause or f"{type(exc).__name__}: {exc}".splitlines()[0][:400]
    report.fallback = {"stage": stage, "cause": cause}
    logs.count("fallbacks", stage)
    logs.warn(f"dice: {stage} failed ({cause}); this graph falls back to {report.rest} without dice")


def dice_backend(gm: torch.fx.GraphModule, example_inputs: Sequence[Any],
                 options: dict[str, Any] | None = None, **_: Any) -> Callable:
    """torch.compile backend "dice" (``torch.compile(model, backend="dice")``).

    Args:
        gm: dynamo's FX graph (torch-level ops).
        example_inputs: its example inputs (tensors, possibly fake; SymInts).
        options: {"mode", "cache_dir", "rest", "force_partition"}; see the module docstring.
    Returns:
        The compiled callable: ATen graph with ``dice::run_group`` calls for the
        regions given to dice, run by Inductor or eagerly; or the rest
        compiler's result on the unchanged graph (mode "off", autograd, no
        GPU, a failure in dice's part: ``report.skipped`` / ``report.fallback``).
    Raises:
        ValueError: bad options. Whatever the rest compiler itself raises on
        the unchanged graph (where torch.compile would fail too).
    """
    opts = resolve_options(options)
    report = CompileReport(mode=opts["mode"], rest=opts["rest"])
    logs.count("graphs")
    compiled = _compile(gm, example_inputs, opts, report)
    if opts["rest"] in INDUCTOR_RESTS and report.skipped is None and report.fallback is None \
            and _can_replay(example_inputs):
        try:
            compiled = replay.wrap(compiled, gm, example_inputs, opts["cudagraphs"], opts["mode"],
                                   decisions.DecisionStore(opts["cache_dir"]), _can_measure(example_inputs), report,
                                   baseline=opts["rest"])
        except Exception as e:  # the graph is served as compiled
            report.replay = replay.ReplayDecision(replay.DIRECT, f"replay failed: {type(e).__name__}: {e}"[:300])
    _reports.append(report)  # only compiles that returned (dynamo may retry a graph)
    return compiled


def _compile(gm: torch.fx.GraphModule, example_inputs: Sequence[Any], opts: dict[str, Any],
             report: CompileReport) -> Callable:
    rest = opts["rest"]
    if opts["mode"] == "off":
        report.skipped = "mode off (DICE_MODE=off): no fusion groups formed"
        log.info("dice: %s; graph left to %s", report.skipped, rest)
        return _rest_unchanged(gm, example_inputs, rest)
    reason = autograd_reason(gm, example_inputs)
    if reason is not None:
        report.skipped = reason
        log.warning("dice: %s; left to %s unchanged", reason, rest)
        return _rest_unchanged(gm, example_inputs, rest)
    if not on_gpu(example_inputs):
        if not opts["force_partition"]:
            report.skipped = "no GPU: the graph's inputs are not on a CUDA device"
            logs.count("passthrough_no_gpu")
            logs.warn_once("no-gpu", f"dice: {report.skipped}; graphs go to {rest} unchanged "
                           f"(set {FORCE_ENV}=1 to partition anyway, for tests)")
            return _rest_unchanged(gm, example_inputs, rest)
        logs.warn_once("forced", f"dice: {FORCE_ENV}=1 / force_partition: partitioning on CPU, where every "
                       "group runs its ATen fallback (a test switch: slower than the rest compiler alone)")
    state = pipeline.CompileState()
    try:
        _enter_stage(state, "load")
        _library.load()
        torch.ops.dice.set_options(opts["mode"], opts["cache_dir"])
    except Exception as e:  # FileNotFoundError / OSError included: the model still runs, without dice
        if isinstance(e, OSError):
            report.skipped = f"dice library unavailable: {e}"
        _fall_back(report, "load", e, report.skipped)
        return _rest_unchanged(gm, example_inputs, rest)
    try:
        return _compile_with_dice(gm, example_inputs, opts, report, state)
    except Exception as e:  # never fail where the rest compiler succeeds
        _fall_back(report, state.stage, e)
        return _rest_unchanged(gm, example_inputs, rest)


def _compile_with_dice(gm: torch.fx.GraphModule, example_inputs: Sequence[Any], opts: dict[str, Any],
                       report: CompileReport, state: pipeline.CompileState) -> Callable:
    enter = lambda stage: _enter_stage(state, stage)  # noqa: E731
    if opts["rest"] == "eager":
        compiled = pipeline.compile_eager(gm, example_inputs, state, enter)
        _fill_report(report, state)
        return compiled
    store = decisions.DecisionStore(opts["cache_dir"])
    baseline, patches = opts["rest"], pipeline.rest_config(opts["rest"])  # decisions stored per rest compiler
    mode = opts["mode"]
    static = is_static(example_inputs)
    measure_now = mode in ("tune", "tune-sync") and _can_measure(example_inputs) and static
    fx_key = decisions.fx_graph_key(gm, example_inputs) if static else None
    if mode == "cache" and fx_key:
        g = store.get(fx_key, baseline)
        if g is not None and g.get("choice") == decisions.INDUCTOR:
            # Decided when tuned: every region and the guard said Inductor.
            report.guard = decisions.GuardResult(decisions.INDUCTOR, "cache", g.get("dice_us"), g.get("base_us"))
            report.regions = [decisions.RegionDecision(k, summary, choice, "cache")
                              for k, summary, choice in g.get("regions", [])]
            log.info("dice: this graph was decided for %s alone when tuned; not partitioned", baseline)
            return pipeline.plain_inductor(gm, example_inputs, patches)
    decided: dict[str, decisions.RegionDecision] = {}
    # A region without a stored decision: tuned and measured on the first call
    # (tune modes; with symbolic shapes tuned but not measured), observed, or
    # under the CPU test switch, dice; in cache mode, Inductor.
    undecided_choice = decisions.INDUCTOR if mode == "cache" and not opts["force_partition"] else decisions.DICE

    chose: list[frozenset] = []  # what choose() returned, for the plain-Inductor check below

    def choose(regions: list[measure.Region]) -> frozenset:
        chose.append(_choose(regions))
        return chose[-1]

    elementwise_measured = decisions.elementwise_regions_measured()

    def _choose(regions: list[measure.Region]) -> frozenset:
        chosen, undecided = set(), 0
        for r in regions:
            if not elementwise_measured and decisions.elementwise_only(r.summary):
                # Neither tuned nor measured: Inductor fuses it as well (decisions.ELEMENTWISE_SOURCE).
                decided[r.key] = decisions.RegionDecision(r.key, r.summary, decisions.INDUCTOR,
                                                          decisions.ELEMENTWISE_SOURCE)
                continue
            stored = store.get(r.key, baseline) if mode != "observe" else None
            if stored is not None:
                decided[r.key] = decisions.from_stored(r.key, r.summary, stored)
                if decided[r.key].choice == decisions.DICE:
                    chosen.add(r.key)
            else:
                undecided += 1
                if undecided_choice == decisions.DICE:
                    chosen.add(r.key)
        gkey = decisions.graph_key([r.key for r in regions])
        g = store.get(gkey, baseline) if regions and mode != "observe" else None
        if g is not None and g.get("choice") == decisions.INDUCTOR and not (measure_now and undecided):
            report.guard = decisions.GuardResult(decisions.INDUCTOR, "cache", g.get("dice_us"), g.get("base_us"))
            return frozenset()
        return frozenset(chosen)

    compiled = pipeline.compile_inductor(gm, example_inputs, choose, state, enter, patches)
    _fill_report(report, state)
    report.regions = [decided[r.key] for r in state.regions if r.key in decided]
    undecided = [r for r in state.regions if r.key not in decided]
    if chose and not chose[-1] and not (measure_now and undecided):
        # No region for dice (stored decisions or the stored guard say
        # Inductor): serve exactly what torch.compile would, compiled here in
        # dynamo's context. The graph compiled above used dice's decomposition
        # table, which keeps some ops whole for the partitioner.
        report.groups = []
        log.info("dice: no region for dice in this graph; served by %s alone", baseline)
        if fx_key and undecided == [] and mode != "observe":
            entry = decisions.fx_graph_entry(decisions.INDUCTOR, "regions", state.regions, decided)
            store.put_many([(fx_key, entry)], baseline)
        return pipeline.plain_inductor(gm, example_inputs, patches)
    if not measure_now:
        for r in undecided:
            report.regions.append(decisions.RegionDecision(r.key, r.summary, undecided_choice, "undecided"))
        for d in report.regions:
            log.info("dice: region %s (%s) served by %s (%s)", d.key[:8], d.summary, d.choice, d.source)
        if report.groups:
            logs.count("graphs_with_dice")
        return compiled
    if not undecided:
        if report.groups:
            logs.count("graphs_with_dice")
        return compiled  # every region decided earlier

    # The baseline the guard measures and serves when Inductor wins: compiled
    # now, inside dynamo's compile context, exactly as torch.compile would.
    # pipeline.copy_gm keeps dynamo's attributes, so this compiles to the code
    # torch.compile's own does (the inductor-via-backend bench variant).
    base = pipeline.plain_inductor(gm, example_inputs, patches)

    def compile_variant(keys: frozenset, args: Sequence[Any]) -> Callable:
        if not keys:
            return base
        sub = pipeline.CompileState(primary=False)
        return pipeline.compile_inductor(gm, args, lambda regions: keys, sub, lambda s: _enter_stage(sub, s), patches)

    def on_failure(stage: str, exc: BaseException, args: list) -> Callable:
        _fall_back(report, stage, exc)
        return base

    return measure.TunedGraph(compile_variant, compiled, state.regions, decided, store, baseline, mode,
                              on_failure, report, fx_key=fx_key)


def _fill_report(report: CompileReport, state: pipeline.CompileState) -> None:
    report.groups, report.candidates = state.groups, state.candidates
    report.left_out, report.decomposed = state.left_out, state.decomposed
    log.info("dice: %d fusion group(s) given to dice [%s] of %d formed; %d op(s) left to %s", len(state.groups),
             ", ".join(g.summary for g in state.groups), len(state.candidates), len(state.left_out), report.rest)


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
