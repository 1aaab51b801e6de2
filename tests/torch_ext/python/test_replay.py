"""CPU tests of the backend's CUDA-graph replay tactic (dice_torch/replay.py)
with fake replayers and fake timings: which graphs are never replayed, the
measured decision is stored and kept only on a win, cache mode applies the
stored decision without measuring, and a failing capture leaves the graph
as compiled. The capture itself runs in test_backend_gpu_decisions.py."""

import pytest
import torch
import torch.nn as nn

import dice_torch
from dice_torch import backend, logs, measure, replay


def _dynamo_graph(fn, *inputs):
    """(gm, example_inputs) dynamo hands to a backend for ``fn``."""
    seen = []

    def grab(gm, example_inputs):
        seen.append((gm, list(example_inputs)))
        return gm.forward

    torch._dynamo.reset()
    with torch.no_grad():
        torch.compile(fn, backend=grab)(*inputs)
    return seen[0]


def test_graphs_that_write_or_return_an_input_are_never_replayed():
    x = torch.randn(4, 8)
    gm, _ = _dynamo_graph(lambda t: t.mul_(2) + 1, x.clone())
    assert "writes input" in replay.graph_unsafe_reason(gm)
    gm, _ = _dynamo_graph(lambda t: torch.nn.functional.relu(t.view(32), inplace=True) * 2, x.clone())
    assert "writes input" in replay.graph_unsafe_reason(gm)
    gm, _ = _dynamo_graph(lambda t: (t.transpose(0, 1), t * 2), x)
    assert "returns input" in replay.graph_unsafe_reason(gm)
    gm, _ = _dynamo_graph(lambda t: torch.relu(t * 2 + 1).sum(-1), x)
    assert replay.graph_unsafe_reason(gm) is None


def test_inputs_must_be_cuda_tensors_with_static_sizes():
    assert replay.inputs_unsafe_reason([torch.randn(2)]) == "an input not on a CUDA device"
    assert replay.inputs_unsafe_reason([3]) == "a non-tensor input"


def test_parameters_and_buffers_are_the_static_inputs():
    m = nn.Sequential(nn.Linear(8, 4), nn.BatchNorm1d(4)).eval()
    _, ex = _dynamo_graph(m, torch.randn(2, 8))
    static = replay.static_indices(ex)
    params = {p.data_ptr() for p in m.parameters()} | {b.data_ptr() for b in m.buffers() if b.dim() > 0}
    assert {ex[i].data_ptr() for i in static} >= params
    assert len(ex) - len(static) == 1  # only the user's input is copied in per call


def test_the_cudagraphs_option_is_checked():
    assert backend.resolve_options({"cudagraphs": "off"})["cudagraphs"] == "off"
    assert backend.resolve_options({})["cudagraphs"] == "auto"
    with pytest.raises(ValueError, match="cudagraphs"):
        backend.resolve_options({"cudagraphs": "always"})


class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.lin = nn.Linear(16, 16)

    def forward(self, x):
        return torch.softmax(self.lin(x) * 0.5, dim=-1)


class FakeReplayer:
    """Stands in for replay.Replayer on CPU: runs the graph, counts calls."""

    made = 0

    def __init__(self, fn, args, static):
        FakeReplayer.made += 1
        self.fn, self.calls = fn, 0

    def __call__(self, *args):
        self.calls += 1
        return self.fn(*args)


def _compile(monkeypatch, tmp_path, mode, replay_us, direct_us=100.0, cudagraphs=None):
    """Net through the backend on CPU with replay allowed (the CUDA-input
    check lifted), fake replayer and timer; returns (outputs of 3 calls, report, timed labels)."""
    monkeypatch.setenv("DICE_TORCH_FORCE_PARTITION", "1")
    monkeypatch.setattr(backend, "_can_replay", lambda inputs: True)
    monkeypatch.setattr(backend, "_can_measure", lambda inputs: True)
    monkeypatch.setattr(replay, "inputs_unsafe_reason", lambda inputs: None)
    monkeypatch.setattr(replay, "_make_replayer", FakeReplayer)
    monkeypatch.setattr(measure, "_timer", lambda label, fn, base_fn, args: measure.Comparison(1.0, 1.0))
    timed = []

    def timer(label, fn, base_fn, args):
        timed.append(label)
        return measure.Comparison(replay_us, direct_us, [(replay_us, direct_us)] * 2)

    monkeypatch.setattr(replay, "_timer", timer)
    torch._dynamo.reset()
    torch.manual_seed(0)
    net = Net().eval()
    opts = {"mode": mode, "rest": "inductor", "cache_dir": str(tmp_path)}
    if cudagraphs:
        opts["cudagraphs"] = cudagraphs
    compiled = torch.compile(net, backend="dice", options=opts)
    xs = [torch.randn(4, 16) for _ in range(3)]
    with torch.no_grad():
        outs = [compiled(x) for x in xs]
        for x, y in zip(xs, outs):
            torch.testing.assert_close(y, net(x))
    return dice_torch.last_report(), timed


def test_replay_is_kept_when_measured_faster_and_cache_mode_reuses_it(monkeypatch, tmp_path):
    logs.reset_counters()
    FakeReplayer.made = 0
    rep, timed = _compile(monkeypatch, tmp_path, "tune-sync", replay_us=40.0)
    assert timed == ["replay"]
    assert (rep.replay.choice, rep.replay.source) == (replay.REPLAY, "measured")
    assert (rep.replay.replay_us, rep.replay.direct_us) == (40.0, 100.0)
    assert logs.counters().get("graphs_replayed") == 1
    # cache mode: the stored decision, no measurement.
    rep, timed = _compile(monkeypatch, tmp_path, "cache", replay_us=999.0)
    assert timed == [] and (rep.replay.choice, rep.replay.source) == (replay.REPLAY, "cache")
    assert FakeReplayer.made == 2


def test_replay_measured_slower_is_not_kept_and_stays_off_in_cache_mode(monkeypatch, tmp_path):
    rep, timed = _compile(monkeypatch, tmp_path, "tune-sync", replay_us=99.0)  # < GUARD_MIN_GAIN faster
    assert timed == ["replay"] and rep.replay.choice == replay.DIRECT
    rep, timed = _compile(monkeypatch, tmp_path, "cache", replay_us=1.0)
    assert timed == [] and (rep.replay.choice, rep.replay.source) == (replay.DIRECT, "cache")


def test_cache_mode_without_a_tune_never_replays(monkeypatch, tmp_path):
    rep, timed = _compile(monkeypatch, tmp_path, "cache", replay_us=1.0)
    assert timed == [] and rep.replay.choice == replay.DIRECT and "no tune" in rep.replay.source


def test_a_failing_capture_serves_the_graph_as_compiled(monkeypatch, tmp_path):
    def broken(fn, args, static):
        raise RuntimeError("operation not permitted when stream is capturing")

    monkeypatch.setattr(replay, "_make_replayer", broken)
    logs.reset_counters()
    monkeypatch.setenv("DICE_TORCH_FORCE_PARTITION", "1")
    monkeypatch.setattr(backend, "_can_replay", lambda inputs: True)
    monkeypatch.setattr(replay, "inputs_unsafe_reason", lambda inputs: None)
    torch._dynamo.reset()
    net = Net().eval()
    compiled = torch.compile(net, backend="dice", options={"mode": "tune-sync", "rest": "inductor",
                                                            "cache_dir": str(tmp_path)})
    monkeypatch.setattr(backend, "_can_measure", lambda inputs: True)
    monkeypatch.setattr(measure, "_timer", lambda label, fn, base_fn, args: measure.Comparison(1.0, 1.0))
    x = torch.randn(4, 16)
    with torch.no_grad():
        torch.testing.assert_close(compiled(x), net(x))
        torch.testing.assert_close(compiled(x), net(x))
    rep = dice_torch.last_report()
    assert rep.replay.choice == replay.DIRECT and "stream is capturing" in rep.replay.source
    assert logs.counters().get("replay_failed") == 1


def test_cudagraphs_off_and_cpu_graphs_are_left_alone(monkeypatch, tmp_path):
    rep, timed = _compile(monkeypatch, tmp_path, "tune-sync", replay_us=1.0, cudagraphs="off")
    assert timed == [] and rep.replay.source == "off (cudagraphs option)"
    monkeypatch.undo()
    torch._dynamo.reset()
    compiled = torch.compile(Net().eval(), backend="dice", options={"mode": "tune-sync", "cache_dir": str(tmp_path)})
    with torch.no_grad():
        compiled(torch.randn(4, 16))
    assert dice_torch.last_report().replay is None  # no GPU: the graph went to Inductor unchanged


def test_a_call_that_writes_or_returns_an_input_is_caught():
    x = torch.randn(4)
    before = [x.clone()]
    assert replay.call_unsafe_reason(before, [x], x * 2) is None
    x.add_(1)
    assert replay.call_unsafe_reason(before, [x], x * 2) == "the call wrote input 0"
    assert replay.call_unsafe_reason([x.clone()], [x], (x.view(2, 2), 3)) == "an output shares an input's storage"


def _served(monkeypatch, tmp_path, mode, replay_us, fn=None):
    """A scripted model through dice_torch.replayed on CPU (CUDA-input check
    lifted, fake replayer and timer); returns (the wrapper, timed labels)."""
    monkeypatch.setattr(replay, "inputs_unsafe_reason", lambda inputs: None)
    monkeypatch.setattr(replay, "_make_replayer", FakeReplayer)
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    timed = []

    def timer(label, f, base_fn, args):
        timed.append(label)
        return measure.Comparison(replay_us, 100.0, [(replay_us, 100.0)] * 2)

    monkeypatch.setattr(replay, "_timer", timer)
    module = fn or torch.jit.script(Net().eval())
    served = dice_torch.replayed(module, mode=mode, cache_dir=str(tmp_path))
    x = torch.randn(4, 16)
    with torch.no_grad():
        torch.testing.assert_close(served(x), module(x))
        torch.testing.assert_close(served(x), module(x))
    return served, timed


def test_a_served_model_keeps_replay_where_measured_faster_and_reuses_the_decision(monkeypatch, tmp_path):
    served, timed = _served(monkeypatch, tmp_path, "tune-sync", replay_us=50.0)
    assert timed == ["replay"] and (served.decision.choice, served.decision.source) == (replay.REPLAY, "measured")
    served, timed = _served(monkeypatch, tmp_path, "cache", replay_us=500.0)
    assert timed == [] and (served.decision.choice, served.decision.source) == (replay.REPLAY, "cache")
    # Another input shape is another decision: not tuned, so direct.
    module = torch.jit.script(Net().eval())
    other = dice_torch.replayed(module, mode="cache", cache_dir=str(tmp_path))
    with torch.no_grad():
        other(torch.randn(8, 16))
    assert other.decision.choice == replay.DIRECT and "no tune" in other.decision.source


def test_a_served_model_that_returns_a_view_of_its_input_is_never_replayed(monkeypatch, tmp_path):
    served, timed = _served(monkeypatch, tmp_path, "tune-sync", replay_us=1.0, fn=lambda x: x.view(-1))
    assert timed == [] and served.decision.choice == replay.DIRECT
    assert served.decision.source == "not replayable: an output shares an input's storage"


def test_a_served_model_with_cudagraphs_off_runs_directly(monkeypatch, tmp_path):
    module = torch.jit.script(Net().eval())
    served = dice_torch.replayed(module, mode="tune-sync", cache_dir=str(tmp_path), cudagraphs="off")
    x = torch.randn(4, 16)
    with torch.no_grad():
        torch.testing.assert_close(served(x), module(x))
    assert served.decision.source == "off (cudagraphs option)"


def test_replayed_refuses_an_unknown_cudagraphs_choice():
    with pytest.raises(ValueError, match="unknown cudagraphs choice 'always'"):
        dice_torch.replayed(Net(), cudagraphs="always")


def test_replayed_refuses_an_unknown_mode_as_the_backend_does():
    with pytest.raises(ValueError, match="dice_torch.replayed: unknown mode 'fast'"):
        dice_torch.replayed(Net(), mode="fast")


def test_a_served_model_in_observe_mode_never_replays(monkeypatch, tmp_path):
    module = torch.jit.script(Net().eval())
    served = dice_torch.replayed(module, mode="observe", cache_dir=str(tmp_path))
    x = torch.randn(4, 16)
    with torch.no_grad():
        torch.testing.assert_close(served(x), module(x))
    assert served.decision.choice == replay.DIRECT and served.decision.source == "mode observe"
