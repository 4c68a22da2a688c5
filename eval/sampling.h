// Token sampling for `hybrid generate`: temperature and top-k over one row of logits, drawn from a
// Philox stream so a seed gives the same text on any machine. temperature 0 is greedy (argmax,
// ties to the lowest id).
#pragma once
#include <vector>

#include "core/rng.h"

namespace hyb {

struct SamplingOptions {
  double temperature = 1.0;
  int64_t top_k = 0;  // 0: the whole vocabulary
};

int32_t sample_token(const std::vector<double>& logits, int64_t vocab, const SamplingOptions& opt, RngStream& rng);

}  // namespace hyb
