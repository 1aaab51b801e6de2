"""The C++ op dice::run_group (torch_ext/include/dice/torch_ext/run_group.h)
called directly: torch.library.opcheck (schema, fake/meta kernel, dynamic
shapes through aot_dispatch), outputs against eager, and its errors."""

import pytest
import torch
import torch.nn.functional as F

import dice_torch

dice_torch.load_library()

BROADCAST = """dice-ir v1
input %0 f32 rank=3
input %1 f32 rank=1
%2 = add(%0, %1)
%3 = const(0.5)
%4 = mul(%2, %3)
%5 = gelu(%4)
output %5, %2
"""

REDUCE = """dice-ir v1
input %0 f32 rank=3
%1 = exp(%0)
%2 = sum(%1) dims=[1] keepdim=1
%3 = amax(%0) dims=[0,2]
output %2, %3
"""

LAYER_NORM = """dice-ir v1
input %0 bf16 rank=2
input %1 bf16 rank=1
input %2 bf16 rank=1
%3 = layer_norm(%0, %1, %2) i=1 s=[1.0000000000000001e-05]
%4 = cast(%3) i=0
output %4
"""


@pytest.mark.parametrize("ir,inputs", [
    (BROADCAST, lambda: [torch.randn(2, 5, 7), torch.randn(7)]),
    (REDUCE, lambda: [torch.randn(3, 4, 6)]),
    (LAYER_NORM, lambda: [torch.randn(6, 32, dtype=torch.bfloat16), torch.randn(32, dtype=torch.bfloat16),
                          torch.randn(32, dtype=torch.bfloat16)]),
], ids=["broadcast", "reduce", "layer_norm"])
def test_opcheck_passes(ir, inputs):
    torch.library.opcheck(torch.ops.dice.run_group.default, (ir, inputs()))


def test_outputs_equal_eager():
    x, b = torch.randn(2, 5, 7), torch.randn(7)
    out, s = torch.ops.dice.run_group(BROADCAST, [x, b])
    torch.testing.assert_close(s, x + b, rtol=0, atol=0)
    torch.testing.assert_close(out, F.gelu((x + b) * 0.5), rtol=0, atol=0)
    x = torch.randn(3, 4, 6)
    e, m = torch.ops.dice.run_group(REDUCE, [x])
    torch.testing.assert_close(e, x.exp().sum(1, keepdim=True), rtol=0, atol=0)
    torch.testing.assert_close(m, x.amax((0, 2)), rtol=0, atol=0)


def test_meta_kernel_infers_shapes_and_dtypes():
    x = torch.empty(6, 32, dtype=torch.bfloat16, device="meta")
    w = torch.empty(32, dtype=torch.bfloat16, device="meta")
    (out,) = torch.ops.dice.run_group(LAYER_NORM, [x, w, w])
    assert out.device.type == "meta" and out.shape == (6, 32) and out.dtype == torch.float32
    e, m = torch.ops.dice.run_group(REDUCE, [torch.empty(3, 4, 6, device="meta")])
    assert e.shape == (3, 1, 6) and m.shape == (4,)


def test_wrong_input_dtype_is_a_clear_error():
    with pytest.raises(RuntimeError, match="input 0 is int64 rank 3, the IR declares f32 rank 3"):
        torch.ops.dice.run_group(BROADCAST, [torch.zeros(2, 5, 7, dtype=torch.long), torch.randn(7)])
    with pytest.raises(RuntimeError, match="declares 2 inputs, got 1"):
        torch.ops.dice.run_group(BROADCAST, [torch.randn(2, 5, 7)])


def test_shapes_that_do_not_broadcast_are_a_clear_error():
    with pytest.raises(RuntimeError, match="add"):
        torch.ops.dice.run_group(BROADCAST, [torch.randn(2, 5, 7), torch.randn(6)])


def test_invalid_ir_is_rejected_with_the_line():
    with pytest.raises(RuntimeError, match="IR line 3"):
        torch.ops.dice.register_group("dice-ir v1\ninput %0 f32 rank=1\n%1 = frobnicate(%0)\noutput %1\n", [])

