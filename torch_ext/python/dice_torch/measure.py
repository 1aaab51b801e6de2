"""First-call measurements of the backend (issue 17 items 1 and 2): per
region, the graph compiled with that region given to dice against the graph
compiled without it (Inductor for the rest in both), then the whole-graph
guard (Inductor alone against dice + Inductor), on the first call's real
inputs. Decisions go to ``decisions.DecisionStore``; later calls run the
chosen graph only.

Timing protocol (``compare_us``; that of bench/kernelbench_bench.py's
bench_interleaved, which the benchmark uses for its own columns): on CUDA,
3 warm-up calls of each graph, then ``rounds`` rounds of ``reps`` pairs timed
round-robin (order alternated per pair), each call after a 256 MB write that
flushes L2 and bracketed by CUDA events, Python's garbage collector paused;
the two medians in µs over all rounds. A variant is kept only when it wins
in every round as well (``decisions.keep_dice`` per round): a difference that
drift or a background process made in one round does not decide. On CPU
(tests only) the same pairs by wall clock. ``_timer`` is the hook tests
replace with fake timings.

Session 9 (H200, ResNet101) timed the baseline alone and then the variant
alone: the two runs of the same baseline graph differed by 38% (5.5 vs
7.6 ms), enough to keep a slower dice graph. Pairs timed round-robin see
the same drift.
"""

from __future__ import annotations

import gc
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
#: measured by a later compile. Regions are measured in order of expected
#: saving (``expected_saving_us``), so the cap falls on those that would
#: save least. Environment: DICE_TORCH_MAX_REGION_TRIALS,
#: DICE_TORCH_MEASURE_BUDGET_S.
MAX_REGION_TRIALS = int(os.environ.get("DICE_TORCH_MAX_REGION_TRIALS", "8"))
MEASURE_BUDGET_S = float(os.environ.get("DICE_TORCH_MEASURE_BUDGET_S", "180"))
REPS = 20
ROUNDS = 2


def call(fn: Callable, args: Sequence[Any]) -> Any:
    """Calls a compiled graph (a backend's result: dynamo calls it with the
    inputs as positional arguments) with ``args``."""
    return fn(*args)


_flush: torch.Tensor | None = None


def _time_once(fn: Callable, args: Sequence[Any], cuda: bool) -> float:
    if not cuda:
        t0 = time.perf_counter()
        call(fn, args)
        return (time.perf_counter() - t0) * 1e6
    global _flush
    if _flush is None:
        _flush = torch.empty(256 * 1024 * 1024 // 4, dtype=torch.float32, device="cuda")
    _flush.zero_()
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    start.record()
    call(fn, args)
    end.record()
    end.synchronize()
    return start.elapsed_time(end) * 1000.0


@dataclass
class Comparison:
    """Two graphs timed side by side on the same inputs (µs, medians over
    every round), with the per-round medians kept for the every-round rule."""

    variant_us: float
    base_us: float
    rounds: list[tuple[float, float]] = field(default_factory=list)  #: (variant, base) median per round

    def variant_wins(self, min_gain: float) -> bool:
        """True when the variant beats the base by ``min_gain`` overall and in every round."""
        pairs = [(self.variant_us, self.base_us)] + list(self.rounds)
        return all(decisions.keep_dice(v, b, min_gain) for v, b in pairs)


def compare_us(fn: Callable, base_fn: Callable, args: Sequence[Any], reps: int = REPS,
               rounds: int = ROUNDS) -> Comparison:
    """``fn`` against ``base_fn`` on ``args``, round-robin (module docstring).

    Returns:
        A Comparison (µs). Raises whatever the graphs raise (the caller falls back)."""
    cuda = any(isinstance(a, torch.Tensor) and a.is_cuda for a in args)
    for f in (base_fn, fn):
        for _ in range(3):
            call(f, args)
    if cuda:
        torch.cuda.synchronize()
    samples: list[tuple[list[float], list[float]]] = []
    was_enabled = gc.isenabled()
    gc.disable()
    try:
        for _ in range(rounds):
            mine, base = [], []
            for k in range(reps):
                order = ((fn, mine), (base_fn, base)) if k % 2 == 0 else ((base_fn, base), (fn, mine))
                for f, out in order:
                    out.append(_time_once(f, args, cuda))
            samples.append((mine, base))
    finally:
        if was_enabled:
            gc.enable()
    med = statistics.median
    return Comparison(med([t for m, _ in samples for t in m]), med([t for _, b in samples for t in b]),
                      [(med(m), med(b)) for m, b in samples])


#: Hook: (label, fn, base_fn, args) -> Comparison. Tests replace it to inject
#: timings; the label is "region:<key>" or "guard".
_timer: Callable[[str, Callable, Callable, Sequence[Any]], Comparison] = \
    lambda label, fn, base_fn, args: compare_us(fn, base_fn, args)


@dataclass
class Region:
    """One distinct region key of a graph: its groups and FX member names."""

    key: str
    summary: str
    group_ids: list[int] = field(default_factory=list)
    members: list[str] = field(default_factory=list)  #: ATen FX node names (all groups of the key)


#: Fallback reasons that mean "tuning has not ended yet" (the C++ op's words).
_PENDING_REASONS = ("tuning in progress", "observe mode")

#: The fallback of the first call's prebuild pass (``_prebuild``): says
#: nothing about a group's tuning, so tuning_state and unservable_reason skip it.
PREBUILD_REASON = "collected for the prebuild"

#: The prebuild pass on (default) or off (``DICE_TORCH_PREBUILD=0``).
PREBUILD = os.environ.get("DICE_TORCH_PREBUILD", "1") != "0"


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
    reasons = [r for s in mine for r in s.get("fallback_reasons", {}) if not r.startswith(PREBUILD_REASON)]
    if reasons and all(r.startswith(("no winner", "tuning failed")) for r in reasons):
        return "no winner"
    if reasons and not any(r.startswith(_PENDING_REASONS + ("no winner", "tuning failed")) for r in reasons):
        return "unservable"
    return "pending"


def expected_saving_us(group_ids: Sequence[int], stats: Sequence[dict]) -> float:
    """What one call of a region's groups is expected to save, µs: the sum
    over its groups of the loaded winner's isolated baseline minus its time
    (``group_stats()``'s winner_baseline_us / winner_best_us, the tuner's
    medians; 0 for a group without a loaded winner). Only orders the
    in-context measurements; the decision is the measurement's."""
    ids = set(group_ids)
    return sum(max(0.0, float(s.get("winner_baseline_us", 0.0)) - float(s.get("winner_best_us", 0.0)))
               for s in stats if s.get("id") in ids and s.get("winner_best_us", 0.0) > 0)


def unservable_reason(group_ids: Sequence[int], stats: Sequence[dict]) -> str:
    """The first fallback reason of a region's groups ("" when none)."""
    for s in stats:
        if s.get("id") in set(group_ids):
            for r in s.get("fallback_reasons", {}):
                if not r.startswith(PREBUILD_REASON):
                    return r
    return ""


def _prebuild(fn: Callable, args: Sequence[Any]) -> dict | None:
    """The prebuild pass of a tune-sync first call: ``fn(*args)`` once with
    the C++ op's collection on (every group not yet resolved records its
    task and runs its fallback), then all their nvcc candidates built at
    once into the build cache (``torch.ops.dice.prebuild_finish``: JSON with
    tasks, distinct, built, cached, failed, seconds), so that the tune-sync
    call that follows verifies and times instead of waiting on one nvcc
    batch per group. Returns that report, or None when the pass is off
    (``DICE_TORCH_PREBUILD=0``). An exception in the forward ends collection
    and propagates (the caller falls back)."""
    if not PREBUILD:
        return None
    import json

    torch.ops.dice.prebuild_begin()
    try:
        call(fn, args)
    finally:
        report = json.loads(torch.ops.dice.prebuild_finish())
    if report.get("tasks"):
        log.info("dice: prebuild of %d task(s): %s distinct nvcc build(s), %s built, %s cached, %s failed in %.1f s%s",
                 report["tasks"], report.get("distinct", 0), report.get("built", 0), report.get("cached", 0),
                 report.get("failed", 0), report.get("seconds", 0.0),
                 f" ({report['error']})" if report.get("error") else "")
    return report


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
        fx_key: decisions.fx_graph_key of dynamo's graph (None: symbolic
            shapes); when every region is decided for good and the graph
            goes to Inductor alone, that is stored under it too, so that
            ``cache`` mode compiles the graph once, without partitioning.
    """

    def __init__(self, compile_variant: Callable[[frozenset, list], Callable], dice_fn: Callable,
                 regions: list[Region], decided: dict[str, decisions.RegionDecision],
                 store: decisions.DecisionStore, baseline: str, mode: str,
                 on_failure: Callable[[str, BaseException, list], Callable], report: Any,
                 fx_key: str | None = None):
        self._compile_variant, self._dice_fn = compile_variant, dice_fn
        self._regions, self._decided = regions, decided
        self._store, self._baseline, self._mode = store, baseline, mode
        self._on_failure, self._report = on_failure, report
        self._fx_key = fx_key
        self._fn: Callable | None = None

    def __call__(self, *args: Any) -> Any:
        if self._fn is not None:
            return self._fn(*args)
        args = list(args)
        try:
            if self._mode == "tune-sync":
                self._report.prebuild = _prebuild(self._dice_fn, args)
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
        order = sorted(self._regions, key=lambda r: -expected_saving_us(r.group_ids, stats))
        for r in order:
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
                c = _timer("region:" + r.key, fn, base_fn, args)
                d = decisions.decide_region(r.key, r.summary, c.variant_us, c.base_us,
                                            won=c.variant_wins(decisions.MIN_GAIN))
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
            c = _timer("guard", dice_fn, base_fn, args)
            g = decisions.decide_guard(c.variant_us, c.base_us, won=c.variant_wins(decisions.GUARD_MIN_GAIN))
            fn = dice_fn if g.choice == decisions.DICE else base_fn
            self._store.put_many([(gkey, {"choice": g.choice, "source": g.source, "dice_us": g.dice_us,
                                          "base_us": g.base_us, "kept": sorted(kept)})], self._baseline)
        self._report.guard = g
        if self._fx_key:
            # Decided for good only from stored decisions ("not measured" /
            # "not served" are not); otherwise "undecided" overwrites what an
            # earlier tune stored, so cache mode never serves a stale choice.
            final = {"measured", "no winner", "cache", decisions.ELEMENTWISE_SOURCE}
            good = all(self._decided[r.key].source in final for r in self._regions if r.key in self._decided)
            entry = decisions.fx_graph_entry(g.choice if good else "undecided", g.source, self._regions,
                                             self._decided, g.dice_us, g.base_us)
            self._store.put_many([(self._fx_key, entry)], self._baseline)
        log.info("dice: graph served by %s (guard: %s%s)", "dice + inductor" if g.choice == decisions.DICE
                 else "inductor alone", g.source, f", {g.dice_us:.1f} vs {g.base_us:.1f} µs"
                 if g.dice_us is not None and g.base_us is not None else "")
        if g.choice == decisions.DICE:
            logs.count("graphs_with_dice")
        return fn


def _fields(d: decisions.RegionDecision) -> dict:
    return {"choice": d.choice, "source": d.source, "summary": d.summary, "dice_us": d.dice_us, "base_us": d.base_us}
