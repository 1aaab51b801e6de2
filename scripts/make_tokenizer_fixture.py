#!/usr/bin/env python3
"""Writes tests/data/tokenizer_fixture.json: strings + reference token ids.

The reference is the Hugging Face tokenizer built from the same files the C++
dice::generator::Tokenizer reads (tests/data/sdar: vocab.json, merges.txt,
tokenizer_config.json), via transformers.AutoTokenizer (Qwen2Tokenizer on the
`tokenizers` backend: NFC, Qwen2 split, byte-level BPE; added tokens from
added_tokens_decoder, so `<|MASK|>` = 151669 and `<MASK>` is plain text).

  pip install tokenizers transformers
  python3 scripts/make_tokenizer_fixture.py [--dir tests/data/sdar] [--out tests/data/tokenizer_fixture.json]
  python3 scripts/make_tokenizer_fixture.py --check   # CI: fixture still equals the reference

Each case: {"text": str, "ids": [int], "decoded": str}; `decoded` is
tokenizer.decode(ids) (the NFC form of the non-special parts of text).
"""
import argparse
import json
import os
import random
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

CUDA_SNIPPETS = [
    '#include <cuda_runtime.h>\n#include <torch/extension.h>\n',
    '__global__ void add_kernel(const float* __restrict__ a, const float* __restrict__ b, float* out, int n) {\n'
    '    int idx = blockIdx.x * blockDim.x + threadIdx.x;\n    if (idx < n) out[idx] = a[idx] + b[idx];\n}\n',
    'extern "C" __global__ void k(float4* x) { x[threadIdx.x].w *= 2.0f; }',
    'dim3 grid((n + 255) / 256);\nadd_kernel<<<grid, 256, 0, stream>>>(a.data_ptr<float>(), b.data_ptr<float>(), out.data_ptr<float>(), n);',
    '    __shared__ float smem[32][33];\n    smem[threadIdx.y][threadIdx.x] = in[row * N + col];\n    __syncthreads();',
    'float v = __shfl_down_sync(0xffffffff, v, 16);\nfor (int off = 8; off > 0; off >>= 1) v += __shfl_xor_sync(0xFFFFFFFFu, v, off);',
    'torch::Tensor forward(torch::Tensor x) {\n  TORCH_CHECK(x.is_cuda(), "x must be CUDA");\n  auto y = torch::empty_like(x);\n  return y;\n}',
    'PYBIND11_MODULE(TORCH_EXTENSION_NAME, m) {\n  m.def("forward", &forward, "forward (CUDA)");\n}\n',
    'template <typename scalar_t, int kVec = 4>\n__device__ __forceinline__ scalar_t relu(scalar_t v) { return v > scalar_t(0) ? v : scalar_t(0); }',
    'cudaError_t err = cudaGetLastError();\nif (err != cudaSuccess) { printf("CUDA error: %s\\n", cudaGetErrorString(err)); }',
    'const int64_t numel = x.numel();  // 1ULL << 31\nconst int threads = 1024;\nconst int blocks = (numel + threads - 1) / threads;',
    '#pragma unroll\nfor (int i = 0; i < 8; ++i) {\n\tacc = fmaf(a[i], b[i], acc);\n}',
    'asm volatile("mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7};" : "=f"(d0));',
    'auto opts = torch::TensorOptions().dtype(torch::kFloat16).device(torch::kCUDA, 0);',
    '__half2 h = __floats2half2_rn(1.0e-3f, -2.5E+4f);\nnv_bfloat16 b = __float2bfloat16(3.14159265358979f);',
    '    } // namespace\n\n\n}  // extern "C"\n',
]

PY_SNIPPETS = [
    'import torch\nimport torch.nn as nn\n\nclass Model(nn.Module):\n    def __init__(self):\n        super().__init__()\n\n'
    '    def forward(self, x):\n        return torch.relu(x)\n',
    'class ModelNew(nn.Module):\n    def __init__(self) -> None:\n        super(ModelNew, self).__init__()\n'
    '        self.op = load_inline(name="op", cpp_sources=cpp, cuda_sources=src, functions=["forward"], verbose=False)\n',
    'batch_size = 16\ndim = 16384\n\ndef get_inputs():\n    x = torch.randn(batch_size, dim)\n    return [x]\n\ndef get_init_inputs():\n    return []  # no params\n',
    'def f(a, b=2, *args, **kw):\n\t"""Doc string."""\n\treturn {k: v for k, v in kw.items() if v is not None}\n',
    "x = [1, 2, 3]; y = x[::-1]; z = f'{x!r:>10}'\nprint(y, z, sep='\\t', end='\\r\\n')",
    'if __name__ == "__main__":\n    main()\n',
    'lambda s: s.strip().split(",")  # returns list[str]',
    '    @torch.no_grad()\n    def step(self):\n        for p in self.params:\n            p.data.add_(p.grad, alpha=-1e-3)\n',
    'with open("a.txt", "rb") as fh:\n    data = fh.read()\n\n\n\n',
    'assert out.shape == (128, 4096), f"bad shape {out.shape}"',
]

CHAT = [
    '<|im_start|>system\nYou are a helpful assistant.<|im_end|>\n<|im_start|>user\nWrite a CUDA kernel.<|im_end|>\n<|im_start|>assistant\n',
    '<|im_start|>assistant\n<think>\n\n</think>\n\n```cuda\n__global__ void k() {}\n```<|im_end|>',
    '<|im_start|>user\n<tool_response>\n{"ok": true}\n</tool_response><|im_end|>\n',
    '<|MASK|><|MASK|><|MASK|><|MASK|>',
    'x = <|MASK|> + <MASK>;',
    '<MASK>',
    '<|MASK|>',
    ' <|MASK|> ',
    '<|MASK|>\n\n<|MASK|>',
    '<|endoftext|>',
    'abc<|endoftext|>def',
    '<|im_start|><|im_end|><|im_start|>',
    '<|im_start|>user\n  leading spaces<|im_end|>',
    '<|fim_prefix|>def f():\n<|fim_suffix|>\n    return 1<|fim_middle|>',
    '<|repo_name|>dice<|file_sep|>runtime/src/ir.cc',
    '<tool_call>\n{"name": "run", "arguments": {}}\n</tool_call>',
    '<|vision_start|><|image_pad|><|vision_end|><|video_pad|><|vision_pad|>',
    '<|object_ref_start|>a<|object_ref_end|><|box_start|>(1,2)<|box_end|><|quad_start|><|quad_end|>',
    '<|im_start', '|im_end|>', '<|MASK', 'MASK|>', '<|MASK|', '<||MASK|>', '<|mask|>',
    '<|im_start|>\u00e9\u0301<|im_end|>',
    '<think>reasoning</think>answer',
    '<|im_end|>\u0301',
    '\u0065<|MASK|>\u0301',
]

WHITESPACE = [
    ' ', '  ', '   ', '\t', '\t\t', '\n', '\n\n', '\r\n', '\r\n\r\n', ' \n', '\n ', ' \n ', '  \n  ',
    'a ', 'a  ', 'a   ', 'a\n', 'a \n', 'a\t\n', ' a', '  a', '   a', '\ta', '\n\na', 'a  b', 'a   b',
    'a \t b', 'a\n\n\nb', 'a \n\n b', 'end with tab\t', 'end with spaces   ', 'line1\nline2\n',
    '\u00a0x', 'x\u00a0\u00a0y', '\u3000\u3000全角', 'a\u2003b', 'a\u2028b', 'a\u0085b', '\u200bzero\u200bwidth',
    '\ufeffBOM', 'x \u00a0', '\x0b\x0c', '  \r  ', '\r', 'a\rb', '\n\t\n\t', ' !', '  !!', ' \n!',
    '\t\t\treturn x;\n', '    \n    \n', 'a' + ' ' * 40 + 'b', '\n' * 17,
]

DIGITS = [
    '0', '7', '42', '123', '1234', '12345678901234567890', '3.14159', '-0.5e-10', '1,000,000', '0x7fffffff',
    '2024-11-29', 'v1.2.3', 'sm_90a', 'a1b2c3', '１２３', '٣٤٥', '²³', 'Ⅻ', '½ + ¼', '①②', '1st 2nd 3rd 4th',
    'int32_t x = -2147483648;', '1e9+7', '00000', '9' * 64,
]

CONTRACTIONS = [
    "don't", "DON'T", "Don'T", "I'm", "I'M", "you're", "YOU'RE", "we've", "WE'VE", "she'll", "SHE'LL",
    "he'd", "HE'D", "it's", "IT'S", "it'S", "'s", "'S", "'t", "'re", "'Re", "'ll", "'lL", "'d", "'x",
    "rock 'n' roll", "''", "'", "'''s", "O'Neil's", "l'été", "can't've", "y'all'd've", "'ſ", "'K",
    "the cat's   hat", "x's\n", "'s'", "’s curly",
]

CJK = [
    '你好，世界！', '深度学习编译器', '日本語のテキストです。', 'カタカナとひらがな', '한국어 텍스트', '混合mixed文本text',
    '中文 English 混排 123', '「引用」『二重』', '𠀀𠀁 (CJK ext B)', '龍が如く', '漢字\n改行\n',
]

EMOJI = [
    '😀', '😀😃😄', 'hi 👋🏽', '👨\u200d👩\u200d👧\u200d👦', '🏳️\u200d🌈', '❤️', '🇩🇪🇯🇵', '✅ done', 'fire🔥fire',
    '👩🏿\u200d💻 codes', '🤖\n🤖', ' 🚀🚀', '⚡️kernel⚡️', '1️⃣2️⃣',
]

COMBINING = [
    'e\u0301', 'caf\u0065\u0301', 'café', 'A\u030a', 'Å', '\u212b', 'n\u0303o', 'o\u0308\u0304', 'a\u0323\u0302',
    '\u1e9b\u0323', '\ufb01', '\u0301alone', ' \u0301', 'x\u0301\u0301\u0301', 'Ⅸ', '\u212a', '\u00c5\u0301',
    '\u1100\u1161\u11a8', '\uac00\u11a8', 'ﾃｽﾄ', 'ｶﾞ', 'e\u0301 \u0065\u0301',
]

OTHER_SCRIPTS = [
    'مرحبا بالعالم', 'العربية 123 نص', 'שלום עולם', 'Привет, мир!', 'Ελληνικά', 'हिन्दी भाषा', 'ภาษาไทย',
    'Ünïcödé Tëxt', 'ß ẞ ǅ ǈ', 'İstanbul ıi', 'ﷺ', 'ab\u200ccd', 'x\u200dy', '\u0600\u0601',
]

CONTROL = [
    '\x00', 'a\x00b', '\x01\x02\x03', '\x1b[31mred\x1b[0m', '\x7f', 'tab\there', 'bell\x07', '\x08\x08',
    'a\x1fb', '\u0080\u009f', '\ud7ff', '\ue000', '\uffff', '\U0010ffff', '\ufffd',
]

# Characters whose classification depends on the Unicode version: letters and
# digits new in Unicode 15.1/16.0 (the reference's regex knows them), and
# combining marks newer than Unicode 9.0 (the reference's NFC does not reorder them).
UNICODE_VERSIONS = [
    '\u1c89<S', 'x\u1c8a!', '^\u3005\U000134b7,', 'r\U000134b3@', '\U0002ebf0\U0002ebf1 CJK-I', '(\U00010d40)',
    '\U00016130\U00016131', 'a\u1ac1\u0329', 'a\u0329\u1ac1', 'e\u1ac3\u0301', 'e\u0301\u1ac3', '\u0898\u0334x',
    'n\u1dfa\u0316', 'o\u1ac1\u0301', '\U0001e5d0\U0001e5f1', 'x\U000105c9y',
]

MISC = [
    '', 'a', 'hello', 'Hello, world!', 'The quick brown fox jumps over the lazy dog.', 'x=y+z*w/v%u',
    '((a))[b]{c}<d>', '->', '::', '...', '!!!???', '#!/bin/bash\nset -euo pipefail\n', '$HOME/~user',
    'https://github.com/org/repo?x=1&y=2#frag', 'foo@bar.com', '`code` **bold** _it_', '| a | b |\n|---|---|',
    '# Heading\n\n- item\n- item\n', 'C:\\Windows\\System32', '"quoted"', "'single'", '{"key": [1, 2, null]}',
    '<html><body>hi</body></html>', '-- comment', '/* block */', '// line', 'a_b_c', 'CamelCaseName',
    'snake_case_name', 'SCREAMING_CASE', '__init__', '____', '-----', '=====', '.....', '\\n\\t',
]


def random_cases(n, seed=1234):
    """Random mixes of the pieces above: exercises boundaries between classes."""
    rng = random.Random(seed)
    atoms = (['a', 'Z', 'é', '1', '23', ' ', '  ', '\n', '\t', '.', '!', "'s", "'LL", '中', '😀', '\u0301', '<|MASK|>',
              '<MASK>', '<|im_end|>', '\u00a0', '\r\n', '_', '(', ')', 'x\u0301', 'Ω', '٣', ' \n'])
    out = []
    for _ in range(n):
        out.append(''.join(rng.choice(atoms) for _ in range(rng.randint(1, 14))))
    return out


def all_strings():
    groups = [CUDA_SNIPPETS, PY_SNIPPETS, CHAT, WHITESPACE, DIGITS, CONTRACTIONS, CJK, EMOJI, COMBINING,
              OTHER_SCRIPTS, CONTROL, UNICODE_VERSIONS, MISC, random_cases(60)]
    seen, out = set(), []
    for g in groups:
        for s in g:
            if s not in seen:
                seen.add(s)
                out.append(s)
    # A long realistic document, to exercise the word cache and long inputs.
    doc = '\n\n'.join(CUDA_SNIPPETS + PY_SNIPPETS)
    out.append(doc)
    return out


def build_cases(tok_dir):
    from transformers import AutoTokenizer
    tok = AutoTokenizer.from_pretrained(tok_dir)
    # The reference must follow tokenizer_config.json: <|MASK|> is the mask token, <MASK> is text.
    assert tok.convert_tokens_to_ids('<|MASK|>') == 151669, 'reference does not know <|MASK|>'
    assert tok.encode('<MASK>', add_special_tokens=False) != [151669], 'reference treats <MASK> as a token'
    cases = []
    for s in all_strings():
        ids = tok.encode(s, add_special_tokens=False)
        cases.append({'text': s, 'ids': ids, 'decoded': tok.decode(ids, skip_special_tokens=False)})
    meta = {'tokenizer_class': type(tok).__name__, 'mask_token_id': tok.mask_token_id,
            'eos_token_id': tok.eos_token_id, 'pad_token_id': tok.pad_token_id, 'vocab_size': len(tok)}
    return meta, cases


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument('--dir', default=os.path.join(ROOT, 'tests', 'data', 'sdar'))
    ap.add_argument('--out', default=os.path.join(ROOT, 'tests', 'data', 'tokenizer_fixture.json'))
    ap.add_argument('--check', action='store_true', help='compare with the committed fixture instead of writing')
    args = ap.parse_args()
    meta, cases = build_cases(args.dir)
    if args.check:
        with open(args.out, encoding='utf-8') as fh:
            old = json.load(fh)
        bad = [c['text'] for c, o in zip(cases, old['cases']) if c != o]
        if len(old['cases']) != len(cases) or bad:
            print(f'fixture differs from the reference: {len(bad)} cases, e.g. {bad[:3]!r}', file=sys.stderr)
            return 1
        print(f'fixture matches the reference ({len(cases)} strings)')
        return 0
    with open(args.out, 'w', encoding='utf-8') as fh:
        json.dump({'meta': meta, 'cases': cases}, fh, ensure_ascii=True, indent=0)
        fh.write('\n')
    print(f'wrote {len(cases)} cases to {args.out}')
    return 0


if __name__ == '__main__':
    sys.exit(main())
