// The PHA block on the CPU (pha.md 2.2, 7, 9, 11, 14): parameter names and shapes, initialization
// (Xavier-normal, beta on the targets), every parameter's gradient and the input's against f64 finite
// differences for each composition, residual source and branch subset, causality, the branch norms'
// scale invariance, and the residual stream's RMS staying near alpha through 14 blocks.
#include <catch2/catch.hpp>
#include <cmath>
#include <set>

#include "autograd/gradcheck.h"
#include "autograd/tape.h"
#include "core/rng.h"
#include "layers/pha/pha_cases.h"

using namespace hyb;
using json = nlohmann::json;

namespace {

std::set<std::string> names_of(const Module& m) {
  std::set<std::string> out;
  for (const auto& p : m.named_parameters()) out.insert(p.name);
  return out;
}

double rms(const Tensor& t) {
  const Tensor c = t.to(DType::f64).contiguous();
  double s = 0;
  for (int64_t i = 0; i < c.numel(); ++i) s += c.data<double>()[i] * c.data<double>()[i];
  return std::sqrt(s / double(c.numel()));
}

}  // namespace

TEST_CASE("a parallel PHA block has pha.md 9's parameters under config.md 3.9's names; one branch has no mix_logits",
          "[pha][cpu]") {
  auto block = pha_block(pha_resolved(pha_small_written()));
  const std::set<std::string> want = {
      "mixer_norm.weight", "mixer.attn.q_proj.weight", "mixer.attn.k_proj.weight", "mixer.attn.v_proj.weight",
      "mixer.attn.o_proj.weight", "mixer.attn.logit_scale", "mixer.gss.to_u.weight", "mixer.gss.to_v.weight",
      "mixer.gss.dss.norm.weight", "mixer.gss.dss.norm.bias", "mixer.gss.dss.Lambda_real", "mixer.gss.dss.Lambda_imag",
      "mixer.gss.dss.C_real", "mixer.gss.dss.C_imag", "mixer.gss.dss.param_D", "mixer.gss.to_gate.weight",
      "mixer.gss.to_out.weight", "mixer.gss.to_out.bias", "mixer.aux_mlp.gate_proj.weight", "mixer.aux_mlp.up_proj.weight",
      "mixer.aux_mlp.down_proj.weight", "mixer.attn_out_norm.weight", "mixer.gss_out_norm.weight",
      "mixer.aux_out_norm.weight", "mixer.mix_logits", "mlp_norm.weight", "mlp.gate_proj.weight", "mlp.up_proj.weight",
      "mlp.down_proj.weight"};
  REQUIRE(names_of(*block) == want);
  // GSS(d, F, Hs, Ns) of pha.md 4.7 at d 8, F 16, Hs 4, Ns 3.
  const int64_t d = 8, F = 16, Hs = 4, Ns = 3;
  int64_t gss = 0;
  for (const auto& p : block->named_parameters())
    if (p.name.starts_with("mixer.gss.")) gss += p.var.numel();
  REQUIRE(gss == d * F + d * Hs + 2 * Hs + 2 * Ns + 2 * Hs * Ns + Hs + Hs * F + F * d + d);
  for (const auto& p : block->named_parameters()) {
    const bool decays = p.var.data().dim() == 2 && p.name.ends_with(".weight");
    INFO(p.name);
    REQUIRE(p.decay == decays);
  }

  auto attn_only = pha_block(pha_resolved(pha_small_written({{"branches", {"attn"}}})));
  for (const std::string& n : names_of(*attn_only)) {
    INFO(n);
    REQUIRE(!n.starts_with("mixer.gss"));
    REQUIRE(!n.starts_with("mixer.aux"));
    REQUIRE(n != "mixer.mix_logits");
  }

  json seq = pha_small_written({{"composition", "sequential"}});
  seq.erase("aux_mlp");
  const std::set<std::string> seq_names = names_of(*pha_block(pha_resolved(seq)));
  REQUIRE(seq_names.count("mixer.attn_norm.weight") == 1);
  REQUIRE(seq_names.count("mixer.gss_norm.weight") == 1);
  REQUIRE(seq_names.count("mixer_norm.weight") == 0);
  REQUIRE(seq_names.count("mixer.attn_out_norm.weight") == 0);
}

TEST_CASE("PHA initializes Linear weights Xavier-normal, the beta targets times beta, mix logits at mix.init (pha.md 8)",
          "[pha][cpu]") {
  const json m = pha_resolved(pha_small_written({{"mix", {{"init", 0.25}}}, {"aux_mlp", {{"intermediate_size", 400}}},
                                                 {"gss", {{"expand", 64}}}}),
                              8, 10);
  auto block = pha_block(m, 8, 10, 3, 600);
  block->initialize(5, "model.layers.3");
  const double beta = m["residual"]["beta"].get<double>();
  for (const auto& p : block->named_parameters()) {
    const Tensor& t = p.var.data();
    if (p.name == "mixer.mix_logits") {
      for (int64_t i = 0; i < 3; ++i) REQUIRE(t.data<float>()[i] == 0.25f);
    }
    if (t.dim() != 2 || !p.name.ends_with(".weight") || t.numel() < 3000) continue;
    const double xavier = std::sqrt(2.0 / double(t.size(0) + t.size(1)));
    const double want = p.name.starts_with("mlp.") ? beta * xavier : xavier;
    INFO(p.name);
    REQUIRE(rms(t) == Approx(want).epsilon(0.05));
  }
}

TEST_CASE("every PHA parameter and the block input have gradients matching finite differences: parallel (all, two and "
          "one branch), raw and plain residuals, sequential, lambda_imag linear",
          "[pha][cpu]") {
  json seq = pha_small_written({{"composition", "sequential"}});
  seq.erase("aux_mlp");
  json seq_raw = seq;
  seq_raw["residual"] = {{"source", "raw"}};
  const std::vector<std::pair<std::string, json>> variants = {
      {"parallel", pha_small_written()},
      {"attn + ffn", pha_small_written({{"branches", {"attn", "ffn"}}})},
      {"gss only", pha_small_written({{"branches", {"gss"}}})},
      {"raw", pha_small_written({{"residual", {{"source", "raw"}}}})},
      {"plain", pha_small_written({{"residual", {{"kind", "plain"}}}})},
      {"linear", pha_small_written({{"gss", {{"lambda_imag", "linear"}}}})},
      {"sequential", seq},
      {"sequential raw", seq_raw},
  };
  for (const auto& [name, written] : variants) {
    DYNAMIC_SECTION(name) {
      ParameterScope f64(Device::cpu(), DType::f64);
      auto block = pha_block(pha_resolved(written));
      block->initialize(1);
      randomize_parameters(*block, 2, 0.5);
      Var x(random_tensor({2, 9, 8}, 3), true);
      require_module_gradcheck(*block, x, [&](const Var& v) { return block->forward(v); });
    }
  }
}

TEST_CASE("a PHA block is causal: changing token t changes no output before t", "[pha][cpu]") {
  ParameterScope f64(Device::cpu(), DType::f64);
  auto block = pha_block(pha_resolved(pha_small_written()));
  block->initialize(1);
  randomize_parameters(*block, 2, 0.5);
  NoGradGuard ng;
  const Tensor x = random_tensor({2, 13, 8}, 4);
  const Tensor y = block->forward(Var(x)).data();
  const int64_t t = 6;
  Tensor x2 = x.clone();
  for (int64_t c = 0; c < 8; ++c) x2.data<double>()[(0 * 13 + t) * 8 + c] += 1.0;
  const Tensor y2 = block->forward(Var(x2)).data();
  for (int64_t s = 0; s < 13; ++s)
    for (int64_t c = 0; c < 8; ++c) {
      const double a = y.data<double>()[s * 8 + c], b = y2.data<double>()[s * 8 + c];
      if (s < t) REQUIRE(a == b);
      if (s == t) REQUIRE(a != b);
    }
}

TEST_CASE("under pha.md 7.2's normed residuals the stream entering each block's norm has RMS within 2x of alpha at "
          "init through 14 blocks",
          "[pha][cpu]") {
  const int64_t L = 14, d = 16;
  json w = pha_small_written({{"attn", {{"num_heads", 4}, {"num_kv_heads", 2}}}, {"gss", {{"dss_dim", 8}, {"dss_state", 16}}}});
  const json m = pha_resolved(w, d, L);
  const double alpha = m["residual"]["alpha"].get<double>();
  std::vector<std::unique_ptr<PhaBlock>> blocks;
  for (int64_t i = 0; i < L; ++i) {
    blocks.push_back(pha_block(m, d, L, i, 40));
    blocks.back()->initialize(11, str_cat("model.layers.", i));
    blocks.back()->set_training(false);
  }
  NoGradGuard ng;
  Var h(random_tensor({2, 33, d}, 6, DType::f32));
  for (int64_t i = 0; i < L; ++i) {
    h = blocks[size_t(i)]->forward(h);
    INFO("after block " << i);
    REQUIRE(rms(h.data()) > alpha / 2);
    REQUIRE(rms(h.data()) < alpha * 2);
  }
}

TEST_CASE("dropout in a PHA block follows the micro-step and is off in evaluation", "[pha][cpu]") {
  uint64_t step = 0;
  auto block = pha_block(pha_resolved(pha_small_written({{"dropout", 0.3}})), 8, 2, 0, 12, &step);
  block->initialize(1);
  NoGradGuard ng;
  const Var x(random_tensor({2, 7, 8}, 8, DType::f32));
  const Tensor a = block->forward(x).data(), a_again = block->forward(x).data();
  step = 1;
  const Tensor b = block->forward(x).data();
  block->set_training(false);
  const Tensor e = block->forward(x).data(), e_again = block->forward(x).data();
  auto same = [](const Tensor& p, const Tensor& q) {
    for (int64_t i = 0; i < p.numel(); ++i)
      if (p.data<float>()[i] != q.data<float>()[i]) return false;
    return true;
  };
  REQUIRE(same(a, a_again));
  REQUIRE(!same(a, b));
  REQUIRE(same(e, e_again));
  REQUIRE(!same(a, e));
}

TEST_CASE("a PHA model's loss has gradients matching finite differences end to end, and its logits depend on the "
          "current token: parallel and sequential",
          "[pha][cpu]") {
  json seq = pha_small_written({{"composition", "sequential"}});
  seq.erase("aux_mlp");
  for (const auto& [name, written] : std::vector<std::pair<std::string, json>>{{"parallel", pha_small_written()},
                                                                               {"sequential", seq}}) {
    DYNAMIC_SECTION(name) {
      ParameterScope f64(Device::cpu(), DType::f64);
      LmConfig cfg = small_decode_lm({{pha_resolved(written), "swiglu", 12}, {pha_resolved(written), "swiglu", 12}});
      cfg.embed_scale_sqrt_d = true;
      CausalLM lm(cfg);
      lm.initialize(3);
      const Tensor ids = Tensor::from_vector(std::vector<int32_t>{1, 5, 2, 7, 3, 3, 9, 4, 0, 6, 2, 8}, {2, 6});
      const Tensor targets = Tensor::from_vector(std::vector<int32_t>{5, 2, 7, 3, 3, 9, 4, 0, 6, 2, 8, 1}, {2, 6});
      {
        NoGradGuard ng;
        Tensor other = ids.clone();
        other.data<int32_t>()[0] = 11;
        const Tensor a = lm.logits(ids, DType::f64).data(), b = lm.logits(other, DType::f64).data();
        double diff = 0;
        for (int64_t v = 0; v < 16; ++v) diff = std::max(diff, std::abs(a.data<double>()[v] - b.data<double>()[v]));
        REQUIRE(diff > 1e-3);
      }
      std::vector<Var> leaves;
      std::vector<std::string> names;
      for (const auto& p : lm.named_parameters()) {
        leaves.push_back(p.var);
        names.push_back(p.name);
      }
      auto r = gradcheck_leaves([&] { return std::vector<Var>{lm.loss(ids, targets, DType::f64)}; }, leaves, names);
      INFO(r.report);
      REQUIRE(r.max_error < 1e-6);
    }
  }
}
