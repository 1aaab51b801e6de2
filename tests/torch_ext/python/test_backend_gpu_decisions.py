"""GPU tests of issue 17 (ctest PythonBackendGpuTests, label gpu): the region
decision keeps Inductor where Inductor is faster, the guard serves the faster
graph, and a ResNet18-sized model (batchnorm, casts) compiles and matches
eager. They assert decisions, never a time. Skipped without CUDA."""

import pytest
import torch
import torch.nn as nn

import dice_torch
from conftest import NEEDS_CUTLASS
from dice_torch import decisions, measure, replay

pytestmark = [pytest.mark.gpu,
              pytest.mark.skipif(not torch.cuda.is_available(), reason="no CUDA device (torch.cuda.is_available() is False)")]


class Act(nn.Module):
    def forward(self, x, w):
        return torch.softmax((x @ w) * 0.5, dim=-1)


def _tune(tmp_path):
    x, w = torch.randn(512, 256, device="cuda"), torch.randn(256, 1024, device="cuda")
    compiled = torch.compile(Act(), backend="dice",
                             options={"mode": "tune-sync", "rest": "inductor", "cache_dir": str(tmp_path)})
    with torch.no_grad():
        got = compiled(x, w)
        again = compiled(x, w)
    torch.testing.assert_close(got, Act()(x, w), rtol=1e-3, atol=1e-4)
    torch.testing.assert_close(again, Act()(x, w), rtol=1e-3, atol=1e-4)
    return dice_torch.last_report()


def test_region_decision_keeps_inductor_where_inductor_is_faster(monkeypatch, tmp_path):
    # Inductor made faster by the timer: the decision, not the clock, is under test.
    monkeypatch.setattr(measure, "tuning_state", lambda ids, stats: "winner")

    def timer(label, fn, base_fn, args):
        measure.call(fn, args)
        measure.call(base_fn, args)
        return measure.Comparison(200.0, 100.0, [(200.0, 100.0)])

    monkeypatch.setattr(measure, "_timer", timer)
    rep = _tune(tmp_path)
    assert rep.fallback is None, rep.fallback
    assert rep.regions and all(d.choice == "inductor" and d.source == "measured" for d in rep.regions), rep.regions
    assert rep.guard.choice == "inductor"
    for d in rep.regions:
        assert decisions.DecisionStore(str(tmp_path)).get(d.key, "inductor")["choice"] == "inductor"


def test_real_timings_give_consistent_decisions(tmp_path):
    rep = _tune(tmp_path)
    assert rep.fallback is None, rep.fallback
    for d in rep.regions:
        if d.source == "measured":
            assert (d.choice == "dice") == decisions.keep_dice(d.dice_us, d.base_us), d
        else:
            assert d.choice == "inductor", d  # no winner / pending: Inductor keeps it
    if rep.guard is not None and rep.guard.dice_us is not None:
        assert (rep.guard.choice == "dice") == decisions.keep_dice(rep.guard.dice_us, rep.guard.base_us)


class Basic(nn.Module):
    def __init__(self, cin, cout, stride):
        super().__init__()
        self.c1, self.b1 = nn.Conv2d(cin, cout, 3, stride, 1, bias=False), nn.BatchNorm2d(cout)
        self.c2, self.b2 = nn.Conv2d(cout, cout, 3, 1, 1, bias=False), nn.BatchNorm2d(cout)
        self.down = None
        if stride != 1 or cin != cout:
            self.down = nn.Sequential(nn.Conv2d(cin, cout, 1, stride, bias=False), nn.BatchNorm2d(cout))

    def forward(self, x):
        y = self.b2(self.c2(torch.relu(self.b1(self.c1(x)))))
        return torch.relu(y + (x if self.down is None else self.down(x)))


class ResNet18(nn.Module):
    """torchvision's ResNet18 layout (BasicBlock x [2, 2, 2, 2]), written out here."""

    def __init__(self):
        super().__init__()
        self.stem = nn.Sequential(nn.Conv2d(3, 64, 7, 2, 3, bias=False), nn.BatchNorm2d(64), nn.ReLU(),
                                  nn.MaxPool2d(3, 2, 1))
        blocks, cin = [], 64
        for cout, stride in ((64, 1), (128, 2), (256, 2), (512, 2)):
            blocks += [Basic(cin, cout, stride), Basic(cout, cout, 1)]
            cin = cout
        self.blocks = nn.Sequential(*blocks)
        self.fc = nn.Linear(512, 1000)

    def forward(self, x):
        y = self.blocks(self.stem(x.to(torch.float16).float()))
        return self.fc(torch.flatten(nn.functional.adaptive_avg_pool2d(y, 1), 1))


def test_resnet18_sized_model_compiles_and_matches_eager(tmp_path):
    torch.manual_seed(0)
    model = ResNet18().cuda().eval()
    x = torch.randn(8, 3, 224, 224, device="cuda")
    compiled = torch.compile(model, backend="dice", options={"mode": "cache", "rest": "inductor",
                                                             "cache_dir": str(tmp_path)})
    with torch.no_grad():
        got, want = compiled(x), model(x)
    torch.testing.assert_close(got, want, rtol=1e-2, atol=1e-2)
    rep = dice_torch.last_report()
    assert rep.fallback is None, rep.fallback


class TwoLinears(nn.Module):
    def __init__(self):
        super().__init__()
        self.a, self.b = nn.Linear(256, 512), nn.Linear(512, 256)

    def forward(self, x):
        return torch.relu(self.b(torch.relu(self.a(x))))


@NEEDS_CUTLASS
def test_first_call_prebuilds_every_linear_groups_nvcc_candidates_at_once(tmp_path):
    # Two GEMM groups (linear + relu, two shapes of one alignment class): the
    # tune-sync first call's prebuild pass records both tasks and builds their
    # shape-generic CUTLASS sources once each, before either group tunes.
    torch.manual_seed(0)
    model = TwoLinears().cuda().eval()
    x = torch.randn(1024, 256, device="cuda")
    compiled = torch.compile(model, backend="dice",
                             options={"mode": "tune-sync", "rest": "inductor", "cache_dir": str(tmp_path)})
    with torch.no_grad():
        got = compiled(x)
        torch.testing.assert_close(got, model(x), rtol=1e-4, atol=1e-4)
    pre = dice_torch.last_report().prebuild
    assert pre is not None and pre["tasks"] == 2 and "error" not in pre, pre
    assert 0 < pre["distinct"] < pre["requested"], pre  # the two groups share sources
    assert pre["failed"] == 0 and pre["built"] + pre["cached"] == pre["distinct"], pre


class SmallConvNet(nn.Module):
    """Launch-bound at batch 2: three conv + batchnorm + ReLU stages, a pool and a linear."""

    def __init__(self):
        super().__init__()
        layers, cin = [], 3
        for cout in (16, 32, 64):
            layers += [nn.Conv2d(cin, cout, 3, 2, 1, bias=False), nn.BatchNorm2d(cout), nn.ReLU()]
            cin = cout
        self.body = nn.Sequential(*layers)
        self.fc = nn.Linear(64, 10)

    def forward(self, x):
        return self.fc(torch.flatten(nn.functional.adaptive_avg_pool2d(self.body(x), 1), 1))


def _replay_measured_faster(monkeypatch):
    """Replay made to win by the timer; both callables still really run."""
    def timer(label, fn, base_fn, args):
        measure.call(fn, args)
        measure.call(base_fn, args)
        return measure.Comparison(10.0, 100.0, [(10.0, 100.0)] * 2)

    monkeypatch.setattr(replay, "_timer", timer)


def test_replayed_graph_copies_new_inputs_in_and_returns_fresh_outputs(monkeypatch, tmp_path):
    # Replay made to win by the timer (the capture and the replays are real):
    # every call's output matches eager for its own input, earlier outputs are
    # not overwritten by later replays, and a parameter moved to another
    # address makes the call run the graph directly, still correct.
    _replay_measured_faster(monkeypatch)
    torch.manual_seed(0)
    net = SmallConvNet().cuda().eval()
    compiled = torch.compile(net, backend="dice", options={"mode": "tune-sync", "cache_dir": str(tmp_path)})
    xs = [torch.randn(2, 3, 32, 32, device="cuda") for _ in range(4)]
    with torch.no_grad():
        outs = [compiled(x) for x in xs]
        rep = dice_torch.last_report()
        assert rep.replay is not None and rep.replay.choice == replay.REPLAY, rep.replay
        for x, y in zip(xs, outs):
            torch.testing.assert_close(y, net(x), rtol=1e-3, atol=1e-3)
        net.fc.weight.data = net.fc.weight.data.clone()
        torch.testing.assert_close(compiled(xs[0]), net(xs[0]), rtol=1e-3, atol=1e-3)


def test_replay_decision_with_real_timings_is_consistent(tmp_path):
    torch.manual_seed(0)
    net = SmallConvNet().cuda().eval()
    compiled = torch.compile(net, backend="dice", options={"mode": "tune-sync", "cache_dir": str(tmp_path)})
    x = torch.randn(2, 3, 32, 32, device="cuda")
    with torch.no_grad():
        got = compiled(x)
        again = compiled(x)
    torch.testing.assert_close(got, net(x), rtol=1e-3, atol=1e-3)
    torch.testing.assert_close(again, net(x), rtol=1e-3, atol=1e-3)
    d = dice_torch.last_report().replay
    assert d is not None and d.source == "measured", d
    if d.choice == replay.REPLAY:
        assert decisions.keep_dice(d.replay_us, d.direct_us, decisions.GUARD_MIN_GAIN), d


def test_a_served_torchscript_model_is_replayed_with_fresh_inputs_and_outputs(monkeypatch, tmp_path):
    # dice_torch.replayed on a scripted, frozen model (what `dice tune --save`
    # writes), replay made to win by the timer: real capture of the
    # TorchScript executor's kernels, outputs right for every input.
    _replay_measured_faster(monkeypatch)
    torch.manual_seed(0)
    net = SmallConvNet().cuda().eval()
    xs = [torch.randn(2, 3, 32, 32, device="cuda") for _ in range(4)]
    with torch.no_grad():
        scripted = torch.jit.freeze(torch.jit.trace(net, (xs[0],)).eval())
        for _ in range(3):  # the profiling executor optimizes on the first calls
            scripted(xs[0])
        served = dice_torch.replayed(scripted, mode="tune-sync", cache_dir=str(tmp_path))
        outs = [served(x) for x in xs]
        assert served.decision.choice == replay.REPLAY, served.decision
        for x, y in zip(xs, outs):
            torch.testing.assert_close(y, net(x), rtol=1e-3, atol=1e-3)
