#!/usr/bin/env python3
"""Plain-PyTorch reference of the SDAR (Qwen3 + block diffusion) forward and
of greedy block-diffusion decoding, for the C++ parity tests (tests/sdar/).

Written for this project from the facts in ../shared/DESIGN.md and the
Hugging Face Qwen3 architecture (RMSNorm, q/k RMSNorm over head_dim, RoPE with
rotate-half, GQA, SwiGLU MLP). It shares no code with the C++ model and does
things differently on purpose: attention is an explicit softmax(QK^T) with a
block-causal boolean mask over the whole sequence (no SDPA, no KV cache), and
decoding recomputes the full sequence at every denoising step.

  python3 tests/generator/sdar_reference.py make-fixture --out DIR [--seed 0]

  python3 tests/generator/sdar_reference.py make-random --config tests/data/sdar/config-4b.json \\
      --out DIR [--layers N] [--dtype bf16]     # random weights at a real shape (benchmarks)

make-fixture writes into DIR (atomically: a temporary folder renamed at the end)
  f32/      config.json + model.safetensors   tiny random untied checkpoint, F32
  bf16/     config.json + model.safetensors   tiny random tied checkpoint, BF16
  tok/      config.json + model.safetensors + tokenizer files: the real SDAR
            vocabulary (151936) and tokenizer, a 1-layer hidden-32 body
  reference.safetensors   logits_f32 [B, T, V], logits_bf16 [B, T, V] (F32;
                          the bf16 checkpoint's weights computed in float32)
  reference.json          {"forward_ids": [[...]], "decode": [case, ...]};
                          case = {prompt, steps, remasking, threshold,
                          max_new_tokens, eos_ids, tokens, gaps,
                          denoising_steps} where gaps[i] is the top-1 minus
                          top-2 logit of generated token i when it was
                          revealed and denoising_steps counts the forward
                          passes over uncommitted blocks.

Decoding (must match dice::DiffusionDecoder for temperature 0): the prompt's
whole blocks are committed; its last partial block is the first decoded block
with the prompt tokens fixed; every other block position starts as the mask
token. Per denoising step s: logits of the block (mask token's logit set to
-inf), confidence = softmax probability of the argmax token (first index on
ties); masked positions ordered by confidence descending (stable: lower
position first on ties); k_s = max(1, n_masked // steps + (s < n_masked % steps));
static reveals k_s, dynamic reveals max(k_s, #confidence > threshold), both
capped by the number still masked. A finished block is committed; decoding
stops after a block containing an EOS id (output cut before the EOS) or once
max_new_tokens are generated (output cut to max_new_tokens).
"""
import argparse
import json
import os
import shutil
import sys
import tempfile

import torch
from safetensors.torch import save_file

SDAR_TOKENIZER_DIR = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "data", "sdar")

TINY = {
    "architectures": ["SDARForCausalLM"],
    "model_type": "sdar",
    "hidden_size": 64,
    "num_hidden_layers": 2,
    "num_attention_heads": 4,
    "num_key_value_heads": 2,
    "head_dim": 32,
    "intermediate_size": 128,
    "vocab_size": 256,
    "max_position_embeddings": 512,
    "rope_theta": 10000.0,
    "rms_norm_eps": 1e-6,
    "tie_word_embeddings": False,
    "block_size": 4,
    "mask_token_id": 255,
    "torch_dtype": "float32",
}


def random_weights(cfg, seed):
    """Qwen3 tensors in Hugging Face naming; scales chosen so logits spread
    (top-2 gaps well above float32 noise) and confidences vary."""
    g = torch.Generator().manual_seed(seed)
    h, inter, v = cfg["hidden_size"], cfg["intermediate_size"], cfg["vocab_size"]
    hd, nh, nkv = cfg["head_dim"], cfg["num_attention_heads"], cfg["num_key_value_heads"]

    def lin(out_f, in_f, gain=1.0):
        return torch.randn(out_f, in_f, generator=g) * (gain / in_f ** 0.5)

    def norm(n):
        return 1.0 + 0.1 * torch.randn(n, generator=g)

    w = {"model.embed_tokens.weight": torch.randn(v, h, generator=g)}
    for i in range(cfg["num_hidden_layers"]):
        p = f"model.layers.{i}."
        w[p + "input_layernorm.weight"] = norm(h)
        w[p + "self_attn.q_proj.weight"] = lin(nh * hd, h)
        w[p + "self_attn.k_proj.weight"] = lin(nkv * hd, h)
        w[p + "self_attn.v_proj.weight"] = lin(nkv * hd, h)
        w[p + "self_attn.o_proj.weight"] = lin(h, nh * hd)
        w[p + "self_attn.q_norm.weight"] = norm(hd)
        w[p + "self_attn.k_norm.weight"] = norm(hd)
        w[p + "post_attention_layernorm.weight"] = norm(h)
        w[p + "mlp.gate_proj.weight"] = lin(inter, h)
        w[p + "mlp.up_proj.weight"] = lin(inter, h)
        w[p + "mlp.down_proj.weight"] = lin(h, inter)
    w["model.norm.weight"] = norm(h)
    if not cfg["tie_word_embeddings"]:
        w["lm_head.weight"] = lin(v, h, gain=4.0)
    return w


def rms_norm(x, weight, eps):
    var = x.pow(2).mean(-1, keepdim=True)
    return weight * (x * torch.rsqrt(var + eps))


def rotate_half(x):
    d = x.shape[-1] // 2
    return torch.cat((-x[..., d:], x[..., :d]), dim=-1)


def forward(w, cfg, ids):
    """ids: int64 [B, T] -> float32 logits [B, T, V]; block-causal attention:
    query i sees key j iff j // block_size <= i // block_size."""
    B, T = ids.shape
    h, hd = cfg["hidden_size"], cfg["head_dim"]
    nh, nkv = cfg["num_attention_heads"], cfg["num_key_value_heads"]
    eps, bs = cfg["rms_norm_eps"], cfg["block_size"]
    W = {k: t.float() for k, t in w.items()}
    x = W["model.embed_tokens.weight"][ids]
    pos = torch.arange(T, dtype=torch.float32)
    inv_freq = 1.0 / (cfg["rope_theta"] ** (torch.arange(0, hd, 2, dtype=torch.float32) / hd))
    ang = torch.outer(pos, inv_freq)
    ang = torch.cat((ang, ang), dim=-1)
    cos, sin = ang.cos(), ang.sin()
    blk = torch.arange(T) // bs
    allowed = blk[None, :] <= blk[:, None]  # [T(query), T(key)]
    for i in range(cfg["num_hidden_layers"]):
        p = f"model.layers.{i}."
        a = rms_norm(x, W[p + "input_layernorm.weight"], eps)
        q = (a @ W[p + "self_attn.q_proj.weight"].T).view(B, T, nh, hd)
        k = (a @ W[p + "self_attn.k_proj.weight"].T).view(B, T, nkv, hd)
        v = (a @ W[p + "self_attn.v_proj.weight"].T).view(B, T, nkv, hd)
        q = rms_norm(q, W[p + "self_attn.q_norm.weight"], eps).transpose(1, 2)
        k = rms_norm(k, W[p + "self_attn.k_norm.weight"], eps).transpose(1, 2)
        v = v.transpose(1, 2)
        q = q * cos + rotate_half(q) * sin
        k = k * cos + rotate_half(k) * sin
        rep = nh // nkv
        k = k.repeat_interleave(rep, dim=1)
        v = v.repeat_interleave(rep, dim=1)
        scores = (q @ k.transpose(-1, -2)) / hd ** 0.5
        scores = scores.masked_fill(~allowed, float("-inf"))
        o = torch.softmax(scores, dim=-1) @ v  # [B, nh, T, hd]
        o = o.transpose(1, 2).reshape(B, T, nh * hd)
        x = x + o @ W[p + "self_attn.o_proj.weight"].T
        m = rms_norm(x, W[p + "post_attention_layernorm.weight"], eps)
        gate = m @ W[p + "mlp.gate_proj.weight"].T
        up = m @ W[p + "mlp.up_proj.weight"].T
        x = x + (torch.nn.functional.silu(gate) * up) @ W[p + "mlp.down_proj.weight"].T
    x = rms_norm(x, W["model.norm.weight"], eps)
    head = W["model.embed_tokens.weight"] if cfg["tie_word_embeddings"] else W["lm_head.weight"]
    return x @ head.T


def decode_greedy(w, cfg, prompt, max_new_tokens, steps, remasking, threshold, eos_ids):
    bs, mask_id = cfg["block_size"], cfg["mask_token_id"]
    whole = len(prompt) // bs * bs
    committed = list(prompt[:whole])
    fixed = list(prompt[whole:])
    out, gaps = [], []
    forwards = 0
    while len(out) < max_new_tokens:
        n_fixed = len(fixed)
        block = fixed + [mask_id] * (bs - n_fixed)
        masked = torch.tensor([False] * n_fixed + [True] * (bs - n_fixed))
        block_gaps = [None] * bs
        n_masked = bs - n_fixed
        s = 0
        while bool(masked.any()):
            logits = forward(w, cfg, torch.tensor([committed + block]))[0, len(committed):]
            forwards += 1
            logits[:, mask_id] = float("-inf")
            probs = torch.softmax(logits, dim=-1)
            x0 = torch.argmax(logits, dim=-1)
            conf = probs.gather(-1, x0[:, None])[:, 0]
            top2 = torch.topk(logits, 2, dim=-1).values
            conf = torch.where(masked, conf, torch.full_like(conf, float("-inf")))
            order = torch.sort(conf, descending=True, stable=True).indices
            k = max(1, n_masked // steps + (1 if s < n_masked % steps else 0))
            if remasking == "dynamic":
                k = max(k, int((conf > threshold).sum()))
            k = min(k, int(masked.sum()))
            for i in order[:k].tolist():
                block[i] = int(x0[i])
                masked[i] = False
                block_gaps[i] = float(top2[i, 0] - top2[i, 1])
            s += 1
        committed += block
        new = block[n_fixed:]
        new_gaps = block_gaps[n_fixed:]
        fixed = []
        stop = None
        for j, t in enumerate(new):
            if t in eos_ids:
                stop = j
                break
        if stop is not None:
            out += new[:stop]
            gaps += new_gaps[:stop]
            break
        out += new
        gaps += new_gaps
    return out[:max_new_tokens], gaps[:max_new_tokens], forwards


def make_fixture(out_dir, seed):
    parent = os.path.dirname(os.path.abspath(out_dir)) or "."
    os.makedirs(parent, exist_ok=True)
    tmp = tempfile.mkdtemp(prefix=".sdar_reference.", dir=parent)
    try:
        cfg32 = dict(TINY)
        w32 = random_weights(cfg32, seed)
        cfg16 = dict(TINY, tie_word_embeddings=True, torch_dtype="bfloat16")
        w16 = {k: t.to(torch.bfloat16) for k, t in random_weights(cfg16, seed + 1).items()}
        for name, cfg, w in (("f32", cfg32, w32), ("bf16", cfg16, w16)):
            os.makedirs(os.path.join(tmp, name))
            with open(os.path.join(tmp, name, "config.json"), "w") as f:
                json.dump(cfg, f, indent=2)
            save_file({k: t.contiguous() for k, t in w.items()}, os.path.join(tmp, name, "model.safetensors"),
                      metadata={"format": "pt"})
        # A checkpoint with the real SDAR vocabulary and tokenizer files but a
        # tiny body (tied BF16 embedding of 151936 x 32), for the
        # load -> tokenize -> decode -> parse path of `dice generate`.
        cfg_tok = dict(TINY, hidden_size=32, num_hidden_layers=1, num_attention_heads=2, num_key_value_heads=1,
                       head_dim=16, intermediate_size=64, vocab_size=151936, mask_token_id=151669,
                       max_position_embeddings=2048, rope_theta=1000000.0, tie_word_embeddings=True,
                       torch_dtype="bfloat16")
        w_tok = {k: t.to(torch.bfloat16) for k, t in random_weights(cfg_tok, seed + 3).items()}
        os.makedirs(os.path.join(tmp, "tok"))
        with open(os.path.join(tmp, "tok", "config.json"), "w") as f:
            json.dump(cfg_tok, f, indent=2)
        save_file(w_tok, os.path.join(tmp, "tok", "model.safetensors"), metadata={"format": "pt"})
        for name in ("vocab.json", "merges.txt", "tokenizer_config.json"):
            shutil.copy(os.path.join(SDAR_TOKENIZER_DIR, name), os.path.join(tmp, "tok", name))
        g = torch.Generator().manual_seed(seed + 2)
        ids = torch.randint(0, TINY["vocab_size"] - 1, (2, 11), generator=g)
        with torch.no_grad():
            logits32 = forward(w32, cfg32, ids)
            logits16 = forward(w16, cfg16, ids)
        save_file({"logits_f32": logits32.contiguous(), "logits_bf16": logits16.contiguous()},
                  os.path.join(tmp, "reference.safetensors"))
        cases = []
        prompts = [torch.randint(0, TINY["vocab_size"] - 1, (n,), generator=g).tolist() for n in (8, 5, 11)]
        with torch.no_grad():
            for prompt in prompts:
                for remasking, steps, threshold in (("static", 4, 0.9), ("dynamic", 4, 0.4), ("static", 2, 0.9)):
                    tokens, gaps, forwards = decode_greedy(w32, cfg32, prompt, 32, steps, remasking, threshold, [])
                    cases.append({"prompt": prompt, "steps": steps, "remasking": remasking, "threshold": threshold,
                                  "max_new_tokens": 32, "eos_ids": [], "tokens": tokens, "gaps": gaps,
                                  "denoising_steps": forwards})
        with open(os.path.join(tmp, "reference.json"), "w") as f:
            json.dump({"seed": seed, "forward_ids": ids.tolist(), "decode": cases}, f)
        try:
            os.rename(tmp, out_dir)
        except OSError:
            if not os.path.exists(os.path.join(out_dir, "reference.json")):
                raise
            shutil.rmtree(tmp)  # another process finished the same fixture first
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise


def make_random(config_path, out_dir, layers, dtype, seed):
    """A random checkpoint at a real config (for benchmarks: decoding cost does
    not depend on the weights when the schedule is static): config.json (with
    num_hidden_layers overridden when `layers` is given), model.safetensors in
    `dtype`, and the SDAR tokenizer files."""
    with open(config_path) as f:
        cfg = json.load(f)
    if layers:
        cfg["num_hidden_layers"] = layers
    cfg.setdefault("head_dim", cfg["hidden_size"] // cfg["num_attention_heads"])
    cfg.setdefault("tie_word_embeddings", False)
    os.makedirs(out_dir, exist_ok=True)
    dt = {"bf16": torch.bfloat16, "f16": torch.float16, "f32": torch.float32}[dtype]
    w = {k: t.to(dt) for k, t in random_weights(cfg, seed).items()}
    save_file(w, os.path.join(out_dir, "model.safetensors"), metadata={"format": "pt"})
    cfg["torch_dtype"] = {"bf16": "bfloat16", "f16": "float16", "f32": "float32"}[dtype]
    with open(os.path.join(out_dir, "config.json"), "w") as f:
        json.dump(cfg, f, indent=2)
    for name in ("vocab.json", "merges.txt", "tokenizer_config.json"):
        shutil.copy(os.path.join(SDAR_TOKENIZER_DIR, name), os.path.join(out_dir, name))


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = ap.add_subparsers(dest="cmd", required=True)
    mk = sub.add_parser("make-fixture", help="write tiny checkpoints and reference outputs")
    mk.add_argument("--out", required=True)
    mk.add_argument("--seed", type=int, default=0)
    rnd = sub.add_parser("make-random", help="random checkpoint at a real config (benchmarks)")
    rnd.add_argument("--config", required=True, help="config.json to copy, e.g. tests/data/sdar/config-4b.json")
    rnd.add_argument("--out", required=True)
    rnd.add_argument("--layers", type=int, default=0, help="override num_hidden_layers")
    rnd.add_argument("--dtype", choices=("bf16", "f16", "f32"), default="bf16")
    rnd.add_argument("--seed", type=int, default=0)
    args = ap.parse_args()
    if args.cmd == "make-random":
        make_random(args.config, args.out, args.layers, args.dtype, args.seed)
        print(f"random checkpoint written to {args.out}")
        return 0
    if args.cmd == "make-fixture":
        if os.path.exists(os.path.join(args.out, "reference.json")):
            print(f"fixture already in {args.out}")
            return 0
        make_fixture(args.out, args.seed)
        print(f"fixture written to {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
