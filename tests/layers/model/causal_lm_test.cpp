#include <catch2/catch.hpp>

#include <cmath>

#include "autograd/gradcheck.h"
#include "layers/mixer_test_util.h"
#include "layers/model/causal_lm.h"
#include "optim/adamw.h"

using namespace hyb;
using json = nlohmann::json;

// A resolved `attention` mixer object (attention.md 10) with every key written out.
static json attention_mixer(int64_t heads, int64_t kv_heads, int64_t head_dim, int64_t window, int64_t sinks = 0,
                            const std::string& qk_norm = "none", const std::string& logits = "dot") {
  return {{"type", "attention"}, {"num_heads", heads}, {"num_kv_heads", kv_heads}, {"head_dim", head_dim},
          {"v_head_dim", head_dim}, {"qkv_bias", false}, {"o_bias", false}, {"qk_norm", qk_norm}, {"qk_norm_eps", 1e-5},
          {"logits", logits}, {"softmax_scale", nullptr}, {"cosine_logit_scale_init", 10.0},
          {"cosine_logit_scale_max", 100.0}, {"window", window}, {"sinks", sinks}, {"rope", true},
          {"rope_theta", 10000.0}, {"rope_dim", head_dim}, {"rope_scaling", nullptr}, {"max_position", 64},
          {"deterministic", false}};
}

static LmConfig tiny_model(int64_t vocab, int64_t d, bool tied, std::vector<json> mixers, int64_t hidden,
                              double init_std = 0.3) {
  LmConfig c;
  c.vocab_size = vocab + 3;  // padded rows, never targets
  c.real_vocab = vocab;
  c.d_model = d;
  c.max_seq_len = 64;
  c.tie_embeddings = tied;
  c.init_std = init_std;  // 0.3 for gradchecks: every path carries a gradient well above rounding
  for (auto& m : mixers) c.layers.push_back({m, "swiglu", hidden});
  return c;
}

static Tensor ids_tensor(std::vector<int32_t> v, int64_t B, int64_t T) { return Tensor::from_vector<int32_t>(v, {B, T}); }

static std::vector<Var> leaves(const Module& m, std::vector<std::string>* names) {
  std::vector<Var> out;
  for (const auto& p : m.named_parameters()) {
    out.push_back(p.var);
    names->push_back(p.name);
  }
  return out;
}

TEST_CASE("the causal LM's parameter gradients match finite differences, tied and untied", "[model][cpu][grad]") {
  for (bool tied : {true, false}) {
    DYNAMIC_SECTION("tied " << tied) {
      ParameterScope f64(Device::cpu(), DType::f64);
      CausalLM lm(tiny_model(11, 8, tied,
                             {attention_mixer(2, 1, 4, 3, 1), attention_mixer(2, 2, 4, 0, 0, "rms")}, 12));
      lm.initialize(3);
      Tensor ids = ids_tensor({1, 5, 9, 2, 2, 7, 10, 0, 3, 4}, 2, 5);
      Tensor targets = ids_tensor({5, 9, 2, -1, 7, 10, 0, 3, 4, 8}, 2, 5);
      std::vector<std::string> names;
      auto r = gradcheck_leaves([&] { return std::vector<Var>{lm.loss(ids, targets, DType::f64)}; }, leaves(lm, &names), names);
      INFO(r.report);
      REQUIRE(r.max_error < 1e-6);
      REQUIRE(names.front() == "model.embeddings.weight");
      REQUIRE(std::find(names.begin(), names.end(), "model.layers.1.mixer.q_norm.weight") != names.end());
      REQUIRE(std::find(names.begin(), names.end(), "model.layers.0.mlp.down_proj.weight") != names.end());
      REQUIRE((std::find(names.begin(), names.end(), "lm_head.weight") != names.end()) == !tied);
    }
  }
}

TEST_CASE("the scaled-cosine attention mixer's gradients match finite differences, logit scale included", "[model][cpu][grad]") {
  ParameterScope f64(Device::cpu(), DType::f64);
  CausalLM lm(tiny_model(7, 8, true, {attention_mixer(2, 1, 4, 0, 0, "none", "cosine")}, 8));
  lm.initialize(5);
  Tensor ids = ids_tensor({1, 5, 6, 2, 3, 0}, 1, 6);
  Tensor targets = ids_tensor({5, 6, 2, 3, 0, 4}, 1, 6);
  std::vector<std::string> names;
  auto r = gradcheck_leaves([&] { return std::vector<Var>{lm.loss(ids, targets, DType::f64)}; }, leaves(lm, &names), names);
  INFO(r.report);
  REQUIRE(r.max_error < 1e-6);
  REQUIRE(std::find(names.begin(), names.end(), "model.layers.0.mixer.logit_scale") != names.end());
}

// Trains a 2-layer d=64 model with AdamW on one fixed synthetic batch and returns the losses.
static std::vector<double> train_fixed_batch(uint64_t seed, int steps) {
  CausalLM lm(tiny_model(64, 64, true, {attention_mixer(4, 2, 16, 8), attention_mixer(4, 4, 16, 0)}, 128, 0.02));
  lm.initialize(seed);
  std::vector<OptimParam> ps;
  for (const auto& p : lm.named_parameters()) ps.push_back({p.name, p.var, p.decay ? 0.1 : 0.0});
  AdamW opt(ps, {.lr = 3e-3, .beta1 = 0.9, .beta2 = 0.95, .eps = 1e-8});
  // A repeating pattern of period 5 over 64 tokens: learnable from context.
  std::vector<int32_t> v;
  for (int b = 0; b < 4; ++b)
    for (int t = 0; t < 33; ++t) v.push_back(int32_t((7 * b + 13 * (t % 5)) % 64));
  Tensor all = Tensor::from_vector<int32_t>(v, {4, 33});
  Tensor ids = all.narrow(1, 0, 32).contiguous(), targets = all.narrow(1, 1, 32).contiguous();
  std::vector<double> losses;
  for (int s = 0; s < steps; ++s) {
    Var loss = lm.loss(ids, targets, DType::f32);
    losses.push_back(loss.data().item());
    backward(loss);
    opt.step(1.0);
    for (auto& p : ps) p.var.zero_grad();
  }
  return losses;
}

TEST_CASE("a 2-layer d=64 model learns a fixed batch: loss from ln 64 to below 0.05 in 60 steps, identically for a seed", "[model][cpu][train]") {
  std::vector<double> a = train_fixed_batch(1, 60);
  INFO("first loss " << a.front() << ", last " << a.back());
  REQUIRE(std::abs(a.front() - std::log(64.0)) < 0.1);
  REQUIRE(a.back() < 0.05);
  REQUIRE(train_fixed_batch(1, 60) == a);
  REQUIRE(train_fixed_batch(2, 3) != std::vector<double>(a.begin(), a.begin() + 3));
}

TEST_CASE("decoding token by token with KV caches gives the parallel forward's logits, ring wrapping past sinks + window", "[model][cpu][decode]") {
  ParameterScope f64(Device::cpu(), DType::f64);
  CausalLM lm(tiny_model(13, 16, true,
                         {attention_mixer(4, 2, 4, 3, 2), attention_mixer(4, 1, 4, 0, 0, "rms"), attention_mixer(2, 2, 8, 5)},
                         24));
  lm.initialize(9);
  NoGradGuard no_grad;
  const int64_t B = 2, T = 14;
  std::vector<int32_t> v;
  for (int64_t i = 0; i < B * T; ++i) v.push_back(int32_t((i * 7 + 3) % 13));
  Tensor ids = ids_tensor(v, B, T);
  Tensor full = lm.logits(ids, DType::f64).data().reshape({B, T, -1});
  for (int64_t prefill : {1, 6}) {
    DYNAMIC_SECTION("prefill " << prefill) {
      LmDecodeState st = lm.start_decode(B, Device::cpu(), DType::f64);
      require_rows_match(decode_logits_in_steps(lm, st, ids, prefill), full, 1e-12);
      // Window layers hold sinks + window slots whatever the length; the full layer holds >= T.
      REQUIRE(st.layers[0]->bytes() == B * (2 + 3) * 2 * 4 * 8 * 2);
    }
  }
}
