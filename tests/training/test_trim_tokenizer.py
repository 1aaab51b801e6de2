"""training/scripts/trim_tokenizer.py (issue 21 item 3): a trimmed copy of
the SDAR tokenizer encodes its corpus exactly as the full one (ids mapped
back through trim.json), still encodes and decodes any other text (finer
tokens, down to bytes), is read the same by dice's C++ tokenizer
(`dice tokenize`), and `dice train init` sizes the model from it."""

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

transformers = pytest.importorskip("transformers", reason="transformers is not installed (scripts/test.sh installs it)")

ROOT = Path(__file__).resolve().parents[2]
SDAR = ROOT / "tests" / "data" / "sdar"
CLI = os.environ.get("DICE_CLI", str(ROOT / "build" / "cli" / "dice"))
sys.path.insert(0, str(ROOT / "training" / "scripts"))
import trim_tokenizer  # noqa: E402

UNSEEN = "int main() { return 0; } // Привет 🚀 cudaMallocAsync zzqqxx\n\tß"


@pytest.fixture(scope="module")
def trimmed(tmp_path_factory):
    out = tmp_path_factory.mktemp("trimmed")
    corpus = ROOT / "tests" / "data" / "training" / "tiny_corpus.json"
    assert trim_tokenizer.main(["--tokenizer", str(SDAR), "--corpus", str(corpus), "--field", "cuda_code",
                                "--field", "pytorch_code", "--out", str(out)]) == 0
    texts = [v for r in json.load(open(corpus)) for k, v in r.items() if k in ("cuda_code", "pytorch_code")]
    return out, texts


def _tok(path):
    return transformers.AutoTokenizer.from_pretrained(str(path))


def test_the_corpus_encodes_exactly_as_with_the_full_tokenizer(trimmed):
    out, texts = trimmed
    full, small = _tok(SDAR), _tok(out)
    old = json.load(open(out / "trim.json"))["old_id_of_new_id"]
    assert len(small) < len(full) / 10
    for t in texts:
        assert [old[i] for i in small(t, add_special_tokens=False)["input_ids"]] == \
            full(t, add_special_tokens=False)["input_ids"]


def test_other_text_still_round_trips_with_finer_tokens(trimmed):
    out, _ = trimmed
    full, small = _tok(SDAR), _tok(out)
    ids = small(UNSEEN, add_special_tokens=False)["input_ids"]
    assert small.decode(ids) == UNSEEN
    assert len(ids) >= len(full(UNSEEN, add_special_tokens=False)["input_ids"])
    assert small.mask_token_id == json.load(open(out / "added_tokens.json"))["<MASK>"]  # 151669 before


def test_dice_reads_the_trimmed_files_as_huggingface_does(trimmed):
    out, texts = trimmed
    small = _tok(out)
    for t in (UNSEEN, texts[0]):
        got = subprocess.run([CLI, "tokenize", "--model", str(out)], input=t.encode(), capture_output=True, check=True)
        assert json.loads(got.stdout) == small(t, add_special_tokens=False)["input_ids"]


def test_train_init_sizes_the_model_from_the_trimmed_tokenizer(trimmed, tmp_path):
    out, _ = trimmed
    subprocess.run([CLI, "train", "init", "--tokenizer", str(out), "--out", str(tmp_path / "m"), "--hidden", "32",
                    "--layers", "1", "--heads", "2", "--kv-heads", "1", "--head-dim", "16", "--intermediate", "64"],
                   check=True, capture_output=True)
    cfg = json.load(open(tmp_path / "m" / "config.json"))
    n = len(_tok(out))
    assert cfg["vocab_size"] == (n + 63) // 64 * 64
    assert cfg["mask_token_id"] == json.load(open(out / "added_tokens.json"))["<MASK>"]
    assert (tmp_path / "m" / "trim.json").exists()  # the record travels with the model


def test_a_merge_of_an_unknown_token_is_refused(tmp_path):
    bad = tmp_path / "bad"
    bad.mkdir()
    for f in ("vocab.json", "tokenizer_config.json", "added_tokens.json"):
        (bad / f).write_text((SDAR / f).read_text())
    (bad / "merges.txt").write_text("#version: 0.2\nĠ t\nnotatoken x\n")
    with pytest.raises(ValueError, match="merges.txt line 3"):
        trim_tokenizer.trim(str(bad), ["t"], lambda t: [])


def test_train_init_refuses_a_table_smaller_than_the_tokenizer_and_a_tokenizer_without_mask(trimmed, tmp_path):
    out, _ = trimmed
    small = subprocess.run([CLI, "train", "init", "--tokenizer", str(out), "--out", str(tmp_path / "m"),
                            "--vocab", "300"], capture_output=True, text=True)
    assert small.returncode != 0 and "--vocab 300 is below the tokenizer's" in small.stderr, small.stderr
    assert not (tmp_path / "m" / "config.json").exists()
    nomask = tmp_path / "nomask"
    nomask.mkdir()
    for f in ("vocab.json", "merges.txt"):
        (nomask / f).write_text((out / f).read_text())
    cfg = json.load(open(out / "tokenizer_config.json"))
    cfg.pop("mask_token", None)
    (nomask / "tokenizer_config.json").write_text(json.dumps(cfg))
    r = subprocess.run([CLI, "train", "init", "--tokenizer", str(nomask), "--out", str(tmp_path / "m2")],
                       capture_output=True, text=True)
    assert r.returncode != 0 and "has no mask_token" in r.stderr, r.stderr
