// The Gated DeltaNet mixer on the CPU: parameter and input gradients (gated_deltanet.md 6.6),
// parameter names, count and initialization (2.1), decoding from a carried state (6.7, 5) at the
// mixer and the model level, and the config rules (7).
#include <catch2/catch.hpp>

#include <cmath>

#include "autograd/gradcheck.h"
#include "compare.h"
#include "core/rng.h"
#include "layers/gated_deltanet/gated_deltanet.h"
#include "layers/gated_deltanet/gated_deltanet_config.h"
#include "layers/mixer_test_util.h"
#include "layers/model/causal_lm.h"
#include "layers/registry.h"

using namespace hyb;
using json = nlohmann::json;

namespace {

// The resolved mixer object (what the config resolver hands the model).
json resolved(const json& written, int64_t d_model, double init_std = 0.02) {
  return resolve_test_mixer("gated_deltanet", written, {.d_model = d_model, .max_seq_len = 64, .init_std = init_std});
}

MixerContext mixer_context(int64_t d_model, int64_t num_layers = 1, const std::string& init = "family") {
  return test_mixer_context({.d_model = d_model, .max_seq_len = 64, .num_layers = num_layers}, init, true);
}

std::string error_of(const json& mixer, int64_t d_model) {
  return config_error([&] { resolved(mixer, d_model); });
}

}  // namespace

TEST_CASE("every Gated DeltaNet parameter and the layer input have gradients matching finite differences",
          "[gated_deltanet][cpu][grad]") {
  // gated_deltanet.md 6.6: T 11, d 8, H 2, HV 2 and 4, K 4, V 3 (expand_v 0.75), W 4.
  const std::vector<std::pair<std::string, json>> variants = {
      {"HV 2", {{"num_heads", 2}, {"head_dim", 4}, {"expand_v", 0.75}}},
      {"HV 4, conv bias, negative eigenvalues",
       {{"num_heads", 2}, {"num_v_heads", 4}, {"head_dim", 4}, {"expand_v", 0.75}, {"conv_bias", true},
        {"allow_neg_eigval", true}}},
      {"no gate, no short conv",
       {{"num_heads", 2}, {"head_dim", 4}, {"expand_v", 0.75}, {"use_gate", false}, {"use_short_conv", false}}},
  };
  require_mixer_gradchecks(variants, 8, 11, [](const json& mixer, int64_t d) -> std::unique_ptr<Mixer> {
    return std::make_unique<GatedDeltaNetMixer>(gated_deltanet_config_from_json(resolved(mixer, d)), mixer_context(d));
  });
}

TEST_CASE("Gated DeltaNet has FLA's parameter names, weight-decay set and the count of gated_deltanet.md 2.1",
          "[gated_deltanet][cpu]") {
  // FLA's layer default at d 2048: H 6, K 256, V 512 -> 25,215,500 parameters.
  GatedDeltaNetMixer layer(gated_deltanet_config_from_json(resolved({}, 2048)), mixer_context(2048));
  REQUIRE(layer.num_parameters() == 25215500);
  std::vector<std::string> names, decayed;
  for (const auto& p : layer.named_parameters()) {
    names.push_back(p.name);
    if (p.decay) decayed.push_back(p.name);
  }
  REQUIRE(names == std::vector<std::string>{"A_log", "dt_bias", "q_conv1d.weight", "k_conv1d.weight", "v_conv1d.weight",
                                            "o_norm.weight", "q_proj.weight", "k_proj.weight", "v_proj.weight",
                                            "a_proj.weight", "b_proj.weight", "g_proj.weight", "o_proj.weight"});
  REQUIRE(decayed == std::vector<std::string>{"q_conv1d.weight", "k_conv1d.weight", "v_conv1d.weight", "q_proj.weight",
                                              "k_proj.weight", "v_proj.weight", "a_proj.weight", "b_proj.weight",
                                              "g_proj.weight", "o_proj.weight"});
}

TEST_CASE("Gated DeltaNet initial values follow gated_deltanet.md 2.1 and config.md 3.8 under both init rules",
          "[gated_deltanet][cpu]") {
  const int64_t d = 96, L = 8;
  auto rms = [](const std::vector<double>& v) {
    double ss = 0;
    for (double x : v) ss += x * x;
    return std::sqrt(ss / double(v.size()));
  };
  for (const char* init : {"family", "gpt2"}) {
    DYNAMIC_SECTION(init) {
      // initializer_range null resolves to the model's init_std (0.03 here).
      GatedDeltaNetMixer layer(gated_deltanet_config_from_json(resolved({{"num_heads", 2}, {"head_dim", 32}}, d, 0.03)),
                               MixerContext{d, L, 0, 64, 0.03, init});
      layer.initialize(4);
      const bool gpt2 = std::string(init) == "gpt2";
      for (const auto& p : layer.named_parameters()) {
        const std::vector<double> v = p.var.data().to_double_vector();
        INFO(p.name);
        if (p.name == "A_log") {
          for (double a : v) REQUIRE(std::exp(a) <= 16.0 * (1 + 1e-12));
        } else if (p.name == "dt_bias") {
          for (double b : v) {
            REQUIRE(std::log1p(std::exp(b)) >= 0.001 * (1 - 1e-9));
            REQUIRE(std::log1p(std::exp(b)) <= 0.1 * (1 + 1e-9));
          }
        } else if (p.name == "o_norm.weight") {
          for (double w : v) REQUIRE(w == 1.0);
        } else {
          // Every Linear and conv weight; the sample rms of n normals has relative spread 1/sqrt(2n).
          const double want = p.name == "o_proj.weight" && gpt2 ? 0.03 / std::sqrt(2.0 * L) : 0.03;
          REQUIRE(rms(v) == Approx(want).epsilon(5.0 / std::sqrt(2.0 * double(v.size()))));
        }
      }
    }
  }
}

TEST_CASE("Gated DeltaNet decoding from the carried state equals the full forward: single steps and prefills of 0, 1, 3, 17",
          "[gated_deltanet][cpu][decode]") {
  ParameterScope f64(Device::cpu(), DType::f64);
  GatedDeltaNetMixer layer(
      gated_deltanet_config_from_json(resolved({{"num_heads", 2}, {"num_v_heads", 4}, {"head_dim", 4}, {"expand_v", 1.5}}, 8)),
      mixer_context(8));
  layer.initialize(7);
  randomize_parameters(layer, 8);
  // Constant size: HV K V state + (2 key_dim + value_dim)(W-1) conv elements (gated_deltanet.md 5).
  const int64_t B = 2, HV = 4, K = 4, V = 6, key_dim = 8, value_dim = 24, W = 4;
  require_mixer_decode_matches_forward(
      layer, {.prefills = {0, 1, 3, 17}, .state_bytes = B * (HV * K * V + (2 * key_dim + value_dim) * (W - 1)) * int64_t(sizeof(double))});
}

TEST_CASE("a model of Gated DeltaNet and attention layers decodes token by token to the parallel forward's logits",
          "[gated_deltanet][model][cpu][decode]") {
  const json attention = resolve_test_mixer("attention", {{"num_heads", 2}, {"head_dim", 4}, {"window", 4}}, {});
  require_decode_matches_forward(small_decode_lm({
      {resolved({{"num_heads", 2}, {"head_dim", 4}}, 8), "swiglu", 12},
      {attention, "swiglu", 12},
      {resolved({{"num_heads", 1}, {"num_v_heads", 2}, {"head_dim", 6}, {"use_gate", false}}, 8), "none", 0}}));
}

TEST_CASE("the gated_deltanet config derives heads, scale and init std and rejects what does not fit", "[gated_deltanet][config]") {
  const json r = resolved({{"num_heads", 6}, {"head_dim", 128}}, 1024, 0.01);
  REQUIRE(r["num_v_heads"] == 6);
  REQUIRE(r["scale"].get<double>() == Approx(1.0 / std::sqrt(128.0)).epsilon(1e-15));
  REQUIRE(r["initializer_range"] == 0.01);
  REQUIRE_THAT(error_of({{"num_heads", 4}, {"num_v_heads", 6}}, 64), Catch::Contains("num_v_heads") && Catch::Contains("(4)"));
  REQUIRE_THAT(error_of({{"head_dim", 5}, {"expand_v", 1.5}}, 64), Catch::Contains("expand_v") && Catch::Contains("(5)"));
  REQUIRE_THAT(error_of({{"chunk_size", 128}}, 64), Catch::Contains("chunk_size") && Catch::Contains("16, 32 or 64"));
  REQUIRE_THAT(error_of({{"A_init_range", {4.0, 2.0}}}, 64), Catch::Contains("A_init_range"));
  REQUIRE_THAT(error_of({{"d_model", 32}}, 64), Catch::Contains("d_model") && Catch::Contains("(64)"));
}
