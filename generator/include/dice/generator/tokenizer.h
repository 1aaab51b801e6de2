// dice/generator/tokenizer.h — the Qwen2/SDAR byte-level BPE tokenizer.
//
// Tokenizer turns UTF-8 text into the token ids an SDAR/DICE checkpoint was
// trained on and back, token-for-token equal to the Hugging Face tokenizer
// built from the same files (Qwen2TokenizerFast: NFC normaliser, the Qwen2
// pre-tokenizer split, byte-level BPE, byte-level decoder). Files read from a
// checkpoint directory:
//   vocab.json             token string (byte-level alphabet) -> id
//   merges.txt             BPE merges, one "left right" pair a line; the line
//                          order is the merge rank ("#version" header skipped)
//   tokenizer_config.json  added_tokens_decoder: id -> content + lstrip/rstrip/
//                          single_word/normalized/special flags; mask_token,
//                          eos_token, pad_token names
//   tokenizer.json         optional; when present its "added_tokens" are read
//                          too (tokenizer_config.json wins for an id in both)
// added_tokens.json and special_tokens_map.json are not read: they call the
// mask token "<MASK>", while the config (which the reference follows) names
// "<|MASK|>" = 151669; to this tokenizer "<MASK>" is plain text.
//
// Encode pipeline (as the HF `tokenizers` library does it):
//   1. added tokens with normalized=false are matched on the raw text,
//      leftmost-longest, honouring lstrip/rstrip/single_word, and become one
//      id each;
//   2. each remaining segment is NFC-normalised (ICU), then split by added
//      tokens with normalized=true;
//   3. each remaining piece is split by the Qwen2 pre-tokenizer pattern
//        (?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}
//        | ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+
//      (a hand-written scanner; \p{L}/\p{N} are Unicode general categories
//      and \s the Unicode White_Space property, both from ICU);
//   4. every word is mapped byte-by-byte to the GPT-2 byte alphabet and merged
//      by BPE rank; results are cached per word.
// Invalid UTF-8 in the input is replaced by U+FFFD (one per maximal invalid
// subpart) before step 2; HF tokenizers never see such input.
//
// Thread-safety: a loaded Tokenizer is immutable apart from its word cache,
// which is guarded by a mutex; Encode/Decode may be called concurrently.
// Movable, not copyable.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "dice/core/status.h"

namespace dice::generator {

class Tokenizer {
 public:
  /// Loads vocab.json, merges.txt and tokenizer_config.json (and
  /// tokenizer.json when present) from `dir`.
  /// Errors: kNotFound naming the missing file; kCorrupt naming the file and,
  /// for merges.txt, the 1-based line (a line that is not two tokens, a token
  /// not in the vocabulary); kCorrupt for malformed JSON (parser message) or a
  /// vocab/added-token entry of the wrong type; kIoError when a file cannot be
  /// read.
  static Expected<Tokenizer> Load(const std::string& dir);

  Tokenizer(Tokenizer&&) noexcept;
  Tokenizer& operator=(Tokenizer&&) noexcept;
  Tokenizer(const Tokenizer&) = delete;
  Tokenizer& operator=(const Tokenizer&) = delete;
  ~Tokenizer();

  /// UTF-8 text -> token ids. Added tokens (special or not) in the text are
  /// always matched as single tokens (HF split_special_tokens=false). No BOS
  /// or EOS is added. Never fails.
  std::vector<int32_t> Encode(std::string_view text) const;

  /// Token ids -> UTF-8 text: added tokens give their content, BPE tokens
  /// their bytes; a run of BPE tokens whose bytes are not valid UTF-8 gets
  /// U+FFFD per maximal invalid subpart (HF errors="replace"). Ids that are
  /// neither in the vocabulary nor added tokens are skipped.
  std::string Decode(const std::vector<int32_t>& ids) const;

  /// Text of one id (BPE token bytes or added-token content); empty when the
  /// id is unknown. The bytes may be an incomplete UTF-8 sequence.
  std::string TokenBytes(int32_t id) const;

  /// Id of a token string as it appears in vocab.json or as added-token
  /// content; -1 when absent.
  int32_t TokenToId(std::string_view token) const;

  /// The config's mask_token id (151669 `<|MASK|>` for SDAR); -1 if none.
  int32_t mask_id() const;
  /// The config's eos_token id (151643 `<|endoftext|>`); -1 if none.
  int32_t eos_id() const;
  /// The config's pad_token id (151643 for SDAR); -1 if none.
  int32_t pad_id() const;
  /// Ids that end generation: eos_id() plus `<|im_end|>` and `<|endoftext|>`
  /// when the vocabulary has them ({151643, 151645} for SDAR), ascending.
  std::vector<int32_t> eos_ids() const;
  /// True if `id` is an added token flagged special in the config.
  bool IsSpecial(int32_t id) const;
  /// One past the largest id (vocab.json or added token): 151670 for SDAR.
  /// The model's embedding table (151936) may be larger.
  int32_t vocab_size() const;

 private:
  struct Impl;
  explicit Tokenizer(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

}  // namespace dice::generator
