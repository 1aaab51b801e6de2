#!/usr/bin/env python3
"""Plain-torch references for dice::training's losses (training/include/dice/training/losses.h).

Written independently of the C++ (explicit loops over positions and blocks)
so the C++ test compares two implementations of the same definitions:
  * the block-diffusion (SDAR/BD3-LM) packed attention layout [x_t ; x0];
  * the masked-token SFT loss: sum over masked tokens of CE / t, divided by the
    number of response tokens;
  * group-normalised advantages (population std, 1e-6, equal groups dropped);
  * the TraceRL packed rebuild of a rollout's denoising states;
  * the TraceRL clipped objective with the k3 KL estimator.

  losses_reference.py --write FIXTURE   writes the JSON fixture the C++ test reads
  losses_reference.py --check FIXTURE   recomputes and compares (ctest runs this)
"""
import argparse
import json
import math
import sys

import torch

BLOCK = 4
MASK_ID = 11


def block_diffusion_layout(length, block):
    n = 2 * length
    mask = [[False] * n for _ in range(n)]
    for i in range(n):
        bi = (i % length) // block
        for j in range(n):
            bj = (j % length) // block
            if i < length:  # noised query
                mask[i][j] = (bj == bi) if j < length else (bj < bi)
            else:  # clean query
                mask[i][j] = (j >= length) and (bj <= bi)
    positions = list(range(length)) * 2
    return positions, mask


def block_diffusion_loss(logits, targets, masked, t, response):
    total = 0.0
    b, l, _ = logits.shape
    for i in range(b):
        for j in range(l):
            if masked[i][j]:
                lse = torch.logsumexp(logits[i, j].double(), 0)
                total += float(lse - logits[i, j, targets[i][j]].double()) / t[i][j]
    n = max(1, sum(1 for i in range(b) for j in range(l) if response[i][j]))
    return total / n


def group_advantages(rewards):
    if max(rewards) == min(rewards):
        return None
    mean = sum(rewards) / len(rewards)
    sd = math.sqrt(sum((r - mean) ** 2 for r in rewards) / len(rewards))
    return [(r - mean) / (sd + 1e-6) for r in rewards]


def pack_trace(prompt, tokens, steps, block, mask_id):
    p, n = len(prompt), len(prompt) + len(tokens)
    full = prompt + tokens
    ids, pos, owner = list(full), list(range(n)), [-1] * n
    scored, targets, copies = [], [], 0
    for b in range(p // block, n // block):
        lo, hi = b * block, (b + 1) * block
        resp = [j for j in range(max(p, lo), hi)]
        for k in range(max(steps[j - p] for j in resp) + 1):
            for j in range(lo, hi):
                is_resp = j >= p
                s = steps[j - p] if is_resp else -1
                if is_resp and s == k:
                    scored.append(len(ids))
                    targets.append(full[j])
                ids.append(full[j] if (not is_resp or s < k) else mask_id)
                pos.append(j)
                owner.append(copies)
            copies += 1
    m = len(ids)
    mask = [[False] * m for _ in range(m)]
    for q in range(m):
        for k in range(m):
            bq, bk = pos[q] // block, pos[k] // block
            if owner[q] == -1:
                mask[q][k] = owner[k] == -1 and bk <= bq
            else:
                mask[q][k] = (owner[k] == -1 and bk < bq) or owner[k] == owner[q]
    return ids, pos, mask, scored, targets


def scored_log_probs(logits, scored, targets, mask_id):
    out = []
    for s, t in zip(scored, targets):
        row = logits[s].double().clone()
        row[mask_id] = -math.inf
        out.append(float(row[t] - torch.logsumexp(row, 0)))
    return out


def trace_rl_loss(logp, logp_old, logp_ref, adv, eps, beta):
    total = 0.0
    for lp, lo, lr, a in zip(logp, logp_old, logp_ref, adv):
        ratio = math.exp(lp - lo)
        surr = min(ratio * a, min(max(ratio, 1 - eps), 1 + eps) * a)
        kl = math.exp(lr - lp) - (lr - lp) - 1
        total += surr - beta * kl
    return -total / len(logp)


def make_fixture():
    g = torch.Generator().manual_seed(1234)
    vocab, b, l = 12, 2, 10  # L not a multiple of the block: a partial last block
    positions, mask = block_diffusion_layout(l, BLOCK)
    logits = torch.randn(b, l, vocab, generator=g)
    targets = torch.randint(0, vocab - 1, (b, l), generator=g)
    response = [[j >= 3 for j in range(l)], [j >= 5 and j < 9 for j in range(l)]]
    masked = [[response[i][j] and bool(torch.rand(1, generator=g) < 0.6) for j in range(l)] for i in range(b)]
    t = [[0.05 + 0.9 * ((i * 7 + j // BLOCK * 3) % 10) / 10 for j in range(l)] for i in range(b)]
    sft_loss = block_diffusion_loss(logits, targets.tolist(), masked, t, response)

    rewards = [1.0, 0.0, 0.0, 1.0, 1.0]
    prompt = [1, 2, 3, 4, 5, 6]            # 6 tokens: a partial block of 2 prompt tokens
    tokens = [7, 8, 9, 3, 2, 10, 5, 1, 0, 4]  # fills blocks 1..3 (2 + 4 + 4)
    steps = [1, 0, 2, 0, 1, 1, 0, 0, 0, 3]
    ids, pos, tmask, scored, ttargets = pack_trace(prompt, tokens, steps, BLOCK, MASK_ID)
    packed_logits = torch.randn(len(ids), vocab, generator=g)
    logp = scored_log_probs(packed_logits, scored, ttargets, MASK_ID)
    tn = len(logp)
    logp_old = [x + float(d) for x, d in zip(logp, torch.randn(tn, generator=g) * 0.3)]
    logp_ref = [x + float(d) for x, d in zip(logp, torch.randn(tn, generator=g) * 0.5)]
    adv = [float(a) for a in torch.randn(tn, generator=g)]
    return {
        "block_size": BLOCK, "mask_token_id": MASK_ID, "vocab": vocab,
        "sft": {"length": l, "positions": positions, "mask": mask, "logits": logits.tolist(),
                "targets": targets.tolist(), "masked": masked, "t": t, "response": response, "loss": sft_loss},
        "advantages": {"rewards": rewards, "advantages": group_advantages(rewards),
                       "equal_rewards": [1.0, 1.0, 1.0], "equal_dropped": group_advantages([1.0, 1.0, 1.0]) is None},
        "trace": {"prompt": prompt, "tokens": tokens, "steps": steps, "ids": ids, "positions": pos, "mask": tmask,
                  "scored": scored, "targets": ttargets, "logits": packed_logits.tolist(), "logp": logp},
        "trace_rl": {"logp": logp, "logp_old": logp_old, "logp_ref": logp_ref, "advantage": adv,
                     "clip_eps": 0.2, "beta": 0.01, "loss": trace_rl_loss(logp, logp_old, logp_ref, adv, 0.2, 0.01)},
    }


def close(a, b, tol=1e-9):
    if isinstance(a, list):
        return isinstance(b, list) and len(a) == len(b) and all(close(x, y, tol) for x, y in zip(a, b))
    if isinstance(a, dict):
        return isinstance(b, dict) and a.keys() == b.keys() and all(close(a[k], b[k], tol) for k in a)
    if isinstance(a, float) or isinstance(b, float):
        return a is not None and b is not None and abs(a - b) <= tol * max(1.0, abs(a))
    return a == b


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    mode = ap.add_mutually_exclusive_group(required=True)
    mode.add_argument("--write", metavar="FIXTURE")
    mode.add_argument("--check", metavar="FIXTURE")
    args = ap.parse_args()
    fixture = make_fixture()
    if args.write:
        with open(args.write, "w") as f:
            json.dump(fixture, f)
            f.write("\n")
        print("wrote", args.write)
        return 0
    with open(args.check) as f:
        committed = json.load(f)
    if not close(fixture, committed, 1e-6):
        print("the committed fixture differs from the reference; regenerate it with --write", file=sys.stderr)
        return 1
    print("losses fixture matches the reference")
    return 0


if __name__ == "__main__":
    sys.exit(main())
