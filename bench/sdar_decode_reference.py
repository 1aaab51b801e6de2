#!/usr/bin/env python3
"""Plain PyTorch block-diffusion decode loop (SDAR/Qwen3 with a KV cache),
the baseline the C++ decoder (bench/sdar_decode_bench) is measured against.

The same algorithm as dice/generator/diffusion_decoder.h, in the
benchmark's setting: random weights (randn x 0.02; norms 1 + randn x 0.02)
drawn on the device; the prompt's blocks prefilled into a KV cache with the
block-causal mask; each new block starts fully masked; per denoising step the
block is scored against the cache (SDPA, no mask), the mask token's logit is
set to -inf, greedy tokens and their probabilities are taken, and the k most
confident masked positions are revealed with SDAR's static schedule
(k_s = max(1, n/S + (s < n%S))); a complete block is committed by one more
forward; EOS is off, so every sample decodes --new tokens. tokens/s =
batch x new tokens / wall time of the whole decode (prefill included), after
one short warm-up decode. The prompt length must be a multiple of the block
size here.

With --cpp BIN the C++ benchmark runs in the same invocation with the same
flags (plus --cuda-graphs and --profile, which only it has), and one table
shows both. Peak GPU memory of each row is reported (GiB; batch 128 of the
4B shape: ~8.8 GB of weights + ~14.5 GB of KV cache for 768 positions +
prefill activations).

  python3 bench/sdar_decode_reference.py --config bench/configs/sdar-1.7b-like.json \
      --config .deps/sdar/config-4b.json --batch 1,16,128 --cpp build/bench/sdar_decode_bench \
      [--cuda-graphs off,on] [--profile]
  python3 bench/sdar_decode_reference.py --tiny [--cpp build/bench/sdar_decode_bench]   (CPU, seconds)
"""
import argparse
import json
import os
import subprocess
import sys
import tempfile
import time

import torch
import torch.nn.functional as F

TINY = {"hidden_size": 64, "num_hidden_layers": 2, "num_attention_heads": 4, "num_key_value_heads": 2,
        "head_dim": 16, "intermediate_size": 128, "vocab_size": 512, "max_position_embeddings": 1024,
        "rope_theta": 10000.0, "rms_norm_eps": 1e-6, "tie_word_embeddings": False, "block_size": 4,
        "mask_token_id": 511}


class Sdar:
    """Qwen3 decoder with SDAR's block-causal attention and a KV cache."""

    def __init__(self, cfg, device, dtype, seed):
        self.c = cfg
        self.device, self.dtype = device, dtype
        g = torch.Generator(device=device)
        g.manual_seed(seed)
        H, I, V = cfg["hidden_size"], cfg["intermediate_size"], cfg["vocab_size"]
        nh, nkv, hd = cfg["num_attention_heads"], cfg["num_key_value_heads"], cfg["head_dim"]

        def w(*shape, norm=False):
            t = torch.randn(*shape, generator=g, device=device, dtype=torch.float32) * 0.02
            return (t + 1.0 if norm else t).to(dtype)

        self.embed = w(V, H)
        self.layers = []
        for _ in range(cfg["num_hidden_layers"]):
            self.layers.append(dict(inorm=w(H, norm=True), q=w(nh * hd, H), k=w(nkv * hd, H), v=w(nkv * hd, H),
                                    o=w(H, nh * hd), qn=w(hd, norm=True), kn=w(hd, norm=True),
                                    pnorm=w(H, norm=True), gate=w(I, H), up=w(I, H), down=w(H, I)))
        self.norm = w(H, norm=True)
        self.lm_head = self.embed if cfg.get("tie_word_embeddings") else w(V, H)
        exp = torch.arange(0, hd, 2, device=device, dtype=torch.float32) / hd
        self.inv_freq = 1.0 / (cfg.get("rope_theta", 10000.0) ** exp)

    def rms(self, x, weight):
        xf = x.float()
        xf = xf * torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + self.c.get("rms_norm_eps", 1e-6))
        return weight * xf.to(x.dtype)

    def rope(self, x, pos):  # x [B, h, L, D]
        freqs = pos.float()[:, None] * self.inv_freq[None, :]
        emb = torch.cat([freqs, freqs], -1)
        cos, sin = emb.cos().to(x.dtype), emb.sin().to(x.dtype)
        half = x.shape[-1] // 2
        rot = torch.cat([-x[..., half:], x[..., :half]], -1)
        return x * cos + rot * sin

    def new_cache(self, batch, capacity):
        c = self.c
        shape = (batch, c["num_key_value_heads"], capacity, c["head_dim"])
        return {"k": [torch.empty(shape, device=self.device, dtype=self.dtype) for _ in self.layers],
                "v": [torch.empty(shape, device=self.device, dtype=self.dtype) for _ in self.layers], "len": 0}

    def forward(self, ids, cache, commit, logits=True):
        c = self.c
        B, L = ids.shape
        P = cache["len"]
        nh, nkv, hd, bs = c["num_attention_heads"], c["num_key_value_heads"], c["head_dim"], c["block_size"]
        pos = torch.arange(P, P + L, device=self.device)
        mask = None
        if L > bs:  # prefill: block-causal over the new tokens (the cache is empty here)
            qb = pos // bs
            mask = qb[:, None] >= torch.arange(0, P + L, device=self.device)[None, :] // bs
        x = self.embed[ids]
        for i, l in enumerate(self.layers):
            h = self.rms(x, l["inorm"])
            q = self.rms((h @ l["q"].T).view(B, L, nh, hd), l["qn"]).transpose(1, 2)
            k = self.rms((h @ l["k"].T).view(B, L, nkv, hd), l["kn"]).transpose(1, 2)
            v = (h @ l["v"].T).view(B, L, nkv, hd).transpose(1, 2)
            q, k = self.rope(q, pos), self.rope(k, pos)
            ck, cv = cache["k"][i], cache["v"][i]
            if commit:
                ck[:, :, P:P + L] = k
                cv[:, :, P:P + L] = v
                keys, vals = ck[:, :, :P + L], cv[:, :, :P + L]
            else:
                keys, vals = torch.cat([ck[:, :, :P], k], 2), torch.cat([cv[:, :, :P], v], 2)
            a = F.scaled_dot_product_attention(q, keys, vals, attn_mask=mask, enable_gqa=True)
            x = x + a.transpose(1, 2).reshape(B, L, nh * hd) @ l["o"].T
            h = self.rms(x, l["pnorm"])
            x = x + (F.silu(h @ l["gate"].T) * (h @ l["up"].T)) @ l["down"].T
        if commit:
            cache["len"] = P + L
        if not logits:
            return None
        return (self.rms(x, self.norm) @ self.lm_head.T).float()


@torch.no_grad()
def decode(model, prompt, batch, new_tokens, steps):
    c = model.c
    bs, mask_id = c["block_size"], c["mask_token_id"]
    assert len(prompt) % bs == 0, "the reference loop wants a prompt of whole blocks"
    n_blocks = (new_tokens + bs - 1) // bs
    cache = model.new_cache(batch, len(prompt) + n_blocks * bs)
    ids = torch.tensor(prompt, device=model.device).unsqueeze(0).expand(batch, -1).contiguous()
    model.forward(ids, cache, commit=True, logits=False)
    out = []
    for _ in range(n_blocks):
        x = torch.full((batch, bs), mask_id, device=model.device, dtype=torch.long)
        n, S = bs, min(steps, bs)
        for s in range(S):
            k = max(1, n // S + (1 if s < n % S else 0))
            logits = model.forward(x, cache, commit=False)
            logits[..., mask_id] = float("-inf")
            prob, tok = logits.softmax(-1).max(-1)
            masked = x == mask_id
            conf = torch.where(masked, prob, torch.full_like(prob, -1.0))
            top = conf.topk(k, dim=-1).indices
            reveal = torch.zeros_like(masked).scatter_(1, top, True) & masked
            x = torch.where(reveal, tok, x)
        model.forward(x, cache, commit=True, logits=False)
        out.append(x)
    return torch.cat(out, 1)[:, :new_tokens]


def sync(device):
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--config", action="append", default=[], help="SDAR config.json (repeatable)")
    p.add_argument("--batch", default="1,16,128")
    p.add_argument("--prompt", type=int, default=512)
    p.add_argument("--new", type=int, default=256)
    p.add_argument("--steps", type=int, default=4)
    p.add_argument("--device", default="cuda")
    p.add_argument("--dtype", default="bf16", choices=["bf16", "f16", "f32"])
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--tiny", action="store_true", help="CPU smoke run: tiny shape, prompt 16, 8 tokens, batch 1,2")
    p.add_argument("--cpp", help="also run this sdar_decode_bench binary with the same settings")
    p.add_argument("--json", help="append one JSON line per row")
    p.add_argument("--cuda-graphs", default="off", help="passed to --cpp: off, on or off,on")
    p.add_argument("--profile", action="store_true", help="passed to --cpp: per-phase time table")
    p.add_argument("--no-ref", action="store_true", help="skip the PyTorch loop (only --cpp runs)")
    args = p.parse_args()
    shapes = []
    if args.tiny:
        shapes.append(("tiny", TINY))
        args.device, args.dtype, args.prompt, args.new, args.batch = "cpu", "f32", 16, 8, "1,2"
    for path in args.config:
        try:
            with open(path) as f:
                shapes.append((path, json.load(f)))
        except (OSError, ValueError) as e:
            print(f"sdar_decode_reference: error: cannot read --config {path}: {e}", file=sys.stderr)
            return 2
    if not shapes:
        p.error("give --config FILE (repeatable) or --tiny")
    device = torch.device(args.device)
    if device.type == "cuda" and not torch.cuda.is_available():
        print("sdar_decode_reference: error: --device cuda but no CUDA device is present", file=sys.stderr)
        return 3
    dtype = {"bf16": torch.bfloat16, "f16": torch.float16, "f32": torch.float32}[args.dtype]
    batches = [int(b) for b in args.batch.split(",") if b]
    rows = []
    for name, cfg in shapes:
        cfg = dict(cfg)
        cfg.setdefault("block_size", 4)
        model = Sdar(cfg, device, dtype, args.seed)
        prompt = [(i * 7919 + 17) % cfg["mask_token_id"] for i in range(args.prompt)]
        for b in (batches if not args.no_ref else []):
            decode(model, prompt, b, min(args.new, 2 * cfg["block_size"]), args.steps)  # warm-up
            sync(device)
            if device.type == "cuda":
                torch.cuda.reset_peak_memory_stats(device)
            t0 = time.perf_counter()
            toks = decode(model, prompt, b, args.new, args.steps)
            sync(device)
            sec = time.perf_counter() - t0
            peak = torch.cuda.max_memory_allocated(device) / 2**30 if device.type == "cuda" else 0.0
            rows.append({"impl": "torch-ref", "config": name, "batch": b, "prompt": args.prompt,
                         "new_tokens": args.new, "seconds": sec, "tokens_per_s": toks.numel() / sec,
                         "peak_gib": peak})
            print(f"torch-ref {name} batch {b}: {toks.numel() / sec:.1f} tokens/s ({sec:.3f} s, peak {peak:.2f} GiB)",
                  flush=True)
        del model
        if device.type == "cuda":
            torch.cuda.empty_cache()
    if args.cpp:
        with tempfile.TemporaryDirectory() as tmp:
            out = os.path.join(tmp, "cpp.jsonl")
            cmd = [args.cpp, "--json", out]
            if args.tiny:
                cmd.append("--tiny")
            else:
                for path in args.config:
                    cmd += ["--config", path]
                cmd += ["--batch", args.batch, "--prompt", str(args.prompt), "--new", str(args.new), "--steps",
                        str(args.steps), "--device", args.device, "--dtype", args.dtype, "--seed", str(args.seed)]
            cmd += ["--cuda-graphs", args.cuda_graphs]
            if args.profile:
                cmd.append("--profile")
            r = subprocess.run(cmd)
            if r.returncode != 0:
                print(f"sdar_decode_reference: {args.cpp} exited with {r.returncode}", file=sys.stderr)
                return 1
            with open(out) as f:
                rows += [json.loads(line) for line in f if line.strip()]
    if args.json:
        with open(args.json, "a") as f:
            for r in rows:
                f.write(json.dumps(r) + "\n")
    print(f"\nblock-diffusion decode, prompt {args.prompt}, {args.new} new tokens, static 1 token/step "
          f"({args.steps} steps/block), {args.dtype} on {args.device}\n")
    print("| config | batch | impl | seconds | tokens/s | vs torch-ref | peak GiB |")
    print("|---|---:|---|---:|---:|---:|---:|")
    ref = {(r["config"], r["batch"]): r["tokens_per_s"] for r in rows if r["impl"] == "torch-ref"}
    order = {"torch-ref": 0, "dice-cpp": 1, "dice-cpp-graphs": 2}
    for r in sorted(rows, key=lambda r: (r["config"], r["batch"], order.get(r["impl"], 2))):
        base = ref.get((r["config"], r["batch"]))
        rel = f"{r['tokens_per_s'] / base:.2f}x" if base else "-"
        print(f"| {r['config']} | {r['batch']} | {r['impl']} | {r['seconds']:.3f} | {r['tokens_per_s']:.1f} | {rel} "
              f"| {r.get('peak_gib', 0.0):.2f} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
