// mid_sdar_config.h — the mid-sized SDAR layout of the decoder's GPU tests
// (fused kernels, served groups): wide enough that every fused kernel's
// launch config is exercised (head_dim 128, GQA 8:2), small enough to build
// in a second.
#pragma once

#include "dice/generator/checkpoint.h"
#include "dice/generator/tiny_sdar_config.h"

namespace dice::testing {

/// Returns TinySdarConfig(512 tokens, 256 positions, untied) widened to
/// hidden 512, 3 layers, 8 query heads sharing 2 KV heads, head_dim 128,
/// MLP 1024. No errors.
inline generator::SdarConfig MidSdarConfig() {
  generator::SdarConfig c = generator::TinySdarConfig(512, 256, /*tie_word_embeddings=*/false);
  c.hidden_size = 512;
  c.num_hidden_layers = 3;
  c.num_attention_heads = 8;
  c.num_key_value_heads = 2;
  c.head_dim = 128;
  c.intermediate_size = 1024;
  return c;
}

}  // namespace dice::testing
