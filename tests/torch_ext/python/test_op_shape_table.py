"""CPU tests of bench/op_shape_table.py (issue 18's table per conv / GEMM /
attention shape): which ops it finds with which shapes and parameters, that
repeated calls collapse into one row, that a recorded op replays as the model
ran it, the dry run's rows, and the exit code for a task file that is not
there."""

import json
import sys
from pathlib import Path

import pytest
import torch
import torch.nn as nn
import torch.nn.functional as F

ROOT = Path(__file__).resolve().parents[3]
sys.path.insert(0, str(ROOT / "bench"))

import op_shape_table as ost  # noqa: E402


class _Mixed(nn.Module):
    """A conv called twice on one shape, a linear, a bmm, SDPA and attention
    written out as matmul -> scale -> softmax -> matmul."""

    def __init__(self):
        super().__init__()
        self.conv = nn.Conv2d(4, 8, 3, stride=2, padding=1, groups=2)
        self.lin = nn.Linear(16, 12)

    def forward(self, x, a, b, q):
        y = self.conv(x) + self.conv(x)
        z = self.lin(a)
        w = torch.bmm(a, b)
        o = F.scaled_dot_product_attention(q, q, q, is_causal=True)
        p = torch.softmax((q @ q.transpose(-2, -1)) * 0.25, dim=-1) @ q
        return y, z, w, o, p


def _inputs():
    torch.manual_seed(0)
    return [torch.randn(2, 4, 10, 10), torch.randn(3, 5, 16), torch.randn(3, 16, 7), torch.randn(2, 3, 6, 8)]


def _by_op(ops):
    out = {}
    for o in ops:
        out.setdefault(o.op, []).append(o)
    return out


def test_finds_conv_linear_bmm_sdpa_and_written_out_attention_with_shapes_and_params():
    ops = _by_op(ost.extract_ops(_Mixed().eval(), _inputs(), "mixed"))
    assert set(ops) == {"conv2d", "addmm", "bmm", "sdpa", "attention_pattern"}, set(ops)

    conv = ops["conv2d"][0]
    assert conv.kind == "conv" and conv.fn == "aten.convolution.default"
    assert [t["name"] for t in conv.tensors] == ["input", "weight", "bias"]
    assert [t["shape"] for t in conv.tensors] == [[2, 4, 10, 10], [8, 2, 3, 3], [8]]
    assert conv.params["stride"] == [2, 2] and conv.params["padding"] == [1, 1] and conv.params["groups"] == 2
    assert conv.params["transposed"] is False and conv.dtype() == "float32"
    assert len(ops["conv2d"]) == 2  # both calls recorded; dedup merges them

    lin = ops["addmm"][0]  # nn.Linear reaches ATen as addmm(bias, x, weight.t())
    assert lin.kind == "gemm" and [t["shape"] for t in lin.tensors] == [[12], [5 * 3, 16], [16, 12]]
    assert lin.tensors[2]["stride"] == [1, 16] and lin.tensors[2]["format"] == "strided"

    shapes = [[t["shape"] for t in o.tensors] for o in ops["bmm"]]
    assert [[3, 5, 16], [3, 16, 7]] in shapes
    assert [[6, 6, 8], [6, 8, 6]] in shapes and [[6, 6, 6], [6, 6, 8]] in shapes  # the written-out attention's two

    sdpa = ops["sdpa"][0]
    assert sdpa.kind == "attention" and [t["name"] for t in sdpa.tensors] == ["query", "key", "value"]
    assert sdpa.tensors[0]["shape"] == [2, 3, 6, 8] and sdpa.params["is_causal"] is True

    att = ops["attention_pattern"][0]
    assert [t["name"] for t in att.tensors] == ["q", "k_t", "v"]
    assert [t["shape"] for t in att.tensors] == [[6, 6, 8], [6, 8, 6], [6, 6, 8]]
    assert att.params["between_not_replayed"] == ["mul"] and att.params["scale"] == pytest.approx(8 ** -0.5)


def test_dedup_merges_equal_shapes_and_keeps_memory_formats_apart():
    model = nn.Conv2d(3, 4, 3).eval()
    x = torch.randn(1, 3, 8, 8)
    ops = ost.extract_ops(model, [x], "a") + ost.extract_ops(model, [x], "b")
    ops += ost.extract_ops(model, [x.to(memory_format=torch.channels_last)], "c")
    uniq = ost.dedup(ops)
    assert [(o.count, o.tasks) for o in uniq] == [(2, ["a", "b"]), (1, ["c"])]
    assert uniq[1].tensors[0]["format"] == "channels_last" and uniq[1].shape().startswith("input[1,3,8,8] cl")


def test_recorded_op_replays_as_the_model_ran_it():
    conv = nn.ConvTranspose2d(4, 6, 3, stride=2, padding=1, output_padding=1).eval()
    x = torch.randn(1, 4, 5, 5).to(memory_format=torch.channels_last)
    (spec,) = ost.extract_ops(conv, [x])
    assert spec.op == "conv_transpose2d" and spec.params["output_padding"] == [1, 1]
    xs = ost.make_inputs(spec, "cpu")
    assert xs[0].stride() == x.stride() and [tuple(t.shape) for t in xs] == [(1, 4, 5, 5), (4, 6, 3, 3), (6,)]
    want = F.conv_transpose2d(xs[0], xs[1], xs[2], stride=2, padding=1, output_padding=1)
    torch.testing.assert_close(ost.OpModule(spec)(*xs), want)

    att = next(o for o in ost.extract_ops(_Mixed().eval(), _inputs()) if o.op == "attention_pattern")
    q, kt, v = ost.make_inputs(att, "cpu")
    torch.testing.assert_close(ost.OpModule(att)(q, kt, v), torch.softmax(q @ kt * 8 ** -0.5, -1) @ v)


TASK = '''import torch
import torch.nn as nn

batch_size, channels, features = 2, 3, 8


class Model(nn.Module):
    def __init__(self, channels, features):
        super().__init__()
        self.conv = nn.Conv2d(channels, 4, 3, padding=1)
        self.fc = nn.Linear(features, features)

    def forward(self, x):
        return self.fc(torch.relu(self.conv(x)))


def get_inputs():
    return [torch.randn(batch_size, channels, 8, features)]


def get_init_inputs():
    return [channels, features]
'''

ROW_FIELDS = ("task", "op", "shape", "dtype", "eager_us", "compile_us", "max_autotune_us", "dice_us",
              "inductor_kernels", "max_autotune_kernels", "dice_winner", "speedup_vs_eager", "speedup_vs_compile",
              "correct", "key", "count", "tasks", "params")


def test_dry_run_writes_one_well_formed_row_per_op_shape_and_skip_done_resumes(tmp_path, capsys):
    task = tmp_path / "1_Conv_Linear.py"
    task.write_text(TASK)
    out = tmp_path / "rows.jsonl"
    assert ost.main([str(task), "--dry-run", "--reps", "2", "--out", str(out)]) == 0
    rows = [json.loads(line) for line in out.read_text().splitlines()]
    assert [r["op"] for r in rows] == ["conv2d", "addmm"]
    for r in rows:
        assert all(f in r for f in ROW_FIELDS), sorted(r)
        assert r["task"] == f"{task.parent.name}/1_Conv_Linear.py"
        assert r["eager_us"] > 0 and r["compile_us"] > 0 and r["dtype"] == "float32"
        assert r["correct"] is True and r["correct_of"] == "inductor" and not r["errors"], r
        assert r["dice_us"] is None and r["inductor_kernels"] is None and r["speedup_vs_eager"] is None
    assert rows[0]["shape"] == "input[2,3,8,8] weight[4,3,3,3] bias[4]" and rows[0]["params"]["padding"] == [1, 1]
    assert rows[1]["shape"] == "self[8] mat1[64,8] mat2[8,8] strides(1, 8)"  # [2*4*8, 8]
    table = capsys.readouterr().out
    assert "| task | op | shape |" in table and "correct: 2/2" in table

    assert ost.main([str(task), "--dry-run", "--reps", "2", "--skip-done", "--out", str(out)]) == 0
    assert len(out.read_text().splitlines()) == 2  # nothing new: both keys were done
    assert "2 already in" in capsys.readouterr().out


def test_missing_task_file_is_named_and_exits_2(tmp_path, capsys):
    out = tmp_path / "rows.jsonl"
    assert ost.main(["level2/no_such_task.py", "--kb", str(tmp_path), "--dry-run", "--out", str(out)]) == 2
    err = capsys.readouterr().err
    assert "task file(s) not found: level2/no_such_task.py" in err and str(tmp_path) in err
    assert not out.exists()
    assert ost.main(["--list", "level9", "--kb", str(tmp_path), "--dry-run", "--out", str(out)]) == 2
    assert "unknown workload list 'level9'" in capsys.readouterr().err


def test_dice_decision_names_served_winner_guard_or_what_was_left_to_inductor():
    sys.path.insert(0, str(ROOT / "torch_ext" / "python"))
    from dice_torch import CompileReport, FusionGroup, LeftOut
    from dice_torch.decisions import GuardResult

    group = FusionGroup(id=7, ir="", summary="add+relu", torch_ops=["aten.add"], num_inputs=2, num_outputs=1)
    stat = {"id": 7, "summary": "add+relu", "hits": 3, "fallbacks": 0, "winner_best_us": 10.0,
            "winner_baseline_us": 15.0, "fallback_reasons": {}}
    served = ost.dice_winner([CompileReport("tune-sync", "inductor", groups=[group])], [stat])
    assert served["decision"] == "dice: add+relu 10.0 vs 15.0 µs" and served["groups"][0]["winner_us"] == 10.0

    kept = CompileReport("tune-sync", "inductor", groups=[group], guard=GuardResult("inductor", "measured", 12.0, 9.0))
    assert ost.dice_winner([kept], [dict(stat, hits=0)])["decision"] == "inductor (guard: measured)"

    alone = CompileReport("tune-sync", "inductor", left_out=[LeftOut("aten.addmm.default", "not a fusible op")])
    info = ost.dice_winner([alone], [])
    assert info["decision"] == "inductor: no group for dice (aten.addmm.default: not a fusible op)"
    assert info["left_out"] == ["aten.addmm.default: not a fusible op"]
