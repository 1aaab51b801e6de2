"""Tokens per kernel, byte-level vs the SDAR (Qwen2) BPE tokenizer (issue 21
item 3): for the DICE-RL files' CUDA kernels, infilling middles and PyTorch
prompts, bytes and BPE tokens per text (median), bytes per BPE token, the
distinct BPE ids a trimmed vocabulary would need, and how much of a
held-back part of the kernels the ids of the rest cover. CPU only.
Usage: python3 training/scripts/token_counts.py [--data ../shared/data]
(needs `transformers`, which scripts/test.sh installs)."""
import argparse, json, statistics

from transformers import AutoTokenizer


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--data", default="../shared/data")
    a = ap.parse_args()
    tok = AutoTokenizer.from_pretrained(f"{a.data}/sdar")
    e2e = json.load(open(f"{a.data}/dice-rl/end_to_end_kernel_generation_4000.json"))
    inf = json.load(open(f"{a.data}/dice-rl/kernel_infilling_evaluation.json"))
    enc = lambda t: tok(t, add_special_tokens=False)["input_ids"]  # noqa: E731
    used_all = set()
    for name, texts in (("kernels (infilling set, whole cuda_code)", [x["cuda_code"] for x in inf]),
                        ("infilling middles", [x["middle"] for x in inf]),
                        ("PyTorch prompts (end-to-end set)", [x["pytorch_code"] for x in e2e])):
        ids = [enc(t) for t in texts]
        nbytes = [len(t.encode()) for t in texts]
        used = {i for s in ids for i in s}
        used_all |= used
        print(json.dumps({"set": name, "texts": len(texts), "bytes_median": statistics.median(nbytes),
                          "bpe_tokens_median": statistics.median(len(s) for s in ids),
                          "bytes_per_bpe_token": round(sum(nbytes) / sum(len(s) for s in ids), 2),
                          "distinct_bpe_ids": len(used)}))
    kernels = [x["cuda_code"] for x in inf]
    seen = {i for t in kernels[:70] for i in enc(t)}
    rest = [i for t in kernels[70:] for i in enc(t)]
    print(json.dumps({"distinct_bpe_ids_all_sets": len(used_all), "vocab_size": len(tok),
                      "ids_of_kernels_0_69": len(seen),
                      "share_of_kernels_70_98_tokens_covered": round(sum(i in seen for i in rest) / len(rest), 4)}))


if __name__ == "__main__":
    main()
