"""CUDA-graph replay of a compiled graph, kept only where measured faster.

Why: at KernelBench's batch sizes several whole networks are bound by the
CPU launching their kernels, not by the kernels. Measured on an H100
(docs/PERF.md, session 23, ``torch_compile_bench.py --kernel-sum``):
torch.compile's MobileNetV1 forward takes 1587 µs of wall time for 380 µs
of GPU kernels, EfficientNetB0 1936 for 582, ResNet101 6104 for 2134; a
cuDNN convolution costs ~50 µs of CPU per call. Replaying the graph's
kernels from one CUDA graph (CUDA Programming Guide, "CUDA Graphs") removes
that cost. Inductor offers it as ``mode="reduce-overhead"`` for the whole
program, unmeasured; here it is a per-graph tactic decided by measurement,
as everything else in dice: the graph with replay against the graph
without, on the first call's real inputs (``measure.compare_us``), kept
only when faster by ``decisions.GUARD_MIN_GAIN`` in every round. Where it
loses (kernel-bound graphs, large outputs to copy) nothing changes.

Semantics kept as without replay:
- Outputs are fresh tensors (the replay's outputs are cloned), so a result
  kept across calls is never overwritten by the next call (what
  ``reduce-overhead`` mode does not promise).
- Inputs dynamo marks static (parameters and buffers,
  ``_dynamo_static_input_type``) are read in place; the captured graph
  holds their addresses, so a call where one has another address runs
  the graph directly (counted, logged once). Every other tensor input is
  copied into the graph's own input buffer on every call.
- Graphs that mutate an input in place, return an input (or a view of
  one), have symbolic shapes or non-tensor inputs, or whose capture fails
  (a CPU sync, an op that cannot be captured) are never replayed; the
  cause is in the report.
- Calls with grad mode on run the graph directly.

Decisions are stored beside the others (``decisions.DecisionStore``, key
``<fx_graph_key>/replay``); ``cache`` mode replays where a tune decided so
and never measures. Option ``cudagraphs``: "auto" (default: measured in
tune modes, stored decision in cache mode) or "off"; env DICE_TORCH_CUDAGRAPHS.
"""

from __future__ import annotations

import logging
import os
from dataclasses import asdict, dataclass
from typing import Any, Callable, Sequence

import torch
import torch.fx
import torch.utils._pytree as pytree

from . import decisions, logs, measure

log = logging.getLogger("dice_torch")

CHOICES = ("auto", "off")
ENV = "DICE_TORCH_CUDAGRAPHS"
REPLAY, DIRECT = "cuda graph", "direct"

#: FX call targets (method names / function names) that return a view of
#: their first argument: an in-place op on such a view mutates the input.
_VIEW_NAMES = {"view", "reshape", "transpose", "permute", "t", "unsqueeze", "squeeze", "flatten", "expand",
               "narrow", "select", "__getitem__", "view_as", "unflatten", "movedim", "swapaxes", "as_strided",
               "chunk", "split", "unbind", "diagonal", "contiguous", "detach", "alias"}


@dataclass
class ReplayDecision:
    """What the backend did about replay for one graph: choice (REPLAY or
    DIRECT), source ("measured", "cache", or why replay was not tried), and
    the two medians (µs) when measured."""

    choice: str
    source: str
    replay_us: float | None = None
    direct_us: float | None = None


def _target_name(node: torch.fx.Node) -> str:
    t = node.target
    return t if isinstance(t, str) else getattr(t, "__name__", str(t))


def _root_placeholder(node: Any) -> torch.fx.Node | None:
    """The placeholder ``node`` is (a chain of views of), else None."""
    while isinstance(node, torch.fx.Node):
        if node.op == "placeholder":
            return node
        if node.op in ("call_method", "call_function") and _target_name(node) in _VIEW_NAMES and node.args:
            node = node.args[0]
            continue
        return None
    return None


def inputs_unsafe_reason(example_inputs: Sequence[Any]) -> str | None:
    """Why a graph with these inputs is not replayed, or None: every input
    must be a tensor on a CUDA device with static sizes."""
    for x in example_inputs:
        if not isinstance(x, torch.Tensor):
            return "a non-tensor input"
        if not x.is_cuda:
            return "an input not on a CUDA device"
        if any(isinstance(d, torch.SymInt) for d in x.shape):
            return "symbolic shapes"
    return None


def graph_unsafe_reason(gm: torch.fx.GraphModule) -> str | None:
    """Why dynamo's graph ``gm`` must not be replayed, or None: an in-place
    op (a name ending in "_", ``inplace=True`` or ``out=``) on an input or
    a view of one, or an output that is an input or a view of one."""
    for n in gm.graph.nodes:
        if n.op == "output":
            for leaf in pytree.tree_leaves(n.args):
                root = _root_placeholder(leaf)
                if root is not None:
                    return f"the graph returns input {root.name} (or a view of it)"
        elif n.op in ("call_method", "call_function") and n.args:
            name = _target_name(n)
            in_place = (name.endswith("_") and not name.endswith("__")) or n.kwargs.get("inplace") is True \
                or "out" in n.kwargs
            root = _root_placeholder(n.args[0])
            if in_place and root is not None:
                return f"{name} writes input {root.name} in place"
    return None


def static_indices(example_inputs: Sequence[Any]) -> list[int]:
    """Indices of the inputs dynamo marks static (parameters, buffers)."""
    return [i for i, x in enumerate(example_inputs) if getattr(x, "_dynamo_static_input_type", None) is not None]


class Replayer:
    """``fn`` captured into one CUDA graph on copies of ``args``' non-static
    inputs (module docstring); calling it copies the inputs in, replays and
    returns clones of the outputs.

    Args:
        fn: the compiled graph (called ``fn(*args)``), already run at least
            once on these shapes (Triton autotuning, dice's winner loading).
        args: real inputs of one call (CUDA tensors).
        static: indices of inputs read in place (their addresses are checked per call).
    Raises:
        RuntimeError: the capture failed (the caller serves ``fn`` directly).
    """

    def __init__(self, fn: Callable, args: Sequence[torch.Tensor], static: Sequence[int]):
        self._fn = fn
        self._static = set(static)
        self._ptrs = {i: args[i].data_ptr() for i in self._static}
        self._inputs = [a if i in self._static else a.clone() for i, a in enumerate(args)]
        self.direct_calls = 0
        self._device = next((a.device for a in args if a.is_cuda), torch.device("cuda"))
        with torch.cuda.device(self._device):  # the inputs' GPU, not the current one
            stream = torch.cuda.Stream()
            stream.wait_stream(torch.cuda.current_stream())
            with torch.cuda.stream(stream):  # warm-up off the default stream, as capture wants
                for _ in range(2):
                    fn(*self._inputs)
            torch.cuda.current_stream().wait_stream(stream)
            self._graph = torch.cuda.CUDAGraph()
            with torch.cuda.graph(self._graph):
                self._out = fn(*self._inputs)

    def __call__(self, *args: Any) -> Any:
        if torch.is_grad_enabled() or any(args[i].data_ptr() != p for i, p in self._ptrs.items()):
            self.direct_calls += 1
            if self.direct_calls == 1:
                log.info("dice: a CUDA-graph replayed graph ran directly (grad mode on, or a parameter or "
                         "buffer at another address than when captured)")
            return self._fn(*args)
        with torch.cuda.device(self._device):  # the copies on the replay's stream
            for i, a in enumerate(args):
                if i not in self._static:
                    self._inputs[i].copy_(a)
            self._graph.replay()
        return pytree.tree_map(lambda t: t.clone() if isinstance(t, torch.Tensor) else t, self._out)


def resolve_choice(options: dict[str, Any]) -> str:
    """The ``cudagraphs`` option, else $DICE_TORCH_CUDAGRAPHS, else "auto".
    Raises:
        ValueError: a value other than auto / off."""
    c = str(options.get("cudagraphs") or os.environ.get(ENV) or "auto")
    if c not in CHOICES:
        raise ValueError(f"dice backend: unknown cudagraphs choice '{c}' (expected {'|'.join(CHOICES)})")
    return c


#: Test hook as measure._timer: (label, fn, base_fn, args) -> measure.Comparison.
_timer: Callable[[str, Callable, Callable, Sequence[Any]], measure.Comparison] = \
    lambda label, fn, base_fn, args: measure.compare_us(fn, base_fn, args)

#: Test hook: builds the replayer (tests replace it, CUDA graphs need a GPU).
_make_replayer: Callable[[Callable, Sequence[Any], Sequence[int]], Callable] = Replayer


class ReplayTactic:
    """A compiled graph or served model wrapped: the first call runs ``fn``
    (which may tune and measure), then decides replay against direct on
    that call's inputs (tune modes) or applies the stored decision (cache
    mode); later calls run the decided callable. Failures keep ``fn``:
    replay never makes a call fail.

    Args:
        fn: the compiled graph or model. key: where the decision is stored,
            or a function of the first call's inputs giving it (None: never
            stored). store: the DecisionStore. measure_now: tune modes on a
            GPU. static: indices of inputs read in place (static_indices).
        report: its ``replay`` field is set to the ReplayDecision.
        check_call: check the first call itself (for models whose graph was
            not inspected): CUDA tensor inputs, none written, no output
            sharing an input's storage; else never replayed.
        baseline: the DecisionStore baseline the decision is stored under.
    """

    def __init__(self, fn: Callable, key: str | Callable[[list], str] | None, store: decisions.DecisionStore,
                 measure_now: bool, static: Sequence[int], report: Any, check_call: bool = False,
                 baseline: str = "inductor"):
        self._fn, self._key, self._store = fn, key, store
        self._measure_now, self._static, self._report = measure_now, list(static), report
        self._check_call, self._baseline = check_call, baseline
        self._chosen: Callable | None = None

    def keep_direct(self, source: str) -> None:
        """Decides now, before any call: every call runs ``fn`` directly;
        ``source`` is the ReplayDecision's reason (e.g. the cudagraphs
        option is off)."""
        self._chosen, self._report.replay = self._fn, ReplayDecision(DIRECT, source)

    @property
    def decision(self) -> ReplayDecision | None:
        """The ReplayDecision once the first call ran, else None."""
        return self._report.replay

    def __call__(self, *args: Any) -> Any:
        if self._chosen is not None:
            return self._chosen(*args)
        reason = inputs_unsafe_reason(args) if self._check_call else None
        before = [a.clone() for a in args] if self._check_call and reason is None else None
        out = self._fn(*args)
        if before is not None:
            reason = call_unsafe_reason(before, args, out)
        if reason is not None:
            self._chosen = self._fn
            self._report.replay = ReplayDecision(DIRECT, "not replayable: " + reason)
            return out
        try:
            self._chosen, self._report.replay = self._decide(list(args))
        except Exception as e:  # capture or timing failed: the graph runs as compiled
            self._chosen = self._fn
            self._report.replay = ReplayDecision(DIRECT, f"replay failed: {type(e).__name__}: {e}"[:300])
            logs.count("replay_failed")
            log.info("dice: CUDA-graph replay not used (%s)", self._report.replay.source)
        return out

    def _decide(self, args: list) -> tuple[Callable, ReplayDecision]:
        key = self._key(args) if callable(self._key) else self._key
        stored = self._store.get(key, self._baseline) if key else None
        if not self._measure_now:
            if stored is None or stored.get("choice") != REPLAY:
                return self._fn, ReplayDecision(DIRECT, "cache" if stored else "not decided (no tune)")
            logs.count("graphs_replayed")
            return _make_replayer(self._fn, args, self._static), ReplayDecision(
                REPLAY, "cache", stored.get("replay_us"), stored.get("direct_us"))
        replayer = _make_replayer(self._fn, args, self._static)
        c = _timer("replay", replayer, self._fn, args)
        won = c.variant_wins(decisions.GUARD_MIN_GAIN)
        d = ReplayDecision(REPLAY if won else DIRECT, "measured", c.variant_us, c.base_us)
        if key:
            self._store.put_many([(key, asdict(d))], self._baseline)
        log.info("dice: CUDA-graph replay %s (%.1f vs %.1f µs direct)", "kept" if won else "not kept",
                 c.variant_us, c.base_us)
        if won:
            logs.count("graphs_replayed")
        return (replayer if won else self._fn), d


def call_unsafe_reason(before: Sequence[torch.Tensor], args: Sequence[torch.Tensor], out: Any) -> str | None:
    """Why a model whose call turned inputs ``before`` (clones taken before
    the call) into ``args`` and returned ``out`` must not be replayed, or
    None: it wrote an input, or an output shares an input's storage."""
    for i, (b, a) in enumerate(zip(before, args)):
        if not torch.equal(b, a):
            return f"the call wrote input {i}"
    storages = {a.untyped_storage().data_ptr() for a in args}
    for t in pytree.tree_leaves(out):
        if isinstance(t, torch.Tensor) and t.untyped_storage().data_ptr() in storages:
            return "an output shares an input's storage"
    return None


def _module_key(module: Any, args: list) -> str:
    """Decision key of a served model: its graph (TorchScript: the inlined
    graph's text; else its class and repr) and the inputs' dtype, shape,
    strides and device."""
    import hashlib

    graph = str(module.inlined_graph) if hasattr(module, "inlined_graph") else \
        f"{type(module).__qualname__}\n{module!r}"
    sig = ";".join(f"{a.dtype}{tuple(a.shape)}{a.stride()}{a.device.type}" for a in args)
    return "served:" + hashlib.sha256((graph + "\n" + sig).encode()).hexdigest()


@dataclass
class _Report:
    """What replayed() fills (the backend fills its CompileReport instead)."""

    replay: ReplayDecision | None = None


def replayed(module: Callable, mode: str | None = None, cache_dir: str | None = None,
             cudagraphs: str | None = None) -> ReplayTactic:
    """A served model (``torch.jit.load`` of a ``dice tune --save`` file, or
    any inference-only callable on CUDA tensors with fixed shapes) with the
    replay tactic: in mode tune / tune-sync its first call measures replay
    against direct and stores the decision in ``cache_dir``'s decisions
    file (baseline "served"); in cache mode the stored decision applies;
    ``.decision`` says what was done. The first call checks that the model
    writes no input and returns no view of one (else never replayed).

    Args:
        module: the model; called as ``module(*inputs)``.
        mode: DICE mode (default $DICE_MODE, else "cache"; off and observe
            never replay).
        cache_dir: the DICE cache dir (default $DICE_CACHE_DIR, else ~/.cache/dice).
        cudagraphs: "auto" | "off" (default $DICE_TORCH_CUDAGRAPHS, else "auto").
    Raises:
        ValueError: an unknown mode or cudagraphs choice."""
    from .backend import resolve_mode  # backend imports this module

    mode = resolve_mode(mode, "dice_torch.replayed")
    choice = resolve_choice({"cudagraphs": cudagraphs})
    report = _Report()
    store = decisions.DecisionStore(cache_dir or "")
    tactic = ReplayTactic(module, lambda args: _module_key(module, args), store,
                          mode in ("tune", "tune-sync") and torch.cuda.is_available(), [], report,
                          check_call=True, baseline="served")
    if choice == "off":
        tactic.keep_direct("off (cudagraphs option)")
    elif mode not in ("cache", "tune", "tune-sync"):
        tactic.keep_direct(f"mode {mode}")
    return tactic


def wrap(fn: Callable, gm: torch.fx.GraphModule, example_inputs: Sequence[Any], choice: str, mode: str,
         store: decisions.DecisionStore, can_measure: bool, report: Any, baseline: str = "inductor") -> Callable:
    """``fn`` wrapped in a ReplayTactic when replay may apply, else ``fn``
    with ``report.replay`` saying why not. ``choice``: resolve_choice's;
    ``mode``: the backend's mode; ``can_measure``: a GPU is there;
    ``baseline``: the rest compiler, which the decision is stored under."""
    if choice == "off":
        report.replay = ReplayDecision(DIRECT, "off (cudagraphs option)")
        return fn
    if mode not in ("cache", "tune", "tune-sync"):
        report.replay = ReplayDecision(DIRECT, f"mode {mode}")
        return fn
    reason = inputs_unsafe_reason(example_inputs) or graph_unsafe_reason(gm)
    if reason is not None:
        report.replay = ReplayDecision(DIRECT, "not replayable: " + reason)
        return fn
    key = decisions.fx_graph_key(gm, example_inputs) + "/replay"
    measure_now = mode in ("tune", "tune-sync") and can_measure
    return ReplayTactic(fn, key, store, measure_now, static_indices(example_inputs), report, baseline=baseline)
