// The NHA mixer on the CPU: gradients of every parameter and the input under every ablation of
// nha.md 8.2-8.3, a behaviour test per ablation, omega_L, parameter names and count (7.1), decoding
// token by token == the parallel forward (9) at the mixer and the model level, the config rules (10),
// and slot_feature_map swish (8.5) against its composition written out by hand.
#include <catch2/catch.hpp>

#include <cmath>
#include <map>

#include "autograd/gradcheck.h"
#include "autograd/ops/binary.h"
#include "autograd/ops/shape_ops.h"
#include "autograd/ops/unary.h"
#include "compare.h"
#include "core/rng.h"
#include "layers/linear/linear_op.h"
#include "layers/mixer_test_util.h"
#include "layers/model/causal_lm.h"
#include "layers/nha/nha.h"
#include "layers/nha/nha_config.h"
#include "layers/nha/nha_op.h"
#include "layers/norm/rmsnorm_op.h"
#include "layers/registry.h"

using namespace hyb;
using json = nlohmann::json;

namespace {

json resolved(const json& written, int64_t d_model) {
  return resolve_test_mixer("nha", written, {.d_model = d_model, .max_seq_len = 64});
}

MixerContext mixer_context(int64_t d_model) {
  return test_mixer_context({.d_model = d_model, .max_seq_len = 64}, "family", true);
}

// A small layer: d 8, Hq 4, Hkv 2, D 4, Dv 2, M 3, w 3, then the variant's keys.
json small(const json& variant) {
  json m = {{"num_heads", 4}, {"num_kv_heads", 2}, {"head_dim", 4}, {"value_head_dim", 2}, {"slots", 3}, {"window", 3}};
  for (const auto& [k, v] : variant.items()) m[k] = v;
  return resolved(m, 8);
}

// Both layers built under f64 with parameters drawn by name: shared names get equal values.
struct Pair {
  ParameterScope f64{Device::cpu(), DType::f64};
  NhaMixer a, b;
  Pair(const json& ma, const json& mb) : a(nha_config_from_json(ma), mixer_context(8)), b(nha_config_from_json(mb), mixer_context(8)) {
    a.initialize(1);
    b.initialize(1);
    randomize_parameters(a, 5);
    randomize_parameters(b, 5);
  }
};

std::string error_of(const json& mixer, int64_t d_model) {
  return config_error([&] { resolved(mixer, d_model); });
}

const std::vector<std::pair<std::string, json>> kVariants = {
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
    {"pos_enc none", {{"pos_enc", "none"}}},
    {"learned_short", {{"pos_enc", "learned_short"}}},
    {"short convs, value_act none", {{"use_short_conv", true}, {"value_act", "none"}}},
    {"slot_feature_map swish", {{"slot_feature_map", "swish"}}},
};

}  // namespace

TEST_CASE("every NHA parameter and the layer input have gradients matching finite differences, in every ablation",
          "[nha][cpu][grad]") {
  require_mixer_gradchecks(kVariants, 8, 9, [](const json& variant, int64_t d) -> std::unique_ptr<Mixer> {
    return std::make_unique<NhaMixer>(nha_config_from_json(small(variant)), mixer_context(d));
  });
}

TEST_CASE("NHA decoding token by token and from prefills equals the parallel forward, in every ablation",
          "[nha][cpu][decode]") {
  for (const auto& [name, variant] : kVariants) {
    ParameterScope f64(Device::cpu(), DType::f64);
    NhaMixer layer(nha_config_from_json(small(variant)), mixer_context(8));
    layer.initialize(7);
    randomize_parameters(layer, 8);
    NoGradGuard no_grad;
    const int64_t B = 2, T = 17;
    Tensor x = random_tensor({B, T, 8}, 9);
    const Tensor full = layer.forward(Var(x)).data();
    for (int64_t prefill : {0, 1, 2, 6}) {
      DYNAMIC_SECTION(name << " prefill " << prefill) {
        auto state = layer.start_decode(B, Device::cpu(), DType::f64);
        std::vector<Tensor> outs;
        if (prefill > 0) outs.push_back(layer.decode(Var(x.narrow(1, 0, prefill).contiguous()), *state).data());
        int64_t bytes = -1;
        for (int64_t t = prefill; t < T; ++t) {
          outs.push_back(layer.decode(Var(x.narrow(1, t, 1).contiguous()), *state).data());
          // Constant size once the ring is full, except for a full window (a KV cache).
          if (t >= 6 && layer.config().window >= 0) {
            if (bytes < 0) bytes = state->bytes();
            REQUIRE(state->bytes() == bytes);
          }
        }
        int64_t t = 0;
        for (const Tensor& o : outs) {
          REQUIRE(rel_error(o, full.narrow(1, t, o.size(1)).contiguous()) < 1e-12);
          t += o.size(1);
        }
        REQUIRE(state->n_seen == T);
      }
    }
  }
}

TEST_CASE("a full-window NHA layer decodes past max_seq_len: its KV cache doubles", "[nha][cpu][decode]") {
  ParameterScope f64(Device::cpu(), DType::f64);
  NhaMixer layer(nha_config_from_json(small({{"window", -1}})), test_mixer_context({.d_model = 8, .max_seq_len = 4}));
  layer.initialize(3);
  randomize_parameters(layer, 4);
  NoGradGuard no_grad;
  const Tensor x = random_tensor({2, 13, 8}, 5);
  const Tensor full = layer.forward(Var(x)).data();
  for (int64_t prefill : {1, 6}) {
    DYNAMIC_SECTION("prefill " << prefill) {
      auto state = layer.start_decode(2, Device::cpu(), DType::f64);
      const int64_t start = state->bytes();
      std::vector<Var> outs{layer.decode(Var(x.narrow(1, 0, prefill).contiguous()), *state)};
      for (int64_t t = prefill; t < 13; ++t) outs.push_back(layer.decode(Var(x.narrow(1, t, 1).contiguous()), *state));
      REQUIRE(rel_error(concat(outs, 1).data(), full) < 1e-12);
      // The cache went from 4 to 16 positions of B 2 x Hkv 2 x (D 4 + Dv 2) values.
      REQUIRE(state->bytes() - start == 12 * 2 * 2 * (4 + 2) * int64_t(sizeof(double)));
    }
  }
}

TEST_CASE("NHA decode state: slots plus a ring of w tokens (nha.md 9)", "[nha][cpu][decode]") {
  ParameterScope f64(Device::cpu(), DType::f64);
  NhaMixer layer(nha_config_from_json(small(json::object())), mixer_context(8));
  layer.initialize(1);
  NoGradGuard no_grad;
  auto state = layer.start_decode(2, Device::cpu(), DType::f64);
  layer.decode(Var(random_tensor({2, 10, 8}, 1)), *state);
  // Hkv D M + Hkv M Dv slot values and w (Hkv (D + Dv + 2 M)) ring values per sequence.
  const int64_t Hkv = 2, D = 4, Dv = 2, M = 3, w = 3;
  REQUIRE(state->bytes() == 2 * (Hkv * D * M + Hkv * M * Dv + w * Hkv * (D + Dv + 2 * M)) * int64_t(sizeof(double)));
}

TEST_CASE("NHA ablations behave as nha.md 8 says", "[nha][cpu]") {
  NoGradGuard no_grad;
  const int64_t T = 12;
  Tensor x = random_tensor({2, T, 8}, 30);
  SECTION("w/o long memory: a token outside the window no longer changes the output") {
    for (int64_t slots : {0, 3}) {
      ParameterScope f64(Device::cpu(), DType::f64);
      NhaMixer layer(nha_config_from_json(small({{"slots", slots}})), mixer_context(8));
      layer.initialize(1);
      randomize_parameters(layer, 2);
      Tensor x2 = x.clone();
      x2.narrow(1, 4, 1).copy_(random_tensor({2, 1, 8}, 31));
      const Tensor a = layer.forward(Var(x)).data(), b = layer.forward(Var(x2)).data();
      // Token 4 leaves the 3-token window at t = 7.
      const double far = rel_error(b.narrow(1, 7, T - 7).contiguous(), a.narrow(1, 7, T - 7).contiguous());
      if (slots == 0) REQUIRE(far == 0.0);
      else REQUIRE(far > 1e-6);
    }
  }
  SECTION("w/o short memory: RoPE has nothing to act on, the layer is GSA-like") {
    Pair p(small({{"window", 0}}), small({{"window", 0}, {"pos_enc", "none"}, {"rope_theta", 500.0}}));
    REQUIRE(rel_error(p.a.forward(Var(x)).data(), p.b.forward(Var(x)).data()) == 0.0);
  }
  SECTION("w/o token shift: the slots hold every token, as with window 0") {
    Pair p(small({{"token_shift", false}}), small({{"window", 0}}));
    auto sa = p.a.start_decode(2, Device::cpu(), DType::f64), sb = p.b.start_decode(2, Device::cpu(), DType::f64);
    p.a.decode(Var(x), *sa);
    p.b.decode(Var(x), *sb);
    auto& na = dynamic_cast<NhaState&>(*sa).op;
    auto& nb = dynamic_cast<NhaState&>(*sb).op;
    REQUIRE(rel_error(na.HK, nb.HK) < 1e-14);
    REQUIRE(rel_error(na.HV, nb.HV) < 1e-14);
    Pair shifted(small(json::object()), small({{"window", 0}}));
    auto sc = shifted.a.start_decode(2, Device::cpu(), DType::f64);
    shifted.a.decode(Var(x), *sc);
    REQUIRE(rel_error(dynamic_cast<NhaState&>(*sc).op.HK, nb.HK) > 1e-3);
  }
  SECTION("weighted_fixed with weight 0 is the window branch alone: the layer without slots") {
    Pair p(small({{"fusion", "weighted_fixed"}, {"fusion_weight", 0.0}}), small({{"slots", 0}}));
    REQUIRE(rel_error(p.a.forward(Var(x)).data(), p.b.forward(Var(x)).data()) < 1e-14);
    Pair q(small({{"fusion", "weighted_fixed"}, {"fusion_weight", 0.5}}), small({{"slots", 0}}));
    REQUIRE(rel_error(q.a.forward(Var(x)).data(), q.b.forward(Var(x)).data()) > 1e-3);
  }
  SECTION("weighted_learned starts at lambda = 1/2: equal to weighted_fixed 0.5 before training") {
    ParameterScope f64(Device::cpu(), DType::f64);
    NhaMixer a(nha_config_from_json(small({{"fusion", "weighted_learned"}})), mixer_context(8));
    NhaMixer b(nha_config_from_json(small({{"fusion", "weighted_fixed"}})), mixer_context(8));
    a.initialize(3);
    b.initialize(3);
    REQUIRE(rel_error(a.forward(Var(x)).data(), b.forward(Var(x)).data()) < 1e-14);
    randomize_parameters(a, 4);
    randomize_parameters(b, 4);
    REQUIRE(rel_error(a.forward(Var(x)).data(), b.forward(Var(x)).data()) > 1e-3);
  }
  SECTION("learned_short starts at bias 0 (= pos_enc none); rope_short and rope_short_long differ from none") {
    Pair p(small({{"pos_enc", "learned_short"}}), small({{"pos_enc", "none"}}));
    REQUIRE(rel_error(p.a.forward(Var(x)).data(), p.b.forward(Var(x)).data()) > 1e-3);  // randomized bias
    ParameterScope f64(Device::cpu(), DType::f64);
    NhaMixer a(nha_config_from_json(small({{"pos_enc", "learned_short"}})), mixer_context(8));
    NhaMixer b(nha_config_from_json(small({{"pos_enc", "none"}})), mixer_context(8));
    a.initialize(3);
    b.initialize(3);
    REQUIRE(rel_error(a.forward(Var(x)).data(), b.forward(Var(x)).data()) < 1e-14);
    for (const char* pe : {"rope_short", "rope_short_long"}) {
      Pair r(small({{"pos_enc", pe}}), small({{"pos_enc", "none"}}));
      REQUIRE(rel_error(r.a.forward(Var(x)).data(), r.b.forward(Var(x)).data()) > 1e-3);
    }
    // With window 0, rope_short_long still rotates the slot branch; rope_short does not.
    Pair w0(small({{"window", 0}, {"pos_enc", "rope_short_long"}}), small({{"window", 0}, {"pos_enc", "rope_short"}}));
    REQUIRE(rel_error(w0.a.forward(Var(x)).data(), w0.b.forward(Var(x)).data()) > 1e-3);
  }
}

TEST_CASE("slot_feature_map swish is silu on the slots' q and k, written out by hand; the window reads them raw",
          "[nha][cpu]") {
  ParameterScope f64(Device::cpu(), DType::f64);
  NoGradGuard no_grad;
  NhaMixer layer(nha_config_from_json(small({{"slot_feature_map", "swish"}})), mixer_context(8));
  layer.initialize(1);
  randomize_parameters(layer, 2);
  std::map<std::string, Var> w;
  for (const auto& p : layer.named_parameters()) w[p.name] = p.var;
  const int64_t B = 2, T = 9, Hq = 4, Hkv = 2, D = 4, Dv = 2, M = 3;
  const Var x(random_tensor({B, T, 8}, 50));
  // nha.md 7.2 with the 2026 feature map (8.5): the slot branch reads silu(q), silu(k).
  const Var q = reshape(linear(x, w["q_proj.weight"]), {B, T, Hq, D});
  const Var k = reshape(linear(x, w["k_proj.weight"]), {B, T, Hkv, D});
  const Var v = silu(reshape(linear(x, w["v_proj.weight"]), {B, T, Hkv, Dv}));
  const Var g = mul_scalar(logsigmoid(reshape(linear(x, w["f_proj.weight"]), {B, T, Hkv, M})), 1.0 / 8.0);
  const Var s = add_scalar(neg(exp(g)), 1.0);
  NhaParams p;
  p.window = p.shift = 3;
  p.scale = 0.5;
  const Var o = nha(silu(q), silu(k), v, s, g, Var(), Var(), Var(), p, q, k).o;
  const Var y = linear(rmsnorm(silu(reshape(o, {B, T, Hq * Dv})), w["g_norm.weight"], 1e-5), w["o_proj.weight"]);
  REQUIRE(rel_error(layer.forward(x).data(), y.data()) < 1e-14);
  // Not the identity map, and not silu on the window side as well.
  NhaMixer identity(nha_config_from_json(small(json::object())), mixer_context(8));
  identity.initialize(1);
  randomize_parameters(identity, 2);
  REQUIRE(rel_error(identity.forward(x).data(), y.data()) > 1e-3);
  const Var both = nha(silu(q), silu(k), v, s, g, Var(), Var(), Var(), p).o;
  REQUIRE(rel_error(both.data(), o.data()) > 1e-3);
}

TEST_CASE("NHA emits omega_L per token and head: 1 without a window, M / (M + sum e^b) with an empty memory",
          "[nha][cpu]") {
  ParameterScope f64(Device::cpu(), DType::f64);
  NoGradGuard no_grad;
  Tensor x = random_tensor({2, 7, 8}, 40);
  NhaMixer off(nha_config_from_json(small(json::object())), mixer_context(8));
  off.initialize(1);
  off.forward(Var(x));
  REQUIRE_FALSE(off.long_ratio().defined());
  NhaMixer w0(nha_config_from_json(small({{"window", 0}, {"emit_long_ratio", true}})), mixer_context(8));
  w0.initialize(1);
  w0.forward(Var(x));
  REQUIRE(w0.long_ratio().shape() == Shape({2, 7, 4}));
  for (double v : w0.long_ratio().to_double_vector()) REQUIRE(v == Approx(1.0).epsilon(1e-14));
  NhaMixer full(nha_config_from_json(small({{"window", -1}, {"emit_long_ratio", true}})), mixer_context(8));
  full.initialize(1);
  randomize_parameters(full, 2);
  full.forward(Var(x));
  const std::vector<double> om = full.long_ratio().to_double_vector();
  // Query 0 sees the M = 3 null slots and itself: omega = 3 / (3 + e^b) < 1, and omega decreases as
  // the window grows only on average; every value lies in (0, 1).
  for (double v : om) {
    REQUIRE(v > 0.0);
    REQUIRE(v < 1.0);
  }
  NhaMixer wf(nha_config_from_json(small({{"fusion", "weighted_fixed"}, {"fusion_weight", 0.3}, {"emit_long_ratio", true}})),
              mixer_context(8));
  wf.initialize(1);
  wf.forward(Var(x));
  for (double v : wf.long_ratio().to_double_vector()) REQUIRE(v == 0.3);
}

TEST_CASE("NHA has the official parameter names and the per-layer count of the 340M model", "[nha][cpu]") {
  // config.md 10.2: d 1024, 16 heads of 64, 64 slots: 4 d^2 + d 16 64 + d = 5,243,904 per mixer.
  NhaMixer layer(nha_config_from_json(resolved({{"slots", 64}, {"window", 32}}, 1024)), mixer_context(1024));
  REQUIRE(layer.num_parameters() == 5243904);
  std::vector<std::string> names;
  for (const auto& p : layer.named_parameters()) names.push_back(p.name);
  REQUIRE(names == std::vector<std::string>{"g_norm.weight", "q_proj.weight", "k_proj.weight", "v_proj.weight",
                                            "f_proj.weight", "o_proj.weight"});
  NhaMixer abl(nha_config_from_json(small({{"slots", 0}, {"fusion", "weighted_learned"}, {"pos_enc", "learned_short"}})),
               mixer_context(8));
  names.clear();
  for (const auto& p : abl.named_parameters()) names.push_back(p.name + " " + shape_str(p.var.shape()));
  REQUIRE(names == std::vector<std::string>{"pos_bias (4, 3)", "g_norm.weight (8,)", "q_proj.weight (16, 8)",
                                            "k_proj.weight (8, 8)", "v_proj.weight (4, 8)", "fusion_proj.weight (4, 8)",
                                            "fusion_proj.bias (4,)", "o_proj.weight (8, 8)"});
}

TEST_CASE("a model of NHA and attention layers decodes token by token to the parallel forward's logits",
          "[nha][model][cpu][decode]") {
  const json attention = resolve_test_mixer("attention", {{"num_heads", 2}, {"head_dim", 4}, {"window", 4}}, {});
  require_decode_matches_forward(small_decode_lm({
      {small(json::object()), "swiglu", 12},
      {attention, "swiglu", 12},
      {small({{"window", -1}}), "swiglu", 12},
      {small({{"token_shift", false}, {"use_short_conv", true}}), "none", 0}}));
}

TEST_CASE("the nha config derives heads, dims and scale and rejects what does not fit", "[nha][config]") {
  const json r = resolved({{"num_heads", 4}, {"num_kv_heads", nullptr}, {"head_dim", 32}, {"value_head_dim", nullptr}}, 128);
  REQUIRE(r["num_kv_heads"] == 4);
  REQUIRE(r["value_head_dim"] == 32);
  REQUIRE(r["scale"].get<double>() == Approx(1.0 / std::sqrt(32.0)).epsilon(1e-15));
  REQUIRE(r["window"] == 32);
  REQUIRE(r["slots"] == 64);
  REQUIRE_THAT(error_of({{"num_heads", 4}, {"num_kv_heads", 3}}, 64), Catch::Contains("num_kv_heads") && Catch::Contains("(4)"));
  REQUIRE_THAT(error_of({{"slots", 0}, {"window", 0}}, 64), Catch::Contains("window") && Catch::Contains("slots = 0"));
  REQUIRE_THAT(error_of({{"window", -2}}, 64), Catch::Contains("window"));
  REQUIRE_THAT(error_of({{"head_dim", 7}}, 64), Catch::Contains("head_dim") && Catch::Contains("even"));
  REQUIRE(error_of({{"head_dim", 7}, {"pos_enc", "none"}}, 64).empty());
  REQUIRE_THAT(error_of({{"fusion", "sum"}}, 64), Catch::Contains("fusion"));
  REQUIRE_THAT(error_of({{"fusion_weight", 1.5}}, 64), Catch::Contains("fusion_weight"));
  REQUIRE(error_of({{"slot_feature_map", "swish"}}, 64).empty());
  REQUIRE_THAT(error_of({{"slot_feature_map", "swish"}, {"pos_enc", "rope_short_long"}}, 64),
               Catch::Contains("slot_feature_map") && Catch::Contains("rope_short_long"));
  REQUIRE_THAT(error_of({{"slot_feature_map", "relu"}}, 64), Catch::Contains("slot_feature_map"));
  REQUIRE_THAT(error_of({{"chunk_size", 48}}, 64), Catch::Contains("chunk_size"));
}
