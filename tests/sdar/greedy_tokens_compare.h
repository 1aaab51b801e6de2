// greedy_tokens_compare.h — shared by the SDAR GPU tests that prove a faster
// decoder path exact: greedy static decoding of one fixed prompt with two
// models, eager and with CUDA graphs, must give the same tokens.
#pragma once

#include <gtest/gtest.h>

#include <cstdint>
#include <initializer_list>
#include <vector>

#include "dice/generator/diffusion_decoder.h"
#include "dice/generator/sdar_model.h"

namespace dice::testing {

/// Decodes 24 new tokens of a fixed 7-token prompt (static remasking, no
/// EOS) with `a` and with `b`, for each sample count in `samples` and with
/// CUDA graphs off then on; expects equal tokens (a test failure names the
/// sample count and the graph setting; a decode error fails the test).
inline void ExpectSameGreedyTokens(const generator::SdarModel& a, const generator::SdarModel& b,
                                   std::initializer_list<int64_t> samples) {
  for (const int64_t n : samples) {
    for (const bool graphs : {false, true}) {
      generator::DecodeOptions o;
      o.max_new_tokens = 24;
      o.remasking = generator::Remasking::kStatic;
      o.eos_ids.clear();
      o.num_samples = n;
      o.cuda_graphs = graphs;
      const std::vector<int32_t> prompt = {5, 9, 2, 77, 31, 8, 100};
      auto x = generator::Decode(a, prompt, o), y = generator::Decode(b, prompt, o);
      ASSERT_TRUE(x.ok() && y.ok()) << x.status().ToString() << y.status().ToString();
      EXPECT_EQ(x->tokens, y->tokens) << "samples " << n << " graphs " << graphs;
    }
  }
}

}  // namespace dice::testing
