"""A trimmed copy of a byte-level BPE tokenizer (the SDAR/Qwen2 files: vocab.json,
merges.txt, tokenizer_config.json, added_tokens.json) that keeps only the
tokens a corpus uses (issue 21 item 3: a trimmed vocabulary, recorded).

Kept: the 256 byte-alphabet tokens, every BPE token the corpus encodes to
with the full tokenizer, and, recursively, the two parts of every kept
token's merge (so each kept token is reachable by the kept merges). The
merges kept are those whose result is kept, in their original order (rank).
BPE with that subset encodes any text: a merge whose result was dropped
never fires, so such a token stays as its finer kept parts, down to bytes.
Decoding is unchanged (the same token strings). Kept BPE tokens get ids
0..K-1 in their original order; the added tokens (specials, <MASK>) follow
from K on, in their original order. `trim.json` records the corpus, the
counts and each new id's original id.

Usage: python3 training/scripts/trim_tokenizer.py --tokenizer ../shared/data/sdar \\
           --corpus FILE.jsonl [...] --field text [...] --out DIR
A corpus file is JSON (a list of objects) or JSONL; every string value of
the named --field(s) is encoded (default: every string value of each object).
Needs `transformers` (for the full tokenizer's encoding).
Errors: a missing file or a token of merges.txt not in vocab.json exits 2 with the cause.
"""
import argparse
import json
import os
import sys


def bytes_alphabet() -> set:
    """GPT-2's byte-to-unicode map (what byte-level BPE vocabularies spell bytes with)."""
    bs = list(range(ord("!"), ord("~") + 1)) + list(range(ord("¡"), ord("¬") + 1)) + list(range(ord("®"), ord("ÿ") + 1))
    cs, n = bs[:], 0
    for b in range(256):
        if b not in bs:
            bs.append(b)
            cs.append(256 + n)
            n += 1
    return {chr(c) for c in cs}


def corpus_texts(paths, fields):
    for p in paths:
        with open(p) as f:
            text = f.read()
        try:
            data = json.loads(text)
            rows = data if isinstance(data, list) else [data]
        except ValueError:
            rows = [json.loads(line) for line in text.splitlines() if line.strip()]
        for r in rows:
            if isinstance(r, str):
                yield r
            elif isinstance(r, dict):
                for k, v in r.items():
                    if isinstance(v, str) and (not fields or k in fields):
                        yield v


def trim(tok_dir, texts, encode):
    """Returns (vocab {token: new id}, merges [lines], added {content: new id}, old_of_new [ids], stats)."""
    vocab = json.load(open(os.path.join(tok_dir, "vocab.json")))
    with open(os.path.join(tok_dir, "merges.txt")) as f:
        lines = f.read().splitlines()
    header = [l for l in lines[:1] if l.startswith("#")]
    merges = [l.split(" ") for l in lines[len(header):] if l.strip()]
    parts = {}
    for i, m in enumerate(merges):
        if len(m) != 2 or m[0] not in vocab or m[1] not in vocab:
            raise ValueError(f"merges.txt line {i + 1 + len(header)}: '{' '.join(m)}' is not two tokens of vocab.json")
        parts.setdefault(m[0] + m[1], (m[0], m[1]))
    id_to_token = {i: t for t, i in vocab.items()}
    alphabet = bytes_alphabet()
    keep = {t for t in vocab if t in alphabet}
    used = 0
    for text in texts:
        for i in encode(text):
            t = id_to_token.get(i)
            if t is not None:
                keep.add(t)
                used += 1
    stack = list(keep)
    while stack:  # the closure under merge parts
        t = stack.pop()
        for p in parts.get(t, ()):
            if p not in keep:
                keep.add(p)
                stack.append(p)
    kept = sorted(keep, key=lambda t: vocab[t])
    new_vocab = {t: i for i, t in enumerate(kept)}
    new_merges = header + [f"{a} {b}" for a, b in merges if a + b in keep and a in keep and b in keep]
    added = json.load(open(os.path.join(tok_dir, "added_tokens.json")))
    new_added = {c: len(kept) + k for k, (c, _) in enumerate(sorted(added.items(), key=lambda kv: kv[1]))}
    old_of_new = [vocab[t] for t in kept] + [added[c] for c in sorted(added, key=lambda c: added[c])]
    stats = {"bpe_tokens_kept": len(kept), "added_tokens": len(new_added), "vocab_size": len(kept) + len(new_added),
             "original_vocab_size": len(vocab) + len(added), "merges_kept": len(new_merges) - len(header),
             "original_merges": len(merges), "corpus_tokens": used}
    return new_vocab, new_merges, new_added, old_of_new, stats


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--tokenizer", required=True)
    ap.add_argument("--corpus", nargs="+", required=True)
    ap.add_argument("--field", action="append", default=[])
    ap.add_argument("--out", required=True)
    a = ap.parse_args(argv)
    try:
        from transformers import AutoTokenizer

        full = AutoTokenizer.from_pretrained(a.tokenizer)
        texts = list(corpus_texts(a.corpus, set(a.field)))
        vocab, merges, added, old_of_new, stats = trim(
            a.tokenizer, texts, lambda t: full(t, add_special_tokens=False)["input_ids"])
        cfg = json.load(open(os.path.join(a.tokenizer, "tokenizer_config.json")))
    except (OSError, ValueError) as e:
        print(f"trim_tokenizer: {e}", file=sys.stderr)
        return 2
    old_to_new_added = {old: added[c] for c, old in json.load(open(os.path.join(a.tokenizer, "added_tokens.json"))).items()}
    cfg["added_tokens_decoder"] = {str(old_to_new_added[int(k)]): v for k, v in cfg.get("added_tokens_decoder", {}).items()
                                   if int(k) in old_to_new_added}
    cfg.pop("auto_map", None)
    os.makedirs(a.out, exist_ok=True)
    with open(os.path.join(a.out, "vocab.json"), "w") as f:
        json.dump(vocab, f, ensure_ascii=False)
    with open(os.path.join(a.out, "merges.txt"), "w") as f:
        f.write("\n".join(merges) + "\n")
    with open(os.path.join(a.out, "added_tokens.json"), "w") as f:
        json.dump(added, f, ensure_ascii=False, indent=2)
    with open(os.path.join(a.out, "tokenizer_config.json"), "w") as f:
        json.dump(cfg, f, ensure_ascii=False, indent=2)
    with open(os.path.join(a.out, "trim.json"), "w") as f:
        json.dump({"from": os.path.abspath(a.tokenizer), "corpus": a.corpus, "fields": a.field, "texts": len(texts),
                   **stats, "old_id_of_new_id": old_of_new}, f)
    print(json.dumps({"out": a.out, "texts": len(texts), **stats}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
