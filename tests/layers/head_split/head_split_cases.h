// What the head_split tests share: the base blocks T and M the sizes derive from, the resolved mixer,
// and the fusion variants with random inputs (f64 CPU tensors) for the finite-difference and parity
// checks of head_split_fusion.h.
//   json m = head_split_resolved({{"preset", "hymba"}});            // d_model 16, the small blocks
//   for (const FusionCase& c : fusion_cases(1)) gradcheck(c.fn(), c.inputs);
#pragma once
#include <cmath>
#include <string>
#include <vector>

#include "autograd/gradcheck.h"
#include "layers/head_split/head_split_fusion.h"
#include "layers/mixer_test_util.h"

namespace hyb {

inline nlohmann::json head_split_blocks(const nlohmann::json& t, const nlohmann::json& m) {
  return {{"T", {{"mixer", t}}}, {"M", {{"mixer", m}}}};
}

// intra_hybrid.md 10.6's small X block at d_model 16: T has 4 heads in 2 kv groups of head_dim 4, M 4
// heads of headdim 8 and d_state 4, so the default X block is n_T 2, n_kvT 1, Dqk 4, Dv 8, H_X 2,
// d_ssmX 16: D_T = D_M = 16.
inline nlohmann::json head_split_small_blocks() {
  return head_split_blocks({{"type", "attention"}, {"num_heads", 4}, {"num_kv_heads", 2}, {"head_dim", 4}},
                           {{"type", "mamba2"}, {"d_ssm", 32}, {"headdim", 8}, {"d_state", 4}});
}

// The same with T's kv groups of one head, so that 3:1 splits it: n_T 3, n_kvT 3, H_X 1 (D_T 24, D_M 8).
inline nlohmann::json head_split_ungrouped_blocks() {
  return head_split_blocks({{"type", "attention"}, {"num_heads", 4}, {"num_kv_heads", 4}, {"head_dim", 4}},
                           {{"type", "mamba2"}, {"d_ssm", 32}, {"headdim", 8}, {"d_state", 4}});
}

inline nlohmann::json head_split_resolved(const nlohmann::json& written,
                                          const nlohmann::json& blocks = head_split_small_blocks(), int64_t d_model = 16,
                                          int64_t num_layers = 1) {
  return resolve_test_mixer("head_split", written, {.d_model = d_model, .num_layers = num_layers, .blocks = blocks});
}

// One fusion variant: its config and inputs o_T (B, T, D_T), o_M (B, T, D_M), then the weights it reads
// in the order of FusionWeights.
struct FusionCase {
  std::string name;
  FusionConfig cfg;
  std::vector<Tensor> inputs;

  std::vector<Var> run(const std::vector<Var>& x) const {
    FusionWeights w;
    size_t i = 2;
    if (cfg.scalar == FusionScalar::scale) {
      w.attn_scale = x[i++];
      w.ssm_scale = x[i++];
    }
    if (cfg.scalar == FusionScalar::gate) w.gate_logit = x[i++];
    if (cfg.out_proj == 1) {
      w.o_proj = x[i++];
    } else {
      w.attn_o_proj = x[i++];
      w.ssm_out_proj = x[i++];
    }
    return {fuse_halves(x[0], x[1], w, cfg)};
  }
};

// Every variant the config accepts (norm x scalar x fusion x out_proj), with equal halves (D_T = D_M)
// and, where the fusion allows it, unequal ones: B 2, T, d, heads of attn_head_dim and ssm_head_dim.
struct FusionShape {
  int64_t B = 2, T = 3, d = 5, attn_head_dim = 3, ssm_head_dim = 2, D_T = 6, D_M_unequal = 4;
};

inline std::vector<FusionCase> fusion_cases(const FusionShape& s, uint64_t seed) {
  const char* norms[] = {"none", "group"};
  const char* scalars[] = {"none", "scale", "gate"};
  const char* ops[] = {"add", "diff", "conc"};
  std::vector<FusionCase> out;
  for (FusionNorm norm : {FusionNorm::none, FusionNorm::group})
    for (FusionScalar scalar : {FusionScalar::none, FusionScalar::scale, FusionScalar::gate})
      for (FusionOp op : {FusionOp::add, FusionOp::diff, FusionOp::conc})
        for (int64_t proj : {1, 2})
          for (int64_t D_M : {s.D_T, s.D_M_unequal}) {
            const bool equal = D_M == s.D_T;
            if (op == FusionOp::conc && proj == 2) continue;
            if (scalar == FusionScalar::gate && (proj == 2 || op == FusionOp::conc || !equal)) continue;
            if (op != FusionOp::conc && proj == 1 && !equal) continue;
            FusionCase c;
            c.name = str_cat("norm ", norms[int(norm)], " scalar ", scalars[int(scalar)], " ", ops[int(op)], " out ", proj,
                             " D_T ", s.D_T, " D_M ", D_M);
            c.cfg = {.norm = norm, .scalar = scalar, .op = op, .out_proj = proj, .group_norm_eps = 1e-5,
                     .attn_head_dim = s.attn_head_dim, .ssm_head_dim = s.ssm_head_dim};
            c.inputs = {random_tensor({s.B, s.T, s.D_T}, seed), random_tensor({s.B, s.T, D_M}, seed + 1)};
            if (scalar == FusionScalar::scale) {
              c.inputs.push_back(random_tensor({s.D_T}, seed + 2, DType::f64, 0.5, 1.0));
              c.inputs.push_back(random_tensor({D_M}, seed + 3, DType::f64, 0.5, 1.0));
            }
            if (scalar == FusionScalar::gate) c.inputs.push_back(random_tensor({s.D_T}, seed + 2));
            const double w = 1.0 / std::sqrt(double(s.D_T));
            if (proj == 1) {
              c.inputs.push_back(random_tensor({s.d, op == FusionOp::conc ? s.D_T + D_M : s.D_T}, seed + 4, DType::f64, w));
            } else {
              c.inputs.push_back(random_tensor({s.d, s.D_T}, seed + 4, DType::f64, w));
              c.inputs.push_back(random_tensor({s.d, D_M}, seed + 5, DType::f64, w));
            }
            seed += 6;
            out.push_back(std::move(c));
          }
  return out;
}

}  // namespace hyb
