// tiny_sdar_config.h — shared by the model, decoder and training tests: the
// smallest SDAR/Qwen3 layout that still has grouped-query attention.
#pragma once

#include <cstdint>

#include "dice/generator/checkpoint.h"

namespace dice::testing {

/// hidden 32, 2 layers, 4 query heads sharing 2 KV heads of head_dim 8, MLP
/// 64; `vocab` tokens with the mask token the last id; `max_positions`
/// positions; tied or untied LM head; block_size SdarConfig's default (4).
inline generator::SdarConfig TinySdarConfig(int64_t vocab, int64_t max_positions, bool tie_word_embeddings) {
  generator::SdarConfig c;
  c.hidden_size = 32;
  c.num_hidden_layers = 2;
  c.num_attention_heads = 4;
  c.num_key_value_heads = 2;
  c.head_dim = 8;
  c.intermediate_size = 64;
  c.vocab_size = vocab;
  c.mask_token_id = vocab - 1;
  c.max_position_embeddings = max_positions;
  c.tie_word_embeddings = tie_word_embeddings;
  return c;
}

}  // namespace dice::testing
