"""First-call measurements of the backend (issue 17 items 1 and 2): per
region, the graph compiled with that region given to dice against the graph
compiled without it (Inductor for the rest in both), then the whole-graph
guard (Inductor alone against dice + Inductor), on the first call's real
inputs. Decisions go to ``decisions.DecisionStore``; later calls run the
chosen graph only.

Timing protocol (``time_us``, that of bench/kernelbench_bench.py): on CUDA,
3 warm-up calls, then ``reps`` calls each after a 256 MB write that flushes
L2 and bracketed by CUDA events, median in µs; on CPU (tests only) wall
clock. The baseline is timed again right before each variant it is compared
with. ``_timer`` is the hook tests replace with fake timings.
"""

from __future__ import annotations

import logging
import os
import statistics
import time
from dataclasses import dataclass, field
from typing import Any, Callable, Sequence

import torch

from . import decisions, logs

log = logging.getLogger("dice_torch")

#: At most this many distinct regions are measured per graph (each costs one
#: Inductor compile), and none is started after MEASURE_BUDGET_S seconds of
#: measuring; the rest stay with Inductor, reported "not measured", and are
#: measured by a later compile. Environment: DICE_TORCH_MAX_REGION_TRIALS,
#: DICE_TORCH_MEASURE_BUDGET_S.
MAX_REGION_TRIALS = int(os.environ.get("DICE_TORCH_MAX_REGION_TRIALS", "8"))
MEASURE_BUDGET_S = float(os.environ.get("DICE_TORCH_MEASURE_BUDGET_S", "180"))
REPS = 20


def call(fn: Callable, args: Sequence[Any]) -> Any:
    """Calls a compiled graph (a backend's result: dynamo calls it with the
    inputs as positional arguments) with ``args``."""
    return fn(*args)


_flush: torch.Tensor | None = None


def time_us(fn: Callable, args: Sequence[Any], reps: int = REPS) -> float:
    """Median µs of ``fn(args)`` (see the module docstring for the protocol)."""
    cuda = any(isinstance(a, torch.Tensor) and a.is_cuda for a in args)
    for _ in range(3):
        call(fn, args)
    samples = []
    if cuda:
        global _flush
        if _flush is None:
            _flush = torch.empty(256 * 1024 * 1024 // 4, dtype=torch.float32, device="cuda")
        torch.cuda.synchronize()
        for _ in range(reps):
            _flush.zero_()
            start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            start.record()
            call(fn, args)
            end.record()
            end.synchronize()
            samples.append(start.elapsed_time(end) * 1000.0)
    else:
        for _ in range(reps):
            t0 = time.perf_counter()
            call(fn, args)
            samples.append((time.perf_counter() - t0) * 1e6)
    return statistics.median(samples)


#: Hook: (label, fn, args) -> µs. Tests replace it to inject timings; the
#: label is "base", "region:<key>" or "guard".
_timer: Callable[[str, Callable, Sequence[Any]], float] = lambda label, fn, args: time_us(fn, args)


@dataclass
class Region:
    """One distinct region key of a graph: its groups and FX member names."""

    key: str
    summary: str
    group_ids: list[int] = field(default_factory=list)
    members: list[str] = field(default_factory=list)  #: ATen FX node names (all groups of the key)


#: Fallback reasons that mean "tuning has not ended yet" (the C++ op's words).
_PENDING_REASONS = ("tuning in progress", "observe mode")


def tuning_state(group_ids: Sequence[int], stats: Sequence[dict]) -> str:
    """"winner" (some call was served by a tuned kernel), "no winner" (tuning
    ended without a kernel better than PyTorch, or failed), "unservable"
    (every fallback had another cause, e.g. "non-contiguous input 0": no
    kernel could serve these inputs, tuned or not; unservable_reason says
    which) or "pending" (still tuning / never called) for the groups of one
    region, from ``group_stats()`` dicts."""
    mine = [s for s in stats if s.get("id") in set(group_ids)]
    if any(s.get("hits", 0) > 0 for s in mine):
        return "winner"
    reasons = [r for s in mine for r in s.get("fallback_reasons", {})]
    if reasons and all(r.startswith(("no winner", "tuning failed")) for r in reasons):
        return "no winner"
    if reasons and not any(r.startswith(_PENDING_REASONS + ("no winner", "tuning failed")) for r in reasons):
        return "unservable"
    return "pending"


def unservable_reason(group_ids: Sequence[int], stats: Sequence[dict]) -> str:
    """The first fallback reason of a region's groups ("" when none)."""
    for s in stats:
        if s.get("id") in set(group_ids):
            for r in s.get("fallback_reasons", {}):
                return r
    return ""


class TunedGraph:
    """The backend's result in tune modes with ``rest="inductor"``: the first
    call runs the dice graph (tuning in tune-sync), then measures and picks
    the graph later calls run. Called like any backend result: ``g(*inputs)``.

    Args:
        compile_variant: (chosen region keys, real inputs) -> compiled graph
            (Inductor for the rest; an empty set is plain Inductor).
        dice_fn: the graph compiled at compile time with every region to dice.
        regions: the graph's regions; decided: decisions already stored.
        store / baseline: where the new decisions go.
        on_failure: (stage, exception, real inputs) -> a callable to run
            instead (the backend's fallback to plain Inductor).
        report: the CompileReport to fill (regions, guard).
    """

    def __init__(self, compile_variant: Callable[[frozenset, list], Callable], dice_fn: Callable,
                 regions: list[Region], decided: dict[str, decisions.RegionDecision],
                 store: decisions.DecisionStore, baseline: str, mode: str,
                 on_failure: Callable[[str, BaseException, list], Callable], report: Any):
        self._compile_variant, self._dice_fn = compile_variant, dice_fn
        self._regions, self._decided = regions, decided
        self._store, self._baseline, self._mode = store, baseline, mode
        self._on_failure, self._report = on_failure, report
        self._fn: Callable | None = None

    def __call__(self, *args: Any) -> Any:
        if self._fn is not None:
            return self._fn(*args)
        args = list(args)
        try:
            out = call(self._dice_fn, args)  # tune-sync: the worker tunes every region now
            self._fn = self._decide(args)
            return out
        except Exception as e:  # never fail where plain Inductor succeeds
            self._fn = self._on_failure("tune", e, args)
            return call(self._fn, args)

    def _decide(self, args: list) -> Callable:
        from . import backend

        backend._enter_stage(None, "tune")
        stats = backend.group_stats()
        base_fn = self._compile_variant(frozenset(), args)
        new: list[decisions.RegionDecision] = []
        trials, start = 0, time.monotonic()
        for r in self._regions:
            if r.key in self._decided:
                continue
            state = tuning_state(r.group_ids, stats)
            if state == "pending":
                d = decisions.RegionDecision(r.key, r.summary, decisions.INDUCTOR, "not measured: tuning pending")
            elif state == "unservable":  # not stored: a later dice may serve these inputs
                d = decisions.RegionDecision(r.key, r.summary, decisions.INDUCTOR,
                                             "not served: " + unservable_reason(r.group_ids, stats))
            elif state == "no winner":
                d = decisions.RegionDecision(r.key, r.summary, decisions.INDUCTOR, "no winner")
                new.append(d)
            elif trials >= MAX_REGION_TRIALS or time.monotonic() - start > MEASURE_BUDGET_S:
                d = decisions.RegionDecision(r.key, r.summary, decisions.INDUCTOR,
                                             f"not measured: over {MAX_REGION_TRIALS} regions or "
                                             f"{MEASURE_BUDGET_S:.0f} s of measuring")
            else:
                trials += 1
                fn = self._compile_variant(frozenset({r.key}), args)
                base_us = _timer("base", base_fn, args)  # beside each variant: drift hits both alike
                d = decisions.decide_region(r.key, r.summary, _timer("region:" + r.key, fn, args), base_us)
                new.append(d)
            self._decided[r.key] = d
            log.info("dice: region %s (%s) -> %s (%s%s)", r.key[:8], r.summary, d.choice, d.source,
                     f", {d.dice_us:.1f} vs {d.base_us:.1f} µs" if d.dice_us is not None else "")
        self._store.put_many([(d.key, _fields(d)) for d in new], self._baseline)
        self._report.regions = [self._decided[r.key] for r in self._regions if r.key in self._decided]
        kept = frozenset(k for k, d in self._decided.items() if d.choice == decisions.DICE)
        return self._guard(kept, base_fn, args)

    def _guard(self, kept: frozenset, base_fn: Callable, args: list) -> Callable:
        gkey = decisions.graph_key([r.key for r in self._regions])
        if not kept:
            g = decisions.GuardResult(decisions.INDUCTOR, "nothing for dice")
            fn = base_fn
        else:
            all_keys = frozenset(r.key for r in self._regions)
            dice_fn = self._dice_fn if kept == all_keys else self._compile_variant(kept, args)
            base_us = _timer("base", base_fn, args)
            g = decisions.decide_guard(_timer("guard", dice_fn, args), base_us)
            fn = dice_fn if g.choice == decisions.DICE else base_fn
            self._store.put_many([(gkey, {"choice": g.choice, "source": g.source, "dice_us": g.dice_us,
                                          "base_us": g.base_us, "kept": sorted(kept)})], self._baseline)
        self._report.guard = g
        log.info("dice: graph served by %s (guard: %s%s)", "dice + inductor" if g.choice == decisions.DICE
                 else "inductor alone", g.source, f", {g.dice_us:.1f} vs {g.base_us:.1f} µs"
                 if g.dice_us is not None and g.base_us is not None else "")
        if g.choice == decisions.DICE:
            logs.count("graphs_with_dice")
        return fn


def _fields(d: decisions.RegionDecision) -> dict:
    return {"choice": d.choice, "source": d.source, "summary": d.summary, "dice_us": d.dice_us, "base_us": d.base_us}
