// The Mamba2 mixer on the CPU: parameter and input gradients (mamba2.md 6.6), parameter names,
// count and initialization (2.1), decoding from a carried state (6.7, 5) at the mixer and the
// model level, and the config rules (7).
#include <catch2/catch.hpp>

#include <cmath>

#include "autograd/gradcheck.h"
#include "compare.h"
#include "core/rng.h"
#include "layers/mamba2/mamba2.h"
#include "layers/mamba2/mamba2_config.h"
#include "layers/mixer_test_util.h"
#include "layers/model/causal_lm.h"
#include "layers/registry.h"

using namespace hyb;
using json = nlohmann::json;

namespace {

// The resolved mixer object (what the config resolver hands the model).
json resolved(const json& written, int64_t d_model, int64_t num_layers = 1) {
  return resolve_test_mixer("mamba2", written, {.d_model = d_model, .max_seq_len = 64, .num_layers = num_layers});
}

MixerContext mixer_context(int64_t d_model, int64_t num_layers = 1, bool has_mlp = true, const std::string& init = "family") {
  return test_mixer_context({.d_model = d_model, .max_seq_len = 64, .num_layers = num_layers}, init, has_mlp);
}

std::string error_of(json mixer, int64_t d_model) {
  return config_error([&] { resolved(mixer, d_model); });
}

}  // namespace

TEST_CASE("every Mamba2 parameter and the layer input have gradients matching finite differences", "[mamba2][cpu][grad]") {
  // mamba2.md 6.6: T 11, d_model 4, expand 2 (d_ssm 8), headdim 4 (H 2), d_state 3, W 4, G 1 and 2.
  const std::vector<std::pair<std::string, json>> variants = {
      {"G1", {{"headdim", 4}, {"d_state", 3}}},
      {"G2", {{"headdim", 4}, {"d_state", 3}, {"ngroups", 2}}},
      {"G2 norm_before_gate bias", {{"headdim", 4}, {"d_state", 3}, {"ngroups", 2}, {"norm_before_gate", true}, {"bias", true}}},
      {"no rmsnorm, D per channel, clamp",
       {{"headdim", 4}, {"d_state", 3}, {"rmsnorm", false}, {"D_has_hdim", true}, {"dt_limit", {0.3, 2.0}}}},
  };
  require_mixer_gradchecks(variants, 4, 11, [](const json& mixer, int64_t d) -> std::unique_ptr<Mixer> {
    return std::make_unique<Mamba2Mixer>(mamba2_config_from_json(resolved(mixer, d)), mixer_context(d));
  });
}

TEST_CASE("Mamba2 has mamba_ssm's parameter names, weight-decay set and the count of mamba2.md 2.1", "[mamba2][cpu]") {
  // Meta's 100M Mamba layer: d_model 1024, d_ssm 2048, headdim 128 (H 16), d_state 128, G 1.
  Mamba2Mixer layer(mamba2_config_from_json(resolved({{"headdim", 128}}, 1024)), mixer_context(1024));
  REQUIRE(layer.num_parameters() == 6583600);
  std::vector<std::string> names, decayed;
  for (const auto& p : layer.named_parameters()) {
    names.push_back(p.name);
    if (p.decay) decayed.push_back(p.name);
  }
  REQUIRE(names == std::vector<std::string>{"conv1d.weight", "conv1d.bias", "dt_bias", "A_log", "D", "norm.weight",
                                            "in_proj.weight", "out_proj.weight"});
  REQUIRE(decayed == std::vector<std::string>{"conv1d.weight", "in_proj.weight", "out_proj.weight"});
}

TEST_CASE("Mamba2 initial values follow mamba2.md 2.1: PyTorch bounds, out_proj rescaled by sqrt(n_res L), dt in [0.001, 0.1]",
          "[mamba2][cpu]") {
  const int64_t d = 64, L = 6;
  for (bool has_mlp : {true, false}) {
    DYNAMIC_SECTION("has_mlp " << has_mlp) {
      Mamba2Mixer layer(mamba2_config_from_json(resolved({{"headdim", 16}, {"d_state", 8}}, d, L)),
                        mixer_context(d, L, has_mlp));
      layer.initialize(5);
      const double n_res = has_mlp ? 2.0 : 1.0;
      auto bound = [&](const std::string& name) {
        for (const auto& p : layer.named_parameters())
          if (p.name == name) {
            double m = 0;
            for (double v : p.var.data().to_double_vector()) m = std::max(m, std::abs(v));
            return m;
          }
        return -1.0;
      };
      auto values = [&](const std::string& name) {
        for (const auto& p : layer.named_parameters())
          if (p.name == name) return p.var.data().to_double_vector();
        return std::vector<double>();
      };
      // The largest |w| of a uniform over thousands of draws is within 1% of the bound.
      REQUIRE(bound("in_proj.weight") <= 1.0 / std::sqrt(64.0));
      REQUIRE(bound("in_proj.weight") > 0.99 / std::sqrt(64.0));
      const double out = 1.0 / std::sqrt(128.0) / std::sqrt(n_res * double(L));
      REQUIRE(bound("out_proj.weight") <= out);
      REQUIRE(bound("out_proj.weight") > 0.99 * out);
      REQUIRE(bound("conv1d.weight") <= 0.5);
      REQUIRE(bound("conv1d.weight") > 0.49);
      for (double b : values("dt_bias")) {
        const double dt = std::log1p(std::exp(b));
        REQUIRE(dt >= 0.001 * (1 - 1e-6));
        REQUIRE(dt <= 0.1 * (1 + 1e-6));
      }
      for (double a : values("A_log")) {
        REQUIRE(std::exp(a) >= 1.0 * (1 - 1e-6));
        REQUIRE(std::exp(a) <= 16.0 * (1 + 1e-6));
      }
      for (double v : values("D")) REQUIRE(v == 1.0);
      for (double v : values("norm.weight")) REQUIRE(v == 1.0);
    }
  }
}

TEST_CASE("under init gpt2 the Mamba2 projections are N(0, init_std) and N(0, init_std / sqrt(2 L))", "[mamba2][cpu]") {
  const int64_t d = 64, L = 8;
  Mamba2Mixer layer(mamba2_config_from_json(resolved({{"headdim", 16}, {"d_state", 8}}, d, L)),
                    mixer_context(d, L, true, "gpt2"));
  layer.initialize(6);
  for (const auto& p : layer.named_parameters()) {
    if (p.name != "in_proj.weight" && p.name != "out_proj.weight") continue;
    double ss = 0;
    const std::vector<double> v = p.var.data().to_double_vector();
    for (double x : v) ss += x * x;
    const double want = p.name == "in_proj.weight" ? 0.02 : 0.02 / std::sqrt(2.0 * L);
    // The sample rms of n normals has relative spread 1/sqrt(2n).
    REQUIRE(std::sqrt(ss / double(v.size())) == Approx(want).epsilon(5.0 / std::sqrt(2.0 * double(v.size()))));
  }
}

TEST_CASE("Mamba2 decoding from the carried state equals the full forward: single steps and prefills of 0, 1, 3, W-1, 17",
          "[mamba2][cpu][decode]") {
  ParameterScope f64(Device::cpu(), DType::f64);
  Mamba2Mixer layer(mamba2_config_from_json(resolved({{"headdim", 4}, {"d_state", 5}, {"ngroups", 2}}, 8)),
                    mixer_context(8));
  layer.initialize(7);
  randomize_parameters(layer, 8);
  // Constant size: (W-1) Cc conv inputs and H N P state elements per sequence (mamba2.md 5).
  const int64_t B = 2, W = 4, d_ssm = 16, G = 2, N = 5, H = 4, P = 4;
  require_mixer_decode_matches_forward(
      layer, {.prefills = {0, 1, 3, 3, 17}, .state_bytes = B * ((W - 1) * (d_ssm + 2 * G * N) + H * N * P) * int64_t(sizeof(double))});
}

TEST_CASE("a model of Mamba2 and attention layers decodes token by token to the parallel forward's logits",
          "[mamba2][model][cpu][decode]") {
  const json attention = resolve_test_mixer("attention", {{"num_heads", 2}, {"head_dim", 4}}, {});
  require_decode_matches_forward(small_decode_lm({
      {resolved({{"headdim", 4}, {"d_state", 3}}, 8, 3), "swiglu", 12},
      {attention, "swiglu", 12},
      {resolved({{"headdim", 8}, {"d_state", 4}, {"ngroups", 2}}, 8, 3), "none", 0}}));
}

TEST_CASE("the mamba2 config resolves d_ssm and rejects widths, groups, clamps and chunks that do not fit", "[mamba2][config]") {
  const json r = resolved({{"headdim", 32}}, 48);
  REQUIRE(r["d_model"] == 48);
  REQUIRE(r["d_ssm"] == 96);
  REQUIRE(r["dt_limit"] == json::array({0.0, nullptr}));
  REQUIRE_THAT(error_of({{"headdim", 64}}, 48), Catch::Contains("headdim") && Catch::Contains("d_ssm = expand * d_model (96)"));
  REQUIRE_THAT(error_of({{"d_ssm", 100}, {"headdim", 32}}, 48), Catch::Contains("d_ssm") && Catch::Contains("multiple of headdim (32)"));
  REQUIRE_THAT(error_of({{"headdim", 32}, {"ngroups", 2}}, 48), Catch::Contains("ngroups") && Catch::Contains("(3)"));
  REQUIRE_THAT(error_of({{"headdim", 32}, {"dt_limit", {1.0, 0.5}}}, 48), Catch::Contains("dt_limit"));
  REQUIRE_THAT(error_of({{"headdim", 32}, {"chunk_size", 100}}, 48), Catch::Contains("chunk_size") && Catch::Contains("64, 128 or 256"));
  REQUIRE_THAT(error_of({{"headdim", 32}, {"d_model", 64}}, 48), Catch::Contains("d_model") && Catch::Contains("(48)"));
  REQUIRE_THAT(error_of({{"headdim", 32}, {"expand", 1.01}}, 48), Catch::Contains("expand"));
  REQUIRE_THAT(error_of({{"headdim", 32}, {"d_stat", 4}}, 48), Catch::Contains("d_stat: unknown key"));
}
