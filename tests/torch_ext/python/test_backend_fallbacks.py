"""CPU tests of issue 17 items 3 and 4: the dice backend never fails where
torch.compile succeeds (an injected failure in each stage of dice's part
falls back, with one warning and a counter), the ResNet18 pattern (batchnorm
and casts) compiles with Inductor, a graph without a GPU goes to the rest
compiler unchanged (no run_group node), and DICE_LOG_LEVEL filters the
``dice_torch`` logger."""

import logging
import warnings

import pytest
import torch
import torch.nn as nn
import torch.nn.functional as F

import dice_torch
from dice_torch import backend, logs, measure

INDUCTOR = {"mode": "cache", "rest": "inductor"}


class Mlp(nn.Module):
    def __init__(self, d=16, h=32):
        super().__init__()
        self.fc1, self.fc2 = nn.Linear(d, h), nn.Linear(h, d)

    def forward(self, x):
        return self.fc2(F.gelu(self.fc1(x), approximate="tanh"))


class ConvBnCast(nn.Module):
    """The ResNet18 pattern, small: conv -> batchnorm -> relu -> half -> float."""

    def __init__(self):
        super().__init__()
        self.conv, self.bn = nn.Conv2d(3, 8, 3, padding=1), nn.BatchNorm2d(8)

    def forward(self, x):
        return torch.relu(self.bn(self.conv(x))).to(torch.float16).float() * 2.0


@pytest.fixture(autouse=True)
def _fresh_backend_state(monkeypatch):
    logs.reset_warnings()
    logs.reset_counters()
    monkeypatch.delenv("DICE_TORCH_FORCE_PARTITION", raising=False)
    level = logs.log.level
    yield
    logs.log.setLevel(level)


def run(model, x, options):
    model.eval()
    compiled = torch.compile(model, backend="dice", options=options)
    with torch.no_grad():
        return compiled(x), model(x)


def test_graph_without_gpu_goes_to_rest_unchanged_with_no_run_group(monkeypatch):
    seen = []
    real = backend._rest_unchanged

    def spy(gm, example_inputs, rest):
        seen.append(gm)
        return real(gm, example_inputs, rest)

    monkeypatch.setattr(backend, "_rest_unchanged", spy)
    monkeypatch.setattr(dice_torch.partition, "fuse_dice_groups", lambda gm: pytest.fail("partitioned without a GPU"))
    with pytest.warns(UserWarning, match="no GPU") as caught:
        got, want = run(Mlp(), torch.randn(4, 16), INDUCTOR)
        run(ConvBnCast(), torch.randn(1, 3, 8, 8), INDUCTOR)
    torch.testing.assert_close(got, want)
    assert len(seen) == 2
    for gm in seen:
        targets = {n.target for n in gm.graph.nodes}
        assert not any("run_group" in str(t) for t in targets), targets
    assert sum("no GPU" in str(w.message) for w in caught) == 1  # said once per process
    rep = dice_torch.last_report()
    assert rep.groups == [] and rep.candidates == [] and "no GPU" in rep.skipped
    assert dice_torch.backend_stats()["passthrough_no_gpu"] == 2


def test_batchnorm_and_to_copy_compile_with_inductor_and_match_eager(monkeypatch):
    # Before issue 17 the table dice handed to Inductor left _to_copy whole;
    # a cast no group took reached Inductor's lowering: "both a fallback and
    # a decomp for same op: aten._to_copy.default". The batchnorm + relu
    # region is elementwise only, which rest="inductor" leaves to Inductor by
    # default; measured as before here, so the partitioner takes it and the
    # cast stays outside the group.
    monkeypatch.setenv("DICE_TORCH_FORCE_PARTITION", "1")
    monkeypatch.setenv("DICE_TORCH_ELEMENTWISE_REGIONS", "1")
    torch.manual_seed(0)
    model = ConvBnCast()
    with torch.no_grad():
        model.bn.running_mean.uniform_(-0.5, 0.5)
        model.bn.running_var.uniform_(0.5, 1.5)
    got, want = run(model, torch.randn(2, 3, 16, 16), INDUCTOR)
    torch.testing.assert_close(got, want, rtol=1e-3, atol=1e-3)
    rep = dice_torch.last_report()
    assert rep.fallback is None, rep.fallback  # fixed at the cause, not caught
    assert rep.candidates, "no fusion group formed"
    assert dice_torch.backend_stats()["fallbacks"] == {s: 0 for s in logs.STAGES}


@pytest.mark.parametrize("stage", ["load", "partition", "decompositions", "compile", "tune"])
def test_injected_failure_in_each_stage_falls_back_with_one_warning_and_a_counter(monkeypatch, caplog, stage):
    monkeypatch.setenv("DICE_TORCH_FORCE_PARTITION", "1")
    options = dict(INDUCTOR)
    if stage == "tune":  # the first-call measurements: allowed on CPU for the test
        options["mode"] = "tune-sync"
        monkeypatch.setattr(backend, "_can_measure", lambda inputs: True)
        monkeypatch.setattr(measure, "_timer", lambda label, fn, base_fn, args: measure.Comparison(1.0, 1.0))

    def hook(s):
        if s == stage:
            raise RuntimeError(f"injected failure in {s}")

    monkeypatch.setattr(backend, "_stage_hook", hook)
    torch.manual_seed(0)
    with warnings.catch_warnings(record=True) as caught, caplog.at_level(logging.WARNING, logger="dice_torch"):
        warnings.simplefilter("always")
        got, want = run(Mlp(), torch.randn(4, 16), options)
    torch.testing.assert_close(got, want)
    msgs = [str(w.message) for w in caught if "falls back" in str(w.message)]
    assert len(msgs) == 1 and f"{stage} failed" in msgs[0] and "injected failure" in msgs[0], msgs
    assert sum("falls back" in r.getMessage() for r in caplog.records) == 1
    rep = dice_torch.last_report()
    assert rep.fallback == {"stage": stage, "cause": f"RuntimeError: injected failure in {stage}"}
    stats = dice_torch.backend_stats()
    assert stats["fallbacks"][stage] == 1 and sum(stats["fallbacks"].values()) == 1
    assert dice_torch.group_stats().backend["fallbacks"][stage] == 1


def test_log_level_info_shows_groups_and_warn_hides_them(monkeypatch, caplog):
    monkeypatch.setenv("DICE_TORCH_FORCE_PARTITION", "1")
    caplog.set_level(logs.TRACE)  # the capture handler takes everything; the logger's level filters
    monkeypatch.setenv("DICE_LOG_LEVEL", "info")
    assert logs.apply_log_level() == logging.INFO and logs.log.level == logging.INFO
    run(Mlp(), torch.randn(2, 16), INDUCTOR)
    infos = [r.getMessage() for r in caplog.records if r.name == "dice_torch" and r.levelno == logging.INFO]
    assert any("formed: linear+gelu" in m for m in infos), infos
    caplog.clear()
    torch._dynamo.reset()
    monkeypatch.setenv("DICE_LOG_LEVEL", "warn")
    logs.apply_log_level()
    run(Mlp(), torch.randn(3, 16), INDUCTOR)
    assert not [r for r in caplog.records if r.name == "dice_torch" and r.levelno < logging.WARNING]
    caplog.clear()
    logs.apply_log_level("off")
    import warnings
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        logs.warn("dice: hidden")
    assert not [r for r in caplog.records if r.name == "dice_torch"]
    assert not [w for w in caught if "dice: hidden" in str(w.message)], [str(w.message) for w in caught]
    logs.apply_log_level("warn")
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        logs.warn("dice: shown")
    assert [w for w in caught if "dice: shown" in str(w.message)]


def test_log_level_names_are_the_cpp_ones():
    assert [logs.parse_level(n) for n in ("trace", "debug", "info", "warn", "error")] == \
        [logs.TRACE, logging.DEBUG, logging.INFO, logging.WARNING, logging.ERROR]
    assert logs.parse_level("OFF") > logging.CRITICAL
    with pytest.raises(ValueError, match="trace\\|debug\\|info\\|warn\\|error\\|off"):
        logs.parse_level("loud")


def test_ops_kept_whole_but_left_out_get_inductors_decomposition(monkeypatch):
    # float64 is not an IR dtype: softmax, gelu, layer_norm and the casts stay
    # out of every group and must reach Inductor decomposed, as without dice.
    monkeypatch.setenv("DICE_TORCH_FORCE_PARTITION", "1")

    class M(nn.Module):
        def forward(self, x):
            y = x.double()
            y = F.layer_norm(F.gelu(torch.softmax(y, -1)), (y.shape[-1],))
            return y.float() + torch.log_softmax(x, -1)

    x = torch.randn(4, 32)
    got, want = run(M(), x, INDUCTOR)
    torch.testing.assert_close(got, want)
    rep = dice_torch.last_report()
    assert rep.fallback is None, rep.fallback
    assert {"aten._softmax.default", "aten.gelu.default", "aten._to_copy.default"} <= set(rep.decomposed), rep.decomposed
    assert any("aten._log_softmax.default" in g.torch_ops for g in rep.groups), rep.groups  # float32: a group


def _static_input_idxs(gm, example_inputs, copy_first):
    """Inductor's static input indices (the parameters) for dynamo's graph,
    compiled as is or through pipeline.copy_gm."""
    from torch._inductor.compile_fx import compile_fx, compile_fx_inner

    from dice_torch import pipeline

    seen = []

    def inner(aten_gm, aten_inputs, **kwargs):
        seen.append(list(kwargs.get("static_input_idxs") or []))
        return compile_fx_inner(aten_gm, aten_inputs, **kwargs)

    with torch._functorch.config.patch(enable_autograd_cache=False):  # a cache hit skips inner_compile
        compile_fx(pipeline.copy_gm(gm) if copy_first else gm, example_inputs, inner_compile=inner)
    return seen


def test_a_copied_dynamo_graph_keeps_its_parameters_static_for_inductor():
    # Without dynamo's attributes a copy is taken for an exported graph and its
    # parameters become ordinary inputs (3-5% slower Inductor code on ResNet101).
    got = {}

    def spy_backend(gm, example_inputs):
        got["original"] = _static_input_idxs(gm, example_inputs, copy_first=False)
        got["copy"] = _static_input_idxs(gm, example_inputs, copy_first=True)
        return gm.forward

    torch._dynamo.reset()
    model = nn.Sequential(nn.Conv2d(3, 8, 3), nn.ReLU(), nn.Conv2d(8, 4, 1)).eval()
    with torch.no_grad():
        torch.compile(model, backend=spy_backend)(torch.randn(1, 3, 8, 8))
    assert got["original"] and got["original"][0], "dynamo's graph has static inputs (its parameters)"
    assert got["copy"] == got["original"]


def test_the_no_gpu_notice_is_printed_once_when_logging_is_not_configured(tmp_path):
    # Unconfigured logging: the UserWarning is the one print (logging's
    # last-resort handler used to print the same line a second time).
    import os
    import subprocess
    import sys

    script = tmp_path / "no_gpu.py"
    script.write_text(
        "import torch, dice_torch\n"
        "m = torch.nn.Linear(8, 8)\n"
        "with torch.no_grad():\n"
        "    torch.compile(m, backend='dice', options={'mode': 'cache', 'cache_dir': %r})(torch.randn(2, 8))\n"
        % str(tmp_path))
    env = {k: v for k, v in os.environ.items() if k not in ("DICE_TORCH_FORCE_PARTITION", "DICE_LOG_LEVEL")}
    env["CUDA_VISIBLE_DEVICES"] = ""
    res = subprocess.run([sys.executable, str(script)], env=env, capture_output=True, text=True, timeout=300)
    assert res.returncode == 0, res.stderr[-2000:]
    assert res.stderr.count("no GPU") == 1, res.stderr[-2000:]


def test_log_level_info_prints_info_lines_when_logging_is_not_configured(tmp_path):
    # Python's last-resort handler prints WARNING and up only: DICE_LOG_LEVEL
    # =info must still show the backend's INFO lines (once each), and a
    # warning still once.
    import os
    import subprocess
    import sys

    script = tmp_path / "info.py"
    script.write_text(
        "import logging, dice_torch\n"
        "from dice_torch import logs\n"
        "logs.log.info('dice: an info line')\n"
        "logs.log.debug('dice: a debug line')\n"
        "logs.warn('dice: a warning line')\n")
    env = {k: v for k, v in os.environ.items() if k != "DICE_TORCH_FORCE_PARTITION"}
    env["DICE_LOG_LEVEL"] = "info"
    res = subprocess.run([sys.executable, str(script)], env=env, capture_output=True, text=True, timeout=300)
    assert res.returncode == 0, res.stderr[-2000:]
    assert res.stderr.count("dice: an info line") == 1, res.stderr[-2000:]
    assert "a debug line" not in res.stderr
    assert res.stderr.count("dice: a warning line") == 1, res.stderr[-2000:]
