"""Benchmark task: bench/tasks/gpt2_block.py in bfloat16 (weights, buffer
and input), [8, 1024, 768], 12 heads; checked at the bench's bf16
tolerance (1e-2)."""
import os
import sys

import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import gpt2_block as _f32  # noqa: E402

batch_size, seq_len, width, heads = _f32.batch_size, _f32.seq_len, _f32.width, _f32.heads


class Model(_f32.Model):
    def __init__(self, width: int, heads: int, seq: int):
        super().__init__(width, heads, seq)
        self.to(torch.bfloat16)


def get_inputs():
    return [torch.randn(batch_size, seq_len, width, dtype=torch.bfloat16)]


def get_init_inputs():
    return [width, heads, seq_len]
