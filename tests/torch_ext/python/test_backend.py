"""CPU tests of the torch.compile backend "dice" (torch_ext/python/dice_torch).

Without a GPU the backend hands graphs to the rest compiler unchanged; these
tests set the test switch DICE_TORCH_FORCE_PARTITION=1 so the partitioner
runs anyway. Then every fusion group falls back to ATen: outputs must equal
eager, the groups must still be formed from the expected ATen ops, and each
call must be counted as a fallback with the reason "no GPU"."""

import logging

import pytest
import torch
import torch.nn as nn
import torch.nn.functional as F

import dice_torch
from dice_torch import decisions

EAGER = {"mode": "cache", "rest": "eager"}


@pytest.fixture(autouse=True)
def _force_partition(monkeypatch):
    monkeypatch.setenv("DICE_TORCH_FORCE_PARTITION", "1")


def compile_and_run(model, *inputs, options=EAGER):
    compiled = torch.compile(model, backend="dice", options=options)
    with torch.no_grad():
        got = compiled(*inputs)
        want = model(*inputs)
    return got, want


def stats_of(group):
    (s,) = [s for s in dice_torch.group_stats() if s["id"] == group.id]
    return s


def assert_fell_back_without_gpu(report):
    assert report.groups, "no fusion group formed"
    for g in report.groups:
        s = stats_of(g)
        assert s["calls"] >= 1 and s["hits"] == 0 and s["fallbacks"] == s["calls"], s
        assert "no GPU" in s["fallback_reasons"], s["fallback_reasons"]


class Mlp(nn.Module):
    def __init__(self, d=32, h=64):
        super().__init__()
        self.fc1, self.fc2 = nn.Linear(d, h), nn.Linear(h, d)

    def forward(self, x):
        return self.fc2(F.gelu(self.fc1(x), approximate="tanh"))


def test_mlp_gelu_epilogue_group_with_gemm_groups_off_matches_eager_and_falls_back_without_gpu(monkeypatch):
    monkeypatch.setenv("DICE_GEMM_GROUPS", "0")  # the matmuls stay with PyTorch (test_gemm_groups.py: on)
    torch.manual_seed(0)
    model, x = Mlp().eval(), torch.randn(4, 16, 32)
    got, want = compile_and_run(model, x)
    torch.testing.assert_close(got, want, rtol=0, atol=0)
    rep = dice_torch.last_report()
    assert rep.skipped is None
    assert [g.torch_ops for g in rep.groups] == [["aten.gelu.default"]]
    assert "gelu(%0) i=1" in rep.groups[0].ir  # tanh approximation
    left = {l.op for l in rep.left_out}
    assert "aten.addmm.default" in left  # the matmuls stay with PyTorch
    assert_fell_back_without_gpu(rep)


def test_softmax_with_scale_is_one_group():
    torch.manual_seed(0)
    x = torch.randn(8, 128)

    class M(nn.Module):
        def forward(self, x):
            return torch.softmax(x * 0.125, dim=-1)

    got, want = compile_and_run(M(), x)
    torch.testing.assert_close(got, want, rtol=0, atol=0)
    rep = dice_torch.last_report()
    assert len(rep.groups) == 1
    assert rep.groups[0].torch_ops == ["aten.mul.Tensor", "aten._softmax.default"]
    assert "softmax(%2) dims=[1]" in rep.groups[0].ir
    assert_fell_back_without_gpu(rep)


def test_layer_norm_with_residual_is_one_group():
    torch.manual_seed(0)

    class M(nn.Module):
        def __init__(self):
            super().__init__()
            self.ln = nn.LayerNorm(64)

        def forward(self, x, r):
            return self.ln(x + r)

    m = M().eval()
    with torch.no_grad():
        m.ln.weight.uniform_(0.5, 1.5)
        m.ln.bias.uniform_(-0.5, 0.5)
    x, r = torch.randn(2, 10, 64), torch.randn(2, 10, 64)
    got, want = compile_and_run(m, x, r)
    torch.testing.assert_close(got, want)
    rep = dice_torch.last_report()
    assert len(rep.groups) == 1
    g = rep.groups[0]
    assert g.torch_ops == ["aten.add.Tensor", "aten.native_layer_norm.default"]
    assert "layer_norm(" in g.ir and g.num_inputs == 4 and g.num_outputs == 1  # x, r, weight, bias
    assert_fell_back_without_gpu(rep)


def test_reductions_over_different_axes_form_separate_groups():
    # KernelBench level2/75's epilogue: group_norm, then amin over channels,
    # then a bias: one kernel cannot reduce over both axes sets, so two groups.
    # amax then mean over the same dim (level2/80) stay one group.
    class M(nn.Module):
        def __init__(self):
            super().__init__()
            self.gn = nn.GroupNorm(4, 32)

        def forward(self, x, b):
            y = torch.amin(self.gn(x), dim=1, keepdim=True) + b
            u = torch.amax(x, dim=1, keepdim=True)
            return y, torch.mean(u * 2.0, dim=1, keepdim=True)

    m = M().eval()
    x, b = torch.randn(8, 32), torch.randn(8, 1)
    got, want = compile_and_run(m, x, b)
    torch.testing.assert_close(got, want)
    rep = dice_torch.last_report()
    ops = [g.torch_ops for g in rep.groups]
    gn = [o for o in ops if any("group_norm" in t for t in o)]
    assert len(gn) == 1 and not any("amin" in t for t in gn[0]), ops
    assert ["aten.amin.default", "aten.add.Tensor"] in ops, ops
    assert ["aten.amax.default", "aten.mul.Tensor", "aten.mean.dim"] in ops, ops
    assert_fell_back_without_gpu(rep)


def test_elementwise_chain_with_broadcasting_and_scalars():
    torch.manual_seed(0)

    class M(nn.Module):
        def forward(self, x, b, y):
            return torch.clamp((x + b) * 0.5 - y.exp() / 3, min=-1.0) ** 2 + 1

    x, b, y = torch.randn(4, 1, 8), torch.randn(8), torch.randn(4, 6, 8)
    got, want = compile_and_run(M(), x, b, y)
    torch.testing.assert_close(got, want, rtol=0, atol=0)
    assert got.shape == (4, 6, 8)
    rep = dice_torch.last_report()
    assert len(rep.groups) == 1
    g = rep.groups[0]
    assert g.num_inputs == 3 and g.num_outputs == 1
    for op in ("aten.add.Tensor", "aten.mul.Tensor", "aten.exp.default", "aten.div.Tensor",
               "aten.sub.Tensor", "aten.clamp.default", "aten.pow.Tensor_Scalar"):
        assert op in g.torch_ops, (op, g.torch_ops)
    assert "const(0.5)" in g.ir and "rank=1" in g.ir  # weak scalar; the broadcast bias
    assert_fell_back_without_gpu(rep)


def test_unsupported_ops_stay_with_pytorch_and_say_why():
    torch.manual_seed(0)

    class M(nn.Module):
        def forward(self, x, idx):
            y = torch.relu(x) * 2
            return torch.argmax(y, dim=-1) + idx * 3, y.double().sum(-1)

    x, idx = torch.randn(4, 8), torch.arange(4)
    got, want = compile_and_run(M(), x, idx)
    for a, b in zip(got, want):
        torch.testing.assert_close(a, b, rtol=0, atol=0)
    rep = dice_torch.last_report()
    assert [g.torch_ops for g in rep.groups] == [["aten.relu.default", "aten.mul.Tensor"]]
    reasons = {(l.op, l.reason) for l in rep.left_out}
    assert ("aten.argmax.default", "not a fusible op") in reasons
    assert any(op == "aten.mul.Tensor" and "int64" in why for op, why in reasons), reasons
    assert any(op == "aten._to_copy.default" and "float64" in why for op, why in reasons), reasons


def test_graph_needing_autograd_is_left_to_default_path_and_says_so(caplog):
    torch.manual_seed(0)
    model, x = Mlp(), torch.randn(4, 32)  # parameters require grad, grad mode on
    compiled = torch.compile(model, backend="dice", options=EAGER)
    with caplog.at_level(logging.WARNING, logger="dice_torch"):
        got = compiled(x)
    torch.testing.assert_close(got, model(x))
    rep = dice_torch.last_report()
    assert rep.groups == [] and "needs autograd" in rep.skipped
    assert any("needs autograd" in r.getMessage() for r in caplog.records)
    got.sum().backward()  # still trains: the default path kept autograd
    assert model.fc1.weight.grad is not None


def test_new_batch_size_is_a_new_task_key():
    torch.manual_seed(0)

    class M(nn.Module):
        def forward(self, x):
            return torch.log_softmax(torch.tanh(x), dim=-1)

    compiled = torch.compile(M(), backend="dice", options=EAGER)
    with torch.no_grad():
        for batch in (2, 3, 5):
            x = torch.randn(batch, 16)
            torch.testing.assert_close(compiled(x), torch.log_softmax(torch.tanh(x), -1), rtol=0, atol=0)
    ids = {g.id for r in dice_torch.reports() for g in r.groups}
    keys = set()
    for s in dice_torch.group_stats():
        if s["id"] in ids:
            keys.update(s["task_keys"])
    assert len(keys) == 3, keys


def test_optimize_observe_mode_times_the_fallback():
    torch.manual_seed(0)
    model, x = Mlp(), torch.randn(3, 32)
    fast = dice_torch.optimize(model, [x], mode="observe", rest="eager")
    torch.testing.assert_close(fast(x), model.eval()(x).detach(), rtol=0, atol=0)
    assert fast.report is not None
    assert [g.summary for g in fast.report.groups] == ["linear+gelu", "linear"]  # GEMM groups (fc1 + its epilogue, fc2)
    for g in fast.report.groups:
        s = stats_of(g)
        assert s["fallback_reasons"].get("observe mode", 0) >= 2 and s["timed_calls"] >= 2 and s["total_us"] > 0


def test_mode_off_forms_no_groups():
    got, want = compile_and_run(Mlp().eval(), torch.randn(2, 32), options={"mode": "off", "rest": "eager"})
    torch.testing.assert_close(got, want)
    rep = dice_torch.last_report()
    assert rep.groups == [] and "mode off" in rep.skipped


def test_bad_options_are_rejected_with_the_accepted_values():
    with pytest.raises(ValueError, match="off\\|observe\\|cache\\|tune\\|tune-sync"):
        dice_torch.optimize(Mlp(), [torch.randn(2, 32)], mode="fast")
    with pytest.raises(ValueError, match="inductor\\|max-autotune\\|eager"):
        dice_torch.optimize(Mlp(), [torch.randn(2, 32)], rest="tvm")


def test_inductor_rest_keeps_softmax_whole_for_dice():
    torch.manual_seed(0)

    class M(nn.Module):
        def forward(self, x, w):
            return torch.softmax((x @ w) * 0.5, dim=-1)

    x, w = torch.randn(8, 16), torch.randn(16, 32)
    got, want = compile_and_run(M(), x, w, options={"mode": "cache", "rest": "inductor"})
    torch.testing.assert_close(got, want)
    rep = dice_torch.last_report()
    assert rep.rest == "inductor"
    assert [g.torch_ops for g in rep.groups] == [["aten.mul.Tensor", "aten._softmax.default"]]
    assert_fell_back_without_gpu(rep)


def test_missing_library_leaves_the_model_running_without_dice(monkeypatch, caplog):
    def missing():
        raise FileNotFoundError("dice_torch: libdice_torch_ext.so not found (looked at: /nowhere)")

    monkeypatch.setattr(dice_torch._library, "load", missing)
    model, x = Mlp().eval(), torch.randn(2, 32)
    with caplog.at_level(logging.WARNING, logger="dice_torch"):
        got, want = compile_and_run(model, x)
    torch.testing.assert_close(got, want)
    rep = dice_torch.last_report()
    assert rep.groups == [] and "library unavailable" in rep.skipped and "/nowhere" in rep.skipped
    assert any("library unavailable" in r.getMessage() for r in caplog.records)


def test_group_whose_ir_the_runtime_rejects_stays_with_pytorch(monkeypatch):
    from dice_torch import capture

    monkeypatch.setattr(capture.IrBuilder, "text", lambda self, outputs: "dice-ir v1\nnot an op line\n")
    model, x = Mlp().eval(), torch.randn(2, 32)
    got, want = compile_and_run(model, x)
    torch.testing.assert_close(got, want, rtol=0, atol=0)
    rep = dice_torch.last_report()
    assert rep.groups == []
    assert any(l.op == "aten.gelu.default" and "group not formed" in l.reason and "IR line 2" in l.reason
               for l in rep.left_out), rep.left_out


def test_group_never_wraps_around_an_op_left_to_pytorch():
    class M(nn.Module):
        def forward(self, x, w):
            a = torch.relu(x)
            return a + a @ w  # relu -> mm -> add: one group would have to contain the mm

    x, w = torch.randn(8, 8), torch.randn(8, 8)
    got, want = compile_and_run(M(), x, w)
    torch.testing.assert_close(got, want, rtol=0, atol=0)
    rep = dice_torch.last_report()
    assert [g.torch_ops for g in rep.groups] == [["aten.relu.default"], ["aten.add.Tensor"]]


def test_value_used_inside_and_outside_is_a_second_output():
    class M(nn.Module):
        def forward(self, x):
            y = torch.sigmoid(x)
            return y * 2, torch.argmax(y, -1)

    x = torch.randn(5, 9)
    got, want = compile_and_run(M(), x)
    for a, b in zip(got, want):
        torch.testing.assert_close(a, b, rtol=0, atol=0)
    (g,) = dice_torch.last_report().groups
    assert g.torch_ops == ["aten.sigmoid.default", "aten.mul.Tensor"] and g.num_outputs == 2


def test_a_library_path_that_is_set_is_the_only_one_looked_at(monkeypatch, tmp_path):
    from dice_torch import _library

    missing = tmp_path / "nowhere.so"
    monkeypatch.setenv("DICE_TORCH_LIB", str(missing))
    assert _library.candidate_paths() == [missing]
    monkeypatch.setattr(_library, "_loaded", None)  # as in a fresh process
    with pytest.raises(FileNotFoundError, match=f"DICE_TORCH_LIB names {missing}, which is no file"):
        _library.load()
    monkeypatch.delenv("DICE_TORCH_LIB")
    monkeypatch.setenv("DICE_BUILD_DIR", str(tmp_path))
    assert _library.candidate_paths() == [tmp_path / "torch_ext" / "libdice_torch_ext.so"]


class ScaleReluThenSoftmax(nn.Module):
    """Two regions: x * 0.5 + 1 -> relu (elementwise only) and softmax(y * 2) (a reduction)."""

    def forward(self, x, y):
        return torch.relu(x * 0.5 + 1), torch.softmax(y * 2.0, dim=-1)


def test_inductor_rest_leaves_an_elementwise_only_region_to_inductor_and_says_why():
    torch.manual_seed(0)
    x, y = torch.randn(8, 16), torch.randn(8, 32)
    got, want = compile_and_run(ScaleReluThenSoftmax(), x, y, options={"mode": "cache", "rest": "inductor"})
    torch.testing.assert_close(got, want)
    rep = dice_torch.last_report()
    by_summary = {d.summary: d for d in rep.regions}
    assert set(by_summary) == {"mul+add+relu", "mul+softmax"}, by_summary
    elementwise = by_summary["mul+add+relu"]
    assert elementwise.choice == "inductor" and elementwise.source == decisions.ELEMENTWISE_SOURCE
    assert by_summary["mul+softmax"].choice == "dice"  # undecided, under the CPU test switch
    # Only the softmax region became a run_group call; the relu chain is Inductor's.
    assert [g.summary for g in rep.groups] == ["mul+softmax"]
    assert_fell_back_without_gpu(rep)


def test_elementwise_regions_env_measures_them_as_before(monkeypatch):
    monkeypatch.setenv("DICE_TORCH_ELEMENTWISE_REGIONS", "1")
    torch.manual_seed(0)
    x, y = torch.randn(8, 16), torch.randn(8, 32)
    got, want = compile_and_run(ScaleReluThenSoftmax(), x, y, options={"mode": "cache", "rest": "inductor"})
    torch.testing.assert_close(got, want)
    rep = dice_torch.last_report()
    assert sorted(g.summary for g in rep.groups) == ["mul+add+relu", "mul+softmax"]
    assert all(d.source != decisions.ELEMENTWISE_SOURCE for d in rep.regions)


def test_eager_rest_keeps_elementwise_groups_for_dice():
    torch.manual_seed(0)
    x, y = torch.randn(8, 16), torch.randn(8, 32)
    got, want = compile_and_run(ScaleReluThenSoftmax(), x, y)
    torch.testing.assert_close(got, want)
    assert sorted(g.summary for g in dice_torch.last_report().groups) == ["mul+add+relu", "mul+softmax"]
