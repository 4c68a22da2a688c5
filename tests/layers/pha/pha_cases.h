// The PHA blocks the tests build: a small written mixer (d_model 8, two query heads of 4 with one kv
// head, cosine logits; GSS F 16, Hs 4, Ns 3; aux FFN 12) and a d_model 16 one for the CUDA tests,
// resolved by the family's own rules, and a block built from it under the caller's ParameterScope.
#pragma once
#include <memory>
#include <nlohmann/json.hpp>

#include "layers/mixer_test_util.h"
#include "layers/pha/pha.h"

namespace hyb {

inline nlohmann::json pha_small_written(const nlohmann::json& changes = nlohmann::json::object()) {
  nlohmann::json m = {
      {"dropout", 0.0},
      {"attn", {{"type", "attention"}, {"num_heads", 2}, {"num_kv_heads", 1}, {"head_dim", 4}, {"logits", "cosine"}}},
      {"gss", {{"expand", 2}, {"dss_dim", 4}, {"dss_state", 3}}},
      {"aux_mlp", {{"type", "swiglu"}, {"intermediate_size", 12}}},
  };
  m.merge_patch(changes);
  return m;
}

inline nlohmann::json pha_resolved(const nlohmann::json& written, int64_t d_model = 8, int64_t num_layers = 2) {
  return resolve_test_mixer("pha", written, {.d_model = d_model, .max_seq_len = 64, .num_layers = num_layers});
}

// d_model 16 with attention heads the CUDA kernels take (4 of 8, 2 kv heads); GSS F 32, Hs 8, Ns 16.
inline nlohmann::json pha_cuda_written(const nlohmann::json& changes = nlohmann::json::object()) {
  nlohmann::json w = pha_small_written({{"attn", {{"num_heads", 4}, {"num_kv_heads", 2}, {"head_dim", 8}}},
                                        {"gss", {{"dss_dim", 8}, {"dss_state", 16}}},
                                        {"aux_mlp", {{"intermediate_size", 24}}}});
  w.merge_patch(changes);
  return w;
}

// Block `index` of a stack of num_layers, with the main FFN `mlp_hidden` wide (0: none).
inline std::unique_ptr<PhaBlock> pha_block(const nlohmann::json& mixer, int64_t d_model = 8, int64_t num_layers = 2,
                                           int64_t index = 0, int64_t mlp_hidden = 12, const uint64_t* rng_step = nullptr) {
  BlockContext ctx;
  ctx.mixer = test_mixer_context({.d_model = d_model, .max_seq_len = 64, .num_layers = num_layers});
  ctx.mixer.layer_index = index;
  ctx.norm_eps = 1e-6;
  ctx.seed = 7;
  ctx.rng_step = rng_step;
  return std::make_unique<PhaBlock>(LayerSpec{mixer, mlp_hidden ? "swiglu" : "none", mlp_hidden}, ctx);
}

}  // namespace hyb
