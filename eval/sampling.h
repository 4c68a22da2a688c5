// Token choice from logits: temperature and top-k sampling for `hybrid generate`, drawn from a
// Philox stream so a seed gives the same text on any machine, and greedy decoding (argmax, ties to
// the lowest id; temperature 0) of a batch of prompts through the model's decode path, which the
// needle test (eval.md 5.2) runs.
//   std::vector<std::vector<int32_t>> out = greedy_decode(model, prompts, 8, device, DType::f32);
#pragma once
#include <span>
#include <vector>

#include "core/rng.h"
#include "layers/model/causal_lm.h"

namespace hyb {

struct SamplingOptions {
  double temperature = 1.0;
  int64_t top_k = 0;  // 0: the whole vocabulary
};

int32_t sample_token(const std::vector<double>& logits, int64_t vocab, const SamplingOptions& opt, RngStream& rng);

// The id of the largest of the first `vocab` logits, the lowest on a tie; a NaN or infinite logit is
// an error, so a broken model is not scored as if it had answered.
int32_t greedy_token(std::span<const double> logits, int64_t vocab);

// Prompts of one length, run as one batch: a prefill of every prompt through the per-layer decode
// states (KV caches, ring buffers, recurrent states), then n_new greedy tokens per prompt, one step
// per token. Only the last position's logits are projected, so a long prompt costs no (B, L, V)
// tensor. Returns n_new ids per prompt.
std::vector<std::vector<int32_t>> greedy_decode(CausalLM& model, const std::vector<std::vector<int32_t>>& prompts,
                                                int64_t n_new, Device device, DType compute);

}  // namespace hyb
