"""GEMM groups in the FX frontend (issue 18 item 1): F.linear, as aot_autograd
lowers it (addmm(b, x, t(w)) / mm(x, t(w)); Inductor's graphs spell t as
permute), becomes the IR's ``linear`` op and takes its elementwise epilogue
(fusion_policy.h rule 4, the rule the TorchScript pass uses). CPU: every
group runs its ATen fallback (DICE_TORCH_FORCE_PARTITION=1), so outputs must
match eager and the groups must be the expected ones."""

import pytest
import torch
import torch.nn as nn
import torch.nn.functional as F

import dice_torch

EAGER = {"mode": "cache", "rest": "eager"}
INDUCTOR = {"mode": "cache", "rest": "inductor"}


@pytest.fixture(autouse=True)
def _force_partition(monkeypatch):
    monkeypatch.setenv("DICE_TORCH_FORCE_PARTITION", "1")
    monkeypatch.delenv("DICE_GEMM_GROUPS", raising=False)


def compiled_report(model, *inputs, options=EAGER):
    compiled = torch.compile(model, backend="dice", options=options)
    with torch.no_grad():
        got = compiled(*inputs)
        want = model(*inputs)
    torch.testing.assert_close(got, want)
    rep = dice_torch.last_report()
    assert rep.skipped is None and rep.fallback is None, (rep.skipped, rep.fallback)
    return rep


class LinearMulLeakyRelu(nn.Module):  # KernelBench level2/12's shape of graph
    def __init__(self, k=32, n=64, bias=True):
        super().__init__()
        self.fc = nn.Linear(k, n, bias=bias)

    def forward(self, x):
        return F.leaky_relu(self.fc(x) * 2.0, 0.1)


@pytest.mark.parametrize("options", [EAGER, INDUCTOR], ids=["rest=eager", "rest=inductor"])
def test_linear_and_its_epilogue_form_one_gemm_group_reading_the_weight_itself(options):
    torch.manual_seed(0)
    rep = compiled_report(LinearMulLeakyRelu().eval(), torch.randn(8, 32), options=options)
    assert [g.torch_ops for g in rep.groups] == [["aten.addmm.default", "aten.mul.Tensor", "aten.leaky_relu.default"]]
    g = rep.groups[0]
    assert g.summary == "linear+mul+leaky_relu" and g.num_inputs == 3 and g.num_outputs == 1
    # x [8, 32], w [64, 32] as the parameter is stored (not its transpose), b [64]
    assert "input %1 f32 rank=2" in g.ir and "linear(%0, %1, %2)" in g.ir, g.ir


def test_linear_without_bias_takes_a_row_vector_add_and_a_residual_add():
    class M(nn.Module):
        def __init__(self):
            super().__init__()
            self.fc = nn.Linear(32, 32, bias=False)
            self.b = nn.Parameter(torch.randn(32))

        def forward(self, x):
            return torch.relu(self.fc(x) + self.b) + x

    torch.manual_seed(0)
    rep = compiled_report(M().eval(), torch.randn(8, 32))
    # the row vector is the group's one extra tensor: the residual add (a second one) starts a group of its own
    assert [g.summary for g in rep.groups] == ["linear+add+relu", "add"], [g.summary for g in rep.groups]
    assert rep.groups[0].torch_ops[0] == "aten.mm.default"


def test_gemm_result_that_is_also_a_graph_output_keeps_its_epilogue_apart():
    class M(nn.Module):
        def __init__(self):
            super().__init__()
            self.fc = nn.Linear(16, 16)

        def forward(self, x):
            y = self.fc(x)
            return y, torch.tanh(y)

    torch.manual_seed(0)
    rep = compiled_report(M().eval(), torch.randn(4, 16))
    assert [g.summary for g in rep.groups] == ["linear", "tanh"]


def test_a_matmul_that_is_no_linear_stays_with_pytorch():
    class M(nn.Module):
        def forward(self, x, y):
            return torch.relu(x @ y)  # y is no transposed weight

    torch.manual_seed(0)
    rep = compiled_report(M(), torch.randn(8, 16), torch.randn(16, 4))
    assert [g.summary for g in rep.groups] == ["relu"]
    assert any(l.op == "aten.mm.default" and l.reason == "not a fusible op" for l in rep.left_out), rep.left_out


def test_bf16_linear_forms_a_group_with_its_epilogue_by_default(monkeypatch):
    torch.manual_seed(0)
    model, x = LinearMulLeakyRelu().eval().to(torch.bfloat16), torch.randn(8, 32, dtype=torch.bfloat16)
    rep = compiled_report(model, x)  # DICE_GEMM_GROUPS unset: "epilogue" in the FX backend
    assert [g.summary for g in rep.groups] == ["linear+mul+leaky_relu"]
    assert "input %1 bf16 rank=2" in rep.groups[0].ir
    assert not [l for l in rep.left_out if l.op == "aten.addmm.default"], rep.left_out
    torch._dynamo.reset()
    monkeypatch.setenv("DICE_GEMM_GROUPS", "f32")  # float32 only: the epilogue is a group of its own
    rep = compiled_report(model, x)
    assert [g.summary for g in rep.groups] == ["mul+leaky_relu"]
    reasons = [l.reason for l in rep.left_out if l.op == "aten.addmm.default"]
    assert reasons and "GEMM groups take float32 only" in reasons[0], rep.left_out


class LinearSum(nn.Module):  # a linear with no elementwise op after it
    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(32, 16)

    def forward(self, x):
        return self.fc(x).sum(-1)


@pytest.mark.parametrize("shape", [(8, 32), (2, 4, 32)], ids=["2-d", "N-d"])
def test_a_lone_bf16_linear_stays_with_pytorch_unless_gemm_groups_take_all(monkeypatch, shape):
    torch.manual_seed(0)
    model, x = LinearSum().eval().to(torch.bfloat16), torch.randn(*shape, dtype=torch.bfloat16)
    rep = compiled_report(model, x)
    assert [g.summary for g in rep.groups] == ["sum"]
    lone = [l for l in rep.left_out if "only with an epilogue op" in l.reason]
    assert [l.op for l in lone] == ["aten.addmm.default"], rep.left_out  # named at the matmul, not its view
    torch._dynamo.reset()
    monkeypatch.setenv("DICE_GEMM_GROUPS", "all")
    rep = compiled_report(model, x)
    assert [g.summary for g in rep.groups] == ["linear", "sum"]
    assert not [l for l in rep.left_out if "only with an epilogue op" in l.reason], rep.left_out


def test_a_lone_float32_linear_still_forms_a_group():
    torch.manual_seed(0)
    rep = compiled_report(LinearSum().eval(), torch.randn(8, 32))
    assert [g.summary for g in rep.groups] == ["linear", "sum"]


def test_gemm_groups_off_leaves_every_matmul_to_pytorch(monkeypatch):
    monkeypatch.setenv("DICE_GEMM_GROUPS", "0")
    torch.manual_seed(0)
    rep = compiled_report(LinearMulLeakyRelu().eval(), torch.randn(8, 32))
    assert [g.summary for g in rep.groups] == ["mul+leaky_relu"]


def test_gemm_group_gate_op_rejects_an_unknown_dtype_id():
    dice_torch.load_library()
    assert torch.ops.dice.gemm_group_gate(0) == ""
    assert torch.ops.dice.gemm_group_lone_reason(0) == ""  # float32 forms a group alone
    assert "only with an epilogue op" in torch.ops.dice.gemm_group_lone_reason(2)
    with pytest.raises(RuntimeError, match="unknown dtype id 7"):
        torch.ops.dice.gemm_group_gate(7)
    with pytest.raises(RuntimeError, match="unknown dtype id -1"):
        torch.ops.dice.gemm_group_lone_reason(-1)


class Mlp3d(nn.Module):
    def __init__(self, d=32, h=64):
        super().__init__()
        self.fc1, self.fc2 = nn.Linear(d, h), nn.Linear(h, d)

    def forward(self, x):
        return self.fc2(F.gelu(self.fc1(x), approximate="tanh")) + x


@pytest.mark.parametrize("options", [EAGER, INDUCTOR], ids=["rest=eager", "rest=inductor"])
def test_linear_on_a_3d_input_is_one_gemm_group_over_the_unflattened_input(options):
    torch.manual_seed(0)
    rep = compiled_report(Mlp3d().eval(), torch.randn(4, 16, 32), options=options)
    # view(addmm(view(x), t(w))) stands as one linear on x [4, 16, 32]; fc2 takes the residual add
    assert [g.summary for g in rep.groups] == ["linear+gelu", "linear+add"], [g.summary for g in rep.groups]
    assert "input %0 f32 rank=3" in rep.groups[0].ir, rep.groups[0].ir
    assert not any(l.reason == "linear taken at its output view" for l in rep.left_out)
    assert not any(l.op in ("aten.addmm.default", "aten.mm.default") for l in rep.left_out), rep.left_out


def test_3d_linear_with_gemm_groups_off_reports_the_matmul_not_the_view(monkeypatch):
    monkeypatch.setenv("DICE_GEMM_GROUPS", "0")
    torch.manual_seed(0)
    rep = compiled_report(Mlp3d().eval(), torch.randn(4, 16, 32))
    assert [g.summary for g in rep.groups] == ["gelu", "add"], [g.summary for g in rep.groups]
    assert any(l.op == "aten.addmm.default" and l.reason == "not a fusible op" for l in rep.left_out), rep.left_out


class Swish(nn.Module):  # KernelBench level2/59: the epilogue reads the GEMM result twice
    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(32, 64)

    def forward(self, x):
        y = self.fc(x)
        return y * torch.sigmoid(y) * 2.0


class SigmoidScaleResidual(nn.Module):  # level2/70
    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(32, 64)

    def forward(self, x):
        y = self.fc(x)
        return torch.sigmoid(y) * 2.0 + y


@pytest.mark.parametrize("model,summary", [(Swish, "linear+sigmoid+mul+mul"),
                                           (SigmoidScaleResidual, "linear+sigmoid+mul+add")], ids=["swish", "residual"])
def test_an_epilogue_that_reads_the_gemm_result_twice_is_one_gemm_group(model, summary):
    torch.manual_seed(0)
    rep = compiled_report(model().eval(), torch.randn(8, 32), options=INDUCTOR)
    assert [g.summary for g in rep.groups] == [summary]
