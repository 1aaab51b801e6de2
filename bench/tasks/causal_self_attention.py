"""Benchmark task (KernelBench format): minGPT-style causal self-attention,
float32, [16, 512, 768] in and out, 12 heads. The causal mask is a 0/1
lower-triangular buffer applied with masked_fill(mask == 0, -inf), then
softmax and eval-mode dropout: the masked_fill form of `dice tune`'s
attention pass (issue 18 item 3)."""
import math

import torch
import torch.nn as nn

batch_size, seq_len, width, heads = 16, 512, 768, 12


class Model(nn.Module):
    def __init__(self, width: int, heads: int, seq: int):
        super().__init__()
        self.heads = heads
        self.c_attn, self.c_proj = nn.Linear(width, 3 * width), nn.Linear(width, width)
        self.attn_dropout = nn.Dropout(0.0)
        self.register_buffer("bias", torch.tril(torch.ones(seq, seq)).view(1, 1, seq, seq), persistent=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        b, t, c = x.shape
        q, k, v = self.c_attn(x).split(c, dim=2)
        q, k, v = (z.view(b, t, self.heads, c // self.heads).transpose(1, 2) for z in (q, k, v))
        att = (q @ k.transpose(-2, -1)) * (1.0 / math.sqrt(k.size(-1)))
        att = att.masked_fill(self.bias[:, :, :t, :t] == 0, float("-inf"))
        att = self.attn_dropout(torch.softmax(att, dim=-1))
        y = (att @ v).transpose(1, 2).contiguous().view(b, t, c)
        return self.c_proj(y)


def get_inputs():
    return [torch.randn(batch_size, seq_len, width)]


def get_init_inputs():
    return [width, heads, seq_len]
