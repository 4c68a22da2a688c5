#include "layers/mixer_test_util.h"

#include <catch2/catch.hpp>

#include "autograd/gradcheck.h"
#include "autograd/tape.h"
#include "compare.h"
#include "core/rng.h"
#include "layers/registry.h"

namespace hyb {

using json = nlohmann::json;

json resolve_test_mixer(const std::string& type, const json& written, const MixerTestShape& shape) {
  Json mixer = Json::parse(written.dump());
  mixer["type"] = type;
  LayerConfigContext ctx;
  ctx.d_model = shape.d_model;
  ctx.max_seq_len = shape.max_seq_len;
  ctx.num_layers = shape.num_layers;
  ctx.init_std = shape.init_std;
  const LayerEntry* entry = find_layer(type);
  HYB_CHECK(entry, "resolve_test_mixer: unknown layer type ", type);
  entry->resolve_config(mixer, ctx);
  return json::parse(mixer.dump());
}

MixerContext test_mixer_context(const MixerTestShape& shape, const std::string& init, bool has_mlp) {
  MixerContext ctx;
  ctx.d_model = shape.d_model;
  ctx.num_layers = shape.num_layers;
  ctx.max_seq_len = shape.max_seq_len;
  ctx.init = init;
  ctx.has_mlp = has_mlp;
  return ctx;
}

void randomize_parameters(Module& m, uint64_t seed, double sd) {
  for (const auto& p : m.named_parameters()) fill_normal(p.var.data(), seed, p.name, 0.0, sd);
}

void require_mixer_gradcheck(Mixer& layer, const Var& x) {
  std::vector<Var> leaves{x};
  std::vector<std::string> names{"x"};
  for (const auto& p : layer.named_parameters()) {
    leaves.push_back(p.var);
    names.push_back(p.name);
  }
  auto r = gradcheck_leaves([&] { return std::vector<Var>{layer.forward(x)}; }, leaves, names);
  INFO(r.report);
  REQUIRE(r.max_error < 1e-6);
}

LmConfig small_decode_lm(std::vector<LayerSpec> layers) {
  LmConfig cfg;
  cfg.vocab_size = 16;
  cfg.real_vocab = 13;
  cfg.d_model = 8;
  cfg.max_seq_len = 64;
  cfg.init_std = 0.3;
  cfg.layers = std::move(layers);
  return cfg;
}

void require_decode_matches_forward(const LmConfig& cfg) {
  ParameterScope f64(Device::cpu(), DType::f64);
  CausalLM lm(cfg);
  lm.initialize(11);
  randomize_parameters(lm, 12);
  NoGradGuard no_grad;
  const int64_t B = 2, T = 15;
  std::vector<int32_t> v;
  for (int64_t i = 0; i < B * T; ++i) v.push_back(int32_t((i * 5 + 1) % 13));
  const Tensor ids = Tensor::from_vector<int32_t>(v, {B, T});
  const Tensor full = lm.logits(ids, DType::f64).data().reshape({B, T, -1});
  for (int64_t prefill : {1, 6}) {
    DYNAMIC_SECTION("prefill " << prefill) {
      LmDecodeState st = lm.start_decode(B, Device::cpu(), DType::f64);
      std::vector<Tensor> steps;
      steps.push_back(lm.decode_logits(ids.narrow(1, 0, prefill).contiguous(), st, DType::f64).data().reshape({B, prefill, -1}));
      for (int64_t t = prefill; t < T; ++t)
        steps.push_back(lm.decode_logits(ids.narrow(1, t, 1).contiguous(), st, DType::f64).data().reshape({B, 1, -1}));
      int64_t t = 0;
      for (const Tensor& s : steps) {
        REQUIRE(rel_error(s, full.narrow(1, t, s.size(1)).contiguous()) < 1e-12);
        t += s.size(1);
      }
    }
  }
}

}  // namespace hyb
