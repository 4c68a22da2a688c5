#include "layers/mixer_test_util.h"

#include <catch2/catch.hpp>

#include "autograd/gradcheck.h"
#include "autograd/tape.h"
#include "compare.h"
#include "core/config_error.h"
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
  const Json blocks = Json::parse(shape.blocks.dump());
  if (!blocks.is_null()) ctx.blocks = &blocks;
  const LayerEntry* entry = find_layer(type);
  HYB_CHECK(entry, "resolve_test_mixer: unknown layer type ", type);
  entry->resolve_config(mixer, ctx);
  return json::parse(mixer.dump());
}

std::string config_error(const std::function<void()>& resolve) {
  try {
    resolve();
  } catch (const ConfigKeyError& e) {
    return e.what();
  }
  return "";
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

void require_module_gradcheck(const Module& m, const Var& x, const std::function<Var(const Var&)>& forward) {
  std::vector<Var> leaves{x};
  std::vector<std::string> names{"x"};
  for (const auto& p : m.named_parameters()) {
    leaves.push_back(p.var);
    names.push_back(p.name);
  }
  auto r = gradcheck_leaves([&] { return std::vector<Var>{forward(x)}; }, leaves, names);
  INFO(r.report);
  REQUIRE(r.max_error < 1e-6);
}

void require_mixer_gradcheck(Mixer& layer, const Var& x) {
  require_module_gradcheck(layer, x, [&](const Var& v) { return layer.forward(v); });
}

namespace {

using NamedTensors = std::vector<std::pair<std::string, Tensor>>;

NamedTensors output_and_grads(const std::function<std::unique_ptr<Mixer>(const json&, int64_t)>& make, const json& mixer,
                              int64_t d, const Tensor& x, const Tensor& dy, Device dev, DType pdt, DType act, double sd) {
  ParameterScope scope(dev, pdt);
  std::unique_ptr<Mixer> layer = make(mixer, d);
  layer->initialize(1);
  randomize_parameters(*layer, 2, sd);
  Var xv(x.to(act).to(dev), true);
  Var y = layer->forward(xv);
  backward({y}, {dy.to(act).to(dev)});
  NamedTensors r{{"output", y.data()}, {"dx", xv.grad()}};
  for (const auto& p : layer->named_parameters()) r.emplace_back("d " + p.name, p.var.grad());
  for (auto& [n, t] : r) t = t.to(Device::cpu()).to(DType::f64);
  return r;
}

// x (B, T, C) through state: a parallel prefill of `prefill` tokens (none for 0), then token by token.
// Each call's output, in f64 on the CPU.
std::vector<Tensor> decode_in_steps(Mixer& layer, DecodeState& state, const Tensor& x, int64_t prefill) {
  std::vector<Tensor> outs;
  if (prefill > 0) outs.push_back(layer.decode(Var(x.narrow(1, 0, prefill).contiguous()), state).data());
  for (int64_t t = prefill; t < x.size(1); ++t) outs.push_back(layer.decode(Var(x.narrow(1, t, 1).contiguous()), state).data());
  for (Tensor& o : outs) o = o.to(Device::cpu()).to(DType::f64);
  return outs;
}

}  // namespace

void require_cuda_mixer_matches_cpu(const std::vector<std::pair<std::string, json>>& variants,
                                    const std::function<std::unique_ptr<Mixer>(const json& mixer, int64_t d_model)>& make,
                                    const MixerParityOptions& options) {
  const int64_t d = 16, B = 2, T = 70;
  const Tensor x = random_tensor({B, T, d}, 3), dy = random_tensor({B, T, d}, 4);
  for (const auto& [name, mixer] : variants)
    for (DType adt : {DType::f32, DType::bf16}) {
      DYNAMIC_SECTION(name << " activations " << dtype_name(adt)) {
        // The same parameter values on both devices (Philox by name and index).
        const double sd = adt == DType::bf16 ? options.sd_bf16 : options.sd_f32;
        const auto ref = output_and_grads(make, mixer, d, x, dy, Device::cpu(), DType::f64, DType::f64, sd);
        const auto got = output_and_grads(make, mixer, d, x, dy, Device::cuda(0), DType::f32, adt, sd);
        const double tol = adt == DType::f32 ? options.tol_f32 : options.tol_bf16;
        REQUIRE(ref.size() == got.size());
        for (size_t i = 0; i < ref.size(); ++i) {
          INFO(ref[i].first);
          const double e = rel_error(got[i].second, ref[i].second);
          INFO("relative error " << e);
          CHECK(e < tol);
        }
      }
    }
}

void require_mixer_decode_matches_forward(Mixer& layer, const MixerDecodeCheck& check) {
  NoGradGuard no_grad;
  const int64_t B = 2;
  const Tensor x = random_tensor({B, check.T, check.d_model}, 9, check.dtype).to(check.device);
  const Tensor full = layer.forward(Var(x)).data().to(Device::cpu()).to(DType::f64);
  for (int64_t prefill : check.prefills) {
    DYNAMIC_SECTION(check.name << "prefill " << prefill) {
      auto state = layer.start_decode(B, check.device, check.dtype);
      const int64_t bytes = state->bytes();
      require_rows_match(decode_in_steps(layer, *state, x, prefill), full, check.tol);
      REQUIRE(state->n_seen == check.T);
      if (check.state_bytes >= 0) {
        REQUIRE(state->bytes() == bytes);
        REQUIRE(bytes == check.state_bytes);
      }
    }
  }
}


std::vector<Tensor> decode_logits_in_steps(CausalLM& lm, LmDecodeState& state, const Tensor& ids, int64_t prefill) {
  const int64_t B = ids.size(0), T = ids.size(1);
  std::vector<Tensor> steps;
  steps.push_back(lm.decode_logits(ids.narrow(1, 0, prefill).contiguous(), state, DType::f64).data().reshape({B, prefill, -1}));
  for (int64_t t = prefill; t < T; ++t)
    steps.push_back(lm.decode_logits(ids.narrow(1, t, 1).contiguous(), state, DType::f64).data().reshape({B, 1, -1}));
  return steps;
}

void require_rows_match(const std::vector<Tensor>& steps, const Tensor& full, double tol) {
  int64_t t = 0;
  for (const Tensor& s : steps) {
    INFO("rows " << t << " .. " << t + s.size(1));
    REQUIRE(rel_error(s, full.narrow(1, t, s.size(1)).contiguous()) < tol);
    t += s.size(1);
  }
}

void require_mixer_gradchecks(const std::vector<std::pair<std::string, json>>& variants, int64_t d_model, int64_t T,
                              const std::function<std::unique_ptr<Mixer>(const json& mixer, int64_t d_model)>& make) {
  for (const auto& [name, mixer] : variants) {
    DYNAMIC_SECTION(name) {
      ParameterScope f64(Device::cpu(), DType::f64);
      std::unique_ptr<Mixer> layer = make(mixer, d_model);
      layer->initialize(1);
      randomize_parameters(*layer, 2);
      Var x(random_tensor({1, T, d_model}, 3), true);
      require_mixer_gradcheck(*layer, x);
    }
  }
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
      require_rows_match(decode_logits_in_steps(lm, st, ids, prefill), full, 1e-12);
    }
  }
}

}  // namespace hyb
