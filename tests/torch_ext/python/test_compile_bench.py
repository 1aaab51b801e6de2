"""CPU tests of bench/torch_compile_bench.py's helpers (issue 17 item 5):
which workloads get the float64 second opinion, the workload lists, and
kernelbench_bench's attribution of a speedup."""

import os
import sys
import time
from pathlib import Path

import pytest
import torch
import torch.nn as nn

ROOT = Path(__file__).resolve().parents[3]
sys.path.insert(0, str(ROOT / "bench"))

import torch_compile_bench as bench  # noqa: E402


def test_conv_matmul_and_reductions_are_order_free_elementwise_ops_are_not():
    conv = nn.Sequential(nn.Conv2d(3, 4, 3), nn.ReLU())
    assert "convolution" in bench.order_free_ops(conv, [torch.randn(1, 3, 8, 8)])
    lin = nn.Linear(8, 8)
    assert bench.order_free_ops(lin, [torch.randn(2, 8)]) & {"addmm", "mm", "linear"}
    assert "sum" in bench.order_free_ops(lambda x: x.sum(-1), [torch.randn(2, 8)])
    assert bench.order_free_ops(nn.ReLU(), [torch.randn(2, 8)]) == set()


def test_elementwise_workload_gets_no_second_opinion():
    model, x = nn.ReLU(), torch.randn(4, 8)
    ref = model(x)
    ok, detail = bench.check_correct(model, [x], ref + 1e-2, ref, bench.order_free_ops(model, [x]))
    assert not ok and "float64" not in detail, detail


def test_conv_workload_as_wrong_as_eager_passes_by_float64():
    torch.manual_seed(0)
    model, x = nn.Conv2d(3, 4, 3).double(), torch.randn(1, 3, 16, 16, dtype=torch.float64)
    # Eager in float32 is the reference; "ours" equals float64 rounded to float32
    # plus eager's own error: outside the strict tolerance of a shifted reference,
    # inside twice eager's error against float64.
    m32 = nn.Conv2d(3, 4, 3)
    m32.load_state_dict({k: v.float() for k, v in model.state_dict().items()})
    x32 = x.float()
    ref = m32(x32)
    ours = model(x).float()
    skew = ref + (ours - ref).sign() * 2e-4  # a reference that drifted the other way
    ok, detail = bench.check_correct(m32, [x32], ours, skew, {"convolution"})
    assert ok and "float64 second opinion" in detail, detail
    ok_strict, _ = bench.kb.outputs_match(ours, skew)
    assert not ok_strict


def test_level2_list_is_the_issues_twenty_in_order():
    kb = ROOT / ".deps" / "kernelbench"
    if not (kb / "level2").is_dir():
        pytest.skip("no KernelBench checkout at .deps/kernelbench")
    paths = bench.workload_list("level2-20", str(kb))
    assert [int(Path(p).name.split("_")[0]) for p in paths] == list(bench.LEVEL2_20)
    with pytest.raises(ValueError, match="level3-dev\\|level2-20"):
        bench.workload_list("level9", str(kb))


def test_attribution_splits_eager_over_dice_into_capture_decisions_and_winners():
    # eager 100 µs, capture alone 80, with the tune's decisions (SDPA) 50, served 40.
    a = bench.kb.attribution(100.0, 80.0, 40.0, 50.0)
    assert a["capture_speedup"] == pytest.approx(1.25)
    assert a["decisions_speedup"] == pytest.approx(1.6)
    assert a["winners_speedup"] == pytest.approx(1.25)
    assert a["capture_speedup"] * a["decisions_speedup"] * a["winners_speedup"] == pytest.approx(100.0 / 40.0)
    # Without a decided time the winners get everything past capture; unmeasured times give None.
    b = bench.kb.attribution(100.0, 80.0, 40.0)
    assert b["decisions_speedup"] is None and b["winners_speedup"] == pytest.approx(2.0)
    assert bench.kb.attribution(100.0, None, 40.0)["capture_speedup"] is None


class _Counter(nn.Module):
    """Keeps its last output as state, as KernelBench's VanillaRNN does."""

    def __init__(self):
        super().__init__()
        self.state = torch.zeros(4)

    def forward(self, x):
        self.state = self.state + x
        return self.state


def test_each_variant_starts_from_the_models_state_and_a_repeat_failure_stays_its_own(monkeypatch):
    calls = {"flaky": 0}

    def make_variant(name, model, args):
        if name != "flaky":
            return model

        def flaky(*xs):  # right on its first call, raises on any later one
            calls["flaky"] += 1
            if calls["flaky"] > 1:
                raise RuntimeError("overwritten by a subsequent run")
            return model(*xs)
        return flaky

    monkeypatch.setattr(bench, "make_variant", make_variant)
    args = type("Args", (), {"variants": ["eager", "flaky", "other"], "reps": 3, "device": "cpu",
                             "kernel_sum": False})()
    rec = bench.run_workload("counter", _Counter(), [torch.ones(4)], args)
    v = rec["variants"]
    # Shared state would have made the second and third variants' first outputs 2 and 3.
    assert all(v[n]["correct"] for n in ("eager", "flaky", "other")), v
    assert "repeat call" in v["flaky"]["error"] and "us" not in v["flaky"]
    assert "error" not in v["eager"] and v["eager"]["us"] > 0 and v["other"]["us"] > 0


def test_a_capped_first_call_is_stopped_recorded_and_the_other_variants_still_run(monkeypatch):
    def make_variant(name, model, args):
        if name != "slow":
            return model

        def slow(*xs):  # a compile that takes long: Python keeps running, as in autotuning
            t0 = time.time()
            while time.time() - t0 < 5.0:
                time.sleep(0.01)
            return model(*xs)
        return slow

    monkeypatch.setattr(bench, "make_variant", make_variant)
    args = type("Args", (), {"variants": ["eager", "slow", "other"], "reps": 3, "device": "cpu",
                             "kernel_sum": False, "first_call_cap_s": 0.5, "cap_variants": ["slow"]})()
    t0 = time.time()
    rec = bench.run_workload("counter", _Counter(), [torch.ones(4)], args)
    assert time.time() - t0 < 4.0
    v = rec["variants"]
    assert v["slow"]["first_call_capped"] and 0.5 <= v["slow"]["first_call_s"] < 4.0, v["slow"]
    assert "stopped after 0.5 s" in v["slow"]["error"], v["slow"]
    assert "us" not in v["slow"] and v["eager"]["us"] > 0 and v["other"]["us"] > 0
    assert "capped" not in v["other"]
    table = bench.summarize([rec], args.variants)
    assert "> 1 s compile" in table or "> 0 s compile" in table, table
    # Not named in --cap-variants: no cap.
    assert bench.first_call_cap_s("other", args) == 0.0 and bench.first_call_cap_s("slow", args) == 0.5


class _InductorLikeError(Exception):
    """Stands in for torch._inductor's InductorError: the original kept in inner_exception."""

    def __init__(self, inner):
        super().__init__(f"{type(inner).__name__}: {inner}")
        self.inner_exception = inner


def test_a_cap_swallowed_once_and_reraised_wrapped_is_still_recorded_as_capped(monkeypatch):
    # Inductor's autotuning catches an exception inside one choice's benchmark
    # and goes on, and re-raises what ends the compile as InductorError. The
    # 2026-12-07 AlexNet row was recorded as an error "InductorError:
    # FirstCallCapped" with no first-call time; it must read as capped.
    def make_variant(name, model, args):
        if name != "slow":
            return model

        def slow(*xs):
            swallowed = 0
            t0 = time.time()
            while time.time() - t0 < 8.0:
                try:
                    time.sleep(0.01)
                except bench.FirstCallCapped:  # one benchmark's failure, skipped
                    swallowed += 1
                    if swallowed == 1:
                        continue
                    try:
                        raise
                    except bench.FirstCallCapped as inner:
                        raise _InductorLikeError(inner) from None
            return model(*xs)
        return slow

    monkeypatch.setattr(bench, "make_variant", make_variant)
    args = type("Args", (), {"variants": ["eager", "slow"], "reps": 3, "device": "cpu",
                             "kernel_sum": False, "first_call_cap_s": 0.5, "cap_variants": ["slow"]})()
    t0 = time.time()
    rec = bench.run_workload("counter", _Counter(), [torch.ones(4)], args)
    assert time.time() - t0 < 6.0
    v = rec["variants"]
    assert v["slow"].get("first_call_capped") and 1.4 <= v["slow"]["first_call_s"] < 6.0, v["slow"]
    assert "stopped after 0.5 s" in v["slow"]["error"], v["slow"]
    assert v["eager"]["us"] > 0
    # Any other error stays the variant's own error.
    assert not bench.stopped_by_cap(_InductorLikeError(ValueError("x")))
    assert bench.stopped_by_cap(_InductorLikeError(bench.FirstCallCapped()))


def test_a_row_names_its_tree_when_given_and_only_then():
    args = bench.parse_args(["--gpt2", "--tree", "07ae950"])
    rec = {"task": "t"}
    bench.stamp_row(rec, time.time() - 2.0, args)
    assert rec["tree"] == "07ae950" and 1.5 < rec["wall_s"] < 60.0
    # the host's load average rides along (a contention hint), as os reports it
    assert rec["host_load1"] == pytest.approx(os.getloadavg()[0], abs=4.0) and rec["host_load1"] >= 0.0
    rec = {"task": "t"}
    bench.stamp_row(rec, time.time(), bench.parse_args(["--gpt2", "--tree", ""]))
    assert "tree" not in rec and rec["wall_s"] >= 0.0


def test_a_task_cast_to_bf16_converts_floating_tensors_only():
    import kernelbench_bench as kb

    class M(nn.Module):
        def __init__(self):
            super().__init__()
            self.lin = nn.Linear(4, 3)
            self.register_buffer("steps", torch.arange(3))
            self.state = torch.zeros(4)  # a plain attribute, as level3/33_VanillaRNN's hidden state

        def forward(self, x, idx):
            return self.lin(x)[:, idx]

    model, inputs = kb.cast_task(M(), [torch.randn(2, 4), torch.tensor([0, 2])], torch.bfloat16)
    assert model.lin.weight.dtype == torch.bfloat16 and model.lin.bias.dtype == torch.bfloat16
    assert model.steps.dtype == torch.int64
    assert model.state.dtype == torch.bfloat16
    assert inputs[0].dtype == torch.bfloat16 and inputs[1].dtype == torch.int64
    assert model(*inputs).dtype == torch.bfloat16
    same, xs = kb.cast_task(model, inputs, None)
    assert same is model and xs is inputs
    assert set(kb.DTYPE_NAMES) == {"f32", "bf16", "f16"}
