// nha on CUDA against the f64 recurrent CPU reference in every window regime of nha.md 2: o, the
// final memories, omega_L and every gradient (q, k, v, s, g, the initial memories and the window
// bias) under random final-memory gradients; windows 0, small, over one 128-key tile of the online
// softmax, >= T and unlimited; token shift equal to the window, 0, other values and "never"; M = 0;
// T off the 64-token chunk, GQA. The NHA mixer decoding on CUDA (the decode kernel on the slots and a
// ring of w tokens, after a parallel prefill or from the first token) equals its parallel forward in
// every ablation that changes the op calls.
#include <catch2/catch.hpp>

#include <algorithm>

#include "autograd/gradcheck.h"
#include "autograd/ops/cast.h"
#include "compare.h"
#include "core/rng.h"
#include "layers/nha/nha.h"
#include "layers/nha/nha_config.h"
#include "layers/nha/nha_op.h"
#include "layers/mixer_test_util.h"
#include "layers/registry.h"
#include "parity.h"

using namespace hyb;
using json = nlohmann::json;

namespace {

Tensor uniform(const Shape& shape, uint64_t seed, double lo, double hi) {
  Tensor t = Tensor::empty(shape, DType::f64);
  fill_uniform(t, seed, "test.uniform", lo, hi);
  return t;
}

// Write weights, gates and memories stay f32 when the activations are bf16.
Var state_dtype(const Var& x, const Var& like) { return like.dtype() == DType::bf16 ? cast(x, DType::f32) : x; }

json resolved(const json& written, int64_t d_model) {
  return resolve_test_mixer("nha", written, {.d_model = d_model, .max_seq_len = 128});
}

MixerContext mixer_context(int64_t d_model) {
  return test_mixer_context({.d_model = d_model, .max_seq_len = 128}, "family", true);
}

}  // namespace

TEST_CASE("nha on cuda matches the recurrent cpu reference in every window regime, outputs and every gradient",
          "[nha][gpu]") {
  struct Regime {
    const char* name;
    int64_t B, T, Hq, Hkv, D, Dv, M, window, shift;
    bool rope, states, bias, ratio;
  };
  const Regime regimes[] = {
      {"window 0, shift 0 (gsa)", 2, 37, 4, 2, 16, 16, 8, 0, 0, false, true, false, true},
      {"paper form w = shift = 4, GQA", 2, 37, 4, 2, 16, 12, 8, 4, 4, true, true, true, true},
      {"no token shift, w 3", 1, 70, 2, 2, 8, 8, 5, 3, 0, true, true, true, false},
      {"w = shift = 32 over three chunks", 1, 150, 2, 1, 16, 16, 8, 32, 32, true, true, false, true},
      {"window >= T, shift 5", 1, 70, 2, 2, 16, 8, 6, 100, 5, true, false, true, true},
      {"unlimited window, slots never written", 1, 70, 2, 1, 16, 16, 4, -1, -1, true, true, true, true},
      {"slots only, shift 7", 1, 65, 2, 2, 8, 8, 4, 0, 7, false, true, false, false},
      {"no slots (M = 0), window 8", 2, 50, 4, 2, 16, 16, 0, 8, 0, true, false, true, false},
      {"window 200 over two key tiles, shift 200", 1, 300, 2, 1, 8, 8, 4, 200, 200, true, false, true, false},
      {"window 150, shift 20, no rope", 1, 300, 2, 2, 8, 6, 3, 150, 20, false, true, false, true},
  };
  for (const Regime& c : regimes) {
    DYNAMIC_SECTION(c.name) {
      const int64_t W = c.window < 0 ? c.T : std::min(c.window, c.T);
      std::vector<Tensor> in{random_tensor({c.B, c.T, c.Hq, c.D}, 1, DType::f64, 0.5),
                             random_tensor({c.B, c.T, c.Hkv, c.D}, 2, DType::f64, 0.5),
                             random_tensor({c.B, c.T, c.Hkv, c.Dv}, 3)};
      if (c.M > 0) {
        in.push_back(uniform({c.B, c.T, c.Hkv, c.M}, 4, 0.0, 1.0));
        in.push_back(uniform({c.B, c.T, c.Hkv, c.M}, 5, -0.9, -0.01));
      }
      if (c.states) {
        in.push_back(random_tensor({c.B, c.Hkv, c.D, c.M}, 6, DType::f64, 0.5));
        in.push_back(random_tensor({c.B, c.Hkv, c.M, c.Dv}, 7, DType::f64, 0.5));
      }
      if (c.bias) in.push_back(random_tensor({c.Hq, W + 2}, 8, DType::f64, 0.5));
      ParityOptions opt;
      opt.tol_f32 = 5e-5;  // chunked fp32 against the f64 recurrence; dg sums differences
      auto r = cuda_parity(
          [&](const std::vector<Var>& x) {
            size_t i = 3;
            Var s, g, HK0, HV0, bias;
            if (c.M > 0) {
              s = state_dtype(x[i++], x[0]);
              g = state_dtype(x[i++], x[0]);
            }
            if (c.states) {
              HK0 = state_dtype(x[i++], x[0]);
              HV0 = state_dtype(x[i++], x[0]);
            }
            if (c.bias) bias = x[i++];
            NhaParams p;
            p.window = c.window;
            p.shift = c.shift;
            p.rope = c.rope;
            p.scale = 0.5;
            p.long_ratio = c.ratio;
            NhaVars y = nha(x[0], x[1], x[2], s, g, HK0, HV0, bias, p);
            std::vector<Var> out{y.o};
            if (c.M > 0) {
              out.push_back(y.HK);
              out.push_back(y.HV);
            }
            if (c.ratio) out.push_back(Var(y.long_ratio));
            return out;
          },
          in, opt);
      INFO(r.report);
      REQUIRE(r.ok);
    }
  }
}

TEST_CASE("NHA on cuda: decoding token by token and from prefills equals the parallel forward", "[nha][gpu][decode]") {
  const std::vector<std::pair<std::string, json>> variants = {
      {"default (rope_short, token shift)", json::object()},
      {"w/o long memory (slots 0)", {{"slots", 0}}},
      {"w/o short memory (window 0)", {{"window", 0}}},
      {"w/o token shift", {{"token_shift", false}}},
      {"full window", {{"window", -1}}},
      {"full window without token shift", {{"window", -1}, {"token_shift", false}}},
      {"window excludes current", {{"window_includes_current", false}}},
      {"weighted_fixed", {{"fusion", "weighted_fixed"}, {"fusion_weight", 0.3}}},
      {"weighted_learned", {{"fusion", "weighted_learned"}}},
      {"rope_short_long", {{"pos_enc", "rope_short_long"}}},
      {"learned_short", {{"pos_enc", "learned_short"}}},
      {"short convs, GQA 4:1", {{"use_short_conv", true}, {"num_kv_heads", 1}}},
      {"slot_feature_map swish", {{"slot_feature_map", "swish"}}},
  };
  for (const auto& [name, variant] : variants) {
    json m = {{"num_heads", 4}, {"num_kv_heads", 2}, {"head_dim", 8}, {"value_head_dim", 4}, {"slots", 3}, {"window", 5}};
    for (const auto& [k, v] : variant.items()) m[k] = v;
    ParameterScope f32(Device::cuda(0), DType::f32);
    NhaMixer layer(nha_config_from_json(resolved(m, 16)), mixer_context(16));
    layer.initialize(7);
    for (const auto& p : layer.named_parameters()) fill_normal(p.var.data(), 8, p.name, 0.0, 0.3);
    NoGradGuard no_grad;
    const int64_t B = 2, T = 70;  // past one chunk of the slot memory
    const Tensor x = random_tensor({B, T, 16}, 9, DType::f32).to(Device::cuda(0));
    const Tensor full = layer.forward(Var(x)).data().to(Device::cpu()).to(DType::f64);
    for (int64_t prefill : {0, 1, 66}) {
      DYNAMIC_SECTION(name << " prefill " << prefill) {
        auto state = layer.start_decode(B, Device::cuda(0), DType::f32);
        std::vector<Tensor> outs;
        if (prefill > 0) outs.push_back(layer.decode(Var(x.narrow(1, 0, prefill).contiguous()), *state).data());
        for (int64_t t = prefill; t < T; ++t)
          outs.push_back(layer.decode(Var(x.narrow(1, t, 1).contiguous()), *state).data());
        int64_t t = 0;
        for (const Tensor& o : outs) {
          INFO("rows " << t << " .. " << t + o.size(1));
          REQUIRE(rel_error(o.to(Device::cpu()).to(DType::f64), full.narrow(1, t, o.size(1)).contiguous()) < 1e-4);
          t += o.size(1);
        }
      }
    }
  }
}
