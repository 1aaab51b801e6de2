// tiny_sdar_config.h — the smallest SDAR/Qwen3 layout that still has
// grouped-query attention, for CPU runs: sdar_decode_bench --tiny and the
// model, decoder and training tests.
#pragma once

#include <cstdint>

#include "dice/generator/checkpoint.h"

namespace dice::generator {

/// Returns a random-initialisable SdarConfig: 2 layers, 4 query heads sharing
/// 2 KV heads, hidden `hidden_size` (default 32), head_dim hidden_size / 4,
/// MLP 2 * hidden_size; `vocab` tokens with the mask token the last id
/// (vocab - 1); `max_positions` positions; a tied or untied LM head; every
/// other field SdarConfig's default (block_size 4, rope_theta 10000,
/// rms_norm_eps 1e-6). Sizes are counts (tokens, positions, elements).
/// No errors: the caller keeps vocab >= 1, max_positions >= 1 and
/// hidden_size a positive multiple of 4.
inline SdarConfig TinySdarConfig(int64_t vocab, int64_t max_positions, bool tie_word_embeddings,
                                 int64_t hidden_size = 32) {
  SdarConfig c;
  c.hidden_size = hidden_size;
  c.num_hidden_layers = 2;
  c.num_attention_heads = 4;
  c.num_key_value_heads = 2;
  c.head_dim = hidden_size / 4;
  c.intermediate_size = 2 * hidden_size;
  c.vocab_size = vocab;
  c.mask_token_id = vocab - 1;
  c.max_position_embeddings = max_positions;
  c.tie_word_embeddings = tie_word_embeddings;
  return c;
}

}  // namespace dice::generator
