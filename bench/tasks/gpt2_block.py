"""Benchmark task (KernelBench format: Model, get_inputs, get_init_inputs):
a pre-LN GPT-2 block, float32, [8, 1024, 768] in and out, 12 heads. The
attention is written out as matmul -> scale -> additive causal -inf mask ->
softmax -> matmul, the form `dice tune`'s attention pass rewrites into
scaled_dot_product_attention (issue 18 item 3); the same block as
bench/torch_compile_bench.py's --gpt2-fp32 workload."""
import math

import torch
import torch.nn as nn
import torch.nn.functional as F

batch_size, seq_len, width, heads = 8, 1024, 768, 12
DTYPE = torch.float32


class Model(nn.Module):
    def __init__(self, width: int, heads: int, seq: int):
        super().__init__()
        self.heads = heads
        self.ln_1, self.ln_2 = nn.LayerNorm(width), nn.LayerNorm(width)
        self.c_attn, self.c_proj = nn.Linear(width, 3 * width), nn.Linear(width, width)
        self.c_fc, self.c_out = nn.Linear(width, 4 * width), nn.Linear(4 * width, width)
        self.register_buffer("mask", torch.full((seq, seq), float("-inf")).triu(1), persistent=False)
        self.to(DTYPE)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        b, t, c = x.shape
        q, k, v = self.c_attn(self.ln_1(x)).split(c, dim=2)
        q, k, v = (z.view(b, t, self.heads, c // self.heads).transpose(1, 2) for z in (q, k, v))
        att = (q @ k.transpose(-2, -1)) * (1.0 / math.sqrt(c // self.heads)) + self.mask[:t, :t]
        y = torch.softmax(att, dim=-1) @ v
        x = x + self.c_proj(y.transpose(1, 2).reshape(b, t, c))
        return x + self.c_out(F.gelu(self.c_fc(self.ln_2(x)), approximate="tanh"))


def get_inputs():
    return [torch.randn(batch_size, seq_len, width, dtype=DTYPE)]


def get_init_inputs():
    return [width, heads, seq_len]
