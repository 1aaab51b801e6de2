"""CPU tests of issue 17 items 1 and 2 with fake timings: the per-region
decision and the whole-graph guard keep Inductor where Inductor is faster,
decisions are stored keyed by (region, baseline, torch version), and
``cache`` mode reads them without measuring."""

import json

import pytest
import torch
import torch.nn as nn

import dice_torch
from dice_torch import backend, decisions, logs, measure


def test_region_keeps_inductor_where_inductor_is_faster():
    d = decisions.decide_region("k", "softmax", dice_us=120.0, base_us=100.0)
    assert d.choice == "inductor" and d.source == "measured" and (d.dice_us, d.base_us) == (120.0, 100.0)
    assert decisions.decide_region("k", "softmax", 80.0, 100.0).choice == "dice"


def test_a_tie_or_a_gain_within_noise_keeps_inductor():
    assert decisions.decide_region("k", "s", 100.0, 100.0).choice == "inductor"
    assert decisions.decide_region("k", "s", 99.5, 100.0).choice == "inductor"  # < MIN_GAIN (1%)
    assert decisions.decide_region("k", "s", 98.0, 100.0).choice == "dice"


def test_guard_keeps_the_faster_whole_graph():
    assert decisions.decide_guard(dice_us=210.0, base_us=200.0).choice == "inductor"
    assert decisions.decide_guard(dice_us=150.0, base_us=200.0).choice == "dice"


def test_guard_asks_a_larger_margin_than_a_region():
    # 1.5% faster: enough for a region (MIN_GAIN 1%), not for the whole graph (GUARD_MIN_GAIN 2%).
    assert decisions.decide_region("k", "s", 98.5, 100.0).choice == "dice"
    assert decisions.decide_guard(98.5, 100.0).choice == "inductor"
    assert decisions.decide_guard(97.0, 100.0).choice == "dice"


def test_a_variant_must_win_in_every_round_not_only_overall():
    steady = measure.Comparison(90.0, 100.0, [(90.0, 100.0), (91.0, 100.0)])
    drifted = measure.Comparison(90.0, 100.0, [(80.0, 100.0), (101.0, 100.0)])  # one round lost
    assert steady.variant_wins(0.02) and not drifted.variant_wins(0.02)
    assert decisions.decide_guard(90.0, 100.0, won=drifted.variant_wins(0.02)).choice == "inductor"


def test_compare_times_both_graphs_round_robin_on_the_same_inputs():
    calls = []
    x = torch.ones(4)
    c = measure.compare_us(lambda t: calls.append("v") or t * 2, lambda t: calls.append("b") or t + 1, [x],
                           reps=4, rounds=2)
    assert len(c.rounds) == 2 and c.variant_us > 0 and c.base_us > 0
    timed = calls[6:]  # after 3 warm-up calls of each
    assert timed.count("v") == timed.count("b") == 8
    assert timed[:4] == ["v", "b", "b", "v"]  # the order alternates per pair


def test_median_of_samples_and_of_none():
    assert decisions.median_us([5.0, 1.0, 3.0]) == 3.0
    with pytest.raises(ValueError):
        decisions.median_us([])


def test_region_key_depends_on_ir_and_input_signature():
    ir = "dice-ir v1\ninput %0 f32 rank=2\n%1 = relu(%0)\noutput %1\n"
    a = decisions.region_key(ir, "f32[8, 16]/[16, 1]")
    assert a == decisions.region_key(ir, "f32[8, 16]/[16, 1]")
    assert a != decisions.region_key(ir, "f32[8, 32]/[32, 1]")
    assert a != decisions.region_key(ir.replace("relu", "exp"), "f32[8, 16]/[16, 1]")


def test_store_is_keyed_by_baseline_and_torch_version(tmp_path):
    store = decisions.DecisionStore(str(tmp_path))
    store.put_region(decisions.RegionDecision("r1", "gelu", "dice", "measured", 1.0, 2.0), "inductor")
    assert store.get("r1", "inductor")["choice"] == "dice"
    assert store.get("r1", "eager") is None
    assert store.get("r1", "inductor", version="0.0.0") is None
    # A second writer merges, the file stays valid JSON (written by rename).
    decisions.DecisionStore(str(tmp_path)).put_many([("r2", {"choice": "inductor"})], "inductor")
    data = json.loads((tmp_path / decisions.FILE_NAME).read_text())
    assert sorted(data["entries"]) == [f"r1|inductor|{torch.__version__}", f"r2|inductor|{torch.__version__}"]
    assert not [p for p in tmp_path.iterdir() if p.name.startswith(decisions.FILE_NAME + ".") and
                not p.name.endswith(".lock")]


def test_unreadable_store_reads_as_empty(tmp_path):
    (tmp_path / decisions.FILE_NAME).write_text("{not json")
    assert decisions.DecisionStore(str(tmp_path)).get("r1", "inductor") is None


def test_tuning_state_from_group_stats():
    stats = [{"id": 1, "hits": 3, "fallback_reasons": {}},
             {"id": 2, "hits": 0, "fallback_reasons": {"no winner (tuned: 6 tried)": 2}},
             {"id": 3, "hits": 0, "fallback_reasons": {"tuning in progress": 1}},
             {"id": 4, "hits": 0, "fallback_reasons": {"no GPU": 1}},
             {"id": 5, "hits": 0, "fallback_reasons": {"non-contiguous input 0": 1}},
             {"id": 6, "hits": 0, "fallback_reasons": {}}]
    assert measure.tuning_state([1], stats) == "winner"
    assert measure.tuning_state([2], stats) == "no winner"
    assert measure.tuning_state([3], stats) == "pending"
    assert measure.tuning_state([4], stats) == "unservable"
    assert measure.tuning_state([5], stats) == "unservable"
    assert measure.unservable_reason([5], stats) == "non-contiguous input 0"
    assert measure.tuning_state([6], stats) == "pending"
    assert measure.tuning_state([3, 5], stats) == "pending"  # one group still tuning
    assert measure.tuning_state([1, 2], stats) == "winner"


class Act(nn.Module):
    def forward(self, x, w):
        return torch.softmax((x @ w) * 0.5, dim=-1)


def _tune_with_fake_timings(monkeypatch, tmp_path, timings, rest="inductor"):
    """Compiles Act in tune-sync on CPU with measuring allowed and the given
    fake µs per label ("base", "region", "guard") and rest compiler; returns
    (report, labels timed)."""
    monkeypatch.setenv("DICE_TORCH_FORCE_PARTITION", "1")
    monkeypatch.setattr(backend, "_can_measure", lambda inputs: True)
    monkeypatch.setattr(measure, "tuning_state", lambda ids, stats: "winner")
    timed = []

    def timer(label, fn, base_fn, args):
        timed.append(label)
        measure.call(fn, args)  # the variant and its baseline really run
        measure.call(base_fn, args)
        mine, base = timings[label.split(":")[0]], timings["base"]
        return measure.Comparison(mine, base, [(mine, base)] * 2)

    monkeypatch.setattr(measure, "_timer", timer)
    x, w = torch.randn(8, 16), torch.randn(16, 32)
    compiled = torch.compile(Act(), backend="dice",
                             options={"mode": "tune-sync", "rest": rest, "cache_dir": str(tmp_path)})
    with torch.no_grad():
        got = compiled(x, w)
        again = compiled(x, w)
    torch.testing.assert_close(got, Act()(x, w))
    torch.testing.assert_close(again, Act()(x, w))
    return dice_torch.last_report(), timed


def test_tune_keeps_inductor_for_a_region_measured_slower_and_stores_it(monkeypatch, tmp_path):
    logs.reset_counters()
    rep, timed = _tune_with_fake_timings(monkeypatch, tmp_path, {"base": 100.0, "region": 150.0, "guard": 1.0})
    assert [(d.summary, d.choice, d.source) for d in rep.regions] == [("mul+softmax", "inductor", "measured")]
    assert rep.guard.choice == "inductor" and rep.guard.source == "nothing for dice"
    assert timed == ["region:" + rep.regions[0].key]  # no guard timing: nothing left for dice
    stored = decisions.DecisionStore(str(tmp_path)).get(rep.regions[0].key, "inductor")
    assert stored["choice"] == "inductor" and stored["dice_us"] == 150.0 and stored["base_us"] == 100.0

    # cache mode: the stored decision, never a measurement.
    torch._dynamo.reset()
    monkeypatch.setattr(measure, "_timer", lambda *a: pytest.fail("cache mode measured"))
    compiled = torch.compile(Act(), backend="dice",
                             options={"mode": "cache", "rest": "inductor", "cache_dir": str(tmp_path)})
    x, w = torch.randn(8, 16), torch.randn(16, 32)
    with torch.no_grad():
        torch.testing.assert_close(compiled(x, w), Act()(x, w))
    rep = dice_torch.last_report()
    assert [(d.choice, d.source) for d in rep.regions] == [("inductor", "cache")]
    assert rep.groups == [] and rep.candidates == []  # decided for Inductor alone: not even partitioned


def test_tune_keeps_dice_for_a_faster_region_when_the_guard_agrees(monkeypatch, tmp_path):
    rep, timed = _tune_with_fake_timings(monkeypatch, tmp_path, {"base": 100.0, "region": 50.0, "guard": 60.0})
    assert [(d.choice, d.source) for d in rep.regions] == [("dice", "measured")]
    assert rep.guard.choice == "dice" and (rep.guard.dice_us, rep.guard.base_us) == (60.0, 100.0)
    assert timed[-1] == "guard"  # the baseline timed again, round-robin with the guard's variant


def test_guard_keeps_inductor_alone_when_dice_plus_inductor_is_slower(monkeypatch, tmp_path):
    rep, _ = _tune_with_fake_timings(monkeypatch, tmp_path, {"base": 100.0, "region": 50.0, "guard": 130.0})
    assert rep.regions[0].choice == "dice" and rep.guard.choice == "inductor"
    gkey = decisions.graph_key([rep.regions[0].key])
    assert decisions.DecisionStore(str(tmp_path)).get(gkey, "inductor")["choice"] == "inductor"


def test_regions_over_the_trial_cap_stay_with_inductor_unrecorded(monkeypatch, tmp_path):
    monkeypatch.setattr(measure, "MAX_REGION_TRIALS", 0)
    rep, timed = _tune_with_fake_timings(monkeypatch, tmp_path, {"base": 100.0, "region": 50.0, "guard": 60.0})
    assert [(d.choice, d.source.split(":")[0]) for d in rep.regions] == [("inductor", "not measured")]
    assert timed == [] and rep.guard.choice == "inductor"
    assert decisions.DecisionStore(str(tmp_path)).get(rep.regions[0].key, "inductor") is None  # decided later


def test_expected_saving_sums_the_loaded_winners_baseline_minus_best():
    stats = [{"id": 1, "winner_baseline_us": 30.0, "winner_best_us": 10.0},
             {"id": 2, "winner_baseline_us": 8.0, "winner_best_us": 6.0},
             {"id": 3, "winner_baseline_us": 0.0, "winner_best_us": 0.0},  # no winner loaded
             {"id": 4, "winner_baseline_us": 5.0, "winner_best_us": 9.0}]  # slower in isolation: saves nothing
    assert measure.expected_saving_us([1, 2], stats) == 22.0
    assert measure.expected_saving_us([3, 4], stats) == 0.0
    assert measure.expected_saving_us([9], stats) == 0.0


def test_the_trial_cap_falls_on_the_region_expected_to_save_least(monkeypatch, tmp_path):
    """Two regions with winners and room for one trial: the one whose winner
    saves more per call (group_stats) is measured, the other stays "not measured"."""
    monkeypatch.setattr(measure, "MAX_REGION_TRIALS", 1)
    monkeypatch.setattr(backend, "group_stats", lambda: [
        {"id": 1, "hits": 1, "winner_baseline_us": 12.0, "winner_best_us": 10.0},
        {"id": 2, "hits": 1, "winner_baseline_us": 90.0, "winner_best_us": 30.0}])
    timed = []

    def timer(label, fn, base_fn, args):
        timed.append(label)
        return measure.Comparison(50.0, 100.0, [(50.0, 100.0)] * 2)

    monkeypatch.setattr(measure, "_timer", timer)
    regions = [measure.Region("small", "add", [1]), measure.Region("big", "mul+softmax", [2])]
    report = backend.CompileReport(mode="tune", rest="inductor")
    graph = measure.TunedGraph(lambda keys, args: (lambda *a: 0), lambda *a: 0, regions, {},
                               decisions.DecisionStore(str(tmp_path)), "inductor", "tune",
                               lambda stage, e, args: pytest.fail(f"fell back at {stage}: {e}"), report)
    graph(torch.zeros(1))
    assert timed == ["region:big", "guard"]
    by_key = {d.key: (d.choice, d.source.split(":")[0]) for d in report.regions}
    assert by_key == {"big": ("dice", "measured"), "small": ("inductor", "not measured")}
    assert [d.key for d in report.regions] == ["small", "big"]  # the report keeps the graph's order


def _spy_plain_inductor(monkeypatch):
    """Counts pipeline.plain_inductor calls (the real one still compiles)."""
    from dice_torch import pipeline

    calls = []
    real = pipeline.plain_inductor

    def spy(gm, example_inputs, config_patches=None):
        calls.append(len(example_inputs))
        return real(gm, example_inputs, config_patches)

    monkeypatch.setattr(pipeline, "plain_inductor", spy)
    return calls


def test_the_guards_inductor_choice_is_compiled_once_at_compile_time(monkeypatch, tmp_path):
    calls = _spy_plain_inductor(monkeypatch)
    rep, _ = _tune_with_fake_timings(monkeypatch, tmp_path, {"base": 100.0, "region": 50.0, "guard": 130.0})
    assert rep.guard.choice == "inductor"
    # One compile, in the backend call (dynamo's context), shared by the
    # measurements, the guard and the served graph; none at the first call.
    assert calls == [2]


def test_cache_mode_with_nothing_for_dice_serves_plain_inductor(monkeypatch, tmp_path):
    _tune_with_fake_timings(monkeypatch, tmp_path, {"base": 100.0, "region": 150.0, "guard": 1.0})
    torch._dynamo.reset()
    calls = _spy_plain_inductor(monkeypatch)
    compiled = torch.compile(Act(), backend="dice",
                             options={"mode": "cache", "rest": "inductor", "cache_dir": str(tmp_path)})
    x, w = torch.randn(8, 16), torch.randn(16, 32)
    with torch.no_grad():
        torch.testing.assert_close(compiled(x, w), Act()(x, w))
    assert calls == [2]  # the stored "inductor" decision is served by Inductor's own compile
    assert dice_torch.last_report().groups == []


def test_cache_mode_compiles_a_graph_decided_for_inductor_once_without_partitioning(monkeypatch, tmp_path):
    from dice_torch import pipeline

    _tune_with_fake_timings(monkeypatch, tmp_path, {"base": 100.0, "region": 150.0, "guard": 1.0})
    torch._dynamo.reset()
    calls = _spy_plain_inductor(monkeypatch)
    monkeypatch.setattr(pipeline, "compile_inductor", lambda *a, **k: pytest.fail("partitioned in cache mode"))
    compiled = torch.compile(Act(), backend="dice",
                             options={"mode": "cache", "rest": "inductor", "cache_dir": str(tmp_path)})
    x, w = torch.randn(8, 16), torch.randn(16, 32)
    with torch.no_grad():
        torch.testing.assert_close(compiled(x, w), Act()(x, w))
    assert calls == [2]
    rep = dice_torch.last_report()
    assert rep.guard.choice == "inductor" and rep.guard.source == "cache"


def test_a_graph_with_a_region_not_yet_measured_is_not_decided_for_good(monkeypatch, tmp_path):
    monkeypatch.setattr(measure, "MAX_REGION_TRIALS", 0)  # the region stays "not measured"
    _tune_with_fake_timings(monkeypatch, tmp_path, {"base": 100.0, "region": 50.0, "guard": 60.0})
    store = decisions.DecisionStore(str(tmp_path))
    fx = [k for k in json.loads((tmp_path / decisions.FILE_NAME).read_text())["entries"] if k.startswith("fx:")]
    assert len(fx) == 1 and store.get(fx[0].split("|")[0], "inductor")["choice"] == "undecided"


def test_elementwise_only_names_regions_without_a_contraction_or_reduction():
    assert decisions.elementwise_only("sub+mul+mul+add+relu")
    assert decisions.elementwise_only("cast+add+sqrt+reciprocal+mul")
    assert not decisions.elementwise_only("linear+relu")
    assert not decisions.elementwise_only("norm+clamp")
    assert not decisions.elementwise_only("mul+softmax")
    assert not decisions.elementwise_only("add+layer_norm")
    assert not decisions.elementwise_only("mul+some_future_op")  # unknown names: not elementwise
    assert not decisions.elementwise_only("")


def test_fx_graph_key_changes_when_elementwise_regions_are_measured(monkeypatch):
    # An "inductor alone" stored while the policy left elementwise regions to
    # Inductor must not short-cut a compile that measures them.
    gm = torch.fx.symbolic_trace(nn.ReLU())
    x = torch.randn(2, 3)
    monkeypatch.delenv(decisions.ELEMENTWISE_ENV, raising=False)
    default = decisions.fx_graph_key(gm, [x])
    assert decisions.fx_graph_key(gm, [x]) == default
    monkeypatch.setenv(decisions.ELEMENTWISE_ENV, "1")
    assert decisions.fx_graph_key(gm, [x]) != default


def _spy_compile_fx(monkeypatch):
    """Records, for every compile_fx call, (config_patches passed, whether
    max_autotune is in effect: passed in, or already patched by an outer
    compile_fx, which applies its patches and calls itself again without
    them); the real compile_fx still runs."""
    import torch._inductor.compile_fx as cfx

    patches, real = [], cfx.compile_fx

    def spy(*args, config_patches=None, **kwargs):
        on = bool((config_patches or {}).get("max_autotune") or torch._inductor.config.max_autotune)
        patches.append((config_patches, on))
        return real(*args, config_patches=config_patches, **kwargs)

    monkeypatch.setattr(cfx, "compile_fx", spy)
    return patches


def test_max_autotune_rest_compiles_every_inductor_graph_with_max_autotune_and_stores_apart(monkeypatch, tmp_path):
    from dice_torch import pipeline

    want = torch._inductor.list_mode_options("max-autotune-no-cudagraphs")
    assert pipeline.rest_config("max-autotune") == want and want["max_autotune"] is True
    assert pipeline.rest_config("inductor") is None
    with pytest.raises(ValueError, match="not compiled by Inductor"):
        pipeline.rest_config("eager")
    patches = _spy_compile_fx(monkeypatch)
    rep, timed = _tune_with_fake_timings(monkeypatch, tmp_path, {"base": 100.0, "region": 150.0, "guard": 1.0},
                                         rest="max-autotune")
    assert rep.rest == "max-autotune"
    assert [(d.choice, d.source) for d in rep.regions] == [("inductor", "measured")]
    # The partitioned graph, the region's variant and the baseline: each
    # compiled with max-autotune's patches, and no compile without them.
    assert sum(1 for p, _ in patches if p == want) >= 3, patches
    assert all(on for _, on in patches), patches
    store = decisions.DecisionStore(str(tmp_path))
    assert store.get(rep.regions[0].key, "max-autotune")["choice"] == "inductor"
    assert store.get(rep.regions[0].key, "inductor") is None  # measured against another baseline: not reused


def test_max_autotune_rest_without_a_gpu_hands_the_graph_over_with_max_autotune(monkeypatch):
    patches = _spy_compile_fx(monkeypatch)
    monkeypatch.delenv("DICE_TORCH_FORCE_PARTITION", raising=False)
    torch._dynamo.reset()
    compiled = torch.compile(Act(), backend="dice", options={"mode": "cache", "rest": "max-autotune"})
    x, w = torch.randn(8, 16), torch.randn(16, 32)
    with torch.no_grad():
        torch.testing.assert_close(compiled(x, w), Act()(x, w))
    rep = dice_torch.last_report()
    assert rep.skipped and "no GPU" in rep.skipped and rep.groups == []
    assert [p for p, _ in patches if p is not None] == [torch._inductor.list_mode_options("max-autotune-no-cudagraphs")]
    assert all(on for _, on in patches), patches
